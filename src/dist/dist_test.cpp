// Data-parallel exactness: groups of 1, 2 and 3 processes on loopback (this binary re-executed as the
// follower ranks) against one plain engine on the same tiny model: the same per-token logprobs, losses
// and LoRA gradients (<= 1e-5 relative, fp32) for a mixed batch of two adapters (two runs' ops, whose
// gradients must not mix), the same weights after optim_step, a bad input refused alone, and overflowing
// gradients on one rank failing their adapter with its earlier gradients restored; a follower killed and
// restarted: the group re-forms and its results equal one process again. Also the split itself.
#include <cmath>
#include <csignal>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "dist/distributed_engine.h"
#include "dist/generations.h"
#include "dist/shard.h"
#include "dist/test_processes.h"
#include "engine/test_models.h"

namespace tinkerd::dist {
namespace {

using engine::AdapterId;
using engine::ForwardBackwardInput;
using engine::HostTensor;

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

// Datums of several lengths, weighted cross-entropy; `shift` makes the two runs' data differ.
ForwardBackwardInput make_input(AdapterId adapter, int n_datums, int shift) {
    ForwardBackwardInput input;
    input.adapter = adapter;
    for (int d = 0; d < n_datums; ++d) {
        const int n = 3 + (d * 5 + shift) % 9;
        engine::Datum datum;
        std::vector<int64_t> targets;
        std::vector<float> weights;
        for (int t = 0; t < n; ++t) {
            datum.tokens.push_back((t * 7 + d * 3 + shift) % 50);
            targets.push_back((t * 11 + d + shift) % 50);
            weights.push_back(t == 0 ? 0.0f : 1.0f);
        }
        datum.loss_inputs["target_tokens"] = engine::make_host_tensor_i64({n}, targets);
        datum.loss_inputs["weights"] = engine::make_host_tensor_f32({n}, weights);
        input.datums.push_back(std::move(datum));
    }
    return input;
}

// ||a - b|| / ||b|| over every element of two PEFT-named tensor maps.
double relative_difference(const std::map<std::string, HostTensor> & a, const std::map<std::string, HostTensor> & b) {
    double diff = 0, norm = 0;
    EXPECT_EQ(a.size(), b.size());
    for (const auto & [name, tensor] : b) {
        const auto x = engine::host_tensor_values(a.at(name));
        const auto y = engine::host_tensor_values(tensor);
        EXPECT_EQ(x.size(), y.size()) << name;
        for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
            diff += (x[i] - y[i]) * (x[i] - y[i]);
            norm += y[i] * y[i];
        }
    }
    EXPECT_GT(norm, 0.0) << "all-zero reference: the test would not see a difference";
    return std::sqrt(diff / norm);
}

// A group of `world` processes: this one as rank 0 (a DistributedEngine) and world-1 spawned followers.
class Group {
  public:
    Group(const std::string & model_dir, int world) : model_dir_(model_dir), world_(world) {
        const GroupOptions options = group_options(0);
        auto store = GroupStore::open(options);
        if (!store.ok()) {
            throw std::runtime_error(store.error().message);
        }
        for (int r = 1; r < world; ++r) {
            pids_.push_back(spawn_follower(r));
        }
        const std::atomic<bool> never{false};
        auto group = lead_generation(**store, options, 0, never);
        if (!group.ok()) {
            throw std::runtime_error(group.error().message);
        }
        engine_ =
            std::make_unique<DistributedEngine>(load_engine(model_dir), *store, options, std::move(group).value());
    }
    ~Group() {
        engine_.reset();  // STOP
        for (pid_t pid : pids_) {
            int status = 0;
            waitpid(pid, &status, 0);
            EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a follower failed";
        }
    }
    DistributedEngine & engine() { return *engine_; }

    void kill_rank(int rank) {
        pid_t & pid = pids_[static_cast<size_t>(rank - 1)];
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
        pid = -1;
    }
    void restart_rank(int rank) { pids_[static_cast<size_t>(rank - 1)] = spawn_follower(rank); }

