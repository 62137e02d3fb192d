# Hostile and malformed input across every endpoint, on a server with two tenants (--api-keys: alice
# attacks, bob trains). A data table of requests (wrong types, NaN/inf, huge and negative numbers, path
# traversal in checkpoint names and tinker:// paths, bob's ids, zstd bombs, truncated protobuf, wrong
# wire types, 2^27-element sparse claims, OpenAI fields out of range) plus raw-socket cases (lying
# Content-Length, slowloris header and body, 300 silent connections at a 200-connection cap, 200,000-deep
# JSON). Every answer must be a 4xx JSON body whose message names the problem (a substring), or, for
# what only the engine can judge, a future failing with category user; /healthz answers after each
# group; bob's concurrent training gives the losses of a clean run and his run still works afterwards.
import json
import os
import socket
import tempfile
import threading
import time

import zstandard

import wire_codec as wc
from harness import CheckFailed, check, check_close, new_client, sft_batch, stories_dir
from sampling_client import sample_body
from tinker_wire import PROTO, RequestFailed, strict_json

STORIES = "stories260K"  # the served model: a real tiny Llama with a tokenizer (for /v1/completions)
VOCAB = 512  # its vocabulary
BOB_STEPS = 4
LR = 1e-2
HEADER_TIMEOUT = 3
BODY_TIMEOUT = 4
MAX_CONNECTIONS = 200
BAD = (400, 499)  # any 4xx
NOT_FOUND = (404, 404)
DEEP = 200000

# Server bugs not fixed yet (case name -> cause); a failing one is reported as a KNOWN FAILURE, one that
# passes again asks to be removed from here. Empty: every case passes.
KNOWN = {}


class Case:
    """One hostile request: `body` is bytes, a JSON-able object, or a function of the ids; `want` is a
    (low, high) status range; `says` a substring (or a tuple of alternatives) the error message must
    contain, case-insensitively; `future_ok`: a 200 whose future fails with category user also passes
    (the engine validates some inputs)."""

    def __init__(self, name, method, path, body=None, says="", want=BAD, headers=None, key="tml-alice",
                 future_ok=None):
        self.name, self.method, self.path, self.body = name, method, path, body
        self.says = says if isinstance(says, tuple) else (says,)
        self.want, self.headers, self.key, self.future_ok = want, headers or {}, key, future_ok


def J(obj):
    return json.dumps(obj).encode()


def message_of(body):
    """The error message of a Tinker ({"detail"}) or OpenAI ({"error": {"message", "param"}}) body."""
    obj = strict_json(body)
    if not isinstance(obj, dict):
        raise CheckFailed("error body is not an object: %r" % body[:200])
    if isinstance(obj.get("error"), dict):
        e = obj["error"]
        return "%s (param %s)" % (e.get("message", ""), e.get("param"))
    if "detail" in obj:
        return str(obj["detail"])
    if "error" in obj:
        return str(obj["error"])
    raise CheckFailed("error body names no message: %r" % body[:200])


def says_one(message, says):
    low = message.lower()
    return any(s.lower() in low for s in says)


def run_case(srv, ids, c):
    body = c.body(ids) if callable(c.body) else c.body
    if body is not None and not isinstance(body, bytes):
        body = J(body)
    path = c.path(ids) if callable(c.path) else c.path
    w = srv.wire(c.key, timeout=30)
    try:
        r = w.request(c.method, path, body, dict(c.headers), auth=c.key is not None)
        if c.future_ok and r.status == 200:
            rid = r.json().get("request_id")
            check(rid, "HTTP 200 without a request_id: %r" % r.body[:200])
            try:
                w.retrieve(rid, c.future_ok, max_wait=60)
            except RequestFailed as e:
                check(e.category == "user", "future failed with category %s: %s" % (e.category, e.message))
                check(says_one(e.message, c.says), "future error %r names none of %r" % (e.message, c.says))
                return
            raise CheckFailed("HTTP 200 and the %s future succeeded" % c.future_ok)
    finally:
        w.close()
    text = r.body.decode(errors="replace")
    check(c.want[0] <= r.status <= c.want[1], "HTTP %d (want %d-%d): %s" % (r.status, c.want[0], c.want[1], text[:300]))
    check("application/json" in r.content_type, "HTTP %d with Content-Type %r" % (r.status, r.content_type))
    msg = message_of(r.body)
    check(says_one(msg, c.says), "HTTP %d message %r names none of %r" % (r.status, msg[:300], c.says))


# ---------------------------------------------------------------- the table

