// Encoding and decoding: added tokens first, then normalizer -> pre-tokenizer -> BPE per text piece,
// then the post-processor's special tokens (TemplateProcessing, e.g. BOS). Decoding runs the decoder.
#include <algorithm>

#include <nlohmann/json.hpp>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/decoder.h"
#include "tokenizer/text_steps.h"
#include "tokenizer/tokenizer.h"

namespace tinkerd::tokenizer {

using nlohmann::json;

// The ids of a TemplateProcessing "single" template around Sequence A.
static Result<void> read_template(const json & pp, std::vector<int32_t> & prefix, std::vector<int32_t> & suffix) {
    bool after = false;
    const json specials = pp.value("special_tokens", json::object());
    for (const json & item : pp.value("single", json::array())) {
        if (item.contains("Sequence")) {
            after = true;
            continue;
        }
        const std::string name = item.contains("SpecialToken") ? item["SpecialToken"].value("id", "") : "";
        if (name.empty() || !specials.contains(name) || !specials[name].contains("ids")) {
            return invalid_argument("TemplateProcessing item " + item.dump() + " names no known special token");
        }
        for (const json & id : specials[name]["ids"]) {
            (after ? suffix : prefix).push_back(id.get<int32_t>());
        }
    }
    return {};
}

static Result<void> read_post_processor(const json & pp, std::vector<int32_t> & prefix, std::vector<int32_t> & suffix) {
    const std::string type = pp.value("type", "");
    if (type == "Sequence") {
        for (const json & sub : pp.value("processors", json::array())) {
            TRY_STATUS(read_post_processor(sub, prefix, suffix));
        }
        return {};
    }
    if (type == "ByteLevel") {
        return {};  // only adjusts offsets
    }
    if (type == "TemplateProcessing") {
        return read_template(pp, prefix, suffix);
    }
    if (type == "RobertaProcessing" || type == "BertProcessing") {
        const json cls = pp.value("cls", json()), sep = pp.value("sep", json());
        if (!cls.is_array() || cls.size() != 2 || !sep.is_array() || sep.size() != 2) {
            return invalid_argument(type + " needs cls and sep as [token, id]");
        }
        prefix.push_back(cls[1].get<int32_t>());
        suffix.push_back(sep[1].get<int32_t>());
        return {};
    }
    return unsupported("post-processor type '" + type + "' is not supported");
}

// tokenizer_config.json's add_bos_token / add_eos_token, when given, override the post-processor.
static void apply_override(const json & config, const char * key, int32_t id, bool front, std::vector<int32_t> & ids) {
    if (!config.contains(key) || !config[key].is_boolean() || id < 0) {
        return;
    }
    ids.erase(std::remove(ids.begin(), ids.end(), id), ids.end());
    if (config[key].get<bool>()) {
        ids.insert(front ? ids.begin() : ids.end(), id);
    }
}

Result<void> Tokenizer::load_post_processor(const json & pp, const json & config) {
    if (!pp.is_null()) {
        TRY_STATUS(read_post_processor(pp, prefix_ids_, suffix_ids_));
    }
    apply_override(config, "add_bos_token", bos_id_, true, prefix_ids_);
    apply_override(config, "add_eos_token", eos_ids_.empty() ? -1 : eos_ids_.front(), false, suffix_ids_);
    return {};
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
    std::vector<int32_t> ids;
    if (add_special_tokens) {
        ids = prefix_ids_;
    }
    std::vector<std::string> words;
    std::string segment;
    for (const AddedTokens::Piece & p : added_->split(text)) {
        if (p.id >= 0) {
            ids.push_back(p.id);
            continue;
        }
        segment.assign(text.substr(p.begin, p.end - p.begin));
        normalizer_->apply(segment);
        words.clear();
        pre_tokenizer_->apply(segment, p.begin == 0, words);
        for (const std::string & w : words) {
            bpe_->encode_word(w, ids);
        }
    }
    if (add_special_tokens) {
        ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
    }
    return ids;
}

std::string Tokenizer::decode(const std::vector<int32_t> & ids, bool skip_special_tokens) const {
    std::vector<std::string_view> tokens;
    tokens.reserve(ids.size());
    for (const int32_t id : ids) {
        if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || (skip_special_tokens && special_[id])) {
            continue;
        }
        tokens.emplace_back(id_to_token_[id]);
    }
    return decoder_->decode(tokens);
}

void Tokenizer::token_bytes(int32_t id, bool first, std::string & out) const {
    decoder_->append_token(id_to_token_[id], first, out);
}

std::string Tokenizer::token_text(int32_t id) const {
    std::string out;
    if (id >= 0 && static_cast<size_t>(id) < id_to_token_.size()) {
        token_bytes(id, false, out);
    }
    return out;
}

int32_t Tokenizer::token_to_id(std::string_view token) const {
    if (token.empty()) {
        return -1;
    }
    for (const AddedToken & a : added_->tokens()) {
        if (a.content == token) {
            return a.id;
        }
    }
    const auto it = bpe_->vocab().find(token);
    return it == bpe_->vocab().end() ? -1 : it->second;
}

std::string Tokenizer::id_to_token(int32_t id) const {
    return id >= 0 && static_cast<size_t>(id) < id_to_token_.size() ? id_to_token_[id] : std::string();
}

bool Tokenizer::is_special(int32_t id) const {
    return id >= 0 && static_cast<size_t>(id) < special_.size() && special_[id];
}

}  // namespace tinkerd::tokenizer
