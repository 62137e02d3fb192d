// Chunked target logprobs (target_logprobs.h): a custom autograd function whose forward keeps one
// [rows, V] chunk of logits at a time and whose backward recomputes it, so a step never holds [T, V].
// dlogits = scatter(dpicked at index) − softmax·Σ_k dpicked; dh = dlogits·W, du = dlogits·B, dB = dlogitsᵀ·u.
#include "engine/target_logprobs.h"

#include <algorithm>

#include <ATen/Parallel.h>

#include "engine/kernels/matmul.h"

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

// lse [rows] = logsumexp of each row of logits [rows, V].
void logsumexp_rows(const torch::Tensor & logits, torch::Tensor & lse) {
    for_row_blocks(logits, logits.size(0), [&](int64_t r, int64_t n) {
        torch::Tensor out = lse.narrow(0, r, n);
        torch::logsumexp_out(out, logits.narrow(0, r, n), {1});
    });
}

// d [rows, V] logits -> −softmax(d)·Σ_k dp, in place (lse [rows], dp [rows, Kmax]).
void scaled_softmax_rows(torch::Tensor & d, const torch::Tensor & lse, const torch::Tensor & dp) {
    for_row_blocks(d, d.size(0), [&](int64_t r, int64_t n) {
        d.narrow(0, r, n).sub_(lse.narrow(0, r, n).unsqueeze(1)).exp_().mul_(-dp.narrow(0, r, n).sum(1, true));
    });
}

// Forward over every chunk: picked [T, Kmax] and the per-row logsumexp [T].
std::pair<torch::Tensor, torch::Tensor> forward_chunks(const Head & head, const torch::Tensor & index, int64_t chunk) {
    const int64_t T = head.h.size(0);
    torch::Tensor picked = torch::empty({T, index.size(1)}, head.h.options());  // [T, Kmax]
    torch::Tensor lse = torch::empty({T}, head.h.options());                    // [T]
    for (int64_t r0 = 0; r0 < T; r0 += chunk) {
        const int64_t rows = std::min(chunk, T - r0);
        torch::Tensor logits = chunk_logits(head, r0, rows);  // [rows, V]
        torch::Tensor lse_c = lse.narrow(0, r0, rows);
        logsumexp_rows(logits, lse_c);
        torch::Tensor gathered = logits.gather(1, index.narrow(0, r0, rows));  // [rows, Kmax]
        torch::Tensor picked_c = picked.narrow(0, r0, rows);                   // [rows, Kmax]
        torch::sub_out(picked_c, gathered, lse_c.unsqueeze(1));
    }
    return {picked, lse};
}

// Gradients of one chunk: fills dh rows, du rows of the overlapping segments and adds to their db.
void backward_chunk(const Head & head, int64_t r0, int64_t rows, const torch::Tensor & lse,
                    const torch::Tensor & dpicked, const torch::Tensor & index, tensor_list & grads) {
    torch::Tensor d = chunk_logits(head, r0, rows);  // [rows, V], becomes dlogits in place
    torch::Tensor dp = dpicked.narrow(0, r0, rows);  // [rows, Kmax]
    scaled_softmax_rows(d, lse.narrow(0, r0, rows), dp);
    d.scatter_add_(1, index.narrow(0, r0, rows), dp);
    if (grads[0].defined()) {
        grads[0].narrow(0, r0, rows).copy_(kernels::matmul_weight_backward(d, head.w));  // [rows, C]
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
    // w and index are constants: their gradients are left undefined.
    static torch::Tensor forward(AutogradContext * ctx, torch::TensorList vars, const torch::Tensor & w,
                                 const torch::Tensor & index, std::vector<int64_t> bounds, int64_t chunk) {
        const int64_t S = static_cast<int64_t>(bounds.size() / 2);
        Head head{vars[0], w, bounds, {vars.begin() + 1, vars.begin() + 1 + S}, {vars.begin() + 1 + S, vars.end()}};
        auto [picked, lse] = forward_chunks(head, index, chunk);
        ctx->save_for_backward(vars.vec());
        ctx->saved_data["w"] = w;
        ctx->saved_data["index"] = index;
        ctx->saved_data["lse"] = lse;
        ctx->saved_data["bounds"] = bounds;
        ctx->saved_data["chunk"] = chunk;
        return picked;
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
        for (int64_t r0 = 0; r0 < head.h.size(0); r0 += chunk) {
            backward_chunk(head, r0, std::min(chunk, head.h.size(0) - r0), lse, dpicked, index, grads);
        }
        grads.resize(vars.size() + 4);  // w, index, bounds, chunk: none
        return grads;
    }
};

}  // namespace

torch::Tensor chunked_target_logprobs(const torch::Tensor & h, const torch::Tensor & w,
                                      const std::vector<HeadLoraSegment> & segments, const torch::Tensor & index,
                                      int64_t chunk_rows) {
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
    return TargetLogprobsFunction::apply(torch::TensorList(vars), w, index, bounds, chunk_rows);
}

}  // namespace tinkerd::engine
