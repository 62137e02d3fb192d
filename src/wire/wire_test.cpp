// Unit tests for src/wire: protobuf and JSON forward_backward request decoding (dense, sparse CSR, dtypes,
// limits, error paths), zstd bodies (round trip, malformed, bomb), and the ragged ForwardBackwardOutput
// encoding with its byte offsets, NaN handling and the legacy JSON result.
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <zstd.h>

#include <gtest/gtest.h>

#include "tinker_public.pb.h"
#include "wire/forward_backward_codec.h"

// Largest single operator-new request while g_track is on: proves the zstd cap bounds the output buffer.
// (GCC flags the malloc/free pair once gtest's new-expressions inline into these replacements.)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
static std::atomic<bool> g_track{false};
static std::atomic<size_t> g_max_alloc{0};

void * operator new(std::size_t n) {
    if (g_track.load(std::memory_order_relaxed)) {
        size_t prev = g_max_alloc.load();
        while (n > prev && !g_max_alloc.compare_exchange_weak(prev, n)) {
        }
    }
    if (void * p = std::malloc(n ? n : 1)) {
        return p;
    }
    throw std::bad_alloc();
}
void operator delete(void * p) noexcept {
    std::free(p);
}
void operator delete(void * p, std::size_t) noexcept {
    std::free(p);
}

namespace tinkerd::wire {
namespace {

using engine::HostTensor;
using model::DType;

template <typename T>
std::string le_bytes(const std::vector<T> & values) {
    std::string out(values.size() * sizeof(T), '\0');
    if (!values.empty()) {
        std::memcpy(out.data(), values.data(), out.size());
    }
    return out;
}

template <typename T>
std::vector<T> values_of(const std::string & bytes) {
    std::vector<T> out(bytes.size() / sizeof(T));
    if (!out.empty()) {
        std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
    }
    return out;
}

template <typename T>
std::vector<T> values_of(const HostTensor & t) {
    return values_of<T>(std::string(t.bytes.begin(), t.bytes.end()));
}

HostTensor f32_tensor(std::vector<int64_t> shape, const std::vector<float> & values) {
    const std::string bytes = le_bytes(values);
    return HostTensor{DType::F32, std::move(shape), std::vector<uint8_t>(bytes.begin(), bytes.end())};
}

void set_dense(tinker_public::Tensor & t, tinker_public::DType dtype, const std::string & bytes,
               std::vector<int64_t> shape) {
    t.Clear();
    t.set_dtype(dtype);
    t.set_dense(bytes);
    for (int64_t d : shape) {
        t.add_shape(d);
    }
}

// A datum with tokens split over two chunks and dense target_tokens / weights of length 4.
void add_basic_datum(tinker_public::ForwardBackwardRequest & req) {
    if (req.model_id().empty()) {
        req.set_model_id("sess-1:train:0");
    }
    auto * datum = req.add_data();
    // Hand-built int32 LE bytes: tokens 1, 2, 3 then 258.
    datum->add_model_input()->mutable_encoded_text()->set_tokens(std::string("\x01\0\0\0\x02\0\0\0\x03\0\0\0", 12));
    datum->add_model_input()->mutable_encoded_text()->set_tokens(std::string("\x02\x01\0\0", 4));
    auto & inputs = *datum->mutable_loss_fn_inputs();
    set_dense(inputs["target_tokens"], tinker_public::DTYPE_INT64, le_bytes<int64_t>({2, 3, 258, -1}), {4});
    set_dense(inputs["weights"], tinker_public::DTYPE_FLOAT32, le_bytes<float>({1.f, 0.5f, 0.f, 1.f}), {4});
}

tinker_public::Tensor & first_input(tinker_public::ForwardBackwardRequest & req, const std::string & key) {
    return (*req.mutable_data(0)->mutable_loss_fn_inputs())[key];
}

Result<ForwardBackwardRequest> decode(const tinker_public::ForwardBackwardRequest & req) {
    return decode_forward_backward_proto(req.SerializeAsString());
}

void expect_error(const Result<ForwardBackwardRequest> & r, ErrorKind kind, const std::string & message) {
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().kind, kind);
    EXPECT_EQ(r.error().message, message);
}

TEST(WireRequest, DenseInt64AndFloat32RoundTrip) {
    tinker_public::ForwardBackwardRequest req;
    req.set_model_id("sess-1:train:0");
    req.set_seq_id(7);
    req.set_loss_fn("ppo");
    (*req.mutable_loss_fn_config())["clip_low_threshold"] = 0.9;
    req.set_forward_only(true);
    add_basic_datum(req);
    auto r = decode(req);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->model_id, "sess-1:train:0");
    EXPECT_EQ(r->seq_id, 7);
    EXPECT_EQ(r->loss_fn, "ppo");
    EXPECT_EQ(r->loss_fn_config.at("clip_low_threshold"), 0.9);
    EXPECT_TRUE(r->forward_only);
    ASSERT_EQ(r->data.size(), 1u);
    EXPECT_EQ(r->data[0].tokens, (std::vector<int64_t>{1, 2, 3, 258}));
    const auto & targets = r->data[0].loss_inputs.at("target_tokens");
    EXPECT_EQ(targets.dtype, DType::I64);
    EXPECT_EQ(targets.shape, (std::vector<int64_t>{4}));
    EXPECT_EQ(values_of<int64_t>(targets), (std::vector<int64_t>{2, 3, 258, -1}));
    const auto & weights = r->data[0].loss_inputs.at("weights");
    EXPECT_EQ(weights.dtype, DType::F32);
    EXPECT_EQ(values_of<float>(weights), (std::vector<float>{1.f, 0.5f, 0.f, 1.f}));
}

