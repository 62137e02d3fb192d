// MKL's CPU check. libtorch links MKL statically for fp32 BLAS, and MKL runs its slow generic code unless the
// CPU reports "GenuineIntel"; this process answers MKL's own query (mkl_serv_intel_cpu_true), so MKL picks its
// code by the CPU's features (AVX-512, AVX2) on every vendor. TINKERD_MKL_CPU_CHECK=vendor keeps MKL's answer.
#pragma once

#include <string>

namespace tinkerd::engine::kernels {

// How MKL picks its code path in this process, in words: "by features (AuthenticAMD)", "vendor (AuthenticAMD:
// generic code; TINKERD_MKL_CPU_CHECK=vendor)" or "GenuineIntel".
std::string mkl_cpu_check();

}  // namespace tinkerd::engine::kernels
