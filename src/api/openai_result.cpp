// The final side of OpenAiGeneration: token logprobs in OpenAI's shape, each choice's finished text (stop
// strings cut, echo prefixed), the response body or the stream's closing chunks, and failures.
#include <cmath>

#include "api/openai_generation.h"

namespace tinkerd::api {

openai::TokenLogprob OpenAiGeneration::token_logprob(int64_t token, std::string text, float logprob,
                                                     const engine::TopLogprobs * top) const {
    openai::TokenLogprob t;
    t.token = std::move(text);
    t.logprob = logprob;
    if (tokenizer_.is_special(static_cast<int32_t>(token))) {  // written as in top_logprobs, as OpenAI does
        t.token = tokenizer_.token_text(static_cast<int32_t>(token));
        t.in_text = false;
    }
    if (top != nullptr) {
        for (const auto & [id, value] : *top) {
            t.top.emplace_back(tokenizer_.token_text(static_cast<int32_t>(id)), value);
        }
    }
    return t;
}

// Choice `index` of a prompt: the generated text (special tokens skipped, continuing the prompt's text)
// cut at the first stop string, after the decoded prompt with echo; logprobs of the echoed prompt tokens
// (first: none) and of the sampled tokens, each with the text it adds (so text_offset points into text).
openai::ChoiceResult OpenAiGeneration::final_choice(size_t prompt, const engine::SampleOutput & out,
                                                    size_t index) const {
    const engine::SampledSequence & seq = out.sequences[index];
    const std::vector<std::string> pieces = token_pieces(seq.tokens, true);
    std::string text;
    for (const std::string & piece : pieces) {
        text += piece;
    }
    size_t cut = std::string::npos;
    for (const std::string & stop : request_.stop) {
        cut = std::min(cut, text.find(stop));
    }
    if (cut != std::string::npos) {
        text.resize(cut);
    }
    openai::ChoiceResult choice;
    choice.text = request_.echo ? echo_texts_[prompt] + text : text;
    choice.finish_reason = seq.stopped ? "stop" : "length";
    choice.completion_tokens = static_cast<int64_t>(seq.tokens.size());
    choice.has_logprobs = request_.logprobs;
    if (!request_.logprobs) {
        return choice;
    }
    if (request_.echo) {
        const auto & tokens = prompts_[prompt].tokens;
        const std::vector<std::string> prompt_pieces = token_pieces(tokens, false);
        for (size_t j = 0; j < tokens.size(); ++j) {
            const float lp = j < out.prompt_logprobs.size() ? out.prompt_logprobs[j] : std::nanf("");
            const auto * top = j < out.topk_prompt_logprobs.size() ? &out.topk_prompt_logprobs[j] : nullptr;
            choice.logprobs.push_back(token_logprob(tokens[j], prompt_pieces[j], lp, top));
        }
    }
    for (size_t j = 0; j < seq.tokens.size(); ++j) {
        const auto * top = j < seq.top_logprobs.size() ? &seq.top_logprobs[j] : nullptr;
        choice.logprobs.push_back(token_logprob(seq.tokens[j], pieces[j], seq.logprobs[j], top));
    }
    return choice;
}

void OpenAiGeneration::finish_all() {
    openai::Usage usage;
    std::vector<openai::ChoiceResult> results;
    for (size_t p = 0; p < prompts_.size(); ++p) {
        usage.prompt_tokens += static_cast<int64_t>(prompts_[p].tokens.size());
        const engine::SampleOutput & out = **outputs_[p];
        for (size_t i = 0; i < out.sequences.size(); ++i) {
            usage.completion_tokens += static_cast<int64_t>(out.sequences[i].tokens.size());
            if (!writer_) {
                results.push_back(final_choice(p, out, i));
            }
        }
    }
    if (writer_) {
        if (request_.include_usage) {
            send(openai::usage_chunk(request_.chat, id_, created_, model_name_, usage));
        }
        writer_->write(openai::SSE_DONE);
        writer_->finish();
        return;
    }
    const nlohmann::json body = request_.chat ? openai::chat_response(id_, created_, model_name_, results, usage)
                                              : openai::completion_response(id_, created_, model_name_, results, usage);
    respond_(http::Response::json(200, openai::dump_json(body)));
}

void OpenAiGeneration::send(const nlohmann::json & chunk) {
    if (writer_) {
        writer_->write(openai::sse_event(chunk));
    }
}

// The first failure ends the request: an error body, or an error event then [DONE] on a stream. The
// other prompts' engine requests are cancelled.
void OpenAiGeneration::fail(const Error & error) {
    failed_ = true;
    cancelled_->store(true);
    const openai::ApiError e = openai_error(error);
    if (writer_) {
        writer_->write("data: " + openai::error_body(e) + "\n\n");
        writer_->write(openai::SSE_DONE);
        writer_->finish();
    } else if (respond_) {
        respond_(openai_error_response(e));
    }
}

}  // namespace tinkerd::api
