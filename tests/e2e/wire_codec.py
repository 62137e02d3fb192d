# Protobuf codec of the Tinker SDK 0.25 wire format, as the SDK encodes and decodes it:
# ForwardBackwardRequest (int32 LE tokens, int64/float32 tensors, optional sparse CSR) and
# ForwardBackwardOutput (int64 byte offsets, trailing_shape), plus the legacy JSON shapes and the
# SDK's chunk-metric combination. The generated tinker_public_pb2 comes from <build>/python or protoc.
import importlib
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

_PB2 = None
_BUILD_DIR = None

INT64_KEYS = ("target_tokens",)
DTYPE_WIDTH = {1: 4, 2: 8, 3: 4, 4: 2}  # FLOAT32, INT64, INT32, BFLOAT16
KNOWN_REDUCTIONS = ("mean", "sum", "min", "max", "slack", "hash_unordered", "unique")


class ProtocolError(Exception):
    """The server sent something the SDK would refuse."""


def source_dir():
    """The tinkerd source tree: $TINKERD_SOURCE_DIR when it holds the proto, else this file's repo."""
    env = os.environ.get("TINKERD_SOURCE_DIR")
    if env and os.path.exists(os.path.join(env, "src", "wire", "tinker_public.proto")):
        return env
    return os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def set_build_dir(build_dir):
    global _BUILD_DIR
    _BUILD_DIR = build_dir


def pb2():
    """The tinker_public_pb2 module: the build's copy if present, else generated with protoc."""
    global _PB2
    if _PB2 is not None:
        return _PB2
    candidates = []
    if _BUILD_DIR:
        candidates.append(os.path.join(_BUILD_DIR, "python"))
    for d in candidates:
        if os.path.exists(os.path.join(d, "tinker_public_pb2.py")):
            return _import_from(d)
    out = tempfile.mkdtemp(prefix="tinker-e2e-pb2-")
    try:
        wire = os.path.join(source_dir(), "src", "wire")
        subprocess.run(["protoc", "--python_out=" + out, "-I", wire,
                        os.path.join(wire, "tinker_public.proto")], check=True)
        return _import_from(out)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def _import_from(d):
    global _PB2
    sys.path.insert(0, d)
    try:
        _PB2 = importlib.import_module("tinker_public_pb2")
    finally:
        sys.path.remove(d)
    return _PB2


def dtype_for(key):
    return np.int64 if key in INT64_KEYS else np.float32


class Datum:
    """model_input tokens plus loss_fn_inputs (numpy arrays); keys in `sparse` go as CSR."""

    def __init__(self, tokens, sparse=(), **inputs):
        self.tokens = [int(t) for t in tokens]
        self.inputs = {k: np.asarray(v, dtype=dtype_for(k)) for k, v in inputs.items()}
        self.sparse = set(sparse)


# ---------------------------------------------------------------- request encoding

def _pb_dtype(arr):
    P = pb2()
    if arr.dtype == np.int64:
        return P.DTYPE_INT64
    if arr.dtype == np.float32:
        return P.DTYPE_FLOAT32
    raise ValueError("the SDK sends only int64 or float32, got %s" % arr.dtype)


def encode_tensor(arr, sparse=False):
    P = pb2()
    t = P.Tensor(dtype=_pb_dtype(arr))
    t.shape.extend(int(s) for s in arr.shape)
    if sparse:
        if arr.ndim != 2:
            raise ValueError("sparse CSR needs a 2-D tensor")
        rows, cols = np.nonzero(arr)
        crow = np.zeros(arr.shape[0] + 1, dtype=np.int64)
        np.add.at(crow, rows + 1, 1)
        crow = np.cumsum(crow).astype("<i8")
        t.sparse_csr.values = arr[rows, cols].astype(arr.dtype.newbyteorder("<")).tobytes()
        t.sparse_csr.crow_indices = crow.tobytes()
        t.sparse_csr.col_indices = cols.astype("<i8").tobytes()
    else:
        t.dense = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<")).tobytes()
    return t