def tinker_cases():
    fb_json = lambda ids, **kw: {  # noqa: E731 - a legacy JSON forward_backward with one field changed
        "forward_backward_input": {"data": [kw.get("datum", {
            "model_input": {"chunks": [{"tokens": kw.get("tokens", [1, 2, 3]), "type": "encoded_text"}]},
            "loss_fn_inputs": {"target_tokens": {"data": [2, 3, 4], "dtype": "int64", "shape": [3]},
                               "weights": {"data": [1.0, 1.0, 1.0], "dtype": "float32", "shape": [3]}}})],
            "loss_fn": kw.get("loss_fn", "cross_entropy")},
        "model_id": kw.get("model_id", ids["fresh_run"]()), "seq_id": kw.get("seq_id", 1)}

    def adam(ids, **kw):
        params = {"learning_rate": 1e-3, "beta1": 0.9, "beta2": 0.95, "eps": 1e-12, "weight_decay": 0.0,
                  "grad_clip_norm": 0.0}
        params.update(kw)
        return b'{"adam_params": %s, "model_id": "%s", "seq_id": 1, "type": "optim_step"}' % (
            json.dumps(params).replace('"INF"', "1e999").encode(), ids["fresh_run"]().encode())

    def create_model(ids, **kw):
        body = {"session_id": ids["alice_session"], "model_seq_id": 50, "base_model": STORIES,
                "lora_config": {"rank": 4}, "type": "create_model"}
        body.update(kw)
        return body

    def save(ids, name, route="save_weights"):
        return {"model_id": ids["fresh_run"](), "path": name, "seq_id": 1, "type": route}

    cases = [
        Case("no_api_key", "POST", "/api/v1/create_session", {"tags": []}, "api key", (401, 401), key=None),
        Case("unknown_api_key", "POST", "/api/v1/create_session", {"tags": []}, "api key", (401, 401),
             key="tml-mallory"),
        Case("url_traversal", "GET", "/api/v1/../../../etc/passwd", None, "no such endpoint", NOT_FOUND),
        Case("encoded_url_traversal", "GET", "/api/v1/%2e%2e/%2e%2e/etc/passwd", None, "no such endpoint",
             NOT_FOUND),
        Case("method_not_allowed", "PATCH", "/api/v1/create_session", {}, "method not allowed", (405, 405)),
        Case("session_body_array", "POST", "/api/v1/create_session", [], "object"),
        Case("session_body_string", "POST", "/api/v1/create_session", b'"hello"', "object"),
        Case("session_body_not_json", "POST", "/api/v1/create_session", b"{not json", ("json", "parse")),
        Case("session_body_nan_literal", "POST", "/api/v1/create_session", b'{"tags": [], "x": NaN}',
             ("json", "parse")),
        Case("session_body_non_utf8", "POST", "/api/v1/create_session", b'{"tags": ["\xff\xfe\xc3"]}',
             ("utf-8", "utf8", "json")),
        Case("session_tags_not_list", "POST", "/api/v1/create_session", {"tags": "x"}, "tags"),
        Case("session_tags_numbers", "POST", "/api/v1/create_session", {"tags": [1, 2]}, "tags"),
        Case("session_metadata_number", "POST", "/api/v1/create_session", {"user_metadata": 5}, "user_metadata"),
        Case("heartbeat_id_number", "POST", "/api/v1/session_heartbeat", {"session_id": 123}, "session_id"),
        Case("heartbeat_unknown", "POST", "/api/v1/session_heartbeat", {"session_id": "sess-nope"}, "session",
             NOT_FOUND),
        Case("heartbeat_bobs_session", "POST", "/api/v1/session_heartbeat",
             lambda ids: {"session_id": ids["bob_session"]}, "session", NOT_FOUND),
        Case("telemetry_body_array", "POST", "/api/v1/telemetry", [1, 2], "object"),
        Case("create_model_unknown_base", "POST", "/api/v1/create_model",
             lambda ids: create_model(ids, base_model="../../etc/passwd"), "base_model"),
        Case("create_model_rank_negative", "POST", "/api/v1/create_model",
             lambda ids: create_model(ids, lora_config={"rank": -1}), "rank"),
        Case("create_model_rank_huge", "POST", "/api/v1/create_model",
             lambda ids: create_model(ids, lora_config={"rank": 10 ** 9}), "rank"),
        Case("create_model_rank_string", "POST", "/api/v1/create_model",
             lambda ids: create_model(ids, lora_config={"rank": "8"}), "rank"),
        Case("create_model_rank_float", "POST", "/api/v1/create_model",
             lambda ids: create_model(ids, lora_config={"rank": 8.5}), "rank"),
        Case("create_model_rank_2e64", "POST", "/api/v1/create_model",
             lambda ids: create_model(ids, lora_config={"rank": 2 ** 64}), "rank"),
        Case("create_model_seq_negative", "POST", "/api/v1/create_model",
             lambda ids: create_model(ids, model_seq_id=-1), "model_seq_id"),
        Case("create_model_bobs_session", "POST", "/api/v1/create_model",
             lambda ids: create_model(ids, session_id=ids["bob_session"]), "session", NOT_FOUND),
        Case("create_model_no_session", "POST", "/api/v1/create_model",
             lambda ids: {k: v for k, v in create_model(ids).items() if k != "session_id"}, "session_id"),
        Case("create_model_lora_config_list", "POST", "/api/v1/create_model",
             lambda ids: create_model(ids, lora_config=[4]), "lora_config"),
        Case("get_info_bobs_run", "POST", "/api/v1/get_info", lambda ids: {"model_id": ids["bob_run"]}, "not found",
             NOT_FOUND),
        Case("get_info_id_list", "POST", "/api/v1/get_info", {"model_id": []}, "model_id"),
        Case("unload_bobs_run", "POST", "/api/v1/unload_model", lambda ids: {"model_id": ids["bob_run"]}, "not found",
             NOT_FOUND),
        # forward_backward, legacy JSON
        Case("fb_json_data_string", "POST", "/api/v1/forward_backward",
             lambda ids: {"forward_backward_input": {"data": "x", "loss_fn": "cross_entropy"},
                          "model_id": ids["fresh_run"](), "seq_id": 1}, "data"),
        Case("fb_json_tokens_strings", "POST", "/api/v1/forward_backward",
             lambda ids: fb_json(ids, tokens=["a", "b", "c"]), "token"),
        Case("fb_json_tokens_floats", "POST", "/api/v1/forward_backward",
             lambda ids: fb_json(ids, tokens=[1.5, 2.5, 3.5]), "token"),
        Case("fb_json_tokens_negative", "POST", "/api/v1/forward_backward",
             lambda ids: fb_json(ids, tokens=[-1, 2, 3]), "token", future_ok="ForwardBackward"),
        Case("fb_json_tokens_past_vocab", "POST", "/api/v1/forward_backward",
             lambda ids: fb_json(ids, tokens=[VOCAB, 100000, 2 ** 31 - 1]), ("token", "vocab"),
             future_ok="ForwardBackward"),
        Case("fb_json_tokens_2e40", "POST", "/api/v1/forward_backward",
             lambda ids: fb_json(ids, tokens=[2 ** 40, 1, 2]), "token", future_ok="ForwardBackward"),
        Case("fb_json_unknown_loss", "POST", "/api/v1/forward_backward",
             lambda ids: fb_json(ids, loss_fn="rm -rf"), "loss", future_ok="ForwardBackward"),
        Case("fb_json_seq_negative", "POST", "/api/v1/forward_backward",
             lambda ids: fb_json(ids, seq_id=-1), "seq_id"),
        Case("fb_json_seq_2e40", "POST", "/api/v1/forward_backward",
             lambda ids: fb_json(ids, seq_id=2 ** 40), "seq_id"),
        Case("fb_json_seq_string", "POST", "/api/v1/forward_backward",
             lambda ids: fb_json(ids, seq_id="1"), "seq_id"),
        Case("fb_json_bobs_run", "POST", "/api/v1/forward_backward",
             lambda ids: fb_json(ids, model_id=ids["bob_run"]), "not found", NOT_FOUND),
        Case("fb_json_unknown_run", "POST", "/api/v1/forward_backward",
             lambda ids: fb_json(ids, model_id="../../etc/passwd"), "not found", NOT_FOUND),
        Case("fb_json_datum_not_object", "POST", "/api/v1/forward_backward",
             lambda ids: fb_json(ids, datum=[1, 2, 3]), ("datum", "model_input", "object")),
        # optim_step
        Case("adam_lr_negative", "POST", "/api/v1/optim_step", lambda ids: adam(ids, learning_rate=-1.0),
             "learning_rate"),
        Case("adam_lr_inf", "POST", "/api/v1/optim_step", lambda ids: adam(ids, learning_rate="INF"),
             ("learning_rate", "1e999")),  # the JSON parser names the literal, not its field
        Case("adam_lr_1e308", "POST", "/api/v1/optim_step", lambda ids: adam(ids, learning_rate=1e308),
             "learning_rate"),
        Case("adam_lr_nan_literal", "POST", "/api/v1/optim_step",
             lambda ids: adam(ids).replace(b'"learning_rate": 0.001', b'"learning_rate": NaN'),
             ("json", "parse", "learning_rate")),
        Case("adam_lr_string", "POST", "/api/v1/optim_step", lambda ids: adam(ids, learning_rate="0.1"),
             "learning_rate"),
        Case("adam_eps_zero", "POST", "/api/v1/optim_step", lambda ids: adam(ids, eps=0.0), "eps"),
        Case("adam_eps_negative", "POST", "/api/v1/optim_step", lambda ids: adam(ids, eps=-1e-8), "eps"),
        Case("adam_beta1_above_one", "POST", "/api/v1/optim_step", lambda ids: adam(ids, beta1=1.5), "beta1"),
        Case("adam_beta2_negative", "POST", "/api/v1/optim_step", lambda ids: adam(ids, beta2=-0.1), "beta2"),
        Case("adam_weight_decay_negative", "POST", "/api/v1/optim_step", lambda ids: adam(ids, weight_decay=-1.0),
             "weight_decay"),
        Case("adam_grad_clip_negative", "POST", "/api/v1/optim_step", lambda ids: adam(ids, grad_clip_norm=-1.0),
             "grad_clip_norm"),
        Case("adam_params_list", "POST", "/api/v1/optim_step",
             lambda ids: {"adam_params": [1], "model_id": ids["fresh_run"](), "seq_id": 1}, "adam_params"),
        Case("optim_bobs_run", "POST", "/api/v1/optim_step",
             lambda ids: {"adam_params": {"learning_rate": 0.1}, "model_id": ids["bob_run"], "seq_id": 99},
             "not found", NOT_FOUND),
        Case("optim_seq_negative", "POST", "/api/v1/optim_step",
             lambda ids: adam(ids).replace(b'"seq_id": 1,', b'"seq_id": -5,'), "seq_id"),
    ]
    # checkpoint names: traversal, absolute, nested, empty, 10 KB, NUL, not a string
    names = [("dotdot", "../../x"), ("absolute", "/etc/passwd"), ("slash", "a/b"), ("empty", ""),
             ("10kb", "n" * 10240), ("dot", ".."), ("nul", "a\u0000b"), ("backslash", "..\\..\\x")]
    for label, name in names:
        for route in ("save_weights", "save_weights_for_sampler"):
            cases.append(Case("%s_name_%s" % (route, label), "POST", "/api/v1/" + route,
                              lambda ids, n=name, r=route: save(ids, n, r), ("path", "name", "checkpoint"),
                              future_ok="SaveWeights"))
    cases += [
        Case("save_weights_name_number", "POST", "/api/v1/save_weights", lambda ids: save(ids, 123), "path"),
        Case("save_weights_ttl_negative", "POST", "/api/v1/save_weights",
             lambda ids: dict(save(ids, "ok-name"), ttl_seconds=-5), "ttl"),
        Case("save_weights_bobs_run", "POST", "/api/v1/save_weights",
             lambda ids: dict(save(ids, "steal"), model_id=ids["bob_run"]), "not found", NOT_FOUND),
    ]
    # tinker:// paths: traversal, another tenant's, malformed
    paths = [("dotdot_run", lambda ids: "tinker://../weights/x"),
             ("dotdot_name", lambda ids: "tinker://%s/weights/../../x" % ids["alice_run"]),
             ("dotdot_kind", lambda ids: "tinker://%s/../weights/alice-ckpt" % ids["alice_run"]),
             ("bobs", lambda ids: ids["bob_ckpt"]),
             ("bobs_sampler", lambda ids: ids["bob_sampler"]),
             ("four_parts", lambda ids: "tinker://a/b/c/d"),
             ("etc_passwd", lambda ids: "/etc/passwd"),
             ("file_url", lambda ids: "file:///etc/passwd"),
             ("empty", lambda ids: "")]
    for label, path in paths:
        want = NOT_FOUND if label.startswith("bobs") else BAD
        cases.append(Case("load_weights_%s" % label, "POST", "/api/v1/load_weights",
                          lambda ids, p=path: {"model_id": ids["fresh_run"](), "seq_id": 1, "path": p(ids),
                                               "optimizer": False, "type": "load_weights"},
                          ("path", "checkpoint", "not found", "tinker"), want, future_ok="LoadWeights"))
        cases.append(Case("weights_info_%s" % label, "POST", "/api/v1/weights_info",
                          lambda ids, p=path: {"tinker_path": p(ids)},
                          ("path", "checkpoint", "not found", "tinker"), want))
    cases += [
        Case("sampling_session_bobs_sampler", "POST", "/api/v1/create_sampling_session",
             lambda ids: {"session_id": ids["alice_session"], "sampling_session_seq_id": 90,
                          "model_path": ids["bob_sampler"]}, ("path", "checkpoint", "not found"), NOT_FOUND),
        Case("sampling_session_traversal", "POST", "/api/v1/create_sampling_session",
             lambda ids: {"session_id": ids["alice_session"], "sampling_session_seq_id": 91,
                          "model_path": "tinker://%s/sampler_weights/../../../x" % ids["alice_run"]},
             ("path", "checkpoint", "not found")),
        Case("sampling_session_unknown_base", "POST", "/api/v1/create_sampling_session",
             lambda ids: {"session_id": ids["alice_session"], "sampling_session_seq_id": 92,
                          "base_model": "no/such-model"}, ("base_model", "model")),
        Case("sampling_session_bobs_session", "POST", "/api/v1/create_sampling_session",
             lambda ids: {"session_id": ids["bob_session"], "sampling_session_seq_id": 93,
                          "base_model": STORIES}, "session", NOT_FOUND),
    ]
    return cases


