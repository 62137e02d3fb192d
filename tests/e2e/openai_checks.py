# Non-streaming checks of the OpenAI scenario, through the official `openai` client (openai_sdk.py):
# /v1/models and auth, greedy /v1/completions against the official tinker SDK's sample, the Qwen3 chat
# template against the golden renders, a model without a template, errors as the client's exception
# classes (param / code), n and stop strings. What the client cannot send (no key, X-API-Key, malformed
# JSON bodies) goes through the wire-level openai_client.py. Streaming lives in openai_streams.py.
import openai_client as wire_oai
import sdk_common as sdk
from harness import check, check_abs
from openai_sdk import PREFIXES, expect_error


def expect_wire_error(fn, status, what):
    """The wire-level client's error (for requests the official client cannot make)."""
    try:
        fn()
    except wire_oai.OpenAIError as e:
        check(e.status == status, "%s: HTTP %d (want %d): %s" % (what, e.status, status, e.message))
        return e
    raise AssertionError("%s: succeeded, want HTTP %d" % (what, status))


def greedy(client, model, prompt, max_tokens=16, **kw):
    """The one choice of a greedy /v1/completions request, and the whole response."""
    r = client.completion(model=model, prompt=prompt, max_tokens=max_tokens, temperature=0, **kw)
    check(len(r["choices"]) == 1, "%d choices for n=1" % len(r["choices"]))
    return r["choices"][0], r


def served_names(env):
    return [m.name for m in (env.qwen, env.stories) if m]


# ---------------------------------------------------------------- 1: models and auth

def check_model_list(client, names):
    body = client.models()
    check(body.get("object") == "list" and isinstance(body.get("data"), list), "/models body %r" % body)
    for m in body["data"]:
        check(m.get("object") == "model" and isinstance(m.get("id"), str) and isinstance(m.get("created"), int)
              and isinstance(m.get("owned_by"), str), "/models entry %r" % m)
    ids = [m["id"] for m in body["data"]]
    check(all(n in ids for n in names), "%s%s lacks %s: %r" % (client.prefix, "/models", names, ids))
    return ids


def check_models_auth(env):
    names = served_names(env) or []
    body = {"model": names[0] if names else "x", "prompt": "a", "max_tokens": 1}
    for prefix in PREFIXES:
        check_model_list(env.alice.with_(prefix=prefix), names)
        eve = env.alice.with_(prefix=prefix, api_key="tml-eve")
        expect_error(eve.models, 401, "GET %s/models with an unknown key" % prefix)
        expect_error(lambda: eve.completion(**body), 401, "POST %s/completions with an unknown key" % prefix)
        expect_error(lambda: eve.chat(model=body["model"], messages=[{"role": "user", "content": "a"}]),
                     401, "POST %s/chat/completions with an unknown key" % prefix)
        # what the official client cannot send: X-API-Key instead of Bearer, and no key at all
        raw = wire_oai.OpenAIClient(env.srv.port, "tml-alice", header="x-api-key", prefix=prefix)
        check(all(n in raw.model_ids() for n in names), "X-API-Key %s/models" % prefix)
        expect_wire_error(raw.with_(api_key=None).models, 401, "GET %s/models without a key" % prefix)
    return "models %s; 401s ok" % names


# ---------------------------------------------------------------- 2: parity with the Tinker API

