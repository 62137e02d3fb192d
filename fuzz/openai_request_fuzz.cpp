// openai_request_fuzz: arbitrary bytes as an OpenAI request body, parsed as App::openai_generate does
// (json::parse without exceptions) -> openai::parse_chat_request and parse_completion_request; errors
// go through error_body, accepted requests' messages/tools are dumped as the chat template sees them.
#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>

#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "openai/openai_request.h"
#include "openai/openai_response.h"

namespace {

// Bodies nested deeper than the limit never reach these parsers (openai_generate checks first), so they
// are skipped here too: nlohmann's copies and dumps recurse.

void check(const tinkerd::openai::ParseResult & parsed) {
    using namespace tinkerd::openai;
    if (const auto * e = std::get_if<ApiError>(&parsed)) {
        (void)error_body(*e);
        return;
    }
    const auto & request = std::get<GenerationRequest>(parsed);
    if (request.n < 1 || request.n > 128 || request.stop.size() > 4 || request.temperature < 0 ||
        request.temperature > 2 || request.top_p <= 0 || request.top_p > 1) {
        __builtin_trap();  // the documented ranges of GenerationRequest
    }
    (void)dump_json(request.messages);
    (void)dump_json(request.tools);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    const std::string_view text = tinkerd::fuzz::as_view(data, size);
    if (tinkerd::fuzz::too_deep(text)) {
        return 0;
    }
    const nlohmann::json body = nlohmann::json::parse(text, nullptr, false);
    if (body.is_discarded()) {
        return 0;
    }
    check(tinkerd::openai::parse_chat_request(body));
    check(tinkerd::openai::parse_completion_request(body));
    return 0;
}
