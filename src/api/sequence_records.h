// SequenceRecords: what record_stability_info keeps of each sampled sequence (its session, the request's
// prompt, its tokens and the sampler's logprob of each), so that stable_reinforce can resolve a datum's
// provenance spans to the server's own sampler logprobs. In memory; a record expires one day after its
// sampling or its last use in training (the documented retention) and with its session.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/engine.h"
#include "wire/forward_backward_codec.h"

namespace tinkerd::api {

class SequenceRecords {
  public:
    static constexpr double RETENTION_SECONDS = 86400.0;

    // At most `max_tokens_per_session` recorded tokens (a record counts its tokens and its prompt) per session; the
    // oldest records of a session make room for new ones.
    explicit SequenceRecords(int64_t max_tokens_per_session = int64_t{1} << 22)
        : max_tokens_per_session_(max_tokens_per_session) {}

    // Records every sequence of a finished sample, named "<request_id>.<i>" (the ids asample answered).
    void record(const std::string & session_id, const std::string & request_id, std::vector<int64_t> prompt,
                const engine::SampleOutput & output, double now);

    // stable_reinforce: the datum's per-target sampler logprobs (F32 [N]; NaN on prompt-span targets) from its
    // provenance, after checking that the runs tile model_input and target_tokens, name sequences recorded
    // in `session_id`, stay in bounds and match the recorded tokens. Refreshes each named record's expiry.
    Result<engine::HostTensor> resolve(const std::string & session_id, const engine::Datum & datum,
                                       const wire::DatumProvenance & provenance, double now);

    void expire(double now);
    void drop_session(const std::string & session_id);
    int64_t size() const;

  private:
    struct Record {
        std::string session_id;
        std::shared_ptr<const std::vector<int64_t>> prompt;  // shared by a request's samples
        std::vector<int64_t> tokens;
        std::vector<float> logprobs;  // one per token
        double expires_at = 0;
    };
    struct SessionUse {
        std::deque<std::string> ids;  // oldest first
        int64_t tokens = 0;
    };

    Result<const Record *> find(const std::string & session_id, const std::string & sequence_id) const;
    Result<void> check_runs(const std::string & session_id, const std::vector<wire::ProvenanceRun> & runs,
                            const std::vector<int64_t> & tokens, const std::string & where,
                            std::vector<float> * sampler_logprobs) const;
    static int64_t cost(const Record & record);
    void evict_oldest(SessionUse & use);

    int64_t max_tokens_per_session_;
    mutable std::mutex mutex_;
    std::map<std::string, Record> records_;
    std::map<std::string, SessionUse> sessions_;
};

}  // namespace tinkerd::api
