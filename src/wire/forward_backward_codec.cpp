// forward_backward requests: the protobuf tinker_public.ForwardBackwardRequest (SDK 0.25) and the legacy
// JSON body (SDK <= 0.24) -> ForwardBackwardRequest with engine datums. Validates structure and sizes,
// not loss semantics (the engine does that). Every error names the offending field.
#include "wire/forward_backward_codec.h"

#include <algorithm>
#include <climits>

#include "common/log.h"
#include "tinker_public.pb.h"
#include "wire/image_chunks.h"
#include "wire/request_limits.h"
#include "wire/tensor_codec.h"

namespace tinkerd::wire {
namespace {

using detail::WireDType;

std::string indexed(const std::string & prefix, size_t i) {
    return prefix + "[" + std::to_string(i) + "]";
}

std::string input_path(const std::string & datum, const std::string & key) {
    return datum + ".loss_fn_inputs[\"" + key + "\"]";
}

Error too_many_tokens(const std::string & where, size_t n) {
    return invalid_argument(where + ": " + std::to_string(n) + " tokens exceed the limit of " +
                            std::to_string(detail::kMaxDatumTokens) + " per datum");
}

// ---- protobuf ----

Result<WireDType> proto_dtype(int dtype, const std::string & where) {
    switch (dtype) {
        case tinker_public::DTYPE_FLOAT32:
            return WireDType::F32;
        case tinker_public::DTYPE_INT64:
            return WireDType::I64;
        case tinker_public::DTYPE_INT32:
            return WireDType::I32;
        case tinker_public::DTYPE_BFLOAT16:
            return WireDType::BF16;
        case tinker_public::DTYPE_UNSPECIFIED:
            return invalid_argument(where + ".dtype: unspecified");
        default:
            return invalid_argument(where + ".dtype: unknown value " + std::to_string(dtype));
    }
}

Result<engine::HostTensor> decode_tensor_proto(const tinker_public::Tensor & tensor, const std::string & where) {
    auto dtype = proto_dtype(tensor.dtype(), where);
    if (!dtype.ok()) {
        return dtype.error();
    }
    std::vector<int64_t> shape(tensor.shape().begin(), tensor.shape().end());
    if (tensor.encoding_case() != tinker_public::Tensor::kSparseCsr) {
        // dense, or no encoding at all (an empty tensor).
        auto values = detail::values_from_bytes(tensor.dense(), *dtype, where);
        if (!values.ok()) {
            return values.error();
        }
        return detail::make_dense(std::move(*values), std::move(shape), where);
    }
    const auto & csr = tensor.sparse_csr();
    auto values = detail::values_from_bytes(csr.values(), *dtype, where + ".sparse_csr.values");
    if (!values.ok()) {
        return values.error();
    }
    auto crow = detail::int64s_from_bytes(csr.crow_indices(), where + ".sparse_csr.crow_indices");
    if (!crow.ok()) {
        return crow.error();
    }
    auto cols = detail::int64s_from_bytes(csr.col_indices(), where + ".sparse_csr.col_indices");
    if (!cols.ok()) {
        return cols.error();
    }
    return detail::make_sparse(*values, *crow, *cols, shape, where);
}

// model_input chunks -> datum.tokens (encoded_text int32 LE, concatenated in chunk order) and
// datum.images (image chunks, prepared for the model's vision processor: image_chunks.h).
Result<void> decode_model_input_proto(const google::protobuf::RepeatedPtrField<tinker_public::Chunk> & chunks,
                                      const std::string & datum_where, const DecodeLimits & limits,
                                      engine::Datum & datum, int64_t & patch_budget) {
    for (int j = 0; j < chunks.size(); ++j) {
        const std::string where = indexed(datum_where + ".model_input", static_cast<size_t>(j));
        const auto & chunk = chunks.Get(j);
        switch (chunk.chunk_case()) {
            case tinker_public::Chunk::kEncodedText:
                break;
            case tinker_public::Chunk::kImage: {
                const auto & image = chunk.image();
                ImageChunkFields fields{image.data(), image.format(),
                                        image.has_expected_tokens() ? image.expected_tokens() : 0,
                                        image.override_dimensions().width(), image.override_dimensions().height()};
                if (image.has_expected_tokens() && image.expected_tokens() <= 0)
                    return invalid_argument(where + ".expected_tokens: expected a positive integer");
                TRY_STATUS(append_image_chunk(std::move(fields), limits.vision.get(), where, datum.tokens, datum.images,
                                              patch_budget));
                continue;
            }
            case tinker_public::Chunk::kDmel:
                return unsupported(where + ": dmel (audio) chunks are not supported (text-only models)");
            default:
                return invalid_argument(where + ": empty chunk (no encoded_text)");
        }
        const std::string & raw = chunk.encoded_text().tokens();
        if (raw.size() % 4 != 0) {
            return invalid_argument(where + ".encoded_text.tokens: " + std::to_string(raw.size()) +
                                    " bytes is not a multiple of 4");
        }
        if (datum.tokens.size() + raw.size() / 4 > static_cast<size_t>(detail::kMaxDatumTokens)) {
            return too_many_tokens(datum_where + ".model_input", datum.tokens.size() + raw.size() / 4);
        }
        for (size_t at = 0; at < raw.size(); at += 4) {
            datum.tokens.push_back(detail::read_le<int32_t>(raw.data() + at));
        }
    }
    if (datum.tokens.size() > static_cast<size_t>(detail::kMaxDatumTokens)) {
        return too_many_tokens(datum_where + ".model_input", datum.tokens.size());
    }
    return {};
}

Result<engine::Datum> decode_datum_proto(const tinker_public::Datum & msg, const std::string & where,
                                         const DecodeLimits & limits, int64_t & patch_budget) {
    engine::Datum datum;
    TRY_STATUS(decode_model_input_proto(msg.model_input(), where, limits, datum, patch_budget));
    // Sorted keys, so that the first error reported does not depend on hash order.
    std::vector<std::string> keys;
    for (const auto & [key, tensor] : msg.loss_fn_inputs()) {
        keys.push_back(key);
    }
    std::sort(keys.begin(), keys.end());
    for (const auto & key : keys) {
        auto tensor = decode_tensor_proto(msg.loss_fn_inputs().at(key), input_path(where, key));
        if (!tensor.ok()) {
            return tensor.error();
        }
        datum.loss_inputs.emplace(key, std::move(*tensor));
    }
    return datum;
}

// Datum fields 3 / 4: each span one run, with an id and non-negative offset and length.
Result<std::vector<ProvenanceRun>> decode_spans_proto(
    const google::protobuf::RepeatedPtrField<tinker_public::ProvenanceSpan> & spans, const std::string & where) {
    std::vector<ProvenanceRun> runs;
    for (int i = 0; i < spans.size(); ++i) {
        const auto & span = spans.Get(i);
        const std::string at = indexed(where, static_cast<size_t>(i));
        if (span.span_case() == tinker_public::ProvenanceSpan::SPAN_NOT_SET) {
            return invalid_argument(at + ": neither prompt_tokens nor sampled_tokens is set");
        }
        const bool sampled = span.span_case() == tinker_public::ProvenanceSpan::kSampledTokens;
        const auto & run = sampled ? span.sampled_tokens() : span.prompt_tokens();
        if (run.sequence_id().empty() || run.offset() < 0 || run.length() < 0) {
            return invalid_argument(at + ": needs a sequence_id and a non-negative offset and length");
        }
        runs.push_back({sampled, run.sequence_id(), run.offset(), run.length()});
    }
    return runs;
}

// The loss name SDK 0.38 can send that no engine here implements, refused at submission by name: "custom"
// is the SDK's server-side custom loss (forward_backward_custom runs client-side through cross_entropy).
Result<void> refuse_unserved_loss(const std::string & loss_fn) {
    if (loss_fn == "custom") {
        return unsupported(
            "loss_fn 'custom' (server-side custom losses) is not supported by this server: "
            "forward_backward_custom runs the loss client-side (served: cross_entropy, importance_sampling, ppo, "
            "cispo, dro, gspo, stable_reinforce)");
    }
    return {};
}

// SDK 0.38 sends loss_fn_config_v2 (numbers and strings) and mirrors the numbers into the legacy map;
// v2 wins when present. No loss here takes a string option, so a text value is refused by name.
Result<std::map<std::string, double>> decode_loss_fn_config_proto(const tinker_public::ForwardBackwardRequest & msg) {
    std::map<std::string, double> config;
    if (msg.loss_fn_config_v2().empty()) {
        config.insert(msg.loss_fn_config().begin(), msg.loss_fn_config().end());
        return config;
    }
    for (const auto & [key, value] : msg.loss_fn_config_v2()) {
        const std::string where = "loss_fn_config[\"" + key + "\"]";
        switch (value.value_case()) {
            case tinker_public::LossConfigValue::kNumber:
                config[key] = value.number();
                break;
            case tinker_public::LossConfigValue::kText:
                return unsupported(where + ": string values (\"" + value.text().substr(0, 64) +
                                   "\") are not supported; the losses served here take numbers only");
            default:
                return invalid_argument(where + ": empty LossConfigValue (neither number nor text)");
        }
    }
    return config;
}

}  // namespace

void route_protobuf_logs_to_debug() {
    google::protobuf::SetLogHandler(
        [](google::protobuf::LogLevel, const char * file, int line, const std::string & message) {
            LOG_DBG("protobuf", "%s:%d: %s", file, line, message.c_str());
        });
}

std::optional<RequestIds> forward_backward_ids_proto(std::string_view body) {
    tinker_public::ForwardBackwardRequest msg;
    if (body.size() > static_cast<size_t>(INT_MAX) || !msg.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
        return std::nullopt;
    }
    return RequestIds{msg.model_id(), msg.seq_id()};
}

Result<ForwardBackwardRequest> decode_forward_backward_proto(std::string_view body, const DecodeLimits & limits) {
    tinker_public::ForwardBackwardRequest msg;
    if (body.size() > static_cast<size_t>(INT_MAX) || !msg.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
        return invalid_argument("malformed protobuf ForwardBackwardRequest");
    }
    ForwardBackwardRequest request;
    request.model_id = msg.model_id();
    request.seq_id = msg.seq_id();
    request.loss_fn = msg.loss_fn();
    TRY_STATUS(refuse_unserved_loss(request.loss_fn));
    auto config = decode_loss_fn_config_proto(msg);
    if (!config.ok()) {
        return config.error();
    }
    request.loss_fn_config = std::move(config).value();
    request.forward_only = msg.forward_only();
    if (msg.model_id().empty()) {  // also what a model_id of the wrong wire type parses to
        return invalid_argument("model_id: missing (field 1, a string)");
    }
    if (msg.data_size() == 0) {  // also what a `data` field of the wrong wire type parses to
        return invalid_argument("data: no datums (send at least one)");
    }
    TRY_STATUS(detail::check_tensor_limits_proto(msg, limits));
    request.data.reserve(static_cast<size_t>(msg.data_size()));
    int64_t patch_budget = kMaxRequestImagePatches;
    for (int i = 0; i < msg.data_size(); ++i) {
        auto datum = decode_datum_proto(msg.data(i), indexed("data", static_cast<size_t>(i)), limits, patch_budget);
        if (!datum.ok()) {
            return datum.error();
        }
        request.data.push_back(std::move(*datum));
        const std::string where = indexed("data", static_cast<size_t>(i));
        auto inputs = decode_spans_proto(msg.data(i).model_input_spans(), where + ".model_input_spans");
        auto targets = decode_spans_proto(msg.data(i).loss_fn_input_spans(), where + ".loss_fn_input_spans");
        TRY_STATUS(inputs);
        TRY_STATUS(targets);
        request.provenance.push_back({std::move(inputs).value(), std::move(targets).value()});
    }
    TRY_STATUS(detail::check_token_ids(request.data, limits));
    return request;
}

// ---- legacy JSON ----

namespace {

// {"type": "encoded_text", "tokens": [...]} (type may be absent when "tokens" is present) -> tokens appended;
// {"type": "image", ...} -> prepared for the model (image_chunks.h).
Result<void> append_chunk_json(const nlohmann::json & chunk, const std::string & where, const DecodeLimits & limits,
                               engine::Datum & datum, int64_t & patch_budget) {
    std::vector<int64_t> & tokens = datum.tokens;
    if (!chunk.is_object()) {
        return invalid_argument(where + ": expected a chunk object");
    }
    auto type_it = chunk.find("type");
    const bool has_type = type_it != chunk.end() && !type_it->is_null();
    std::string type = (has_type && type_it->is_string()) ? type_it->get<std::string>() : "";
    if (!has_type && chunk.contains("tokens")) {
        type = "encoded_text";
    }
    if (type == "image" && limits.vision != nullptr) {
        auto fields = image_chunk_from_json(chunk, where);
        if (!fields) {
            return fields.error();
        }
        return append_image_chunk(std::move(*fields), limits.vision.get(), where, tokens, datum.images, patch_budget);
    }
    if (type == "image" || type == "image_asset_pointer" || type == "dmel") {
        return unsupported(where + ": " + type + " chunks are not supported (text-only models)");
    }
    if (type != "encoded_text") {
        return invalid_argument(where + ": unknown chunk type " + (has_type ? type_it->dump() : "(none)"));
    }
    auto list = chunk.find("tokens");
    if (list == chunk.end() || !list->is_array()) {
        return invalid_argument(where + ".tokens: expected a list of token ids");
    }
    if (tokens.size() + list->size() > static_cast<size_t>(detail::kMaxDatumTokens)) {
        return too_many_tokens(where, tokens.size() + list->size());
    }
    for (size_t k = 0; k < list->size(); ++k) {
        const auto & v = (*list)[k];
        const bool fits = v.is_number_unsigned()  ? v.get<uint64_t>() <= static_cast<uint64_t>(INT32_MAX)
                          : v.is_number_integer() ? v.get<int64_t>() >= INT32_MIN && v.get<int64_t>() <= INT32_MAX
                                                  : false;
        if (!fits) {
            return invalid_argument(indexed(where + ".tokens", k) + ": expected an int32 token id, got " + v.dump());
        }
        tokens.push_back(v.get<int64_t>());
    }
    return {};
}

Result<engine::Datum> decode_datum_json(const nlohmann::json & msg, const std::string & where,
                                        const DecodeLimits & limits, int64_t & patch_budget) {
    if (!msg.is_object()) {
        return invalid_argument(where + ": expected a Datum object");
    }
    engine::Datum datum;
    auto model_input = msg.find("model_input");
    if (model_input == msg.end() || !model_input->is_object() || !model_input->contains("chunks") ||
        !(*model_input)["chunks"].is_array()) {
        return invalid_argument(where + ".model_input: expected {\"chunks\": [...]}");
    }
    const auto & chunks = (*model_input)["chunks"];
    for (size_t j = 0; j < chunks.size(); ++j) {
        TRY_STATUS(
            append_chunk_json(chunks[j], indexed(where + ".model_input.chunks", j), limits, datum, patch_budget));
    }
    auto inputs = msg.find("loss_fn_inputs");
    if (inputs == msg.end() || inputs->is_null()) {
        return datum;
    }
    if (!inputs->is_object()) {
        return invalid_argument(where + ".loss_fn_inputs: expected an object");
    }
    for (const auto & [key, value] : inputs->items()) {
        auto tensor = decode_tensor_json(value, input_path(where, key));
        if (!tensor.ok()) {
            return tensor.error();
        }
        datum.loss_inputs.emplace(key, std::move(*tensor));
    }
    return datum;
}

// The request's scalar fields and "loss_fn_config" (each optional; a wrong type is an error).
Result<void> decode_header_json(const nlohmann::json & body, const nlohmann::json & input,
                                ForwardBackwardRequest & request) {
    if (auto it = body.find("model_id"); it != body.end() && !it->is_null()) {
        if (!it->is_string()) {
            return invalid_argument("model_id: expected a string");
        }
        request.model_id = it->get<std::string>();
    }
    if (auto it = body.find("seq_id"); it != body.end() && !it->is_null()) {
        if (!it->is_number_integer()) {
            return invalid_argument("seq_id: expected an integer");
        }
        request.seq_id = it->get<int64_t>();
    }
    if (auto it = input.find("loss_fn"); it != input.end() && !it->is_null()) {
        if (!it->is_string()) {
            return invalid_argument("loss_fn: expected a string");
        }
        request.loss_fn = it->get<std::string>();
        TRY_STATUS(refuse_unserved_loss(request.loss_fn));
    }
    if (auto it = input.find("loss_fn_config"); it != input.end() && !it->is_null()) {
        if (!it->is_object()) {
            return invalid_argument("loss_fn_config: expected an object of numbers");
        }
        for (const auto & [key, value] : it->items()) {
            if (!value.is_number()) {
                return invalid_argument("loss_fn_config[\"" + key + "\"]: expected a number");
            }
            request.loss_fn_config[key] = value.get<double>();
        }
    }
    return {};
}

}  // namespace

Result<ForwardBackwardRequest> decode_forward_backward_json(const nlohmann::json & body, const DecodeLimits & limits) {
    if (!body.is_object()) {
        return invalid_argument("forward_backward request: expected a JSON object");
    }
    const bool has_fb = body.contains("forward_backward_input");
    const bool has_fwd = body.contains("forward_input");
    if (has_fb == has_fwd) {
        return invalid_argument(
            "forward_backward request: expected exactly one of forward_backward_input and "
            "forward_input");
    }
    const auto & input = body[has_fb ? "forward_backward_input" : "forward_input"];
    if (!input.is_object()) {
        return invalid_argument(std::string(has_fb ? "forward_backward_input" : "forward_input") +
                                ": expected an object");
    }
    ForwardBackwardRequest request;
    request.forward_only = has_fwd;
    TRY_STATUS(decode_header_json(body, input, request));
    auto data = input.find("data");
    if (data == input.end() || !data->is_array()) {
        return invalid_argument("data: expected a list of datums");
    }
    if (data->empty()) {
        return invalid_argument("data: no datums (send at least one)");
    }
    TRY_STATUS(detail::check_tensor_limits_json(*data, limits));
    request.data.reserve(data->size());
    int64_t patch_budget = kMaxRequestImagePatches;
    for (size_t i = 0; i < data->size(); ++i) {
        auto datum = decode_datum_json((*data)[i], indexed("data", i), limits, patch_budget);
        if (!datum.ok()) {
            return datum.error();
        }
        request.data.push_back(std::move(*datum));
        request.provenance.emplace_back();
    }
    TRY_STATUS(detail::check_token_ids(request.data, limits));
    return request;
}

}  // namespace tinkerd::wire
