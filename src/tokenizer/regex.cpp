// PCRE2 wrapper: the tokenizer's regexes (\p{L}, \p{N}, lookaheads) run as written in tokenizer.json,
// in UTF mode with Unicode properties for \s \w \d, tolerating invalid UTF-8 in the subject.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

namespace tinkerd::tokenizer {

namespace {

pcre2_code * as_code(void * p) {
    return static_cast<pcre2_code *>(p);
}

struct MatchData {
    explicit MatchData(const pcre2_code * code) : data(pcre2_match_data_create_from_pattern(code, nullptr)) {}
    ~MatchData() { pcre2_match_data_free(data); }
    MatchData(const MatchData &) = delete;
    MatchData & operator=(const MatchData &) = delete;
    pcre2_match_data * data;
};

}  // namespace

Result<std::shared_ptr<Regex>> Regex::compile(const std::string & pattern) {
    int err = 0;
    PCRE2_SIZE err_offset = 0;
    const uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;
    pcre2_code * code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &err,
                                      &err_offset, nullptr);
    if (code == nullptr) {
        PCRE2_UCHAR buf[256];
        pcre2_get_error_message(err, buf, sizeof(buf));
        return unsupported("regex '" + pattern + "' does not compile at offset " + std::to_string(err_offset) + ": " +
                           reinterpret_cast<const char *>(buf));
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is unavailable
    std::shared_ptr<Regex> re(new Regex());
    re->code_ = code;
    return re;
}

Regex::~Regex() {
    pcre2_code_free(as_code(code_));
}

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
    std::vector<std::pair<size_t, size_t>> out;
    MatchData md(as_code(code_));
    const auto * subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t offset = 0;
    while (offset <= text.size()) {
        const int rc = pcre2_match(as_code(code_), subject, text.size(), offset, 0, md.data, nullptr);
        if (rc < 0) {
            break;  // PCRE2_ERROR_NOMATCH or a matching error: no further matches
        }
        const PCRE2_SIZE * ov = pcre2_get_ovector_pointer(md.data);
        const size_t begin = ov[0];
        const size_t end = ov[1];
        if (end > begin) {
            out.emplace_back(begin, end);
            offset = end;
            continue;
        }
        // Empty match: skip one whole UTF-8 character.
        if (begin >= text.size()) {
            break;
        }
        size_t next = begin + 1;
        while (next < text.size() && (static_cast<unsigned char>(text[next]) & 0xC0) == 0x80) {
            ++next;
        }
        offset = next;
    }
    return out;
}

}  // namespace tinkerd::tokenizer
