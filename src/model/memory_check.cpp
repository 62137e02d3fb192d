// The start-up memory check (memory_check.h): weight bytes from the directory's tensors against MemAvailable.
#include "model/memory_check.h"

#include <fstream>
#include <sstream>

#include "model/safetensors.h"

namespace tinkerd::model {

Result<uint64_t> model_weight_bytes(const std::string & dir, size_t element_bytes) {
    auto file = SafetensorsFile::open_model_dir(dir);
    TRY_STATUS(file);
    uint64_t total = 0;
    for (const std::string & name : (*file)->names()) {
        const TensorView view = (*file)->get(name).value();
        const bool as_stored =
            view.dtype == DType::U8 || element_bytes == 0 || view.dtype == DType::I64 || view.dtype == DType::I32;
        total += as_stored ? view.n_bytes : static_cast<uint64_t>(view.numel()) * element_bytes;
    }
    return total;
}

uint64_t available_memory_bytes() {
    std::ifstream meminfo("/proc/meminfo");
    std::string line;
    while (std::getline(meminfo, line)) {
        std::istringstream fields(line);
        std::string key;
        uint64_t kib = 0;
        if (fields >> key >> kib && key == "MemAvailable:") {
            return kib * 1024;
        }
    }
    return 0;
}

Result<void> check_model_fits(const std::string & name, const std::string & dir, size_t element_bytes) {
    auto needed = model_weight_bytes(dir, element_bytes);
    TRY_STATUS(needed);
    const uint64_t available = available_memory_bytes();
    if (available == 0 || *needed <= available) {
        return {};
    }
    const auto gib = [](uint64_t bytes) {
        std::ostringstream out;
        out.precision(1);
        out << std::fixed << static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0) << " GiB";
        return out.str();
    };
    return too_large("model " + name + " needs " + gib(*needed) + " for its weights but this machine has " +
                     gib(available) + " available: free memory, serve a smaller model, or a quantised " +
                     "GGUF with --base-quant gguf (4-8 bits per weight)");
}

}  // namespace tinkerd::model
