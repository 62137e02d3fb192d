// matmul_weight / matmul_weight_backward against a float64 reference at odd sizes, for every kernel ISA this
// CPU has (register-blocked and BLAS paths), bf16 and fp32 weights; the generic path when the kernels are
// disabled; base_linear's gradient; shapes and layouts the kernels leave to the generic ops.
#include "engine/kernels/matmul.h"

#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/kernels/gpu_matmul.h"
#include "engine/kernels/matmul_settings_guard.h"

namespace tinkerd::engine::kernels {
namespace {

const std::vector<int64_t> kRows = {1, 2, 3, 7, 8, 9, 31, 33, 65, 257};
const std::vector<int64_t> kDims = {1, 7, 17, 63, 577, 1537};
constexpr int64_t kMaxWork = 30'000'000;  // T * in * out per case, to keep the float64 reference quick
constexpr double kRelative = 1e-5;        // of Σ|terms|: fp32 accumulation over up to 2050 terms (see below)

// The bound kRelative must cover, derived for the longest reduction in the grids (2050 terms; the products of
// rounded inputs and bf16 weights are exact in fp32). Each output is the sum of 16 lanes (a tree of 4 additions)
// whose lane accumulators each take ceil(in / 16) terms with one rounding per term (one FMA each) on the
// AVX-512F kernels, or ceil(in / 32) pairs with at most two roundings per pair (one VDPBF16PS each) on the
// bf16 dot kernel. So at most 2 * ceil(in / 32) + 4 roundings lie on any term's path, and the error is within
// that many times 2^-24 of Σ|terms| (to first order). BLAS and brgemm split the reduction further.
constexpr double kLongestSumRoundings = 2 * ((2050 + 31) / 32) + 4;
static_assert(kLongestSumRoundings * 0x1p-24 <= kRelative, "kRelative below the derived fp32 summation bound");

std::vector<KernelIsa> available_isas() {
    std::vector<KernelIsa> isas;
    for (KernelIsa isa : {KernelIsa::avx2, KernelIsa::avx512}) {
        if (isa <= cpu_kernel_isa()) {
            isas.push_back(isa);
        }
    }
    return isas;
}

// a·b in float64 and its error bound kRelative · (|a|·|b|), elementwise.
struct Expected {
    torch::Tensor value, bound;
};

Expected expected(const torch::Tensor & a, const torch::Tensor & b) {
    const torch::Tensor ad = a.to(torch::kDouble), bd = b.to(torch::kDouble);
    return {torch::matmul(ad, bd), torch::matmul(ad.abs(), bd.abs()) * kRelative + 1e-30};
}

void expect_within(const torch::Tensor & got, const Expected & want) {
    ASSERT_EQ(got.sizes(), want.value.sizes());
    ASSERT_EQ(got.scalar_type(), torch::kFloat);
    const torch::Tensor excess = (got.to(torch::kDouble) - want.value).abs() / want.bound;
    EXPECT_LE(excess.max().item<double>(), 1.0);
}

void expect_close(const torch::Tensor & got, const torch::Tensor & a, const torch::Tensor & b) {
    expect_within(got, expected(a, b));
}

// One (T, in, out) case of the grid with its float64 products (computed once, checked on every path).
struct Case {
    std::string name;
    torch::Tensor x, dy, w;  // [T, in], [T, out], [out, in] in the case's weight dtype
    Expected forward, backward;
};

// x and dy as the products see them: rounded to bf16 when `rounded` (MatmulInputs::bf16).
torch::Tensor as_multiplied(const torch::Tensor & a, bool rounded) {
    return rounded ? a.to(torch::kBFloat16).to(torch::kFloat) : a;
}

std::vector<Case> make_grid(torch::ScalarType dtype, bool rounded = false, const std::vector<int64_t> & rows = kRows,
                            const std::vector<int64_t> & dims = kDims) {
    torch::manual_seed(7);
    std::vector<Case> cases;
    for (int64_t T : rows) {
        for (int64_t in : dims) {
            for (int64_t out : dims) {
                if (T * in * out > kMaxWork) {
                    continue;
                }
                Case c{"T=" + std::to_string(T) + " in=" + std::to_string(in) + " out=" + std::to_string(out),
                       torch::randn({T, in}),
                       torch::randn({T, out}),
                       torch::randn({out, in}).to(dtype),
                       {},
                       {}};
                const torch::Tensor wf = c.w.to(torch::kFloat);
                c.forward = expected(as_multiplied(c.x, rounded), wf.t());
                c.backward = expected(as_multiplied(c.dy, rounded), wf);
                cases.push_back(std::move(c));
            }
        }
    }
    return cases;
}

const std::vector<Case> & bf16_grid() {
    static const std::vector<Case> cases = make_grid(torch::kBFloat16);
    return cases;
}

void check_grid(const std::vector<Case> & cases) {
    for (const Case & c : cases) {
        SCOPED_TRACE(c.name);
        expect_within(matmul_weight(c.x, c.w), c.forward);
        expect_within(matmul_weight_backward(c.dy, c.w), c.backward);
    }
}

TEST(MatmulKernels, Bf16WeightsMatchFloat64OnEveryPath) {
    SettingsGuard guard;
    for (KernelIsa isa : available_isas()) {
        set_kernel_isa(isa);
        for (int64_t blas : {int64_t{1}, int64_t{64}, int64_t{1} << 40}) {  // BLAS always, default, never
            SCOPED_TRACE("isa=" + std::to_string(static_cast<int>(isa)) + " blas_min_rows=" + std::to_string(blas));
            set_blas_min_rows(blas);
            check_grid(bf16_grid());
        }
    }
}

// bf16 inputs: every path multiplies the inputs rounded to bf16; odd reductions (kDims) leave brgemm to BLAS,
// the even grid (partial 64-column, 64-row and 1024-term blocks) runs it.
TEST(MatmulKernels, Bf16InputsMatchFloat64OfTheRoundedInputsOnEveryPath) {
    SettingsGuard guard;
    set_matmul_inputs(MatmulInputs::bf16);
    static const std::vector<Case> odd = make_grid(torch::kBFloat16, true);
    static const std::vector<Case> even = make_grid(torch::kBFloat16, true, {1, 2, 65, 130}, {2, 64, 130, 2050});
    std::vector<bool> brgemm_settings = {false};
    if (brgemm_available()) {
        brgemm_settings.push_back(true);
    }
    for (KernelIsa isa : available_isas()) {
        set_kernel_isa(isa);
        for (bool dot : {false, true}) {  // the few-row bf16 dot kernel where this ISA and CPU have it
            set_bf16_dot_enabled(dot);
            if (dot && !bf16_dot_enabled()) {
                continue;
            }
            for (bool brgemm : brgemm_settings) {
                set_brgemm_enabled(brgemm);
                for (int64_t blas : {int64_t{1}, int64_t{64}, int64_t{1} << 40}) {
                    SCOPED_TRACE("isa=" + std::to_string(static_cast<int>(isa)) + " dot=" + std::to_string(dot) +
                                 " brgemm=" + std::to_string(brgemm) + " blas_min_rows=" + std::to_string(blas));
                    set_blas_min_rows(blas);
                    check_grid(odd);
                    check_grid(even);
                }
            }
        }
    }
    set_kernels_enabled(false);  // the generic ops round the same inputs
    check_grid(odd);
}

// Says loudly when this CPU cannot run the brgemm path (the test above then covers BLAS and kernels only).
TEST(MatmulKernels, BrgemmPathIsAvailableHere) {
    SettingsGuard guard;
    if (!brgemm_available()) {
        GTEST_SKIP() << "this CPU (or the TINKERD_MATMUL_KERNELS cap) has no AVX-512-BF16: the bf16 brgemm path "
                        "is NOT tested on this machine";
    }
    set_brgemm_enabled(true);
    EXPECT_TRUE(brgemm_enabled());
    set_matmul_inputs(MatmulInputs::fp32);  // exact inputs never take the brgemm path
    torch::manual_seed(2);
    const torch::Tensor x = torch::randn({100, 64}), w = torch::randn({32, 64}).to(torch::kBFloat16);
    expect_close(matmul_weight(x, w), x, w.to(torch::kFloat).t());
}

// A dy rounded by the caller gives the backward product bit for bit what rounding inside it gives, on the brgemm
// path (which takes it) and on every other (which ignores it).
TEST(MatmulKernels, BackwardOnARoundedDyIsTheBackwardProduct) {
    SettingsGuard guard;
    set_matmul_inputs(MatmulInputs::bf16);
    torch::manual_seed(4);
    const torch::Tensor dy = torch::randn({80, 96}), w = torch::randn({96, 40}).to(torch::kBFloat16);
    const torch::Tensor rounded = dy.to(torch::kBFloat16);
    for (bool brgemm : {false, true}) {
        set_brgemm_enabled(brgemm);
        SCOPED_TRACE("brgemm=" + std::to_string(brgemm_enabled()));
        EXPECT_EQ(backward_takes_rounded(dy, w), brgemm_enabled() && dy.size(0) >= blas_min_rows());
        EXPECT_TRUE(torch::equal(matmul_weight_backward_rounded(dy, rounded, w), matmul_weight_backward(dy, w)));
    }
    set_matmul_inputs(MatmulInputs::fp32);  // exact inputs: never rounded, so never taken
    EXPECT_FALSE(backward_takes_rounded(dy, w));
    EXPECT_TRUE(torch::equal(matmul_weight_backward_rounded(dy, rounded, w), matmul_weight_backward(dy, w)));
    if (!brgemm_available()) {
        GTEST_SKIP() << "no bf16 brgemm on this CPU: only the fallback of matmul_weight_backward_rounded was tested";
    }
}

// Which few-row forward ran, told by a product only VDPBF16PS gets wrong: it reads bf16 inputs below 2^-126
// as zero (DAZ), where fp32 FMAs multiply them exactly. x = 2^-130 (a bf16 subnormal), w = 2^100: 2^-30 or 0.
bool forward_ran_bf16_dot() {
    const torch::Tensor x = torch::full({1, 48}, 0x1p-130f), w = torch::full({8, 48}, 0x1p100f).to(torch::kBFloat16);
    const float y = matmul_weight(x, w)[0][0].item<float>();
    EXPECT_TRUE(y == 0.0f || y == 48 * 0x1p-30f) << y;
    return y == 0.0f;
}

// The bf16 dot kernel is chosen for few-row bf16-input forwards exactly where the CPU has AVX-512-BF16 and
// nothing caps it (TINKERD_MATMUL_KERNELS, as the cpu-paths tests set it, or set_kernel_isa), never for exact
// inputs or the backward.
TEST(MatmulKernels, Bf16DotKernelIsChosenWhereTheCpuHasIt) {
    SettingsGuard guard;
    __builtin_cpu_init();
    const char * cap = std::getenv("TINKERD_MATMUL_KERNELS");
    const bool uncapped = cap == nullptr || std::string(cap) == "avx512bf16";
    const bool cpu = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512f") &&
                     __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    EXPECT_EQ(bf16_dot_available(), uncapped && cpu);
    set_blas_min_rows(64);
    set_matmul_inputs(MatmulInputs::bf16);
    EXPECT_EQ(forward_ran_bf16_dot(), uncapped && cpu);
    set_bf16_dot_enabled(false);
    EXPECT_FALSE(forward_ran_bf16_dot());
    set_bf16_dot_enabled(true);
    set_matmul_inputs(MatmulInputs::fp32);
    EXPECT_FALSE(forward_ran_bf16_dot());
    set_matmul_inputs(MatmulInputs::bf16);
    set_kernel_isa(KernelIsa::avx2);
    EXPECT_FALSE(bf16_dot_available());
    EXPECT_FALSE(forward_ran_bf16_dot());
    if (!cpu) {
        GTEST_SKIP() << "no AVX-512-BF16 on this CPU: the bf16 dot kernel is NOT tested on this machine";
    }
}

// A row's product does not depend on how many other rows share the call (below BLAS's rows): every few-row kernel
// sums each output in one order whatever the tile, so a decoded sequence's values do not depend on its batch.
// Each row of a T-row product equals that row multiplied alone, bit for bit.
void expect_rows_do_not_depend_on_the_batch() {
    torch::manual_seed(7);
    for (const int64_t in : {64, 577}) {
        const torch::Tensor w = torch::randn({37, in}).to(torch::kBFloat16);  // [out, in]
        for (const int64_t T : {2, 3, 8, 9, 13, 31, 63}) {
            SCOPED_TRACE("in=" + std::to_string(in) + " T=" + std::to_string(T));
            const torch::Tensor x = torch::randn({T, in});  // [T, in]
            const torch::Tensor y = matmul_weight(x, w);    // [T, out]
            for (int64_t t = 0; t < T; ++t) {
                EXPECT_TRUE(torch::equal(y[t], matmul_weight(x.narrow(0, t, 1), w)[0])) << "row " << t;
            }
        }
    }
}

// The bf16 dot kernel's blocked path (8 rows of x or more: 4 weight rows x 6 rows of x) gives every output the
// same sum in the same order as its row-by-row path, so a sequence's values do not depend on how many others
// share its decode batch: each row of a T-row product equals that row multiplied alone, bit for bit. Odd sizes:
// a masked tail of the reduction, weight rows past the last block of 4, rows of x past the last block of 6.
TEST(MatmulKernels, Bf16DotRowsDoNotDependOnTheBatch) {
    SettingsGuard guard;
    set_blas_min_rows(64);
    set_matmul_inputs(MatmulInputs::bf16);
    if (!bf16_dot_enabled()) {
        GTEST_SKIP() << "no AVX-512-BF16 here (or capped): the bf16 dot kernel's batch invariance is NOT tested";
    }
    expect_rows_do_not_depend_on_the_batch();
}

TEST(MatmulKernels, ExactRowsDoNotDependOnTheBatch) {  // the AVX-512F and AVX2 few-row kernels
    SettingsGuard guard;
    set_blas_min_rows(64);
    set_matmul_inputs(MatmulInputs::fp32);
    if (kernel_isa() == KernelIsa::generic) {
        GTEST_SKIP()
            << "generic path: torch's matmul sums by row count, so its rows DO depend on the batch (not tested)";
    }
    expect_rows_do_not_depend_on_the_batch();
}

TEST(MatmulKernels, GenericPathMatchesFloat64) {
    SettingsGuard guard;
    set_kernels_enabled(false);
    EXPECT_EQ(kernel_isa(), KernelIsa::generic);
    check_grid(bf16_grid());
}

// fp32 weights: matmul_weight's generic ops, and gate_linear's few-row kernels (without a gradient) on each
// ISA, BLAS from 64 rows (and always / never).
TEST(MatmulKernels, Fp32WeightsMatchFloat64OnEveryPath) {
    SettingsGuard guard;
    const std::vector<Case> cases = make_grid(torch::kFloat);
    for (KernelIsa isa : available_isas()) {
        set_kernel_isa(isa);
        for (int64_t blas : {int64_t{1}, int64_t{64}, int64_t{1} << 40}) {
            SCOPED_TRACE("isa=" + std::to_string(static_cast<int>(isa)) + " blas_min_rows=" + std::to_string(blas));
            set_blas_min_rows(blas);
            check_grid(cases);
            for (const Case & c : cases) {
                SCOPED_TRACE(c.name);
                expect_within(gate_linear(c.x, c.w), c.forward);
            }
        }
    }
    set_kernels_enabled(false);
    check_grid(cases);
}

TEST(MatmulKernels, DisabledKernelsGiveTheGenericResults) {
    SettingsGuard guard;
    torch::manual_seed(3);
    const torch::Tensor x = torch::randn({9, 577}), dy = torch::randn({9, 63});
    const torch::Tensor w = torch::randn({63, 577}).to(torch::kBFloat16);
    const torch::Tensor fast = matmul_weight(x, w), fast_back = matmul_weight_backward(dy, w);
    set_kernels_enabled(false);
    const torch::Tensor generic = matmul_weight(x, w), generic_back = matmul_weight_backward(dy, w);
    EXPECT_TRUE(torch::equal(generic, matmul_weight_generic(x, w)));
    EXPECT_TRUE(torch::equal(generic_back, matmul_weight_backward_generic(dy, w)));
    EXPECT_TRUE(torch::allclose(fast, generic, 1e-5, 1e-4));
    EXPECT_TRUE(torch::allclose(fast_back, generic_back, 1e-5, 1e-4));
    set_kernels_enabled(true);
    EXPECT_EQ(kernel_isa(), cpu_kernel_isa());
}

TEST(MatmulKernels, BatchedAndNonContiguousInputs) {
    torch::manual_seed(5);
    const torch::Tensor w = torch::randn({17, 63}).to(torch::kBFloat16), wf = w.to(torch::kFloat);
    const torch::Tensor x3 = torch::randn({2, 5, 63});          // [B, S, in]
    const torch::Tensor x_strided = torch::randn({63, 9}).t();  // [9, 63], not contiguous
    const torch::Tensor x_vector = torch::randn({63});          // [in]
    EXPECT_EQ(matmul_weight(x3, w).sizes(), (std::vector<int64_t>{2, 5, 17}));
    expect_close(matmul_weight(x3, w).view({10, 17}), x3.view({10, 63}), wf.t());
    expect_close(matmul_weight(x_strided, w), x_strided, wf.t());
    expect_close(matmul_weight(x_vector, w).view({1, 17}), x_vector.view({1, 63}), wf.t());
    const torch::Tensor dy3 = torch::randn({2, 3, 17});
    expect_close(matmul_weight_backward(dy3, w).view({6, 63}), dy3.view({6, 17}), wf);
}

TEST(MatmulKernels, BaseLinearGradientIsTheBackwardProduct) {
    torch::manual_seed(11);
    const torch::Tensor w = torch::randn({33, 65}).to(torch::kBFloat16), wf = w.to(torch::kFloat);
    for (int64_t T : {3, 100}) {
        torch::Tensor x = torch::randn({T, 65}).requires_grad_(true);
        const torch::Tensor dy = torch::randn({T, 33});
        const torch::Tensor y = base_linear(x, w);
        expect_close(y.detach(), x.detach(), wf.t());
        y.backward(dy);
        expect_close(x.grad(), dy, wf);
    }
}

// The GPU's exact product of fp32 inputs and bf16 weights (three bf16 parts of each input): the parts add back
// to the input exactly, and the product meets the fp32 bound against float64. On the CPU the stacked product runs
// in fp32, so this checks the splitting; the tensor-core product itself is checked on a GPU (scripts/gpu-check.sh).
TEST(MatmulKernels, SplitBf16ProductIsExactOnFp32Inputs) {
    torch::manual_seed(12);
    // Inputs over many binades (bf16 alone keeps 8 of their 24 significant bits).
    const torch::Tensor a = torch::randn({37, 577}) * torch::exp2(torch::randint(-20, 20, {37, 577}).to(torch::kFloat));
    const torch::Tensor b = torch::randn({577, 65}).to(torch::kBFloat16);
    const torch::Tensor hi = a.to(torch::kBFloat16).to(torch::kDouble);
    const torch::Tensor rest = a.to(torch::kDouble) - hi;
    const torch::Tensor mid = rest.to(torch::kBFloat16).to(torch::kDouble);
    const torch::Tensor lo = (rest - mid).to(torch::kBFloat16).to(torch::kDouble);
    EXPECT_TRUE(torch::equal(hi + mid + lo, a.to(torch::kDouble)));
    expect_close(split_bf16_product(a, b), a, b.to(torch::kFloat));
}

TEST(MatmulKernels, GpuFastPathsFollowTheEnvironment) {
    const char * before = std::getenv("TINKERD_GPU_PATHS");
    const std::string saved = before == nullptr ? "" : before;
    ::unsetenv("TINKERD_GPU_PATHS");
    EXPECT_TRUE(gpu_fast_paths());
    ::setenv("TINKERD_GPU_PATHS", "reference", 1);
    EXPECT_FALSE(gpu_fast_paths());
    ::setenv("TINKERD_GPU_PATHS", "fast", 1);  // anything else: the fast paths
    EXPECT_TRUE(gpu_fast_paths());
    if (before == nullptr) {
        ::unsetenv("TINKERD_GPU_PATHS");
    } else {
        ::setenv("TINKERD_GPU_PATHS", saved.c_str(), 1);
    }
}

TEST(MatmulKernels, ExactLinearIsBaseLinearOnTheCpu) {
    torch::manual_seed(13);
    const torch::Tensor w = torch::randn({33, 65}).to(torch::kBFloat16);
    const torch::Tensor x = torch::randn({100, 65});
    EXPECT_TRUE(torch::equal(exact_linear(x, w), base_linear(x, w)));
}

}  // namespace
}  // namespace tinkerd::engine::kernels
