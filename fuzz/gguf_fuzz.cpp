// gguf_fuzz: arbitrary bytes as a GGUF file -> gguf::GgufFile::parse (header, metadata key/values,
// tensor infos, offsets); every tensor's byte range is touched (ASan sees a bad pointer the reader
// accepted), then the conversion steps: hf_config, hf_tokenizer(_config) and hf_tensors (dequantisers).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gguf/convert.h"
#include "gguf/gguf_file.h"

namespace {

// Reads the first and last byte of every tensor the reader accepted (ASan catches a range outside the input).
void touch_tensors(const tinkerd::gguf::GgufFile & file) {
    volatile uint8_t sink = 0;
    for (const auto & t : file.tensors()) {
        if (t.n_bytes > 0) {
            sink = sink ^ t.data[0] ^ t.data[t.n_bytes - 1];
        }
        (void)t.numel();
    }
}

void lookups(const tinkerd::gguf::GgufFile & file) {
    for (const auto & [key, value] : file.metadata()) {
        (void)file.get_string(key);
        (void)file.get_int(key);
        (void)file.get_float(key);
        (void)tinkerd::gguf::value_type_name(value.type);
    }
    (void)file.get_string("general.architecture");
    (void)file.find_tensor("token_embd.weight");
}

// What ensure_converted does with a parsed file, without writing the directory.
void convert(const tinkerd::gguf::GgufFile & file) {
    (void)tinkerd::gguf::hf_tokenizer(file);
    (void)tinkerd::gguf::hf_tokenizer_config(file);
    auto config = tinkerd::gguf::hf_config(file);
    if (config.ok()) {
        bool quantised = false;
        (void)tinkerd::gguf::hf_tensors(file, *config, quantised);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    // An exact-size heap copy, so reads past the end are caught (the fuzzer's buffer is exact too).
    std::vector<uint8_t> bytes(data, data + size);
    auto file = tinkerd::gguf::GgufFile::parse(bytes.data(), bytes.size(), "fuzz.gguf");
    if (file.ok()) {
        touch_tensors(**file);
        lookups(**file);
        convert(**file);
    }
    return 0;
}
