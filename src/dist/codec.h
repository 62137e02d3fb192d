// Byte encodings of what rank 0 sends to the other ranks of a data-parallel group and what they send
// back: forward_backward inputs and results, LoRA specs, AdamW parameters and PEFT-named tensors. Only
// processes of the same build read them (no versioning); a short or malformed buffer is an error.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/engine.h"

namespace tinkerd::dist {

// Commands rank 0 sends (DataParallelGroup::send_command); KEEPALIVE does nothing (group_keeper.h).
enum class Command : int64_t { FORWARD_BACKWARD = 1, OPTIM_STEP = 2, REPLICATE = 3, DROP = 4, STOP = 5, KEEPALIVE = 6 };

class ByteWriter {
  public:
    void i64(int64_t v);
    void f64(double v);
    void str(const std::string & s);
    void floats(const std::vector<float> & values);
    void tensor(const engine::HostTensor & t);
    void tensors(const std::map<std::string, engine::HostTensor> & ts);
    void error(const Error & e);
    void reserve(size_t bytes) { bytes_.reserve(bytes_.size() + bytes); }  // before a large write: one allocation
    std::vector<uint8_t> take() { return std::move(bytes_); }

  private:
    std::vector<uint8_t> bytes_;
};

class ByteReader {
  public:
    explicit ByteReader(const std::vector<uint8_t> & bytes) : bytes_(bytes) {}
    int64_t i64();
    double f64();
    std::string str();
    std::vector<float> floats();
    engine::HostTensor tensor();
    std::map<std::string, engine::HostTensor> tensors();
    Error error();
    // Counts read past the end or a bad length: false from then on.
    bool ok() const { return ok_; }

  private:
    const uint8_t * take(size_t n);
    const std::vector<uint8_t> & bytes_;
    size_t pos_ = 0;
    bool ok_ = true;
};

void write_inputs(ByteWriter & w, const std::vector<engine::ForwardBackwardInput> & inputs);
Result<std::vector<engine::ForwardBackwardInput>> read_inputs(ByteReader & r);

void write_outputs(ByteWriter & w, const std::vector<Result<engine::ForwardBackwardOutput>> & outputs);
Result<std::vector<Result<engine::ForwardBackwardOutput>>> read_outputs(ByteReader & r);

void write_spec(ByteWriter & w, const engine::LoraSpec & spec);
engine::LoraSpec read_spec(ByteReader & r);

void write_adam(ByteWriter & w, const engine::AdamParams & p);
engine::AdamParams read_adam(ByteReader & r);

}  // namespace tinkerd::dist
