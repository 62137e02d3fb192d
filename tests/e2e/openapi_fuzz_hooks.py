# schemathesis hooks of scenario_openapi (loaded through SCHEMATHESIS_HOOKS): about half of the generated
# requests get the ids of real objects the scenario made (session, training run, sampler, checkpoints, and
# the futures the server handed out so far) in place of random ones, so the fuzzer gets past "not found"
# into the handlers and the engine (prompt token ids are folded into the vocabulary). Every request_id the server answers with is appended to
# $TINKERD_FUZZ_FUTURES for the scenario to poll afterwards. Deterministic: one seeded RNG, one worker.
import json
import os
import random

import schemathesis

IDS = json.load(open(os.environ["TINKERD_FUZZ_IDS"]))
FUTURES_FILE = os.environ["TINKERD_FUZZ_FUTURES"]
RNG = random.Random(14)
VOCAB = IDS["vocab_size"]
FUTURES = []

# Body field -> the key in IDS of the real object it names.
BODY_IDS = {"model_id": "run_id", "session_id": "session_id", "sampling_session_id": "sampler_id",
            "tinker_path": "checkpoint_path", "model_path": "sampler_path", "base_model": "base_model"}
PATH_IDS = {"run_id": "run_id", "session_id": "session_id", "sampler_id": "sampler_id",
            "kind": "checkpoint_kind", "name": "checkpoint_name", "checkpoint_id": "checkpoint_id"}
# Real ids never go to what would end the objects for the rest of the run (they are fuzzed with random ids).
ENDS_OBJECTS = ("/finish", "/unload_model", "/ttl")


def _in_vocab(value):
    """Token ids (ints, lists, lists of lists) folded into the vocabulary, so the engine gets to run them."""
    if isinstance(value, float) and value.is_integer():  # 938.0: what JSON Schema calls an integer
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, (int, list)):
        return value
    if isinstance(value, int):
        return value % VOCAB
    return [_in_vocab(v) for v in value]


def _real_prompt(body):
    prompt = body.get("prompt")
    if isinstance(prompt, dict) and isinstance(prompt.get("chunks"), list):  # asample
        for chunk in prompt["chunks"]:
            if isinstance(chunk, dict) and "tokens" in chunk:
                chunk["tokens"] = _in_vocab(chunk["tokens"])
    elif isinstance(prompt, list):  # /v1/completions
        body["prompt"] = _in_vocab(prompt)


def _real_body(case):
    body = case.body
    _real_prompt(body)
    for field, key in BODY_IDS.items():
        if field in body:
            body[field] = IDS[key]
    if "model" in body:  # the OpenAI endpoints: the served base model or the live run
        body["model"] = RNG.choice([IDS["base_model"], IDS["run_id"]])
    if "path" in body and case.operation.path.endswith("/load_weights"):
        body["path"] = IDS["checkpoint_path"]
    if "request_id" in body and FUTURES:
        body["request_id"] = RNG.choice(FUTURES)


@schemathesis.hook
def before_call(context, case, kwargs):
    path = case.operation.path
    if case.method.upper() == "DELETE" or path.endswith(ENDS_OBJECTS) or RNG.random() < 0.5:
        return
    if isinstance(case.body, dict):
        _real_body(case)
    for name in list(case.path_parameters or {}):
        if name in PATH_IDS:
            case.path_parameters[name] = IDS[PATH_IDS[name]]


@schemathesis.hook
def after_call(context, case, response):
    if response.status_code != 200 or "json" not in response.headers.get("content-type", [""])[0]:
        return
    try:
        body = response.json()
    except ValueError:
        return
    if isinstance(body, dict) and isinstance(body.get("request_id"), str) and "error" not in body:
        if body["request_id"] not in FUTURES:
            FUTURES.append(body["request_id"])
            with open(FUTURES_FILE, "a") as f:
                f.write(body["request_id"] + "\n")