def encode_datum(d):
    P = pb2()
    out = P.Datum()
    chunk = out.model_input.add()
    chunk.encoded_text.tokens = np.asarray(d.tokens, dtype="<i4").tobytes()
    for k, v in d.inputs.items():
        out.loss_fn_inputs[k].CopyFrom(encode_tensor(v, k in d.sparse))
    return out


def encode_fb_request(model_id, seq_id, datums, loss_fn="cross_entropy", config=None,
                      forward_only=False):
    P = pb2()
    req = P.ForwardBackwardRequest(model_id=model_id, seq_id=seq_id, loss_fn=loss_fn,
                                   forward_only=forward_only)
    for d in datums:
        req.data.append(encode_datum(d))
    for k, v in (config or {}).items():
        req.loss_fn_config[k] = float(v)
    return req.SerializeToString()


def decode_tensor(t):
    """Inverse of encode_tensor (used by the offline codec test)."""
    P = pb2()
    np_dtype = {P.DTYPE_FLOAT32: "<f4", P.DTYPE_INT64: "<i8", P.DTYPE_INT32: "<i4"}[t.dtype]
    shape = tuple(t.shape)
    if t.WhichOneof("encoding") == "sparse_csr":
        vals = np.frombuffer(t.sparse_csr.values, dtype=np_dtype)
        crow = np.frombuffer(t.sparse_csr.crow_indices, dtype="<i8")
        cols = np.frombuffer(t.sparse_csr.col_indices, dtype="<i8")
        out = np.zeros(shape, dtype=np_dtype)
        for r in range(shape[0]):
            out[r, cols[crow[r]:crow[r + 1]]] = vals[crow[r]:crow[r + 1]]
        return out
    arr = np.frombuffer(t.dense, dtype=np_dtype)
    return arr.reshape(shape) if shape else arr


# ---------------------------------------------------------------- result decoding

class FbResult:
    """A decoded ForwardBackwardOutput: per-datum dicts of numpy arrays, and metrics."""

    def __init__(self, loss_fn_output_type, outputs, metrics):
        self.loss_fn_output_type = loss_fn_output_type
        self.outputs = outputs
        self.metrics = metrics

    def logprobs(self, i):
        return self.outputs[i]["logprobs"]

    def __repr__(self):
        return "FbResult(%d datums, metrics=%r)" % (len(self.outputs), self.metrics)


def check_metric_keys(metrics):
    for k in metrics:
        if k.count(":") != 1:
            raise ProtocolError("metric key %r does not have exactly one ':' (the SDK crashes)" % k)


def _decode_values(raw, dtype):
    P = pb2()
    if dtype == P.DTYPE_FLOAT32:
        return np.frombuffer(raw, dtype="<f4").astype(np.float32)
    if dtype == P.DTYPE_BFLOAT16:
        u16 = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return u16.view(np.float32)
    if dtype == P.DTYPE_INT64:
        return np.frombuffer(raw, dtype="<i8").astype(np.int64)
    if dtype == P.DTYPE_INT32:
        return np.frombuffer(raw, dtype="<i4").astype(np.int64)
    raise ProtocolError("BatchedTensor dtype %d is not decodable (UNSPECIFIED?)" % dtype)