def sample_cases():
    def body(ids, prompt=(1, 2, 3), **kw):
        b = sample_body(ids["alice_sampler"], 7, [1, 2, 3], max_tokens=4)
        if isinstance(prompt, tuple):
            b["prompt"]["chunks"][0]["tokens"] = list(prompt)
        else:
            b["prompt"] = prompt
        for k, v in kw.items():
            if k in ("max_tokens", "temperature", "top_p", "top_k", "seed", "stop"):
                b["sampling_params"][k] = v
            else:
                b[k] = v
        return b

    def raw_float(field, literal):
        return lambda ids: J(body(ids, **{field: 12345.5})).replace(b"12345.5", literal)

    S = "/api/v1/asample"
    return [
        Case("sample_max_tokens_huge", "POST", S, lambda ids: body(ids, max_tokens=10 ** 9), "max_tokens",
             future_ok="Sample"),
        Case("sample_max_tokens_negative", "POST", S, lambda ids: body(ids, max_tokens=-1), "max_tokens",
             future_ok="Sample"),
        Case("sample_max_tokens_2e64", "POST", S, lambda ids: body(ids, max_tokens=2 ** 64), "max_tokens"),
        Case("sample_num_samples_negative", "POST", S, lambda ids: body(ids, num_samples=-1), "num_samples"),
        Case("sample_num_samples_huge", "POST", S, lambda ids: body(ids, num_samples=10 ** 9), "num_samples"),
        Case("sample_num_samples_string", "POST", S, lambda ids: body(ids, num_samples="2"), "num_samples"),
        Case("sample_temperature_nan", "POST", S, raw_float("temperature", b"NaN"),
             ("json", "parse", "temperature")),
        Case("sample_temperature_inf", "POST", S, raw_float("temperature", b"1e999"), ("temperature", "1e999")),
        Case("sample_temperature_negative", "POST", S, lambda ids: body(ids, temperature=-1.0), "temperature",
             future_ok="Sample"),
        Case("sample_top_p_2", "POST", S, lambda ids: body(ids, top_p=2.0), "top_p", future_ok="Sample"),
        Case("sample_top_p_negative", "POST", S, lambda ids: body(ids, top_p=-0.5), "top_p", future_ok="Sample"),
        Case("sample_top_k_minus_5", "POST", S, lambda ids: body(ids, top_k=-5), "top_k", future_ok="Sample"),
        Case("sample_seed_string", "POST", S, lambda ids: body(ids, seed="abc"), "seed"),
        Case("sample_stop_10000", "POST", S, lambda ids: body(ids, stop=["s%d" % i for i in range(10000)]), "stop"),
        Case("sample_stop_number", "POST", S, lambda ids: body(ids, stop=5), "stop"),
        Case("sample_prompt_strings", "POST", S, lambda ids: body(ids, prompt=("a", "b")), "token"),
        Case("sample_prompt_floats", "POST", S, lambda ids: body(ids, prompt=(1.5, 2.5)), "token"),
        Case("sample_prompt_negative", "POST", S, lambda ids: body(ids, prompt=(1, -7)), "token",
             future_ok="Sample"),
        Case("sample_prompt_past_vocab", "POST", S, lambda ids: body(ids, prompt=(1, VOCAB)), ("token", "vocab"),
             future_ok="Sample"),
        Case("sample_prompt_2e40", "POST", S, lambda ids: body(ids, prompt=(1, 2 ** 40)), "token",
             future_ok="Sample"),
        Case("sample_prompt_empty", "POST", S, lambda ids: body(ids, prompt=()), ("prompt", "empty", "token"),
             future_ok="Sample"),
        Case("sample_prompt_not_object", "POST", S, lambda ids: body(ids, prompt="hello"), "prompt"),
        Case("sample_chunks_not_list", "POST", S, lambda ids: body(ids, prompt={"chunks": 5}), "chunks"),
        Case("sample_topk_prompt_logprobs_huge", "POST", S, lambda ids: body(ids, topk_prompt_logprobs=10 ** 9),
             "topk_prompt_logprobs"),
        Case("sample_topk_prompt_logprobs_negative", "POST", S,
             lambda ids: body(ids, topk_prompt_logprobs=-1), "topk_prompt_logprobs"),
        Case("sample_bobs_sampler", "POST", S, lambda ids: body(ids, sampling_session_id=ids["bob_sampler_session"]),
             ("sampl", "session"), NOT_FOUND),
        Case("sample_unknown_sampler", "POST", S, lambda ids: body(ids, sampling_session_id="../../x"),
             ("sampl", "session"), NOT_FOUND),
        Case("future_bobs_request", "POST", "/api/v1/retrieve_future",
             lambda ids: {"request_id": ids["bob_request"]}, ("request", "future"), NOT_FOUND),
        Case("future_traversal", "POST", "/api/v1/retrieve_future", {"request_id": "../../etc/passwd"},
             ("request", "future"), NOT_FOUND),
        Case("future_id_number", "POST", "/api/v1/retrieve_future", {"request_id": 5}, "request_id"),
    ]