    // Waits (two minutes at most) until the group is whole again after a failure; its status then.
    engine::DataParallelStatus wait_until_whole() {
        for (int tries = 0; tries < 1200; ++tries) {
            const auto status = engine_->data_parallel_status();
            if (status.ranks == world_) {
                return status;
            }
            usleep(100000);
        }
        return engine_->data_parallel_status();
    }

  private:
    GroupOptions group_options(int rank) const {
        return GroupOptions{"file://" + dir_.file("store"), rank, world_, "model0", std::chrono::milliseconds(60000)};
    }
    pid_t spawn_follower(int rank) {
        const GroupOptions o = group_options(rank);
        return testing::spawn_self({"--follower", std::to_string(rank), o.init, std::to_string(world_), model_dir_});
    }

    testing::ScopedTempDir dir_{"dist_test"};
    std::string model_dir_;
    int world_;
    std::vector<pid_t> pids_;
    std::unique_ptr<DistributedEngine> engine_;
};

class DataParallel : public ::testing::TestWithParam<int> {
  protected:
    void SetUp() override {
        testing::write_tiny_model(model_.path(), testing::TinyFamily::QWEN3, model::DType::F32, 5);
    }
    testing::ScopedTempDir model_{"dist_model"};
};

engine::LoraSpec spec_with_seed(uint64_t seed) {
    engine::LoraSpec spec;
    spec.rank = 4;
    spec.alpha = 8;
    spec.seed = seed;
    return spec;
}

void expect_same_outputs(const std::vector<Result<engine::ForwardBackwardOutput>> & got,
                         const std::vector<Result<engine::ForwardBackwardOutput>> & want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_TRUE(got[i].ok() && want[i].ok()) << (got[i].ok() ? "" : got[i].error().message);
        const double loss = want[i]->metrics.at("loss:sum");
        EXPECT_NEAR(got[i]->metrics.at("loss:sum"), loss, 1e-5 * std::abs(loss)) << "input " << i;
        ASSERT_EQ(got[i]->logprobs.size(), want[i]->logprobs.size());
        for (size_t d = 0; d < want[i]->logprobs.size(); ++d) {
            const auto x = engine::host_tensor_values(got[i]->logprobs[d]);
            const auto y = engine::host_tensor_values(want[i]->logprobs[d]);
            ASSERT_EQ(x.size(), y.size());
            for (size_t t = 0; t < y.size(); ++t) {
                EXPECT_NEAR(x[t], y[t], 1e-5 * std::max(1.0, std::abs(y[t]))) << i << "/" << d << "/" << t;
            }
        }
    }
}

// The same adapters (one per seed) created on the one-process reference and on the group: {reference ids, group ids}.
std::pair<std::vector<AdapterId>, std::vector<AdapterId>> create_adapter_pairs(engine::Engine & reference,
                                                                               engine::Engine & dp,
                                                                               const std::vector<uint64_t> & seeds) {
    std::vector<AdapterId> ref_ids, dp_ids;
    for (uint64_t seed : seeds) {
        ref_ids.push_back(reference.create_adapter(spec_with_seed(seed)).value());
        dp_ids.push_back(dp.create_adapter(spec_with_seed(seed)).value());
    }
    return {ref_ids, dp_ids};
}

// Each adapter's accumulated gradients on the group equal the reference's (<= 1e-5 relative).
void expect_same_gradients(engine::Engine & dp, engine::Engine & reference, const std::vector<AdapterId> & dp_ids,
                           const std::vector<AdapterId> & ref_ids, const std::string & context) {
    for (size_t a = 0; a < dp_ids.size(); ++a) {
        EXPECT_LE(
            relative_difference(dp.export_gradients(dp_ids[a]).value(), reference.export_gradients(ref_ids[a]).value()),
            1e-5)
            << "adapter " << a << context;
    }
}

