// wire_fuzz: arbitrary bytes as a forward_backward request body -> wire::decode_forward_backward_proto
// and forward_backward_ids_proto; as a zstd body (zstd_decompress with a 1 MiB cap, then the protobuf
// decoder on what comes out); and as the protobuf results the tools decode (ForwardBackwardOutput,
// SampleResponse). Decoded tensors must hold exactly shape x dtype bytes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_util.h"
#include "wire/forward_backward_codec.h"
#include "wire/sample_codec.h"

namespace {

constexpr size_t DECOMPRESS_CAP = 1 << 20;

void check_tensor(const tinkerd::engine::HostTensor & t) {
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
        if (d < 0) {
            __builtin_trap();
        }
        numel *= static_cast<uint64_t>(d);
    }
    if (numel * tinkerd::model::dtype_size(t.dtype) != t.bytes.size()) {
        __builtin_trap();  // a decoded tensor's bytes must match its shape
    }
}

void decode_request(std::string_view body) {
    auto request = tinkerd::wire::decode_forward_backward_proto(body);
    (void)tinkerd::wire::forward_backward_ids_proto(body);
    if (!request.ok()) {
        return;
    }
    for (const auto & datum : request->data) {
        for (const auto & [name, tensor] : datum.loss_inputs) {
            check_tensor(tensor);
        }
    }
}

void decode_results(std::string_view body) {
    auto output = tinkerd::wire::decode_forward_backward_output_proto(body);
    if (output.ok()) {
        for (const auto & t : output->logprobs) {
            check_tensor(t);
        }
        (void)tinkerd::wire::encode_forward_backward_output_proto(*output);
    }
    (void)tinkerd::wire::decode_sample_response_proto(std::string(body));
}

}  // namespace

// libprotobuf's own complaints (invalid UTF-8, ...) go to tinkerd's debug log, as in the server.
extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    tinkerd::wire::route_protobuf_logs_to_debug();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    const std::string_view body = tinkerd::fuzz::as_view(data, size);
    decode_request(body);
    decode_results(body);
    auto plain = tinkerd::wire::zstd_decompress(body, DECOMPRESS_CAP);
    if (plain.ok()) {
        if (plain->size() > DECOMPRESS_CAP) {
            __builtin_trap();  // the cap is a promise
        }
        decode_request(*plain);
    }
    return 0;
}
