# Offline scenario (no tinkerd): the client's protobuf encoding and decoding against the schema and
# the protocol doc's examples, the SDK's metric-key and chunk rules, and the retrieve_future poll loop
# against a small in-process mock server (try_again, complete_metadata, error, protobuf, 5xx).
import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import zstandard

import wire_codec as wc
from harness import check, check_abs
from rest_models import validate_checkpoint
from tinker_wire import RequestFailed, TinkerWire, parse_tinker_path, strict_json


def test_request_encoding():
    P = wc.pb2()
    d = wc.Datum([1, 2, 3], target_tokens=[2, 3, 4], weights=[0.0, 1.0, 0.5])
    raw = wc.encode_fb_request("sess-1:train:0", 2, [d], "ppo", {"clip_low_threshold": 0.9}, True)
    msg = P.ForwardBackwardRequest()
    msg.ParseFromString(raw)
    check(msg.model_id == "sess-1:train:0" and msg.seq_id == 2 and msg.forward_only, "header fields")
    check(msg.loss_fn == "ppo" and dict(msg.loss_fn_config) == {"clip_low_threshold": 0.9}, "loss fn")
    tok = msg.data[0].model_input[0].encoded_text.tokens
    check(base64.b64encode(tok).decode() == "AQAAAAIAAAADAAAA", "tokens are int32 LE (doc example)")
    tt = msg.data[0].loss_fn_inputs["target_tokens"]
    check(tt.dtype == P.DTYPE_INT64 and list(tt.shape) == [3] and len(tt.dense) == 24, "target int64")
    w = msg.data[0].loss_fn_inputs["weights"]
    check(w.dtype == P.DTYPE_FLOAT32 and len(w.dense) == 12, "weights float32")
    check_abs(wc.decode_tensor(w), [0.0, 1.0, 0.5], 0, "weights round trip")


def test_sparse():
    dense = np.zeros((4, 5), dtype=np.int64)
    dense[0, 1], dense[2, 4], dense[2, 0], dense[3, 3] = 7, 9, 3, 1
    t = wc.encode_tensor(dense, sparse=True)
    check(t.WhichOneof("encoding") == "sparse_csr", "sparse oneof")
    check(np.frombuffer(t.sparse_csr.crow_indices, "<i8").tolist() == [0, 1, 1, 3, 4], "crow")
    check(np.array_equal(wc.decode_tensor(t), dense), "sparse round trip")


def test_output_decoding():
    outs = [{"logprobs": np.array([-1.0, -2.0], np.float32)},
            {"logprobs": np.array([-0.5], np.float32)},
            {"logprobs": np.array([], np.float32)}]
    r = wc.decode_fb_output(wc.encode_fb_output(outs, {"loss:sum": 3.5}, "tinker:ArrayRecord"))
    check(len(r.outputs) == 3 and r.loss_fn_output_type == "ArrayRecord", "records")
    check_abs(r.logprobs(0), [-1, -2], 0, "ragged datum 0")
    check(r.logprobs(2).shape == (0,), "empty datum")
    # (N, K) outputs with trailing_shape, two records, int64 and bf16 fields
    P = wc.pb2()
    msg = P.ForwardBackwardOutput(loss_fn_output_type="x")
    for vals in ([[1, 2], [3, 4], [5, 6]], [[7, 8]]):
        rec = msg.loss_fn_outputs.add(num_datums=1)
        bt = rec.fields["ids"]
        bt.dtype, bt.data = P.DTYPE_INT64, np.asarray(vals, "<i8").tobytes()
        bt.offsets = np.asarray([0, len(bt.data)], "<i8").tobytes()
        bt.trailing_shape.append(2)
        bf = rec.fields["lp"]
        f32 = np.asarray([-1.5] * len(vals), np.float32)
        bf.dtype, bf.data = P.DTYPE_BFLOAT16, (f32.view(np.uint32) >> 16).astype("<u2").tobytes()
        bf.offsets = np.asarray([0, len(bf.data)], "<i8").tobytes()
    msg.metrics["loss:sum"] = 1.0
    r = wc.decode_fb_output(msg.SerializeToString())
    check(r.outputs[0]["ids"].shape == (3, 2) and r.outputs[1]["ids"].tolist() == [[7, 8]], "trailing")
    check_abs(r.outputs[0]["lp"], [-1.5] * 3, 0, "bf16")