def _split_batched(name, bt, num_datums):
    width = DTYPE_WIDTH.get(bt.dtype)
    if width is None:
        raise ProtocolError("field %s has dtype %d" % (name, bt.dtype))
    offsets = np.frombuffer(bt.offsets, dtype="<i8")
    if len(offsets) != num_datums + 1:
        raise ProtocolError("field %s: %d offsets for %d datums" % (name, len(offsets), num_datums))
    trailing = [int(s) for s in bt.trailing_shape]
    inner = int(np.prod(trailing)) if trailing else 1
    out = []
    for i in range(num_datums):
        lo, hi = int(offsets[i]), int(offsets[i + 1])
        if lo > hi or hi > len(bt.data) or lo % width or hi % width:
            raise ProtocolError("field %s: bad byte offsets %d..%d" % (name, lo, hi))
        vals = _decode_values(bt.data[lo:hi], bt.dtype)
        if inner == 0 or len(vals) % inner:
            raise ProtocolError("field %s: %d values vs trailing %s" % (name, len(vals), trailing))
        out.append(vals.reshape([len(vals) // inner] + trailing))
    return out


def decode_fb_output(raw):
    P = pb2()
    msg = P.ForwardBackwardOutput()
    msg.ParseFromString(raw)
    outputs = []
    for rec in msg.loss_fn_outputs:
        n = int(rec.num_datums)
        per_datum = [dict() for _ in range(n)]
        for name, bt in rec.fields.items():
            for i, arr in enumerate(_split_batched(name, bt, n)):
                per_datum[i][name] = arr
        outputs.extend(per_datum)
    metrics = dict(msg.metrics)
    check_metric_keys(metrics)
    kind = msg.loss_fn_output_type.split(":")[-1] if outputs else "ArrayRecord"
    return FbResult(kind, outputs, metrics)


def encode_fb_output(outputs, metrics, kind="ArrayRecord"):
    """Builds a ForwardBackwardOutput (one record) for the offline codec test."""
    P = pb2()
    msg = P.ForwardBackwardOutput(loss_fn_output_type=kind)
    rec = msg.loss_fn_outputs.add(num_datums=len(outputs))
    for name in (outputs[0].keys() if outputs else []):
        arrs = [np.asarray(o[name], dtype=np.float32) for o in outputs]
        bt = rec.fields[name]
        bt.dtype = P.DTYPE_FLOAT32
        bt.trailing_shape.extend(arrs[0].shape[1:])
        blobs = [a.astype("<f4").tobytes() for a in arrs]
        offs = np.cumsum([0] + [len(b) for b in blobs]).astype("<i8")
        bt.data = b"".join(blobs)
        bt.offsets = offs.tobytes()
    for k, v in metrics.items():
        msg.metrics[k] = v
    return msg.SerializeToString()


# ---------------------------------------------------------------- legacy JSON (SDK <= 0.24.1)

def datum_to_json(d):
    inputs = {}
    for k, v in d.inputs.items():
        inputs[k] = {"data": v.reshape(-1).tolist(),
                     "dtype": "int64" if v.dtype == np.int64 else "float32",
                     "shape": list(v.shape)}
    return {"model_input": {"chunks": [{"type": "encoded_text", "tokens": d.tokens}]},
            "loss_fn_inputs": inputs}


def decode_fb_json(obj):
    outputs = []
    for rec in obj.get("loss_fn_outputs", []):
        d = {}
        for k, t in rec.items():
            arr = np.asarray(t["data"], dtype=np.float32 if t.get("dtype") == "float32" else np.int64)
            d[k] = arr.reshape(t["shape"]) if t.get("shape") else arr
        outputs.append(d)
    metrics = dict(obj.get("metrics") or {})
    check_metric_keys(metrics)
    return FbResult(obj.get("loss_fn_output_type", ""), outputs, metrics)


# ---------------------------------------------------------------- chunk combination (SDK)

def combine_chunks(results):
    """Concatenates chunk outputs in order and reduces metrics the way the SDK does."""
    if not results:
        return FbResult("", [], {})
    counts = [len(r.outputs) for r in results]
    total = sum(counts)
    metrics = {}
    for key in results[0].metrics:
        _, reduction = key.split(":")  # the SDK's own split: raises unless exactly one ':'
        if not all(key in r.metrics for r in results):
            continue
        vals = [r.metrics[key] for r in results]
        if reduction in ("mean", "slack"):
            metrics[key] = sum(v * c for v, c in zip(vals, counts)) / total
        elif reduction == "sum":
            metrics[key] = sum(vals)
        elif reduction == "min":
            metrics[key] = min(vals)
        elif reduction == "max":
            metrics[key] = max(vals)
        elif reduction in KNOWN_REDUCTIONS:
            metrics[key] = vals[0]
    outputs = [o for r in results for o in r.outputs]
    return FbResult(results[0].loss_fn_output_type, outputs, metrics)


# ---------------------------------------------------------------- SampleResponse (asample results)

TOPK_EMPTY_LOGPROB = -99999.0


class SampleResult:
    """A decoded sample result as the SDK 0.25 presents it: sequences (tokens, logprobs,
    stop_reason), prompt_logprobs (None first) and topk_prompt_logprobs ([(tok, lp)...] or None)."""

    def __init__(self, sequences, prompt_logprobs=None, topk_prompt_logprobs=None, cache_hits=0):
        self.sequences = sequences
        self.prompt_logprobs = prompt_logprobs
        self.topk_prompt_logprobs = topk_prompt_logprobs
        self.prompt_cache_hit_tokens = cache_hits

    @property
    def tokens(self):
        return [s["tokens"] for s in self.sequences]

    @property
    def stop_reasons(self):
        return [s["stop_reason"] for s in self.sequences]

    def __repr__(self):
        return "SampleResult(%r)" % [(s["tokens"], s["stop_reason"]) for s in self.sequences]


def _floats_or_none(raw):
    return [None if np.isnan(v) else float(v) for v in np.frombuffer(raw, dtype="<f4")]


def _topk_rows(ids, lps, prompt_length, k):
    """The SDK's reshaping: a row whose first cell is empty is None; trailing empty cells go."""
    rows = []
    for r in range(prompt_length):
        cells = [(int(ids[r * k + j]), float(lps[r * k + j])) for j in range(k)]
        if not cells or (cells[0][0] == 0 and cells[0][1] == TOPK_EMPTY_LOGPROB):
            rows.append(None)
            continue
        while cells and cells[-1][0] == 0 and cells[-1][1] == TOPK_EMPTY_LOGPROB:
            cells.pop()
        rows.append(cells)
    return rows


def decode_sample_proto(raw):
    P = pb2()
    msg = P.SampleResponse()
    msg.ParseFromString(raw)
    seqs = []
    for s in msg.sequences:
        if s.stop_reason not in (P.STOP_REASON_STOP, P.STOP_REASON_LENGTH):
            raise ProtocolError("stop_reason %d is not STOP or LENGTH" % s.stop_reason)
        if len(s.tokens) % 4 or len(s.logprobs) % 4:
            raise ProtocolError("sequence bytes not a multiple of 4")
        tokens = np.frombuffer(s.tokens, dtype="<i4").astype(np.int64).tolist()
        lps = np.frombuffer(s.logprobs, dtype="<f4").astype(np.float64).tolist() if s.logprobs else None
        if lps is not None and len(lps) != len(tokens):
            raise ProtocolError("%d logprobs for %d tokens" % (len(lps), len(tokens)))
        seqs.append({"tokens": tokens, "logprobs": lps,
                     "stop_reason": "stop" if s.stop_reason == P.STOP_REASON_STOP else "length"})
    plp = _floats_or_none(msg.prompt_logprobs) if msg.HasField("prompt_logprobs") else None
    topk = None
    if msg.HasField("topk_prompt_logprobs"):
        t = msg.topk_prompt_logprobs
        if t.k > 0 and t.prompt_length > 0:
            n = int(t.k) * int(t.prompt_length)
            ids = np.frombuffer(t.token_ids, dtype="<i4")
            lps = np.frombuffer(t.logprobs, dtype="<f4")
            if len(ids) != n or len(lps) != n:
                raise ProtocolError("topk: %d ids, %d logprobs for %d x %d" % (
                    len(ids), len(lps), t.prompt_length, t.k))
            topk = _topk_rows(ids, lps, int(t.prompt_length), int(t.k))
    return SampleResult(seqs, plp, topk, int(msg.prompt_cache_hit_tokens))


def decode_sample_json(obj):
    """The legacy JSON sample result (SDK <= 0.24.1)."""
    seqs = []
    for s in obj.get("sequences", []):
        if s.get("stop_reason") not in ("stop", "length"):
            raise ProtocolError("stop_reason %r" % s.get("stop_reason"))
        seqs.append({"tokens": [int(t) for t in s["tokens"]], "stop_reason": s["stop_reason"],
                     "logprobs": None if s.get("logprobs") is None else [float(x) for x in s["logprobs"]]})
    topk = obj.get("topk_prompt_logprobs")
    if topk is not None:
        topk = [None if row is None else [(int(t), float(lp)) for t, lp in row] for row in topk]
    return SampleResult(seqs, obj.get("prompt_logprobs"), topk, obj.get("prompt_cache_hit_tokens", 0))
