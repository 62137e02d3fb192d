// Chunked target logprobs (target_logprobs.h): a custom autograd function whose forward computes one
// [rows, V] chunk of logits at a time and whose backward uses the chunk's softmax, kept from the forward or
// recomputed. dlogits = scatter(dpicked at index) − softmax·Σ_k dpicked; dh = dlogits·W, du = dlogits·B, dB =
// dlogitsᵀ·u.
#include "engine/target_logprobs.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>

#include <ATen/Parallel.h>

#include "common/log.h"
#include "engine/kernels/matmul.h"
#include "model/memory_check.h"

namespace tinkerd::engine {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// The lm_head of one call: h [T, C], w [V, C] and the LoRA segments (their u and b index into the lists).
struct Head {
    torch::Tensor h;
    torch::Tensor w;
    std::vector<int64_t> bounds;  // begin, end per segment
    std::vector<torch::Tensor> u, b;

    int64_t n_segments() const { return static_cast<int64_t>(u.size()); }
};

// Rows [lo, hi) of segment s that fall in the chunk [r0, r0 + rows); lo >= hi when none.
std::pair<int64_t, int64_t> overlap(const Head & head, int64_t s, int64_t r0, int64_t rows) {
    return {std::max(head.bounds[2 * s], r0), std::min(head.bounds[2 * s + 1], r0 + rows)};
}

// Logits [rows, V] of rows [r0, r0 + rows) of h, in h's dtype.
torch::Tensor chunk_logits(const Head & head, int64_t r0, int64_t rows) {
    torch::Tensor logits = kernels::matmul_weight(head.h.narrow(0, r0, rows), head.w).contiguous();  // [rows, V]
    for (int64_t s = 0; s < head.n_segments(); ++s) {
        auto [lo, hi] = overlap(head, s, r0, rows);
        if (lo < hi) {
            torch::Tensor u = head.u[s].narrow(0, lo - head.bounds[2 * s], hi - lo);  // [n, R]
            logits.narrow(0, lo - r0, hi - lo).addmm_(u, head.b[s].t());
        }
    }
    return logits;
}

// Rows per block of the row-wise passes below: a block of [8, V] stays in the per-core cache, where one op over
// the whole [rows, V] chunk would allocate a second [rows, V] temporary (logsumexp) and stream it from memory.
constexpr int64_t ROW_BLOCK = 8;

// f(first, count) over blocks of ROW_BLOCK rows of [0, rows), the blocks split over the threads (CPU); one call
// over all rows elsewhere.
template <typename F>
void for_row_blocks(const torch::Tensor & t, int64_t rows, const F & f) {
    if (!t.is_cpu()) {
        f(0, rows);
        return;
    }
    at::parallel_for(0, (rows + ROW_BLOCK - 1) / ROW_BLOCK, 1, [&](int64_t begin, int64_t end) {
        torch::NoGradGuard no_grad;  // OpenMP workers start with grad mode on
        for (int64_t b = begin; b < end; ++b) {
            f(b * ROW_BLOCK, std::min(ROW_BLOCK, rows - b * ROW_BLOCK));
        }
    });
}

// One pass over the row blocks of a chunk's logits [rows, V]: lse [rows] = logsumexp of each row, picked
// [rows, Kmax] = logit[t, index[t, k]] − lse[t]; with keep_softmax the logits then become their softmax in place,
// exp(logit − lse), exactly what the backward's recompute would form.
void lse_and_pick_rows(torch::Tensor & logits, const torch::Tensor & index, torch::Tensor & lse, torch::Tensor & picked,
                       bool keep_softmax) {
    for_row_blocks(logits, logits.size(0), [&](int64_t r, int64_t n) {
        torch::Tensor block = logits.narrow(0, r, n);  // [n, V]
        torch::Tensor lse_b = lse.narrow(0, r, n);     // [n]
        torch::logsumexp_out(lse_b, block, {1});
        torch::Tensor picked_b = picked.narrow(0, r, n);  // [n, Kmax]
        torch::sub_out(picked_b, block.gather(1, index.narrow(0, r, n)), lse_b.unsqueeze(1));
        if (keep_softmax) {
            block.sub_(lse_b.unsqueeze(1)).exp_();
        }
    });
}

// d [rows, V] -> dlogits in place, in one pass over row blocks: the recomputed logits (lse given; a kept softmax
// passes nullptr) become exp(d − lse); then d = −d·Σ_k dp with dp [rows, Kmax] added at index [rows, Kmax]; and
// where rounded [rows, V] bf16 is defined it receives d rounded, while the block is still in the cache.
void finish_dlogits_rows(torch::Tensor & d, const torch::Tensor * lse, const torch::Tensor & dp,
                         const torch::Tensor & index, torch::Tensor & rounded) {
    for_row_blocks(d, d.size(0), [&](int64_t r, int64_t n) {
        torch::Tensor block = d.narrow(0, r, n);        // [n, V]
        const torch::Tensor dp_b = dp.narrow(0, r, n);  // [n, Kmax]
        if (lse != nullptr) {
            block.sub_(lse->narrow(0, r, n).unsqueeze(1)).exp_();
        }
        block.mul_(-dp_b.sum(1, true)).scatter_add_(1, index.narrow(0, r, n), dp_b);
        if (rounded.defined()) {
            rounded.narrow(0, r, n).copy_(block);
        }
    });
}

// Whether this forward keeps its softmax: only when autograd will record it (grad mode on, as the caller had it,
// and some var requires a gradient), and under automatic when the CPU's [T, V] fits in an eighth of the available
// memory (or the environment forces it).
bool keeps_softmax(HeadSoftmax mode, const std::vector<torch::Tensor> & vars, const torch::Tensor & w) {
    const torch::Tensor & h = vars[0];  // [T, C]
    const bool wants_grad =
        torch::GradMode::is_enabled() &&
        std::any_of(vars.begin(), vars.end(), [](const torch::Tensor & v) { return v.requires_grad(); });
    if (!wants_grad || mode == HeadSoftmax::recompute) {
        return false;
    }
    static const char * forced = std::getenv("TINKERD_KEEP_HEAD_SOFTMAX");
    if (mode == HeadSoftmax::keep || (forced != nullptr && std::string(forced) == "1")) {
        return true;
    }
    if ((forced != nullptr && std::string(forced) == "0") || !h.is_cpu()) {
        return false;
    }
    const uint64_t bytes =
        static_cast<uint64_t>(h.size(0)) * static_cast<uint64_t>(w.size(0)) * static_cast<uint64_t>(h.element_size());
    const uint64_t available = model::available_memory_bytes();
    const bool keep = available > 0 && bytes <= available / 8;
    static std::atomic<bool> logged{false};
    if (!keep && !logged.exchange(true)) {
        LOG_INF("engine",
                "lm_head: the softmax of %lld rows (%.2f GiB) is recomputed in the backward, not kept (%.2f GiB "
                "available); logged once",
                static_cast<long long>(h.size(0)), bytes / 1073741824.0, available / 1073741824.0);
    }
    return keep;
}

// Forward over every chunk: picked [T, Kmax], the per-row logsumexp [T] and, with keep_softmax, each chunk's
// softmax [rows, V] (else an empty list).
struct ForwardResult {
    torch::Tensor picked, lse;
    std::vector<torch::Tensor> softmax;
};

ForwardResult forward_chunks(const Head & head, const torch::Tensor & index, int64_t chunk, bool keep_softmax) {
    const int64_t T = head.h.size(0);
    ForwardResult out;
    out.picked = torch::empty({T, index.size(1)}, head.h.options());  // [T, Kmax]
    out.lse = torch::empty({T}, head.h.options());                    // [T]
    for (int64_t r0 = 0; r0 < T; r0 += chunk) {
        const int64_t rows = std::min(chunk, T - r0);
        torch::Tensor logits = chunk_logits(head, r0, rows);  // [rows, V]
        torch::Tensor lse_c = out.lse.narrow(0, r0, rows);
        torch::Tensor picked_c = out.picked.narrow(0, r0, rows);
        lse_and_pick_rows(logits, index.narrow(0, r0, rows), lse_c, picked_c, keep_softmax);
        if (keep_softmax) {
            out.softmax.push_back(logits);
        }
    }
    return out;
}

// Gradients of one chunk: fills dh rows, du rows of the overlapping segments and adds to their db. softmax is
// the chunk's kept softmax [rows, V] (used up in place) or undefined (the logits are recomputed).
void backward_chunk(const Head & head, int64_t r0, int64_t rows, const torch::Tensor & lse,
                    const torch::Tensor & dpicked, const torch::Tensor & index, torch::Tensor softmax,
                    tensor_list & grads) {
    const torch::Tensor dp = dpicked.narrow(0, r0, rows);  // [rows, Kmax]
    const bool kept = softmax.defined();
    torch::Tensor d = kept ? std::move(softmax) : chunk_logits(head, r0, rows);  // [rows, V], becomes dlogits
    torch::Tensor rounded;  // [rows, V] bf16: d as the dh product rounds it, where that product takes it
    if (grads[0].defined() && kernels::backward_takes_rounded(d, head.w)) {
        rounded = torch::empty(d.sizes(), d.options().dtype(torch::kBFloat16));
    }
    const torch::Tensor lse_c = lse.narrow(0, r0, rows);
    finish_dlogits_rows(d, kept ? nullptr : &lse_c, dp, index.narrow(0, r0, rows), rounded);
    if (grads[0].defined()) {
        grads[0].narrow(0, r0, rows).copy_(kernels::matmul_weight_backward_rounded(d, rounded, head.w));  // [rows, C]
    }
    const int64_t S = head.n_segments();
    for (int64_t s = 0; s < S; ++s) {
        auto [lo, hi] = overlap(head, s, r0, rows);
        if (lo >= hi) {
            continue;
        }
        torch::Tensor d_seg = d.narrow(0, lo - r0, hi - lo);  // [n, V]
        const int64_t u0 = lo - head.bounds[2 * s];
        if (grads[1 + s].defined()) {
            torch::Tensor du = grads[1 + s].narrow(0, u0, hi - lo);  // [n, R]
            torch::mm_out(du, d_seg, head.b[s]);
        }
        if (grads[1 + S + s].defined()) {
            grads[1 + S + s].addmm_(d_seg.t(), head.u[s].narrow(0, u0, hi - lo));  // [V, R]
        }
    }
}

struct TargetLogprobsFunction : public torch::autograd::Function<TargetLogprobsFunction> {
    // vars: h, then every segment's u, then every segment's b (one list, so the gradients line up).
    // w and index are constants: their gradients are left undefined. keep_softmax: keeps_softmax's answer.
    static torch::Tensor forward(AutogradContext * ctx, torch::TensorList vars, const torch::Tensor & w,
                                 const torch::Tensor & index, std::vector<int64_t> bounds, int64_t chunk,
                                 bool keep_softmax) {
        const int64_t S = static_cast<int64_t>(bounds.size() / 2);
        Head head{vars[0], w, bounds, {vars.begin() + 1, vars.begin() + 1 + S}, {vars.begin() + 1 + S, vars.end()}};
        ForwardResult out = forward_chunks(head, index, chunk, keep_softmax);
        ctx->save_for_backward(vars.vec());
        ctx->saved_data["w"] = w;
        ctx->saved_data["index"] = index;
        ctx->saved_data["lse"] = out.lse;
        ctx->saved_data["bounds"] = bounds;
        ctx->saved_data["chunk"] = chunk;
        if (!out.softmax.empty()) {
            ctx->saved_data["softmax"] = out.softmax;
        }
        return out.picked;
    }

