// IncrementalDecoder: per-token raw bytes from the decoder, the leading Strip applied once, and only
// complete UTF-8 released; a multi-byte character split across tokens waits for its last byte.
#include "tokenizer/decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace tinkerd::tokenizer {

IncrementalDecoder::IncrementalDecoder(const Tokenizer & tokenizer, bool skip_special_tokens, bool continuation)
    : tok_(tokenizer),
      skip_special_(skip_special_tokens),
      first_(!continuation),
      strip_left_(continuation ? 0 : tokenizer.decoder_->strip_start()) {}

std::string IncrementalDecoder::push(int32_t id) {
    if (id < 0 || static_cast<size_t>(id) >= tok_.vocab_size() || (skip_special_ && tok_.is_special(id))) {
        return "";
    }
    tok_.token_bytes(id, first_, pending_);
    first_ = false;
    const std::string & c = tok_.decoder_->strip_char();
    while (strip_left_ > 0 && !pending_.empty()) {
        if (pending_.size() < c.size() && c.compare(0, pending_.size(), pending_) == 0) {
            return "";  // could still be the strip char: wait for more bytes
        }
        if (strip_repeated(pending_, c, 1, false) == 0) {
            strip_left_ = 0;
            break;
        }
        --strip_left_;
    }
    const size_t n = utf8_complete_prefix(pending_);
    std::string out = utf8_lossy(std::string_view(pending_).substr(0, n));
    pending_.erase(0, n);
    return out;
}

std::string IncrementalDecoder::flush() {
    std::string out = utf8_lossy(pending_);
    pending_.clear();
    return out;
}

}  // namespace tinkerd::tokenizer
