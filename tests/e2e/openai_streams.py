# Streaming checks of the OpenAI scenario, through the official `openai` client's streams (one SSE
# framing check stays at the wire level): chunk shapes and order (object type, the chat role first,
# one finish_reason per choice, the usage-only chunk before [DONE]), streamed == non-streamed text,
# n=2, 200 concurrent streams, and a client that hangs up mid-stream (the server logs it, goes on).
import re
import threading
import time

import openai_client as wire_oai
from harness import check

CLOSED = re.compile(r"POST /v1/completions 200 [\d.]+ms stream bytes=\d+ .*\((client gone|write failed[^)]*|"
                    r"connection closed)\)")


def piece(choice, chat):
    return (choice["delta"].get("content") or "") if chat else choice["text"]


def chunk_choice(e, obj, stream_id, n):
    """The one choice of a content chunk, after checking the chunk's envelope."""
    check("error" not in e, "error event %r" % e)
    check(e.get("object") == obj and e.get("id") == stream_id, "chunk object/id %r" % e)
    check("usage" in e and e["usage"] is None, "usage in a content chunk: %r" % e)
    check(len(e.get("choices", [])) == 1, "chunk with %d choices" % len(e.get("choices", [])))
    c = e["choices"][0]
    check(0 <= c["index"] < n, "choice index %r for n=%d" % (c["index"], n))
    return c


def check_role(c, roles):
    """A chat choice's first delta, and only that one, carries role "assistant"."""
    i, first = c["index"], c["index"] not in roles
    check((c["delta"].get("role") is not None) == first, "index %d: a role in its first delta only: %r" % (i, c["delta"]))
    check(not first or c["delta"]["role"] == "assistant", "index %d: first delta %r" % (i, c["delta"]))
    roles.add(i)


def split_usage(events, obj, include_usage):
    """(content events, usage): with include_usage the last chunk has choices [] and the usage."""
    check(len(events) > 0, "a stream without events")
    if not include_usage:
        return events, None
    last = events[-1]
    check(last.get("choices") == [] and isinstance(last.get("usage"), dict) and last.get("object") == obj
          and last.get("id") == events[0]["id"], "last chunk %r is not the usage chunk" % last)
    return events[:-1], last["usage"]


def collect(events, chat, n=1, include_usage=False):
    """Validates a stream's events; returns (text per index, finish_reason per index, usage or None)."""
    obj = "chat.completion.chunk" if chat else "text_completion"
    events, usage = split_usage(events, obj, include_usage)
    texts, reasons, roles = {}, {}, set()
    for e in events:
        c = chunk_choice(e, obj, events[0]["id"], n)
        i = c["index"]
        check(i not in reasons, "chunk for index %d after its finish_reason: %r" % (i, e))
        if chat:
            check_role(c, roles)
        texts[i] = texts.get(i, "") + piece(c, chat)
        if c["finish_reason"] is not None:
            reasons[i] = c["finish_reason"]
    check(sorted(reasons) == list(range(n)), "finish_reason for indices %r (n=%d)" % (sorted(reasons), n))
    return texts, reasons, usage


def compare(plain, events, chat, n=1, include_usage=False):
    texts, reasons, usage = collect(events, chat, n, include_usage)
    for c in plain["choices"]:
        want = c["message"]["content"] if chat else c["text"]
        i = c["index"]
        check(texts[i] == want, "index %d: streamed %r vs non-streamed %r" % (i, texts[i], want))
        check(reasons[i] == c["finish_reason"], "index %d: finish_reason %r vs %r"
              % (i, reasons[i], c["finish_reason"]))
    check(not include_usage or usage == plain["usage"], "stream usage %r vs %r" % (usage, plain["usage"]))
    return texts


def check_stream_completion(env):
    body = dict(model=env.main.name, prompt=env.main.prompt, max_tokens=16, temperature=0)
    plain = env.alice.completion(**body)
    raw = wire_oai.OpenAIClient(env.srv.port, "tml-alice")  # the SSE framing itself, byte for byte
    compare(plain, raw.stream_completion(**body), False)
    compare(plain, env.alice.stream_completion(**body, stream_options={"include_usage": True}), False, 1, True)
    compare(plain, env.alice.with_(prefix="/oai/api/v1").stream_completion(**body), False)
    body["prompt"] = [env.main.prompt, env.main.prompt[:3]]
    compare(env.alice.completion(**body), env.alice.stream_completion(**body), False, 2)
    return "%d chars streamed" % len(plain["choices"][0]["text"])


def check_stream_chat(env):
    if env.qwen is None:
        return env.skip("chat streaming (no Qwen3 tokenizer)")
    body = dict(model=env.qwen.name, messages=env.qwen.messages, max_tokens=16, temperature=0)
    plain = env.alice.chat(**body)
    compare(plain, env.alice.stream_chat(**body, stream_options={"include_usage": True}), True, 1, True)
    compare(plain, env.alice.stream_chat(**body, logprobs=True, top_logprobs=2), True)
    return "%d chars streamed" % len(plain["choices"][0]["message"]["content"])


def check_stream_n2(env):
    body = dict(model=env.main.name, prompt=env.main.prompt, max_tokens=12, temperature=1.0, seed=5, n=2)
    plain = env.alice.completion(**body)
    texts = compare(plain, env.alice.stream_completion(**body, stream_options={"include_usage": True}), False, 2, True)
    if env.qwen:
        body = dict(model=env.qwen.name, messages=env.qwen.messages, max_tokens=12, temperature=1.0, seed=5, n=2)
        compare(env.alice.chat(**body), env.alice.stream_chat(**body), True, 2)
    return "n=2 texts differ: %s" % (texts[0] != texts[1])


# ---------------------------------------------------------------- 8: load and disconnects

def one_stream(env, i, out):
    m = env.main
    body = dict(model=m.name, prompt=m.prompt[: 3 + i % 7], max_tokens=8, temperature=1.0, seed=i)
    try:
        out[i] = collect(env.alice.stream_completion(**body), False)
    except Exception as e:  # reported on the main thread
        out[i] = e


def check_concurrent(env, count):
    out = [None] * count
    threads = [threading.Thread(target=one_stream, args=(env, i, out)) for i in range(count)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    secs = time.monotonic() - t0
    bad = [(i, r) for i, r in enumerate(out) if not isinstance(r, tuple)]
    check(not bad, "%d of %d streams failed, first: %r" % (len(bad), count, bad[:1]))
    return "%d streams in %.1f s" % (count, secs)


def wait_for_log(srv, pattern, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(srv.log_path, errors="replace") as f:
            found = pattern.findall(f.read())
        if found:
            return found
        time.sleep(0.1)
    return None


def check_disconnect(env):
    m = env.main
    stream = env.alice.open_stream(model=m.name, prompt=m.prompt, max_tokens=min(1500, m.context - len(m.prompt)),
                                   temperature=1.0, seed=1)
    first = next(iter(stream))
    check(first.choices and first.object == "text_completion", "first chunk %r" % first)
    stream.close()  # the official client hangs up mid-stream
    found = wait_for_log(env.srv, CLOSED)
    check(found, "no '(client gone)' stream end in the server log after the client hung up")
    after = env.alice.completion(model=m.name, prompt=m.prompt, max_tokens=4, temperature=0)
    check(len(after["choices"]) == 1, "request after the disconnect: %r" % after)
    return "stream end logged as (%s)" % found[0]
