// BPE encoding of one word: split into characters (unknown ones -> <0xNN> byte tokens or unk), then
// repeatedly merge the lowest-ranked adjacent pair (leftmost on ties) with a heap over a linked list.
#include "tokenizer/bpe.h"

#include <cstdio>
#include <queue>

#include "tokenizer/unicode.h"

namespace tinkerd::tokenizer {

using nlohmann::json;

static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// One merge rule as its two halves: "a b" or ["a", "b"].
static bool split_merge(const json & m, std::string & a, std::string & b) {
    if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const size_t sp = s.find(' ', 1);
        if (sp == std::string::npos) {
            return false;
        }
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
        return true;
    }
    if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        a = m[0].get<std::string>();
        b = m[1].get<std::string>();
        return true;
    }
    return false;
}

Result<void> BpeModel::load_merges(const json & merges) {
    merges_.reserve(merges.size());
    std::string a, b;
    int32_t rank = 0;
    for (const json & m : merges) {
        if (!split_merge(m, a, b)) {
            return invalid_argument("malformed merge rule " + m.dump());
        }
        const auto ia = vocab_.find(a), ib = vocab_.find(b), iab = vocab_.find(a + b);
        if (ia == vocab_.end() || ib == vocab_.end() || iab == vocab_.end()) {
            return invalid_argument("merge rule " + m.dump() + " uses a token missing from the vocab");
        }
        merges_.try_emplace(pair_key(ia->second, ib->second), Merge{rank++, iab->second});
    }
    return {};
}

static Result<void> check_model_options(const json & model) {
    const std::string type = model.value("type", "BPE");
    if (type != "BPE") {
        return unsupported("tokenizer model type '" + type + "' is not supported (only BPE)");
    }
    for (const char * key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
        if (model.contains(key) && model[key].is_string() && !model[key].get<std::string>().empty()) {
            return unsupported(std::string("BPE option '") + key + "' is not supported");
        }
    }
    if (!model.contains("vocab") || !model["vocab"].is_object()) {
        return invalid_argument("model.vocab must be an object of token -> id");
    }
    if (!model.contains("merges") || !model["merges"].is_array()) {
        return invalid_argument("model.merges must be an array");
    }
    return {};
}

Result<std::unique_ptr<BpeModel>> BpeModel::from_json(const json & model) {
    if (!model.is_object()) {
        return invalid_argument("'model' must be an object");
    }
    TRY_STATUS(check_model_options(model));
    auto bpe = std::make_unique<BpeModel>();
    const json & vocab = model["vocab"];
    bpe->vocab_.reserve(vocab.size());
    for (const auto & [tok, id] : vocab.items()) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
            return invalid_argument("vocab id of '" + tok + "' is not a valid id");
        }
        bpe->vocab_.emplace(tok, id.get<int32_t>());
        size_t len = 0;
        const uint32_t cp = tok.empty() ? 0 : utf8_decode(tok, 0, len);
        if (!tok.empty() && len == tok.size()) {
            bpe->char_ids_.emplace(cp, id.get<int32_t>());
        }
    }
    TRY_STATUS(bpe->load_merges(model["merges"]));
    bpe->byte_fallback_ = model.value("byte_fallback", false);
    bpe->fuse_unk_ = model.value("fuse_unk", false);
    bpe->ignore_merges_ = model.value("ignore_merges", false);
    if (model.contains("unk_token") && model["unk_token"].is_string()) {
        const auto it = bpe->vocab_.find(model["unk_token"].get<std::string>());
        bpe->unk_id_ = it == bpe->vocab_.end() ? -1 : it->second;
    }
    for (int b = 0; b < 256; ++b) {
        char name[8];
        std::snprintf(name, sizeof(name), "<0x%02X>", b);
        const auto it = bpe->vocab_.find(std::string_view(name));
        bpe->byte_ids_[b] = it == bpe->vocab_.end() ? -1 : it->second;
    }
    return bpe;
}

bool BpeModel::has_byte_ids(std::string_view bytes) const {
    for (const char c : bytes) {
        if (byte_ids_[static_cast<unsigned char>(c)] < 0) {
            return false;
        }
    }
    return true;
}

