// Test helper: saves the process-wide matmul settings (matmul.h) a test changes and restores them when it ends,
// even when the test fails or throws half-way, so no later test in the binary inherits them.
#pragma once

#include "engine/kernels/matmul.h"

namespace tinkerd::engine::kernels {

struct SettingsGuard {
    KernelIsa isa = kernel_isa();
    int64_t blas = blas_min_rows();
    MatmulInputs inputs = matmul_inputs();
    bool brgemm = brgemm_enabled();
    bool dot = bf16_dot_enabled();
    ~SettingsGuard() {
        set_bf16_dot_enabled(dot);
        set_kernel_isa(isa);
        set_blas_min_rows(blas);
        set_matmul_inputs(inputs);
        set_brgemm_enabled(brgemm);
    }
};

}  // namespace tinkerd::engine::kernels
