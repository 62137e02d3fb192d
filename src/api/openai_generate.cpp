// One OpenAI generation request from body to engine: parse and validate (openai/), resolve `model`,
// build each prompt's tokens (the model's chat template, or completions text / token ids), then answer
// with a body once done or with an SSE stream, submitting one engine request per prompt (n samples each).
#include <algorithm>

#include "api/openai_generation.h"
#include "api/openai_routes.h"
#include "common/json_depth.h"
#include "openai/openai_request.h"
#include "wire/image_chunks.h"

namespace tinkerd::api {

namespace {

constexpr int64_t DEFAULT_MAX_TOKENS_CAP = 2048;  // chat without max_tokens: up to the context, at most this

struct PromptError {
    Error error;
    std::string param;
};

Result<std::string> render_chat(const openai::GenerationRequest & r, const ServedModel & model) {
    const auto & chat = model.chat;
    if (!chat.chat_template) {
        return invalid_argument("model '" + model.name + "' cannot chat: " + chat.missing_reason +
                                "; use /v1/completions with a prompt instead");
    }
    return chat.chat_template->render(r.messages, r.add_generation_prompt, r.chat_template_kwargs, chat.bos_token,
                                      chat.eos_token, r.tools);
}

// The chat prompt's images: each image_token_id the template placed (one per image part, in order) becomes
// the image's prepared placeholders (wire/image_chunks.h); the model has a vision processor (checked before).
std::optional<PromptError> expand_images(const openai::GenerationRequest & r, const ServedModel & model,
                                         OpenAiGeneration::Prompt & prompt) {
    if (r.images.empty()) {
        return std::nullopt;
    }
    const int64_t image_id = model.vision->image_token_id;
    const auto placed = static_cast<size_t>(std::count(prompt.tokens.begin(), prompt.tokens.end(), image_id));
    if (placed != r.images.size()) {  // e.g. "<|image_pad|>" typed in a message's text
        return PromptError{
            invalid_argument("the chat template placed " + std::to_string(placed) + " image tokens for " +
                             std::to_string(r.images.size()) + " image_url parts"),
            "messages"};
    }
    std::vector<int64_t> tokens;
    int64_t budget = wire::kMaxRequestImagePatches;
    size_t next = 0;
    for (int64_t id : prompt.tokens) {
        if (id != image_id) {
            tokens.push_back(id);
            continue;
        }
        const openai::ImagePart & part = r.images[next++];
        auto bytes = wire::decode_base64(part.base64, part.where + ".image_url.url");
        auto added = bytes.ok() ? wire::append_image_chunk({std::move(*bytes), part.format}, model.vision.get(),
                                                           part.where, tokens, prompt.images, budget)
                                : Result<void>(bytes.error());
        if (!added.ok()) {
            return PromptError{added.error(), part.where};
        }
    }
    prompt.tokens = std::move(tokens);
    return std::nullopt;
}

// Each prompt's tokens and text; fills in max_tokens when absent and checks the context length.
std::variant<std::vector<OpenAiGeneration::Prompt>, PromptError> build_prompts(openai::GenerationRequest & r,
                                                                               const ServedModel & model) {
    const tokenizer::Tokenizer & tok = *model.tokenizer;
    std::vector<OpenAiGeneration::Prompt> prompts;
    if (r.chat) {
        if (!r.images.empty() && model.vision == nullptr) {  // before the template sees list contents
            return PromptError{
                invalid_argument("model '" + model.name + "' is text-only: image_url parts are not supported"),
                r.images[0].where};
        }
        auto text = render_chat(r, model);
        if (!text.ok()) {
            return PromptError{text.error(), model.chat.chat_template ? "messages" : "model"};
        }
        const auto ids = tok.encode(*text, false);  // the template writes any BOS itself
        prompts.push_back({std::vector<int64_t>(ids.begin(), ids.end()), *text, {}});
        if (auto image_error = expand_images(r, model, prompts.back())) {
            return *image_error;
        }
    } else {
        for (const openai::PromptInput & input : r.prompts) {
            if (input.is_tokens) {
                std::vector<int32_t> ids(input.tokens.begin(), input.tokens.end());
                prompts.push_back({input.tokens, tok.decode(ids, false), {}});
            } else {
                const auto ids = tok.encode(input.text, true);
                prompts.push_back({std::vector<int64_t>(ids.begin(), ids.end()), input.text, {}});
            }
        }
    }
    const int64_t context = model.engine->config().max_position_embeddings;
    for (const auto & p : prompts) {
        const int64_t n = static_cast<int64_t>(p.tokens.size());
        if (n == 0) {
            return PromptError{invalid_argument("the prompt is empty after tokenization"), "prompt"};
        }
        if (!r.max_tokens) {
            r.max_tokens = std::max<int64_t>(
                0, std::min(context > 0 ? context - n : DEFAULT_MAX_TOKENS_CAP, DEFAULT_MAX_TOKENS_CAP));
        }
        if (context > 0 && n + *r.max_tokens > context) {
            return PromptError{invalid_argument("This model's maximum context length is " + std::to_string(context) +
                                                " tokens. However, you requested " + std::to_string(n + *r.max_tokens) +
                                                " tokens (" + std::to_string(n) + " in the prompt, " +
                                                std::to_string(*r.max_tokens) + " for the completion)."),
                               "max_tokens"};
        }
    }
    return prompts;
}

}  // namespace

void OpenAiRoutes::generate(Call & call, http::Respond respond, bool chat) {
    auto tenant = tenant_of(call.req, respond);
    if (!tenant) {
        return;
    }
    if (auto too_deep = check_json_depth(call.req.body, "request body"); !too_deep.ok()) {
        openai::ApiError e;
        e.message = too_deep.error().message;
        e.code = "json_too_deep";
        respond(openai_error_response(e));
        return;
    }
    const json body = json::parse(call.req.body, nullptr, false);
    if (body.is_discarded()) {
        openai::ApiError e;
        e.message = "We could not parse the JSON body of your request: expected a JSON object.";
        respond(openai_error_response(e));
        return;
    }
    openai::ParseResult parsed = chat ? openai::parse_chat_request(body) : openai::parse_completion_request(body);
    if (const auto * e = std::get_if<openai::ApiError>(&parsed)) {
        respond(openai_error_response(*e));
        return;
    }
    auto & request = std::get<openai::GenerationRequest>(parsed);
    auto target = resolve_model(*tenant, request.model);
    if (!target.ok()) {
        respond(openai_error_response(openai_error(target.error(), "model")));
        return;
    }
    if (target->model->tokenizer == nullptr) {
        respond(openai_error_response(openai_error(
            invalid_argument("model '" + request.model + "' has no tokenizer.json; the OpenAI endpoints need one"),
            "model")));
        return;
    }
    auto prompts = build_prompts(request, *target->model);
    if (const auto * e = std::get_if<PromptError>(&prompts)) {
        respond(openai_error_response(openai_error(e->error, e->param)));
        return;
    }
    if (auto capacity = sampling_.check_capacity(); !capacity.ok()) {
        respond(openai_error_response(openai_error(capacity.error())));
        return;
    }
    const std::string model_name = request.model;
    auto generation =
        std::make_shared<OpenAiGeneration>(std::move(request), model_name, *target->model->tokenizer,
                                           std::move(std::get<std::vector<OpenAiGeneration::Prompt>>(prompts)));
    if (!generation->request().stream) {
        generation->set_respond(std::move(respond));
        submit_generation(generation, *target);
        return;
    }
    http::Response response;
    response.content_type = "text/event-stream";
    response.headers.emplace_back("Cache-Control", "no-cache");
    response.log_tag = "model=" + model_name;
    response.stream = [this, generation, target = *target](std::shared_ptr<http::StreamWriter> writer) {
        generation->set_stream(writer);
        if (!writer->closed()) {
            submit_generation(generation, target);
        }
    };
    respond(std::move(response));
}

namespace {

// Prompt `prompt`'s events, on the output thread: tokens become text and SSE chunks, the outcome the
// choices' finish and, after the last prompt, the final chunks or body.
class GenerationSink : public SampleSink {
  public:
    GenerationSink(std::shared_ptr<OpenAiGeneration> generation, size_t prompt)
        : generation_(std::move(generation)), prompt_(prompt) {}
    void on_tokens(std::vector<GeneratedToken> tokens) override {
        for (const GeneratedToken & t : tokens) {
            generation_->on_token(prompt_, t.index, t.token, t.logprob, t.top);
        }
    }
    void on_done(Result<engine::SampleOutput> output) override { generation_->on_done(prompt_, std::move(output)); }
    bool cancelled() const override { return generation_->cancelled()->load(); }

