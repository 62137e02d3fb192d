// SamplingService: building a request's SampleJob (which adapter, how to read its weights, where its
// events go), the in-flight count behind the 429, and reading a sampler's weights from the snapshot cache,
// a snapshot's directory or a sampler checkpoint's.
#include "api/sampling_service.h"

#include <chrono>
#include <utility>

#include "common/log.h"
#include "store/checkpoint_files.h"

namespace tinkerd::api {
namespace {

// Forwards a request's events to its sink and, on the output thread, counts the finished request's
// tokens and latency (submission to outcome) in the Telemetry.
class MeteredSink : public SampleSink {
  public:
    MeteredSink(std::shared_ptr<SampleSink> inner, Telemetry & telemetry, SampleUsage usage)
        : inner_(std::move(inner)), telemetry_(telemetry), usage_(std::move(usage)) {}
    void on_tokens(std::vector<GeneratedToken> tokens) override { inner_->on_tokens(std::move(tokens)); }
    bool cancelled() const override { return inner_->cancelled(); }
    void on_done(Result<engine::SampleOutput> output) override {
        usage_.ok = output.ok();
        if (output.ok()) {
            for (const auto & sequence : output->sequences) {
                usage_.tokens += static_cast<int64_t>(sequence.tokens.size());
            }
        }
        usage_.latency_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - submitted_).count();
        telemetry_.record_sample(usage_);
        inner_->on_done(std::move(output));
    }

  private:
    std::shared_ptr<SampleSink> inner_;
    Telemetry & telemetry_;
    SampleUsage usage_;
    const std::chrono::steady_clock::time_point submitted_ = std::chrono::steady_clock::now();
};

}  // namespace

Result<void> SamplingService::check_capacity() const {
    if (in_flight_.load() >= max_in_flight_) {
        return unavailable("too many sample requests queued (" + std::to_string(max_in_flight_) + "); retry shortly");
    }
    return {};
}

void SamplingService::submit(ServedModel & model, SampleSubmission s) {
    scheduler::SampleJob job;
    job.request = std::move(s.request);
    if (s.live_adapter) {
        job.adapter = *s.live_adapter;
    } else if (!s.sampler.model_path.empty() || !s.sampler.run_id.empty()) {  // else: the base model
        job.adapter_key = s.sampler.sampler_id;
        job.load_weights = [this, sampler = s.sampler] { return sampler_weights(sampler); };
    }
    job.cancelled = std::move(s.cancelled);
    if (telemetry_ != nullptr && !s.tenant.empty()) {
        s.sink = std::make_shared<MeteredSink>(std::move(s.sink), *telemetry_,
                                               SampleUsage{s.tenant, s.usage_name, model.name});
    }
    if (s.stream_tokens) {  // engine thread: the step's tokens are moved to the output stage
        job.on_tokens = [this, sink = s.sink](std::vector<GeneratedToken> tokens) {
            output_.push_tokens(sink, std::move(tokens));
        };
    }
    // Replicas' codecs do not carry images yet (src/dist): image prompts sample on rank 0.
    const bool has_images = !job.request.prompt_images.empty();
    ServedModel::SamplingReplica * replica = s.live_adapter || has_images ? nullptr : pick_replica(model);
    ++in_flight_;
    if (replica != nullptr) {
        submit_to_replica(model, *replica, std::move(job), std::move(s.sink));
        return;
    }
    job.on_done = deliver_to(std::move(s.sink));
    model.worker->submit_sample(std::move(job));
}

// A job's outcome to its sink through the output stage; the request leaves the in-flight count.
std::function<void(Result<engine::SampleOutput>)> SamplingService::deliver_to(std::shared_ptr<SampleSink> sink) {
    return [this, sink = std::move(sink)](Result<engine::SampleOutput> output) {
        --in_flight_;
        output_.push_done(sink, std::move(output));
    };
}

// A job on a sampling replica. If the replica dies before the job streamed anything, rank 0's worker
// runs a copy of it, so the client sees no failure (a stream already under way fails: its tokens are out).
void SamplingService::submit_to_replica(ServedModel & model, ServedModel::SamplingReplica & replica,
                                        scheduler::SampleJob job, std::shared_ptr<SampleSink> sink) {
    auto fallback = std::make_shared<scheduler::SampleJob>(job);
    fallback->on_done = deliver_to(sink);
    auto streamed = std::make_shared<std::atomic<bool>>(false);
    // A failure of this job with more transport failures than at its submission: the replica failed it
    // (its health may already be back: a restarted process is switched to while the job is failed).
    const int64_t failures_before = replica.failures ? replica.failures() : 0;
    if (job.on_tokens) {
        job.on_tokens = [streamed, forward = job.on_tokens](std::vector<GeneratedToken> tokens) {
            streamed->store(true);
            forward(std::move(tokens));
        };
    }
    job.on_done = [&model, &replica, fallback, streamed, deliver = deliver_to(sink),
                   failures_before](Result<engine::SampleOutput> output) {
        --replica.in_flight;
        const bool replica_failed = replica.failures && replica.failures() > failures_before;
        if (!output.ok() && replica_failed && !streamed->load()) {
            LOG_WRN("api", "%s: a sampling replica failed; its request runs on rank 0", model.name.c_str());
            model.worker->submit_sample(std::move(*fallback));
            return;
        }
        deliver(std::move(output));
    };
    ++replica.in_flight;
    replica.worker->submit_sample(std::move(job));
}

// The healthy sampling replica with the fewest requests in flight; none: rank 0's own worker samples.
// A live training adapter (an OpenAI call naming a run) exists only on rank 0, so those never get here.
ServedModel::SamplingReplica * SamplingService::pick_replica(ServedModel & model) {
    ServedModel::SamplingReplica * best = nullptr;
    for (const auto & replica : model.replicas) {
        if (replica->healthy && !replica->healthy()) {
            continue;
        }
        if (best == nullptr || replica->in_flight.load() < best->in_flight.load()) {
            best = replica.get();
        }
    }
    return best;
}

Result<scheduler::AdapterWeights> SamplingService::sampler_weights(const store::SamplerRow & sampler) const {
    std::string dir = sampler.dir;
    if (!sampler.run_id.empty()) {
        if (auto snapshot = registry_.find_snapshot(sampler.sampler_id)) {
            return scheduler::AdapterWeights{snapshot->spec, snapshot->tensors};
        }
        if (dir.empty()) {  // recorded by a tinkerd that kept snapshots in memory only
            return not_found("the weights of sampler '" + sampler.sampler_id +
                             "' were kept in memory only and are gone since the server restarted");
        }
    } else {
        auto path = parse_tinker_path(sampler.model_path);
        if (!path.ok()) {
            return path.error();
        }
        auto row = db_.get_checkpoint(path->run_id, path->checkpoint_id());
        if (!row.ok() || !row->has_value()) {
            return not_found("checkpoint '" + sampler.model_path + "' of sampler '" + sampler.sampler_id +
                             "' not found");
        }
        dir = (*row)->dir;
    }
    auto contents = store::read_checkpoint(dir, false);
    if (!contents.ok()) {
        return contents.error();
    }
    engine::LoraSpec spec;
    spec.rank = contents->config.rank;
    spec.alpha = contents->config.alpha;
    spec.train_attn = contents->config.train_attn;
    spec.train_mlp = contents->config.train_mlp;
    spec.train_unembed = contents->config.train_unembed;
    return scheduler::AdapterWeights{spec, std::move(contents->tensors)};
}

}  // namespace tinkerd::api
