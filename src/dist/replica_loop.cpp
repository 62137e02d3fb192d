// run_sampling_replica (replica_engine.h): a replica process's answers to rank 0's commands, on its own
// engine. Streamed tokens of a step are collected by the requests' on_token callbacks and sent back with
// the step's finished samples; stop strings become a stop_check built with this process's tokenizer.
#include <chrono>
#include <exception>
#include <memory>

#include "common/log.h"
#include "dist/codec.h"
#include "dist/replica_codec.h"
#include "dist/replica_engine.h"

namespace tinkerd::dist {

namespace {

class ReplicaServer {
  public:
    ReplicaServer(engine::Engine & local, const StopCheckFactory & stops) : local_(local), stops_(stops) {}

    // The answer to one command: status (1 ok / 0 + Error), then the command's result.
    std::vector<uint8_t> answer(ReplicaCommand command, const std::vector<uint8_t> & payload) {
        ByteReader r(payload);
        ByteWriter w;
        Result<void> status = internal_error("unknown replica command " + std::to_string(static_cast<int>(command)));
        ByteWriter result;
        try {
            status = run(command, r, result);
        } catch (const std::exception & e) {
            status = internal_error(std::string("engine error on the sampling replica: ") + e.what());
        }
        if (!status.ok()) {
            w.i64(0);
            w.error(status.error());
            return w.take();
        }
        w.i64(1);
        std::vector<uint8_t> bytes = w.take();
        std::vector<uint8_t> rest = result.take();
        bytes.insert(bytes.end(), rest.begin(), rest.end());
        return bytes;
    }

  private:
    Result<void> run(ReplicaCommand command, ByteReader & r, ByteWriter & out) {
        switch (command) {
            case ReplicaCommand::CREATE_ADAPTER: {
                auto id = local_.create_adapter(read_spec(r));
                if (!id.ok()) {
                    return id.error();
                }
                out.i64(*id);
                return {};
            }
            case ReplicaCommand::IMPORT_ADAPTER: {
                const engine::AdapterId id = r.i64();
                auto tensors = r.tensors();
                if (!r.ok()) {
                    return internal_error("sampling replica: malformed adapter weights");
                }
                const auto t0 = std::chrono::steady_clock::now();
                TRY_STATUS(local_.import_adapter(id, tensors, /*with_optimizer=*/false));
                LOG_INF("dist", "sampling replica: adapter %lld imported in %.1f ms", static_cast<long long>(id),
                        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
                return {};
            }
            case ReplicaCommand::REMOVE_ADAPTER:
                return local_.remove_adapter(r.i64());
            case ReplicaCommand::SUBMIT:
                return submit(r, out);
            case ReplicaCommand::STEP:
                step(out);
                return {};
            case ReplicaCommand::CANCEL:
                out.i64(local_.sample_cancel(r.i64()) ? 1 : 0);
                return {};
            default:
                return internal_error("unknown replica command " + std::to_string(static_cast<int>(command)));
        }
    }

    Result<void> submit(ByteReader & r, ByteWriter & out) {
        auto read = read_sample_request(r);
        if (!read.ok()) {
            return read.error();
        }
        auto & [request, stream] = *read;
        if (!request.stop_strings.empty()) {
            auto check = stops_(request.stop_strings);
            if (!check.ok()) {
                return check.error();
            }
            request.stop_check = std::move(check).value();
        }
        auto handle_slot = std::make_shared<engine::SampleHandle>(0);
        if (stream) {
            request.on_token = [this, handle_slot](int64_t index, int64_t token, float logprob,
                                                   const engine::TopLogprobs & top) {
                tokens_.push_back(StreamedToken{*handle_slot, index, token, logprob, top});
            };
        }
        auto handle = local_.sample_submit(std::move(request));
        if (!handle.ok()) {
            return handle.error();
        }
        *handle_slot = *handle;
        out.i64(*handle);
        return {};
    }

    void step(ByteWriter & out) {
        ReplicaStep step;
        step.finished = local_.sample_step();
        step.tokens = std::move(tokens_);
        tokens_.clear();
        step.stats = local_.sample_stats();
        write_replica_step(out, step);
    }

    engine::Engine & local_;
    const StopCheckFactory & stops_;
    std::vector<StreamedToken> tokens_;  // this step's streamed tokens
};

}  // namespace

Result<void> run_sampling_replica(engine::Engine & local, DataParallelGroup & pair, const StopCheckFactory & stops) {
    ReplicaServer server(local, stops);
    for (;;) {
        auto command = pair.receive_command();
        if (!command.ok()) {
            return command.error();
        }
        const auto op = static_cast<ReplicaCommand>(command->first);
        if (op == ReplicaCommand::STOP) {
            return {};
        }
        auto sent = pair.gather_to_root(server.answer(op, command->second));
        if (!sent.ok()) {
            return sent.error();
        }
    }
}

}  // namespace tinkerd::dist
