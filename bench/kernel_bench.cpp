// Micro-benchmark of the base-weight products (engine/kernels/matmul.h) on the model's weight shapes: per
// shape, rows T and direction, our dispatch (on bf16 weights, and on fp32 ones: ours-fp32w), its register-blocked and
// BLAS paths, the generic path, the
// bf16-input paths (the AVX-512F kernels / BLAS below and from 64 rows; the AVX-512-BF16 dot kernel below 64
// rows, where the CPU has it; brgemm from 64 rows), torch's bf16 matmul and
// torch's fp32 matmul on a pre-converted weight; ms, GB/s of bf16 weight read, GFLOP/s.
// Weights cycle through copies larger than the LLC, so small-T numbers are from memory, as in decoding.
// --quant: instead, quant_forward_rows at T = 1 on GGUF-quantised weights (GB/s of quantised bytes read).
// --attention: instead, the decode step's attention (attention_decode) at SmolLM2's heads for batches 1 and 32.
// --lora: instead, sampling's row-wise LoRA (add_lora_rows) at SmolLM2's projections, rank 32, batches 1, 8, 32.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include <ATen/Parallel.h>

#include "engine/kernels/attention_decode.h"
#include "engine/kernels/matmul.h"
#include "engine/kernels/quant_int8.h"
#include "engine/kernels/quant_kernels.h"
#include "engine/lora.h"
#include "engine/lora_rows.h"
#include "foreign_cpu.h"
#include "read_bandwidth.h"