// optim_step on each adapter of both engines; the group's weights and Adam moments equal the reference's.
void step_and_expect_same_weights(engine::Engine & dp, engine::Engine & reference,
                                  const std::vector<AdapterId> & dp_ids, const std::vector<AdapterId> & ref_ids,
                                  const engine::AdamParams & adam) {
    for (size_t a = 0; a < dp_ids.size(); ++a) {
        ASSERT_TRUE(dp.optim_step(dp_ids[a], adam).ok());
        ASSERT_TRUE(reference.optim_step(ref_ids[a], adam).ok());
        EXPECT_LE(relative_difference(dp.export_adapter(dp_ids[a], true).value(),
                                      reference.export_adapter(ref_ids[a], true).value()),
                  1e-5)
            << "adapter " << a;
    }
}

TEST_P(DataParallel, MixedBatchMatchesOneProcessThroughTwoSteps) {
    auto reference = load_engine(model_.path());
    Group group(model_.path(), GetParam());
    engine::Engine & dp = group.engine();
    const auto [ref_ids, dp_ids] = create_adapter_pairs(*reference, dp, {11u, 12u});
    engine::AdamParams adam;
    adam.learning_rate = 0.05;
    for (int step = 0; step < 2; ++step) {
        auto batch = [&](const std::vector<AdapterId> & ids) {
            return std::vector<ForwardBackwardInput>{make_input(ids[0], 5, step), make_input(ids[1], 3, 7 + step)};
        };
        expect_same_outputs(dp.forward_backward(batch(dp_ids), true),
                            reference->forward_backward(batch(ref_ids), true));
        expect_same_gradients(dp, *reference, dp_ids, ref_ids, " step " + std::to_string(step));
        step_and_expect_same_weights(dp, *reference, dp_ids, ref_ids, adam);
    }
    // Forward only, after the steps: the followers' replicas took the same steps as rank 0.
    expect_same_outputs(dp.forward_backward({make_input(dp_ids[1], 4, 3)}, false),
                        reference->forward_backward({make_input(ref_ids[1], 4, 3)}, false));
}

// Two runs that reach the followers in the other order than they were created (the second trains first):
// a follower numbers them B=1, A=2 while rank 0 has A=1, B=2, and a later mixed batch must still sum each
// run's gradients with its own.
TEST_P(DataParallel, RunsReplicatedInAnotherOrderKeepTheirOwnGradients) {
    auto reference = load_engine(model_.path());
    Group group(model_.path(), GetParam());
    engine::Engine & dp = group.engine();
    const auto [ref_ids, dp_ids] = create_adapter_pairs(*reference, dp, {21u, 22u});
    engine::AdamParams adam;
    adam.learning_rate = 0.05;
    expect_same_outputs(dp.forward_backward({make_input(dp_ids[1], 4, 1)}, true),
                        reference->forward_backward({make_input(ref_ids[1], 4, 1)}, true));
    ASSERT_TRUE(dp.optim_step(dp_ids[1], adam).ok());
    ASSERT_TRUE(reference->optim_step(ref_ids[1], adam).ok());
    auto batch = [](const std::vector<AdapterId> & ids) {
        return std::vector<ForwardBackwardInput>{make_input(ids[0], 5, 2), make_input(ids[1], 3, 9)};
    };
    expect_same_outputs(dp.forward_backward(batch(dp_ids), true), reference->forward_backward(batch(ref_ids), true));
    expect_same_gradients(dp, *reference, dp_ids, ref_ids, "");
}

