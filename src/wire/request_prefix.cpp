// model_id and seq_id from the first bytes of a training request's body, for a body refused unread (413):
// protobuf's CodedInputStream over the leading fields, or a SAX pass over a JSON prefix that stops at the
// cut. Never reads past the prefix and allocates nothing beyond the model_id.
#include <cstdint>
#include <google/protobuf/io/coded_stream.h>
#include <optional>
#include <string>

#include "wire/forward_backward_codec.h"

namespace tinkerd::wire {
namespace {

using json = nlohmann::json;

// ForwardBackwardRequest: model_id = 1 (string), seq_id = 2 (int32); the first other field ends the walk.
// protobuf's own reader over the prefix: a cut inside a field reads as a failure, never past the end.
std::optional<RequestIds> ids_from_proto_prefix(std::string_view data) {
    google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t *>(data.data()),
                                              static_cast<int>(data.size()));
    std::optional<std::string> model_id;
    std::optional<int64_t> seq_id;
    while (!(model_id && seq_id)) {
        const uint32_t tag = in.ReadTag();  // 0 at the cut or on a malformed tag
        uint32_t length = 0;
        uint64_t value = 0;
        std::string text;
        if (tag == ((1 << 3) | 2) && in.ReadVarint32(&length) && in.ReadString(&text, static_cast<int>(length))) {
            model_id = std::move(text);
        } else if (tag == ((2 << 3) | 0) && in.ReadVarint64(&value)) {
            seq_id = static_cast<int32_t>(static_cast<uint32_t>(value));  // int32 on the wire (sign-extended)
        } else {
            return std::nullopt;
        }
    }
    return RequestIds{*model_id, *seq_id};
}

// SAX events of a JSON prefix: keeps the top-level "model_id" string and "seq_id" integer; stops at the
// first syntax error (the cut) or once both are found.
class IdsSax : public json::json_sax_t {
  public:
    std::optional<std::string> model_id;
    std::optional<int64_t> seq_id;

    bool null() override { return true; }
    bool boolean(bool) override { return true; }
    bool number_integer(json::number_integer_t v) override { return integer(v); }
    bool number_unsigned(json::number_unsigned_t v) override {
        return v > static_cast<json::number_unsigned_t>(INT64_MAX) || integer(static_cast<int64_t>(v));
    }
    bool number_float(json::number_float_t, const json::string_t &) override { return true; }
    bool string(json::string_t & v) override {
        if (top_level() && key_ == "model_id") {
            model_id = v;
        }
        return !done();
    }
    bool binary(json::binary_t &) override { return true; }
    bool start_object(std::size_t) override { return open(true); }
    bool key(json::string_t & k) override {
        if (top_level()) {
            key_ = k;
        }
        return true;
    }
    bool end_object() override { return close(); }
    bool start_array(std::size_t) override { return open(false); }
    bool end_array() override { return close(); }
    bool parse_error(std::size_t, const std::string &, const json::exception &) override { return false; }

  private:
    bool top_level() const { return depth_ == 1 && root_is_object_; }
    bool done() const { return model_id && seq_id; }
    bool integer(int64_t v) {
        if (top_level() && key_ == "seq_id") {
            seq_id = v;
        }
        return !done();
    }
    bool open(bool object) {
        if (depth_++ == 0) {
            root_is_object_ = object;
        }
        return true;
    }
    bool close() {
        --depth_;
        return true;
    }

    int depth_ = 0;
    bool root_is_object_ = false;
    std::string key_;  // the last top-level key
};

}  // namespace

std::optional<RequestIds> request_ids_from_prefix(std::string_view prefix, bool protobuf) {
    if (protobuf) {
        return ids_from_proto_prefix(prefix);
    }
    IdsSax sax;
    json::sax_parse(prefix.begin(), prefix.end(), &sax);
    if (!sax.model_id || !sax.seq_id) {
        return std::nullopt;
    }
    return RequestIds{*sax.model_id, *sax.seq_id};
}

}  // namespace tinkerd::wire
