// Byte encodings of the sampling calls rank 0 sends to a sampling replica (replica_engine.h) and of its
// answers: a SampleRequest (without its callbacks: the stop strings travel instead of stop_check, and a
// flag says whether tokens are streamed), one step's streamed tokens and finished samples, and the
// engine's sampling counters. Same-build processes only, like codec.h.
#pragma once

#include <vector>

#include "dist/codec.h"
#include "engine/engine.h"

namespace tinkerd::dist {

// One generated token of a running request, as on_token saw it on the replica.
struct StreamedToken {
    engine::SampleHandle handle = 0;
    int64_t index = 0;
    int64_t token = 0;
    float logprob = 0;
    engine::TopLogprobs top;
};

// What one sample_step on the replica produced.
struct ReplicaStep {
    std::vector<StreamedToken> tokens;  // in the order they were generated
    std::vector<engine::FinishedSample> finished;
    engine::SampleStats stats;
};

void write_sample_request(ByteWriter & w, const engine::SampleRequest & request, bool stream_tokens);
// The request (callbacks empty) and whether its tokens are streamed back.
Result<std::pair<engine::SampleRequest, bool>> read_sample_request(ByteReader & r);

void write_replica_step(ByteWriter & w, const ReplicaStep & step);
Result<ReplicaStep> read_replica_step(ByteReader & r);

void write_sample_stats(ByteWriter & w, const engine::SampleStats & stats);
engine::SampleStats read_sample_stats(ByteReader & r);

}  // namespace tinkerd::dist
