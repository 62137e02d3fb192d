// Shape, element-budget and token-id checks of forward_backward requests (see request_limits.h), run on
// the parsed message before tensor decoding so that nothing is allocated for a request that lies.
#include "wire/request_limits.h"

#include <string>

#include "tinker_public.pb.h"
#include "wire/tensor_codec.h"

namespace tinkerd::wire::detail {

namespace {

std::string tensor_path(size_t datum, const std::string & key) {
    return "data[" + std::to_string(datum) + "].loss_fn_inputs[\"" + key + "\"]";
}

// Adds one tensor's element count to `used`, checking its rank, its K and the request's budget.
Result<void> count_tensor(const std::vector<int64_t> & shape, int64_t elements_without_shape,
                          const DecodeLimits & limits, const std::string & where, int64_t & used) {
    if (shape.size() > 2) {
        return invalid_argument(where + ": shape " + shape_string(shape) + " has " + std::to_string(shape.size()) +
                                " dimensions; loss inputs are [T] or [T, K]");
    }
    if (shape.size() == 2 && shape[1] > limits.vocab_size) {
        return invalid_argument(where + ": shape " + shape_string(shape) + " has K = " + std::to_string(shape[1]) +
                                " columns, more than the vocabulary (" + std::to_string(limits.vocab_size) + ")");
    }
    int64_t elements = elements_without_shape;
    if (!shape.empty()) {
        auto numel = checked_numel(shape, where);
        if (!numel.ok()) {
            return numel.error();
        }
        elements = *numel;
    }
    if (elements > limits.max_request_elements - used) {
        return invalid_argument(where + ": the request's loss inputs hold more than " +
                                std::to_string(limits.max_request_elements) + " elements in all (the limit)");
    }
    used += elements;
    return {};
}

int64_t dense_elements_proto(const tinker_public::Tensor & tensor) {
    const int64_t bytes = static_cast<int64_t>(tensor.dense().size());
    switch (tensor.dtype()) {
        case tinker_public::DTYPE_INT64:
            return bytes / 8;
        case tinker_public::DTYPE_BFLOAT16:
            return bytes / 2;
        default:
            return bytes / 4;
    }
}

}  // namespace

Result<void> check_tensor_limits_proto(const tinker_public::ForwardBackwardRequest & msg, const DecodeLimits & limits) {
    int64_t used = 0;
    for (int i = 0; i < msg.data_size(); ++i) {
        for (const auto & [key, tensor] : msg.data(i).loss_fn_inputs()) {
            const std::vector<int64_t> shape(tensor.shape().begin(), tensor.shape().end());
            TRY_STATUS(count_tensor(shape, dense_elements_proto(tensor), limits,
                                    tensor_path(static_cast<size_t>(i), key), used));
        }
    }
    return {};
}

Result<void> check_tensor_limits_json(const nlohmann::json & data, const DecodeLimits & limits) {
    int64_t used = 0;
    for (size_t i = 0; i < data.size(); ++i) {
        const auto & datum = data[i];
        auto inputs = datum.is_object() ? datum.find("loss_fn_inputs") : datum.end();
        if (!datum.is_object() || inputs == datum.end() || !inputs->is_object()) {
            continue;  // the decoder names what is wrong with it
        }
        for (const auto & [key, tensor] : inputs->items()) {
            std::vector<int64_t> shape;
            auto shape_it = tensor.is_object() ? tensor.find("shape") : tensor.end();
            if (tensor.is_object() && shape_it != tensor.end() && shape_it->is_array()) {
                for (const auto & dim : *shape_it) {
                    if (!dim.is_number_integer()) {
                        return invalid_argument(tensor_path(i, key) + ".shape: expected a list of integers");
                    }
                    shape.push_back(dim.get<int64_t>());
                }
            }
            auto values = tensor.is_object() ? tensor.find("data") : tensor.end();
            const int64_t count =
                tensor.is_object() && values != tensor.end() && values->is_array() ? int64_t(values->size()) : 0;
            TRY_STATUS(count_tensor(shape, count, limits, tensor_path(i, key), used));
        }
    }
    return {};
}

Result<void> check_token_ids(const std::vector<engine::Datum> & data, const DecodeLimits & limits) {
    for (size_t i = 0; i < data.size(); ++i) {
        for (int64_t token : data[i].tokens) {
            if (token < 0 || token >= limits.vocab_size) {
                return invalid_argument("data[" + std::to_string(i) + "].model_input: token id " +
                                        std::to_string(token) + " is outside the vocabulary (0.." +
                                        std::to_string(limits.vocab_size - 1) + ")");
            }
        }
    }
    return {};
}

}  // namespace tinkerd::wire::detail
