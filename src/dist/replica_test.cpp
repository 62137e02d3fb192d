// Sampling replicas against the engine itself: a replica (this binary re-executed, answering over a
// two-rank group) samples exactly what a local engine samples on the same tiny model — base model and a
// sampler adapter sent to it, streamed tokens, prompt and top logprobs, stop strings rebuilt on the
// replica — refuses training calls, and a killed replica fails its requests and reports itself unhealthy.
#include <algorithm>
#include <csignal>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "dist/replica_engine.h"
#include "dist/replica_launch.h"
#include "dist/test_processes.h"
#include "engine/sample_test_helpers.h"
#include "engine/test_models.h"
#include "scheduler/adapter_lru.h"
#include "tokenizer/stop_strings.h"

namespace tinkerd::dist {
namespace {

using engine::AdapterId;

std::unique_ptr<engine::Engine> load_engine(const std::string & dir) {
    engine::EngineOptions options;
    options.dtype = engine::ComputeDType::FP32;
    options.n_threads = 1;
    auto loaded = engine::Engine::load(dir, options);
    if (!loaded.ok()) {
        throw std::runtime_error(loaded.error().message);
    }
    return std::move(loaded).value();
}

// "token:N" stops a sequence right after token N: a stop string the replica must rebuild from its text.
StopCheckFactory token_stops() {
    return [](const std::vector<std::string> & stops) -> Result<tokenizer::StopCheck> {
        std::vector<int64_t> ids;
        for (const auto & s : stops) {
            ids.push_back(std::stoll(s.substr(s.find(':') + 1)));
        }
        return tokenizer::StopCheck([ids](const std::vector<int64_t> & generated) {
            return std::find(ids.begin(), ids.end(), generated.back()) != ids.end();
        });
    };
}

// A replica process of the model in `model_dir` and rank 0's SamplingReplicaEngine for it.
class Replica {
  public:
    Replica(const std::string & model_dir, const engine::Engine & base) : model_dir_(model_dir) {
        engine_ = std::make_unique<SamplingReplicaEngine>(base, start_process(), 1);
    }
    // A new replica process (after kill_process) whose group is offered to the same engine.
    void restart() {
        engine_->offer_group(start_process());
        killed_ = false;
    }
    ~Replica() {
        engine_.reset();  // STOP
        int status = 0;
        waitpid(pid_, &status, 0);
        if (!killed_) {
            EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the replica failed";
        }
    }
    SamplingReplicaEngine & engine() { return *engine_; }
    void kill_process() {
        killed_ = true;
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
    }

  private:
    std::unique_ptr<DataParallelGroup> start_process() {
        const std::string init = "file://" + dir_.file("store" + std::to_string(++generation_));
        pid_ = testing::spawn_self({"--replica", init, model_dir_});
        auto pair = join_replica_pair(init, 0, 0, 60);
        if (!pair.ok()) {
            throw std::runtime_error(pair.error().message);
        }
        return std::move(pair).value();
    }