    // The kept softmax chunks, taken out of ctx (the backward uses them up in place; a second backward, with
    // retain_graph, finds none and recomputes), or an empty list.
    static std::vector<torch::Tensor> take_softmax(AutogradContext * ctx) {
        auto it = ctx->saved_data.find("softmax");
        if (it == ctx->saved_data.end()) {
            return {};
        }
        std::vector<torch::Tensor> chunks = it->second.toTensorVector();
        ctx->saved_data.erase(it);
        return chunks;
    }

    static tensor_list backward(AutogradContext * ctx, tensor_list grad_outputs) {
        const tensor_list vars = ctx->get_saved_variables();
        const std::vector<int64_t> bounds = ctx->saved_data["bounds"].toIntVector();
        const int64_t chunk = ctx->saved_data["chunk"].toInt();
        const int64_t S = static_cast<int64_t>(bounds.size() / 2);
        Head head{vars[0],
                  ctx->saved_data["w"].toTensor(),
                  bounds,
                  {vars.begin() + 1, vars.begin() + 1 + S},
                  {vars.begin() + 1 + S, vars.end()}};
        tensor_list grads(vars.size());
        for (size_t i = 0; i < vars.size(); ++i) {
            if (ctx->needs_input_grad(i)) {
                grads[i] = i <= static_cast<size_t>(S) ? torch::empty_like(vars[i]) : torch::zeros_like(vars[i]);
            }
        }
        const torch::Tensor lse = ctx->saved_data["lse"].toTensor();
        const torch::Tensor index = ctx->saved_data["index"].toTensor();
        const torch::Tensor dpicked = grad_outputs[0].contiguous();  // [T, Kmax]
        std::vector<torch::Tensor> softmax = take_softmax(ctx);
        for (int64_t r0 = 0, c = 0; r0 < head.h.size(0); r0 += chunk, ++c) {
            torch::Tensor kept = softmax.empty() ? torch::Tensor() : std::move(softmax[c]);
            backward_chunk(head, r0, std::min(chunk, head.h.size(0) - r0), lse, dpicked, index, std::move(kept), grads);
        }
        grads.resize(vars.size() + 5);  // w, index, bounds, chunk, keep_softmax: none
        return grads;
    }
};

}  // namespace

torch::Tensor chunked_target_logprobs(const torch::Tensor & h, const torch::Tensor & w,
                                      const std::vector<HeadLoraSegment> & segments, const torch::Tensor & index,
                                      int64_t chunk_rows, HeadSoftmax softmax) {
    TORCH_CHECK(h.dim() == 2 && index.dim() == 2 && index.size(0) == h.size(0), "target_logprobs: bad shapes");
    TORCH_CHECK(chunk_rows > 0, "target_logprobs: chunk_rows must be positive");
    std::vector<torch::Tensor> vars = {h};
    std::vector<int64_t> bounds;
    for (const HeadLoraSegment & s : segments) {
        vars.push_back(s.u);
        bounds.insert(bounds.end(), {s.begin, s.end});
    }
    for (const HeadLoraSegment & s : segments) {
        vars.push_back(s.b);
    }
    const bool keep = keeps_softmax(softmax, vars, w);
    return TargetLogprobsFunction::apply(torch::TensorList(vars), w, index, bounds, chunk_rows, keep);
}

}  // namespace tinkerd::engine