TEST_P(DataParallel, BadInputIsRefusedAloneAndChangesNothing) {
    auto reference = load_engine(model_.path());
    Group group(model_.path(), GetParam());
    engine::Engine & dp = group.engine();
    const AdapterId id = dp.create_adapter(spec_with_seed(3)).value();
    const AdapterId ref_id = reference->create_adapter(spec_with_seed(3)).value();
    auto bad = make_input(id, 2, 0);
    bad.datums[1].tokens[0] = 100000;
    auto results = dp.forward_backward({bad, make_input(id, 4, 1)}, true);
    ASSERT_EQ(results.size(), 2u);
    EXPECT_FALSE(results[0].ok());
    EXPECT_NE(results[0].error().message.find("outside the vocabulary"), std::string::npos);
    EXPECT_TRUE(results[1].ok());
    ASSERT_TRUE(reference->forward_backward({make_input(ref_id, 4, 1)}, true)[0].ok());
    EXPECT_LE(relative_difference(dp.export_gradients(id).value(), reference->export_gradients(ref_id).value()), 1e-5)
        << "only the good input's gradients were kept";
    auto unknown = dp.forward_backward({make_input(999, 2, 0)}, true);
    EXPECT_FALSE(unknown[0].ok());
}

// An input whose gradients overflow on one rank fails as a whole (its other parts succeeded elsewhere)
// and its adapter keeps the gradients it had; the other adapter of the batch trains as in one process.
TEST_P(DataParallel, NonFiniteGradientsFailTheirAdapterAndRestoreItsGradients) {
    auto reference = load_engine(model_.path());
    Group group(model_.path(), GetParam());
    engine::Engine & dp = group.engine();
    const auto [ref_ids, dp_ids] = create_adapter_pairs(*reference, dp, {21u, 22u});
    auto batch = [&](const std::vector<AdapterId> & ids, bool overflow) {
        std::vector<ForwardBackwardInput> inputs = {make_input(ids[0], 3, 1), make_input(ids[1], 2, 4)};
        if (overflow) {
            auto & weights = inputs[0].datums[0].loss_inputs["weights"];
            const int64_t n = weights.shape[0];
            weights = engine::make_host_tensor_f32({n}, std::vector<float>(static_cast<size_t>(n), 3e38f));
        }
        return inputs;
    };
    ASSERT_TRUE(dp.forward_backward(batch(dp_ids, false), true)[0].ok());  // gradients to keep
    ASSERT_TRUE(reference->forward_backward(batch(ref_ids, false), true)[0].ok());
    auto want = reference->forward_backward(batch(ref_ids, true), true);
    auto got = dp.forward_backward(batch(dp_ids, true), true);
    ASSERT_FALSE(want[0].ok()) << "the reference must refuse the overflowing input for this test to mean much";
    EXPECT_FALSE(got[0].ok());
    EXPECT_TRUE(got[1].ok());
    for (size_t a = 0; a < 2; ++a) {
        EXPECT_LE(relative_difference(dp.export_gradients(dp_ids[a]).value(),
                                      reference->export_gradients(ref_ids[a]).value()),
                  1e-5)
            << "adapter " << a;
        ASSERT_TRUE(dp.optim_step(dp_ids[a], engine::AdamParams{}).ok());
        ASSERT_TRUE(reference->optim_step(ref_ids[a], engine::AdamParams{}).ok());
    }
    // Forward on every rank: the followers' replicas kept the same gradients as rank 0.
    expect_same_outputs(dp.forward_backward(batch(dp_ids, false), false),
                        reference->forward_backward(batch(ref_ids, false), false));
}

INSTANTIATE_TEST_SUITE_P(Ranks, DataParallel, ::testing::Values(1, 2, 3));

// Rank 2 of 3 killed between two ops: the next op fails (category server), rank 0 trains alone (a
// forward_backward whose gradients are still accumulated when the group re-forms, so they must reach the
// new followers), a restarted rank 2 and the surviving rank 1 join the next generation, and the mixed
// batch's results, gradients, weights after optim_step and a forward on every rank equal one process.
class Regroup : public ::testing::Test {
  protected:
    void SetUp() override {
        testing::write_tiny_model(model_.path(), testing::TinyFamily::QWEN3, model::DType::F32, 5);
    }
    testing::ScopedTempDir model_{"dist_model"};
};

