// run_decode_layers (decode_layers.h): per layer, phases separated by team barriers —
//   norm (rows) | qkv product (weight rows) | per (sequence, kv head): bias, q/k norm, RoPE, cache write,
//   attention | o product | residual + norm | gate/up product | SiLU·up | down product — then the residual.
// With adapter rows each product's phase also runs the rows' u = scale·A·x, and a phase of y += B·u follows it.
// Each phase computes what the torch path computes for the same elements with the same code.
#include "engine/decode_layers.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <omp.h>

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "engine/decode_lora.h"
#include "engine/fused_ops.h"
#include "engine/host_access.h"
#include "engine/kernels/attention_decode.h"
#include "model/lora_layout.h"

namespace tinkerd::engine {

namespace {

using kernels::RowRangeProduct;
using model::LoraTarget;

constexpr int64_t kRowBlock = 8;        // weight rows per block of a product's split (any size gives the same bits)
constexpr int64_t kSigmoidAlign = 64;   // torch's vectorised loops step 2 vectors (<= 32 floats) from a range start
constexpr int64_t kTorchGrain = 32768;  // at::internal::GRAIN_SIZE: TensorIterator's split of an elementwise op
static_assert(kTorchGrain == at::internal::GRAIN_SIZE, "the sigmoid's split follows TensorIterator's grain");
#if !AT_PARALLEL_OPENMP
#error \
    "decode_layers assumes at::parallel_for's OpenMP backend (the torch wheels'): its region and torch's are one pool"
#endif

// fp32 -> bf16 bits, round to nearest even, as c10::BFloat16 (NaN -> the canonical quiet NaN).
inline uint16_t bf16_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof(u));
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return 0x7fc0;
    }
    return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

inline float bf16_value(uint16_t bits) {
    const uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, sizeof(f));
    return f;
}

// x [n] as product p takes it: bf16 bits into x16 (bf16_dot), or rounded to bf16 values in place (fp32_rows on
// rounded inputs); fp32_rows on exact inputs reads x as it is.
void round_for(const RowRangeProduct & p, float * x, uint16_t * x16, int64_t n) {
    if (p.kind == RowRangeProduct::Kind::bf16_dot) {
        for (int64_t i = 0; i < n; ++i) {
            x16[i] = bf16_bits(x[i]);
        }
    } else if (p.rounds_inputs) {
        for (int64_t i = 0; i < n; ++i) {
            x[i] = bf16_value(bf16_bits(x[i]));
        }
    }
}

// This thread's share [o0, o1) of `out` weight rows, in blocks of kRowBlock.
std::pair<int64_t, int64_t> row_share(int64_t out, int tid, int team) {
    const int64_t blocks = (out + kRowBlock - 1) / kRowBlock;
    const int64_t b0 = blocks * tid / team, b1 = blocks * (tid + 1) / team;
    return {std::min(out, b0 * kRowBlock), std::min(out, b1 * kRowBlock)};
}

// The step's buffers (B rows each) and everything the phases read.
struct Step {
    Step(const DecodeShape & shape, const DecodeProducts & products, const std::vector<DecodeSequence> & sequences,
         const float * cos_rows, const float * sin_rows, float * residual)
        : s(shape),
          p(products),
          seqs(sequences),
          cos(cos_rows),
          sin(sin_rows),
          x(residual),
          B(static_cast<int64_t>(sequences.size())),
          QKV((shape.H + 2 * shape.KV) * shape.D),
          h(B * s.C),
          qkv(B * QKV),
          q(B * s.H * s.D),
          attn(B * s.H * s.D),
          o(B * s.C),
          up(B * s.F),
          act(B * s.F),
          down(B * s.C),
          h16(B * s.C),
          attn16(B * s.H * s.D),
          act16(B * s.F),
          gate(torch::empty({B, s.F}, torch::kFloat)),
          sig(torch::empty({B, s.F}, torch::kFloat)),
          scores(omp_get_max_threads()),
          tmp(omp_get_max_threads(), std::vector<float>(s.D)) {}
    // Buffers for adapter rows: the products' inputs before they are rounded for the base product (the LoRA
    // factors read them exact, as in the torch path), and every row's u per target.
    void make_lora_buffers(int64_t max_rank) {
        lora = DecodeLoraRows(B, max_rank);
        h_exact.resize(B * s.C);
        attn_exact.resize(B * s.H * s.D);
        act_exact.resize(B * s.F);
    }
    const DecodeShape & s;
    const DecodeProducts & p;
    const std::vector<DecodeSequence> & seqs;
    const float *cos, *sin;                         // [B, D]
    float * x;                                      // [B, C] residual stream
    int64_t B, QKV;                                 // rows; H*D + 2*KV*D
    int64_t torch_threads = at::get_num_threads();  // read outside the region: how torch would split the sigmoid
    std::vector<float> h, qkv, q, attn, o, up, act, down;
    std::vector<uint16_t> h16, attn16, act16;
    torch::Tensor gate, sig;                            // [B, F]: the sigmoid runs as torch's op (bit-equal)
    std::vector<std::vector<float>> scores, tmp;        // per thread: [G, L] and [D]
    DecodeLoraRows lora;                                // the rows' u (decode_lora.h); rank 0: no adapter rows
    std::vector<float> h_exact, attn_exact, act_exact;  // [B, C], [B, H*D], [B, F]
};