    testing::ScopedTempDir dir_{"replica_test"};
    std::string model_dir_;
    int generation_ = 0;
    pid_t pid_ = 0;
    bool killed_ = false;
    std::unique_ptr<SamplingReplicaEngine> engine_;
};

class SamplingReplica : public ::testing::Test {
  protected:
    void SetUp() override {
        // As main() does: a write to a replica the test killed fails with EPIPE instead of ending the test with
        // SIGPIPE (seen once in ~10 runs of ARestartedReplicaIsSwitchedToAndGetsItsAdaptersAgain).
        std::signal(SIGPIPE, SIG_IGN);
        testing::write_tiny_model(model_.path(), testing::TinyFamily::QWEN3, model::DType::F32, 5);
        local_ = load_engine(model_.path());
    }
    // A seeded request that asks for everything the codec carries.
    engine::SampleRequest full_request(AdapterId id, uint64_t seed) {
        auto r = testing::seeded_request(id, testing::random_tokens(9, seed, local_->config().vocab_size), 12, seed);
        r.num_samples = 2;
        r.prompt_logprobs = true;
        r.topk_prompt_logprobs = 3;
        r.top_logprobs = 2;
        return r;
    }
    testing::ScopedTempDir model_{"replica_model"};
    std::unique_ptr<engine::Engine> local_;
};

void expect_same_output(const engine::SampleOutput & a, const engine::SampleOutput & b) {
    ASSERT_EQ(a.sequences.size(), b.sequences.size());
    for (size_t s = 0; s < a.sequences.size(); ++s) {
        EXPECT_EQ(a.sequences[s].tokens, b.sequences[s].tokens) << "sequence " << s;
        EXPECT_EQ(a.sequences[s].logprobs, b.sequences[s].logprobs) << "sequence " << s;
        EXPECT_EQ(a.sequences[s].stopped, b.sequences[s].stopped) << "sequence " << s;
        EXPECT_EQ(a.sequences[s].top_logprobs, b.sequences[s].top_logprobs) << "sequence " << s;
    }
    ASSERT_EQ(a.prompt_logprobs.size(), b.prompt_logprobs.size());
    for (size_t i = 1; i < a.prompt_logprobs.size(); ++i) {  // [0] is NaN
        EXPECT_EQ(a.prompt_logprobs[i], b.prompt_logprobs[i]) << "prompt position " << i;
    }
    EXPECT_EQ(a.topk_prompt_logprobs, b.topk_prompt_logprobs);
}

TEST_F(SamplingReplica, BaseModelSamplesEqualLocalOnes) {
    Replica replica(model_.path(), *local_);
    for (uint64_t seed : {1u, 2u}) {
        const auto request = full_request(engine::BASE_MODEL, seed);
        const auto local = testing::sample_one(*local_, request);
        const auto remote = testing::sample_one(replica.engine(), request);
        ASSERT_FALSE(local.sequences.empty());
        expect_same_output(remote, local);
    }
    EXPECT_EQ(replica.engine().sample_stats().running, 0) << "stats come back with each step";
}

TEST_F(SamplingReplica, SamplerAdapterSentToTheReplicaSamplesLikeLocal) {
    const AdapterId trained = testing::trained_adapter(*local_, 3, 24, 0.05);
    const auto spec = local_->adapter_spec(trained).value();
    const auto weights = local_->export_adapter(trained, /*with_optimizer=*/false).value();
    Replica replica(model_.path(), *local_);
    const AdapterId remote_id = replica.engine().create_adapter(spec).value();
    ASSERT_TRUE(replica.engine().import_adapter(remote_id, weights, false).ok());
    EXPECT_EQ(replica.engine().adapter_spec(remote_id).value().rank, spec.rank);
    const auto local = testing::sample_one(*local_, full_request(trained, 7));
    const auto remote = testing::sample_one(replica.engine(), full_request(remote_id, 7));
    expect_same_output(remote, local);
    const auto base = testing::sample_one(*local_, full_request(engine::BASE_MODEL, 7));
    EXPECT_NE(base.sequences[0].logprobs, remote.sequences[0].logprobs) << "the adapter changes the outputs";
    const ReplicaSyncStats sync = replica.engine().sync_stats();
    EXPECT_EQ(sync.adapters, 1);
    EXPECT_GT(sync.bytes, 0);
    EXPECT_TRUE(replica.engine().remove_adapter(remote_id).ok());
    EXPECT_FALSE(replica.engine().adapter_spec(remote_id).ok());
}

TEST_F(SamplingReplica, StreamedTokensAndStopStringsArriveLikeLocal) {
    const auto plain = testing::sample_one(*local_, full_request(engine::BASE_MODEL, 4));
    const int64_t stop_token = plain.sequences[0].tokens.at(4);  // sequence 0 stops at its 5th token or before
    Replica replica(model_.path(), *local_);
    auto streamed = [&](engine::Engine & e, bool with_strings) {
        std::vector<std::pair<int64_t, int64_t>> events;  // (index, token)
        auto request = full_request(engine::BASE_MODEL, 4);
        request.on_token = [&events](int64_t index, int64_t token, float, const engine::TopLogprobs &) {
            events.emplace_back(index, token);
        };
        if (with_strings) {
            request.stop_strings = {"token:" + std::to_string(stop_token)};
        } else {
            request.stop_check = token_stops()({"token:" + std::to_string(stop_token)}).value();
        }
        auto out = testing::sample_one(e, request);
        return std::make_pair(out, events);
    };
    const auto [local, local_events] = streamed(*local_, false);
    const auto [remote, remote_events] = streamed(replica.engine(), true);
    EXPECT_TRUE(local.sequences[0].stopped);
    EXPECT_LE(local.sequences[0].tokens.size(), 5u);
    expect_same_output(remote, local);
    EXPECT_EQ(remote_events, local_events);
    EXPECT_FALSE(remote_events.empty());
}

TEST_F(SamplingReplica, TrainingCallsAreRefused) {
    Replica replica(model_.path(), *local_);
    engine::Engine & e = replica.engine();
    EXPECT_FALSE(e.optim_step(1, engine::AdamParams{}).ok());
    EXPECT_FALSE(e.export_adapter(1, false).ok());
    EXPECT_FALSE(e.import_adapter(1, {}, /*with_optimizer=*/true).ok());
    engine::ForwardBackwardInput input;
    const auto results = e.forward_backward({input}, true);
    ASSERT_EQ(results.size(), 1u);
    EXPECT_FALSE(results[0].ok());
    EXPECT_TRUE(replica.engine().healthy()) << "a refused call is not a failure of the replica";
}

TEST_F(SamplingReplica, AKilledReplicaFailsItsRequestsAndTurnsUnhealthy) {
    Replica replica(model_.path(), *local_);
    ASSERT_FALSE(testing::sample_one(replica.engine(), full_request(engine::BASE_MODEL, 1)).sequences.empty());
    replica.kill_process();
    const auto outputs = replica.engine().sample({full_request(engine::BASE_MODEL, 1)});
    ASSERT_EQ(outputs.size(), 1u);
    EXPECT_FALSE(outputs[0].ok());
    EXPECT_FALSE(replica.engine().healthy());
    EXPECT_FALSE(replica.engine().sample({full_request(engine::BASE_MODEL, 2)})[0].ok()) << "fails at once now";
}

TEST_F(SamplingReplica, ARestartedReplicaIsSwitchedToAndGetsItsAdaptersAgain) {
    const AdapterId trained = testing::trained_adapter(*local_, 3, 24, 0.05);
    const auto spec = local_->adapter_spec(trained).value();
    const auto weights = local_->export_adapter(trained, /*with_optimizer=*/false).value();
    Replica replica(model_.path(), *local_);
    scheduler::AdapterLru lru(4);
    auto load = [&]() -> Result<scheduler::AdapterWeights> { return scheduler::AdapterWeights{spec, weights}; };
    const AdapterId first = lru.acquire(replica.engine(), "sampler-a", load).value();
    const auto local = testing::sample_one(*local_, full_request(trained, 5));
    expect_same_output(testing::sample_one(replica.engine(), full_request(first, 5)), local);
    replica.kill_process();
    EXPECT_FALSE(replica.engine().sample({full_request(first, 5)})[0].ok());
    EXPECT_FALSE(replica.engine().healthy());
    const int64_t epoch = replica.engine().adapters_epoch();
    replica.restart();
    EXPECT_TRUE(replica.engine().healthy()) << "an offered group makes the replica usable again";
    const AdapterId again = lru.acquire(replica.engine(), "sampler-a", load).value();  // switches, imports anew
    EXPECT_NE(replica.engine().adapters_epoch(), epoch);
    EXPECT_EQ(replica.engine().sync_stats().adapters, 2) << "the LRU dropped the lost adapter and sent it again";
    expect_same_output(testing::sample_one(replica.engine(), full_request(again, 5)), local);
}

int replica_main(char ** argv) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    auto local = load_engine(argv[3]);
    auto pair = join_replica_pair(argv[2], 1, 0, 60);
    if (!pair.ok()) {
        std::fprintf(stderr, "replica: %s\n", pair.error().message.c_str());
        return 1;
    }
    auto status = run_sampling_replica(*local, **pair, token_stops());
    if (!status.ok()) {
        std::fprintf(stderr, "replica: %s\n", status.error().message.c_str());
    }
    return status.ok() ? 0 : 1;
}

}  // namespace
}  // namespace tinkerd::dist

int main(int argc, char ** argv) {
    tinkerd::testing::self_path();  // resolved before any test changes directory
    if (argc == 4 && std::string(argv[1]) == "--replica") {
        return tinkerd::dist::replica_main(argv);
    }
    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}
