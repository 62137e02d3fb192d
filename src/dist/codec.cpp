// ByteWriter / ByteReader (little-endian host layout: all ranks run the same build on the same kind of
// machine) and the encodings of engine calls built on them.
#include "dist/codec.h"

#include <cstring>

namespace tinkerd::dist {

using engine::HostTensor;

void ByteWriter::i64(int64_t v) {
    const auto * p = reinterpret_cast<const uint8_t *>(&v);
    bytes_.insert(bytes_.end(), p, p + sizeof v);
}
void ByteWriter::f64(double v) {
    const auto * p = reinterpret_cast<const uint8_t *>(&v);
    bytes_.insert(bytes_.end(), p, p + sizeof v);
}
void ByteWriter::str(const std::string & s) {
    i64(static_cast<int64_t>(s.size()));
    bytes_.insert(bytes_.end(), s.begin(), s.end());
}
void ByteWriter::floats(const std::vector<float> & values) {
    i64(static_cast<int64_t>(values.size()));
    const auto * p = reinterpret_cast<const uint8_t *>(values.data());
    bytes_.insert(bytes_.end(), p, p + values.size() * sizeof(float));
}
void ByteWriter::tensor(const HostTensor & t) {
    i64(static_cast<int64_t>(t.dtype));
    i64(static_cast<int64_t>(t.shape.size()));
    for (int64_t d : t.shape) {
        i64(d);
    }
    i64(static_cast<int64_t>(t.bytes.size()));
    bytes_.insert(bytes_.end(), t.bytes.begin(), t.bytes.end());
}
void ByteWriter::tensors(const std::map<std::string, HostTensor> & ts) {
    i64(static_cast<int64_t>(ts.size()));
    for (const auto & [name, t] : ts) {
        str(name);
        tensor(t);
    }
}
void ByteWriter::error(const Error & e) {
    i64(static_cast<int64_t>(e.kind));
    str(e.message);
}

const uint8_t * ByteReader::take(size_t n) {
    if (!ok_ || n > bytes_.size() - pos_) {
        ok_ = false;
        return nullptr;
    }
    const uint8_t * p = bytes_.data() + pos_;
    pos_ += n;
    return p;
}
int64_t ByteReader::i64() {
    int64_t v = 0;
    if (const uint8_t * p = take(sizeof v)) {
        std::memcpy(&v, p, sizeof v);
    }
    return v;
}
double ByteReader::f64() {
    double v = 0;
    if (const uint8_t * p = take(sizeof v)) {
        std::memcpy(&v, p, sizeof v);
    }
    return v;
}
std::string ByteReader::str() {
    const int64_t n = i64();
    const uint8_t * p = n >= 0 ? take(static_cast<size_t>(n)) : nullptr;
    ok_ = ok_ && p != nullptr;
    return p ? std::string(reinterpret_cast<const char *>(p), static_cast<size_t>(n)) : std::string();
}
std::vector<float> ByteReader::floats() {
    const int64_t n = i64();
    const uint8_t * p = n >= 0 && n < (int64_t{1} << 60) ? take(static_cast<size_t>(n) * sizeof(float)) : nullptr;
    ok_ = ok_ && p != nullptr;
    std::vector<float> values(p ? static_cast<size_t>(n) : 0);
    if (p && n > 0) {
        std::memcpy(values.data(), p, values.size() * sizeof(float));
    }
    return values;
}
HostTensor ByteReader::tensor() {
    HostTensor t;
    t.dtype = static_cast<model::DType>(i64());
    const int64_t rank = i64();
    for (int64_t d = 0; ok_ && d < rank && d < 8; ++d) {
        t.shape.push_back(i64());
    }
    const int64_t n = i64();
    const uint8_t * p = n >= 0 ? take(static_cast<size_t>(n)) : nullptr;
    ok_ = ok_ && p != nullptr && rank <= 8;
    if (p) {
        t.bytes.assign(p, p + n);
    }
    return t;
}
std::map<std::string, HostTensor> ByteReader::tensors() {
    std::map<std::string, HostTensor> out;
    const int64_t n = i64();
    for (int64_t i = 0; ok_ && i < n; ++i) {
        std::string name = str();
        out[name] = tensor();
    }
    return out;
}
Error ByteReader::error() {
    Error e;
    e.kind = static_cast<ErrorKind>(i64());
    e.message = str();
    return e;
}

void write_inputs(ByteWriter & w, const std::vector<engine::ForwardBackwardInput> & inputs) {
    w.i64(static_cast<int64_t>(inputs.size()));
    for (const auto & input : inputs) {
        w.i64(input.adapter);
        w.str(input.loss_fn);
        w.i64(static_cast<int64_t>(input.loss_fn_config.size()));
        for (const auto & [key, value] : input.loss_fn_config) {
            w.str(key);
            w.f64(value);
        }
        w.i64(static_cast<int64_t>(input.datums.size()));
        for (const auto & datum : input.datums) {
            w.tensor(engine::make_host_tensor_i64({static_cast<int64_t>(datum.tokens.size())}, datum.tokens));
            w.tensors(datum.loss_inputs);
        }
    }
}

Result<std::vector<engine::ForwardBackwardInput>> read_inputs(ByteReader & r) {
    std::vector<engine::ForwardBackwardInput> inputs(static_cast<size_t>(std::max<int64_t>(0, r.i64())));
    for (auto & input : inputs) {
        input.adapter = r.i64();
        input.loss_fn = r.str();
        for (int64_t n = r.i64(), i = 0; r.ok() && i < n; ++i) {
            std::string key = r.str();
            input.loss_fn_config[key] = r.f64();
        }
        input.datums.resize(static_cast<size_t>(std::max<int64_t>(0, r.i64())));
        for (auto & datum : input.datums) {
            const HostTensor tokens = r.tensor();
            datum.tokens.resize(tokens.bytes.size() / sizeof(int64_t));
            std::memcpy(datum.tokens.data(), tokens.bytes.data(), datum.tokens.size() * sizeof(int64_t));
            datum.loss_inputs = r.tensors();
        }
        if (!r.ok()) {
            return internal_error("data-parallel: malformed forward_backward batch");
        }
    }
    return inputs;
}

void write_outputs(ByteWriter & w, const std::vector<Result<engine::ForwardBackwardOutput>> & outputs) {
    w.i64(static_cast<int64_t>(outputs.size()));
    for (const auto & out : outputs) {
        w.i64(out.ok() ? 1 : 0);
        if (!out.ok()) {
            w.error(out.error());
            continue;
        }
        w.i64(static_cast<int64_t>(out->logprobs.size()));
        for (const auto & t : out->logprobs) {
            w.tensor(t);
        }
        w.i64(static_cast<int64_t>(out->metrics.size()));
        for (const auto & [key, value] : out->metrics) {
            w.str(key);
            w.f64(value);
        }
    }
}

Result<std::vector<Result<engine::ForwardBackwardOutput>>> read_outputs(ByteReader & r) {
    std::vector<Result<engine::ForwardBackwardOutput>> outputs;
    for (int64_t n = r.i64(), i = 0; r.ok() && i < n; ++i) {
        if (r.i64() == 0) {
            outputs.emplace_back(r.error());
            continue;
        }
        engine::ForwardBackwardOutput out;
        for (int64_t k = r.i64(), j = 0; r.ok() && j < k; ++j) {
            out.logprobs.push_back(r.tensor());
        }
        for (int64_t k = r.i64(), j = 0; r.ok() && j < k; ++j) {
            std::string key = r.str();
            out.metrics[key] = r.f64();
        }
        outputs.emplace_back(std::move(out));
    }
    if (!r.ok()) {
        return internal_error("data-parallel: malformed forward_backward results");
    }
    return outputs;
}

void write_spec(ByteWriter & w, const engine::LoraSpec & spec) {
    w.i64(spec.rank);
    w.f64(spec.alpha);
    w.i64((spec.train_attn ? 1 : 0) | (spec.train_mlp ? 2 : 0) | (spec.train_unembed ? 4 : 0));
}

engine::LoraSpec read_spec(ByteReader & r) {
    engine::LoraSpec spec;
    spec.rank = r.i64();
    spec.alpha = r.f64();
    const int64_t targets = r.i64();
    spec.train_attn = targets & 1;
    spec.train_mlp = targets & 2;
    spec.train_unembed = targets & 4;
    spec.seed = 0;  // the weights are imported right after
    return spec;
}

void write_adam(ByteWriter & w, const engine::AdamParams & p) {
    for (double v : {p.learning_rate, p.beta1, p.beta2, p.eps, p.weight_decay, p.grad_clip_norm, p.damping,
                     p.rank_lr_correction_exponent}) {
        w.f64(v);
    }
    w.i64(p.kind == engine::OptimizerKind::DIMUON ? 1 : 0);
}

engine::AdamParams read_adam(ByteReader & r) {
    engine::AdamParams p;
    for (double * v : {&p.learning_rate, &p.beta1, &p.beta2, &p.eps, &p.weight_decay, &p.grad_clip_norm, &p.damping,
                       &p.rank_lr_correction_exponent}) {
        *v = r.f64();
    }
    p.kind = r.i64() == 1 ? engine::OptimizerKind::DIMUON : engine::OptimizerKind::ADAMW;
    return p;
}

}  // namespace tinkerd::dist