def check_tinker_parity(env):
    m = env.main
    sc = sdk.service(env.srv, "tml-alice").create_sampling_client(base_model=m.name)
    seq = sc.sample(sdk.prompt(m.prompt), 1, sdk.params(max_tokens=24, temperature=0.0)).result().sequences[0]
    toks, lps, reason = list(seq.tokens), list(seq.logprobs), str(seq.stop_reason).split(".")[-1].lower()
    c, r = greedy(env.alice, m.name, m.prompt, 24, logprobs=0)
    lp = c["logprobs"]
    check(len(lp["tokens"]) == len(toks) == r["usage"]["completion_tokens"],
          "token counts: openai %d, usage %d, tinker %d" % (len(lp["tokens"]), r["usage"]["completion_tokens"],
                                                           len(toks)))
    check(r["usage"]["prompt_tokens"] == len(m.prompt), "prompt_tokens %r" % r["usage"])
    check_abs(lp["token_logprobs"], lps, 1e-4, "openai vs tinker greedy logprobs")
    check(c["finish_reason"] == reason, "finish_reason %r vs tinker stop_reason %r" % (c["finish_reason"], reason))
    check(c["text"] == m.text(toks), "openai text %r vs tinker tokens %r decoded %r" % (c["text"], toks, m.text(toks)))
    sid = sdk.resolved(sc)._sampling_session_id  # no public accessor in either SDK
    check(isinstance(sid, str) and sid, "the SDK's SamplingClient has no sampling session id: %r" % sid)
    env.sampler_id = sid  # for the tenant checks
    env.keep.append(sc)
    other, _ = greedy(env.alice.with_(prefix="/oai/api/v1"), sid, m.prompt, 24)
    check(other["text"] == c["text"], "model=<sampling session id>: %r vs %r" % (other["text"], c["text"]))
    return "%d greedy tokens identical (%s)" % (len(toks), reason)


# ---------------------------------------------------------------- 4: chat template

def chat_greedy(env, messages, **kw):
    r = env.alice.chat(model=env.qwen.name, messages=messages, max_tokens=12, temperature=0, **kw)
    check(r.get("object") == "chat.completion" and len(r["choices"]) == 1, "chat body %r" % r)
    msg = r["choices"][0]["message"]
    check(msg.get("role") == "assistant" and isinstance(msg.get("content"), str), "chat message %r" % msg)
    return msg["content"], r["usage"]["prompt_tokens"]


def check_render(env, key, messages, **kw):
    """The chat request's prompt_tokens equal the golden render's ids; its greedy text equals that of
    /v1/completions on the golden text and on the golden ids."""
    golden = env.golden["chat"][key]
    text, n = chat_greedy(env, messages, **kw)
    check(n == len(golden["ids"]), "%s: prompt_tokens %d, golden render has %d" % (key, n, len(golden["ids"])))
    for prompt in (golden["text"], golden["ids"]):
        c, r = greedy(env.alice, env.qwen.name, prompt, 12)
        check(r["usage"]["prompt_tokens"] == n, "%s: completions prompt_tokens %d vs chat %d"
              % (key, r["usage"]["prompt_tokens"], n))
        check(c["text"] == text, "%s: completions text %r vs chat %r" % (key, c["text"], text))
    return n


def check_chat_template(env):
    if env.qwen is None:
        return env.skip("chat template checks (no Qwen3 tokenizer)")
    msgs = env.golden["chat_messages"]
    a = check_render(env, "prompt_add_generation_prompt", msgs["prompt"])
    b = check_render(env, "prompt_add_generation_prompt_enable_thinking_false", msgs["prompt"],
                     chat_template_kwargs={"enable_thinking": False})
    c = check_render(env, "conversation_rendered", msgs["conversation"], add_generation_prompt=False)
    parts = [dict(m, content=[{"type": "text", "text": m["content"]}]) for m in msgs["prompt"]]
    check(chat_greedy(env, parts)[1] == a, "text-part content renders differently from string content")
    return "prompt_tokens %d / %d (enable_thinking false) / %d (conversation), as golden" % (a, b, c)


def check_no_template(env):
    if env.stories is None:
        return env.skip("no-template check (no stories260K)")
    e = expect_error(lambda: env.alice.chat(model=env.stories.name, messages=[{"role": "user", "content": "hi"}]),
                     400, "chat with a model without a chat template")
    check("chat template" in e.message or "chat_template" in e.message, "message %r names no template" % e.message)
    return "no-template 400: %r" % e.message[:60]


# ---------------------------------------------------------------- 7: errors, n, stop

