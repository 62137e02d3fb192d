// asample (and compute_logprobs, which is asample with max_tokens 1 and prompt_logprobs): parses the
// request (prompt chunks, sampling params, stop strings checked through the tokenizer), applies
// backpressure (429), and hands it to the model's sample pump (sample_pump.cpp).
#include <cmath>
#include <utility>

#include "api/app.h"
#include "common/log.h"
#include "wire/sample_codec.h"

namespace tinkerd::api {

namespace {

constexpr int64_t MAX_NUM_SAMPLES = 128;
constexpr int64_t DEFAULT_MAX_TOKENS_CAP = 2048;  // when max_tokens is omitted: up to the context, at most this

Result<std::vector<int64_t>> prompt_tokens(const json & prompt) {
    if (!prompt.is_object() || !prompt.contains("chunks") || !prompt["chunks"].is_array()) {
        return invalid_argument("prompt: expected {\"chunks\": [...]}");
    }
    std::vector<int64_t> tokens;
    for (size_t i = 0; i < prompt["chunks"].size(); ++i) {
        const json & chunk = prompt["chunks"][i];
        const std::string type = chunk.is_object() ? chunk.value("type", "encoded_text") : "";
        if (type != "encoded_text" || !chunk.contains("tokens") || !chunk["tokens"].is_array()) {
            return unsupported("prompt.chunks[" + std::to_string(i) + "]: only encoded_text chunks are supported");
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

// "stop" is a string, a list of strings, or a list of token ids.
Result<void> parse_stop(const json & stop, engine::SamplingParams & params, std::vector<std::string> & strings) {
    if (stop.is_null()) {
        return {};
    }
    if (stop.is_string()) {
        strings.push_back(stop.get<std::string>());
        return {};
    }
    if (!stop.is_array()) {
        return invalid_argument("sampling_params.stop: expected a string, a list of strings or a list of token ids");
    }
    for (const json & s : stop) {
        if (s.is_number_integer()) {
            params.stop_token_ids.push_back(s.get<int64_t>());
        } else if (s.is_string()) {
            strings.push_back(s.get<std::string>());
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

}  // namespace

// Stop strings are checked on the decoded text of the generated tokens' tail after each token: a sequence
// stops at the first token whose text completes one of them (that token is the last one returned).
Result<std::function<bool(const std::vector<int64_t> &)>> stop_string_check(const ServedModel & model,
                                                                            std::vector<std::string> stops) {
    if (model.tokenizer == nullptr) {
        return invalid_argument("sampling_params.stop: stop strings need a tokenizer, and model '" + model.name +
                                "' has no tokenizer.json; pass stop token ids instead");
    }
    size_t longest = 0;
    for (const auto & s : stops) {
        if (s.empty()) {
            return invalid_argument("sampling_params.stop: empty stop string");
        }
        longest = std::max(longest, s.size());
    }
    const size_t window = 4 * longest + 8;  // tokens: enough for any token split of the longest stop string
    const tokenizer::Tokenizer * tok = model.tokenizer;
    return std::function<bool(const std::vector<int64_t> &)>(
        [tok, stops = std::move(stops), window](const std::vector<int64_t> & generated) {
            const size_t start = generated.size() > window ? generated.size() - window : 0;
            const std::vector<int32_t> tail(generated.begin() + static_cast<std::ptrdiff_t>(start), generated.end());
            const std::string text = tok->decode(tail, false);
            for (const auto & s : stops) {
                if (text.find(s) != std::string::npos) {
                    return true;
                }
            }
            return false;
        });
}

Result<json> App::asample(Call & call) {
    auto sampler_id = get_string(call.body, "sampling_session_id");
    if (!sampler_id.ok()) {
        return sampler_id.error();
    }
    auto sampler = db_->get_sampler(*sampler_id);
    if (!sampler.ok() || !sampler->has_value() || (*sampler)->tenant != call.tenant) {
        return not_found("sampling session '" + *sampler_id + "' not found");
    }
    ServedModel * model = find_model((*sampler)->base_model);
    if (model == nullptr) {
        return not_found("base model '" + (*sampler)->base_model + "' of the sampler is not served any more");
    }
    auto request = parse_sample_request(call.body, *model);
    if (!request.ok()) {
        return request.error();
    }
    TRY_STATUS(check_sample_capacity());
    PendingSample pending;
    pending.sampler = **sampler;
    pending.request = std::move(request).value();
    pending.encoding = {pending.request.prompt_logprobs, pending.request.topk_prompt_logprobs};
    pending.request_id = create_future(call.tenant, "Sample");
    const std::string request_id = pending.request_id;
    enqueue_sample(*model, std::move(pending));
    return json{{"request_id", request_id}};
}

Result<engine::SampleRequest> App::parse_sample_request(const json & body, const ServedModel & model) {
    engine::SampleRequest request;
    auto tokens = prompt_tokens(body.value("prompt", json()));
    auto num_samples = get_optional_int(body, "num_samples");
    auto prompt_logprobs = get_bool(body, "prompt_logprobs", false);
    auto topk = get_optional_int(body, "topk_prompt_logprobs");
    std::vector<std::string> stop_strings;
    auto params = parse_sampling_params(body, stop_strings);
    if (const Error * e = first_error(tokens, num_samples, prompt_logprobs, topk, params)) {
        return *e;
    }
    if (!stop_strings.empty()) {
        auto check = stop_string_check(model, std::move(stop_strings));
        if (!check.ok()) {
            return check.error();
        }
        request.stop_check = std::move(check).value();
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
