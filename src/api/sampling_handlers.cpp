// asample (and compute_logprobs, which is asample with max_tokens 1 and prompt_logprobs): parses the
// request (prompt chunks, sampling params, stop strings checked through the tokenizer, SDK 0.38's
// top-k sampled logprobs, prompt_logprobs_last_n, target prompt logprobs, alternative tokens, stability
// records and inflight samplers), and cancel_future for abandoned samples; applies
// backpressure (429), and hands it to the SamplingService (sampling_service.h), so to the model's worker. The answer
// carries one sample_sequence_id per sample.
#include <cmath>
#include <utility>

#include "api/tinker_routes.h"
#include "common/log.h"
#include "tokenizer/stop_strings.h"
#include "wire/image_chunks.h"
#include "wire/prompt_extras_codec.h"
#include "wire/sample_codec.h"

namespace tinkerd::api {

namespace {

constexpr int64_t MAX_NUM_SAMPLES = 128;
constexpr int64_t DEFAULT_MAX_TOKENS_CAP = 2048;
constexpr size_t MAX_STOP_ENTRIES = 256;  // stop strings or stop token ids in one request
constexpr size_t MAX_STOP_STRING_BYTES =
    1024;  // one stop string  // when max_tokens is omitted: up to the context, at most this

// The prompt's chunks: encoded_text tokens, and image chunks prepared for the model's vision processor
// (wire/image_chunks.h) into `images`, their placeholders in the tokens.
Result<std::vector<int64_t>> prompt_tokens(const json & prompt, const vision::ProcessorConfig * vision,
                                           std::vector<engine::ImageInput> & images) {
    if (!prompt.is_object() || !prompt.contains("chunks") || !prompt["chunks"].is_array()) {
        return invalid_argument("prompt: expected {\"chunks\": [...]}");
    }
    std::vector<int64_t> tokens;
    int64_t patch_budget = wire::kMaxRequestImagePatches;
    for (size_t i = 0; i < prompt["chunks"].size(); ++i) {
        const json & chunk = prompt["chunks"][i];
        const std::string type = chunk.is_object() ? chunk.value("type", "encoded_text") : "";
        const std::string where = "prompt.chunks[" + std::to_string(i) + "]";
        if (type == "image" && vision != nullptr) {
            auto fields = wire::image_chunk_from_json(chunk, where);
            TRY_STATUS(fields);
            TRY_STATUS(wire::append_image_chunk(std::move(*fields), vision, where, tokens, images, patch_budget));
            continue;
        }
        if (type != "encoded_text") {
            return unsupported(where + ": " + type + " chunks are not supported (text-only models)");
        }
        if (!chunk.contains("tokens") || !chunk["tokens"].is_array()) {
            return invalid_argument(where + ".tokens: expected a list of token ids");
        }
        for (const json & t : chunk["tokens"]) {
            if (!t.is_number_integer() || t.get<int64_t>() < 0) {
                return invalid_argument("prompt.chunks[" + std::to_string(i) + "].tokens: expected token ids >= 0");
            }
            tokens.push_back(t.get<int64_t>());
        }
    }
    if (tokens.empty()) {
        return invalid_argument("prompt: no tokens");
    }
    return tokens;
}

// "stop" is a string, a list of strings, or a list of token ids. Absent or null keeps the model's implicit
// EOS stop; an empty list turns it off too (SDK 0.38's documented meaning of `stop=[]`).
Result<void> parse_stop(const json & stop, engine::SamplingParams & params, std::vector<std::string> & strings) {
    if (stop.is_null()) {
        return {};
    }
    if (stop.is_array() && stop.empty()) {
        params.stop_at_eos = false;
        return {};
    }
    if (stop.is_string()) {
        strings.push_back(stop.get<std::string>());
        return {};
    }
    if (!stop.is_array()) {
        return invalid_argument("sampling_params.stop: expected a string, a list of strings or a list of token ids");
    }
    if (stop.size() > MAX_STOP_ENTRIES) {
        return invalid_argument("sampling_params.stop: " + std::to_string(stop.size()) + " entries, more than " +
                                std::to_string(MAX_STOP_ENTRIES) + " (the limit)");
    }
    for (const json & s : stop) {
        if (s.is_number_integer()) {
            params.stop_token_ids.push_back(s.get<int64_t>());
        } else if (s.is_string() && s.get_ref<const std::string &>().size() <= MAX_STOP_STRING_BYTES) {
            strings.push_back(s.get<std::string>());
        } else if (s.is_string()) {
            return invalid_argument("sampling_params.stop: a stop string is longer than " +
                                    std::to_string(MAX_STOP_STRING_BYTES) + " bytes (the limit)");
        } else {
            return invalid_argument("sampling_params.stop: entries must all be strings or all token ids");
        }
    }
    return {};
}

Result<engine::SamplingParams> parse_sampling_params(const json & body, std::vector<std::string> & stop_strings) {
    const json sp = body.value("sampling_params", json::object());
    if (!sp.is_object()) {
        return invalid_argument("sampling_params: expected an object");
    }
    engine::SamplingParams params;
    auto max_tokens = get_optional_int(sp, "max_tokens", "sampling_params");
    auto seed = get_optional_int(sp, "seed", "sampling_params");
    auto top_k = get_optional_int(sp, "top_k", "sampling_params");
    auto temperature = get_number(sp, "temperature", 1.0, "sampling_params");
    auto top_p = get_number(sp, "top_p", 1.0, "sampling_params");
    if (const Error * e = first_error(max_tokens, seed, top_k, temperature, top_p)) {
        return *e;
    }
    if (max_tokens->has_value() && **max_tokens < 0) {
        return invalid_argument("sampling_params.max_tokens: must be >= 0 (got " + std::to_string(**max_tokens) + ")");
    }
    params.max_tokens = max_tokens->value_or(-1);  // -1: filled in from the context length
    if (seed->has_value()) {
        params.seed = static_cast<uint64_t>(**seed);
    }
    params.top_k = top_k->value_or(-1);
    params.temperature = *temperature;
    params.top_p = *top_p;
    TRY_STATUS(parse_stop(sp.value("stop", json()), params, stop_strings));
    return params;
}

// SDK 0.38 prompt extras: target_prompt_logprobs (ids scored at each prompt position, dense or CSR; the
// answer repeats the layout) and prompt_alt_tokens_k (draws from each position's distribution). Both are
// bounded like a top-k width: K and k at most 1000.
Result<void> parse_prompt_extras(const json & body, int64_t vocab_size, engine::SampleRequest & request,
                                 wire::SampleEncoding & encoding) {
    auto alt = get_optional_int(body, "prompt_alt_tokens_k");
    if (!alt.ok()) {
        return alt.error();
    }
    if (alt->value_or(0) < 0 || alt->value_or(0) > 1000) {
        return invalid_argument("prompt_alt_tokens_k must be between 0 and 1000");
    }
    request.prompt_alt_tokens_k = alt->value_or(0);
    encoding.prompt_alt_tokens_k = request.prompt_alt_tokens_k;
    auto it = body.find("target_prompt_logprobs");
    if (it == body.end() || it->is_null()) {
        return {};
    }
    auto targets = wire::decode_target_prompt_ids(*it, vocab_size, 1000);
    if (!targets.ok()) {
        return targets.error();
    }
    const auto rows = static_cast<int64_t>(request.prompt.size()) - 1;
    if (targets->rows != rows) {
        return invalid_argument("target_prompt_logprobs has " + std::to_string(targets->rows) +
                                " rows; it needs len(prompt) - 1 = " + std::to_string(rows));
    }
    request.target_prompt_ids = std::move(targets->ids);
    request.target_prompt_k = targets->k;
    encoding.target_prompt_k = targets->k;
    encoding.target_sparse = targets->sparse;
    encoding.target_crow = std::move(targets->crow);
    encoding.target_cols = std::move(targets->cols);
    return {};
}

// topk_sample_logprobs (K best per sampled token) and prompt_logprobs_last_n (only the last N prompt
// positions are scored; the rest come back as None), validated as the official server does.
Result<void> parse_sample_extensions(const json & body, const engine::SampleRequest & request,
                                     wire::SampleEncoding & encoding) {
    auto topk = get_optional_int(body, "topk_sample_logprobs");
    auto last_n = get_optional_int(body, "prompt_logprobs_last_n");
    if (const Error * e = first_error(topk, last_n)) {
        return *e;
    }
    encoding.topk_sample_logprobs = topk->value_or(0);
    if (encoding.topk_sample_logprobs < 0 || encoding.topk_sample_logprobs > 1000) {
        return invalid_argument("topk_sample_logprobs must be between 0 and 1000");
    }
    if (!last_n->has_value()) {
        return {};
    }
    const auto max_n = static_cast<int64_t>(request.prompt.size()) - 1;
    if (!request.prompt_logprobs) {
        return invalid_argument("prompt_logprobs_last_n requires prompt_logprobs");
    }
    if (**last_n < 1 || **last_n > max_n) {
        return invalid_argument("prompt_logprobs_last_n must be between 1 and len(prompt) - 1 = " +
                                std::to_string(max_n) + ", got " + std::to_string(**last_n));
    }
    encoding.prompt_logprobs_last_n = **last_n;
    return {};
}

// One id per requested sample, fixed at submission (SDK 0.38 stamps them onto SampledSequence.sequence_id).
json sample_sequence_ids(const std::string & request_id, int64_t num_samples) {
    json ids = json::array();
    for (int64_t i = 0; i < num_samples; ++i) {
        ids.push_back(request_id + "." + std::to_string(i));
    }
    return ids;
}

}  // namespace

// Stop strings are checked on the decoded text of the generated tokens' tail after each token: a sequence
// stops at the first token whose text completes one of them (that token is the last one returned).
Result<std::function<bool(const std::vector<int64_t> &)>> stop_string_check(const ServedModel & model,
                                                                            std::vector<std::string> stops) {
    if (model.tokenizer == nullptr) {
        return invalid_argument("sampling_params.stop: stop strings need a tokenizer, and model '" + model.name +
                                "' has no tokenizer.json; pass stop token ids instead");
    }
    for (const auto & s : stops) {
        if (s.empty()) {
            return invalid_argument("sampling_params.stop: empty stop string");
        }
    }
    return tokenizer::stop_string_matcher(*model.tokenizer, std::move(stops));
}

Result<json> TinkerRoutes::asample(Call & call) {
    auto sampler_id = get_string(call.body, "sampling_session_id");
    if (!sampler_id.ok()) {
        return sampler_id.error();
    }
    auto sampler = db_->get_sampler(*sampler_id);
    if (!sampler.ok() || !sampler->has_value() || (*sampler)->tenant != call.tenant) {
        return not_found("sampling session '" + *sampler_id + "' not found");
    }
    ServedModel * model = registry_->find_model((*sampler)->base_model);
    if (model == nullptr) {
        return not_found("base model '" + (*sampler)->base_model + "' of the sampler is not served any more");
    }
    auto record_stability = get_bool(call.body, "record_stability_info", false);
    auto request = parse_sample_request(call.body, *model);
    if (const Error * e = first_error(record_stability, request)) {
        return *e;
    }
    wire::SampleEncoding encoding{request->prompt_logprobs, request->topk_prompt_logprobs};
    TRY_STATUS(parse_sample_extensions(call.body, *request, encoding));
    TRY_STATUS(parse_prompt_extras(call.body, model->engine->config().vocab_size, *request, encoding));
    request->top_logprobs = encoding.topk_sample_logprobs;
    std::optional<engine::AdapterId> live_adapter;
    if ((*sampler)->kind == "inflight") {  // the run's live weights (save_weights_for_sampler kind "inflight")
        const RunPtr run = registry_->find_tenant_run(call.tenant, (*sampler)->run_id);
        if (run == nullptr) {
            return not_found("sampling session '" + *sampler_id + "' follows training run '" + (*sampler)->run_id +
                             "', which is not loaded any more");
        }
        live_adapter = run->adapter.load();
    }
    TRY_STATUS(sampling_->check_capacity());
    auto seq_id = get_optional_int(call.body, "seq_id");  // a clone's samples carry seq_id / 1e9 = its clone id
    const int64_t clone = seq_id.ok() ? std::max<int64_t>(0, seq_id->value_or(0)) / 1000000000 : 0;
    const std::string queue = CompletionQueues::key((*sampler)->sampler_id, clone);
    const std::string request_id = create_future(call.tenant, "Sample", queue);  // the row keeps its queue
    const int64_t num_samples = request->num_samples;
    SampleSubmission submission;
    submission.sampler = **sampler;
    submission.live_adapter = live_adapter;
    submission.tenant = call.tenant;
    submission.usage_name = (*sampler)->sampler_id;
    submission.request = std::move(request).value();
    std::optional<SampleRecord> record;  // with record_stability_info: (session, prompt)
    if (*record_stability) {
        record.emplace((*sampler)->session_id, submission.request.prompt);
    }
    submission.cancelled = std::make_shared<std::atomic<bool>>(false);
    {
        std::lock_guard<std::mutex> lock(sample_cancel_mutex_);
        running_samples_[request_id] = {call.tenant, submission.cancelled};
    }
    submission.sink = sample_sink(request_id, encoding, std::move(record), queue, submission.cancelled);
    sampling_->submit(*model, std::move(submission));
    return json{{"request_id", request_id}, {"sample_sequence_ids", sample_sequence_ids(request_id, num_samples)}};
}

// On the output thread: the future gets the encoded result (protobuf and legacy JSON) or the error (a
// cancelled one's says so); with record_stability_info the sequences are recorded first (stable_reinforce reads
// them); then the sampling session clone's retrieve_futures queue learns of it.
std::shared_ptr<SampleSink> TinkerRoutes::sample_sink(const std::string & request_id,
                                                      const wire::SampleEncoding & encoding,
                                                      std::optional<SampleRecord> record, const std::string & queue,
                                                      std::shared_ptr<std::atomic<bool>> cancelled) {
    return std::make_shared<FunctionSink>([this, request_id, encoding, record, queue,
                                           cancelled](Result<engine::SampleOutput> output) {
        {
            std::lock_guard<std::mutex> lock(sample_cancel_mutex_);
            running_samples_.erase(request_id);
        }
        if (!output.ok()) {
            fail_future(request_id,
                        cancelled->load() ? invalid_argument("cancelled by cancel_future") : output.error());
            completion_queues_.append(queue, request_id, true, 0);
            return;
        }
        if (record) {
            sequence_records_.record(record->first, request_id, record->second, *output, now_seconds());
        }
        std::string proto = wire::encode_sample_response_proto(*output, encoding);
        const auto bytes = static_cast<int64_t>(proto.size());
        futures_->complete(request_id, wire::encode_sample_response_json(*output, encoding).dump(), std::move(proto));
        completion_queues_.append(queue, request_id, false, bytes);
    });
}

// POST retrieve_futures (SDK 0.38, with client/config sample_use_retrieve_futures): the completed samples of
// one sampling session clone after prev_cursor, held up to `timeout` seconds (absent: the poll timeout) when
// there are none; acknowledged request ids are dropped. Payloads are still fetched with retrieve_future.
void TinkerRoutes::retrieve_futures(Call & call, http::Respond respond) {
    const json target = call.body.value("target", json::object());
    auto sampler_id = target.is_object() ? get_string(target, "sampling_session_id", "target")
                                         : Result<std::string>(invalid_argument("target: expected an object"));
    auto clone = target.is_object() ? get_optional_int(target, "cloned_sampler_id")
                                    : Result<std::optional<int64_t>>(std::optional<int64_t>());
    auto prev = get_optional_int(call.body, "prev_cursor");
    auto timeout = get_number(call.body, "timeout", -1.0);
    const json acked = call.body.value("retrieved_request_ids", json::array());
    if (const Error * e = first_error(sampler_id, clone, prev, timeout)) {
        respond(error_response(*e));
        return;
    }
    auto sampler = db_->get_sampler(*sampler_id);
    if (!acked.is_array() || !sampler.ok() || !sampler->has_value() || (*sampler)->tenant != call.tenant) {
        respond(error_response(acked.is_array() ? not_found("sampling session '" + *sampler_id + "' not found")
                                                : invalid_argument("retrieved_request_ids: expected a list")));
        return;
    }
    std::vector<std::string> ids;
    for (const auto & id : acked) {
        if (id.is_string()) {
            ids.push_back(id.get<std::string>());
        }
    }
    const auto asked = std::chrono::milliseconds(static_cast<int64_t>(std::max(0.0, *timeout) * 1000.0));
    const auto hold = *timeout < 0 ? options_.poll_timeout : std::min(options_.poll_timeout, asked);
    completion_queues_.poll(CompletionQueues::key(*sampler_id, clone->value_or(0)), prev->value_or(0), ids, hold,
                            [respond](json page) { respond(json_response(page)); });
}

// POST cancel_future {"request_id"} (SDK 0.38, for abandoned samples): a running sample of the caller stops at
// its next step and its future fails "cancelled by cancel_future" (user); idempotent: a finished request is
// left as it is. A request id the caller never had is a 404.
Result<json> TinkerRoutes::cancel_future(Call & call) {
    auto request_id = get_string(call.body, "request_id");
    if (!request_id.ok()) {
        return request_id.error();
    }
    {
        std::lock_guard<std::mutex> lock(sample_cancel_mutex_);
        auto it = running_samples_.find(*request_id);
        if (it != running_samples_.end() && it->second.first == call.tenant) {
            it->second.second->store(true);
            return json::object();
        }
    }
    const scheduler::FutureOutcome known = futures_->peek(*request_id);
    if (known.state == scheduler::FutureOutcome::State::UNKNOWN || known.tenant != call.tenant) {
        return not_found("request '" + *request_id + "' not found");
    }
    return json::object();  // finished already, or not a sample: nothing to stop
}

Result<engine::SampleRequest> TinkerRoutes::parse_sample_request(const json & body, const ServedModel & model) {
    engine::SampleRequest request;
    auto tokens = prompt_tokens(body.value("prompt", json()), model.vision.get(), request.prompt_images);
    auto num_samples = get_optional_int(body, "num_samples");
    auto prompt_logprobs = get_bool(body, "prompt_logprobs", false);
    auto topk = get_optional_int(body, "topk_prompt_logprobs");
    std::vector<std::string> stop_strings;
    auto params = parse_sampling_params(body, stop_strings);
    if (const Error * e = first_error(tokens, num_samples, prompt_logprobs, topk, params)) {
        return *e;
    }
    if (!stop_strings.empty()) {
        auto check = stop_string_check(model, stop_strings);
        if (!check.ok()) {
            return check.error();
        }
        request.stop_check = std::move(check).value();
        request.stop_strings = std::move(stop_strings);
    }
    request.prompt = std::move(tokens).value();
    request.num_samples = num_samples->value_or(1);
    if (request.num_samples < 1 || request.num_samples > MAX_NUM_SAMPLES) {
        return invalid_argument("num_samples must be between 1 and " + std::to_string(MAX_NUM_SAMPLES));
    }
    request.prompt_logprobs = *prompt_logprobs;
    request.topk_prompt_logprobs = topk->value_or(0);
    if (request.topk_prompt_logprobs < 0 || request.topk_prompt_logprobs > 1000) {
        return invalid_argument("topk_prompt_logprobs must be between 0 and 1000");
    }
    request.params = *params;
    if (request.params.max_tokens < 0) {
        const int64_t room =
            model.engine->config().max_position_embeddings - static_cast<int64_t>(request.prompt.size());
        request.params.max_tokens = std::max<int64_t>(0, std::min(room, DEFAULT_MAX_TOKENS_CAP));
    }
    return request;
}

}  // namespace tinkerd::api
