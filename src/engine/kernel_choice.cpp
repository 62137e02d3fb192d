// choose_kernels (kernel_choice.h): times the exact path (blocked, and on fp32 weight copies) and the bf16
// dot-product path on the model's shapes (256 rows, forward and backward), takes bf16 where it is
// BF16_MIN_SPEEDUP faster, copies where FP32_COPIES_MIN_SPEEDUP, and keeps the timings in a JSON cache keyed by
// CPU, threads, shapes and build so that later starts skip the timing.
#include "engine/kernel_choice.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "common/log.h"
#include "common/version.h"
#include "engine/kernels/fp32_copies.h"
#include "engine/kernels/matmul.h"
#include "engine/kernels/mkl_cpu_check.h"
#include "model/memory_check.h"

namespace tinkerd::engine {

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
constexpr int64_t kTimedRows = 256;      // a training chunk's rows: the products' shape in forward_backward
constexpr double kBudgetSeconds = 0.12;  // per candidate and shape, after one warm-up call

std::mutex g_mutex;
KernelChoice g_choice;
bool g_made = false;  // choose_kernels ran in this process

std::string cpu_model_name() {
    std::ifstream cpuinfo("/proc/cpuinfo");
    std::string line;
    while (std::getline(cpuinfo, line)) {
        if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
            return line.substr(line.find(':') + 2);
        }
    }
    return "unknown CPU";
}

const char * isa_name(kernels::KernelIsa isa) {
    return isa == kernels::KernelIsa::avx512 ? "avx512" : isa == kernels::KernelIsa::avx2 ? "avx2" : "generic";
}

// [rows, cols] of small values in [-0.5, 0.5], made without drawing from torch's global generator.
torch::Tensor filler(int64_t rows, int64_t cols) {
    return ((torch::arange(rows * cols).remainder(61) - 30) / 60.0).to(torch::kFloat).view({rows, cols});
}

// GFLOP/s of forward + backward products on `shapes` with the current settings (median over the budget).
double time_products(const std::vector<MatmulShape> & shapes) {
    torch::NoGradGuard no_grad;
    double flops = 0, seconds = 0;
    for (const MatmulShape & s : shapes) {
        const torch::Tensor w = filler(s.out, s.in).to(torch::kBFloat16);  // [out, in]
        const torch::Tensor x = filler(kTimedRows, s.in);                  // [rows, in]
        const torch::Tensor dy = filler(kTimedRows, s.out);                // [rows, out]
        const auto run = [&] {
            (void)kernels::matmul_weight(x, w);
            (void)kernels::matmul_weight_backward(dy, w);
        };
        run();  // warm-up: packing scratch, JIT kernels, pages
        std::vector<double> times;
        const auto start = Clock::now();
        while (times.size() < 3 || std::chrono::duration<double>(Clock::now() - start).count() < kBudgetSeconds) {
            const auto t0 = Clock::now();
            run();
            times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
            if (times.size() >= 50) {
                break;
            }
        }
        std::sort(times.begin(), times.end());
        seconds += times[times.size() / 2];
        flops += 4.0 * kTimedRows * s.in * s.out;
    }
    return flops / seconds / 1e9;
}

void apply(bool bf16_inputs, bool brgemm) {
    kernels::set_matmul_inputs(bf16_inputs ? kernels::MatmulInputs::bf16 : kernels::MatmulInputs::fp32);
    kernels::set_brgemm_enabled(bf16_inputs && brgemm);
}

std::string cache_key(const std::vector<MatmulShape> & shapes, int threads, const std::string & cpu) {
    std::ostringstream key;
    key << cpu << "|threads " << threads << "|isa " << isa_name(kernels::kernel_isa()) << "|brgemm "
        << kernels::brgemm_available() << "|tinkerd " << SERVER_VERSION << "|torch " << TORCH_VERSION_MAJOR << '.'
        << TORCH_VERSION_MINOR << "|mkl " << kernels::mkl_cpu_check() << "|fp32 copies|shapes";
    for (const MatmulShape & s : shapes) {
        key << ' ' << s.in << 'x' << s.out;
    }
    return key.str();
}