TEST(WireRequest, Int32WidensAndBfloat16BecomesFloat32) {
    tinker_public::ForwardBackwardRequest req;
    add_basic_datum(req);
    set_dense(first_input(req, "target_tokens"), tinker_public::DTYPE_INT32, le_bytes<int32_t>({5, -6, 70000}), {3});
    // bf16 1.0 = 0x3F80, -2.0 = 0xC000
    set_dense(first_input(req, "weights"), tinker_public::DTYPE_BFLOAT16, std::string("\x80\x3f\x00\xc0", 4), {2});
    auto r = decode(req);
    ASSERT_TRUE(r.ok()) << r.error().message;
    const auto & targets = r->data[0].loss_inputs.at("target_tokens");
    EXPECT_EQ(targets.dtype, DType::I64);
    EXPECT_EQ(values_of<int64_t>(targets), (std::vector<int64_t>{5, -6, 70000}));
    const auto & weights = r->data[0].loss_inputs.at("weights");
    EXPECT_EQ(weights.dtype, DType::F32);
    EXPECT_EQ(values_of<float>(weights), (std::vector<float>{1.f, -2.f}));
}

TEST(WireRequest, MissingShapeIsOneDimensional) {
    tinker_public::ForwardBackwardRequest req;
    add_basic_datum(req);
    first_input(req, "weights").clear_shape();
    auto r = decode(req);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->data[0].loss_inputs.at("weights").shape, (std::vector<int64_t>{4}));
}

TEST(WireRequest, WrongByteCountNamesTheField) {
    tinker_public::ForwardBackwardRequest req;
    for (int i = 0; i < 3; ++i) {
        add_basic_datum(req);
    }
    (*req.mutable_data(2)->mutable_loss_fn_inputs())["weights"].set_dense(std::string(10, '\0'));
    expect_error(decode(req), ErrorKind::INVALID_ARGUMENT,
                 "data[2].loss_fn_inputs[\"weights\"]: 10 bytes is not a multiple of 4");

    tinker_public::ForwardBackwardRequest mismatch;
    add_basic_datum(mismatch);
    first_input(mismatch, "target_tokens").set_shape(0, 5);
    expect_error(decode(mismatch), ErrorKind::INVALID_ARGUMENT,
                 "data[0].loss_fn_inputs[\"target_tokens\"]: shape [5] has 5 elements but the data has 4");

    tinker_public::ForwardBackwardRequest odd_tokens;
    add_basic_datum(odd_tokens);
    odd_tokens.mutable_data(0)->mutable_model_input(1)->mutable_encoded_text()->set_tokens("abc");
    expect_error(decode(odd_tokens), ErrorKind::INVALID_ARGUMENT,
                 "data[0].model_input[1].encoded_text.tokens: 3 bytes is not a multiple of 4");

    tinker_public::ForwardBackwardRequest no_dtype;
    add_basic_datum(no_dtype);
    first_input(no_dtype, "weights").set_dtype(tinker_public::DTYPE_UNSPECIFIED);
    expect_error(decode(no_dtype), ErrorKind::INVALID_ARGUMENT,
                 "data[0].loss_fn_inputs[\"weights\"].dtype: unspecified");
}

// Top-K targets [N=3, K=4] as CSR: row 0 has cols 0 and 2, row 1 nothing, row 2 all four.
void set_topk_csr(tinker_public::Tensor & t) {
    t.Clear();
    t.set_dtype(tinker_public::DTYPE_INT64);
    t.add_shape(3);
    t.add_shape(4);
    auto * csr = t.mutable_sparse_csr();
    csr->set_values(le_bytes<int64_t>({11, 12, 21, 22, 23, 24}));
    csr->set_crow_indices(le_bytes<int64_t>({0, 2, 2, 6}));
    csr->set_col_indices(le_bytes<int64_t>({0, 2, 3, 1, 0, 2}));
}

