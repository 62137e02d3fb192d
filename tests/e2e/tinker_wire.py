# Wire-level Tinker client speaking exactly what the official SDK 0.25 speaks: its headers, keep-alive
# HTTP/1.1 via http.client (one connection per thread), protobuf forward_backward, the no-sleep
# retrieve_future poll loop, and the REST calls. TrainingClient keeps the per-model seq_id counter.
import http.client
import json
import threading
import time
import urllib.parse
import uuid
import zlib

import zstandard

import wire_codec as wc
from rest_models import (check_datetime, validate_checkpoint_list, validate_cursor,
                         validate_training_run)

SDK_HEADERS = {
    "User-Agent": "AsyncTinker/Python 0.25.0",
    "Accept": "application/json",
    "Accept-Encoding": "gzip, deflate",
    "X-Stainless-Package-Version": "0.25.0",
    "X-Stainless-OS": "Linux",
    "X-Stainless-Arch": "x64",
    "X-Stainless-Runtime": "CPython",
    "X-Stainless-Runtime-Version": "3.11.7",
    "X-Stainless-Async": "async:asyncio",
    "x-stainless-retry-count": "0",
}
PROTO_TYPES = ("ForwardBackward", "Forward", "Sample")
PROTO = "application/x-protobuf"


def _reject_constant(name):
    raise wc.ProtocolError("JSON holds %s: the SDK's orjson parser rejects NaN/Infinity" % name)


def strict_json(data):
    """json.loads that refuses NaN and Infinity, like orjson in the SDK."""
    return json.loads(data, parse_constant=_reject_constant)


class ApiError(Exception):
    """An HTTP status >= 400 (what the SDK turns into BadRequestError, NotFoundError, ...)."""

    def __init__(self, status, body, what=""):
        super().__init__("%s: HTTP %d - %s" % (what, status, body[:400]))
        self.status = status
        self.body = body

    def json(self):
        return strict_json(self.body)


class RequestFailed(Exception):
    """A future that finished with {"error", "category"} (tinker.RequestFailedError)."""

    def __init__(self, request_id, message, category):
        super().__init__("request %s failed (%s): %s" % (request_id, category, message))
        self.request_id = request_id
        self.message = message
        self.category = category


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = {k.lower(): v for k, v in headers}
        enc = self.headers.get("content-encoding", "").lower()
        if enc == "gzip" and body:
            body = zlib.decompress(body, 16 + zlib.MAX_WBITS)
        elif enc == "deflate" and body:
            body = zlib.decompress(body)
        self.body = body

    @property
    def content_type(self):
        return self.headers.get("content-type", "")

    def json(self):
        return strict_json(self.body)


