// OpenAiGeneration: one /v1/completions or /v1/chat/completions request in flight. Its prompts' engine
// requests report to it on the output stage's thread (never the engine's); it turns tokens into each
// choice's text (special tokens skipped, stop strings cut out and never streamed in part), then streams
// SSE chunks or builds the body.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/engine.h"
#include "http/server.h"
#include "openai/openai_response.h"
#include "openai/openai_types.h"
#include "tokenizer/tokenizer.h"

namespace tinkerd::api {

// An error as OpenAI shapes it, from one of ours (INVALID_ARGUMENT -> 400, NOT_FOUND -> 404, ...).
openai::ApiError openai_error(const Error & error, const std::string & param = "");
http::Response openai_error_response(const openai::ApiError & error);

class OpenAiGeneration {
  public:
    struct Prompt {
        std::vector<int64_t> tokens;
        std::string text;                        // the rendered chat prompt or the completions prompt as sent
        std::vector<engine::ImageInput> images;  // chat image_url parts, prepared (their placeholders in tokens)
    };
    OpenAiGeneration(openai::GenerationRequest request, std::string model_name, const tokenizer::Tokenizer & tokenizer,
                     std::vector<Prompt> prompts);

    const openai::GenerationRequest & request() const { return request_; }
    const std::vector<Prompt> & prompts() const { return prompts_; }
    // Non-streaming: the body is sent through `respond` once every prompt has finished.
    void set_respond(http::Respond respond) { respond_ = std::move(respond); }
    // Streaming: chunks go to `writer` (the header is already out).
    void set_stream(std::shared_ptr<http::StreamWriter> writer);
    // Set when the client went away: the worker drops the engine requests at its next sampling step.
    std::shared_ptr<std::atomic<bool>> cancelled() const { return cancelled_; }

    // Output thread: a token of sample `index` of prompt `prompt`; then the prompt's outcome.
    void on_token(size_t prompt, int64_t index, int64_t token, float logprob, const engine::TopLogprobs & top);
    void on_done(size_t prompt, Result<engine::SampleOutput> output);

  private:
    struct Choice {
        std::unique_ptr<tokenizer::IncrementalDecoder> decoder;
        std::string text;                // decoded so far (skip special tokens), before any stop-string cut
        size_t streamed = 0;             // bytes of text already sent
        size_t cut = std::string::npos;  // where a stop string starts
        int64_t offset_chars = 0;        // code points streamed (completions text_offset)
        bool role_sent = false;
    };
    Choice & choice(size_t prompt, int64_t index) { return choices_[prompt * request_.n + index]; }
    // The text each token adds, decoded in sequence (special tokens give ""); they concatenate to the text.
    std::vector<std::string> token_pieces(const std::vector<int64_t> & tokens, bool continuation) const;
    void find_stop(Choice & c) const;
    size_t safe_end(const Choice & c) const;
    void stream_piece(size_t prompt, int64_t index, const std::vector<openai::TokenLogprob> * logprobs);
    openai::TokenLogprob token_logprob(int64_t token, std::string text, float logprob,
                                       const engine::TopLogprobs * top) const;
    openai::ChoiceResult final_choice(size_t prompt, const engine::SampleOutput & out, size_t index) const;
    void finish_all();
    void send(const nlohmann::json & chunk);
    void fail(const Error & error);

    openai::GenerationRequest request_;
    std::string model_name_;
    const tokenizer::Tokenizer & tokenizer_;
    std::vector<Prompt> prompts_;
    std::vector<std::string> echo_texts_;  // per prompt: its tokens decoded (special tokens skipped)
    std::string id_;
    int64_t created_ = 0;
    std::vector<Choice> choices_;
    std::vector<std::optional<Result<engine::SampleOutput>>> outputs_;  // per prompt
    size_t finished_ = 0;
    bool failed_ = false;
    http::Respond respond_;
    std::shared_ptr<http::StreamWriter> writer_;
    std::shared_ptr<std::atomic<bool>> cancelled_ = std::make_shared<std::atomic<bool>>(false);
    std::mutex mutex_;  // the engine thread reports; a stream's close may come from an I/O thread
};

}  // namespace tinkerd::api
