// Profiles one engine training step (forward_backward + optim_step) with libtorch's kineto profiler (input
// shapes recorded) and writes a chrome trace whose events carry their input shapes; bench/summarise_profile.py
// prints the self time per op kind (or per op and shapes). With STEPS: no profiler, STEPS timed steps
// (wall, CPU, page faults). Usage: profile_step MODEL_DIR auto|bf16|fp32 [equal|mixed|gpu|sample [THREADS [STEPS]]]
// TINKERD_BENCH_DEVICE=cuda runs on the GPU: the GPU kernels are summarised (gpu_profile.h; the trace only with
// TINKERD_PROFILE_TRACE=1); "gpu" is 8 x 512 tokens with an A/B of TINKERD_GPU_PATHS first, "sample" profiles
// decode at batch 1 and 32 instead.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <set>
#include <string>
#include <sys/resource.h>
#include <vector>

#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/torch.h>

#include "bench_batches.h"
#include "engine/engine.h"
#include "gpu_profile.h"

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
            << ",\"dur\":" << e.durationNs() / 1e3 << ",\"tid\":" << e.startThreadId() << ",\"pid\":\""
            << (tinkerd::bench::is_gpu_event(e) ? "GPU" : "CPU") << "\",\"args\":{\"shapes\":\"" << shapes_text(shapes)
            << "\"}}";
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

// The profiler's activities on device: the CPU's ops, and the GPU's kernels when it runs there.
std::set<torch::profiler::impl::ActivityType> activities(const std::string & device) {
    using torch::profiler::impl::ActivityType;
    if (tinkerd::bench::is_gpu(device)) {
        return {ActivityType::CPU, ActivityType::CUDA};
    }
    return {ActivityType::CPU};
}

// Runs f under the kineto profiler, then writes the trace to path and (on a GPU) prints its kernels.
template <typename F>
void profiled(const std::string & device, const std::string & path, F && f) {
    namespace impl = torch::profiler::impl;
    const impl::ProfilerConfig config(impl::ProfilerState::KINETO, /*report_input_shapes=*/true);
    prof::prepareProfiler(config, activities(device));
    prof::enableProfiler(config, activities(device));
    const auto t0 = std::chrono::steady_clock::now();
    f();
    tinkerd::bench::sync_device(device);
    const double wall = seconds_since(t0);
    const auto result = prof::disableProfiler();
    if (tinkerd::bench::is_gpu(device)) {
        tinkerd::bench::print_gpu_kernels(*result, wall, 30);
        if (std::getenv("TINKERD_PROFILE_TRACE") == nullptr) {  // a GPU trace is large and slow to write
            std::fprintf(stderr, "%.3f s profiled; TINKERD_PROFILE_TRACE=1 writes the trace\n", wall);
            return;
        }
    }
    write_trace(*result, path);
    std::fprintf(stderr, "trace written to %s (%.3f s profiled); summarise with bench/summarise_profile.py\n",
                 path.c_str(), wall);
}

// `batch` sampling requests of the adapter: 32 random prompt tokens each, 64 new tokens at temperature 1.
std::vector<tinkerd::engine::SampleRequest> sample_requests(int64_t batch, int64_t vocab,
                                                            tinkerd::engine::AdapterId adapter) {
    std::vector<tinkerd::engine::SampleRequest> requests(batch);
    const auto prompts = tinkerd::bench::make_batch(std::vector<int64_t>(batch, 32), vocab, adapter, 3);
    for (int64_t r = 0; r < batch; ++r) {
        requests[r].adapter = adapter;
        requests[r].prompt = prompts.datums[r].tokens;
        requests[r].params.max_tokens = 64;
        requests[r].params.seed = 1;
        requests[r].params.stop_at_eos = false;
    }
    return requests;
}

// Decode at batch 1 and 32: a warm-up, a timed run, then a profiled run (trace per batch size).
int profile_sampling(tinkerd::engine::Engine & engine, tinkerd::engine::AdapterId id, const std::string & device) {
    for (int64_t batch : {int64_t{1}, int64_t{32}}) {
        const auto requests = sample_requests(batch, engine.config().vocab_size, id);
        (void)engine.sample(requests);
        const auto t0 = std::chrono::steady_clock::now();
        const auto results = engine.sample(requests);
        const double wall = seconds_since(t0);
        int64_t tokens = 0;
        for (const auto & r : results) {
            if (!r.ok()) {
                std::fprintf(stderr, "profile_step: sample failed: %s\n", r.error().message.c_str());
                return 1;
            }
            for (const auto & s : r->sequences) {
                tokens += static_cast<int64_t>(s.tokens.size());
            }
        }
        std::printf("sample batch %lld: %lld tokens in %.3f s = %.1f tok/s\n", static_cast<long long>(batch),
                    static_cast<long long>(tokens), wall, tokens / wall);
        profiled(device, "/tmp/tinkerd_sample_" + std::to_string(batch) + ".json",
                 [&] { (void)engine.sample(requests); });
    }
    return 0;
}

// Timing mode: STEPS steps, no profiler (STEPS < 0: -STEPS optim_steps, each after an 8-token forward_backward).
void timed_steps(tinkerd::engine::Engine & engine, tinkerd::engine::AdapterId id,
                 const tinkerd::engine::ForwardBackwardInput & input, int steps, const std::string & device) {
    const auto small = tinkerd::bench::make_batch({8}, engine.config().vocab_size, id, 2);  // writes every gradient
    const auto optim_step = [&] {
        (void)engine.optim_step(id, {});
        tinkerd::bench::sync_device(device);  // a GPU runs it asynchronously
    };
    for (int i = 0; i < -steps; ++i) {
        (void)engine.forward_backward({small}, true);
        timed("optim_step", optim_step);
    }
    for (int i = 0; i < steps; ++i) {
        timed("forward_backward", [&] { (void)engine.forward_backward({input}, true); });
        timed("optim_step", optim_step);
    }
}