// The ids of a character missing from the vocab: its <0xNN> byte tokens, else unk (or nothing).
void BpeModel::initial_symbols(std::string_view word, std::vector<int32_t> & ids) const {
    bool prev_unk = false;
    for (size_t pos = 0; pos < word.size();) {
        size_t len = 1;
        const uint32_t cp = utf8_decode(word, pos, len);
        const auto it = char_ids_.find(cp);
        const bool valid = !(cp == 0xFFFD && len == 1);
        if (it != char_ids_.end() && valid) {
            ids.push_back(it->second);
            prev_unk = false;
        } else if (byte_fallback_ && has_byte_ids(word.substr(pos, len))) {
            for (size_t i = pos; i < pos + len; ++i) {
                ids.push_back(byte_ids_[static_cast<unsigned char>(word[i])]);
            }
            prev_unk = false;
        } else if (unk_id_ >= 0 && !(fuse_unk_ && prev_unk)) {
            ids.push_back(unk_id_);
            prev_unk = true;
        }
        pos += len;
    }
}

const BpeModel::Merge * BpeModel::find_merge(int32_t a, int32_t b) const {
    const auto it = merges_.find(pair_key(a, b));
    return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::merge(std::vector<int32_t> & ids) const {
    const int n = static_cast<int>(ids.size());
    if (n < 2) {
        return;
    }
    struct Cand {
        int32_t rank, pos, left, right;
        bool operator>(const Cand & o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::vector<int> next(n), prev(n);
    std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
    for (int i = 0; i < n; ++i) {
        next[i] = i + 1 < n ? i + 1 : -1;
        prev[i] = i - 1;
        if (i + 1 < n) {
            if (const Merge * m = find_merge(ids[i], ids[i + 1])) {
                heap.push({m->rank, i, ids[i], ids[i + 1]});
            }
        }
    }
    std::vector<bool> alive(n, true);
    while (!heap.empty()) {
        const Cand c = heap.top();
        heap.pop();
        const int r = alive[c.pos] ? next[c.pos] : -1;
        if (r < 0 || ids[c.pos] != c.left || ids[r] != c.right) {
            continue;  // stale: one side was merged since
        }
        ids[c.pos] = find_merge(c.left, c.right)->id;
        alive[r] = false;
        next[c.pos] = next[r];
        if (next[r] >= 0) {
            prev[next[r]] = c.pos;
        }
        if (const int p = prev[c.pos]; p >= 0) {
            if (const Merge * m = find_merge(ids[p], ids[c.pos])) {
                heap.push({m->rank, p, ids[p], ids[c.pos]});
            }
        }
        if (const int q = next[c.pos]; q >= 0) {
            if (const Merge * m = find_merge(ids[c.pos], ids[q])) {
                heap.push({m->rank, c.pos, ids[c.pos], ids[q]});
            }
        }
    }
    size_t w = 0;
    for (int i = 0; i < n; ++i) {
        if (alive[i]) {
            ids[w++] = ids[i];
        }
    }
    ids.resize(w);
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t> & out) const {
    const bool cacheable = word.size() <= MAX_CACHED_WORD;
    if (cacheable) {
        std::lock_guard<std::mutex> lock(cache_mu_);
        if (const auto it = cache_.find(word); it != cache_.end()) {
            out.insert(out.end(), it->second.begin(), it->second.end());
            return;
        }
    }
    std::vector<int32_t> ids;
    if (const auto it = ignore_merges_ ? vocab_.find(word) : vocab_.end(); it != vocab_.end()) {
        ids.push_back(it->second);
    } else {
        initial_symbols(word, ids);
        merge(ids);
    }
    out.insert(out.end(), ids.begin(), ids.end());
    if (cacheable) {
        std::lock_guard<std::mutex> lock(cache_mu_);
        if (cache_.size() >= MAX_CACHE_ENTRIES) {
            cache_.clear();
        }
        cache_.emplace(std::string(word), std::move(ids));
    }
}

}  // namespace tinkerd::tokenizer