TEST(WireRequest, SparseCsrTopKIsDensified) {
    tinker_public::ForwardBackwardRequest req;
    add_basic_datum(req);
    set_topk_csr(first_input(req, "target_tokens"));
    auto & weights = first_input(req, "weights");
    weights.Clear();
    weights.set_dtype(tinker_public::DTYPE_FLOAT32);
    weights.add_shape(3);
    weights.add_shape(4);
    weights.mutable_sparse_csr()->set_values(le_bytes<float>({0.25f}));
    weights.mutable_sparse_csr()->set_crow_indices(le_bytes<int64_t>({0, 0, 1, 1}));
    weights.mutable_sparse_csr()->set_col_indices(le_bytes<int64_t>({3}));
    auto r = decode(req);
    ASSERT_TRUE(r.ok()) << r.error().message;
    const auto & targets = r->data[0].loss_inputs.at("target_tokens");
    EXPECT_EQ(targets.dtype, DType::I64);
    EXPECT_EQ(targets.shape, (std::vector<int64_t>{3, 4}));
    EXPECT_EQ(values_of<int64_t>(targets), (std::vector<int64_t>{11, 0, 12, 0, 0, 0, 0, 0, 23, 22, 24, 21}));
    const auto & w = r->data[0].loss_inputs.at("weights");
    EXPECT_EQ(values_of<float>(w), (std::vector<float>{0, 0, 0, 0, 0, 0, 0, 0.25f, 0, 0, 0, 0}));
}

TEST(WireRequest, MalformedCsrIsRejected) {
    const std::string path = "data[0].loss_fn_inputs[\"target_tokens\"]";
    struct Case {
        std::vector<int64_t> crow, cols, shape;
        std::string message;
    };
    const std::vector<Case> cases = {
        {{1, 2, 2, 6}, {0, 2, 3, 1, 0, 2}, {3, 4}, ".sparse_csr.crow_indices: the first entry is 1, not 0"},
        {{0, 3, 2, 6}, {0, 2, 3, 1, 0, 2}, {3, 4}, ".sparse_csr.crow_indices: decreases at entry 2"},
        {{0, 2, 2, 5},
         {0, 2, 3, 1, 0, 2},
         {3, 4},
         ".sparse_csr.crow_indices: the last entry is 5 but there are 6 values"},
        {{0, 2, 6}, {0, 2, 3, 1, 0, 2}, {3, 4}, ".sparse_csr.crow_indices: 3 entries for 3 rows (expected rows + 1)"},
        {{0, 2, 2, 6}, {0, 4, 3, 1, 0, 2}, {3, 4}, ".sparse_csr.col_indices: entry 1 is column 4, outside [0, 4)"},
        {{0, 2, 2, 6}, {0, -1, 3, 1, 0, 2}, {3, 4}, ".sparse_csr.col_indices: entry 1 is column -1, outside [0, 4)"},
        {{0, 2, 2, 6}, {0, 2, 3, 1, 3, 2}, {3, 4}, ".sparse_csr.col_indices: column 3 repeats in row 2"},
        {{0, 2, 2, 6}, {0, 2, 3, 1, 0}, {3, 4}, ": 5 column indices for 6 values"},
        {{0, 2, 2, 6}, {0, 2, 3, 1, 0, 2}, {12}, ": a sparse CSR tensor needs a 2-D shape, got [12]"},
        {{0, 2, 2, 6}, {0, 2, 3, 1, 0, 2}, {}, ": a sparse CSR tensor needs a 2-D shape, got []"},
    };
    for (const auto & c : cases) {
        tinker_public::ForwardBackwardRequest req;
        add_basic_datum(req);
        auto & t = first_input(req, "target_tokens");
        set_topk_csr(t);
        t.clear_shape();
        for (int64_t d : c.shape) {
            t.add_shape(d);
        }
        t.mutable_sparse_csr()->set_crow_indices(le_bytes(c.crow));
        t.mutable_sparse_csr()->set_col_indices(le_bytes(c.cols));
        expect_error(decode(req), ErrorKind::INVALID_ARGUMENT, path + c.message);
    }
}

TEST(WireRequest, ImageAndDmelChunksAreUnsupported) {
    tinker_public::ForwardBackwardRequest req;
    add_basic_datum(req);
    add_basic_datum(req);
    req.mutable_data(1)->mutable_model_input(1)->mutable_image()->set_format("png");
    expect_error(decode(req), ErrorKind::UNSUPPORTED,
                 "data[1].model_input[1]: image chunks are not supported (text-only models)");
    req.mutable_data(1)->mutable_model_input(0)->mutable_dmel()->set_dmel("xx");
    expect_error(decode(req), ErrorKind::UNSUPPORTED,
                 "data[1].model_input[0]: dmel (audio) chunks are not supported (text-only models)");
}

