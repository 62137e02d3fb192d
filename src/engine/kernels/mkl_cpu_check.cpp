// Defines MKL's vendor query for the whole process (see mkl_cpu_check.h). The executable exports it
// (src/engine/CMakeLists.txt links every binary with --export-dynamic-symbol), so libtorch_cpu.so's calls bind
// here, as they would to an LD_PRELOADed library; MKL asks once, at its first BLAS call.
#include "engine/kernels/mkl_cpu_check.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <cstdlib>
#include <cstring>

namespace tinkerd::engine::kernels {

namespace {

// The CPUID vendor string ("GenuineIntel", "AuthenticAMD", ...).
std::string cpu_vendor() {
#if !defined(__x86_64__)
    return "not x86";
#else
    unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0) {
        return "unknown";
    }
    char name[13] = {};
    std::memcpy(name, &ebx, 4);
    std::memcpy(name + 4, &edx, 4);
    std::memcpy(name + 8, &ecx, 4);
    return name;
#endif
}

// True unless TINKERD_MKL_CPU_CHECK=vendor asks for MKL's own vendor check.
bool by_features() {
    static const bool on = [] {
        const char * v = std::getenv("TINKERD_MKL_CPU_CHECK");
        return v == nullptr || std::strcmp(v, "vendor") != 0;
    }();
    return on;
}

bool genuine_intel() {
    static const bool intel = cpu_vendor() == "GenuineIntel";
    return intel;
}

}  // namespace

std::string mkl_cpu_check() {
    if (genuine_intel()) {
        return "GenuineIntel";
    }
    return by_features() ? "by features (" + cpu_vendor() + ")"
                         : "vendor (" + cpu_vendor() + ": generic code; TINKERD_MKL_CPU_CHECK=vendor)";
}

}  // namespace tinkerd::engine::kernels

// MKL's query: nonzero makes MKL choose its code paths by the CPU's features, as on an Intel CPU.
extern "C" __attribute__((visibility("default"), used)) int mkl_serv_intel_cpu_true() {
    return tinkerd::engine::kernels::genuine_intel() || tinkerd::engine::kernels::by_features() ? 1 : 0;
}
