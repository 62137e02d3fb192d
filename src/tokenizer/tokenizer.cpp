// Tokenizer loading: tokenizer.json (model, normalizer, pre-tokenizer, post-processor, decoder, added
// tokens) and tokenizer_config.json (extra added/special tokens, bos/eos names, add_bos/eos_token).
#include "tokenizer/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/json_depth.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/decoder.h"
#include "tokenizer/text_steps.h"

namespace tinkerd::tokenizer {

using nlohmann::json;

namespace {

// The file's text, or "" with found=false when it does not exist.
Result<std::string> read_file(const std::filesystem::path & path, bool & found) {
    std::error_code ec;
    found = std::filesystem::is_regular_file(path, ec);
    if (!found) {
        return std::string();
    }
    std::ifstream in(path, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    if (!in.good() && !in.eof()) {
        return internal_error("cannot read " + path.string());
    }
    return ss.str();
}

// A token name in tokenizer_config.json: "<s>" or {"content": "<s>", ...}; "" when absent.
std::string token_name(const json & j) {
    if (j.is_string()) {
        return j.get<std::string>();
    }
    if (j.is_object() && j.contains("content") && j["content"].is_string()) {
        return j["content"].get<std::string>();
    }
    return "";
}

Result<json> parse_json(const std::string & text, const std::string & what) {
    TRY_STATUS(check_json_depth(text, what));
    json j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
        return invalid_argument(what + " is not a valid JSON object");
    }
    return j;
}

AddedToken added_from_json(const json & a, int32_t id) {
    AddedToken t;
    t.id = id;
    t.content = a.value("content", "");
    t.special = a.value("special", false);
    t.lstrip = a.value("lstrip", false);
    t.rstrip = a.value("rstrip", false);
    t.single_word = a.value("single_word", false);
    t.normalized = a.value("normalized", !t.special);
    return t;
}

Error with_context(const Error & e, const std::string & name) {
    return {e.kind, name + ": " + e.message};
}

}  // namespace

Tokenizer::Tokenizer() : added_(std::make_unique<AddedTokens>()) {}
Tokenizer::~Tokenizer() = default;

Result<std::unique_ptr<Tokenizer>> Tokenizer::load(const std::string & model_dir) {
    const std::filesystem::path dir(model_dir);
    bool found = false;
    auto tok_text = read_file(dir / "tokenizer.json", found);
    if (!tok_text.ok()) {
        return tok_text.error();
    }
    if (!found) {
        return not_found("tokenizer file " + (dir / "tokenizer.json").string() + " does not exist");
    }
    auto config_text = read_file(dir / "tokenizer_config.json", found);
    auto gen_text = read_file(dir / "generation_config.json", found);
    if (!config_text.ok() || !gen_text.ok()) {
        return internal_error("cannot read the tokenizer config files in " + model_dir);
    }
    std::unique_ptr<Tokenizer> tok(new Tokenizer());
    tok->generation_config_ = gen_text.value();
    const Result<void> r = tok->init(tok_text.value(), config_text.value());
    if (!r.ok()) {
        return with_context(r.error(), (dir / "tokenizer.json").string());
    }
    return tok;
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_json_text(const std::string & tokenizer_json,
                                                             const std::string & config_json,
                                                             const std::string & name) {
    std::unique_ptr<Tokenizer> tok(new Tokenizer());
    const Result<void> r = tok->init(tokenizer_json, config_json);
    if (!r.ok()) {
        return with_context(r.error(), name);
    }
    return tok;
}

Result<void> Tokenizer::init(const std::string & tokenizer_json, const std::string & config_json) {
    try {
        return init_fields(tokenizer_json, config_json);
    } catch (const json::exception & e) {  // e.g. {"model": {"type": 4}}: value("type", "BPE") throws
        return invalid_argument(std::string("a field has the wrong JSON type: ") + e.what());
    }
}

Result<void> Tokenizer::init_fields(const std::string & tokenizer_json, const std::string & config_json) {
    auto tj = parse_json(tokenizer_json, "tokenizer.json");
    if (!tj.ok()) {
        return tj.error();
    }
    json config = json::object();
    if (!config_json.empty()) {
        auto cj = parse_json(config_json, "tokenizer_config.json");
        if (!cj.ok()) {
            return cj.error();
        }
        config = std::move(cj.value());
    }
    const json & t = tj.value();
    auto bpe = BpeModel::from_json(t.contains("model") ? t["model"] : json());
    auto norm = Normalizer::from_json(t.value("normalizer", json()));
    auto pre = PreTokenizer::from_json(t.value("pre_tokenizer", json()));
    auto dec = Decoder::from_json(t.value("decoder", json()));
    for (const Error * e : {bpe.ok() ? nullptr : &bpe.error(), norm.ok() ? nullptr : &norm.error(),
                            pre.ok() ? nullptr : &pre.error(), dec.ok() ? nullptr : &dec.error()}) {
        if (e != nullptr) {
            return *e;
        }
    }
    bpe_ = std::move(bpe.value());
    normalizer_ = std::make_unique<Normalizer>(std::move(norm.value()));
    pre_tokenizer_ = std::make_unique<PreTokenizer>(std::move(pre.value()));
    decoder_ = std::make_unique<Decoder>(std::move(dec.value()));
    TRY_STATUS(load_added_tokens(t, config));
    build_id_table();
    load_special_ids(config);
    return load_post_processor(t.value("post_processor", json()), config);
}

Result<void> Tokenizer::load_added_tokens(const json & t, const json & config) {
    for (const json & a : t.value("added_tokens", json::array())) {
        if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || a["id"].get<int64_t>() < 0) {
            return invalid_argument("malformed added_tokens entry " + a.dump());
        }
        added_->add(added_from_json(a, a["id"].get<int32_t>()));
    }
    const json decoder_map = config.value("added_tokens_decoder", json::object());
    for (const auto & [key, a] : decoder_map.items()) {
        const int64_t id = std::strtoll(key.c_str(), nullptr, 10);
        if (a.is_object() && id >= 0 && id <= INT32_MAX) {
            added_->add(added_from_json(a, static_cast<int32_t>(id)));
        }
    }
    // Special tokens named only in the config (and present in the vocab) are matched as special too.
    std::vector<std::string> names;
    for (const char * key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
        names.push_back(token_name(config.value(key, json())));
    }
    for (const json & n : config.value("additional_special_tokens", json::array())) {
        names.push_back(token_name(n));
    }
    for (const std::string & n : names) {
        const auto it = bpe_->vocab().find(n);
        bool known = false;
        for (const AddedToken & a : added_->tokens()) {
            known = known || a.content == n;
        }
        if (!n.empty() && !known && it != bpe_->vocab().end()) {
            added_->add(AddedToken{it->second, n, true});
        }
    }
    added_->index();
    return {};
}

void Tokenizer::build_id_table() {
    size_t n = 0;
    for (const auto & [tok, id] : bpe_->vocab()) {
        n = std::max(n, static_cast<size_t>(id) + 1);
    }
    for (const AddedToken & a : added_->tokens()) {
        n = std::max(n, static_cast<size_t>(a.id) + 1);
    }
    id_to_token_.assign(n, "");
    special_.assign(n, false);
    for (const auto & [tok, id] : bpe_->vocab()) {
        id_to_token_[id] = tok;
    }
    for (const AddedToken & a : added_->tokens()) {
        id_to_token_[a.id] = a.content;
        special_[a.id] = a.special;
    }
}

void Tokenizer::load_special_ids(const json & config) {
    bos_id_ = token_to_id(token_name(config.value("bos_token", json())));
    const int32_t eos = token_to_id(token_name(config.value("eos_token", json())));
    if (eos >= 0) {
        eos_ids_.push_back(eos);
    }
    const json gen = json::parse(generation_config_, nullptr, false);
    if (!gen.is_object()) {
        return;
    }
    const json ids = gen.value("eos_token_id", json());
    for (const json & id : ids.is_array() ? ids : json::array({ids})) {
        if (id.is_number_integer() &&
            std::find(eos_ids_.begin(), eos_ids_.end(), id.get<int32_t>()) == eos_ids_.end()) {
            eos_ids_.push_back(id.get<int32_t>());
        }
    }
    if (bos_id_ < 0 && gen.contains("bos_token_id") && gen["bos_token_id"].is_number_integer()) {
        bos_id_ = gen["bos_token_id"].get<int32_t>();
    }
}

}  // namespace tinkerd::tokenizer