// Keeps src [n] exact in exact (when the step has adapter rows) before round_for rounds it for the base product.
void keep_exact(const Step & st, const float * src, std::vector<float> & exact, int64_t at, int64_t n) {
    if (st.lora.rank_stride > 0) {
        std::memcpy(exact.data() + at, src, sizeof(float) * n);
    }
}

// y rows [this thread's share] of x [B, in] · w [out, in]ᵀ.
void product_share(const Step & st, const RowRangeProduct & p, const uint16_t * x16, const float * x32, int64_t in,
                   const uint16_t * w, int64_t out, float * y, int tid, int team) {
    const auto [o0, o1] = row_share(out, tid, team);
    if (o0 < o1) {
        p.run(x16, x32, st.B, in, w, o0, o1, y, out);
    }
}

// gate and up [B, F] from the stacked w_gate_up [2F, C]: the share's rows below F go to gate, the rest to up.
void gate_up_share(Step & st, const DecodeLayerWeights & w, int tid, int team) {
    const int64_t F = st.s.F, C = st.s.C;
    const auto [o0, o1] = row_share(2 * F, tid, team);
    float * gate = host_data<float>(st.gate, "decode_layers");
    if (o0 < std::min(o1, F)) {
        st.p.gate_up.run(st.h16.data(), st.h.data(), st.B, C, w.w_gate_up, o0, std::min(o1, F), gate, F);
    }
    if (std::max(o0, F) < o1) {
        st.p.gate_up.run(st.h16.data(), st.h.data(), st.B, C, w.w_gate_up + F * C, std::max(o0, F) - F, o1 - F,
                         st.up.data(), F);
    }
}

// One head's d values from src (+ bias), RMSNorm'd by norm when given, rotated into dst.
void prepare_head(const Step & st, const float * src, const float * bias, const float * norm, int64_t b, float * tmp,
                  float * dst) {
    const int64_t D = st.s.D;
    for (int64_t i = 0; i < D; ++i) {
        tmp[i] = bias ? src[i] + bias[i] : src[i];
    }
    if (norm) {
        rms_norm_row_f32(tmp, norm, tmp, D, st.s.eps);
    }
    rope_token_f32(tmp, st.cos + b * D, st.sin + b * D, dst, 1, D);
}

