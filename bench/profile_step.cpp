// Profiles one engine training step (forward_backward + optim_step) with libtorch's kineto profiler (input
// shapes recorded) and writes a chrome trace whose events carry their input shapes; bench/summarise_profile.py
// prints the self time per op kind (or per op and shapes). With STEPS: no profiler, STEPS timed steps
// (wall, CPU, page faults). Usage: profile_step MODEL_DIR auto|bf16|fp32 [equal|mixed [THREADS [STEPS]]]
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <string>
#include <sys/resource.h>
#include <vector>

#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/torch.h>

#include "bench_batches.h"
#include "engine/engine.h"

namespace {

namespace prof = torch::autograd::profiler;

std::string shapes_text(const std::vector<std::vector<int64_t>> & shapes) {
    std::string out;
    for (const auto & s : shapes) {
        out += "[";
        for (size_t i = 0; i < s.size(); ++i) {
            out += (i ? "," : "") + std::to_string(s[i]);
        }
        out += "]";
    }
    return out;
}

// One chrome-trace "X" event per op the kineto profiler saw, args.shapes = its input shapes.
void write_trace(const prof::ProfilerResult & result, const std::string & path) {
    std::ofstream out(path);
    out << std::fixed << std::setprecision(3) << "[";
    bool first = true;
    for (const prof::KinetoEvent & e : result.events()) {
        std::vector<std::vector<int64_t>> shapes(e.shapes().begin(), e.shapes().end());
        out << (first ? "" : ",\n") << "{\"name\":\"" << e.name() << "\",\"ph\":\"X\",\"ts\":" << e.startNs() / 1e3
            << ",\"dur\":" << e.durationNs() / 1e3 << ",\"tid\":" << e.startThreadId()
            << ",\"pid\":\"CPU\",\"args\":{\"shapes\":\"" << shapes_text(shapes) << "\"}}";
        first = false;
    }
    out << "]\n";
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Wall, user and system CPU seconds and minor page faults of one call (load-independent counts beside the wall).
template <typename F>
void timed(const char * what, F && f) {
    rusage r0{}, r1{};
    ::getrusage(RUSAGE_SELF, &r0);
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const double wall = seconds_since(t0);
    ::getrusage(RUSAGE_SELF, &r1);
    const auto secs = [](const timeval & a, const timeval & b) {
        return (b.tv_sec - a.tv_sec) + 1e-6 * (b.tv_usec - a.tv_usec);
    };
    std::printf("%s wall %.4f s user %.3f s sys %.3f s minflt %ld\n", what, wall, secs(r0.ru_utime, r1.ru_utime),
                secs(r0.ru_stime, r1.ru_stime), r1.ru_minflt - r0.ru_minflt);
}

}  // namespace

int main(int argc, char ** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: profile_step MODEL_DIR auto|bf16|fp32 [equal|mixed [THREADS [STEPS]]]\n");
        return 2;
    }
    tinkerd::engine::EngineOptions options;
    options.n_threads = argc > 4 ? std::stoi(argv[4]) : 2;
    const std::string dtype = argv[2];
    options.dtype = dtype == "bf16"   ? tinkerd::engine::ComputeDType::BF16
                    : dtype == "fp32" ? tinkerd::engine::ComputeDType::FP32
                                      : tinkerd::engine::ComputeDType::AUTO;
    auto engine = tinkerd::engine::Engine::load(argv[1], options).value();
    if (!tinkerd::bench::choose_bench_kernels(engine->config(), options.n_threads)) {
        return 2;
    }
    auto id = engine->create_adapter({32, 32.0, true, true, true, 1}).value();
    const bool mixed = argc > 3 && std::string(argv[3]) == "mixed";
    const auto & lengths = mixed ? tinkerd::bench::MIXED_LENGTHS : tinkerd::bench::EQUAL_LENGTHS;
    auto input = tinkerd::bench::make_batch(lengths, engine->config().vocab_size, id, 1);
    (void)engine->forward_backward({input}, true);  // warm-up
    (void)engine->optim_step(id, {});
    if (argc > 5) {  // timing mode: STEPS steps, no profiler (STEPS < 0: -STEPS optim_steps, each after an 8-token
        // forward_backward)
        const int steps = std::stoi(argv[5]);
        const auto small =
            tinkerd::bench::make_batch({8}, engine->config().vocab_size, id, 2);  // writes every gradient
        for (int i = 0; i < -steps; ++i) {
            (void)engine->forward_backward({small}, true);
            timed("optim_step", [&] { (void)engine->optim_step(id, {}); });
        }
        for (int i = 0; i < steps; ++i) {
            timed("forward_backward", [&] { (void)engine->forward_backward({input}, true); });
            timed("optim_step", [&] { (void)engine->optim_step(id, {}); });
        }
        return 0;
    }
    const std::string trace = "/tmp/tinkerd_profile.json";
    namespace impl = torch::profiler::impl;
    const impl::ProfilerConfig config(impl::ProfilerState::KINETO, /*report_input_shapes=*/true);
    prof::prepareProfiler(config, {impl::ActivityType::CPU});
    prof::enableProfiler(config, {impl::ActivityType::CPU});
    auto t0 = std::chrono::steady_clock::now();
    (void)engine->forward_backward({input}, true);
    const double fb = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    (void)engine->optim_step(id, {});
    const double optim = seconds_since(t0);
    write_trace(*prof::disableProfiler(), trace);
    std::fprintf(stderr, "profiled: forward_backward %.3f s, optim_step %.1f ms\n", fb, 1e3 * optim);
    std::fprintf(stderr, "trace written to %s; summarise with bench/summarise_profile.py\n", trace.c_str());
    return 0;
}