TEST(WireRequest, SizeLimits) {
    tinker_public::ForwardBackwardRequest req;
    add_basic_datum(req);
    // A sparse tensor with no values but a 2^40-element dense shape must not be allocated.
    auto & t = first_input(req, "target_tokens");
    t.Clear();
    t.set_dtype(tinker_public::DTYPE_INT64);
    t.add_shape(int64_t{1} << 20);
    t.add_shape(int64_t{1} << 20);
    t.mutable_sparse_csr();
    expect_error(decode(req), ErrorKind::INVALID_ARGUMENT,
                 "data[0].loss_fn_inputs[\"target_tokens\"]: shape [1048576, 1048576] has more than 134217728 "
                 "elements");
    t.set_shape(0, int64_t{1} << 62);
    t.set_shape(1, int64_t{1} << 62);
    EXPECT_FALSE(decode(req).ok());  // the product overflows int64: still a clean error
    t.set_shape(0, -3);
    expect_error(decode(req), ErrorKind::INVALID_ARGUMENT,
                 "data[0].loss_fn_inputs[\"target_tokens\"]: shape [-3, 4611686018427387904] has a negative dimension");

    tinker_public::ForwardBackwardRequest long_datum;
    add_basic_datum(long_datum);
    long_datum.mutable_data(0)->mutable_model_input(0)->mutable_encoded_text()->set_tokens(
        std::string(4 * 999'997, '\0'));  // plus the 1 token of chunk 1 = 999,998 tokens: fine
    first_input(long_datum, "target_tokens").clear_shape();
    EXPECT_TRUE(decode(long_datum).ok());
    long_datum.mutable_data(0)->add_model_input()->mutable_encoded_text()->set_tokens(std::string(12, '\0'));
    expect_error(decode(long_datum), ErrorKind::INVALID_ARGUMENT,
                 "data[0].model_input: 1000001 tokens exceed the limit of 1000000 per datum");
}

// The 124-byte attack: a sparse [1, K] claim is refused before anything is densified when K passes the
// vocabulary, and a request's loss inputs together stay within the element budget; token ids are checked.
TEST(WireRequest, ModelLimitsBoundTopKTheRequestAndTokenIds) {
    DecodeLimits limits;
    limits.vocab_size = 300;
    tinker_public::ForwardBackwardRequest req;
    add_basic_datum(req);
    ASSERT_TRUE(decode_forward_backward_proto(req.SerializeAsString(), limits).ok());
    auto & t = first_input(req, "target_tokens");
    t.Clear();
    t.set_dtype(tinker_public::DTYPE_INT64);
    t.add_shape(1);
    t.add_shape(int64_t{1} << 27);
    t.mutable_sparse_csr()->set_crow_indices(le_bytes<int64_t>({0, 0}));
    EXPECT_LT(req.ByteSizeLong(), 200u);
    expect_error(decode_forward_backward_proto(req.SerializeAsString(), limits), ErrorKind::INVALID_ARGUMENT,
                 "data[0].loss_fn_inputs[\"target_tokens\"]: shape [1, 134217728] has K = 134217728 columns, more "
                 "than the vocabulary (300)");
    t.set_shape(1, 300);
    t.set_shape(0, 4);
    limits.max_request_elements = 1000;  // 1,200 target elements + 4 weights
    expect_error(decode_forward_backward_proto(req.SerializeAsString(), limits), ErrorKind::INVALID_ARGUMENT,
                 "data[0].loss_fn_inputs[\"target_tokens\"]: the request's loss inputs hold more than 1000 elements "
                 "in all (the limit)");
    t.add_shape(2);
    limits.max_request_elements = int64_t{1} << 25;
    expect_error(decode_forward_backward_proto(req.SerializeAsString(), limits), ErrorKind::INVALID_ARGUMENT,
                 "data[0].loss_fn_inputs[\"target_tokens\"]: shape [4, 300, 2] has 3 dimensions; loss inputs are "
                 "[T] or [T, K]");

    tinker_public::ForwardBackwardRequest no_model;
    no_model.add_data();
    expect_error(decode_forward_backward_proto(no_model.SerializeAsString(), limits), ErrorKind::INVALID_ARGUMENT,
                 "model_id: missing (field 1, a string)");
    no_model.set_model_id("m");
    no_model.clear_data();
    expect_error(decode_forward_backward_proto(no_model.SerializeAsString(), limits), ErrorKind::INVALID_ARGUMENT,
                 "data: no datums (send at least one)");

    tinker_public::ForwardBackwardRequest tokens;
    add_basic_datum(tokens);  // token 258 < 300
    limits.vocab_size = 258;
    expect_error(decode_forward_backward_proto(tokens.SerializeAsString(), limits), ErrorKind::INVALID_ARGUMENT,
                 "data[0].model_input: token id 258 is outside the vocabulary (0..257)");
}

TEST(WireJson, ModelLimitsApplyToTheLegacyForm) {
    DecodeLimits limits;
    limits.vocab_size = 100;
    auto body = nlohmann::json::parse(R"({"model_id": "m", "seq_id": 1, "forward_backward_input": {
        "loss_fn": "cross_entropy", "data": [{"model_input": {"chunks": [{"type": "encoded_text", "tokens": [1, 2]}]},
        "loss_fn_inputs": {"target_tokens": {"data": [], "dtype": "int64", "shape": [2, 1000000],
                                             "sparse_crow_indices": [0, 0, 0], "sparse_col_indices": []}}}]}})");
    auto r = decode_forward_backward_json(body, limits);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().message,
              "data[0].loss_fn_inputs[\"target_tokens\"]: shape [2, 1000000] has K = 1000000 "
              "columns, more than the vocabulary (100)");
    body["forward_backward_input"]["data"][0]["loss_fn_inputs"]["target_tokens"] = {{"data", {2, 3}},
                                                                                    {"dtype", "int64"}};
    EXPECT_TRUE(decode_forward_backward_json(body, limits).ok());
    body["forward_backward_input"]["data"][0]["model_input"]["chunks"][0]["tokens"] = {1, -5};
    r = decode_forward_backward_json(body, limits);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().message, "data[0].model_input: token id -5 is outside the vocabulary (0..99)");
}