// Sequence b, kv head g: its k (to the cache), v (to the cache) and G query heads, then their attention into
// attn, rounded for the o product. bias: the qkv bias when the LoRA phase has not added it already.
void attend_item(Step & st, const DecodeLayerWeights & w, const float * bias, int64_t layer, int64_t b, int64_t g,
                 int tid) {
    const DecodeShape & s = st.s;
    const int64_t D = s.D, G = s.H / s.KV, HD = s.H * s.D;
    const DecodeSequence & seq = st.seqs[b];
    const float * row = st.qkv.data() + b * st.QKV;
    float * k_slab = seq.keys[layer] + g * seq.capacity * D;
    float * v_slab = seq.values[layer] + g * seq.capacity * D;
    float * tmp = st.tmp[tid].data();
    prepare_head(st, row + HD + g * D, bias ? bias + HD + g * D : nullptr, w.k_norm, b, tmp, k_slab + seq.length * D);
    const int64_t v_at = HD + s.KV * D + g * D;
    for (int64_t i = 0; i < D; ++i) {
        v_slab[seq.length * D + i] = bias ? row[v_at + i] + bias[v_at + i] : row[v_at + i];
    }
    const int64_t q0 = (b * s.H + g * G) * D;  // query heads g·G .. g·G + G - 1 of sequence b
    for (int64_t j = 0; j < G; ++j) {
        const int64_t at = (g * G + j) * D;
        prepare_head(st, row + at, bias ? bias + at : nullptr, w.q_norm, b, tmp, st.q.data() + q0 + j * D);
    }
    const int64_t L = seq.length + 1;
    st.scores[tid].resize(static_cast<size_t>(G * L));
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
    kernels::detail::attend_kv_head(st.q.data() + q0, k_slab, v_slab, L, G, D, scale, st.scores[tid].data(),
                                    st.attn.data() + q0);
    keep_exact(st, st.attn.data() + q0, st.attn_exact, q0, G * D);
    round_for(st.p.o, st.attn.data() + q0, st.attn16.data() + q0, G * D);
}

// The ranges torch's sigmoid over the whole [n] runs, each as one vectorised loop from its start: one range below
// kTorchGrain elements or with one torch thread (TensorIterator::for_each), else at::parallel_for's chunks for
// torch_threads threads (ATen/ParallelOpenMP.h: min(threads, n / grain rounded up) chunks of n / chunks).
std::vector<std::pair<int64_t, int64_t>> torch_sigmoid_chunks(int64_t n, int64_t torch_threads) {
    if (n < kTorchGrain || torch_threads <= 1) {
        return {{0, n}};
    }
    const int64_t chunks = std::min<int64_t>(torch_threads, (n + kTorchGrain - 1) / kTorchGrain);
    const int64_t size = (n + chunks - 1) / chunks;
    std::vector<std::pair<int64_t, int64_t>> out;
    for (int64_t c = 0; c < chunks && c * size < n; ++c) {
        out.emplace_back(c * size, std::min(n, (c + 1) * size));
    }
    return out;
}

// This thread's ranges of the SiLU·up elements, so that every element runs torch's vectorised or scalar code as
// torch would: torch's chunk c on thread c % team; a single chunk shared at multiples of kSigmoidAlign (the
// vectorised loop steps whole vectors from a range's start, so such sub-ranges compute every element alike).
std::vector<std::pair<int64_t, int64_t>> sigmoid_ranges(int64_t n, int64_t torch_threads, int tid, int team) {
    const auto chunks = torch_sigmoid_chunks(n, torch_threads);
    std::vector<std::pair<int64_t, int64_t>> mine;
    if (chunks.size() > 1) {
        for (size_t c = tid; c < chunks.size(); c += team) {
            mine.push_back(chunks[c]);
        }
        return mine;
    }
    const int64_t groups = (n + kSigmoidAlign - 1) / kSigmoidAlign;
    const int64_t e0 = std::min(n, groups * tid / team * kSigmoidAlign);
    const int64_t e1 = std::min(n, groups * (tid + 1) / team * kSigmoidAlign);
    if (e0 < e1) {
        mine.emplace_back(e0, e1);
    }
    return mine;
}

// One thread's SiLU·up ranges (sigmoid_ranges) with their views of gate and sig, made once per step: per layer only
// the sigmoid op itself runs (making the views cost as much again).
struct SwigluRanges {
    struct Range {
        int64_t e0, e1;
        torch::Tensor gate, sig;  // [e1 - e0] contiguous views
    };
    SwigluRanges(Step & st, int tid, int team) {
        for (const auto & [e0, e1] : sigmoid_ranges(st.B * st.s.F, st.torch_threads, tid, team)) {
            ranges.push_back(
                {e0, e1, st.gate.view({-1}).narrow(0, e0, e1 - e0), st.sig.view({-1}).narrow(0, e0, e1 - e0)});
        }
    }
    std::vector<Range> ranges;
};