def rest_cases():
    run = lambda ids: ids["alice_run"]  # noqa: E731
    R = "/api/v1/training_runs/"
    return [
        Case("runs_limit_negative", "GET", "/api/v1/training_runs?limit=-1", None, "limit"),
        Case("runs_limit_text", "GET", "/api/v1/training_runs?limit=abc", None, "limit"),
        Case("runs_limit_overflow", "GET", "/api/v1/training_runs?limit=99999999999999999999999", None, "limit"),
        Case("runs_offset_negative", "GET", "/api/v1/training_runs?offset=-5", None, "offset"),
        Case("checkpoints_limit_negative", "GET", "/api/v1/checkpoints?limit=-3", None, "limit"),
        Case("get_bobs_run", "GET", lambda ids: R + ids["bob_run"], None, "not found", NOT_FOUND),
        Case("list_bobs_checkpoints", "GET", lambda ids: R + ids["bob_run"] + "/checkpoints", None, "not found",
             NOT_FOUND),
        Case("delete_bobs_checkpoint", "DELETE", lambda ids: R + ids["bob_run"] + "/checkpoints/weights/bob-ckpt",
             None, "not found", NOT_FOUND),
        Case("delete_traversal", "DELETE", lambda ids: R + run(ids) + "/checkpoints/weights/../../../etc", None,
             ("checkpoint", "not found", "no such")),
        Case("delete_encoded_traversal", "DELETE",
             lambda ids: R + run(ids) + "/checkpoints/weights/..%2F..%2F..%2Fetc", None,
             ("checkpoint", "not found", "no such")),
        Case("delete_traversal_into_bob", "DELETE",
             lambda ids: R + run(ids) + "/checkpoints/weights/..%2F..%2F" + ids["bob_run"] + "%2Fweights%2Fbob-ckpt",
             None, ("checkpoint", "not found", "no such")),
        Case("publish_bobs_checkpoint", "POST",
             lambda ids: R + ids["bob_run"] + "/checkpoints/weights/bob-ckpt/publish", None, "not found", NOT_FOUND),
        Case("ttl_negative", "PUT", lambda ids: R + run(ids) + "/checkpoints/weights/alice-ckpt/ttl",
             {"ttl_seconds": -1}, "ttl"),
        Case("ttl_string", "PUT", lambda ids: R + run(ids) + "/checkpoints/weights/alice-ckpt/ttl",
             {"ttl_seconds": "forever"}, "ttl"),
        Case("ttl_bobs", "PUT", lambda ids: R + ids["bob_run"] + "/checkpoints/weights/bob-ckpt/ttl",
             {"ttl_seconds": 5}, "not found", NOT_FOUND),
        Case("archive_traversal", "GET", lambda ids: R + run(ids) + "/checkpoints/weights/..%2F..%2Fx/archive", None,
             ("checkpoint", "not found")),
        Case("archive_bad_kind", "GET", lambda ids: R + run(ids) + "/checkpoints/etc/passwd/archive", None,
             ("kind", "checkpoint", "weights")),
        Case("archive_bobs", "GET", lambda ids: R + ids["bob_run"] + "/checkpoints/weights/bob-ckpt/archive", None,
             "not found", NOT_FOUND),
        Case("archive_download_traversal", "GET", "/api/v1/archive_downloads/..%2F..%2Fetc%2Fpasswd", None,
             ("archive", "not found", "link", "token"), NOT_FOUND, key=None),
        Case("archive_download_garbage", "GET", "/api/v1/archive_downloads/" + "A" * 300, None,
             ("archive", "not found", "link", "token"), NOT_FOUND, key=None),
        Case("get_bobs_session", "GET", lambda ids: "/api/v1/sessions/" + ids["bob_session"], None, "not found",
             NOT_FOUND),
        Case("project_bobs_session", "PUT", lambda ids: "/api/v1/sessions/%s/project" % ids["bob_session"],
             {"project_id": "x"}, "not found", NOT_FOUND),
        Case("get_bobs_sampler", "GET", lambda ids: "/api/v1/samplers/" + ids["bob_sampler_session"], None,
             "not found", NOT_FOUND),
    ]


