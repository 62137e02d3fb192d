# Scenario: the OpenAI-compatible endpoints (/v1 and /oai/api/v1) of one server with two tenants, driven
# by the official `openai` client (openai_sdk.py; training through the official tinker SDK), serving a
# tiny random Qwen3 model with the real Qwen3 tokenizer and chat template (<source>/../shared/models/
# tokenizers/qwen3, required) and stories260K (a tokenizer, no template). Owns the setup and the case
# list; the checks live in openai_checks.py, openai_streams.py and openai_trained.py.
import json
import os
import shutil
import tempfile

import openai_checks as checks
import openai_streams as streams
import openai_trained as trained
import tiny_chat_model
from harness import shared_path, stories_dir
from openai_sdk import OpenAIOfficial
from scenario_sdk_sample import Detok
from scenario_sdk_tenants import write_keys

QWEN = "tiny-qwen3"
STORIES = "stories260K"
CONTEXT = 4096  # the tiny Qwen3's max_position_embeddings: room for the long disconnect stream
# golden Qwen3 ids of "Once upon a time, there was a little girl named Lily."
PROMPT_IDS = [12522, 5193, 264, 882, 11, 1052, 572, 264, 2632, 3743, 6941, 47290, 13]


class Model:
    """A served model as the checks use it: name, context, prompt ids, eos, ids -> text, and the
    SFT setup (prompt ids, two target continuations ending in eos, learning rate, chat messages)."""

    def __init__(self, name, context, prompt, eos, decode, train_prompt, targets, lr, messages=None):
        self.name, self.context, self.prompt, self.eos, self.decode = name, context, prompt, eos, decode
        self.lr = lr
        self.train_prompt, self.targets, self.messages = train_prompt, targets, messages

    def text(self, ids):
        return self.decode([t for t in ids if t != self.eos])


def golden_path():
    return shared_path("models", "golden", "tokenizers_qwen3_llama3_1.json")


def qwen3_tokenizer_dir():
    d = shared_path("models", "tokenizers", "qwen3")
    for f in tiny_chat_model.TOKENIZER_FILES:
        shared_path("models", "tokenizers", "qwen3", f)
    return d


def load_golden():
    with open(golden_path()) as f:
        return json.load(f)["qwen3"]


def qwen_model(model_dir, golden):
    chat = golden["chat"]["prompt_add_generation_prompt"]
    targets = [[9707, 1879, 0, tiny_chat_model.IM_END],  # "Hello world!"
               [12522, 5193, 264, 882, tiny_chat_model.IM_END]]  # "Once upon a time"
    decode = tiny_chat_model.ByteLevelDecoder(os.path.join(model_dir, "tokenizer.json"))
    return Model(QWEN, CONTEXT, PROMPT_IDS, tiny_chat_model.IM_END, decode, chat["ids"], targets, 2e-2,
                 golden["chat_messages"]["prompt"])


def stories_model(hf_dir):
    detok = Detok(os.path.join(hf_dir, "tokenizer.json"))
    return Model(STORIES, 512, [1, 403, 407, 261, 378], 2, detok, [1, 403, 407, 261, 378],
                 [[393, 426, 2], [370, 426, 2]], 5e-3)  # " happy." and " big."


class Env:
    """What the checks share: the server, the two tenants' clients, the served models."""

    def __init__(self, ctx, srv, qwen, stories):
        self.ctx, self.srv = ctx, srv
        self.alice = OpenAIOfficial(srv.port, "tml-alice")
        self.bob = OpenAIOfficial(srv.port, "tml-bob")
        self.keep = []  # SDK clients whose sessions the checks still use
        self.qwen, self.stories = qwen, stories
        self.main = qwen or stories  # the model of the non-chat checks
        self.golden = load_golden() if qwen else None
        self.sampler_id = None  # alice's Tinker sampling session, once check_tinker_parity made one

    def skip(self, what):
        self.ctx.note("SKIP %s" % what)
        return "skipped"


def start(ctx, tmp):
    tok_dir = qwen3_tokenizer_dir()
    golden_path()
    hf = stories_dir()
    qwen_dir = tiny_chat_model.write(os.path.join(tmp, "tiny-qwen3"), tok_dir, context=CONTEXT)
    extra = ["--model", "%s=%s" % (QWEN, qwen_dir), "--model", "%s=%s" % (STORIES, hf)]
    keys = write_keys()
    try:
        srv = ctx.start_server(extra=["--api-keys", keys] + extra, name="tinkerd-openai")
    finally:
        os.unlink(keys)
    qwen = qwen_model(qwen_dir, load_golden()) if qwen_dir else None
    return Env(ctx, srv, qwen, stories_model(hf) if hf else None)


def run_cases(ctx, env):
    out = [ctx.case("1 /v1/models, auth (401 shape, Bearer, X-API-Key), both prefixes", checks.check_models_auth, env)]
    if env.main is None:
        env.skip("all generation checks: neither the Qwen3 tokenizer nor stories260K is available")
        return out
    out.append(ctx.case("2 /v1/completions greedy == Tinker asample greedy", checks.check_tinker_parity, env))
    out.append(ctx.case("3 streaming completions == non-streamed, include_usage", streams.check_stream_completion, env))
    out.append(ctx.case("3 streaming chat: role first, content == non-streamed", streams.check_stream_chat, env))
    out.append(ctx.case("3 streaming n=2: indices 0 and 1, one finish_reason each", streams.check_stream_n2, env))
    out.append(ctx.case("4 chat template: golden prompt_tokens, == completions text", checks.check_chat_template, env))
    out.append(ctx.case("4 model without a chat template -> 400", checks.check_no_template, env))
    out.append(ctx.case("7 errors: temperature, model, max_tokens, JSON; n=3", checks.check_errors, env))
    out.append(ctx.case("7 stop strings: cut, finish_reason stop, streamed too", checks.check_stop_strings, env))
    out.append(ctx.case("7 text continues the prompt; echo offsets; 404 shape", checks.check_text_continuity, env))
    state = ctx.case("5 SFT -> tinker:// path and run id answer the target", trained.check_trained, env)
    if state:
        out.append(state["summary"])
        out.append(ctx.case("5 run id = live weights, checkpoint frozen", trained.check_live_vs_checkpoint, env, state))
        out.append(ctx.case("1 /v1/models lists the caller's runs and checkpoints", trained.check_models_after,
                            env, state))
        out.append(ctx.case("6 tenants: bob 404 model_not_found until published", trained.check_tenants, env, state))
    out.append(ctx.case("8 200 concurrent streaming requests", streams.check_concurrent, env, 200))
    out.append(ctx.case("8 client disconnect mid-stream; server goes on", streams.check_disconnect, env))
    return out


def run(ctx):
    tmp = tempfile.mkdtemp(prefix="tinkerd-e2e-openai-")
    try:
        env = start(ctx, tmp)
        out = run_cases(ctx, env)
    finally:
        for s in ctx.servers:  # before the model dir goes; the logs stay for run.py
            s.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    ctx.finish()
    return "; ".join(str(x) for x in out if x)