TEST(WireRequest, MalformedProtobufBytes) {
    // Field 3 (data) claims 16 bytes but 3 follow; field 1 with the invalid wire type 7.
    for (const std::string & body : {std::string("\x1a\x10"
                                                 "abc",
                                                 5),
                                     std::string("\x0f\x01", 2)}) {
        expect_error(decode_forward_backward_proto(body), ErrorKind::INVALID_ARGUMENT,
                     "malformed protobuf ForwardBackwardRequest");
    }
    // An empty body is a valid empty message, refused for what it lacks.
    expect_error(decode_forward_backward_proto(""), ErrorKind::INVALID_ARGUMENT,
                 "model_id: missing (field 1, a string)");
}

// Mutated and truncated encodings of a valid request: every outcome is a value or a clean error (this
// is mostly for the sanitizer build).
TEST(WireRequest, MutatedBodiesNeverCrash) {
    tinker_public::ForwardBackwardRequest req;
    add_basic_datum(req);
    add_basic_datum(req);
    set_topk_csr(first_input(req, "target_tokens"));
    const std::string body = req.SerializeAsString();
    uint32_t state = 12345;
    auto next = [&state] { return state = state * 1664525u + 1013904223u; };
    int decoded = 0;
    // Invalid UTF-8 in string fields fails the parse, and protobuf also logs it: keep the output quiet.
    auto * previous = google::protobuf::SetLogHandler(nullptr);
    for (int round = 0; round < 3000; ++round) {
        std::string mutated = body.substr(0, body.size() - next() % 8);
        for (int flips = 1 + next() % 3; flips > 0; --flips) {
            mutated[next() % mutated.size()] = static_cast<char>(next() >> 24);
        }
        decoded += decode_forward_backward_proto(mutated).ok();
        (void)decode_forward_backward_output_proto(mutated);
        (void)zstd_decompress(mutated, 1 << 16);
    }
    google::protobuf::SetLogHandler(previous);
    EXPECT_LT(decoded, 3000);
}

// ---- zstd ----

TEST(WireZstd, BodyRoundTrip) {
    tinker_public::ForwardBackwardRequest req;
    req.set_loss_fn("cross_entropy");
    add_basic_datum(req);
    const std::string compressed = zstd_compress(req.SerializeAsString());
    auto plain = zstd_decompress(compressed, 1 << 20);
    ASSERT_TRUE(plain.ok()) << plain.error().message;
    EXPECT_EQ(*plain, req.SerializeAsString());
    auto r = decode_forward_backward_proto(*plain);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->data[0].tokens, (std::vector<int64_t>{1, 2, 3, 258}));
    // Exactly at the cap is fine; one byte under is not.
    EXPECT_TRUE(zstd_decompress(compressed, plain->size()).ok());
    EXPECT_EQ(zstd_decompress(compressed, plain->size() - 1).error().kind, ErrorKind::TOO_LARGE);
}

TEST(WireZstd, MalformedFrames) {
    auto garbage = zstd_decompress("this is not zstd", 1 << 20);
    ASSERT_FALSE(garbage.ok());
    EXPECT_EQ(garbage.error().kind, ErrorKind::INVALID_ARGUMENT);
    EXPECT_EQ(garbage.error().message.rfind("malformed zstd body: ", 0), 0u) << garbage.error().message;
    EXPECT_EQ(zstd_decompress("", 100).error().kind, ErrorKind::INVALID_ARGUMENT);

    std::string text;
    for (int i = 0; i < 5000; ++i) {
        text += "token " + std::to_string(i) + " ";
    }
    const std::string compressed = zstd_compress(text);
    auto truncated = zstd_decompress(compressed.substr(0, compressed.size() / 2), 1 << 20);
    ASSERT_FALSE(truncated.ok());
    EXPECT_EQ(truncated.error().kind, ErrorKind::INVALID_ARGUMENT);
    std::string corrupted = compressed;
    corrupted[compressed.size() / 2] ^= 0x5a;
    corrupted[compressed.size() / 2 + 1] ^= 0x33;
    auto bad = zstd_decompress(corrupted, 1 << 20);
    if (bad.ok()) {
        EXPECT_NE(*bad, text);  // a flipped literal byte may still decode; it must not pass unnoticed as text
    } else {
        EXPECT_EQ(bad.error().kind, ErrorKind::INVALID_ARGUMENT);
    }
}