def openai_cases():
    def chat(ids, **kw):
        b = {"model": STORIES, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        b.update(kw)
        return b

    H = {"Authorization": "bearer tml-alice"}  # lower-case scheme: accepted (RFC 7235)
    C, P = "/v1/chat/completions", "/v1/completions"

    def oc(name, path, body, says, want=BAD):
        return Case(name, "POST", path, body, says, want, headers=H, key=None)

    def comp(ids, **kw):
        b = {"model": STORIES, "prompt": [1, 2, 3], "max_tokens": 4}
        b.update(kw)
        return b

    return [
        Case("chat_no_key", "POST", C, lambda ids: chat(ids), "api key", (401, 401), key=None),
        oc("chat_messages_string", C, lambda ids: chat(ids, messages="hello"), "messages"),
        oc("chat_messages_empty", C, lambda ids: chat(ids, messages=[]), "messages"),
        oc("chat_messages_bad_role", C, lambda ids: chat(ids, messages=[{"role": "hacker", "content": "x"}]),
           ("role", "messages")),
        oc("chat_n_huge", C, lambda ids: chat(ids, n=10 ** 9), "n"),
        oc("chat_n_negative", C, lambda ids: chat(ids, n=-1), "n"),
        oc("chat_logprobs_string", C, lambda ids: chat(ids, logprobs="weird"), "logprobs"),
        oc("chat_top_logprobs_huge", C, lambda ids: chat(ids, logprobs=True, top_logprobs=1000), "top_logprobs"),
        oc("chat_unknown_model", C, lambda ids: chat(ids, model="gpt-17"), ("not found", "does not exist"), NOT_FOUND),
        oc("chat_bobs_run", C, lambda ids: chat(ids, model=ids["bob_run"]), ("not found", "does not exist"), NOT_FOUND),
        oc("chat_bobs_sampler_path", C, lambda ids: chat(ids, model=ids["bob_sampler"]),
           ("not found", "does not exist"), NOT_FOUND),
        oc("chat_model_traversal", C, lambda ids: chat(ids, model="tinker://../../etc/passwd"), "model",
           (400, 404)),
        oc("completion_max_tokens_huge", P, lambda ids: comp(ids, max_tokens=10 ** 12), ("max_tokens", "context")),
        oc("chat_max_tokens_negative", C, lambda ids: chat(ids, max_tokens=-1), "max_tokens"),
        oc("chat_temperature_negative", C, lambda ids: chat(ids, temperature=-1), "temperature"),
        oc("chat_temperature_nan", C, lambda ids: J(chat(ids, temperature=0.123)).replace(b"0.123", b"NaN"),
           ("json", "parse", "temperature")),
        oc("chat_top_p_2", C, lambda ids: chat(ids, top_p=2), "top_p"),
        oc("chat_stop_10000", C, lambda ids: chat(ids, stop=["s%d" % i for i in range(10000)]), "stop"),
        oc("chat_stream_string", C, lambda ids: chat(ids, stream="yes"), "stream"),
        oc("chat_non_utf8", C, lambda ids: J(chat(ids)).replace(b'"hi"', b'"\xff\xfe"'),
           ("utf-8", "utf8", "json")),
        oc("chat_body_not_json", C, b"{]", ("json", "parse")),
        oc("chat_seed_string", C, lambda ids: chat(ids, seed="x"), "seed"),
        oc("completion_prompt_negative", P, lambda ids: comp(ids, prompt=[1, -1]), ("prompt", "token")),
        oc("completion_prompt_past_vocab", P, lambda ids: comp(ids, prompt=[1, 10 ** 9]), ("prompt", "token")),
        oc("completion_prompt_floats", P, lambda ids: comp(ids, prompt=[1.5]), "prompt"),
        oc("completion_prompt_dict", P, lambda ids: comp(ids, prompt={"a": 1}), "prompt"),
        oc("completion_logprobs_huge", P, lambda ids: comp(ids, logprobs=100), "logprobs"),
        oc("completion_n_huge", P, lambda ids: comp(ids, n=10 ** 9), "n"),
    ]


def deep_cases():
    deep = b"[" * DEEP + b"]" * DEEP
    deep_obj = b'{"a":' * DEEP + b"1" + b"}" * DEEP
    H = {"Authorization": "Bearer tml-alice"}
    return [
        Case("deep_create_session", "POST", "/api/v1/create_session", b'{"tags":' + deep + b"}",
             ("depth", "nest")),
        Case("deep_telemetry", "POST", "/api/v1/telemetry", b'{"events":' + deep + b"}", ("depth", "nest")),
        Case("deep_asample", "POST", "/api/v1/asample", deep_obj, ("depth", "nest")),
        Case("deep_chat", "POST", "/v1/chat/completions",
             b'{"model":"%s","messages":[{"role":"user","content":"hi"}],"tools":%s}' % (STORIES.encode(),
                                                                                         deep),
             ("depth", "nest"), headers=H, key=None),
        Case("deep_fb_json", "POST", "/api/v1/forward_backward", deep_obj, ("depth", "nest")),
    ]


# ---------------------------------------------------------------- protobuf and zstd cases

def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(num, wire_type, payload):
    if wire_type == 2:
        return varint(num << 3 | 2) + varint(len(payload)) + payload
    return varint(num << 3 | wire_type) + payload


def proto_cases():
    P = wc.pb2()
    H = {"Content-Type": PROTO}
    FB = "/api/v1/forward_backward"

    def fb(ids, datums, seq=1):
        return wc.encode_fb_request(ids["fresh_run"](), seq, datums)

    def request_with(ids, mutate):
        msg = P.ForwardBackwardRequest()
        msg.ParseFromString(fb(ids, sft_batch(seed=3, n=1, length=6)))
        mutate(msg.data[0].loss_fn_inputs)
        return msg.SerializeToString()

    def sparse_claim(inputs):  # a 2^27 x 1 CSR target in a few bytes: crow/col/values say nothing is there
        t = inputs["target_tokens"]
        t.Clear()
        t.dtype = P.DTYPE_INT64
        t.shape.extend([2 ** 27, 1])
        t.sparse_csr.crow_indices = b"\0" * 16
        t.sparse_csr.col_indices = b""
        t.sparse_csr.values = b""

    def wide_k(inputs):  # top-K targets with K = 1000 > the vocabulary
        import numpy as np
        t = inputs["target_tokens"]
        t.Clear()
        t.dtype = P.DTYPE_INT64
        t.shape.extend([6, 1000])
        t.dense = np.ones((6, 1000), "<i8").tobytes()

    def set_weights(value):
        def mutate(inputs):
            import numpy as np
            inputs["weights"].dense = np.full(6, value, "<f4").tobytes()
        return mutate

    def shape_lie(inputs):
        inputs["target_tokens"].shape[:] = [5]

    def no_dtype(inputs):
        inputs["weights"].dtype = P.DTYPE_UNSPECIFIED

    def huge_shape(inputs):
        inputs["weights"].shape[:] = [2 ** 62, 4]

    def bomb(ids):
        c = zstandard.ZstdCompressor(level=1).compressobj()
        zero = b"\0" * (1 << 20)
        out = [c.compress(zero) for _ in range(600)]  # 600 MiB of zeros > the 512 MiB cap
        out.append(c.flush())
        return b"".join(out)

    return [
        Case("pb_garbage", "POST", FB, b"\xff\xff\xff\xff garbage", ("protobuf", "parse", "malformed"),
             headers=H),
        Case("pb_truncated", "POST", FB, lambda ids: fb(ids, sft_batch(seed=1, n=2))[:-7],
             ("protobuf", "parse", "malformed", "truncated"), headers=H),
        Case("pb_model_id_as_varint", "POST", FB, field(1, 0, varint(5)) + field(2, 0, varint(1)),
             ("protobuf", "parse", "malformed", "wire type", "model"), headers=H),
        Case("pb_data_as_fixed64", "POST", FB,
             lambda ids: field(1, 2, ids["fresh_run"]().encode()) + field(2, 0, varint(1)) + field(3, 1, b"\0" * 8),
             ("protobuf", "parse", "malformed", "wire type", "data"), headers=H),
        Case("pb_tokens_odd_length", "POST", FB,
             lambda ids: field(1, 2, ids["fresh_run"]().encode()) + field(2, 0, varint(1)) +
             field(3, 2, field(1, 2, field(1, 2, field(1, 2, b"\1\0\0")))),
             ("token", "length", "bytes", "int32"), headers=H),
        Case("pb_sparse_2e27_claim", "POST", FB, lambda ids: request_with(ids, sparse_claim),
             ("target_tokens", "element", "shape", "too large", "size"), headers=H,
             future_ok="ForwardBackward"),
        Case("pb_topk_wider_than_vocab", "POST", FB, lambda ids: request_with(ids, wide_k),
             ("target_tokens", "vocab", "k"), headers=H, future_ok="ForwardBackward"),
        Case("pb_weights_nan", "POST", FB, lambda ids: request_with(ids, set_weights(float("nan"))),
             ("weights", "finite", "nan"), headers=H, future_ok="ForwardBackward"),
        Case("pb_weights_inf", "POST", FB, lambda ids: request_with(ids, set_weights(float("inf"))),
             ("weights", "finite", "inf"), headers=H, future_ok="ForwardBackward"),
        Case("pb_target_shape_lie", "POST", FB, lambda ids: request_with(ids, shape_lie),
             ("target_tokens", "shape", "bytes"), headers=H, future_ok="ForwardBackward"),
        Case("pb_weights_no_dtype", "POST", FB, lambda ids: request_with(ids, no_dtype),
             ("weights", "dtype"), headers=H, future_ok="ForwardBackward"),
        Case("pb_weights_shape_2e62", "POST", FB, lambda ids: request_with(ids, huge_shape),
             ("weights", "shape", "element", "size", "too large"), headers=H, future_ok="ForwardBackward"),
        Case("pb_bobs_model", "POST", FB, lambda ids: wc.encode_fb_request(ids["bob_run"], 99, sft_batch(seed=1, n=1)),
             "not found", NOT_FOUND, headers=H),
        Case("pb_seq_negative", "POST", FB, lambda ids: fb(ids, sft_batch(seed=1, n=1), seq=-3), "seq_id",
             headers=H),
        Case("zstd_not_zstd", "POST", FB, lambda ids: fb(ids, sft_batch(seed=1, n=1)), "zstd",
             headers=dict(H, **{"Content-Encoding": "zstd"})),
        Case("zstd_bomb", "POST", FB, bomb, ("limit", "exceeds", "decompress"), (413, 413),
             headers=dict(H, **{"Content-Encoding": "zstd"})),
        Case("gzip_encoding", "POST", FB, lambda ids: fb(ids, sft_batch(seed=1, n=1)),
             ("encoding", "gzip"), headers=dict(H, **{"Content-Encoding": "gzip"})),
    ]


# ---------------------------------------------------------------- raw sockets

def raw_socket(port, timeout=10.0):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    return s


def read_until_close(s, limit=10.0):
    s.settimeout(limit)
    data = b""
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < limit:
            chunk = s.recv(65536)
            if not chunk:
                return data, True
            data += chunk
    except (socket.timeout, TimeoutError):
        return data, False
    except ConnectionResetError:
        return data, True
    return data, False


def split_responses(data):
    """(status, body) of each Content-Length response in data."""
    out = []
    while data:
        head, sep, rest = data.partition(b"\r\n\r\n")
        if not sep:
            break
        lines = head.split(b"\r\n")
        status = int(lines[0].split()[1])
        length = 0
        for line in lines[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                length = int(v)
        out.append((status, rest[:length]))
        data = rest[length:]
    return out


def check_4xx_json(status, body, says, what):
    check(400 <= status < 500, "%s: HTTP %d %r" % (what, status, body[:200]))
    msg = message_of(body)
    check(says_one(msg, says), "%s: message %r names none of %r" % (what, msg, says))


def case_content_length_bigger(srv):
    s = raw_socket(srv.port)
    s.sendall(b"POST /api/v1/create_session HTTP/1.1\r\nHost: x\r\nX-API-Key: tml-alice\r\n"
              b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"tags\": []}")
    s.shutdown(socket.SHUT_WR)
    data, closed = read_until_close(s)
    s.close()
    rs = split_responses(data)
    check(len(rs) == 1, "Content-Length 100, 12 bytes sent, then EOF: answers %r" % data[:300])
    check_4xx_json(rs[0][0], rs[0][1], ("content-length",), "Content-Length larger than the body")
    check(closed, "connection left open")


def case_content_length_bigger_stalled(srv):
    s = raw_socket(srv.port)
    s.sendall(b"POST /api/v1/create_session HTTP/1.1\r\nHost: x\r\nX-API-Key: tml-alice\r\n"
              b"Content-Length: 100\r\n\r\n{\"tags\": []}")
    t0 = time.monotonic()
    data, closed = read_until_close(s, BODY_TIMEOUT + 5)
    s.close()
    check(closed, "a body that never completes kept the connection %.1f s" % (time.monotonic() - t0))
    check(time.monotonic() - t0 <= BODY_TIMEOUT + 2, "closed only after %.1f s" % (time.monotonic() - t0))


def case_content_length_smaller(srv):
    s = raw_socket(srv.port)
    body = b'{"tags": [], "user_metadata": {}}'
    s.sendall(b"POST /api/v1/create_session HTTP/1.1\r\nHost: x\r\nX-API-Key: tml-alice\r\n"
              b"Content-Type: application/json\r\nContent-Length: 10\r\n\r\n" + body)
    data, closed = read_until_close(s)
    s.close()
    rs = split_responses(data)
    check(len(rs) == 2, "Content-Length 10 for a 33-byte body: answers %r" % data[:400])
    check_4xx_json(rs[0][0], rs[0][1], ("json", "parse"), "the first 10 bytes as a JSON body")
    check_4xx_json(rs[1][0], rs[1][1], ("malformed http",), "the rest as the next request")
    check(closed, "connection left open after a malformed request")


def trickle(s, data, limit):
    """Sends `data` a byte per second; returns (closed by the server, seconds taken)."""
    t0 = time.monotonic()
    s.settimeout(1.0)
    for byte in data:
        if time.monotonic() - t0 > limit:
            break
        try:
            s.sendall(bytes([byte]))
            if s.recv(4096) == b"":
                return True, time.monotonic() - t0
        except (socket.timeout, TimeoutError):
            pass
        except (BrokenPipeError, ConnectionResetError):
            return True, time.monotonic() - t0
    return False, time.monotonic() - t0


def case_slowloris_header(srv):
    s = raw_socket(srv.port)
    request = b"GET /api/v1/healthz HTTP/1.1\r\nHost: x\r\nX-Padding: " + b"p" * 64 + b"\r\n\r\n"
    closed, took = trickle(s, request, HEADER_TIMEOUT + 5)
    s.close()
    check(closed, "a header sent a byte per second was served (%.0f s)" % took)
    check(took <= HEADER_TIMEOUT + 2.5, "slowloris header kept for %.1f s (timeout %d s)" % (took, HEADER_TIMEOUT))


def case_slow_body(srv):
    s = raw_socket(srv.port)
    s.sendall(b"POST /api/v1/create_session HTTP/1.1\r\nHost: x\r\nX-API-Key: tml-alice\r\n"
              b"Content-Length: 1000\r\n\r\n")
    closed, took = trickle(s, b" " * 1000, BODY_TIMEOUT + 5)
    s.close()
    check(closed, "a body sent a byte per second kept the connection %.0f s" % took)
    check(took <= BODY_TIMEOUT + 2.5, "slow body kept for %.1f s (timeout %d s)" % (took, BODY_TIMEOUT))


def case_silent_flood(srv):
    """300 silent connections (over the 200-connection cap), then healthz answers at once."""
    socks = []
    try:
        for _ in range(300):
            socks.append(raw_socket(srv.port))
        time.sleep(0.3)
        t0 = time.monotonic()
        w = srv.wire("tml-alice", timeout=10)
        try:
            check(w.healthz() == {"status": "ok"}, "healthz")
        finally:
            w.close()
        check(time.monotonic() - t0 < 3, "healthz took %.1f s behind 300 silent connections" %
              (time.monotonic() - t0))
        s = raw_socket(srv.port)  # an authenticated client is served too
        s.sendall(b"GET /api/v1/training_runs HTTP/1.1\r\nHost: x\r\nX-API-Key: tml-alice\r\n\r\n")
        s.settimeout(5)
        head = s.recv(65536)
        s.close()
        check(head.startswith(b"HTTP/1.1 200"), "list runs behind the flood: %r" % head[:200])
    finally:
        for s in socks:
            s.close()


def case_bearer_case(srv):
    """"bearer"/"BEARER" are the same scheme (RFC 7235)."""
    w = srv.wire(None)
    try:
        for scheme in ("bearer", "BEARER", "Bearer"):
            r = w.request("GET", "/v1/models", headers={"Authorization": scheme + " tml-alice"}, auth=False)
            check(r.status == 200, "Authorization: %s <key>: HTTP %d %r" % (scheme, r.status, r.body[:200]))
            r = w.request("GET", "/api/v1/training_runs", headers={"Authorization": scheme + " tml-alice"},
                          auth=False)
            check(r.status == 200, "training_runs with %s: HTTP %d %r" % (scheme, r.status, r.body[:200]))
    finally:
        w.close()


RAW_CASES = [case_content_length_bigger, case_content_length_bigger_stalled, case_content_length_smaller,
             case_slowloris_header, case_slow_body, case_silent_flood, case_bearer_case]


# ---------------------------------------------------------------- tenants

def write_keys():
    fd, path = tempfile.mkstemp(prefix="tinkerd-keys-", suffix=".txt")
    with os.fdopen(fd, "w") as f:
        f.write("tml-alice alice\ntml-bob bob\n")
    return path


def bob_train(wire, batch, steps):
    tc = new_client(wire, base_model=STORIES, rank=8, seed=0)
    losses = []
    for _ in range(steps):
        losses.append(tc.forward_backward(batch).metrics["loss:sum"])
        tc.optim_step(LR)
    return tc, losses


def check_indistinguishable(srv, ids):
    """Bob's run and checkpoint answer alice exactly as ids that never existed do (ids replaced)."""
    w = srv.wire("tml-alice")
    fake_run = ids["bob_run"].replace("sess-", "sess-0")
    try:
        for template in ("/api/v1/training_runs/%s", "/api/v1/training_runs/%s/checkpoints"):
            a = w.request("GET", template % ids["bob_run"])
            b = w.request("GET", template % fake_run)
            check(a.status == b.status == 404, "%s: HTTP %d vs %d" % (template, a.status, b.status))
            check(a.body.replace(ids["bob_run"].encode(), b"X") == b.body.replace(fake_run.encode(), b"X"),
                  "%s: %r vs %r" % (template, a.body, b.body))
        for path in (ids["bob_ckpt"], ids["bob_ckpt"].replace(ids["bob_run"], fake_run)):
            r = w.request("POST", "/api/v1/weights_info", J({"tinker_path": path}))
            check(r.status == 404, "weights_info %s: HTTP %d" % (path, r.status))
        a = w.request("POST", "/api/v1/weights_info", J({"tinker_path": ids["bob_ckpt"]}))
        b = w.request("POST", "/api/v1/weights_info",
                      J({"tinker_path": ids["bob_ckpt"].replace(ids["bob_run"], fake_run)}))
        check(a.body.replace(ids["bob_run"].encode(), b"X") == b.body.replace(fake_run.encode(), b"X"),
              "weights_info: %r vs %r" % (a.body, b.body))
    finally:
        w.close()


def healthz(srv, group):
    check(srv.proc.poll() is None, "the server exited (code %s) after the %s cases" % (srv.proc.returncode, group))
    w = srv.wire("tml-alice", timeout=10)
    try:
        check(w.healthz() == {"status": "ok"}, "healthz after the %s cases" % group)
    finally:
        w.close()


def run(ctx):
    ctx.known.update(KNOWN)
    keys = write_keys()
    srv = ctx.start_server(["--api-keys", keys, "--poll-timeout-seconds", "1",
                            "--header-timeout-seconds", str(HEADER_TIMEOUT),
                            "--body-timeout-seconds", str(BODY_TIMEOUT),
                            "--max-connections", str(MAX_CONNECTIONS), "--max-body-bytes", str(8 << 20),
                            "--model", "%s=%s" % (STORIES, stories_dir())],
                           name="hostile")
    alice, bob = srv.wire("tml-alice"), srv.wire("tml-bob")
    batch = sft_batch(seed=1)

    # bob's assets: a run with a checkpoint and sampler weights, a sampling session, a finished request
    bob_session = bob.create_session()
    bob_tc = new_client(bob, base_model=STORIES, rank=4, seed=1, session_id=bob_session)
    bob_ckpt = bob_tc.save_state("bob-ckpt")
    bob_sampler = bob_tc.save_weights_for_sampler("bob-sampler")["path"]
    bob_request = bob.forward_backward(bob_tc.model_id, bob_tc.next_seq(), batch, forward_only=True)
    bob.retrieve(bob_request, "Forward")
    bob_sampler_session = bob.create_sampling_session(bob_session, 0, base_model=STORIES)
    # alice's own: a run with a checkpoint, a sampling session
    alice_session = alice.create_session()
    alice_tc = new_client(alice, base_model=STORIES, rank=4, seed=2, session_id=alice_session)
    alice_tc.save_state("alice-ckpt")
    alice_sampler = alice.create_sampling_session(alice_session, 0, base_model=STORIES)
    model_seq = iter(range(100, 10 ** 6))

    def fresh_run():  # a new run of alice's: its first request is seq_id 1, and no case leaves it a gap
        return new_client(alice, base_model=STORIES, rank=4, seed=3, session_id=alice_session,
                          model_seq_id=next(model_seq)).model_id

    ids = {"fresh_run": fresh_run, "bob_session": bob_session, "bob_run": bob_tc.model_id, "bob_ckpt": bob_ckpt,
           "bob_sampler": bob_sampler, "bob_request": bob_request, "bob_sampler_session": bob_sampler_session,
           "alice_session": alice_session, "alice_run": alice_tc.model_id, "alice_sampler": alice_sampler}

    # bob trains while the suite runs
    trained = {}

    def train():
        try:
            w = srv.wire("tml-bob")
            w.keep_alive(bob_session)
            trained["tc"], trained["losses"] = bob_train(w, batch, BOB_STEPS)
        except Exception as e:  # noqa: BLE001 - reported below
            trained["error"] = e

    trainer = threading.Thread(target=train, daemon=True)
    trainer.start()

    groups = [("tinker", tinker_cases()), ("sample", sample_cases()), ("rest", rest_cases()),
              ("openai", openai_cases()), ("protobuf", proto_cases()), ("deep", deep_cases())]
    total = 0
    for group, cases in groups:
        for c in cases:
            total += 1
            ctx.case(c.name, run_case, srv, ids, c)
        ctx.case("healthz_after_" + group, healthz, srv, group)
    for fn in RAW_CASES:
        total += 1
        ctx.case(fn.__name__[len("case_"):], fn, srv)
        ctx.case("healthz_after_" + fn.__name__, healthz, srv, fn.__name__)
    total += 1
    ctx.case("cross_tenant_indistinguishable", check_indistinguishable, srv, ids)

    trainer.join(timeout=120)
    check(not trainer.is_alive(), "bob's training did not finish")
    if "error" in trained:
        raise CheckFailed("bob's training failed during the suite: %s" % trained["error"])
    _, clean = bob_train(bob, batch, BOB_STEPS)
    check_close(trained["losses"], clean, 1e-5, "bob's losses under attack vs a clean run")
    bob_tc.forward(batch)  # bob's first run still works, his checkpoint is still listed
    ids_listed = [c["checkpoint_id"] for c in bob.list_checkpoints(bob_tc.model_id)["checkpoints"]]
    check("weights/bob-ckpt" in ids_listed, "bob's checkpoints after the suite: %r" % ids_listed)
    ctx.finish()
    return "%d hostile cases: every answer a 4xx naming the problem; bob's losses == a clean run's" % total