TEST_F(Regroup, GroupReformsAfterARankIsKilledAndRestarted) {
    auto reference = load_engine(model_.path());
    Group group(model_.path(), 3);
    DistributedEngine & dp = group.engine();
    const auto [ref_ids, dp_ids] = create_adapter_pairs(*reference, dp, {31u, 32u});
    engine::AdamParams adam;
    adam.learning_rate = 0.05;
    auto batch = [](const std::vector<AdapterId> & ids, int shift) {
        return std::vector<ForwardBackwardInput>{make_input(ids[0], 5, shift), make_input(ids[1], 3, 7 + shift)};
    };
    expect_same_outputs(dp.forward_backward(batch(dp_ids, 0), true),
                        reference->forward_backward(batch(ref_ids, 0), true));
    step_and_expect_same_weights(dp, *reference, dp_ids, ref_ids, adam);
    group.kill_rank(2);
    auto failed = dp.forward_backward(batch(dp_ids, 1), true);
    ASSERT_FALSE(failed[0].ok()) << "an op with a dead rank must fail";
    EXPECT_EQ(failed[0].error().kind, ErrorKind::INTERNAL) << "category server";
    expect_same_outputs(dp.forward_backward(batch(dp_ids, 2), true),
                        reference->forward_backward(batch(ref_ids, 2), true));
    EXPECT_EQ(dp.data_parallel_status().ranks, 1) << "rank 0 alone until rank 2 is back";

    group.restart_rank(2);
    const auto status = group.wait_until_whole();
    ASSERT_EQ(status.ranks, 3) << "the group did not re-form";
    EXPECT_GE(status.generation, 1);
    expect_same_outputs(dp.forward_backward(batch(dp_ids, 3), true),
                        reference->forward_backward(batch(ref_ids, 3), true));
    expect_same_gradients(dp, *reference, dp_ids, ref_ids, " after re-forming");
    step_and_expect_same_weights(dp, *reference, dp_ids, ref_ids, adam);
    EXPECT_EQ(dp.data_parallel_status().ranks, 3);
    expect_same_outputs(dp.forward_backward(batch(dp_ids, 4), false),
                        reference->forward_backward(batch(ref_ids, 4), false));
}

TEST(Shard, BalancesTokensAndCoversEveryDatumOnce) {
    std::vector<ForwardBackwardInput> inputs = {make_input(1, 7, 0), make_input(2, 5, 4)};
    const DatumRanks ranks = assign_datum_ranks(inputs, 3);
    const auto tokens = tokens_per_rank(inputs, ranks, 3);
    const auto [lo, hi] = std::minmax_element(tokens.begin(), tokens.end());
    EXPECT_LE(*hi - *lo, 11) << "greedy longest-first is within one datum (<= 11 tokens) of balanced";
    size_t covered = 0;
    for (int r = 0; r < 3; ++r) {
        const Shard shard = make_shard(inputs, ranks, r);
        for (size_t k = 0; k < shard.inputs.size(); ++k) {
            EXPECT_EQ(shard.inputs[k].adapter, inputs[shard.source[k]].adapter);
            covered += shard.inputs[k].datums.size();
        }
    }
    EXPECT_EQ(covered, 12u);
    EXPECT_EQ(assign_datum_ranks(inputs, 3), ranks) << "deterministic";
}

int follower_main(char ** argv) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    GroupOptions options{argv[3], std::atoi(argv[2]), std::atoi(argv[4]), "model0", std::chrono::milliseconds(60000)};
    auto local = load_engine(argv[5]);
    auto store = GroupStore::open(options);
    if (!store.ok()) {
        std::fprintf(stderr, "follower: %s\n", store.error().message.c_str());
        return 1;
    }
    auto status = follow_group(*local, **store, options);
    if (!status.ok()) {
        std::fprintf(stderr, "follower: %s\n", status.error().message.c_str());
    }
    return status.ok() ? 0 : 1;
}

}  // namespace
}  // namespace tinkerd::dist

int main(int argc, char ** argv) {
    tinkerd::testing::self_path();  // resolved before any test changes directory
    if (argc == 6 && std::string(argv[1]) == "--follower") {
        return tinkerd::dist::follower_main(argv);
    }
    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}