// 200 MB of zeros compressed in 1 MB steps (never held in memory), with or without a declared size.
std::string zero_bomb(bool declare_size) {
    constexpr size_t kStep = 1 << 20, kSteps = 200;
    ZSTD_CCtx * ctx = ZSTD_createCCtx();
    if (declare_size) {
        ZSTD_CCtx_setPledgedSrcSize(ctx, kStep * kSteps);
    }
    const std::string zeros(kStep, '\0');
    std::string out;
    std::string buf(ZSTD_CStreamOutSize(), '\0');
    for (size_t s = 0; s < kSteps; ++s) {
        ZSTD_inBuffer in{zeros.data(), zeros.size(), 0};
        const auto mode = s + 1 == kSteps ? ZSTD_e_end : ZSTD_e_continue;
        size_t left = 0;
        do {
            ZSTD_outBuffer o{buf.data(), buf.size(), 0};
            left = ZSTD_compressStream2(ctx, &o, &in, mode);
            out.append(buf.data(), o.pos);
        } while (mode == ZSTD_e_end ? left != 0 : in.pos < in.size);
    }
    ZSTD_freeCCtx(ctx);
    return out;
}

TEST(WireZstd, BombStopsAtTheCap) {
    constexpr size_t kCap = 8 << 20;
    for (bool declared : {false, true}) {
        const std::string bomb = zero_bomb(declared);
        EXPECT_LT(bomb.size(), 1u << 20);
        g_max_alloc = 0;
        g_track = true;
        auto r = zstd_decompress(bomb, kCap);
        g_track = false;
        ASSERT_FALSE(r.ok());
        EXPECT_EQ(r.error().kind, ErrorKind::TOO_LARGE) << r.error().message;
        EXPECT_LE(g_max_alloc.load(), kCap + 64) << "declared=" << declared;
        if (!declared) {
            EXPECT_GT(g_max_alloc.load(), kCap / 2);  // the streaming path did run up to the cap
        }
    }
}

// ---- output ----

TEST(WireOutput, RaggedBatchRoundTripsWithByteOffsets) {
    engine::ForwardBackwardOutput out;
    out.logprobs.push_back(f32_tensor({3}, {-1.f, -2.f, -3.f}));
    out.logprobs.push_back(f32_tensor({1}, {-4.f}));
    out.logprobs.push_back(f32_tensor({5}, {-5.f, -6.f, -7.f, -8.f, -9.f}));
    out.logprobs.push_back(f32_tensor({2, 4}, {-10.f, -11.f, -12.f, -13.f, -14.f, -15.f, -16.f, -17.f}));
    out.metrics["loss:sum"] = 12.5;
    const std::string body = encode_forward_backward_output_proto(out);

    tinker_public::ForwardBackwardOutput msg;
    ASSERT_TRUE(msg.ParseFromString(body));
    EXPECT_EQ(msg.loss_fn_output_type(), "ArrayRecord");
    ASSERT_EQ(msg.loss_fn_outputs_size(), 2);
    const auto & first = msg.loss_fn_outputs(0);
    EXPECT_EQ(first.type_tag(), "ArrayRecord");
    EXPECT_EQ(first.num_datums(), 3);
    const auto & lp0 = first.fields().at("logprobs");
    EXPECT_EQ(lp0.dtype(), tinker_public::DTYPE_FLOAT32);
    EXPECT_EQ(lp0.trailing_shape_size(), 0);
    // offsets: int64 LE 0, 12, 16, 36, byte by byte.
    const std::string expected_offsets(
        "\0\0\0\0\0\0\0\0"
        "\x0c\0\0\0\0\0\0\0"
        "\x10\0\0\0\0\0\0\0"
        "\x24\0\0\0\0\0\0\0",
        32);
    EXPECT_EQ(lp0.offsets(), expected_offsets);
    EXPECT_EQ(lp0.data(), le_bytes<float>({-1, -2, -3, -4, -5, -6, -7, -8, -9}));
    const auto & second = msg.loss_fn_outputs(1);
    EXPECT_EQ(second.num_datums(), 1);
    const auto & lp1 = second.fields().at("logprobs");
    EXPECT_EQ(std::vector<int64_t>(lp1.trailing_shape().begin(), lp1.trailing_shape().end()), std::vector<int64_t>{4});
    EXPECT_EQ(lp1.offsets(), std::string("\0\0\0\0\0\0\0\0\x20\0\0\0\0\0\0\0", 16));
    EXPECT_EQ(msg.metrics().at("loss:sum"), 12.5);

    auto back = decode_forward_backward_output_proto(body);
    ASSERT_TRUE(back.ok()) << back.error().message;
    ASSERT_EQ(back->logprobs.size(), 4u);
    for (size_t i = 0; i < 4; ++i) {
        EXPECT_EQ(back->logprobs[i].dtype, DType::F32);
        EXPECT_EQ(back->logprobs[i].shape, out.logprobs[i].shape) << i;
        EXPECT_EQ(back->logprobs[i].bytes, out.logprobs[i].bytes) << i;
    }
    EXPECT_EQ(back->metrics, out.metrics);
}

