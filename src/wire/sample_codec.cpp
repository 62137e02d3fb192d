// SampleResponse encoding: protobuf for SDK 0.25 / 0.38 (top-k sampled logprobs, prompt_logprobs_last_n
// masking) and the legacy JSON shape, plus a decoder for tests.
#include "wire/sample_codec.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>

#include "tinker_public.pb.h"

namespace tinkerd::wire {

namespace {

constexpr float EMPTY_TOPK_LOGPROB = -99999.0f;

template <typename T, typename U>
std::string le_bytes(const std::vector<U> & values) {
    std::string out(values.size() * sizeof(T), '\0');
    for (size_t i = 0; i < values.size(); ++i) {
        const T v = static_cast<T>(values[i]);
        std::memcpy(out.data() + i * sizeof(T), &v, sizeof(T));
    }
    return out;
}

template <typename T>
std::vector<T> from_le_bytes(const std::string & bytes) {
    std::vector<T> out(bytes.size() / sizeof(T));
    if (!out.empty()) {  // an empty vector's data() may be null, and memcpy's arguments must not be
        std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
    }
    return out;
}

using TopkRows = std::vector<std::vector<std::pair<int64_t, float>>>;

// rows x k row-major matrices, empty cells (0, -99999); rows before `first_row` are left empty.
void encode_topk(const TopkRows & rows, int64_t k, size_t first_row, tinker_public::TopkPromptLogprobs * topk) {
    const size_t n = rows.size();
    const auto kk = static_cast<size_t>(k);
    std::vector<int32_t> ids(n * kk, 0);
    std::vector<float> lps(n * kk, EMPTY_TOPK_LOGPROB);
    for (size_t pos = first_row; pos < n; ++pos) {
        const auto & cells = rows[pos];
        for (size_t j = 0; j < cells.size() && j < kk; ++j) {
            ids[pos * kk + j] = static_cast<int32_t>(cells[j].first);
            lps[pos * kk + j] = cells[j].second;
        }
    }
    topk->set_token_ids(le_bytes<int32_t>(ids));
    topk->set_logprobs(le_bytes<float>(lps));
    topk->set_k(static_cast<uint32_t>(k));
    topk->set_prompt_length(static_cast<uint32_t>(n));
}

TopkRows decode_topk(const tinker_public::TopkPromptLogprobs & topk) {
    TopkRows rows;
    const auto ids = from_le_bytes<int32_t>(topk.token_ids());
    const auto lps = from_le_bytes<float>(topk.logprobs());
    const size_t k = topk.k();
    if (k == 0) {
        return rows;
    }
    for (size_t pos = 0; pos < topk.prompt_length() && (pos + 1) * k <= ids.size() && (pos + 1) * k <= lps.size();
         ++pos) {
        std::vector<std::pair<int64_t, float>> cells;
        for (size_t j = 0; j < k && lps[pos * k + j] != EMPTY_TOPK_LOGPROB; ++j) {
            cells.emplace_back(ids[pos * k + j], lps[pos * k + j]);
        }
        rows.push_back(std::move(cells));
    }
    return rows;
}

// The first prompt position that is scored: all of them, or the last prompt_logprobs_last_n.
size_t first_scored(size_t prompt_length, const SampleEncoding & encoding) {
    const auto n = static_cast<size_t>(std::max<int64_t>(0, encoding.prompt_logprobs_last_n));
    return n == 0 || n >= prompt_length ? 0 : prompt_length - n;
}

std::vector<float> masked_prompt_logprobs(const engine::SampleOutput & output, const SampleEncoding & encoding) {
    std::vector<float> lps = output.prompt_logprobs;
    const size_t first = first_scored(lps.size(), encoding);
    std::fill(lps.begin(), lps.begin() + static_cast<std::ptrdiff_t>(first), std::numeric_limits<float>::quiet_NaN());
    return lps;
}

// Field 5: the target logprobs in the request's layout: dense [rows, k] (0 where nothing was asked) or CSR
// with the request's indices and one value per listed cell.
void encode_target_logprobs(const engine::SampleOutput & output, const SampleEncoding & e,
                            tinker_public::Tensor * out) {
    const auto & values = output.target_prompt_logprobs;  // [rows, k]
    const int64_t rows = e.target_prompt_k > 0 ? static_cast<int64_t>(values.size()) / e.target_prompt_k : 0;
    out->set_dtype(tinker_public::DTYPE_FLOAT32);
    out->add_shape(rows);
    out->add_shape(e.target_prompt_k);
    if (!e.target_sparse) {
        out->set_dense(le_bytes<float>(values));
        return;
    }
    std::vector<float> listed;
    for (int64_t r = 0; r + 1 < static_cast<int64_t>(e.target_crow.size()); ++r) {
        for (int64_t i = e.target_crow[r]; i < e.target_crow[r + 1]; ++i) {
            listed.push_back(
                values[static_cast<size_t>(r * e.target_prompt_k + e.target_cols[static_cast<size_t>(i)])]);
        }
    }
    auto * csr = out->mutable_sparse_csr();
    csr->set_values(le_bytes<float>(listed));
    csr->set_crow_indices(le_bytes<int64_t>(e.target_crow));
    csr->set_col_indices(le_bytes<int64_t>(e.target_cols));
}

// Field 6: the draws and their logprobs, dense [rows, k].
void encode_alt_tokens(const engine::SampleOutput & output, int64_t k, tinker_public::PromptAltTokens * out) {
    const int64_t rows = static_cast<int64_t>(output.prompt_alt_tokens.size()) / k;
    auto * tokens = out->mutable_tokens();
    tokens->set_dtype(tinker_public::DTYPE_INT64);
    tokens->add_shape(rows);
    tokens->add_shape(k);
    tokens->set_dense(le_bytes<int64_t>(output.prompt_alt_tokens));
    auto * logprobs = out->mutable_logprobs();
    logprobs->set_dtype(tinker_public::DTYPE_FLOAT32);
    logprobs->add_shape(rows);
    logprobs->add_shape(k);
    logprobs->set_dense(le_bytes<float>(output.prompt_alt_logprobs));
}

}  // namespace

std::string encode_sample_response_proto(const engine::SampleOutput & output, const SampleEncoding & encoding) {
    tinker_public::SampleResponse msg;
    for (const auto & seq : output.sequences) {
        auto * out = msg.add_sequences();
        out->set_stop_reason(seq.stopped ? tinker_public::STOP_REASON_STOP : tinker_public::STOP_REASON_LENGTH);
        out->set_tokens(le_bytes<int32_t>(seq.tokens));
        out->set_logprobs(le_bytes<float>(seq.logprobs));
        if (encoding.topk_sample_logprobs > 0) {
            encode_topk(seq.top_logprobs, encoding.topk_sample_logprobs, 0, out->mutable_topk_sampled_logprobs());
        }
    }
    if (encoding.prompt_logprobs) {
        msg.set_prompt_logprobs(le_bytes<float>(masked_prompt_logprobs(output, encoding)));
    }
    if (encoding.topk_prompt_logprobs > 0) {
        const size_t first = first_scored(output.topk_prompt_logprobs.size(), encoding);
        encode_topk(output.topk_prompt_logprobs, encoding.topk_prompt_logprobs, first,
                    msg.mutable_topk_prompt_logprobs());
    }
    if (encoding.target_prompt_k > 0) {
        encode_target_logprobs(output, encoding, msg.mutable_target_prompt_logprobs());
    }
    if (encoding.prompt_alt_tokens_k > 0) {
        encode_alt_tokens(output, encoding.prompt_alt_tokens_k, msg.mutable_prompt_alt_tokens());
    }
    msg.set_prompt_cache_hit_tokens(0);
    return msg.SerializeAsString();
}

nlohmann::json encode_sample_response_json(const engine::SampleOutput & output, const SampleEncoding & encoding) {
    using nlohmann::json;
    json sequences = json::array();
    for (const auto & seq : output.sequences) {
        sequences.push_back(
            {{"stop_reason", seq.stopped ? "stop" : "length"}, {"tokens", seq.tokens}, {"logprobs", seq.logprobs}});
    }
    json out = {{"sequences", sequences}, {"type", "sample"}, {"prompt_cache_hit_tokens", 0}};
    out["prompt_logprobs"] = nullptr;
    if (encoding.prompt_logprobs) {
        json lps = json::array();
        for (float lp : masked_prompt_logprobs(output, encoding)) {
            lps.push_back(std::isfinite(lp) ? json(lp) : json(nullptr));
        }
        out["prompt_logprobs"] = lps;
    }
    out["topk_prompt_logprobs"] = nullptr;
    if (encoding.topk_prompt_logprobs > 0) {
        json rows = json::array();
        const size_t first = first_scored(output.topk_prompt_logprobs.size(), encoding);
        for (size_t pos = 0; pos < output.topk_prompt_logprobs.size(); ++pos) {
            const auto & cells = output.topk_prompt_logprobs[pos];
            json row = json::array();
            for (const auto & [token, lp] : cells) {
                row.push_back(json::array({token, lp}));
            }
            rows.push_back(cells.empty() || pos < first ? json(nullptr) : row);
        }
        out["topk_prompt_logprobs"] = rows;
    }
    return out;
}

Result<engine::SampleOutput> decode_sample_response_proto(const std::string & body) {
    tinker_public::SampleResponse msg;
    if (body.size() > static_cast<size_t>(INT_MAX) || !msg.ParseFromString(body)) {
        return invalid_argument("malformed protobuf SampleResponse");
    }
    engine::SampleOutput out;
    for (const auto & seq : msg.sequences()) {
        engine::SampledSequence s;
        for (int32_t t : from_le_bytes<int32_t>(seq.tokens())) {
            s.tokens.push_back(t);
        }
        s.logprobs = from_le_bytes<float>(seq.logprobs());
        s.stopped = seq.stop_reason() == tinker_public::STOP_REASON_STOP;
        if (seq.has_topk_sampled_logprobs()) {
            s.top_logprobs = decode_topk(seq.topk_sampled_logprobs());
        }
        out.sequences.push_back(std::move(s));
    }
    if (msg.has_prompt_logprobs()) {
        out.prompt_logprobs = from_le_bytes<float>(msg.prompt_logprobs());
    }
    if (msg.has_topk_prompt_logprobs()) {
        out.topk_prompt_logprobs = decode_topk(msg.topk_prompt_logprobs());
    }
    return out;
}

}  // namespace tinkerd::wire
