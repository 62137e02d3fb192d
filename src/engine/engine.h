// Engine: the public, torch-free face of the training engine. It owns one frozen base model and
// many LoRA adapters over it, and runs packed forward / forward_backward, AdamW steps and adapter
// import/export. Not thread-safe: one engine thread calls it (see ARCHITECTURE.md).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/model_config.h"
#include "model/safetensors.h"

namespace tinkerd::engine {

// Numeric mode of the base weights. AUTO = the checkpoint's own dtype (BF16 -> bf16, F32 -> fp32,
// F16 -> fp32). FP64 is for gradient checks in tests only.
enum class ComputeDType { AUTO, FP32, BF16, FP64 };

// --base-quant q8_0 / q4_k: the base's product matrices quantised to GGUF blocks at load (CPU only;
// kernels/quant_matmul.h). Q4_K needs rows of a multiple of 256 values; other rows take Q8_0 (multiple of 32),
// and rows of neither stay as they are.
enum class LoadQuant { NONE, Q8_0, Q4_K };

struct EngineOptions {
    ComputeDType dtype = ComputeDType::AUTO;
    int n_threads = 0;                          // intra-op threads; 0 = every core
    int64_t kv_cache_bytes = int64_t{4} << 30;  // sampling KV cache budget; when full, the newest request waits
    // torch device string: "cpu", "cuda", "cuda:1" (CUDA builds), or "meta": the device-strict test mode, where
    // tensors have shapes but no memory, every host read goes through host_access.h and sees zeros, and any
    // other host read throws (ARCHITECTURE.md); results have the right shapes and no numeric meaning.
    std::string device = "cpu";
    // This process's place among those of one machine (--dp ranks, then sampling replicas): with "cuda"
    // (no index) process s takes GPU s modulo the GPUs there are, so each process has its own device.
    int device_slot = 0;
    LoadQuant quantise_at_load = LoadQuant::NONE;
    // --sample-activations int8: sampling's products with quantised base weights quantise their activations
    // to int8 blocks and dot in integers (kernels/quant_int8.h); training stays exact. No effect otherwise.
    bool sample_int8_activations = false;
};

// A LoRA adapter's shape. Targets follow the Tinker flags: attn -> q,k,v,o; mlp -> gate,up,down;
// unembed -> lm_head.
struct LoraSpec {
    int64_t rank = 32;
    double alpha = 32.0;  // scale = alpha / rank
    bool train_attn = true;
    bool train_mlp = true;
    bool train_unembed = true;
    std::optional<uint64_t> seed;  // initialisation seed; none = from a process-wide counter
};

using AdapterId = int64_t;
inline constexpr AdapterId BASE_MODEL = 0;  // rows with this id run the bare base model

// Host tensors (loss inputs, outputs, exported weights) reuse the safetensors owned-tensor type.
using HostTensor = model::OwnedTensor;

// One image of a model input (Tinker's ImageChunk). The wire decoders fill the first block and put
// `expected_tokens` placeholder ids into the tokens at `token_offset`; vision::prepare_images (src/vision)
// decodes and preprocesses the bytes for the model, fills the second block and writes the model's
// image_token_id into those placeholders. The engine reads only the second block (issue 27).
struct ImageInput {
    int64_t token_offset = 0;                    // index of the image's first token in the sequence
    int64_t expected_tokens = 0;                 // tokens the image occupies (the client's count; 0 = not given)
    std::string format;                          // "png" | "jpeg", as sent
    std::string data;                            // the encoded image, as sent (freed once prepared)
    int64_t grid_t = 0, grid_h = 0, grid_w = 0;  // patch grid before the spatial merge (prepared)
    // [grid_t * grid_h * grid_w, 3 * temporal_patch * patch * patch] in the HF processor's patch order (prepared)
    std::vector<float> pixel_values;
};

struct Datum {
    std::vector<int64_t> tokens;                    // model input, N tokens
    std::map<std::string, HostTensor> loss_inputs;  // target_tokens [N] or [N,K], weights, ...
    std::vector<ImageInput> images;                 // image chunks, by token_offset (issue 27)
};

// stable_reinforce's per-target sampler logprobs as the server recorded them at sampling time (F32 [N],
// NaN where the target is not a sampled token). The API fills it from the datum's provenance; a client
// cannot send this key.
inline constexpr const char * SAMPLER_RECORD_KEY = "sampler_record";

struct ForwardBackwardInput {
    AdapterId adapter = BASE_MODEL;
    std::vector<Datum> datums;
    std::string loss_fn = "cross_entropy";
    std::map<std::string, double> loss_fn_config;
};

struct ForwardBackwardOutput {
    std::vector<HostTensor> logprobs;       // per datum, F32, shape of target_tokens
    std::map<std::string, double> metrics;  // "loss:sum", ...
};

enum class OptimizerKind { ADAMW, DIMUON };

// One optimizer step's hyper-parameters: torch.optim.AdamW's plus global grad-norm clipping (0 = off), Tinker
// defaults; or, with kind DIMUON (SDK 0.38's DimuonParams), learning_rate, beta1 (momentum EMA),
// grad_clip_norm, damping and rank_lr_correction_exponent (beta2, eps and weight_decay unused).
struct AdamParams {
    double learning_rate = 1e-4;
    double beta1 = 0.9;
    double beta2 = 0.95;
    double eps = 1e-12;
    double weight_decay = 0.0;
    double grad_clip_norm = 0.0;
    OptimizerKind kind = OptimizerKind::ADAMW;
    double damping = 1e-4;                       // Dimuon: the row / column preconditioner's damping
    double rank_lr_correction_exponent = 0.175;  // Dimuon: lr · (rank / 32)^exponent; 0 = off
};

struct OptimStepOutput {
    std::map<std::string, double> metrics;  // "grad_norm:mean" (before clipping), "step:max"
};

// Sampling (Tinker semantics, design.md §3): temperature 0 = greedy; logprobs of sampled tokens are under
// the temperature-scaled distribution, before top-k/top-p truncation; a stop token is returned once, as
// the last token; the same seed gives the same tokens whatever else is in the batch.
struct SamplingParams {
    int64_t max_tokens = 16;
    double temperature = 1.0;
    int64_t top_k = -1;            // -1 = no limit
    double top_p = 1.0;            // 1 = no nucleus truncation
    std::optional<uint64_t> seed;  // none = a fresh seed per request
    std::vector<int64_t> stop_token_ids;
    bool stop_at_eos = true;  // the model's EOS ends a sequence; Tinker's `stop: []` turns this off
};

using TopLogprobs = std::vector<std::pair<int64_t, float>>;  // (token, logprob), best first

struct SampleRequest {
    AdapterId adapter = BASE_MODEL;
    std::vector<int64_t> prompt;            // at least one token
    std::vector<ImageInput> prompt_images;  // the prompt's image chunks (see ImageInput)
    int64_t num_samples = 1;                // copies share one prefill of the prompt
    SamplingParams params;
    bool prompt_logprobs = false;      // logprob of each prompt token given the ones before (first: NaN)
    int64_t topk_prompt_logprobs = 0;  // K best (token, logprob) per prompt position (first: empty)
    int64_t top_logprobs = 0;          // K best (token, logprob) at each generated position (same temperature)
    // SDK 0.38 target_prompt_logprobs: [prompt.size() - 1, target_prompt_k] ids, row i scored at prompt
    // position i + 1 (-1: nothing asked); empty when not asked.
    std::vector<int64_t> target_prompt_ids;
    int64_t target_prompt_k = 0;
    // SDK 0.38 prompt_alt_tokens_k: draws (with replacement, at the request temperature) from the next-token
    // distribution at every prompt position after the first.
    int64_t prompt_alt_tokens_k = 0;
    // Optional, called after each generated token with all tokens generated so far in that sequence;
    // true stops the sequence as "stop" (stop strings are checked this way by the caller's tokenizer).
    std::function<bool(const std::vector<int64_t> & generated)> stop_check;
    std::vector<std::string> stop_strings;  // what stop_check checks (a sampling replica rebuilds it from them)
    // Optional, called on the engine thread after each generated token of sequence `index` (streaming);
    // top holds the top_logprobs alternatives (empty when none were asked). Must not call the engine.
    std::function<void(int64_t index, int64_t token, float logprob, const TopLogprobs & top)> on_token;
};

struct SampledSequence {
    std::vector<int64_t> tokens;
    std::vector<float> logprobs;  // one per token
    bool stopped = false;         // true: a stop token / stop_check / EOS ("stop"); false: max_tokens ("length")
    std::vector<TopLogprobs> top_logprobs;  // one per token when SampleRequest::top_logprobs > 0
};

struct SampleOutput {
    std::vector<SampledSequence> sequences;  // num_samples of them
    std::vector<float> prompt_logprobs;      // prompt length, [0] = NaN; empty unless requested
    std::vector<std::vector<std::pair<int64_t, float>>> topk_prompt_logprobs;  // per position, best first
    std::vector<float> target_prompt_logprobs;  // [prompt - 1, target_prompt_k]: log-softmax at the id; 0 for -1
    std::vector<int64_t> prompt_alt_tokens;     // [prompt - 1, prompt_alt_tokens_k], in draw order
    std::vector<float> prompt_alt_logprobs;     // [prompt - 1, prompt_alt_tokens_k]: their log-softmax
};

using SampleHandle = int64_t;

struct FinishedSample {
    SampleHandle handle = 0;
    Result<SampleOutput> output = internal_error("not finished");
};

struct SampleStats {
    int64_t queued = 0;           // submitted, waiting for admission (incl. preempted ones)
    int64_t running = 0;          // admitted requests
    int64_t live_sequences = 0;   // sequences in the decode batch
    int64_t kv_bytes = 0;         // KV cache reserved now (with Qwen3.5 sequences' recurrent state)
    int64_t kv_budget_bytes = 0;  // EngineOptions::kv_cache_bytes
    int64_t preemptions = 0;      // since start
};

class Engine {
  public:
    // Loads a Hugging Face model directory (config.json + safetensors, memory-mapped).
    static Result<std::unique_ptr<Engine>> load(const std::string & model_dir, const EngineOptions & options);
    virtual ~Engine() = default;