TEST(WireOutput, RunsSplitOnTrailingShapeChanges) {
    engine::ForwardBackwardOutput out;
    out.logprobs.push_back(f32_tensor({2}, {1, 2}));
    out.logprobs.push_back(f32_tensor({1, 2}, {3, 4}));
    out.logprobs.push_back(f32_tensor({1, 3}, {5, 6, 7}));
    out.logprobs.push_back(f32_tensor({1}, {8}));
    tinker_public::ForwardBackwardOutput msg;
    ASSERT_TRUE(msg.ParseFromString(encode_forward_backward_output_proto(out)));
    EXPECT_EQ(msg.loss_fn_outputs_size(), 4);
    auto back = decode_forward_backward_output_proto(msg.SerializeAsString());
    ASSERT_TRUE(back.ok());
    ASSERT_EQ(back->logprobs.size(), 4u);
    EXPECT_EQ(back->logprobs[2].shape, (std::vector<int64_t>{1, 3}));
}

TEST(WireOutput, ZeroDatumsStillGetOneRecord) {
    engine::ForwardBackwardOutput out;
    out.metrics["loss:sum"] = 0.0;
    tinker_public::ForwardBackwardOutput msg;
    ASSERT_TRUE(msg.ParseFromString(encode_forward_backward_output_proto(out)));
    ASSERT_EQ(msg.loss_fn_outputs_size(), 1);
    EXPECT_EQ(msg.loss_fn_outputs(0).num_datums(), 0);
    EXPECT_EQ(msg.loss_fn_outputs(0).fields().at("logprobs").offsets(), std::string(8, '\0'));
    auto back = decode_forward_backward_output_proto(msg.SerializeAsString());
    ASSERT_TRUE(back.ok());
    EXPECT_TRUE(back->logprobs.empty());
}

TEST(WireOutput, NanSurvivesProtobufAndBecomesNullInJson) {
    engine::ForwardBackwardOutput out;
    out.logprobs.push_back(f32_tensor({3}, {NAN, -0.5f, -INFINITY}));
    out.metrics["loss:sum"] = NAN;
    out.metrics["tokens:sum"] = 3;
    auto back = decode_forward_backward_output_proto(encode_forward_backward_output_proto(out));
    ASSERT_TRUE(back.ok());
    const auto values = values_of<float>(back->logprobs[0]);
    EXPECT_TRUE(std::isnan(values[0]));
    EXPECT_EQ(values[1], -0.5f);
    EXPECT_EQ(values[2], -INFINITY);
    EXPECT_TRUE(std::isnan(back->metrics.at("loss:sum")));

    const nlohmann::json json = encode_forward_backward_output_json(out);
    EXPECT_EQ(json["loss_fn_output_type"], "ArrayRecord");
    const auto & lp = json["loss_fn_outputs"][0]["logprobs"];
    EXPECT_EQ(lp["data"], nlohmann::json::parse("[null, -0.5, null]"));
    EXPECT_EQ(lp["dtype"], "float32");
    EXPECT_EQ(lp["shape"], nlohmann::json::parse("[3]"));
    EXPECT_TRUE(json["metrics"]["loss:sum"].is_null());
    EXPECT_EQ(json["metrics"]["tokens:sum"], 3.0);
    EXPECT_EQ(json.dump().find("NaN"), std::string::npos);
}

TEST(WireOutput, MalformedOutputIsRejected) {
    EXPECT_FALSE(decode_forward_backward_output_proto(std::string("\x12\x10", 2)).ok());
    engine::ForwardBackwardOutput out;
    out.logprobs.push_back(f32_tensor({2}, {1, 2}));
    tinker_public::ForwardBackwardOutput msg;
    ASSERT_TRUE(msg.ParseFromString(encode_forward_backward_output_proto(out)));
    (*msg.mutable_loss_fn_outputs(0)->mutable_fields())["logprobs"].set_offsets(le_bytes<int64_t>({0, 12}));
    auto r = decode_forward_backward_output_proto(msg.SerializeAsString());
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().message, "loss_fn_outputs[0].fields[\"logprobs\"].offsets[1]: bad byte offset 12");
}

