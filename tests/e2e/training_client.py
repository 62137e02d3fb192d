# A TrainingClient like the SDK's, on top of TinkerWire: one seq_id counter per model (the first op
# is seq 1), submissions that return futures so several ops can be in flight before any is awaited
# (pipelining), and chunked forward_backward sent the SDK's way (chunks 2..N concurrently, chunk 1 last).
import threading

import wire_codec as wc


class Future:
    def __init__(self, wire, request_id, request_type, proto=True):
        self.wire, self.request_id, self.request_type, self.proto = wire, request_id, request_type, proto
        self._done, self._value, self._error = False, None, None

    def result(self, max_wait=180.0):
        if not self._done:
            try:
                self._value = self.wire.retrieve(self.request_id, self.request_type, self.proto, max_wait)
            except Exception as e:  # cached like an SDK future
                self._error = e
            self._done = True
        if self._error is not None:
            raise self._error
        return self._value


class ChunkedFuture:
    """The futures of one chunked forward_backward; the result is stitched in datum order."""

    def __init__(self, futures):
        self.futures = futures

    @property
    def request_ids(self):
        return [f.request_id for f in self.futures]

    def result(self, max_wait=180.0):
        return wc.combine_chunks([f.result(max_wait) for f in self.futures])


def split_chunks(items, n):
    size, extra = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        out.append(items[start:end])
        start = end
    return out


class TrainingClient:
    def __init__(self, wire, model_id, base_model=None):
        self.wire, self.model_id, self.base_model = wire, model_id, base_model
        self.seq = 0
        self._lock = threading.Lock()

    @classmethod
    def create(cls, wire, session_id, model_seq_id, base_model, rank=32, **kw):
        rid = wire.create_model(session_id, model_seq_id, base_model, rank, **kw)
        model_id = wire.retrieve(rid, "CreateModel")["model_id"]
        return cls(wire, model_id, base_model)

    def next_seq(self, count=1):
        """Reserves `count` consecutive seq ids; returns the first."""
        with self._lock:
            first = self.seq + 1
            self.seq += count
            return first

    # ------------------------------------------------------------ async submissions

    def forward_backward_async(self, datums, loss_fn="cross_entropy", config=None,
                               forward_only=False, zstd=False, chunks=1):
        kind = "Forward" if forward_only else "ForwardBackward"
        if chunks <= 1:
            rid = self.wire.forward_backward(self.model_id, self.next_seq(), datums, loss_fn, config,
                                             forward_only, zstd)
            return Future(self.wire, rid, kind)
        parts = split_chunks(list(datums), chunks)
        first = self.next_seq(len(parts))
        ids = [None] * len(parts)
        errors = []

        def submit(i):
            try:
                ids[i] = self.wire.forward_backward(self.model_id, first + i, parts[i], loss_fn,
                                                    config, forward_only, zstd)
            except Exception as e:  # reported below, on the calling thread
                errors.append(e)

        threads = [threading.Thread(target=submit, args=(i,)) for i in range(1, len(parts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        submit(0)  # the SDK sends the first chunk last
        if errors:
            raise errors[0]
        return ChunkedFuture([Future(self.wire, rid, kind) for rid in ids])

    def forward_async(self, datums, loss_fn="cross_entropy", config=None, **kw):
        return self.forward_backward_async(datums, loss_fn, config, forward_only=True, **kw)

    def optim_step_async(self, lr=1e-4, **adam):
        rid = self.wire.optim_step(self.model_id, self.next_seq(), lr, **adam)
        return Future(self.wire, rid, "OptimStep")

    def save_state_async(self, name, ttl_seconds=None, overwrite=False):
        rid = self.wire.save_weights(self.model_id, self.next_seq(), name, ttl_seconds, overwrite)
        return Future(self.wire, rid, "SaveWeights")

    def save_weights_for_sampler_async(self, name=None, sampling_session_seq_id=None, ttl_seconds=None):
        rid = self.wire.save_weights_for_sampler(self.model_id, self.next_seq(), name,
                                                 sampling_session_seq_id, ttl_seconds)
        return Future(self.wire, rid, "SaveWeightsForSampler")

    def load_state_async(self, path, optimizer=False):
        rid = self.wire.load_weights(self.model_id, self.next_seq(), path, optimizer)
        return Future(self.wire, rid, "LoadWeights")

    # ------------------------------------------------------------ synchronous helpers

    def forward_backward(self, datums, loss_fn="cross_entropy", config=None, **kw):
        return self.forward_backward_async(datums, loss_fn, config, **kw).result()

    def forward(self, datums, loss_fn="cross_entropy", config=None, **kw):
        return self.forward_async(datums, loss_fn, config, **kw).result()

    def optim_step(self, lr=1e-4, **adam):
        return self.optim_step_async(lr, **adam).result()

    def save_state(self, name, ttl_seconds=None):
        return self.save_state_async(name, ttl_seconds).result()["path"]

    def save_weights_for_sampler(self, name=None, sampling_session_seq_id=None, ttl_seconds=None):
        return self.save_weights_for_sampler_async(name, sampling_session_seq_id, ttl_seconds).result()

    def load_state(self, path, optimizer=False):
        return self.load_state_async(path, optimizer).result()

    def get_info(self):
        return self.wire.get_info(self.model_id)

    def step(self, datums, lr, **adam):
        """forward_backward and optim_step submitted back to back, then both awaited."""
        fb = self.forward_backward_async(datums)
        opt = self.optim_step_async(lr, **adam)
        return fb.result(), opt.result()

    def train(self, datums, lrs, pipelined=False, **adam):
        """One step per learning rate; returns each step's loss:sum. Pipelined: step k+1 is
        submitted before step k is awaited."""
        if not pipelined:
            return [self.step(datums, lr, **adam)[0].metrics["loss:sum"] for lr in lrs]
        pending, losses = [], []
        for lr in lrs:
            pending.append((self.forward_backward_async(datums), self.optim_step_async(lr, **adam)))
            if len(pending) == 2:
                fb, opt = pending.pop(0)
                losses.append(fb.result().metrics["loss:sum"])
                opt.result()
        for fb, opt in pending:
            losses.append(fb.result().metrics["loss:sum"])
            opt.result()
        return losses