  private:
    std::shared_ptr<OpenAiGeneration> generation_;
    size_t prompt_;
};

}  // namespace

// One engine request per prompt, each with the request's n samples; tokens and outcomes go to the
// generation, and a client that went away cancels them (the worker checks the flag every sampling step).
void OpenAiRoutes::submit_generation(const std::shared_ptr<OpenAiGeneration> & generation, const Target & target) {
    const openai::GenerationRequest & r = generation->request();
    std::function<bool(const std::vector<int64_t> &)> stop_check;
    if (!r.stop.empty()) {
        auto check = stop_string_check(*target.model, r.stop);
        stop_check = check.ok() ? *check : nullptr;
    }
    std::vector<int64_t> eos;
    for (int32_t id : target.model->tokenizer->eos_ids()) {
        eos.push_back(id);
    }
    for (size_t p = 0; p < generation->prompts().size(); ++p) {
        SampleSubmission submission;
        submission.sampler = target.sampler;
        submission.live_adapter = target.live_adapter;
        submission.tenant = target.tenant;
        submission.usage_name = target.sampler.sampler_id.empty() ? target.name : target.sampler.sampler_id;
        engine::SampleRequest & s = submission.request;
        s.prompt = generation->prompts()[p].tokens;
        s.prompt_images = generation->prompts()[p].images;
        s.num_samples = r.n;
        s.params.max_tokens = r.max_tokens.value_or(16);
        s.params.temperature = r.temperature;
        s.params.top_p = r.top_p;
        s.params.top_k = r.top_k;
        s.params.seed = r.seed;
        s.params.stop_token_ids = eos;
        s.top_logprobs = r.logprobs ? r.top_logprobs : 0;
        s.prompt_logprobs = r.echo && r.logprobs;
        s.topk_prompt_logprobs = r.echo && r.logprobs ? r.top_logprobs : 0;
        s.stop_check = stop_check;
        s.stop_strings = r.stop;
        // Each step's tokens reach the generation through the output stage, as its outcome does.
        submission.stream_tokens = true;
        submission.sink = std::make_shared<GenerationSink>(generation, p);
        submission.cancelled = generation->cancelled();
        sampling_.submit(*target.model, std::move(submission));
    }
}

}  // namespace tinkerd::api
