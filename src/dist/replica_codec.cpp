// Encodings of replica_codec.h, over codec.h's ByteWriter / ByteReader.
#include "dist/replica_codec.h"

#include <optional>

namespace tinkerd::dist {

namespace {

void write_f32(ByteWriter & w, float v) {
    w.f64(static_cast<double>(v));  // exact: every float is a double
}
float read_f32(ByteReader & r) {
    return static_cast<float>(r.f64());
}

void write_ids(ByteWriter & w, const std::vector<int64_t> & ids) {
    w.i64(static_cast<int64_t>(ids.size()));
    for (int64_t id : ids) {
        w.i64(id);
    }
}
std::vector<int64_t> read_ids(ByteReader & r) {
    const int64_t n = r.i64();
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < n && r.ok(); ++i) {
        ids.push_back(r.i64());
    }
    return ids;
}

void write_floats(ByteWriter & w, const std::vector<float> & values) {
    w.i64(static_cast<int64_t>(values.size()));
    for (float v : values) {
        write_f32(w, v);
    }
}
std::vector<float> read_floats(ByteReader & r) {
    const int64_t n = r.i64();
    std::vector<float> values;
    for (int64_t i = 0; i < n && r.ok(); ++i) {
        values.push_back(read_f32(r));
    }
    return values;
}

void write_top(ByteWriter & w, const engine::TopLogprobs & top) {
    w.i64(static_cast<int64_t>(top.size()));
    for (const auto & [token, logprob] : top) {
        w.i64(token);
        write_f32(w, logprob);
    }
}
engine::TopLogprobs read_top(ByteReader & r) {
    const int64_t n = r.i64();
    engine::TopLogprobs top;
    for (int64_t i = 0; i < n && r.ok(); ++i) {
        const int64_t token = r.i64();
        top.emplace_back(token, read_f32(r));
    }
    return top;
}

void write_tops(ByteWriter & w, const std::vector<engine::TopLogprobs> & tops) {
    w.i64(static_cast<int64_t>(tops.size()));
    for (const auto & top : tops) {
        write_top(w, top);
    }
}
std::vector<engine::TopLogprobs> read_tops(ByteReader & r) {
    const int64_t n = r.i64();
    std::vector<engine::TopLogprobs> tops;
    for (int64_t i = 0; i < n && r.ok(); ++i) {
        tops.push_back(read_top(r));
    }
    return tops;
}

void write_output(ByteWriter & w, const engine::SampleOutput & out) {
    w.i64(static_cast<int64_t>(out.sequences.size()));
    for (const auto & s : out.sequences) {
        write_ids(w, s.tokens);
        write_floats(w, s.logprobs);
        w.i64(s.stopped ? 1 : 0);
        write_tops(w, s.top_logprobs);
    }
    write_floats(w, out.prompt_logprobs);
    write_tops(w, out.topk_prompt_logprobs);
    write_floats(w, out.target_prompt_logprobs);
    write_ids(w, out.prompt_alt_tokens);
    write_floats(w, out.prompt_alt_logprobs);
}
engine::SampleOutput read_output(ByteReader & r) {
    engine::SampleOutput out;
    const int64_t n = r.i64();
    for (int64_t i = 0; i < n && r.ok(); ++i) {
        engine::SampledSequence s;
        s.tokens = read_ids(r);
        s.logprobs = read_floats(r);
        s.stopped = r.i64() != 0;
        s.top_logprobs = read_tops(r);
        out.sequences.push_back(std::move(s));
    }
    out.prompt_logprobs = read_floats(r);
    out.topk_prompt_logprobs = read_tops(r);
    out.target_prompt_logprobs = read_floats(r);
    out.prompt_alt_tokens = read_ids(r);
    out.prompt_alt_logprobs = read_floats(r);
    return out;
}

}  // namespace