def test_metric_rules():
    for bad in ("loss", "a:b:c"):
        try:
            wc.check_metric_keys({bad: 1.0})
            raise AssertionError("metric %r accepted" % bad)
        except wc.ProtocolError:
            pass
    a = wc.FbResult("ArrayRecord", [{}] * 1, {"loss:sum": 1.0, "acc:mean": 1.0, "m:max": 2.0, "z:weird": 1})
    b = wc.FbResult("ArrayRecord", [{}] * 3, {"loss:sum": 2.0, "acc:mean": 0.0, "m:max": 1.0, "z:weird": 1})
    c = wc.combine_chunks([a, b])
    check(c.metrics == {"loss:sum": 3.0, "acc:mean": 0.25, "m:max": 2.0}, "combination %r" % c.metrics)
    check(parse_tinker_path("tinker://s:train:0/weights/x") == ("s:train:0", "weights", "x"), "path")
    for bad in ("tinker://r/weights/a/b", "tinker://r/other/x", "http://r/weights/x"):
        try:
            parse_tinker_path(bad)
            raise AssertionError("path %r accepted" % bad)
        except ValueError:
            pass


class MockHandler(BaseHTTPRequestHandler):
    """retrieve_future: try_again twice, then per request id a scripted answer."""
    protocol_version = "HTTP/1.1"
    polls = {}

    def log_message(self, *a):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        rid = body["request_id"]
        n = MockHandler.polls[rid] = MockHandler.polls.get(rid, 0) + 1
        assert self.headers["X-API-Key"] == "tml-test"
        if n <= 2:
            return self.answer(200, "application/json", {"type": "try_again", "request_id": rid,
                                                         "queue_state": "active"})
        if rid == "r-5xx" and n == 3:
            return self.answer(503, "application/json", {"detail": "busy"})
        if rid == "r-meta" and body["allow_metadata_only"]:
            return self.answer(200, "application/json", {"status": "complete_metadata",
                                                         "response_payload_size": 10})
        if rid == "r-err":
            return self.answer(200, "application/json", {"error": "bad loss", "category": "user"})
        if rid in ("r-fb", "r-5xx", "r-meta"):
            assert self.headers["Accept"] == "application/x-protobuf"
            raw = wc.encode_fb_output([{"logprobs": np.array([-1.0], np.float32)}], {"loss:sum": 1.0})
            return self.answer(200, "application/x-protobuf", raw)
        return self.answer(200, "application/json", {"metrics": {"lr:mean": 0.5}})

    def answer(self, status, ctype, obj):
        data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_poll_loop():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), MockHandler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        w = TinkerWire("127.0.0.1", srv.server_address[1])
        for rid in ("r-fb", "r-5xx", "r-meta"):
            r = w.retrieve(rid, "ForwardBackward")
            check(r.metrics == {"loss:sum": 1.0} and r.logprobs(0).tolist() == [-1.0], rid)
        check(w.retrieve("r-opt", "OptimStep") == {"metrics": {"lr:mean": 0.5}}, "optim result")
        try:
            w.retrieve("r-err", "OptimStep")
            raise AssertionError("error future not raised")
        except RequestFailed as e:
            check(e.category == "user" and e.message == "bad loss", "error category")
    finally:
        srv.shutdown()


def test_strict_validation():
    for bad in ('{"loss": NaN}', '{"x": Infinity}'):
        try:
            strict_json(bad)
            raise AssertionError("%s accepted" % bad)
        except wc.ProtocolError:
            pass
    good = {"checkpoint_id": "weights/a", "checkpoint_type": "training", "time": "2026-11-22T17:03:09.847Z",
            "tinker_path": "tinker://r/weights/a", "expires_at": None}
    validate_checkpoint(good)
    for key, value in (("time", "yesterday"), ("checkpoint_type", "other"), ("tinker_path", None)):
        bad = dict(good)
        if value is None:
            del bad[key]
        else:
            bad[key] = value
        try:
            validate_checkpoint(bad)
            raise AssertionError("checkpoint %r accepted" % bad)
        except wc.ProtocolError:
            pass


def test_zstd():
    raw = wc.encode_fb_request("m", 1, [wc.Datum(range(30), target_tokens=range(30), weights=[1] * 30)])
    check(zstandard.ZstdDecompressor().decompress(zstandard.ZstdCompressor().compress(raw)) == raw, "zstd")


def run(ctx):
    tests = [test_request_encoding, test_sparse, test_output_decoding, test_metric_rules,
             test_poll_loop, test_strict_validation, test_zstd]
    for t in tests:
        t()
    return "%d offline client checks" % len(tests)