def check_errors(env):
    c, name, p = env.alice, env.main.name, env.main.prompt
    for call in (lambda **kw: c.completion(prompt=p, **kw),
                 lambda **kw: c.chat(messages=[{"role": "user", "content": "hi"}], **kw)):
        expect_error(lambda: call(model=name, temperature=5), 400, "temperature 5", param="temperature")
        expect_error(lambda: call(model="no/such-model"), 404, "unknown model", param="model", code="model_not_found")
    expect_error(lambda: c.completion(model=name, prompt=p, max_tokens=10 ** 6), 400, "max_tokens over the context",
                 param="max_tokens")
    raw = wire_oai.OpenAIClient(env.srv.port, "tml-alice")
    for body, what in ((b'{"model": ', "truncated JSON"), (b"not json", "not JSON"), (b"[1, 2]", "a JSON array")):
        expect_wire_error(lambda: raw.call("POST", "/completions", body), 400, "%s body" % what)
    expect_wire_error(lambda: raw.call("POST", "/chat/completions", {"model": name}), 400, "chat without messages")
    r = c.completion(model=name, prompt=p, max_tokens=6, n=3, temperature=1.0, seed=3)
    idx = sorted(ch["index"] for ch in r["choices"])
    check(idx == [0, 1, 2], "n=3 gave choice indices %r" % idx)
    check(r["usage"]["completion_tokens"] <= 18 and r["usage"]["prompt_tokens"] == len(p), "n=3 usage %r" % r["usage"])
    return "400/404 params ok; n=3 ok"


def pick_stop(text):
    """A 3-character piece from the middle of text, first occurring there, not blank."""
    for k in list(range(len(text) // 2, len(text) - 3)) + list(range(1, len(text) // 2)):
        s = text[k:k + 3]
        if s.strip() and text.find(s) == k and "\ufffd" not in s:
            return k, s
    raise AssertionError("no usable stop string in %r" % text)


def check_stop_strings(env):
    m = env.main
    full, _ = greedy(env.alice, m.name, m.prompt, 24)
    k, stop = pick_stop(full["text"])
    for stops in ([stop], stop, ["\x01never", stop]):
        c, _ = greedy(env.alice, m.name, m.prompt, 24, stop=stops)
        check(c["finish_reason"] == "stop" and stop not in c["text"] and c["text"] == full["text"][:k],
              "stop=%r: %r %s (unstopped %r)" % (stops, c["text"], c["finish_reason"], full["text"]))
    events = env.alice.stream_completion(model=m.name, prompt=m.prompt, max_tokens=24, temperature=0, stop=[stop])
    streamed = "".join(e["choices"][0]["text"] for e in events)
    check(streamed == full["text"][:k], "streamed with stop %r: %r (want %r)" % (stop, streamed, full["text"][:k]))
    return "stop %r cut at %d" % (stop, k)


# ---------------------------------------------------------------- text continuity, echo offsets, 404 shape

def check_text_continuity(env):
    """A completion continues its prompt's text (SentencePiece keeps the leading space); with echo, every
    text_offset points at its token inside the returned text; unknown /v1 paths answer in OpenAI's shape."""
    if env.stories is None:
        return env.skip("text continuity (no stories260K)")
    name = env.stories.name
    choice, _ = greedy(env.alice, name, "Once upon a time,", 3, logprobs=0)
    check(choice["text"].startswith(" "), "completion text %r lost the space of its first token %r" %
          (choice["text"], choice["logprobs"]["tokens"][0]))
    check("".join(choice["logprobs"]["tokens"]) == choice["text"], "tokens %r do not add up to the text %r" %
          (choice["logprobs"]["tokens"], choice["text"]))
    echo, _ = greedy(env.alice, name, "Once upon a time", 5, echo=True, logprobs=2)
    text, lp = echo["text"], echo["logprobs"]
    offsets = lp["text_offset"] + [len(text)]
    for i, (tok, off) in enumerate(zip(lp["tokens"], lp["text_offset"])):
        special = tok == "<s>" and offsets[i + 1] == off  # written as itself (as in top_logprobs), not in the text
        check(special or text[off:off + len(tok)] == tok, "text_offset %d of %r does not point into %r"
              % (off, tok, text))
    check(lp["token_logprobs"][0] is None, "the first echoed token has a logprob: %r" % lp["token_logprobs"][:2])
    raw = wire_oai.OpenAIClient(env.srv.port, "tml-alice")
    expect_wire_error(lambda: raw.call("GET", "/nope"), 404, "unknown /v1 path")
    return "text %r; %d echoed offsets ok" % (choice["text"], len(lp["tokens"]))
