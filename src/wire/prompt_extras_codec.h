// SDK 0.38's per-prompt-position sample extras on the wire: the target_prompt_logprobs request (an int64
// TensorData [len(prompt) - 1, K], dense with -1 for "nothing", or sparse CSR listing only the asked cells)
// and the two response fields it and prompt_alt_tokens_k fill (SampleResponse fields 5 and 6, protobuf only).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tinkerd::wire {

// target_prompt_logprobs as asked: ids [rows, k] row-major (-1 = nothing asked) and, when it came as CSR,
// its layout, which the answer repeats.
struct TargetPromptIds {
    std::vector<int64_t> ids;
    int64_t rows = 0;
    int64_t k = 0;
    bool sparse = false;
    std::vector<int64_t> crow;  // rows + 1
    std::vector<int64_t> cols;  // one per listed cell
};

// The request field: dtype int64, shape [rows, k] with 1 <= k <= max_k, ids in [-1, vocab) (listed CSR cells
// >= 0), at least one id; CSR index arrays checked as torch.sparse_csr_tensor checks them. rows is checked
// against the prompt by the engine.
Result<TargetPromptIds> decode_target_prompt_ids(const nlohmann::json & tensor, int64_t vocab_size, int64_t max_k);

}  // namespace tinkerd::wire
