// Gated DeltaNet scaling benchmark (issue 12 §4): times the engine's linear-attention mixer (deltanet_mix: causal
// conv + SiLU, the chunked gated delta rule, the gated RMSNorm; no projections) on ONE sequence of each length,
// forward (no grad) and forward + backward (autograd through the chunked rule), fp32, so the growth with the
// sequence length can be read off: the chunked rule is linear in T (chunks of 64, a fixed-size state). Then the
// rule alone (gated_delta_rule) on the inputs transformers' torch_chunk_gated_delta_rule is timed on beside it.
//   delta_rule_bench HK HV DK DV KERNEL STEPS THREADS LEN...   -> one JSON line per length on stdout
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "engine/arch/delta_rule.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace tinkerd::engine;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// Median seconds of `steps` calls of fn after one warm-up call.
template <typename Fn>
double timed(int steps, Fn fn) {
    fn();
    std::vector<double> times;
    for (int i = 0; i < steps; ++i) {
        const auto t0 = Clock::now();
        fn();
        times.push_back(seconds_since(t0));
    }
    return median(times);
}

// Random projected inputs of one T-row sequence (requires_grad when train) and the layer's weights.
struct Case {
    DeltaNetWeights weights;
    DeltaNetInputs inputs;
    SequenceLayout layout;
};

Case make_case(const DeltaNetDims & d, int64_t T, bool train) {
    torch::manual_seed(0);
    Case c;
    const int64_t Cc = d.conv_dim(), Vd = d.value_dim(), HV = d.v_heads;
    auto input = [&](std::vector<int64_t> shape) { return torch::randn(shape).requires_grad_(train); };
    c.inputs = {input({T, Cc}), input({T, Vd}), input({T, HV}), input({T, HV})};           // qkv, z, b, a
    c.weights = {0.5 * torch::randn({Cc, d.conv_kernel}), 0.3 * torch::randn({HV}) + 0.5,  // conv1d, dt_bias
                 0.5 * torch::randn({HV}), 1.0 + 0.1 * torch::randn({d.v_head_dim})};      // A_log, norm
    c.layout.offsets = {0};
    c.layout.lengths = {T};
    return c;
}

// The rule alone on the inputs transformers' torch_chunk_gated_delta_rule takes in qwen35_bench.py: q, k, v at
// HV heads, g = -U(0, 1), beta = U(0, 1), one sequence, every input requiring a gradient (the no-grad guard
// decides).
struct RuleCase {
    torch::Tensor q, k, v, g, beta;  // [T, HV, Dk] x2, [T, HV, Dv], [T, HV] x2
    SequenceLayout layout;
};

RuleCase make_rule_case(const DeltaNetDims & d, int64_t T) {
    torch::manual_seed(0);
    RuleCase c;
    const int64_t HV = d.v_heads;
    c.q = torch::randn({T, HV, d.k_head_dim}).requires_grad_(true);
    c.k = torch::randn({T, HV, d.k_head_dim}).requires_grad_(true);
    c.v = torch::randn({T, HV, d.v_head_dim}).requires_grad_(true);
    c.g = (-torch::rand({T, HV})).requires_grad_(true);
    c.beta = torch::rand({T, HV}).requires_grad_(true);
    c.layout.offsets = {0};
    c.layout.lengths = {T};
    return c;
}

void print_line(const char * layer, int64_t T, double fwd_s, double fwd_bwd_s) {
    std::printf("{\"impl\": \"tinkerd\", \"layer\": \"%s\", \"tokens\": %lld, \"fwd_s\": %.6f, \"fwd_bwd_s\": %.6f}\n",
                layer, static_cast<long long>(T), fwd_s, fwd_bwd_s);
    std::fflush(stdout);
}

}  // namespace

int main(int argc, char ** argv) {
    if (argc < 9) {
        std::fprintf(stderr, "usage: delta_rule_bench HK HV DK DV KERNEL STEPS THREADS LEN...\n");
        return 2;
    }
    DeltaNetDims d;
    d.k_heads = std::atoll(argv[1]);
    d.v_heads = std::atoll(argv[2]);
    d.k_head_dim = std::atoll(argv[3]);
    d.v_head_dim = std::atoll(argv[4]);
    d.conv_kernel = std::atoll(argv[5]);
    const int steps = std::atoi(argv[6]);
    at::set_num_threads(std::atoi(argv[7]));
    for (int i = 8; i < argc; ++i) {
        const int64_t T = std::atoll(argv[i]);
        const Case fwd = make_case(d, T, false);
        const double fwd_s = timed(steps, [&] {
            torch::NoGradGuard no_grad;
            deltanet_mix(fwd.weights, d, fwd.inputs, fwd.layout);
        });
        const Case train = make_case(d, T, true);
        const double train_s = timed(steps, [&] {
            torch::Tensor out = deltanet_mix(train.weights, d, train.inputs, train.layout);  // [T, Vd]
            out.sum().backward();
        });
        print_line("deltanet_mix", T, fwd_s, train_s);
        const RuleCase rule = make_rule_case(d, T);
        const double rule_fwd_s = timed(steps, [&] {
            torch::NoGradGuard no_grad;
            gated_delta_rule(rule.q, rule.k, rule.v, rule.g, rule.beta, rule.layout);
        });
        const double rule_train_s = timed(
            steps, [&] { gated_delta_rule(rule.q, rule.k, rule.v, rule.g, rule.beta, rule.layout).sum().backward(); });
        print_line("gated_delta_rule", T, rule_fwd_s, rule_train_s);
    }
    return 0;
}
