// forward_backward results: per-datum logprobs + metrics -> protobuf ForwardBackwardOutput (ragged
// batches as ArrayRecords with int64 byte offsets) or legacy JSON, and the protobuf decoder for tests.
#include <climits>
#include <cmath>
#include <limits>

#include "tinker_public.pb.h"
#include "wire/forward_backward_codec.h"
#include "wire/tensor_codec.h"

namespace tinkerd::wire {
namespace {

using detail::append_le;
using detail::read_le;

float half_to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
    const int exp = (h >> 10) & 0x1f;
    const uint32_t mant = h & 0x3ff;
    float magnitude;
    if (exp == 0) {
        magnitude = std::ldexp(static_cast<float>(mant), -24);  // zero or subnormal
    } else if (exp == 31) {
        magnitude = mant ? std::nanf("") : INFINITY;
    } else {
        magnitude = std::ldexp(static_cast<float>(mant | 0x400), exp - 25);
    }
    return sign ? -magnitude : magnitude;
}

// double -> float without undefined behaviour: out-of-range finite values become +-inf.
float narrow_to_f32(double v) {
    constexpr double kMax = std::numeric_limits<float>::max();
    return v > kMax ? INFINITY : v < -kMax ? -INFINITY : static_cast<float>(v);
}

// A host tensor's values as float32 (outputs are F32 from the engine; other dtypes are converted).
std::vector<float> f32_values(const engine::HostTensor & t) {
    const size_t n = t.bytes.size() / model::dtype_size(t.dtype);
    std::vector<float> out(n);
    const uint8_t * p = t.bytes.data();
    for (size_t i = 0; i < n; ++i) {
        switch (t.dtype) {
            case model::DType::F32:
                out[i] = read_le<float>(p + 4 * i);
                break;
            case model::DType::F64:
                out[i] = narrow_to_f32(read_le<double>(p + 8 * i));
                break;
            case model::DType::BF16: {
                const uint32_t bits = static_cast<uint32_t>(read_le<uint16_t>(p + 2 * i)) << 16;
                std::memcpy(&out[i], &bits, 4);
                break;
            }
            case model::DType::F16:
                out[i] = half_to_float(read_le<uint16_t>(p + 2 * i));
                break;
            case model::DType::I64:
                out[i] = static_cast<float>(read_le<int64_t>(p + 8 * i));
                break;
            case model::DType::I32:
                out[i] = static_cast<float>(read_le<int32_t>(p + 4 * i));
                break;
            case model::DType::U8:
                out[i] = static_cast<float>(p[i]);
                break;
        }
    }
    return out;
}

// The dimensions after the first ([N] -> [], [N, K] -> [K]).
std::vector<int64_t> trailing_of(const engine::HostTensor & t) {
    return t.shape.empty() ? std::vector<int64_t>{} : std::vector<int64_t>(t.shape.begin() + 1, t.shape.end());
}

// One ArrayRecord holding datums [begin, end) (all with the same trailing shape).
void add_record(tinker_public::ForwardBackwardOutput & msg, const std::vector<engine::HostTensor> & logprobs,
                size_t begin, size_t end) {
    auto * record = msg.add_loss_fn_outputs();
    record->set_type_tag("ArrayRecord");
    record->set_num_datums(static_cast<int64_t>(end - begin));
    auto & field = (*record->mutable_fields())["logprobs"];
    field.set_dtype(tinker_public::DTYPE_FLOAT32);
    if (begin < end) {
        for (int64_t dim : trailing_of(logprobs[begin])) {
            field.add_trailing_shape(dim);
        }
    }
    std::string * data = field.mutable_data();
    std::string * offsets = field.mutable_offsets();
    append_le<int64_t>(*offsets, 0);
    for (size_t i = begin; i < end; ++i) {
        const auto & t = logprobs[i];
        if (t.dtype == model::DType::F32) {
            data->append(reinterpret_cast<const char *>(t.bytes.data()), t.bytes.size());
        } else {
            const auto values = f32_values(t);
            data->append(reinterpret_cast<const char *>(values.data()), values.size() * 4);
        }
        append_le<int64_t>(*offsets, static_cast<int64_t>(data->size()));
    }
}

nlohmann::json finite_or_null(double v) {
    return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

}  // namespace

std::string encode_forward_backward_output_proto(const engine::ForwardBackwardOutput & output) {
    tinker_public::ForwardBackwardOutput msg;
    msg.set_loss_fn_output_type("ArrayRecord");
    const auto & logprobs = output.logprobs;
    // Runs of consecutive datums with the same trailing shape; zero datums still get one empty record.
    size_t begin = 0;
    do {
        size_t end = begin;
        while (end < logprobs.size() && trailing_of(logprobs[end]) == trailing_of(logprobs[begin])) {
            ++end;
        }
        add_record(msg, logprobs, begin, end);
        begin = end;
    } while (begin < logprobs.size());
    msg.mutable_metrics()->insert(output.metrics.begin(), output.metrics.end());
    return msg.SerializeAsString();
}

nlohmann::json encode_forward_backward_output_json(const engine::ForwardBackwardOutput & output) {
    nlohmann::json outputs = nlohmann::json::array();
    for (const auto & t : output.logprobs) {
        nlohmann::json data = nlohmann::json::array();
        for (float v : f32_values(t)) {
            data.push_back(finite_or_null(v));
        }
        outputs.push_back({{"logprobs", {{"data", std::move(data)}, {"dtype", "float32"}, {"shape", t.shape}}}});
    }
    nlohmann::json metrics = nlohmann::json::object();
    for (const auto & [key, value] : output.metrics) {
        metrics[key] = finite_or_null(value);
    }
    return {{"loss_fn_output_type", "ArrayRecord"}, {"loss_fn_outputs", std::move(outputs)}, {"metrics", metrics}};
}

namespace {

// num_datums + 1 int64 byte offsets: non-decreasing, inside data, whole elements of `width` bytes.
Result<std::vector<int64_t>> read_offsets(const tinker_public::BatchedTensor & field, int64_t num_datums, size_t width,
                                          const std::string & where) {
    const std::string & raw = field.offsets();
    if (num_datums < 0 || raw.size() % 8 != 0 || static_cast<int64_t>(raw.size() / 8) != num_datums + 1) {
        return invalid_argument(where + ".offsets: " + std::to_string(raw.size()) + " bytes for " +
                                std::to_string(num_datums) + " datums");
    }
    std::vector<int64_t> offsets(raw.size() / 8);
    for (size_t i = 0; i < offsets.size(); ++i) {
        offsets[i] = read_le<int64_t>(raw.data() + 8 * i);
        const int64_t prev = i ? offsets[i - 1] : 0;
        if (offsets[i] < prev || offsets[i] > static_cast<int64_t>(field.data().size()) ||
            offsets[i] % static_cast<int64_t>(width) != 0) {
            return invalid_argument(where + ".offsets[" + std::to_string(i) + "]: bad byte offset " +
                                    std::to_string(offsets[i]));
        }
    }
    return offsets;
}

// Datum bytes [from, to) of a FLOAT32 / BFLOAT16 field -> F32 tensor [elements / prod(trailing), *trailing].
Result<engine::HostTensor> datum_tensor(const tinker_public::BatchedTensor & field, int64_t from, int64_t to,
                                        const std::string & where) {
    const bool bf16 = field.dtype() == tinker_public::DTYPE_BFLOAT16;
    auto values = detail::values_from_bytes(std::string_view(field.data()).substr(from, to - from),
                                            bf16 ? detail::WireDType::BF16 : detail::WireDType::F32, where);
    if (!values.ok()) {
        return values.error();
    }
    std::vector<int64_t> trailing(field.trailing_shape().begin(), field.trailing_shape().end());
    auto per_row = detail::checked_numel(trailing, where + ".trailing_shape");
    if (!per_row.ok()) {
        return per_row.error();
    }
    if ((*per_row == 0 && values->count != 0) || (*per_row != 0 && values->count % *per_row != 0)) {
        return invalid_argument(where + ": " + std::to_string(values->count) + " elements do not fit trailing shape " +
                                detail::shape_string(trailing));
    }
    std::vector<int64_t> shape{*per_row == 0 ? 0 : values->count / *per_row};
    shape.insert(shape.end(), trailing.begin(), trailing.end());
    return engine::HostTensor{model::DType::F32, std::move(shape), std::move(values->bytes)};
}

Result<void> decode_record(const tinker_public::ArrayRecord & record, const std::string & where,
                           std::vector<engine::HostTensor> & logprobs) {
    auto it = record.fields().find("logprobs");
    if (it == record.fields().end()) {
        return invalid_argument(where + ": no \"logprobs\" field");
    }
    const auto & field = it->second;
    const std::string field_where = where + ".fields[\"logprobs\"]";
    if (field.dtype() != tinker_public::DTYPE_FLOAT32 && field.dtype() != tinker_public::DTYPE_BFLOAT16) {
        return invalid_argument(field_where + ".dtype: expected FLOAT32 or BFLOAT16");
    }
    const size_t width = field.dtype() == tinker_public::DTYPE_FLOAT32 ? 4 : 2;
    auto offsets = read_offsets(field, record.num_datums(), width, field_where);
    if (!offsets.ok()) {
        return offsets.error();
    }
    for (size_t i = 0; i + 1 < offsets->size(); ++i) {
        auto t = datum_tensor(field, (*offsets)[i], (*offsets)[i + 1], field_where + "[" + std::to_string(i) + "]");
        if (!t.ok()) {
            return t.error();
        }
        logprobs.push_back(std::move(*t));
    }
    return {};
}

}  // namespace

Result<engine::ForwardBackwardOutput> decode_forward_backward_output_proto(std::string_view body) {
    tinker_public::ForwardBackwardOutput msg;
    if (body.size() > static_cast<size_t>(INT_MAX) || !msg.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
        return invalid_argument("malformed protobuf ForwardBackwardOutput");
    }
    engine::ForwardBackwardOutput output;
    for (int r = 0; r < msg.loss_fn_outputs_size(); ++r) {
        TRY_STATUS(
            decode_record(msg.loss_fn_outputs(r), "loss_fn_outputs[" + std::to_string(r) + "]", output.logprobs));
    }
    output.metrics.insert(msg.metrics().begin(), msg.metrics().end());
    return output;
}

}  // namespace tinkerd::wire