    virtual const model::ModelConfig & config() const = 0;
    virtual std::string compute_dtype_name() const = 0;  // "bf16", "fp32" or "fp64"

    // Creates a fresh adapter (B = 0, so outputs equal the base model's until trained).
    virtual Result<AdapterId> create_adapter(const LoraSpec & spec) = 0;
    virtual Result<void> remove_adapter(AdapterId id) = 0;
    virtual Result<LoraSpec> adapter_spec(AdapterId id) const = 0;

    // Runs every input in one packed batch. Each input succeeds or fails on its own; a failed input
    // changes nothing. With backward, gradients accumulate into each adapter until optim_step.
    virtual std::vector<Result<ForwardBackwardOutput>> forward_backward(
        const std::vector<ForwardBackwardInput> & inputs, bool backward) = 0;

    // One AdamW step on the adapter's accumulated gradients, then zeroes them.
    virtual Result<OptimStepOutput> optim_step(AdapterId id, const AdamParams & params) = 0;

    // PEFT-named weights ("base_model.model.<module>.lora_A.weight"); with_optimizer adds
    // "<key>.exp_avg", "<key>.exp_avg_sq" and "optimizer.step" (I64 [1]).
    virtual Result<std::map<std::string, HostTensor>> export_adapter(AdapterId id, bool with_optimizer) const = 0;
    // Replaces the adapter's weights (and optimizer state when present) from PEFT-named tensors;
    // every expected key must be present with the right shape, else nothing changes.
    virtual Result<void> import_adapter(AdapterId id, const std::map<std::string, HostTensor> & tensors,
                                        bool with_optimizer) = 0;