// The logprobs of a forward pass (no backward), all datums' values in one list.
std::vector<double> forward_logprobs(tinkerd::engine::Engine & engine,
                                     const tinkerd::engine::ForwardBackwardInput & in) {
    auto results = engine.forward_backward({in}, false);
    std::vector<double> all;
    if (results.empty() || !results[0].ok()) {
        std::fprintf(stderr, "profile_step: forward failed\n");
        return all;
    }
    for (const auto & t : results[0]->logprobs) {
        const std::vector<double> values = tinkerd::engine::host_tensor_values(t);
        all.insert(all.end(), values.begin(), values.end());
    }
    return all;
}

// On a GPU, the reference paths (TINKERD_GPU_PATHS=reference: an fp32 lm_head, bf16 results, unfused RMSNorm)
// against the fast ones in this process: the largest logprob difference of one forward, then `steps` timed steps of
// each.
void gpu_paths_ab(tinkerd::engine::Engine & engine, tinkerd::engine::AdapterId id,
                  const tinkerd::engine::ForwardBackwardInput & input, const std::string & device) {
    ::setenv("TINKERD_GPU_PATHS", "reference", 1);
    const std::vector<double> reference = forward_logprobs(engine, input);
    ::unsetenv("TINKERD_GPU_PATHS");
    const std::vector<double> fast = forward_logprobs(engine, input);
    double worst = 0, mean = 0;
    for (size_t i = 0; i < reference.size() && i < fast.size(); ++i) {
        worst = std::max(worst, std::abs(reference[i] - fast[i]));
        mean += std::abs(reference[i] - fast[i]) / static_cast<double>(reference.size());
    }
    std::printf("gpu paths: fast vs reference logprobs over %zu tokens: max |diff| %.3g, mean %.3g\n", reference.size(),
                worst, mean);
    for (const char * paths : {"reference", "fast"}) {
        if (std::string(paths) == "reference") {
            ::setenv("TINKERD_GPU_PATHS", "reference", 1);
        }
        std::printf("-- %s paths\n", paths);
        std::fflush(stdout);
        timed_steps(engine, id, input, 2, device);
        ::unsetenv("TINKERD_GPU_PATHS");
    }
}

const std::vector<int64_t> & lengths_of(const std::string & batch) {
    static const std::vector<int64_t> gpu(8, 512);  // docs/gpu.md's training row: 8 x 512 tokens
    return batch == "mixed" ? tinkerd::bench::MIXED_LENGTHS : batch == "gpu" ? gpu : tinkerd::bench::EQUAL_LENGTHS;
}

}  // namespace

int main(int argc, char ** argv) {
    if (argc < 3) {
        std::fprintf(stderr,
                     "usage: profile_step MODEL_DIR auto|bf16|fp32 [equal|mixed|gpu|sample [THREADS [STEPS]]]\n"
                     "  TINKERD_BENCH_DEVICE=cuda: on the GPU\n");
        return 2;
    }
    tinkerd::engine::EngineOptions options;
    options.n_threads = argc > 4 ? std::stoi(argv[4]) : 2;
    options.device = tinkerd::bench::bench_device();
    const std::string dtype = argv[2], batch = argc > 3 ? argv[3] : "equal";
    const bool ab = tinkerd::bench::is_gpu(options.device) && batch == "gpu" && argc <= 5;
    if (ab) {
        ::setenv("TINKERD_GPU_PATHS", "reference", 1);  // the reference's lm_head copy is made at load
    }
    options.dtype = dtype == "bf16"   ? tinkerd::engine::ComputeDType::BF16
                    : dtype == "fp32" ? tinkerd::engine::ComputeDType::FP32
                                      : tinkerd::engine::ComputeDType::AUTO;
    auto loaded = tinkerd::engine::Engine::load(argv[1], options);
    if (!loaded.ok()) {
        std::fprintf(stderr, "profile_step: %s\n", loaded.error().message.c_str());
        return 1;
    }
    auto & engine = *loaded.value();
    if (ab) {
        ::unsetenv("TINKERD_GPU_PATHS");  // set only for loading: the reference's lm_head copy
    }
    if (!tinkerd::bench::is_gpu(options.device) &&
        !tinkerd::bench::choose_bench_kernels(engine.config(), options.n_threads)) {
        return 2;
    }
    auto id = engine.create_adapter({32, 32.0, true, true, batch != "gpu", 1}).value();  // gpu: as gpu_bench.py
    if (batch == "sample") {
        return profile_sampling(engine, id, options.device);
    }
    auto input = tinkerd::bench::make_batch(lengths_of(batch), engine.config().vocab_size, id, 1);
    (void)engine.forward_backward({input}, true);  // warm-up
    (void)engine.optim_step(id, {});
    if (argc > 5) {
        timed_steps(engine, id, input, std::stoi(argv[5]), options.device);
        return 0;
    }
    if (ab) {
        gpu_paths_ab(engine, id, input, options.device);
    }
    profiled(options.device, "/tmp/tinkerd_profile.json", [&] {
        const auto t0 = std::chrono::steady_clock::now();
        (void)engine.forward_backward({input}, true);
        const double fb = seconds_since(t0);
        const auto t1 = std::chrono::steady_clock::now();
        (void)engine.optim_step(id, {});
        tinkerd::bench::sync_device(options.device);
        std::fprintf(stderr, "profiled: forward_backward %.3f s, optim_step %.1f ms\n", fb, 1e3 * seconds_since(t1));
    });
    return 0;
}
