# The OpenAI scenario's client: the official `openai` Python client from PyPI (openai.OpenAI with
# base_url <server>/v1 or /oai/api/v1), wrapped only to hand the checks plain dicts (model_dump) and to
# route the server's extensions (top_k, chat_template_kwargs, add_generation_prompt) through
# extra_body. Errors surface as the client's own classes (openai.BadRequestError, NotFoundError,
# AuthenticationError); expect_error checks the class, the status and OpenAI's param / code.
try:
    import openai
except ImportError as e:  # a missing client is a failure, never a skip
    raise SystemExit("FAIL: the official `openai` client is not importable: %s" % e)

from harness import check

PREFIXES = ("/v1", "/oai/api/v1")
COMPLETION_ARGS = {"model", "prompt", "echo", "logprobs", "max_tokens", "n", "seed", "stop", "stream",
                   "stream_options", "temperature", "top_p", "user"}
CHAT_ARGS = {"model", "messages", "logprobs", "top_logprobs", "max_tokens", "max_completion_tokens", "n", "seed",
             "stop", "stream", "stream_options", "temperature", "top_p", "user"}
ERROR_CLASSES = {400: openai.BadRequestError, 401: openai.AuthenticationError, 404: openai.NotFoundError}


class OpenAIOfficial:
    def __init__(self, port, api_key, prefix="/v1", timeout=120.0):
        self.port, self.api_key, self.prefix = port, api_key, prefix
        self.client = openai.OpenAI(base_url="http://127.0.0.1:%d%s" % (port, prefix), api_key=api_key,
                                    max_retries=0, timeout=timeout)

    def with_(self, **kw):
        args = dict(port=self.port, api_key=self.api_key, prefix=self.prefix)
        args.update(kw)
        return OpenAIOfficial(**args)

    @staticmethod
    def _split(body, native):
        args = {k: v for k, v in body.items() if k in native}
        extra = {k: v for k, v in body.items() if k not in native}
        if extra:
            args["extra_body"] = extra
        return args

    def models(self):
        page = self.client.models.list()
        return {"object": getattr(page, "object", "list"), "data": [m.model_dump() for m in page.data]}

    def model_ids(self):
        return [m.id for m in self.client.models.list().data]

    def completion(self, **body):
        return self.client.completions.create(**self._split(body, COMPLETION_ARGS)).model_dump()

    def chat(self, **body):
        return self.client.chat.completions.create(**self._split(body, CHAT_ARGS)).model_dump()

    def stream_completion(self, **body):
        body["stream"] = True
        return [c.model_dump() for c in self.client.completions.create(**self._split(body, COMPLETION_ARGS))]

    def stream_chat(self, **body):
        body["stream"] = True
        return [c.model_dump() for c in self.client.chat.completions.create(**self._split(body, CHAT_ARGS))]

    def open_stream(self, **body):
        """A completion stream left open (the caller reads some and closes it)."""
        body["stream"] = True
        return self.client.completions.create(**self._split(body, COMPLETION_ARGS))


def expect_error(fn, status, what, param=None, code=None):
    """fn must raise the openai client's exception class for `status` (BadRequestError for 400, ...),
    naming `param` / `code` when given."""
    cls = ERROR_CLASSES.get(status, openai.APIStatusError)
    try:
        fn()
    except openai.APIStatusError as e:
        check(isinstance(e, cls) and e.status_code == status, "%s: %s HTTP %d (want %s %d): %s"
              % (what, type(e).__name__, e.status_code, cls.__name__, status, e.message))
        check(param is None or e.param == param, "%s: param %r (want %r)" % (what, e.param, param))
        check(code is None or e.code == code, "%s: code %r (want %r)" % (what, e.code, code))
        check(isinstance(e.body, dict) and e.body.get("message"), "%s: error body %r" % (what, e.body))
        return e
    raise AssertionError("%s: succeeded, want %s" % (what, cls.__name__))
