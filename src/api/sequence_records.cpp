// SequenceRecords (sequence_records.h): recording sampled sequences and resolving provenance runs.
#include "api/sequence_records.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "common/log.h"

namespace tinkerd::api {

namespace {

std::vector<int64_t> host_ints(const engine::HostTensor & t) {
    std::vector<int64_t> out;
    if (t.dtype == model::DType::I64) {
        out.resize(t.bytes.size() / sizeof(int64_t));
        std::memcpy(out.data(), t.bytes.data(), out.size() * sizeof(int64_t));
    } else if (t.dtype == model::DType::I32) {
        std::vector<int32_t> narrow(t.bytes.size() / sizeof(int32_t));
        std::memcpy(narrow.data(), t.bytes.data(), narrow.size() * sizeof(int32_t));
        out.assign(narrow.begin(), narrow.end());
    }
    return out;
}

engine::HostTensor f32_tensor(const std::vector<float> & values) {
    engine::HostTensor t;
    t.dtype = model::DType::F32;
    t.shape = {static_cast<int64_t>(values.size())};
    t.bytes.resize(values.size() * sizeof(float));
    std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
    return t;
}

}  // namespace

// What a record counts against its session's budget: its tokens and its (shared) prompt.
int64_t SequenceRecords::cost(const Record & record) {
    return static_cast<int64_t>(record.tokens.size() + record.prompt->size());
}

void SequenceRecords::record(const std::string & session_id, const std::string & request_id,
                             std::vector<int64_t> prompt, const engine::SampleOutput & output, double now) {
    auto shared_prompt = std::make_shared<const std::vector<int64_t>>(std::move(prompt));
    std::lock_guard<std::mutex> lock(mutex_);
    SessionUse & use = sessions_[session_id];
    for (size_t i = 0; i < output.sequences.size(); ++i) {
        const auto & seq = output.sequences[i];
        const std::string id = request_id + "." + std::to_string(i);
        Record & rec = records_[id] =
            Record{session_id, shared_prompt, seq.tokens, seq.logprobs, now + RETENTION_SECONDS};
        use.ids.push_back(id);
        use.tokens += cost(rec);
    }
    while (use.tokens > max_tokens_per_session_ && use.ids.size() > output.sequences.size()) {
        evict_oldest(use);
    }
}

void SequenceRecords::evict_oldest(SessionUse & use) {
    const std::string id = use.ids.front();
    use.ids.pop_front();
    auto it = records_.find(id);
    if (it != records_.end()) {
        use.tokens -= cost(it->second);
        records_.erase(it);
    }
    LOG_WRN("api", "stability record %s dropped: its session holds more than %lld recorded tokens", id.c_str(),
            static_cast<long long>(max_tokens_per_session_));
}

Result<const SequenceRecords::Record *> SequenceRecords::find(const std::string & session_id,
                                                              const std::string & sequence_id) const {
    auto it = records_.find(sequence_id);
    if (it == records_.end() || it->second.session_id != session_id) {
        return invalid_argument("sequence_id '" + sequence_id +
                                "' is not a recorded sequence of this session (sample with "
                                "record_stability_info=True in the same session; records expire one day after "
                                "their last use and with their session, and do not survive a restart)");
    }
    return &it->second;
}

// The runs must cover `tokens` exactly, each within its record and equal to the recorded tokens there.
// With `sampler_logprobs`, sampled runs write the recorded logprobs at their positions.
Result<void> SequenceRecords::check_runs(const std::string & session_id, const std::vector<wire::ProvenanceRun> & runs,
                                         const std::vector<int64_t> & tokens, const std::string & where,
                                         std::vector<float> * sampler_logprobs) const {
    size_t pos = 0;
    for (size_t r = 0; r < runs.size(); ++r) {
        const auto & run = runs[r];
        const std::string at = where + "[" + std::to_string(r) + "]";
        auto record = find(session_id, run.sequence_id);
        TRY_STATUS(record);
        const std::vector<int64_t> & source = run.sampled ? (*record)->tokens : *(*record)->prompt;
        if (run.offset + run.length > static_cast<int64_t>(source.size()) ||
            pos + static_cast<size_t>(run.length) > tokens.size()) {
            return invalid_argument(at + ": offset " + std::to_string(run.offset) + " + length " +
                                    std::to_string(run.length) + " runs past the recorded " +
                                    (run.sampled ? "sampled tokens" : "prompt") + " (" + std::to_string(source.size()) +
                                    ") or the datum");
        }
        for (int64_t j = 0; j < run.length; ++j, ++pos) {
            if (tokens[pos] != source[static_cast<size_t>(run.offset + j)]) {
                return invalid_argument(at + ": token " + std::to_string(tokens[pos]) + " at position " +
                                        std::to_string(pos) + " is not the recorded token " +
                                        std::to_string(source[static_cast<size_t>(run.offset + j)]));
            }
            if (sampler_logprobs != nullptr && run.sampled) {
                (*sampler_logprobs)[pos] = (*record)->logprobs[static_cast<size_t>(run.offset + j)];
            }
        }
    }
    if (pos != tokens.size()) {
        return invalid_argument(where + ": the runs cover " + std::to_string(pos) + " positions, the datum has " +
                                std::to_string(tokens.size()));
    }
    return {};
}

Result<engine::HostTensor> SequenceRecords::resolve(const std::string & session_id, const engine::Datum & datum,
                                                    const wire::DatumProvenance & provenance, double now) {
    auto targets_it = datum.loss_inputs.find("target_tokens");
    if (provenance.targets.empty() || targets_it == datum.loss_inputs.end() || targets_it->second.shape.size() != 1) {
        return invalid_argument(
            "stable_reinforce needs the datum's provenance (Datum.with_provenance) and 1-D target_tokens");
    }
    const std::vector<int64_t> targets = host_ints(targets_it->second);
    std::vector<float> sampler_logprobs(targets.size(), std::numeric_limits<float>::quiet_NaN());
    std::lock_guard<std::mutex> lock(mutex_);
    if (!provenance.model_input.empty()) {
        TRY_STATUS(check_runs(session_id, provenance.model_input, datum.tokens, "model_input_spans", nullptr));
    }
    TRY_STATUS(check_runs(session_id, provenance.targets, targets, "loss_fn_input_spans", &sampler_logprobs));
    for (const auto * runs : {&provenance.model_input, &provenance.targets}) {
        for (const auto & run : *runs) {
            records_[run.sequence_id].expires_at = now + RETENTION_SECONDS;  // each use restarts the day
        }
    }
    return f32_tensor(sampler_logprobs);
}

void SequenceRecords::expire(double now) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto & [session, use] : sessions_) {
        std::deque<std::string> kept;
        for (const auto & id : use.ids) {
            auto it = records_.find(id);
            if (it != records_.end() && it->second.expires_at > now) {
                kept.push_back(id);
            } else if (it != records_.end()) {
                use.tokens -= cost(it->second);
                records_.erase(it);
            }
        }
        use.ids = std::move(kept);
    }
    std::erase_if(sessions_, [](const auto & entry) { return entry.second.ids.empty(); });
}

void SequenceRecords::drop_session(const std::string & session_id) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = sessions_.find(session_id);
    if (it == sessions_.end()) {
        return;
    }
    for (const auto & id : it->second.ids) {
        records_.erase(id);
    }
    sessions_.erase(it);
}

int64_t SequenceRecords::size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<int64_t>(records_.size());
}

}  // namespace tinkerd::api
