// The process's matmul path for bf16 weights (kernels/matmul.h), chosen at start-up by timing the candidates
// on the model's own shapes (--matmul auto; cached per CPU in the data dir) or forced (--matmul exact|bf16).
// Torch-free: the api reports the choice in server_status, main logs it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/model_config.h"

namespace tinkerd::engine {

// auto: measure and take bf16 dot products where they are clearly faster; exact: fp32 math on bf16 weights
// (inputs never rounded); bf16: inputs rounded to bf16, fastest kernel for that.
enum class MatmulMode { AUTO, EXACT, BF16 };
std::optional<MatmulMode> parse_matmul_mode(const std::string & word);
const char * matmul_mode_name(MatmulMode mode);

// One timed candidate: forward + backward products of the model's shapes, GFLOP/s.
struct KernelCandidate {
    // "exact-fp32" (fp32 BLAS / register kernels on exact inputs), "exact-fp32-copies", "bf16-brgemm"
    std::string name;
    double gflops = 0;
};

struct KernelChoice {
    std::string mode = "exact";        // what was asked: auto, exact or bf16
    std::string inputs = "fp32";       // the numerics in force: fp32 (exact) or bf16 (rounded inputs)
    std::string kernel = "blas-fp32";  // many-row products: blas-fp32, brgemm-bf16 or generic
    std::string isa = "generic";       // few-row kernels: avx512, avx2 or generic
    bool bf16_dot = false;             // few-row bf16-input products on AVX-512-BF16 dot products (VDPBF16PS)
    bool fp32_copies = false;          // exact many-row products on fp32 copies of the weights (fp32_copies.h)
    int64_t fp32_copy_budget = 0;      // bytes the copies may take: an eighth of the memory available at the choice
    std::string cpu;                   // /proc/cpuinfo's model name
    std::string mkl;                   // how MKL (fp32 BLAS) picks its code: kernels/mkl_cpu_check.h
    int threads = 0;
    std::vector<KernelCandidate> candidates;  // empty when forced
    bool from_cache = false;                  // the candidates were read from the cache file, not timed now
    double measure_ms = 0;                    // time spent timing (0 from the cache)
    std::string reason = "no choice made in this process: exact";  // why this path, in words
    // --sample-activations with a quantised base: "fp32", "int8 (<kernel path>)", or "int8 (no effect: ...)".
    std::string sample_activations = "fp32";

    std::string summary() const;                    // one line for the log
    double gflops(const std::string & name) const;  // the candidate's timing; 0 when it was not timed
};

// The products timed: rows × in → out, forward and backward (the model's MLP and attention shapes).
struct MatmulShape {
    int64_t in = 0, out = 0;
};

// The model's main products: gate/up (C -> 2F), down (F -> C) and q/k/v (C -> q + 2 kv).
std::vector<MatmulShape> matmul_shapes_of(const model::ModelConfig & config);

// Chooses, applies process-wide (set_matmul_inputs, set_brgemm_enabled) and remembers the choice. auto
// reuses `cache_path`'s entry for this CPU, thread count, shapes and build; "" = no cache. Takes about a
// second when it has to time. Bad or foreign cache files are ignored and rewritten.
KernelChoice choose_kernels(MatmulMode mode, const std::vector<MatmulShape> & shapes, int threads,
                            const std::string & cache_path);

// The last choice (the default exact one before any).
KernelChoice current_kernel_choice();
// Records what --sample-activations does (KernelChoice::sample_activations), for server_status.
void note_sample_activations(const std::string & what);

// auto takes bf16 dot products when they time at least this much faster than the exact path.
inline constexpr double BF16_MIN_SPEEDUP = 1.25;
// auto keeps fp32 copies of the bf16 weights for exact many-row products when they time at least this much faster
// than widening blocks of the bf16 weights per call (they cost 4 bytes a weight; decode keeps reading bf16).
inline constexpr double FP32_COPIES_MIN_SPEEDUP = 1.10;

}  // namespace tinkerd::engine