// ---- legacy JSON ----

TEST(WireJson, ForwardBackwardAndForwardInput) {
    auto body = nlohmann::json::parse(R"({
      "model_id": "m1", "seq_id": 3,
      "forward_backward_input": {
        "loss_fn": "cross_entropy", "loss_fn_config": {"beta": 0.1},
        "data": [{
          "model_input": {"chunks": [{"type": "encoded_text", "tokens": [5, 6]}, {"tokens": [7]}]},
          "loss_fn_inputs": {
            "target_tokens": {"data": [6, 7, 8], "dtype": "int64", "shape": [3]},
            "weights": {"data": [1.0, 0.0, 0.5], "dtype": "float32"}
          }}]}})");
    auto r = decode_forward_backward_json(body);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->model_id, "m1");
    EXPECT_EQ(r->seq_id, 3);
    EXPECT_FALSE(r->forward_only);
    EXPECT_EQ(r->loss_fn, "cross_entropy");
    EXPECT_EQ(r->loss_fn_config.at("beta"), 0.1);
    ASSERT_EQ(r->data.size(), 1u);
    EXPECT_EQ(r->data[0].tokens, (std::vector<int64_t>{5, 6, 7}));
    EXPECT_EQ(values_of<int64_t>(r->data[0].loss_inputs.at("target_tokens")), (std::vector<int64_t>{6, 7, 8}));
    const auto & w = r->data[0].loss_inputs.at("weights");
    EXPECT_EQ(w.shape, (std::vector<int64_t>{3}));
    EXPECT_EQ(values_of<float>(w), (std::vector<float>{1.f, 0.f, 0.5f}));

    body["forward_input"] = body["forward_backward_input"];
    body.erase("forward_backward_input");
    auto fwd = decode_forward_backward_json(body);
    ASSERT_TRUE(fwd.ok()) << fwd.error().message;
    EXPECT_TRUE(fwd->forward_only);

    body["forward_backward_input"] = body["forward_input"];
    expect_error(decode_forward_backward_json(body), ErrorKind::INVALID_ARGUMENT,
                 "forward_backward request: expected exactly one of forward_backward_input and forward_input");
}

TEST(WireJson, ChunkAndTensorErrors) {
    auto body = nlohmann::json::parse(R"({"model_id": "m", "seq_id": 1, "forward_input": {"loss_fn": "cross_entropy",
      "data": [{"model_input": {"chunks": [{"tokens": [1]}, {"type": "image", "data": "", "format": "png"}]},
                "loss_fn_inputs": {}}]}})");
    expect_error(decode_forward_backward_json(body), ErrorKind::UNSUPPORTED,
                 "data[0].model_input.chunks[1]: image chunks are not supported (text-only models)");
    body["forward_input"]["data"][0]["model_input"]["chunks"][1] = {{"tokens", {1, 2.5}}};
    expect_error(decode_forward_backward_json(body), ErrorKind::INVALID_ARGUMENT,
                 "data[0].model_input.chunks[1].tokens[1]: expected an int32 token id, got 2.5");
    body["forward_input"]["data"][0]["model_input"]["chunks"][1] = {{"type", "audio"}};
    expect_error(decode_forward_backward_json(body), ErrorKind::INVALID_ARGUMENT,
                 "data[0].model_input.chunks[1]: unknown chunk type \"audio\"");
    body["forward_input"]["data"][0]["model_input"]["chunks"][1] = {{"tokens", {1}}};
    body["forward_input"]["data"][0]["loss_fn_inputs"]["weights"] = {{"data", {1.0}}, {"dtype", "float64"}};
    expect_error(decode_forward_backward_json(body), ErrorKind::INVALID_ARGUMENT,
                 "data[0].loss_fn_inputs[\"weights\"]: \"dtype\" must be \"int64\" or \"float32\"");
}

TEST(WireJson, SparseTensor) {
    auto t = nlohmann::json::parse(R"({"data": [7, 9], "dtype": "int64", "shape": [2, 3],
                                       "sparse_crow_indices": [0, 1, 2], "sparse_col_indices": [2, 0]})");
    auto r = decode_tensor_json(t, "x");
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(values_of<int64_t>(*r), (std::vector<int64_t>{0, 0, 7, 9, 0, 0}));
    t["sparse_col_indices"] = {2, 3};
    auto bad = decode_tensor_json(t, "x");
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.error().message, "x.sparse_col_indices: entry 1 is column 3, outside [0, 3)");
    t.erase("sparse_col_indices");
    EXPECT_EQ(decode_tensor_json(t, "x").error().message,
              "x: sparse_crow_indices and sparse_col_indices must come together");
}

}  // namespace
}  // namespace tinkerd::wire
