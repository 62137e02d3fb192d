# A SamplingClient like the SDK 0.25's, on top of TinkerWire: create_sampling_session (base model or
# tinker:// sampler path) or the unnamed save_weights_for_sampler snapshot, the per-client sample
# seq_id counter starting at 0 (a pickled copy starts at a huge value), asample bodies exactly as the
# SDK builds them, SampleResponse decoding (protobuf, or legacy JSON), and compute_logprobs.
import itertools
import threading

import numpy as np

from training_client import Future

_SESSION_SEQ = {}
_SESSION_LOCK = threading.Lock()


def next_sampling_seq(session_id):
    """The service client's sampling_session_seq_id counter (shared by create_sampling_session and
    unnamed save_weights_for_sampler calls of one session)."""
    with _SESSION_LOCK:
        it = _SESSION_SEQ.setdefault(session_id, itertools.count())
        return next(it)


def sample_body(sampling_session_id, seq_id, prompt, num_samples=1, max_tokens=None, temperature=1.0,
                top_k=-1, top_p=1.0, seed=None, stop=None, prompt_logprobs=False, topk_prompt_logprobs=0):
    """The JSON the SDK sends to /api/v1/asample: max_tokens/seed/stop omitted when None."""
    params = {"temperature": float(temperature), "top_k": int(top_k), "top_p": float(top_p)}
    if max_tokens is not None:
        params["max_tokens"] = int(max_tokens)
    if seed is not None:
        params["seed"] = int(seed)
    if stop is not None:
        params["stop"] = stop
    body = {"num_samples": num_samples,
            "prompt": {"chunks": [{"tokens": [int(t) for t in prompt], "type": "encoded_text"}]},
            "sampling_params": params, "sampling_session_id": sampling_session_id, "seq_id": seq_id,
            "type": "sample"}
    if prompt_logprobs:
        body["prompt_logprobs"] = True
    body["topk_prompt_logprobs"] = int(topk_prompt_logprobs)
    return body


class SamplingClient:
    def __init__(self, wire, sampling_session_id, first_seq=0):
        self.wire, self.sampling_session_id = wire, sampling_session_id
        self.seq = first_seq
        self._lock = threading.Lock()

    @classmethod
    def create(cls, wire, session_id, base_model=None, model_path=None):
        """service_client.create_sampling_client(model_path=..., base_model=...)."""
        sid = wire.create_sampling_session(session_id, next_sampling_seq(session_id), base_model,
                                           model_path)
        return cls(wire, sid)

    @classmethod
    def snapshot(cls, training_client, session_id):
        """training_client.save_weights_and_get_sampling_client(): an unnamed sampler save."""
        res = training_client.save_weights_for_sampler(
            sampling_session_seq_id=next_sampling_seq(session_id))
        sid = res.get("sampling_session_id")
        if not isinstance(sid, str) or not sid:
            raise AssertionError("unnamed save_weights_for_sampler result %r" % (res,))
        return cls(training_client.wire, sid)

    def unpickled(self, first_seq):
        """A copy of this client as another process sees it: same session, huge seq_ids."""
        return SamplingClient(self.wire, self.sampling_session_id, first_seq)

    def next_seq(self):
        with self._lock:
            s = self.seq
            self.seq += 1
            return s

    def sample_async(self, prompt, num_samples=1, proto=True, **params):
        body = sample_body(self.sampling_session_id, self.next_seq(), prompt, num_samples, **params)
        rid = self.wire.asample(body)
        return Future(self.wire, rid, "Sample", proto)

    def sample(self, prompt, num_samples=1, **params):
        """Returns a wire_codec.SampleResult (sequences with tokens, logprobs, stop_reason)."""
        return self.sample_async(prompt, num_samples, **params).result()

    def sample_seqs(self, prompt, num_samples=1, **params):
        """(tokens, logprobs, stop_reason) per sequence."""
        res = self.sample(prompt, num_samples, **params)
        return [(s["tokens"], s["logprobs"], s["stop_reason"]) for s in res.sequences]

    def compute_logprobs_async(self, prompt):
        return self.sample_async(prompt, 1, max_tokens=1, temperature=1.0, top_k=-1, top_p=1.0,
                                 prompt_logprobs=True)

    def compute_logprobs(self, prompt):
        """One logprob per prompt token, None first (the SDK's compute_logprobs)."""
        res = self.compute_logprobs_async(prompt).result()
        lps = res.prompt_logprobs
        if lps is None or len(lps) != len(prompt):
            raise AssertionError("compute_logprobs(%d tokens) gave %r" % (len(prompt), lps))
        return lps


def lp_array(lps):
    """compute_logprobs output without its leading None, as float64."""
    return np.asarray([np.nan if v is None else v for v in lps[1:]], dtype=np.float64)