void swiglu_share(Step & st, SwigluRanges & mine) {
    const float *g = host_data<const float>(st.gate, "decode_layers"),
                *sg = host_data<const float>(st.sig, "decode_layers");
    for (SwigluRanges::Range & r : mine.ranges) {
        at::sigmoid_out(r.sig, r.gate);
        for (int64_t i = r.e0; i < r.e1; ++i) {
            st.act[i] = g[i] * sg[i] * st.up[i];
        }
        keep_exact(st, st.act.data() + r.e0, st.act_exact, r.e0, r.e1 - r.e0);
        round_for(st.p.down, st.act.data() + r.e0, st.act16.data() + r.e0, r.e1 - r.e0);
    }
}

// x[b] += add[b] (when add), then h[b] = RMSNorm(x[b]) · norm, rounded for product p; rows split by thread.
void residual_norm_rows(Step & st, const float * add, const float * norm, const RowRangeProduct & p, int tid,
                        int team) {
    const int64_t C = st.s.C;
    for (int64_t b = tid; b < st.B; b += team) {
        float * xr = st.x + b * C;
        if (add) {
            for (int64_t i = 0; i < C; ++i) {
                xr[i] = xr[i] + add[b * C + i];
            }
        }
        if (norm) {
            rms_norm_row_f32(xr, norm, st.h.data() + b * C, C, st.s.eps);
            keep_exact(st, st.h.data() + b * C, st.h_exact, b * C, C);
            round_for(p, st.h.data() + b * C, st.h16.data() + b * C, C);
        }
    }
}

// Which of the layer's projection groups have adapter factors for some row (each adds a phase of y += B·u).
struct LayerLora {
    bool qkv, o, gate_up, down;
};

LayerLora layer_lora(const Step & st, const DecodeLayerWeights & w) {
    using T = LoraTarget;
    const auto has = [&](T t0, T t1) {
        return group_has_lora(w, st.B, static_cast<int>(t0), static_cast<int>(t1) + 1);
    };
    return {has(T::Q, T::V), has(T::O, T::O), has(T::GATE, T::UP), has(T::DOWN, T::DOWN)};
}

constexpr int TQ = static_cast<int>(LoraTarget::Q), TO = static_cast<int>(LoraTarget::O),
              TGATE = static_cast<int>(LoraTarget::GATE), TDOWN = static_cast<int>(LoraTarget::DOWN);

// The deltas of q, k, v (after the bias, as the torch path adds it), then of o.
void qkv_lora_outputs(Step & st, const DecodeLayerWeights & w, int tid, int team) {
    const int64_t HD = st.s.H * st.s.D, KVD = st.s.KV * st.s.D;
    const float * bias = w.b_qkv;
    const LoraOutput outs[3] = {{st.qkv.data(), st.QKV, HD, bias},
                                {st.qkv.data() + HD, st.QKV, KVD, bias ? bias + HD : nullptr},
                                {st.qkv.data() + HD + KVD, st.QKV, KVD, bias ? bias + HD + KVD : nullptr}};
    lora_out_share(st.lora, w, TQ, TQ + 3, outs, tid, team);
}

