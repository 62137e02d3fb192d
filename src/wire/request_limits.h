// Internal to src/wire: the bounds a forward_backward request must meet before any of its tensors is
// decoded or densified (a 124-byte sparse claim of shape [1, 2^27] must not allocate gigabytes), and the
// token-id range check once its tokens are known. Limits come from the served model (DecodeLimits).
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "engine/engine.h"
#include "wire/forward_backward_codec.h"

namespace tinker_public {
class ForwardBackwardRequest;
}

namespace tinkerd::wire::detail {

// Every loss input is [T] or [T, K] with K <= vocab_size, and the elements of all of them together stay
// within max_request_elements. Errors name the tensor: data[3].loss_fn_inputs["target_tokens"].
Result<void> check_tensor_limits_proto(const tinker_public::ForwardBackwardRequest & msg, const DecodeLimits & limits);
// The same over the legacy JSON form's "data" list (already checked to be a list).
Result<void> check_tensor_limits_json(const nlohmann::json & data, const DecodeLimits & limits);
// Every token id in [0, vocab_size): "data[1].model_input: token id 70000 is outside the vocabulary (0..49151)".
Result<void> check_token_ids(const std::vector<engine::Datum> & data, const DecodeLimits & limits);

}  // namespace tinkerd::wire::detail
