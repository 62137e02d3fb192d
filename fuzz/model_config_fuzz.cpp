// model_config_fuzz: arbitrary bytes as config.json text -> model::parse_model_config (JSON parse,
// field validation, architecture / rope_scaling checks). Any error is fine; a crash, leak or UB is not.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "model/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    auto config = tinkerd::model::parse_model_config(std::string(tinkerd::fuzz::as_view(data, size)));
    // A config that parses must describe a usable shape (the engine divides by these).
    if (config.ok() && (config->head_dim <= 0 || config->n_heads <= 0 || config->n_kv_heads <= 0 ||
                        config->n_heads % config->n_kv_heads != 0 || config->hidden_size <= 0 ||
                        config->n_layers <= 0 || config->vocab_size <= 0)) {
        __builtin_trap();
    }
    return 0;
}