void run_layer(Step & st, const DecodeLayerWeights & w, int64_t layer, const float * pending_down, SwigluRanges & silu,
               int tid, int team) {
    const DecodeShape & s = st.s;
    const LayerLora lora = layer_lora(st, w);
    residual_norm_rows(st, pending_down, w.input_norm, st.p.qkv, tid, team);  // the last layer's MLP output first
#pragma omp barrier
    product_share(st, st.p.qkv, st.h16.data(), st.h.data(), s.C, w.w_qkv, st.QKV, st.qkv.data(), tid, team);
    if (lora.qkv) {
        lora_rank_share(st.lora, w, TQ, TQ + 3, st.h_exact.data(), s.C, tid, team);
#pragma omp barrier
        qkv_lora_outputs(st, w, tid, team);
    }
#pragma omp barrier
    for (int64_t item = tid; item < st.B * s.KV; item += team) {
        attend_item(st, w, lora.qkv ? nullptr : w.b_qkv, layer, item / s.KV, item % s.KV, tid);
    }
#pragma omp barrier
    product_share(st, st.p.o, st.attn16.data(), st.attn.data(), s.H * s.D, w.wo, s.C, st.o.data(), tid, team);
    if (lora.o) {
        lora_rank_share(st.lora, w, TO, TO + 1, st.attn_exact.data(), s.H * s.D, tid, team);
#pragma omp barrier
        const LoraOutput out{st.o.data(), s.C, s.C, nullptr};
        lora_out_share(st.lora, w, TO, TO + 1, &out, tid, team);
    }
#pragma omp barrier
    residual_norm_rows(st, st.o.data(), w.post_norm, st.p.gate_up, tid, team);
#pragma omp barrier
    gate_up_share(st, w, tid, team);
    if (lora.gate_up) {
        lora_rank_share(st.lora, w, TGATE, TGATE + 2, st.h_exact.data(), s.C, tid, team);
#pragma omp barrier
        const LoraOutput outs[2] = {{host_data<float>(st.gate, "decode_layers"), s.F, s.F, nullptr},
                                    {st.up.data(), s.F, s.F, nullptr}};
        lora_out_share(st.lora, w, TGATE, TGATE + 2, outs, tid, team);
    }
#pragma omp barrier
    swiglu_share(st, silu);
#pragma omp barrier
    product_share(st, st.p.down, st.act16.data(), st.act.data(), s.F, w.w_down, s.C, st.down.data(), tid, team);
    if (lora.down) {
        lora_rank_share(st.lora, w, TDOWN, TDOWN + 1, st.act_exact.data(), s.F, tid, team);
#pragma omp barrier
        const LoraOutput out{st.down.data(), s.C, s.C, nullptr};
        lora_out_share(st.lora, w, TDOWN, TDOWN + 1, &out, tid, team);
    }
#pragma omp barrier
}

std::atomic<bool> & enabled_setting() {
    static std::atomic<bool> enabled{true};
    return enabled;
}

std::atomic<int64_t> & runs_counter() {
    static std::atomic<int64_t> runs{0};
    return runs;
}

}  // namespace

void set_decode_layers_enabled(bool enabled) {
    enabled_setting().store(enabled);
}
bool decode_layers_enabled() {
    return enabled_setting().load(std::memory_order_relaxed);
}
int64_t decode_layers_runs() {
    return runs_counter().load(std::memory_order_relaxed);
}

bool decode_layers_shape_ok(const DecodeShape & s) {
    return s.C > 0 && s.KV > 0 && s.D > 0 && s.D % 2 == 0 && s.H % s.KV == 0 && s.F > 0 && s.F % kSigmoidAlign == 0;
}

void run_decode_layers(const DecodeShape & shape, const std::vector<DecodeLayerWeights> & layers,
                       const DecodeProducts & products, const std::vector<DecodeSequence> & seqs, const float * cos,
                       const float * sin, float * x) {
    TORCH_CHECK(decode_layers_shape_ok(shape) && !seqs.empty(), "run_decode_layers: unsupported shape");
    Step st(shape, products, seqs, cos, sin, x);
    int64_t max_rank = 0;
    for (const DecodeLayerWeights & w : layers) {
        TORCH_CHECK(w.lora.empty() || static_cast<int64_t>(w.lora.size()) == DECODE_LORA_TARGETS * st.B,
                    "run_decode_layers: LoRA table");
        for (const DecodeLora & f : w.lora) {
            max_rank = std::max(max_rank, f.a ? f.rank : 0);
        }
    }
    if (max_rank > 0) {
        st.make_lora_buffers(max_rank);
    }
    runs_counter().fetch_add(1, std::memory_order_relaxed);
#pragma omp parallel
    {
        torch::NoGradGuard no_grad;  // the sigmoid's op on workers, which start with grad mode on
        const int tid = omp_get_thread_num(), team = omp_get_num_threads();
        SwigluRanges silu(st, tid, team);
        for (size_t layer = 0; layer < layers.size(); ++layer) {
            run_layer(st, layers[layer], static_cast<int64_t>(layer), layer == 0 ? nullptr : st.down.data(), silu, tid,
                      team);
        }
        residual_norm_rows(st, st.down.data(), nullptr, products.qkv, tid, team);
    }
}

}  // namespace tinkerd::engine