namespace {

namespace k = tinkerd::engine::kernels;
using Clock = std::chrono::steady_clock;
using Op = std::function<torch::Tensor(const torch::Tensor &, size_t)>;  // (activation, weight copy)

// Weight copies cycled through per shape: 320 MB (over the LLC), or KB_COPY_BYTES (1: one copy, in cache).
const double kCopyBytes = std::getenv("KB_COPY_BYTES") ? std::atof(std::getenv("KB_COPY_BYTES")) : 320e6;

struct Shape {
    int64_t out, in;
    const char * name;
};

// --min-call: report the 10th percentile of single calls instead of the best round's mean (on a loaded machine
// a call of well under a scheduler slice often runs undisturbed where a 30 ms round never does; the
// percentile, not the minimum, so that one lucky call does not decide).
bool g_min_call = false;
bool g_forward_only = false;  // --forward: skip the backward products

// Seconds per call: the best of 7 rounds (the machine is shared: the best round is the least disturbed),
// each at least 0.03 s and 3 calls; the calls walk through the weight copies across rounds.
double time_op(const Op & op, const torch::Tensor & a, size_t copies) {
    op(a, 0);  // warm-up (scratch buffers, thread pool)
    size_t next = 1;
    double best = 1e30;
    std::vector<double> calls_s;
    for (int round = 0; round < 7; ++round) {
        int64_t calls = 0;
        const auto t0 = Clock::now();
        double elapsed = 0;
        while (elapsed < 0.03 || calls < 3) {
            const double before = elapsed;
            op(a, next++ % copies);
            ++calls;
            elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
            calls_s.push_back(elapsed - before);
        }
        best = std::min(best, elapsed / static_cast<double>(calls));
    }
    if (!g_min_call) {
        return best;
    }
    std::sort(calls_s.begin(), calls_s.end());
    return calls_s[calls_s.size() / 10];
}

struct Weights {
    std::vector<torch::Tensor> bf16, fp32;  // copies, [out, in] each
};

Weights make_weights(const Shape & s, size_t copies) {
    Weights w;
    for (size_t c = 0; c < copies; ++c) {
        w.bf16.push_back((torch::randn({s.out, s.in}) * 0.05).to(torch::kBFloat16));
        w.fp32.push_back(w.bf16.back().to(torch::kFloat));
    }
    return w;
}

// The compared ops for one direction: name -> op(activation, copy).
std::vector<std::pair<std::string, Op>> ops(const Weights & w, bool backward) {
    auto with = [](std::function<void()> set, Op op) -> Op {
        return [set, op](const torch::Tensor & a, size_t c) {
            set();
            torch::Tensor r = op(a, c);
            k::set_blas_min_rows(64);
            k::set_kernels_enabled(true);
            k::set_matmul_inputs(k::MatmulInputs::fp32);
            k::set_brgemm_enabled(false);
            k::set_bf16_dot_enabled(true);
            return r;
        };
    };
    const Op ours = [&w, backward](const torch::Tensor & a, size_t c) {
        return backward ? k::matmul_weight_backward(a, w.bf16[c]) : k::matmul_weight(a, w.bf16[c]);
    };
    const Op bf16 = [&w, backward](const torch::Tensor & a, size_t c) {
        const torch::Tensor ab = a.to(torch::kBFloat16);
        return backward ? torch::matmul(ab, w.bf16[c]) : torch::matmul(ab, w.bf16[c].t());
    };
    const Op fp32 = [&w, backward](const torch::Tensor & a, size_t c) {
        return backward ? torch::matmul(a, w.fp32[c]) : torch::matmul(a, w.fp32[c].t());
    };
    const Op ours_fp32 = [&w, backward](const torch::Tensor & a, size_t c) {  // fp32 weights through our dispatch
        return backward ? k::matmul_weight_backward(a, w.fp32[c]) : k::matmul_weight(a, w.fp32[c]);
    };
    return {{"ours", ours},
            {"ours-fp32w", ours_fp32},
            {"kernel", with([] { k::set_blas_min_rows(int64_t{1} << 40); }, ours)},
            {"blas", with([] { k::set_blas_min_rows(1); }, ours)},
            {"generic", with([] { k::set_kernels_enabled(false); }, ours)},
            {"bf16-kernel", with(
                                [] {
                                    k::set_matmul_inputs(k::MatmulInputs::bf16);
                                    k::set_bf16_dot_enabled(false);
                                },
                                ours)},
            {"bf16-dot", with([] { k::set_matmul_inputs(k::MatmulInputs::bf16); }, ours)},
            {"bf16-brgemm", with(
                                [] {
                                    k::set_matmul_inputs(k::MatmulInputs::bf16);
                                    k::set_brgemm_enabled(true);
                                },
                                ours)},
            {"brgemm-any", with(  // brgemm at any row count (blas_min_rows 1): the dot kernel's rival below 64
                               [] {
                                   k::set_matmul_inputs(k::MatmulInputs::bf16);
                                   k::set_brgemm_enabled(true);
                                   k::set_blas_min_rows(1);
                               },
                               ours)},
            {"torch-bf16", bf16},
            {"torch-fp32", fp32}};
}

void bench_shape(const Shape & s, const std::vector<int64_t> & rows, double bandwidth) {
    const double bytes = 2.0 * static_cast<double>(s.out * s.in);
    const size_t copies = static_cast<size_t>(std::max(1.0, kCopyBytes / bytes));
    const Weights w = make_weights(s, copies);
    for (bool backward : {false, true}) {
        if (backward && g_forward_only) {
            continue;
        }
        tinkerd::bench::wait_for_quiet(20, 15);  // up to 15 s for the other processes to drop under 20 %
        std::printf("\n%s [%lld,%lld] %s (bf16 weight %.2f MB; bandwidth bound at %.1f GB/s: %.3f ms)\n", s.name,
                    static_cast<long long>(s.out), static_cast<long long>(s.in), backward ? "backward" : "forward",
                    bytes / 1e6, bandwidth, bytes / bandwidth / 1e6);
        std::printf("%6s %-11s %9s %8s %9s %8s\n", "T", "op", "ms", "GB/s", "GFLOP/s", "vs fp32");
        for (int64_t T : rows) {
            const torch::Tensor a = torch::randn({T, backward ? s.out : s.in});
            const auto list = ops(w, backward);
            std::vector<double> seconds;
            for (const auto & [name, op] : list) {
                seconds.push_back(time_op(op, a, T < 64 ? copies : 1));
            }
            for (size_t i = 0; i < list.size(); ++i) {
                const double flops = 2.0 * static_cast<double>(T * s.out * s.in);
                std::printf("%6lld %-11s %9.3f %8.2f %9.1f %8.2f\n", static_cast<long long>(T), list[i].first.c_str(),
                            seconds[i] * 1e3, bytes / seconds[i] / 1e9, flops / seconds[i] / 1e9,
                            seconds.back() / seconds[i]);
            }
        }
    }
}

// quant_forward_rows at T = 1 (the decode step) on random Q4_K / Q6_K / Q8_0 / Q4_1 weights, 1 and `threads`
// threads splitting the output rows; weight copies cycle as above. GB/s of quantised weight bytes read and
// G weights/s, for the exact fp32 kernels and the int8-activation ones (x quantised once per call, included).
// y [out] = x [in] · wᵀ at T = 1 split over the threads: the exact kernels, or x quantised to int8 once then
// the int8 kernels (as quant_matmul's fused path runs them).
void quant_product(tinkerd::gguf::GgmlType type, const float * x, int64_t in, const uint8_t * w, int64_t row_bytes,
                   int64_t out, float * y, bool int8) {
    namespace d = tinkerd::engine::kernels::detail;
    if (!int8) {
        at::parallel_for(0, out, 16, [&](int64_t o0, int64_t o1) {
            d::quant_forward_rows(type, x, 1, in, w, row_bytes, o0, o1, y, out, d::quant_cpu_isa());
        });
        return;
    }
    d::Int8Rows xq;
    d::quantise_rows_int8(type, x, 1, in, xq);
    const d::Int8View xv = d::int8_view(xq, 0, 1);
    const d::Int8Isa isa = d::int8_isa_for(d::quant_cpu_isa());
    at::parallel_for(
        0, out, 16, [&](int64_t o0, int64_t o1) { d::int8_forward_rows(type, xv, w, row_bytes, o0, o1, y, out, isa); });
}

void bench_quant(int threads) {
    namespace d = tinkerd::engine::kernels::detail;
    using tinkerd::gguf::GgmlType;
    std::printf(
        "quant_forward_rows, T = 1, isa %d (0 scalar, 1 avx2, 2 avx512); read bandwidth %.2f GB/s (1 thread), "
        "%.2f GB/s (%d threads)\n",
        static_cast<int>(d::quant_cpu_isa()), tinkerd::bench::ReadBandwidth(size_t{1} << 30, 1).measure(3),
        tinkerd::bench::ReadBandwidth(size_t{1} << 30, threads).measure(3), threads);
    std::printf("int8 path: %s\n", tinkerd::engine::kernels::int8_kernel_path());
    std::printf("%-5s %11s %5s %7s %9s %8s %8s\n", "type", "shape", "path", "threads", "ms", "GB/s", "Gw/s");
    const std::pair<GgmlType, int64_t> types[] = {
        {GgmlType::Q4_K, 144}, {GgmlType::Q6_K, 210}, {GgmlType::Q8_0, 34}, {GgmlType::Q4_1, 20}};
    for (const auto & [type, bb] : types) {
        const int64_t blk = bb == 144 || bb == 210 ? 256 : 32;
        for (const int64_t out : {2048, 4096}) {
            const int64_t in = 2048, row_bytes = in / blk * bb, bytes = out * row_bytes;
            const auto copies = static_cast<size_t>(std::max(1.0, kCopyBytes / static_cast<double>(bytes)));
            // random bytes as weights, each block's leading f16 fields set to 0x2E66 (~0.1; Q6_K: its ql bytes)
            std::vector<uint8_t> w(copies * static_cast<size_t>(bytes));
            for (size_t i = 0; i < w.size(); ++i) {
                w[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
            }
            for (size_t b = 0; b + 4 <= w.size(); b += static_cast<size_t>(bb)) {
                w[b] = w[b + 2] = 0x66, w[b + 1] = w[b + 3] = 0x2E;
            }
            const torch::Tensor x = torch::randn({in}), y = torch::empty({out});
            for (const bool int8 : {false, true}) {
                for (const int n : {1, threads}) {
                    at::set_num_threads(n);
                    const Op op = [&](const torch::Tensor &, size_t c) {
                        quant_product(type, x.data_ptr<float>(), in, w.data() + c * bytes, row_bytes, out,
                                      y.data_ptr<float>(), int8);
                        return y;
                    };
                    const double s = time_op(op, x, copies);
                    std::printf("%-5s %5lldx%-5lld %5s %7d %9.3f %8.2f %8.2f\n",
                                tinkerd::gguf::ggml_type_name(static_cast<uint32_t>(type)).c_str(),
                                static_cast<long long>(out), static_cast<long long>(in), int8 ? "int8" : "fp32", n,
                                s * 1e3, static_cast<double>(bytes) / s / 1e9, static_cast<double>(out * in) / s / 1e9);
                }
            }
        }
    }
    at::set_num_threads(threads);
}

// attention_decode for B sequences of L cached tokens at SmolLM2-135M's heads (9 query heads, 3 kv heads, D 64):
// ms per call and GB/s of K/V read (fp32), the calls cycling through copies of the caches over the LLC.
void bench_attention() {
    constexpr int64_t H = 9, KV = 3, D = 64;
    std::printf("attention_decode, H %lld, KV %lld, D %lld\n%5s %6s %9s %8s\n", static_cast<long long>(H),
                static_cast<long long>(KV), static_cast<long long>(D), "B", "L", "ms", "GB/s");
    for (const int64_t B : {1, 32}) {
        for (const int64_t L : {64, 512, 2048}) {
            const double bytes = 2.0 * 4 * static_cast<double>(B * KV * L * D);
            const auto copies = static_cast<size_t>(std::max(1.0, kCopyBytes / bytes));
            std::vector<std::vector<torch::Tensor>> keys(copies), values(copies);
            for (size_t c = 0; c < copies; ++c) {
                for (int64_t b = 0; b < B; ++b) {
                    keys[c].push_back(torch::randn({KV, L, D}));
                    values[c].push_back(torch::randn({KV, L, D}));
                }
            }
            const torch::Tensor q = torch::randn({B, H, D});
            const std::vector<int64_t> lengths(static_cast<size_t>(B), L);
            const Op op = [&](const torch::Tensor &, size_t c) {
                return k::attention_decode(q, keys[c], values[c], lengths);
            };
            const double s = time_op(op, q, copies);
            std::printf("%5lld %6lld %9.3f %8.2f\n", static_cast<long long>(B), static_cast<long long>(L), s * 1e3,
                        bytes / s / 1e9);
        }
    }
}

// add_lora_rows for T rows of one rank-32 adapter (random factors) at SmolLM2-135M's projections: ms per call and
// GB/s of fp32 factors read (A and B once a call). One adapter, whose 45 MB of factors exceed the LLC.
void bench_lora() {
    namespace e = tinkerd::engine;
    tinkerd::model::ModelConfig c;
    c.vocab_size = 49152, c.hidden_size = 576, c.intermediate_size = 1536, c.n_layers = 30;
    c.n_heads = 9, c.n_kv_heads = 3, c.head_dim = 64;
    e::LoraSpec spec;
    spec.rank = 32, spec.alpha = 32;
    e::Adapter adapter = e::make_adapter(1, spec, c, torch::kFloat32, torch::kCPU, 1);
    for (torch::Tensor & p : adapter.params) {
        p.copy_(torch::randn_like(p) * 0.05);
    }
    std::printf("add_lora_rows, rank 32, one adapter\n%-8s %4s %9s %8s\n", "target", "T", "ms", "GB/s");
    for (const e::LoraTarget target :
         {e::LoraTarget::Q, e::LoraTarget::K, e::LoraTarget::GATE, e::LoraTarget::DOWN, e::LoraTarget::LM_HEAD}) {
        const auto shape = e::projection_shape(c, target);
        const double bytes = 4.0 * 32 * static_cast<double>(shape.in + shape.out);
        for (const int64_t T : {1, 8, 32}) {
            const torch::Tensor x = torch::randn({T, shape.in});
            torch::Tensor y = torch::zeros({T, shape.out});
            const std::vector<e::RowSegment> segments = {{0, T, &adapter}};
            size_t layer_turn = 0;  // cycle through the layers, so the factors come from memory as in decoding
            const Op op = [&](const torch::Tensor &, size_t) {
                const int64_t layer = target == e::LoraTarget::LM_HEAD ? -1 : static_cast<int64_t>(layer_turn++ % 30);
                e::add_lora_rows(y, x, segments, layer, target);
                return y;
            };
            const double s = time_op(op, x, 1);
            std::printf("%-8s %4lld %9.4f %8.2f\n", std::string(e::lora_target_name(target)).c_str(),
                        static_cast<long long>(T), s * 1e3, bytes / s / 1e9);
        }
    }
}

std::vector<int64_t> parse_rows(const char * text) {
    std::vector<int64_t> rows;
    for (std::string item, s = text;; s = s.substr(s.find(',') + 1)) {
        rows.push_back(std::stoll(s.substr(0, s.find(','))));
        if (s.find(',') == std::string::npos) {
            return rows;
        }
    }
}

}  // namespace

// kernel_bench [--rows 1,8,32,64,128,512] [--shape NAME] [--threads N] [--quant | --attention | --lora] [--min-call]
// [--forward]
int main(int argc, char ** argv) {
    std::vector<int64_t> rows = {1, 8, 32, 64, 128, 512};
    std::string only;
    bool quant = false, attention = false, lora = false;
    int threads = static_cast<int>(std::thread::hardware_concurrency());
    for (int i = 1; i < argc; ++i) {
        const std::string key = argv[i];
        if (key == "--quant") {
            quant = true;
        } else if (key == "--attention") {
            attention = true;
        } else if (key == "--lora") {
            lora = true;
        } else if (key == "--min-call") {
            g_min_call = true;
        } else if (key == "--forward") {
            g_forward_only = true;
        } else if (i + 1 < argc && key == "--rows") {
            rows = parse_rows(argv[++i]);
        } else if (i + 1 < argc && key == "--shape") {
            only = argv[++i];
        } else if (i + 1 < argc && key == "--threads") {
            threads = std::stoi(argv[++i]);
        }
    }
    at::set_num_threads(threads);
    torch::NoGradGuard no_grad;
    if (quant || attention || lora) {
        quant ? bench_quant(threads) : attention ? bench_attention() : bench_lora();
        return 0;
    }
    const double bandwidth = tinkerd::bench::ReadBandwidth(size_t{1} << 30, threads).measure(3);
    std::printf("threads %d, kernel isa %d (0 generic, 1 avx2, 2 avx512), read bandwidth %.2f GB/s\n", threads,
                static_cast<int>(k::kernel_isa()), bandwidth);
    const std::vector<Shape> shapes = {{960, 576, "qkv"},   {576, 576, "o_proj"},    {3072, 576, "gate_up"},
                                       {576, 1536, "down"}, {49152, 576, "lm_head"}, {256, 2048, "router"},
                                       {32, 2048, "alpha"}};  // a Qwen3.5-35B-A3B GGUF's F32 router and DeltaNet alpha
    tinkerd::bench::ForeignCpu noise;
    for (const Shape & s : shapes) {
        if (only.empty() || only == s.name) {
            bench_shape(s, rows, bandwidth);
        }
    }
    std::printf("\nother processes used %.0f%% of the cores during the run\n", noise.percent());
    return 0;
}