    // The adapter's accumulated gradients, PEFT-named (for tests and debugging).
    virtual Result<std::map<std::string, HostTensor>> export_gradients(AdapterId id) const = 0;

    // The checks forward_backward makes on one input before running it (adapter, loss, tokens, loss
    // inputs); nothing changes. The data-parallel engine (dist/) refuses a bad input before sharding it.
    virtual Result<void> check_forward_backward_input(const ForwardBackwardInput & input, bool backward) {
        (void)input;
        (void)backward;
        return {};
    }
    // The adapter's accumulated gradients as ONE flat fp32 host buffer [count] (every parameter back to
    // back, in the same order on every engine with the same model and spec), read and written in place by
    // `visit` (dist/'s gradient all-reduce). A buffer on a device or in fp64 is copied out and back.
    virtual Result<void> visit_gradients(AdapterId id, const std::function<void(float * data, int64_t count)> & visit) {
        (void)id;
        (void)visit;
        return unsupported("this engine does not expose its gradient buffer");
    }

    // Continuous batching. sample_submit validates a request and queues it; each sample_step admits
    // queued requests while the KV budget allows (one batched prefill), then runs ONE decode step over
    // every live sequence of every request (rows of different adapters and of the base model share it),
    // and returns the requests that finished. When the KV cache is full, the newest request is
    // preempted (its cache freed) and resumes later with the same tokens. Requests join and leave the
    // running batch between steps. A removed adapter fails its live requests.
    virtual Result<SampleHandle> sample_submit(SampleRequest request) = 0;
    virtual std::vector<FinishedSample> sample_step() = 0;
    // Drops a request (queued or running) and frees its KV cache; false if unknown or finished.
    virtual bool sample_cancel(SampleHandle handle) = 0;
    virtual SampleStats sample_stats() const = 0;

    // Samples every request to completion (submit all, step until done). Each succeeds or fails on its own.
    // Not virtual: it only drives the four calls above (defined in sampler.cpp).
    std::vector<Result<SampleOutput>> sample(const std::vector<SampleRequest> & requests);

    // Logits [V] at the last position of one sequence (no gradient). For tests and simple decoding.
    virtual Result<std::vector<float>> last_logits(AdapterId id, const std::vector<int64_t> & tokens) = 0;

    // Changes when every adapter this engine held is gone at once (a sampling replica that was restarted):
    // whoever caches adapter ids (the sampler LRU) drops them and imports again. Engine thread (a replica
    // switches to its restarted process here first). Never changes here.
    virtual int64_t adapters_epoch() { return 0; }
};

// Greedy decoding by repeated full forwards (no KV cache): appends up to n_new tokens, stopping
// after the first token in stop_ids (which is returned).
Result<std::vector<int64_t>> greedy_generate(Engine & engine, AdapterId id, std::vector<int64_t> prompt, int64_t n_new,
                                             const std::vector<int64_t> & stop_ids);

// Host tensor helpers.
HostTensor make_host_tensor_f32(std::vector<int64_t> shape, const std::vector<float> & values);
HostTensor make_host_tensor_i64(std::vector<int64_t> shape, const std::vector<int64_t> & values);
std::vector<double> host_tensor_values(const HostTensor & tensor);  // any float/int dtype, as doubles

}  // namespace tinkerd::engine