void write_sample_request(ByteWriter & w, const engine::SampleRequest & q, bool stream_tokens) {
    w.i64(q.adapter);
    write_ids(w, q.prompt);
    w.i64(q.num_samples);
    w.i64(q.params.max_tokens);
    w.f64(q.params.temperature);
    w.i64(q.params.top_k);
    w.f64(q.params.top_p);
    w.i64(q.params.seed ? 1 : 0);
    w.i64(q.params.seed ? static_cast<int64_t>(*q.params.seed) : 0);
    write_ids(w, q.params.stop_token_ids);
    w.i64(q.params.stop_at_eos ? 1 : 0);
    w.i64(q.prompt_logprobs ? 1 : 0);
    w.i64(q.topk_prompt_logprobs);
    w.i64(q.top_logprobs);
    write_ids(w, q.target_prompt_ids);
    w.i64(q.target_prompt_k);
    w.i64(q.prompt_alt_tokens_k);
    w.i64(static_cast<int64_t>(q.stop_strings.size()));
    for (const auto & s : q.stop_strings) {
        w.str(s);
    }
    w.i64(stream_tokens ? 1 : 0);
}

Result<std::pair<engine::SampleRequest, bool>> read_sample_request(ByteReader & r) {
    engine::SampleRequest q;
    q.adapter = r.i64();
    q.prompt = read_ids(r);
    q.num_samples = r.i64();
    q.params.max_tokens = r.i64();
    q.params.temperature = r.f64();
    q.params.top_k = r.i64();
    q.params.top_p = r.f64();
    const bool seeded = r.i64() != 0;
    const auto seed = static_cast<uint64_t>(r.i64());
    q.params.seed = seeded ? std::optional<uint64_t>(seed) : std::nullopt;
    q.params.stop_token_ids = read_ids(r);
    q.params.stop_at_eos = r.i64() != 0;
    q.prompt_logprobs = r.i64() != 0;
    q.topk_prompt_logprobs = r.i64();
    q.top_logprobs = r.i64();
    q.target_prompt_ids = read_ids(r);
    q.target_prompt_k = r.i64();
    q.prompt_alt_tokens_k = r.i64();
    const int64_t stops = r.i64();
    for (int64_t i = 0; i < stops && r.ok(); ++i) {
        q.stop_strings.push_back(r.str());
    }
    const bool stream = r.i64() != 0;
    if (!r.ok()) {
        return internal_error("sampling replica: malformed sample request");
    }
    return std::make_pair(std::move(q), stream);
}

void write_sample_stats(ByteWriter & w, const engine::SampleStats & s) {
    for (int64_t v : {s.queued, s.running, s.live_sequences, s.kv_bytes, s.kv_budget_bytes, s.preemptions}) {
        w.i64(v);
    }
}
engine::SampleStats read_sample_stats(ByteReader & r) {
    engine::SampleStats s;
    for (int64_t * v : {&s.queued, &s.running, &s.live_sequences, &s.kv_bytes, &s.kv_budget_bytes, &s.preemptions}) {
        *v = r.i64();
    }
    return s;
}

void write_replica_step(ByteWriter & w, const ReplicaStep & step) {
    w.i64(static_cast<int64_t>(step.tokens.size()));
    for (const auto & t : step.tokens) {
        w.i64(t.handle);
        w.i64(t.index);
        w.i64(t.token);
        write_f32(w, t.logprob);
        write_top(w, t.top);
    }
    w.i64(static_cast<int64_t>(step.finished.size()));
    for (const auto & f : step.finished) {
        w.i64(f.handle);
        w.i64(f.output.ok() ? 1 : 0);
        if (f.output.ok()) {
            write_output(w, f.output.value());
        } else {
            w.error(f.output.error());
        }
    }
    write_sample_stats(w, step.stats);
}

Result<ReplicaStep> read_replica_step(ByteReader & r) {
    ReplicaStep step;
    const int64_t tokens = r.i64();
    for (int64_t i = 0; i < tokens && r.ok(); ++i) {
        StreamedToken t;
        t.handle = r.i64();
        t.index = r.i64();
        t.token = r.i64();
        t.logprob = read_f32(r);
        t.top = read_top(r);
        step.tokens.push_back(std::move(t));
    }
    const int64_t finished = r.i64();
    for (int64_t i = 0; i < finished && r.ok(); ++i) {
        engine::FinishedSample f;
        f.handle = r.i64();
        if (r.i64() != 0) {
            f.output = read_output(r);
        } else {
            f.output = r.error();
        }
        step.finished.push_back(std::move(f));
    }
    step.stats = read_sample_stats(r);
    if (!r.ok()) {
        return internal_error("sampling replica: malformed step answer");
    }
    return step;
}

}  // namespace tinkerd::dist