class Connection:
    """One keep-alive HTTP/1.1 connection; reconnects once if a reused connection went stale."""

    def __init__(self, host, port, timeout):
        self.host, self.port, self.timeout = host, port, timeout
        self.conn = None

    def request(self, method, path, body, headers, timeout=None):
        for attempt in (0, 1):
            fresh = self.conn is None
            if fresh:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            self.conn.timeout = timeout or self.timeout
            if self.conn.sock is not None:
                self.conn.sock.settimeout(self.conn.timeout)
            try:
                self.conn.request(method, path, body=body, headers=headers)
                r = self.conn.getresponse()
                data = r.read()
                if r.getheader("connection", "").lower() == "close":
                    self.close()
                return Response(r.status, r.getheaders(), data)
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
                    http.client.CannotSendRequest):
                self.close()
                if fresh or attempt:
                    raise
        raise AssertionError("unreachable")

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class TinkerWire:
    """The SDK's HTTP surface. Thread-safe: each thread gets its own keep-alive connection."""

    def __init__(self, host, port, api_key="tml-test", timeout=60.0):
        self.host, self.port, self.api_key, self.timeout = host, port, api_key, timeout
        self._local = threading.local()
        self._beating = set()  # sessions the background thread heartbeats, like the SDK
        self._beat_thread = None
        self._beat_lock = threading.Lock()

    def _conn(self):
        c = getattr(self._local, "conn", None)
        if c is None:
            c = self._local.conn = Connection(self.host, self.port, self.timeout)
        return c

    def close(self):
        c = getattr(self._local, "conn", None)
        if c is not None:
            c.close()
        self._local.conn = None

    def _heartbeat_loop(self, interval):
        while True:
            time.sleep(interval)
            with self._beat_lock:
                sessions = list(self._beating)
            for sid in sessions:
                try:
                    self.heartbeat(sid)
                except Exception:  # failures are ignored, as in the SDK
                    self.close()

    def keep_alive(self, session_id, interval=10.0):
        """Heartbeats session_id every `interval` s from a daemon thread (the SDK does every 10 s)."""
        with self._beat_lock:
            self._beating.add(session_id)
            if self._beat_thread is None:
                self._beat_thread = threading.Thread(target=self._heartbeat_loop, args=(interval,),
                                                     daemon=True)
                self._beat_thread.start()

    # ------------------------------------------------------------ raw requests

    def request(self, method, path, body=None, headers=None, auth=True, timeout=None):
        """Sends one request with the SDK's headers; returns the Response whatever its status."""
        h = dict(SDK_HEADERS)
        if auth and self.api_key is not None:
            h["X-API-Key"] = self.api_key
        if method != "GET":
            h["X-Idempotency-Key"] = "stainless-python-retry-" + str(uuid.uuid4())
            h.setdefault("Content-Type", "application/json")
            if body is None and method == "POST":
                body = b""
        h["x-stainless-read-timeout"] = str(int(timeout or self.timeout))
        h.update(headers or {})
        return self._conn().request(method, path, body, h, timeout)

    def call(self, method, path, obj=None, headers=None, timeout=None):
        """A JSON request whose response must be 2xx JSON; returns the parsed body."""
        body = json.dumps(obj).encode() if obj is not None else None
        r = self.request(method, path, body, headers, timeout=timeout)
        if r.status >= 400:
            raise ApiError(r.status, r.body.decode(errors="replace"), "%s %s" % (method, path))
        if not r.body:
            return None
        if "application/json" not in r.content_type:
            raise wc.ProtocolError("%s %s: Content-Type %r" % (method, path, r.content_type))
        return r.json()

    def post(self, path, obj, **kw):
        return self.call("POST", "/api/v1/" + path, obj, **kw)

    def get(self, path, **kw):
        return self.call("GET", "/api/v1/" + path, **kw)

    # ------------------------------------------------------------ session and service

    def healthz(self):
        return self.get("healthz")

    def client_config(self):
        return self.post("client/config", {"sdk_version": "0.25.0"})

    def capabilities(self):
        return self.get("get_server_capabilities")

    def create_session(self, tags=(), user_metadata=None, project_id=None, heartbeat=True):
        body = {"tags": list(tags), "user_metadata": user_metadata or {}, "sdk_version": "0.25.0",
                "type": "create_session"}
        if project_id:
            body["project_id"] = project_id
        sid = self.post("create_session", body)["session_id"]
        if heartbeat:
            self.keep_alive(sid)
        return sid

    def heartbeat(self, session_id):
        return self.post("session_heartbeat", {"session_id": session_id,
                                               "type": "session_heartbeat"}, timeout=10)

    def telemetry(self, session_id):
        ev = {"event": "SESSION_START", "event_id": str(uuid.uuid4()), "event_session_index": 0,
              "severity": "INFO", "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())}
        return self.post("telemetry", {"events": [ev], "platform": "Linux", "sdk_version": "0.25.0",
                                       "session_id": session_id, "process_uuid": str(uuid.uuid4())},
                         timeout=5)

    # ------------------------------------------------------------ submissions (futures)

    def create_model(self, session_id, model_seq_id, base_model, rank=32, seed=None,
                     train_mlp=True, train_attn=True, train_unembed=True, user_metadata=None):
        lora = {"rank": rank, "train_unembed": train_unembed, "train_mlp": train_mlp,
                "train_attn": train_attn}
        if seed is not None:
            lora["seed"] = seed
        body = {"session_id": session_id, "model_seq_id": model_seq_id, "base_model": base_model,
                "lora_config": lora, "type": "create_model"}
        if user_metadata is not None:
            body["user_metadata"] = user_metadata
        return self.post("create_model", body)["request_id"]

    def forward_backward(self, model_id, seq_id, datums, loss_fn="cross_entropy", config=None,
                         forward_only=False, zstd=False):
        raw = wc.encode_fb_request(model_id, seq_id, datums, loss_fn, config, forward_only)
        return self.forward_backward_raw(raw, zstd)

    def forward_backward_raw(self, raw, zstd=False, extra_headers=None):
        headers = {"Content-Type": PROTO}
        if zstd:
            raw = zstandard.ZstdCompressor().compress(raw)
            headers["Content-Encoding"] = "zstd"
        headers.update(extra_headers or {})
        r = self.request("POST", "/api/v1/forward_backward", raw, headers)
        if r.status >= 400:
            raise ApiError(r.status, r.body.decode(errors="replace"), "forward_backward")
        return r.json()["request_id"]

    def forward_backward_json(self, model_id, seq_id, datums, loss_fn="cross_entropy",
                              config=None, forward_only=False):
        """Legacy (SDK <= 0.24.1) JSON forward_backward, or /api/v1/forward when forward_only."""
        inner = {"data": [wc.datum_to_json(d) for d in datums], "loss_fn": loss_fn}
        if config:
            inner["loss_fn_config"] = config
        key = "forward_input" if forward_only else "forward_backward_input"
        route = "forward" if forward_only else "forward_backward"
        return self.post(route, {key: inner, "model_id": model_id, "seq_id": seq_id})["request_id"]

    def optim_step(self, model_id, seq_id, lr=1e-4, beta1=0.9, beta2=0.95, eps=1e-12,
                   weight_decay=0.0, grad_clip_norm=0.0):
        adam = {"learning_rate": lr, "beta1": beta1, "beta2": beta2, "eps": eps,
                "weight_decay": weight_decay, "grad_clip_norm": grad_clip_norm}
        return self.post("optim_step", {"adam_params": adam, "model_id": model_id, "seq_id": seq_id,
                                        "type": "optim_step"})["request_id"]

    def save_weights(self, model_id, seq_id, name, ttl_seconds=None, overwrite=False):
        body = {"model_id": model_id, "path": name, "seq_id": seq_id, "overwrite": overwrite,
                "type": "save_weights"}
        if ttl_seconds is not None:
            body["ttl_seconds"] = ttl_seconds
        return self.post("save_weights", body)["request_id"]

    def save_weights_for_sampler(self, model_id, seq_id, name=None, sampling_session_seq_id=None,
                                 ttl_seconds=None):
        body = {"model_id": model_id, "seq_id": seq_id, "type": "save_weights_for_sampler"}
        if name is not None:
            body["path"] = name
        else:
            body["sampling_session_seq_id"] = sampling_session_seq_id or 0
        if ttl_seconds is not None:
            body["ttl_seconds"] = ttl_seconds
        return self.post("save_weights_for_sampler", body)["request_id"]

    def load_weights(self, model_id, seq_id, path, optimizer):
        return self.post("load_weights", {"model_id": model_id, "seq_id": seq_id, "path": path,
                                          "optimizer": optimizer, "type": "load_weights"})["request_id"]

    def unload_model(self, model_id):
        return self.post("unload_model", {"model_id": model_id, "type": "unload_model"})["request_id"]

    def create_sampling_session(self, session_id, sampling_session_seq_id, base_model=None,
                                model_path=None):
        body = {"session_id": session_id, "sampling_session_seq_id": sampling_session_seq_id,
                "type": "create_sampling_session"}
        if model_path is not None:
            body["model_path"] = model_path
        if base_model is not None:
            body["base_model"] = base_model
        return self.post("create_sampling_session", body)["sampling_session_id"]

    def asample(self, body, max_backoffs=120):
        """POST asample with the backpressure header; a 429 (or 402) means wait 1 s and resubmit,
        as the SDK does. Returns the request_id."""
        raw = json.dumps(body).encode()
        for _ in range(max_backoffs):
            r = self.request("POST", "/api/v1/asample", raw, {"X-Tinker-Sampling-Backpressure": "1"})
            if r.status in (402, 429):
                time.sleep(1)
                continue
            if r.status >= 400:
                raise ApiError(r.status, r.body.decode(errors="replace"), "asample")
            return r.json()["request_id"]
        raise TimeoutError("asample still refused with 429 after %d tries" % max_backoffs)

    def get_info(self, model_id):
        return self.post("get_info", {"model_id": model_id, "type": "get_info"})

    def weights_info(self, tinker_path):
        return self.post("weights_info", {"tinker_path": tinker_path})

    # ------------------------------------------------------------ retrieve_future

    def poll_once(self, request_id, request_type, iteration=0, accept=None,
                  allow_metadata_only=True, timeout=45):
        headers = {"X-Tinker-Request-Type": request_type,
                   "X-Tinker-Request-Iteration": str(iteration),
                   "Accept": accept or (PROTO if request_type in PROTO_TYPES else "application/json")}
        if iteration == 0:
            headers["X-Tinker-Create-Promise-Roundtrip-Time"] = "0.01"
        body = json.dumps({"request_id": request_id, "allow_metadata_only": allow_metadata_only})
        return self.request("POST", "/api/v1/retrieve_future", body.encode(), headers, timeout=timeout)

    def retrieve(self, request_id, request_type, proto=True, max_wait=180.0):
        """The SDK's poll loop (no sleep between polls). proto=False polls with Accept JSON and
        decodes the legacy JSON forward_backward shape. Raises RequestFailed / ApiError."""
        accept = None if proto else "application/json"
        deadline = time.monotonic() + max_wait
        allow_meta, bad_requests, it = True, 0, 0
        while True:
            if time.monotonic() > deadline:
                raise TimeoutError("retrieve_future %s still pending after %.0f s" % (request_id, max_wait))
            r = self.poll_once(request_id, request_type, it, accept, allow_meta)
            it += 1
            if r.status == 200 and PROTO in r.content_type:
                if request_type == "Sample":
                    return wc.decode_sample_proto(r.body)
                if request_type not in ("ForwardBackward", "Forward"):
                    raise wc.ProtocolError("protobuf result for %s" % request_type)
                return wc.decode_fb_output(r.body)
            if r.status == 200:
                obj = self._json_result(r, request_id)
                if obj.get("type") == "try_again":
                    continue
                if obj.get("status") == "complete_metadata":
                    if not allow_meta:
                        raise wc.ProtocolError("complete_metadata sent twice")
                    allow_meta = False
                    continue
                if "error" in obj:
                    cat = obj.get("category")
                    raise RequestFailed(request_id, obj["error"],
                                        cat if cat in ("unknown", "server", "user") else "unknown")
                if request_type in PROTO_TYPES:
                    if proto:
                        raise wc.ProtocolError("JSON result for %s: the SDK only supports proto" % request_type)
                    return wc.decode_sample_json(obj) if request_type == "Sample" else wc.decode_fb_json(obj)
                return obj
            if r.status == 408 or r.status >= 500:
                continue
            if r.status == 429:
                time.sleep(1)
                continue
            if r.status == 400 and bad_requests < 3 and r.body:
                bad_requests += 1
                continue
            raise ApiError(r.status, r.body.decode(errors="replace"), "retrieve_future " + request_id)

    @staticmethod
    def _json_result(r, request_id):
        if "application/json" not in r.content_type:
            raise wc.ProtocolError("retrieve_future %s: Content-Type %r" % (request_id, r.content_type))
        obj = strict_json(r.body)
        if not isinstance(obj, dict):
            raise wc.ProtocolError("retrieve_future %s: not an object: %r" % (request_id, obj))
        return obj

    # ------------------------------------------------------------ REST (validated like the SDK's models)

    def list_training_runs(self, limit=20, offset=0, access_scope="owned"):
        obj = self.get("training_runs?limit=%d&offset=%d&access_scope=%s" % (limit, offset, access_scope))
        validate_cursor(obj.get("cursor"), required=True)
        for run in obj["training_runs"]:
            validate_training_run(run)
        return obj

    def get_training_run(self, run_id, access_scope="owned"):
        return validate_training_run(self.get("training_runs/%s?access_scope=%s" % (run_id, access_scope)))

    def list_checkpoints(self, run_id):
        return validate_checkpoint_list(self.get("training_runs/%s/checkpoints" % run_id))

    def list_user_checkpoints(self, limit=100, offset=0):
        return validate_checkpoint_list(self.get("checkpoints?limit=%d&offset=%d" % (limit, offset)))

    def _ckpt(self, path):
        run, kind, name = parse_tinker_path(path)
        return "/api/v1/training_runs/%s/checkpoints/%s/%s" % (run, kind, name)

    def delete_checkpoint(self, path):
        return self.call("DELETE", self._ckpt(path))

    def publish(self, path):
        return self.call("POST", self._ckpt(path) + "/publish")

    def unpublish(self, path):
        return self.call("DELETE", self._ckpt(path) + "/publish")

    def set_ttl(self, path, ttl_seconds):
        return self.call("PUT", self._ckpt(path) + "/ttl", {"ttl_seconds": ttl_seconds})

    def archive_url(self, path):
        """The archive endpoint without following redirects: 302 Location or 200 {"url"}."""
        r = self.request("GET", self._ckpt(path) + "/archive")
        if r.status in (301, 302, 303, 307) and "location" in r.headers:
            return r.headers["location"]
        if r.status != 200:
            raise ApiError(r.status, r.body.decode(errors="replace"), "archive " + path)
        obj = r.json()
        if "url" not in obj or "expires" not in obj:
            raise wc.ProtocolError("archive answer lacks url/expires: %r" % obj)
        check_datetime(obj["expires"], "archive expires")
        return obj["url"]

    def fetch_url(self, url):
        """A plain GET with no auth headers, like the SDK's archive download."""
        u = urllib.parse.urlsplit(url)
        path = u.path + ("?" + u.query if u.query else "")
        if not u.netloc:
            host, port = self.host, self.port
        else:
            host, port = u.hostname, u.port or 80
        c = http.client.HTTPConnection(host, port, timeout=60)
        try:
            c.request("GET", path, headers={"User-Agent": "python-httpx/0.23.3"})
            r = c.getresponse()
            return Response(r.status, r.getheaders(), r.read())
        finally:
            c.close()

    def get_session(self, session_id, access_scope="owned"):
        return self.get("sessions/%s?access_scope=%s" % (session_id, access_scope))

    def list_sessions(self, limit=20, offset=0):
        return self.get("sessions?limit=%d&offset=%d&access_scope=owned" % (limit, offset))

    def get_sampler(self, sampler_id):
        return self.get("samplers/%s" % sampler_id)


def parse_tinker_path(path):
    """The SDK's parser: tinker://<run>/<weights|sampler_weights>/<name>, exactly 3 parts."""
    if not path.startswith("tinker://"):
        raise ValueError("not a tinker path: %r" % path)
    parts = path[len("tinker://"):].split("/")
    if len(parts) != 3 or parts[1] not in ("weights", "sampler_weights"):
        raise ValueError("bad tinker path: %r" % path)
    return parts[0], parts[1], parts[2]

