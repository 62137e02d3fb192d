// choose_kernels: forced modes apply their numerics, auto times the candidates and caches the timings per
// CPU / threads / shapes (a second call reads them back), a corrupt cache is ignored and rewritten.
#include "engine/kernel_choice.h"

#include <dlfcn.h>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/kernels/fp32_copies.h"
#include "engine/kernels/matmul.h"
#include "engine/kernels/mkl_cpu_check.h"

namespace tinkerd::engine {
namespace {

namespace fs = std::filesystem;
const std::vector<MatmulShape> kShapes = {{128, 256}, {256, 128}};

struct ChoiceTest : ::testing::Test {
    fs::path dir = fs::temp_directory_path() / ("kernel_choice_test_" + std::to_string(::getpid()));
    std::string cache = (dir / "kernel-choice.json").string();
    void SetUp() override { fs::create_directories(dir); }
    void TearDown() override {
        choose_kernels(MatmulMode::EXACT, kShapes, 0, "");  // the process default again
        fs::remove_all(dir);
    }
};

TEST_F(ChoiceTest, ForcedModesApplyTheirNumerics) {
    KernelChoice exact = choose_kernels(MatmulMode::EXACT, kShapes, 0, cache);
    EXPECT_EQ(exact.inputs, "fp32");
    EXPECT_EQ(kernels::matmul_inputs(), kernels::MatmulInputs::fp32);
    EXPECT_FALSE(kernels::brgemm_enabled());
    EXPECT_TRUE(exact.candidates.empty());
    EXPECT_FALSE(exact.fp32_copies);  // forced modes time nothing, so they keep no copies
    EXPECT_EQ(kernels::fp32_copy_budget(), 0);
    EXPECT_FALSE(fs::exists(cache));  // nothing timed, nothing cached
    EXPECT_FALSE(exact.bf16_dot);     // exact inputs never take the bf16 dot kernel

    KernelChoice bf16 = choose_kernels(MatmulMode::BF16, kShapes, 0, cache);
    EXPECT_EQ(bf16.inputs, "bf16");
    EXPECT_EQ(kernels::matmul_inputs(), kernels::MatmulInputs::bf16);
    EXPECT_EQ(kernels::brgemm_enabled(), kernels::brgemm_available());
    const bool generic = kernels::kernel_isa() == kernels::KernelIsa::generic;  // TINKERD_MATMUL_KERNELS=generic
    EXPECT_EQ(bf16.kernel, generic ? "generic" : kernels::brgemm_available() ? "brgemm-bf16" : "blas-fp32");
    EXPECT_EQ(current_kernel_choice().inputs, "bf16");
    EXPECT_EQ(bf16.bf16_dot, kernels::bf16_dot_enabled());  // reported as it runs (off where capped or absent)
    EXPECT_EQ(bf16.summary().find("vdpbf16ps") != std::string::npos, bf16.bf16_dot);
}

TEST_F(ChoiceTest, AutoTimesOnceAndThenReadsTheCache) {
    const KernelChoice first = choose_kernels(MatmulMode::AUTO, kShapes, 0, cache);
    EXPECT_FALSE(first.from_cache);
    EXPECT_GT(first.measure_ms, 0.0);
    const bool generic = kernels::kernel_isa() == kernels::KernelIsa::generic;  // TINKERD_MATMUL_KERNELS=generic
    ASSERT_EQ(first.candidates.size(), 1u + (generic ? 0u : 1u) + (kernels::brgemm_available() ? 1u : 0u));
    EXPECT_EQ(first.candidates[0].name, "exact-fp32");
    EXPECT_GT(first.candidates[0].gflops, 0.0);
    const double exact = first.gflops("exact-fp32"), copies = first.gflops("exact-fp32-copies");
    const double bf16 = first.gflops("bf16-brgemm");
    EXPECT_EQ(copies > 0, !generic);  // timed wherever the kernels run
    // The rules: bf16 only when it times BF16_MIN_SPEEDUP faster; fp32 copies, keeping exact inputs, only when they
    // time FP32_COPIES_MIN_SPEEDUP faster, and then with a budget.
    const bool bf16_wins = bf16 > 0 && bf16 >= BF16_MIN_SPEEDUP * exact;
    EXPECT_EQ(first.inputs, bf16_wins ? "bf16" : "fp32") << first.reason;
    EXPECT_EQ(first.fp32_copies, !bf16_wins && copies >= FP32_COPIES_MIN_SPEEDUP * exact) << first.reason;
    EXPECT_EQ(kernels::fp32_copy_budget() > 0, first.fp32_copies);
    EXPECT_EQ(first.fp32_copy_budget, kernels::fp32_copy_budget());
    ASSERT_TRUE(fs::exists(cache));

    const KernelChoice second = choose_kernels(MatmulMode::AUTO, kShapes, 0, cache);
    EXPECT_TRUE(second.from_cache);
    EXPECT_EQ(second.measure_ms, 0.0);
    EXPECT_EQ(second.inputs, first.inputs);
    EXPECT_EQ(second.fp32_copies, first.fp32_copies);
    EXPECT_EQ(second.candidates[0].gflops, first.candidates[0].gflops);

    // Other shapes are another entry: timed again, the first entry kept.
    const KernelChoice other = choose_kernels(MatmulMode::AUTO, {{64, 64}}, 0, cache);
    EXPECT_FALSE(other.from_cache);
    std::ifstream in(cache);
    EXPECT_EQ(nlohmann::json::parse(in).size(), 2u);
}

TEST_F(ChoiceTest, CorruptCacheIsIgnoredAndRewritten) {
    std::ofstream(cache) << "{ not json";
    const KernelChoice choice = choose_kernels(MatmulMode::AUTO, kShapes, 0, cache);
    EXPECT_FALSE(choice.from_cache);
    std::ifstream in(cache);
    const auto doc = nlohmann::json::parse(in, nullptr, false);
    ASSERT_FALSE(doc.is_discarded());
    EXPECT_EQ(doc.size(), 1u);
    std::ofstream(cache) << R"({"x": [{"name": "exact-fp32", "gflops": -1}]})";  // a foreign, invalid entry
    EXPECT_FALSE(choose_kernels(MatmulMode::AUTO, kShapes, 0, cache).from_cache);
}

TEST(MatmulMode, ParsesTheFlagWords) {
    EXPECT_EQ(parse_matmul_mode("auto"), MatmulMode::AUTO);
    EXPECT_EQ(parse_matmul_mode("exact"), MatmulMode::EXACT);
    EXPECT_EQ(parse_matmul_mode("bf16"), MatmulMode::BF16);
    EXPECT_FALSE(parse_matmul_mode("fp32").has_value());
}

// libtorch's MKL asks mkl_serv_intel_cpu_true whether to run its feature-dispatched code; the symbol must resolve
// to this executable's answer (kernels/mkl_cpu_check.cpp, exported by the link options), not libtorch's own.
TEST(MklCpuCheck, TheExecutableAnswersMklsQuery) {
    void * query = dlsym(RTLD_DEFAULT, "mkl_serv_intel_cpu_true");
    ASSERT_NE(query, nullptr);
    Dl_info found{}, here{};
    ASSERT_NE(dladdr(query, &found), 0);
    ASSERT_NE(dladdr(reinterpret_cast<void *>(&kernels::mkl_cpu_check), &here), 0);
    EXPECT_EQ(found.dli_fbase, here.dli_fbase) << "resolved in " << found.dli_fname;
    const std::string check = kernels::mkl_cpu_check();
    const bool vendor_kept = check.rfind("vendor", 0) == 0;
    EXPECT_EQ(reinterpret_cast<int (*)()>(query)(), vendor_kept ? 0 : 1) << check;
    EXPECT_EQ(current_kernel_choice().mkl, check);
}

}  // namespace
}  // namespace tinkerd::engine
