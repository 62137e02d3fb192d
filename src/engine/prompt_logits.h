// Prefill helpers for SampleLoop: adapter row segments of a batch, and the logits of a prompt's rows
// (prompt logprobs and top-K prompt logprobs when asked, in chunks of rows; the last row's logits,
// which give the first sampled token).
#pragma once

#include <vector>

#include <torch/torch.h>

#include "engine/engine.h"
#include "engine/transformer.h"

namespace tinkerd::engine {

AdapterId id_of(const Adapter * adapter);

// Segments of consecutive rows sharing an adapter; row_adapters[i] is row i's adapter.
std::vector<RowSegment> segments_of(const std::vector<const Adapter *> & row_adapters);

// For a prompt's final-norm hidden rows h [n, C]: fills out.prompt_logprobs / topk_prompt_logprobs when
// the request asks for them, and returns the last row's logits [V] (float64, CPU, contiguous).
torch::Tensor prompt_logits(const Transformer & t, const torch::Tensor & h, const SampleRequest & r,
                            const Adapter * adapter, SampleOutput & out);

}  // namespace tinkerd::engine