std::optional<std::vector<KernelCandidate>> read_cache(const std::string & path, const std::string & key) {
    if (path.empty()) {
        return std::nullopt;
    }
    std::ifstream in(path);
    const json doc = json::parse(in, nullptr, false);
    if (!in || doc.is_discarded() || !doc.is_object() || !doc.contains(key) || !doc[key].is_array()) {
        return std::nullopt;
    }
    std::vector<KernelCandidate> candidates;
    for (const json & c : doc[key]) {
        if (!c.is_object() || !c.contains("name") || !c["name"].is_string() || !c.contains("gflops") ||
            !c["gflops"].is_number() || !(c["gflops"].get<double>() > 0)) {
            return std::nullopt;
        }
        candidates.push_back({c["name"].get<std::string>(), c["gflops"].get<double>()});
    }
    return candidates.empty() ? std::nullopt : std::make_optional(candidates);
}

// Adds this key's entry to the cache file (other CPUs' entries kept), written to a temporary name and renamed.
void write_cache(const std::string & path, const std::string & key, const std::vector<KernelCandidate> & candidates) {
    if (path.empty()) {
        return;
    }
    std::ifstream in(path);
    json doc = json::parse(in, nullptr, false);
    if (doc.is_discarded() || !doc.is_object()) {
        doc = json::object();
    }
    json list = json::array();
    for (const KernelCandidate & c : candidates) {
        list.push_back({{"name", c.name}, {"gflops", c.gflops}});
    }
    doc[key] = list;
    const std::string tmp = path + ".tmp";
    {
        std::ofstream out(tmp, std::ios::trunc);
        out << doc.dump(2) << '\n';
        if (!out) {
            LOG_WRN("engine", "cannot write the kernel-choice cache %s", tmp.c_str());
            return;
        }
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) {
        LOG_WRN("engine", "cannot write the kernel-choice cache %s: %s", path.c_str(), ec.message().c_str());
    }
}

// What fp32 weight copies may take: an eighth of the memory available now (0 when unknown).
int64_t copy_budget() {
    return static_cast<int64_t>(model::available_memory_bytes() / 8);
}

std::vector<KernelCandidate> measure(const std::vector<MatmulShape> & shapes) {
    std::vector<KernelCandidate> candidates;
    apply(false, false);
    candidates.push_back({"exact-fp32", time_products(shapes)});
    // Copies replace the kernels' blocked path (none under the generic cap), within the budget they would have.
    const int64_t budget = copy_budget();
    if (kernels::kernel_isa() != kernels::KernelIsa::generic && budget > 0) {
        kernels::set_fp32_copy_budget(budget);  // the timed weights' copies go with them
        candidates.push_back({"exact-fp32-copies", time_products(shapes)});
        kernels::set_fp32_copy_budget(0);
    }
    if (kernels::brgemm_available()) {
        apply(true, true);
        candidates.push_back({"bf16-brgemm", time_products(shapes)});
    }
    return candidates;
}

// auto's decision from the timings: bf16 dot products only where they pay for their rounding.
void decide(KernelChoice & choice) {
    const double exact = choice.gflops("exact-fp32");
    const double bf16 = choice.gflops("bf16-brgemm");
    char why[200];
    if (bf16 >= BF16_MIN_SPEEDUP * exact && bf16 > 0) {
        std::snprintf(why, sizeof why, "bf16 dot products %.0f GFLOP/s vs exact %.0f (%.2fx >= %.2fx)", bf16, exact,
                      bf16 / exact, BF16_MIN_SPEEDUP);
        choice.inputs = "bf16";
    } else if (bf16 > 0) {
        std::snprintf(why, sizeof why, "exact %.0f GFLOP/s vs bf16 dot products %.0f (%.2fx < %.2fx)", exact, bf16,
                      bf16 / exact, BF16_MIN_SPEEDUP);
    } else {
        std::snprintf(why, sizeof why, "exact %.0f GFLOP/s; this CPU has no bf16 dot products (brgemm)", exact);
    }
    choice.reason = why;
    const double copies = choice.gflops("exact-fp32-copies");
    if (choice.inputs == "fp32" && copies >= FP32_COPIES_MIN_SPEEDUP * exact && exact > 0) {
        std::snprintf(why, sizeof why, "; fp32 weight copies %.0f GFLOP/s (%.2fx >= %.2fx)", copies, copies / exact,
                      FP32_COPIES_MIN_SPEEDUP);
        choice.fp32_copies = true;
        choice.reason += why;
    } else if (choice.inputs == "fp32" && copies > 0) {
        std::snprintf(why, sizeof why, "; no fp32 weight copies (%.0f GFLOP/s, %.2fx < %.2fx)", copies, copies / exact,
                      FP32_COPIES_MIN_SPEEDUP);
        choice.reason += why;
    }
}

}  // namespace

