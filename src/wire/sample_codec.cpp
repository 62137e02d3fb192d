// SampleResponse encoding: protobuf for SDK 0.25 and the legacy JSON shape, plus a decoder for tests.
#include "wire/sample_codec.h"

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
    std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
    return out;
}

void encode_topk(const engine::SampleOutput & output, int64_t k, tinker_public::SampleResponse & msg) {
    const size_t n = output.topk_prompt_logprobs.size();
    std::vector<int32_t> ids(n * static_cast<size_t>(k), 0);
    std::vector<float> lps(n * static_cast<size_t>(k), EMPTY_TOPK_LOGPROB);
    for (size_t pos = 0; pos < n; ++pos) {
        const auto & cells = output.topk_prompt_logprobs[pos];
        for (size_t j = 0; j < cells.size() && j < static_cast<size_t>(k); ++j) {
            ids[pos * k + j] = static_cast<int32_t>(cells[j].first);
            lps[pos * k + j] = cells[j].second;
        }
    }
    auto * topk = msg.mutable_topk_prompt_logprobs();
    topk->set_token_ids(le_bytes<int32_t>(ids));
    topk->set_logprobs(le_bytes<float>(lps));
    topk->set_k(static_cast<uint32_t>(k));
    topk->set_prompt_length(static_cast<uint32_t>(n));
}

}  // namespace

std::string encode_sample_response_proto(const engine::SampleOutput & output, const SampleEncoding & encoding) {
    tinker_public::SampleResponse msg;
    for (const auto & seq : output.sequences) {
        auto * out = msg.add_sequences();
        out->set_stop_reason(seq.stopped ? tinker_public::STOP_REASON_STOP : tinker_public::STOP_REASON_LENGTH);
        out->set_tokens(le_bytes<int32_t>(seq.tokens));
        out->set_logprobs(le_bytes<float>(seq.logprobs));
    }
    if (encoding.prompt_logprobs) {
        msg.set_prompt_logprobs(le_bytes<float>(output.prompt_logprobs));
    }
    if (encoding.topk_prompt_logprobs > 0) {
        encode_topk(output, encoding.topk_prompt_logprobs, msg);
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
        for (float lp : output.prompt_logprobs) {
            lps.push_back(std::isfinite(lp) ? json(lp) : json(nullptr));
        }
        out["prompt_logprobs"] = lps;
    }
    out["topk_prompt_logprobs"] = nullptr;
    if (encoding.topk_prompt_logprobs > 0) {
        json rows = json::array();
        for (const auto & cells : output.topk_prompt_logprobs) {
            json row = json::array();
            for (const auto & [token, lp] : cells) {
                row.push_back(json::array({token, lp}));
            }
            rows.push_back(cells.empty() ? json(nullptr) : row);
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
        out.sequences.push_back(std::move(s));
    }
    if (msg.has_prompt_logprobs()) {
        out.prompt_logprobs = from_le_bytes<float>(msg.prompt_logprobs());
    }
    if (msg.has_topk_prompt_logprobs() && msg.topk_prompt_logprobs().k() > 0) {
        const auto & topk = msg.topk_prompt_logprobs();
        const auto ids = from_le_bytes<int32_t>(topk.token_ids());
        const auto lps = from_le_bytes<float>(topk.logprobs());
        const size_t k = topk.k();
        for (size_t pos = 0; pos < topk.prompt_length() && (pos + 1) * k <= ids.size() && (pos + 1) * k <= lps.size();
             ++pos) {
            std::vector<std::pair<int64_t, float>> cells;
            for (size_t j = 0; j < k && lps[pos * k + j] != EMPTY_TOPK_LOGPROB; ++j) {
                cells.emplace_back(ids[pos * k + j], lps[pos * k + j]);
            }
            out.topk_prompt_logprobs.push_back(std::move(cells));
        }
    }
    return out;
}

}  // namespace tinkerd::wire
