// forward_backward on the wire: the protobuf request of SDK 0.25 (optionally zstd-compressed), the
// legacy JSON request of SDK <= 0.24, and the result as protobuf ForwardBackwardOutput or legacy JSON.
// Torch-free: it produces engine::Datum host tensors and never links the engine library.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "engine/engine.h"
#include "vision/preprocess.h"

namespace tinkerd::wire {

// SDK 0.38 provenance: datum positions that are [offset, offset + length) of a sampled sequence's prompt
// (sampled = false) or of its sampled tokens (sampled = true). Runs tile the datum in order.
struct ProvenanceRun {
    bool sampled = false;
    std::string sequence_id;
    int64_t offset = 0;
    int64_t length = 0;
};

// One datum's runs: over model_input and over target_tokens (both empty when the datum has none).
struct DatumProvenance {
    std::vector<ProvenanceRun> model_input;
    std::vector<ProvenanceRun> targets;
};

// A decoded forward_backward / forward request.
struct ForwardBackwardRequest {
    std::string model_id;
    int64_t seq_id = 0;
    std::vector<engine::Datum> data;          // tokens = the concatenated encoded_text chunks
    std::vector<DatumProvenance> provenance;  // one per datum (protobuf fields 3 and 4; JSON has none)
    std::string loss_fn;
    std::map<std::string, double> loss_fn_config;
    bool forward_only = false;
};

// Bounds checked before any tensor is decoded (request_limits.h): token ids in [0, vocab_size); every loss
// input [T] or [T, K] with K <= vocab_size (top-K targets); all loss inputs of a request together at most
// max_request_elements elements (2^25: 256 MiB of int64, far above what the SDK's chunked requests send).
struct DecodeLimits {
    int64_t vocab_size = INT64_MAX;  // INT64_MAX when the model is not known yet: only the budget applies
    int64_t max_request_elements = int64_t{1} << 25;
    // The model's image processor; null for a text-only (or not yet known) model: image chunks are refused.
    std::shared_ptr<const vision::ProcessorConfig> vision;
};

// Sends libprotobuf's own messages (e.g. "invalid UTF-8" for a bad request) to tinkerd's log at debug
// level instead of raw stderr lines; the request itself gets its 400. Call once at start-up.
void route_protobuf_logs_to_debug();

// Decompresses a zstd frame. A malformed frame -> INVALID_ARGUMENT; more than max_bytes of output
// (or a declared content size above it) -> TOO_LARGE. Never allocates more than max_bytes.
Result<std::string> zstd_decompress(std::string_view compressed, size_t max_bytes);
// Compresses (used by tests and the e2e client's fixtures).
std::string zstd_compress(std::string_view plain, int level = 3);

// Protobuf tinker_public.ForwardBackwardRequest. Errors are INVALID_ARGUMENT (or UNSUPPORTED for
// image/dmel chunks) and name the field: `data[2].loss_fn_inputs["weights"]: 10 bytes is not a multiple
// of 4`, "data[0].model_input[1]: image chunks are not supported (text-only models)".
// Sparse CSR tensors are densified; a tensor without a shape is 1-D.
Result<ForwardBackwardRequest> decode_forward_backward_proto(std::string_view body, const DecodeLimits & limits = {});

// The model_id and seq_id of a protobuf request whose full decode failed on its data (an image chunk,
// a bad tensor), so the server can release that seq_id; nullopt when the message itself is malformed.
struct RequestIds {
    std::string model_id;
    int64_t seq_id = 0;
};
std::optional<RequestIds> forward_backward_ids_proto(std::string_view body);
// The same from the first bytes of a body that was refused unread (over --max-body-bytes; request_prefix.cpp):
// protobuf ForwardBackwardRequest, whose fields 1 (model_id) and 2 (seq_id) lead as every serializer writes
// them, or a JSON object whose top-level "model_id" (string) and "seq_id" (integer) come before the cut.
// nullopt unless the prefix holds both.
std::optional<RequestIds> request_ids_from_prefix(std::string_view prefix, bool protobuf);

// Legacy JSON: {"forward_backward_input" | "forward_input": {"data": [...], "loss_fn", "loss_fn_config"?},
// "model_id", "seq_id"}. forward_only is true for the "forward_input" form.
Result<ForwardBackwardRequest> decode_forward_backward_json(const nlohmann::json & body,
                                                            const DecodeLimits & limits = {});

// A single JSON TensorData {"data": [...], "dtype": "int64"|"float32", "shape"?, "sparse_crow_indices"?,
// "sparse_col_indices"?} -> host tensor (I64 or F32). `where` prefixes error messages.
Result<engine::HostTensor> decode_tensor_json(const nlohmann::json & tensor, const std::string & where);

// Result encodings. Per-datum outputs (here: `logprobs`, F32, shape [N] or [N,K]) in request order.
// Protobuf: one ArrayRecord per run of consecutive datums with the same trailing shape, num_datums set,
// int64 byte offsets; loss_fn_output_type "ArrayRecord".
std::string encode_forward_backward_output_proto(const engine::ForwardBackwardOutput & output);
// Legacy JSON: {"loss_fn_output_type", "loss_fn_outputs": [{"logprobs": {"data", "dtype", "shape"}}],
// "metrics"}. Non-finite floats become null (JSON has no NaN).
nlohmann::json encode_forward_backward_output_json(const engine::ForwardBackwardOutput & output);

// Decodes a ForwardBackwardOutput protobuf back into per-datum tensors (tests and tools).
Result<engine::ForwardBackwardOutput> decode_forward_backward_output_proto(std::string_view body);

}  // namespace tinkerd::wire
