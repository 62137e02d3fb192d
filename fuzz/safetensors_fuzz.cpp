// safetensors_fuzz: arbitrary bytes as a .safetensors file -> model::SafetensorsFile::open (header
// length, header JSON, dtype / shape / data_offsets checks). The bytes go to a memfd opened by its
// /proc/self/fd path; every accepted tensor's first and last byte is read (ASan sees a bad range).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <sys/mman.h>
#include <unistd.h>

#include "model/safetensors.h"

namespace {

// One memfd for the whole run, rewritten for each input.
int memfd() {
    static int fd = [] {
        int made = ::memfd_create("safetensors_fuzz", 0);
        if (made < 0) {
            std::abort();
        }
        return made;
    }();
    return fd;
}

bool write_input(const uint8_t * data, size_t size) {
    if (::ftruncate(memfd(), 0) != 0) {
        return false;
    }
    size_t done = 0;
    while (done < size) {
        ssize_t n = ::pwrite(memfd(), data + done, size - done, static_cast<off_t>(done));
        if (n <= 0) {
            return false;
        }
        done += static_cast<size_t>(n);
    }
    return true;
}

void touch(const tinkerd::model::SafetensorsFile & file) {
    volatile uint8_t sink = 0;
    for (const std::string & name : file.names()) {
        auto view = file.get(name);
        if (!view.ok()) {
            std::abort();  // names() lists only tensors get() knows
        }
        const auto * bytes = static_cast<const uint8_t *>(view->data);
        if (view->n_bytes > 0) {
            sink = sink ^ bytes[0] ^ bytes[view->n_bytes - 1];
        }
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    if (!write_input(data, size)) {
        return 0;
    }
    auto file = tinkerd::model::SafetensorsFile::open("/proc/self/fd/" + std::to_string(memfd()));
    if (file.ok()) {
        touch(**file);
    }
    return 0;
}
