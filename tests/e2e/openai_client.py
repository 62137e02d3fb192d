# A tiny OpenAI-API client for the e2e tests, over http.client: Bearer or X-API-Key auth, /v1 or
# /oai/api/v1 prefix, JSON calls whose errors must have OpenAI's {"error": {message, type, param, code}}
# shape, and an SSE reader that validates the framing (`data: <json>\n\n` events, `data: [DONE]` last).
import http.client
import json

from tinker_wire import strict_json

PREFIXES = ("/v1", "/oai/api/v1")
ERROR_FIELDS = ("message", "type", "param", "code")


class OpenAIError(AssertionError):
    """An HTTP status >= 400 with a well-formed OpenAI error body (a failed check unless expected)."""

    def __init__(self, status, error, what):
        super().__init__("%s: HTTP %d %s" % (what, status, json.dumps(error)[:400]))
        self.status, self.error = status, error
        self.param, self.code, self.message = error["param"], error["code"], error["message"]


class SSEError(AssertionError):
    pass


def parse_error(status, body, what):
    """The OpenAIError of a failed call; AssertionError when the body does not have OpenAI's shape."""
    try:
        obj = strict_json(body)
    except ValueError:
        raise AssertionError("%s: HTTP %d with a non-JSON body %r" % (what, status, body[:200]))
    err = obj.get("error") if isinstance(obj, dict) else None
    if not isinstance(err, dict) or any(k not in err for k in ERROR_FIELDS) or not err["message"]:
        raise AssertionError("%s: HTTP %d error body lacks %s: %r" % (what, status, ERROR_FIELDS, obj))
    return OpenAIError(status, err, what)


def parse_sse(body):
    """Splits an SSE body into the JSON events before the final `data: [DONE]`; raises SSEError on any
    framing fault (a line that is not `data: ...`, a missing blank line, events after [DONE])."""
    text = body.decode("utf-8")
    if not text.endswith("data: [DONE]\n\n"):
        raise SSEError("stream does not end with 'data: [DONE]\\n\\n': ...%r" % text[-120:])
    blocks = text[:-2].split("\n\n")
    events = []
    for i, block in enumerate(blocks):
        if not block.startswith("data: ") or "\n" in block:
            raise SSEError("event %d is not one 'data: ' line: %r" % (i, block[:200]))
        payload = block[len("data: "):]
        if payload == "[DONE]":
            if i != len(blocks) - 1:
                raise SSEError("[DONE] at event %d of %d" % (i, len(blocks)))
            return events
        try:
            events.append(strict_json(payload))
        except ValueError as e:
            raise SSEError("event %d is not JSON (%s): %r" % (i, e, payload[:200]))
    raise SSEError("no [DONE] event")


class OpenAIClient:
    def __init__(self, port, api_key=None, header="bearer", prefix="/v1", timeout=60.0):
        self.port, self.api_key, self.header, self.prefix, self.timeout = port, api_key, header, prefix, timeout

    def with_(self, **kw):
        """A copy with some settings changed (api_key, header, prefix)."""
        c = OpenAIClient(self.port, self.api_key, self.header, self.prefix, self.timeout)
        c.__dict__.update(kw)
        return c

    def headers(self):
        h = {"Content-Type": "application/json"}
        if self.api_key is not None:
            if self.header == "bearer":
                h["Authorization"] = "Bearer " + self.api_key
            else:
                h["X-API-Key"] = self.api_key
        return h

    def open(self, method, path, body=None):
        """Sends one request on a fresh connection; returns (connection, response) unread."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        conn.request(method, self.prefix + path, body=body, headers=self.headers())
        return conn, conn.getresponse()

    def raw(self, method, path, body=None):
        """(status, content type, body bytes)."""
        conn, r = self.open(method, path, body)
        try:
            return r.status, r.getheader("content-type", ""), r.read()
        finally:
            conn.close()

    def call(self, method, path, body=None):
        status, ctype, data = self.raw(method, path, body)
        what = "%s %s%s" % (method, self.prefix, path)
        if status >= 400:
            raise parse_error(status, data, what)
        if "application/json" not in ctype:
            raise AssertionError("%s: Content-Type %r" % (what, ctype))
        return strict_json(data)

    def models(self):
        return self.call("GET", "/models")

    def model_ids(self):
        return [m["id"] for m in self.models()["data"]]

    def completion(self, **body):
        return self.call("POST", "/completions", body)

    def chat(self, **body):
        return self.call("POST", "/chat/completions", body)

    def stream(self, path, body):
        """A streamed request: the validated JSON events (error events included)."""
        status, ctype, data = self.raw("POST", path, dict(body, stream=True))
        if status >= 400:
            raise parse_error(status, data, "POST %s%s (stream)" % (self.prefix, path))
        if not ctype.startswith("text/event-stream"):
            raise SSEError("stream Content-Type %r" % ctype)
        return parse_sse(data)

    def stream_completion(self, **body):
        return self.stream("/completions", body)

    def stream_chat(self, **body):
        return self.stream("/chat/completions", body)
