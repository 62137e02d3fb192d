// The sample result on the wire: protobuf tinker_public.SampleResponse (SDK 0.25) and the legacy JSON
// form (SDK <= 0.24), from the engine's SampleOutput. Torch-free.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "engine/engine.h"

namespace tinkerd::wire {

// What the request asked for beyond the sequences (absent fields are omitted from the response).
struct SampleEncoding {
    bool prompt_logprobs = false;
    int64_t topk_prompt_logprobs = 0;
    int64_t topk_sample_logprobs = 0;    // SDK 0.38: K best per sampled token (SampledSequence field 4)
    int64_t prompt_logprobs_last_n = 0;  // SDK 0.38: > 0 scores only the last N prompt positions (NaN before)
    // SDK 0.38 target_prompt_logprobs (field 5): [rows, k] in the request's layout (CSR: its crow / cols).
    int64_t target_prompt_k = 0;
    bool target_sparse = false;
    std::vector<int64_t> target_crow, target_cols;
    int64_t prompt_alt_tokens_k = 0;  // SDK 0.38 prompt_alt_tokens (field 6), dense [rows, k]
};

// Sequences (stop_reason STOP/LENGTH, int32 tokens, float32 logprobs); prompt_logprobs as float32 with NaN
// first; top-k prompt logprobs as prompt_length x k row-major with empty cells (0, -99999).
std::string encode_sample_response_proto(const engine::SampleOutput & output, const SampleEncoding & encoding);
// {"sequences": [{"stop_reason", "tokens", "logprobs"}], "type": "sample", "prompt_logprobs": [null, ...]|null,
//  "topk_prompt_logprobs": [[[token, logprob], ...]|null, ...]|null, "prompt_cache_hit_tokens": 0}.
nlohmann::json encode_sample_response_json(const engine::SampleOutput & output, const SampleEncoding & encoding);
// Back from protobuf (tests and the legacy JSON path).
Result<engine::SampleOutput> decode_sample_response_proto(const std::string & body);

}  // namespace tinkerd::wire