std::optional<MatmulMode> parse_matmul_mode(const std::string & word) {
    if (word == "auto") {
        return MatmulMode::AUTO;
    }
    if (word == "exact") {
        return MatmulMode::EXACT;
    }
    if (word == "bf16") {
        return MatmulMode::BF16;
    }
    return std::nullopt;
}

const char * matmul_mode_name(MatmulMode mode) {
    return mode == MatmulMode::AUTO ? "auto" : mode == MatmulMode::EXACT ? "exact" : "bf16";
}

std::vector<MatmulShape> matmul_shapes_of(const model::ModelConfig & c) {
    const int64_t C = std::max<int64_t>(c.hidden_size, 2);
    const int64_t F = c.intermediate_size > 0       ? c.intermediate_size
                      : c.moe_intermediate_size > 0 ? c.moe_intermediate_size
                                                    : 4 * C;
    const int64_t qkv = std::max<int64_t>((c.n_heads + 2 * c.n_kv_heads) * c.head_dim, C);
    return {{C, 2 * F}, {F, C}, {C, qkv}};
}

double KernelChoice::gflops(const std::string & name) const {
    for (const KernelCandidate & c : candidates) {
        if (c.name == name) {
            return c.gflops;
        }
    }
    return 0;
}

std::string KernelChoice::summary() const {
    std::string line = "matmul for bf16 weights: " + std::string(inputs == "bf16" ? "bf16 inputs" : "exact fp32") +
                       " (" + kernel + ", " + isa + (bf16_dot ? " + vdpbf16ps" : "") + " kernels, " +
                       std::to_string(threads) + " threads, --matmul " + mode +
                       (fp32_copies ? ", fp32 copies up to " + std::to_string(fp32_copy_budget >> 20) + " MiB" : "") +
                       ", MKL " + mkl + "): " + reason + (from_cache ? " [cached timings]" : "");
    return line;
}

KernelChoice choose_kernels(MatmulMode mode, const std::vector<MatmulShape> & shapes, int threads,
                            const std::string & cache_path) {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (threads > 0) {
        at::set_num_threads(threads);
    }
    KernelChoice choice;
    choice.mode = matmul_mode_name(mode);
    choice.cpu = cpu_model_name();
    choice.threads = at::get_num_threads();
    choice.isa = isa_name(kernels::kernel_isa());
    choice.mkl = kernels::mkl_cpu_check();
    if (mode == MatmulMode::EXACT) {
        choice.reason = "forced by --matmul exact";
    } else if (mode == MatmulMode::BF16) {
        choice.inputs = "bf16";
        choice.reason = "forced by --matmul bf16";
    } else {
        const std::string key = cache_key(shapes, choice.threads, choice.cpu);
        auto cached = read_cache(cache_path, key);
        const auto start = Clock::now();
        choice.from_cache = cached.has_value();
        choice.candidates = cached ? *cached : measure(shapes);
        choice.measure_ms = cached ? 0 : std::chrono::duration<double, std::milli>(Clock::now() - start).count();
        if (!cached) {
            write_cache(cache_path, key, choice.candidates);
        }
        decide(choice);
    }
    const bool bf16 = choice.inputs == "bf16";
    apply(bf16, bf16);
    choice.fp32_copy_budget = choice.fp32_copies ? copy_budget() : 0;
    kernels::set_fp32_copy_budget(choice.fp32_copy_budget);
    choice.bf16_dot = bf16 && kernels::bf16_dot_enabled();
    choice.kernel = kernels::kernel_isa() == kernels::KernelIsa::generic ? "generic"
                    : kernels::brgemm_enabled()                          ? "brgemm-bf16"
                                                                         : "blas-fp32";
    const std::string sample_activations = g_choice.sample_activations;
    g_choice = choice;
    g_choice.sample_activations = sample_activations;
    g_made = true;
    return choice;
}

void note_sample_activations(const std::string & what) {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_choice.sample_activations = what;
}

KernelChoice current_kernel_choice() {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (!g_made) {
        g_choice.isa = isa_name(kernels::kernel_isa());
        g_choice.mkl = kernels::mkl_cpu_check();
    }
    return g_choice;
}

}  // namespace tinkerd::engine
