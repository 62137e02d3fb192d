// Sampling benchmark (issue 4): greedy decode tokens/s at several batch sizes for the base model, one
// LoRA adapter and 8 adapters mixed in one batch, prefill tokens/s and time to first token, each next
// to the weight-streaming bound from the read bandwidth measured in the same run. Progress goes to
// stderr, one JSON line per measurement to stdout (bench/sample_report.py turns them into a table).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_batches.h"
#include "engine/decode_layers.h"
#include "engine/engine.h"
#include "foreign_cpu.h"
#include "read_bandwidth.h"

namespace {

using Clock = std::chrono::steady_clock;
using tinkerd::engine::AdapterId;
using tinkerd::engine::Engine;
using tinkerd::engine::SampleRequest;

struct Options {
    std::string model_dir, dtype = "auto";
    int64_t prompt_len = 32, max_tokens = 128, check_tokens = 32;
    int repeats = 3, threads = 0, bw_passes = 3, retries = 1;
    double max_foreign = 5, quiet_wait_s = 60;  // retry a measurement when others used > max_foreign % CPU
    size_t bw_mib = 1024;
    double lora_bytes = 4;  // bytes per LoRA parameter as the engine stores them (fp32 in both modes)
    std::vector<int64_t> batches = {1, 8, 32}, prefill = {256, 512};
    // KIND-unfused: KIND with the decode layers' parallel region off (decode_layers.h): the torch path
    std::vector<std::string> kinds = {"base", "base-unfused", "adapter", "adapter-unfused", "mixed8"};
};

// A kind's model ("base", "adapter" or "mixed8") and whether its "-unfused" suffix turns the region off.
struct KindParts {
    std::string what;
    bool unfused = false;
};

KindParts split_kind(const std::string & kind) {
    const std::string suffix = "-unfused";
    const bool unfused =
        kind.size() > suffix.size() && kind.compare(kind.size() - suffix.size(), suffix.size(), suffix) == 0;
    return {unfused ? kind.substr(0, kind.size() - suffix.size()) : kind, unfused};
}

struct Run {
    double seconds = 0;
    int64_t tokens = 0;   // tokens generated over all sequences
    int64_t stopped = 0;  // sequences that ended before max_tokens (EOS)
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

template <typename T>
std::vector<T> parse_list(const std::string & text) {
    std::vector<T> out;
    std::stringstream ss(text);
    for (std::string item; std::getline(ss, item, ',');) {
        if constexpr (std::is_same_v<T, std::string>) {
            out.push_back(item);
        } else {
            out.push_back(std::stoll(item));
        }
    }
    return out;
}

Options parse_options(int argc, char ** argv) {
    Options o;
    o.model_dir = argv[1];
    o.dtype = argv[2];
    for (int i = 3; i + 1 < argc; i += 2) {
        const std::string key = argv[i], value = argv[i + 1];
        if (key == "--max-tokens") {
            o.max_tokens = std::stoll(value);
        } else if (key == "--prompt") {
            o.prompt_len = std::stoll(value);
        } else if (key == "--repeats") {
            o.repeats = std::stoi(value);
        } else if (key == "--threads") {
            o.threads = std::stoi(value);
        } else if (key == "--bw-mib") {
            o.bw_mib = std::stoull(value);
        } else if (key == "--lora-bytes") {
            o.lora_bytes = std::stod(value);
        } else if (key == "--batches") {
            o.batches = parse_list<int64_t>(value);
        } else if (key == "--prefill") {
            o.prefill = parse_list<int64_t>(value);
        } else if (key == "--max-foreign") {
            o.max_foreign = std::stod(value);
        } else if (key == "--retries") {
            o.retries = std::stoi(value);
        } else if (key == "--kinds") {
            o.kinds = parse_list<std::string>(value);
            for (const std::string & kind : o.kinds) {
                const std::string what = split_kind(kind).what;
                if (what != "base" && what != "adapter" && what != "mixed8") {
                    std::fprintf(stderr, "sample_bench: unknown kind %s\n", kind.c_str());
                    std::exit(2);
                }
            }
        } else {
            std::fprintf(stderr, "sample_bench: unknown option %s\n", key.c_str());
            std::exit(2);
        }
    }
    if (o.threads <= 0) {
        o.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    }
    return o;
}

// Parameters streamed per decode step: every layer matrix and norm, the final norm and the lm_head once
// (with tied embeddings the embedding matrix is that lm_head; the embedding lookup reads only B rows).
double base_params(const tinkerd::model::ModelConfig & c) {
    const double C = c.hidden_size, F = c.intermediate_size, q = c.n_heads * c.head_dim, kv = c.n_kv_heads * c.head_dim;
    const double layer = C * q + 2 * C * kv + q * C + 3 * C * F + 2 * C + (c.attention_bias ? q + 2 * kv : 0);
    return layer * c.n_layers + C + double(c.vocab_size) * C;
}

// LoRA parameters of one adapter on every target (q,k,v,o,gate,up,down per layer, plus lm_head).
double lora_params(const tinkerd::model::ModelConfig & c, int64_t rank) {
    const double C = c.hidden_size, F = c.intermediate_size, q = c.n_heads * c.head_dim, kv = c.n_kv_heads * c.head_dim;
    const double layer = (C + q) + 2 * (C + kv) + (q + C) + 2 * (C + F) + (F + C);
    return rank * (layer * c.n_layers + C + double(c.vocab_size));
}

std::vector<int64_t> random_prompt(std::mt19937_64 & rng, int64_t len, int64_t vocab) {
    std::uniform_int_distribution<int64_t> token(3, vocab - 1);
    std::vector<int64_t> prompt(len);
    for (int64_t & t : prompt) {
        t = token(rng);
    }
    return prompt;
}

// A rank-32 adapter on every target whose A and B are all small nonzero random values.
AdapterId random_adapter(Engine & engine, uint64_t seed) {
    const AdapterId id = engine.create_adapter({32, 32.0, true, true, true, seed}).value();
    auto weights = engine.export_adapter(id, false).value();
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> value(0.0f, 0.02f);
    for (auto & [name, tensor] : weights) {
        int64_t n = 1;
        for (int64_t d : tensor.shape) {
            n *= d;
        }
        std::vector<float> v(n);
        for (float & x : v) {
            x = value(rng);
        }
        tensor = tinkerd::engine::make_host_tensor_f32(tensor.shape, v);
    }
    auto status = engine.import_adapter(id, weights, false);
    if (!status.ok()) {
        std::fprintf(stderr, "sample_bench: import_adapter: %s\n", status.error().message.c_str());
        std::exit(1);
    }
    return id;
}

Run run_once(Engine & engine, const std::vector<SampleRequest> & requests) {
    Run run;
    const auto t0 = Clock::now();
    auto results = engine.sample(requests);
    run.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    for (size_t i = 0; i < results.size(); ++i) {
        if (!results[i].ok()) {
            std::fprintf(stderr, "sample_bench: sample failed: %s\n", results[i].error().message.c_str());
            std::exit(1);
        }
        for (const auto & seq : results[i]->sequences) {
            run.tokens += static_cast<int64_t>(seq.tokens.size());
            run.stopped += seq.tokens.size() < static_cast<size_t>(requests[i].params.max_tokens);
        }
    }
    return run;
}

// One warm-up run of each variant, then `repeats` rounds that alternate the variants (so that drift
// and noise hit them alike); per variant the median time and the tokens of its last run.
std::vector<Run> timed(Engine & engine, const std::vector<std::vector<SampleRequest>> & variants, int repeats) {
    std::vector<Run> last(variants.size());
    std::vector<std::vector<double>> times(variants.size());
    for (const auto & v : variants) {
        run_once(engine, v);
    }
    for (int i = 0; i < repeats; ++i) {
        for (size_t k = 0; k < variants.size(); ++k) {
            last[k] = run_once(engine, variants[k]);
            times[k].push_back(last[k].seconds);
        }
    }
    for (size_t k = 0; k < variants.size(); ++k) {
        last[k].seconds = median(times[k]);
    }
    return last;
}

// b greedy requests with distinct prompts; row r uses adapters[r % adapters.size()].
std::vector<SampleRequest> make_requests(const Options & o, int64_t batch, const std::vector<AdapterId> & adapters,
                                         int64_t vocab, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<SampleRequest> requests(batch);
    for (int64_t r = 0; r < batch; ++r) {
        requests[r].adapter = adapters[r % adapters.size()];
        requests[r].prompt = random_prompt(rng, o.prompt_len, vocab);
        requests[r].params.max_tokens = o.max_tokens;
        requests[r].params.temperature = 0.0;
        requests[r].params.seed = 1;
    }
    return requests;
}

// Redraws the prompt of every row that greedy decoding ends early (EOS), so that each timed run
// generates the full max_tokens per row; gives up after a few tries (tokens are counted anyway).
void avoid_eos(Engine & engine, std::vector<SampleRequest> & requests, int64_t vocab, uint64_t seed) {
    std::mt19937_64 rng(seed ^ 0x5eed);
    for (int attempt = 0; attempt < 4; ++attempt) {
        auto results = engine.sample(requests);
        bool all_full = true;
        for (size_t i = 0; i < results.size(); ++i) {
            const auto & seq = results[i].value().sequences[0];
            if (seq.tokens.size() < static_cast<size_t>(requests[i].params.max_tokens)) {
                requests[i].prompt = random_prompt(rng, requests[i].prompt.size(), vocab);
                all_full = false;
            }
        }
        if (all_full) {
            return;
        }
    }
    std::fprintf(stderr, "sample_bench: some rows still stop at EOS; tokens are counted as produced\n");
}

struct Context {
    Options options;
    Engine * engine = nullptr;
    tinkerd::bench::ReadBandwidth * bandwidth = nullptr;
    std::string dtype;
    double weight_bytes = 0, adapter_bytes = 0;
};

struct Measured {
    std::vector<Run> runs;  // per variant
    double gbs = 0, foreign_pct = 1e9;
};

// timed() after waiting for a quiet machine, next to a fresh bandwidth measurement; repeated (up to
// --retries times) while other processes used more than --max-foreign % of the cores; keeps the quietest.
Measured quiet_timed(Context & ctx, const std::vector<std::vector<SampleRequest>> & variants) {
    const Options & o = ctx.options;
    Measured best;
    for (int attempt = 0; attempt <= o.retries; ++attempt) {
        tinkerd::bench::wait_for_quiet(o.max_foreign, o.quiet_wait_s);
        Measured m;
        m.gbs = ctx.bandwidth->measure(o.bw_passes);
        const tinkerd::bench::ForeignCpu noise;
        m.runs = timed(*ctx.engine, variants, o.repeats);
        m.foreign_pct = noise.percent();
        if (m.foreign_pct < best.foreign_pct) {
            best = m;
        }
        if (m.foreign_pct <= o.max_foreign) {
            break;
        }
        std::fprintf(stderr, "  (others used %.0f%% of the CPU during that measurement%s)\n", m.foreign_pct,
                     attempt < o.retries ? "; measuring again" : "; keeping the quietest try");
    }
    return best;
}

// b greedy requests to max_tokens, and the same requests to one token (prefill + first token).
std::vector<std::vector<SampleRequest>> decode_variants(Context & ctx, int64_t batch,
                                                        const std::vector<AdapterId> & adapters) {
    const int64_t vocab = ctx.engine->config().vocab_size;
    auto requests = make_requests(ctx.options, batch, adapters, vocab, 1000 + batch);
    avoid_eos(*ctx.engine, requests, vocab, batch);
    auto first = requests;
    for (SampleRequest & r : first) {
        r.params.max_tokens = 1;
    }
    return {requests, first};
}

// Decode tok/s = tokens after the first / (t_T - t_1), against batch x (bandwidth / bytes per step).
void decode_case(Context & ctx, const std::string & kind, int64_t batch, const std::vector<AdapterId> & adapters) {
    const Options & o = ctx.options;
    const int64_t distinct = split_kind(kind).what == "base" ? 0 : std::min<int64_t>(batch, adapters.size());
    const int64_t fused_before = tinkerd::engine::decode_layers_runs();
    const Measured m = quiet_timed(ctx, decode_variants(ctx, batch, adapters));
    const int64_t fused_steps = tinkerd::engine::decode_layers_runs() - fused_before;  // decode_layers.h's region
    const Run &full = m.runs[0], &one = m.runs[1];
    const double step_bytes = ctx.weight_bytes + distinct * ctx.adapter_bytes;
    const double bound = batch * m.gbs * 1e9 / step_bytes;
    // Noise can make t_T <= t_1 on a busy machine: report 0 rather than a negative rate.
    const double decode_s = full.seconds - one.seconds;
    const double tps = decode_s > 0 ? (full.tokens - one.tokens) / decode_s : 0;
    const double ms_step = 1e3 * decode_s / std::max<double>(1, o.max_tokens - 1);
    std::fprintf(stderr,
                 "  %s %-7s b=%-3lld decode %7.1f tok/s  bound %6.1f (%4.1f%%)  %6.1f ms/step  prefill %.0f ms"
                 "  (others used %.0f%% CPU; %lld steps in the fused region)\n",
                 ctx.dtype.c_str(), kind.c_str(), static_cast<long long>(batch), tps, bound, 100 * tps / bound, ms_step,
                 1e3 * one.seconds, m.foreign_pct, static_cast<long long>(fused_steps));
    std::printf(
        "{\"bench\":\"sample\",\"impl\":\"tinkerd\",\"dtype\":\"%s\",\"kind\":\"%s\",\"batch\":%lld,"
        "\"adapters\":%lld,\"prompt_tokens\":%lld,\"max_tokens\":%lld,\"tokens\":%lld,\"early_stops\":%lld,"
        "\"tokens_per_s\":%.2f,\"bound_tokens_per_s\":%.2f,\"pct_of_bound\":%.1f,\"ms\":%.1f,\"first_ms\":%.1f,"
        "\"ms_per_step\":%.2f,\"step_mb\":%.1f,\"bw_gbs\":%.2f,\"foreign_cpu_pct\":%.1f,\"fused_steps\":%lld}\n",
        ctx.dtype.c_str(), kind.c_str(), static_cast<long long>(batch), static_cast<long long>(distinct),
        static_cast<long long>(o.prompt_len), static_cast<long long>(o.max_tokens), static_cast<long long>(full.tokens),
        static_cast<long long>(full.stopped), tps, bound, 100 * tps / bound, 1e3 * full.seconds, 1e3 * one.seconds,
        ms_step, step_bytes / 1e6, m.gbs, m.foreign_pct, static_cast<long long>(fused_steps));
    std::fflush(stdout);
}

// Prefill of one len-token prompt with max_tokens=1: tokens/s and the call's wall time (time to first token).
void prefill_case(Context & ctx, int64_t len) {
    const auto & c = ctx.engine->config();
    std::mt19937_64 rng(7 + len);
    SampleRequest r;
    r.prompt = random_prompt(rng, len, c.vocab_size);
    r.params.max_tokens = 1;
    r.params.temperature = 0.0;
    const Measured m = quiet_timed(ctx, {{r}});
    const Run & run = m.runs[0];
    const double foreign_pct = m.foreign_pct;
    // Useful FLOPs as llamacpp-anchor.md counts them: layer matmuls plus causal attention, no lm_head.
    const double layers = base_params(c) - double(c.vocab_size) * c.hidden_size;
    const double gflops =
        len * (2 * layers + 2.0 * c.n_heads * c.head_dim * c.n_layers * (len + 1)) / run.seconds / 1e9;
    std::fprintf(stderr,
                 "  %s prefill %lld tokens: %.0f tok/s, time to first token %.0f ms (%.0f GFLOP/s)"
                 "  (others used %.0f%% CPU)\n",
                 ctx.dtype.c_str(), static_cast<long long>(len), len / run.seconds, 1e3 * run.seconds, gflops,
                 foreign_pct);
    std::printf(
        "{\"bench\":\"sample\",\"impl\":\"tinkerd\",\"dtype\":\"%s\",\"kind\":\"prefill\",\"batch\":1,"
        "\"prompt_tokens\":%lld,\"tokens_per_s\":%.1f,\"ms\":%.1f,\"ttft_ms\":%.1f,\"gflops\":%.1f,"
        "\"foreign_cpu_pct\":%.1f}\n",
        ctx.dtype.c_str(), static_cast<long long>(len), len / run.seconds, 1e3 * run.seconds, 1e3 * run.seconds, gflops,
        foreign_pct);
    std::fflush(stdout);
}

// One greedy base-model sequence, printed with its prompt so that pytorch_sample_baseline.py can
// check that its own greedy loop produces the same tokens.
void greedy_check(Context & ctx) {
    std::mt19937_64 rng(4242);
    SampleRequest r;
    r.prompt = random_prompt(rng, ctx.options.prompt_len, ctx.engine->config().vocab_size);
    r.params.max_tokens = ctx.options.check_tokens;
    r.params.temperature = 0.0;
    auto out = ctx.engine->sample({r});
    auto join = [](const std::vector<int64_t> & v) {
        std::string s;
        for (int64_t t : v) {
            s += s.empty() ? "" : ",";
            s += std::to_string(t);
        }
        return s;
    };
    std::printf(
        "{\"bench\":\"sample\",\"impl\":\"tinkerd\",\"dtype\":\"%s\",\"kind\":\"greedy_check\",\"prompt\":[%s],"
        "\"tokens\":[%s]}\n",
        ctx.dtype.c_str(), join(r.prompt).c_str(), join(out[0].value().sequences[0].tokens).c_str());
    std::fflush(stdout);
}

// The decode layers' region on or off for one case, on again afterwards (also when the case throws).
struct DecodeLayersSetting {
    explicit DecodeLayersSetting(bool enabled) { tinkerd::engine::set_decode_layers_enabled(enabled); }
    ~DecodeLayersSetting() { tinkerd::engine::set_decode_layers_enabled(true); }
    DecodeLayersSetting(const DecodeLayersSetting &) = delete;
    DecodeLayersSetting & operator=(const DecodeLayersSetting &) = delete;
};

// Decode for every kind x batch; the 8 random adapters are made only when a kind needs them.
void decode_cases(Context & ctx) {
    const auto & kinds = ctx.options.kinds;
    const auto has = [&](const char * what) {
        return std::any_of(kinds.begin(), kinds.end(),
                           [&](const std::string & k) { return split_kind(k).what == what; });
    };
    const size_t n_adapters = has("mixed8") ? 8 : has("adapter") ? 1 : 0;
    std::vector<AdapterId> mixed;
    for (uint64_t i = 0; i < n_adapters; ++i) {
        mixed.push_back(random_adapter(*ctx.engine, 100 + i));
    }
    for (int64_t batch : ctx.options.batches) {  // a batch's kinds back to back, so that they compare
        for (const std::string & kind : kinds) {
            const auto [what, unfused] = split_kind(kind);
            if (what == "mixed8" && batch == 1) {
                continue;  // one row cannot mix adapters
            }
            const std::vector<AdapterId> adapters = what == "base" ? std::vector<AdapterId>{tinkerd::engine::BASE_MODEL}
                                                    : what == "adapter" ? std::vector<AdapterId>{mixed.at(0)}
                                                                        : mixed;
            const DecodeLayersSetting fused(!unfused);
            decode_case(ctx, kind, batch, adapters);
        }
    }
}

}  // namespace

int main(int argc, char ** argv) {
    if (argc < 3) {
        std::fprintf(stderr,
                     "usage: sample_bench MODEL_DIR auto|fp32|bf16 [--max-tokens 128] [--prompt 32] [--repeats 3]\n"
                     "       [--batches 1,8,32] [--kinds base,base-unfused,adapter,adapter-unfused,mixed8(-unfused)] "
                     "[--prefill 256,512] [--threads N]\n"
                     "       [--bw-mib 1024] [--lora-bytes 4] [--max-foreign 5] [--retries 1]\n"
                     "  --prefill 0 / --batches 0 skip that part; a measurement during which other processes used\n"
                     "  more than --max-foreign %% of the cores is retried (after waiting up to 60 s for quiet)\n");
        return 2;
    }
    Context ctx;
    ctx.options = parse_options(argc, argv);
    tinkerd::engine::EngineOptions eo;
    eo.n_threads = ctx.options.threads;
    eo.dtype = ctx.options.dtype == "bf16"   ? tinkerd::engine::ComputeDType::BF16
               : ctx.options.dtype == "fp32" ? tinkerd::engine::ComputeDType::FP32
                                             : tinkerd::engine::ComputeDType::AUTO;
    auto engine = Engine::load(ctx.options.model_dir, eo);
    if (!engine.ok()) {
        std::fprintf(stderr, "sample_bench: %s\n", engine.error().message.c_str());
        return 1;
    }
    ctx.engine = engine->get();
    if (!tinkerd::bench::choose_bench_kernels(ctx.engine->config(), ctx.options.threads)) {
        return 2;
    }
    ctx.dtype = ctx.engine->compute_dtype_name();
    const double bytes = ctx.dtype == "bf16" ? 2 : ctx.dtype == "fp32" ? 4 : 8;
    ctx.weight_bytes = base_params(ctx.engine->config()) * bytes;
    ctx.adapter_bytes = lora_params(ctx.engine->config(), 32) * ctx.options.lora_bytes;
    tinkerd::bench::ReadBandwidth bandwidth(ctx.options.bw_mib << 20, ctx.options.threads);
    ctx.bandwidth = &bandwidth;
    const double gbs = bandwidth.measure(ctx.options.bw_passes);
    std::fprintf(stderr,
                 "sample_bench: %s, %d threads, read bandwidth %.1f GB/s (%zu MiB, best of %d), %.1f MB weights "
                 "+ %.1f MB per adapter per decode step\n",
                 ctx.dtype.c_str(), ctx.options.threads, gbs, bandwidth.bytes() >> 20, ctx.options.bw_passes,
                 ctx.weight_bytes / 1e6, ctx.adapter_bytes / 1e6);
    std::printf(
        "{\"bench\":\"sample\",\"impl\":\"bandwidth\",\"dtype\":\"%s\",\"kind\":\"read\",\"threads\":%d,"
        "\"bw_gbs\":%.2f,\"array_mib\":%zu,\"weight_mb\":%.1f,\"adapter_mb\":%.1f}\n",
        ctx.dtype.c_str(), ctx.options.threads, gbs, bandwidth.bytes() >> 20, ctx.weight_bytes / 1e6,
        ctx.adapter_bytes / 1e6);
    greedy_check(ctx);
    if (!(ctx.options.batches.size() == 1 && ctx.options.batches[0] == 0)) {
        decode_cases(ctx);
    }
    for (int64_t len : ctx.options.prefill) {
        if (len > 0) {
            prefill_case(ctx, len);
        }
    }
    return 0;
}
