// OpenAiGeneration (openai_generation.h): per-choice text assembly with stop strings, SSE chunks while
// tokens arrive, and the final chat.completion / text_completion body once every prompt has finished.
#include "api/openai_generation.h"

#include <ctime>

#include "common/redact.h"

namespace tinkerd::api {

openai::ApiError openai_error(const Error & error, const std::string & param) {
    openai::ApiError e;
    e.message = error.message;
    e.param = param;
    switch (error.kind) {
        case ErrorKind::INVALID_ARGUMENT:
        case ErrorKind::UNSUPPORTED:
            e.status = 400;
            break;
        case ErrorKind::NOT_FOUND:
            e.status = 404;
            e.code = param == "model" ? "model_not_found" : "";
            break;
        case ErrorKind::TOO_LARGE:
            e.status = 413;
            break;
        case ErrorKind::UNAVAILABLE:
            e.status = 429;
            e.type = "rate_limit_exceeded";
            break;
        case ErrorKind::INTERNAL:
            e.status = 500;
            e.type = "server_error";
            break;
    }
    return e;
}

http::Response openai_error_response(const openai::ApiError & error) {
    openai::ApiError shown = error;
    shown.message = redact_paths(error.message);  // never the server's own paths
    http::Response response = http::Response::json(error.status, openai::error_body(shown));
    if (error.status == 429) {
        response.headers.emplace_back("Retry-After", "1");
    }
    return response;
}

OpenAiGeneration::OpenAiGeneration(openai::GenerationRequest request, std::string model_name,
                                   const tokenizer::Tokenizer & tokenizer, std::vector<Prompt> prompts)
    : request_(std::move(request)),
      model_name_(std::move(model_name)),
      tokenizer_(tokenizer),
      prompts_(std::move(prompts)),
      id_(openai::new_id(request_.chat ? "chatcmpl-" : "cmpl-")),
      created_(static_cast<int64_t>(std::time(nullptr))),
      choices_(prompts_.size() * static_cast<size_t>(request_.n)),
      outputs_(prompts_.size()) {
    for (Choice & c : choices_) {  // a completion continues its prompt's text
        c.decoder = std::make_unique<tokenizer::IncrementalDecoder>(tokenizer_, true, true);
    }
    for (const Prompt & p : prompts_) {
        std::string text;
        for (const std::string & piece : token_pieces(p.tokens, false)) {
            text += piece;
        }
        echo_texts_.push_back(std::move(text));
    }
}

std::vector<std::string> OpenAiGeneration::token_pieces(const std::vector<int64_t> & tokens, bool continuation) const {
    tokenizer::IncrementalDecoder decoder(tokenizer_, true, continuation);
    std::vector<std::string> pieces;
    for (int64_t token : tokens) {
        pieces.push_back(decoder.push(static_cast<int32_t>(token)));
    }
    if (!pieces.empty()) {
        pieces.back() += decoder.flush();
    }
    return pieces;
}

// Sends the opening chunks: the assistant role (chat) or the echoed prompt (completions with echo).
void OpenAiGeneration::set_stream(std::shared_ptr<http::StreamWriter> writer) {
    std::lock_guard<std::mutex> lock(mutex_);
    writer_ = std::move(writer);
    writer_->on_close([cancelled = cancelled_] { cancelled->store(true); });
    for (size_t i = 0; i < choices_.size(); ++i) {
        const int64_t index = static_cast<int64_t>(i);
        if (request_.chat) {
            send(openai::chat_chunk(id_, created_, model_name_, index, std::string("assistant"), std::string(),
                                    std::nullopt));
        } else if (request_.echo) {
            const std::string & text = echo_texts_[i / request_.n];
            send(openai::completion_chunk(id_, created_, model_name_, index, text, std::nullopt));
            choices_[i].offset_chars = openai::utf8_length(text);
        }
    }
}

void OpenAiGeneration::on_token(size_t prompt, int64_t index, int64_t token, float logprob,
                                const engine::TopLogprobs & top) {
    std::lock_guard<std::mutex> lock(mutex_);
    Choice & c = choice(prompt, index);
    if (failed_ || c.cut != std::string::npos) {
        return;
    }
    c.text += c.decoder->push(static_cast<int32_t>(token));
    find_stop(c);
    if (writer_) {
        std::vector<openai::TokenLogprob> logprobs;
        if (request_.logprobs) {
            logprobs.push_back(token_logprob(token, tokenizer_.token_text(static_cast<int32_t>(token)), logprob, &top));
        }
        stream_piece(prompt, index, request_.logprobs ? &logprobs : nullptr);
    }
}

// The earliest stop string in the text not streamed yet (a stop can never start inside streamed text,
// because a possible stop prefix is always held back).
void OpenAiGeneration::find_stop(Choice & c) const {
    for (const std::string & stop : request_.stop) {
        const size_t pos = c.text.find(stop, c.streamed);
        if (pos != std::string::npos && pos < c.cut) {
            c.cut = pos;
        }
    }
}

// How far the text may be streamed: up to a stop string, or short of a tail that could begin one.
size_t OpenAiGeneration::safe_end(const Choice & c) const {
    if (c.cut != std::string::npos) {
        return c.cut;
    }
    size_t hold = 0;
    for (const std::string & stop : request_.stop) {
        for (size_t k = std::min(stop.size() - 1, c.text.size()); k > hold; --k) {
            if (c.text.compare(c.text.size() - k, k, stop, 0, k) == 0) {
                hold = k;
                break;
            }
        }
    }
    return c.text.size() - hold;
}

void OpenAiGeneration::stream_piece(size_t prompt, int64_t index, const std::vector<openai::TokenLogprob> * logprobs) {
    Choice & c = choice(prompt, index);
    const size_t end = std::max(safe_end(c), c.streamed);
    if (end == c.streamed && logprobs == nullptr) {
        return;
    }
    const std::string piece = c.text.substr(c.streamed, end - c.streamed);
    c.streamed = end;
    const int64_t choice_index = static_cast<int64_t>(prompt) * request_.n + index;
    if (request_.chat) {
        send(openai::chat_chunk(id_, created_, model_name_, choice_index, std::nullopt, piece, std::nullopt, logprobs));
    } else {
        send(openai::completion_chunk(id_, created_, model_name_, choice_index, piece, std::nullopt, logprobs,
                                      c.offset_chars));
        c.offset_chars += openai::utf8_length(piece);
    }
}

void OpenAiGeneration::on_done(size_t prompt, Result<engine::SampleOutput> output) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failed_) {
        return;
    }
    if (!output.ok()) {
        fail(output.error());
        return;
    }
    if (writer_) {
        for (size_t i = 0; i < output->sequences.size(); ++i) {
            const int64_t index = static_cast<int64_t>(i);
            Choice & c = choice(prompt, index);
            if (c.cut == std::string::npos) {
                c.text += c.decoder->flush();
                find_stop(c);
            }
            c.cut = std::min(c.cut, c.text.size());  // the end of the stream: nothing is held back now
            stream_piece(prompt, index, nullptr);
            const char * reason = output->sequences[i].stopped ? "stop" : "length";
            const int64_t choice_index = static_cast<int64_t>(prompt) * request_.n + index;
            send(request_.chat
                     ? openai::chat_chunk(id_, created_, model_name_, choice_index, std::nullopt, std::nullopt,
                                          std::string(reason))
                     : openai::completion_chunk(id_, created_, model_name_, choice_index, "", std::string(reason)));
        }
    }
    outputs_[prompt] = std::move(output);
    if (++finished_ == prompts_.size()) {
        finish_all();
    }
}

}  // namespace tinkerd::api
