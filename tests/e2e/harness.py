# Test harness: starts <build>/tinkerd on a free port with a temporary data dir, waits for healthz,
# captures its log (printing the tail on failure), stops it (SIGTERM, then SIGKILL) and can kill -9
# and restart it on the same data dir. Also the scenario context, check helpers and test data.
# TINKERD_E2E_SERVER_ARGS (e.g. "--device cuda") is appended to every server's flags; TINKERD_SHARED_DIR
# names the shared test data when it is not beside the checkout (scripts/gpu-check.sh sets both).
import os
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import traceback

import numpy as np

import wire_codec as wc
from tinker_wire import ApiError, RequestFailed, TinkerWire
from training_client import TrainingClient

BUILTIN_MODEL = "tinkerd/builtin-tiny"
TOKEN_LIMIT = 200  # token ids used with the built-in model (its vocab is larger)


class CheckFailed(Exception):
    pass


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def shared_dir():
    for d in (os.environ.get("TINKERD_SHARED_DIR"), os.path.join(wc.source_dir(), "..", "shared"), "/work/shared"):
        if d and os.path.isdir(d):
            return os.path.abspath(d)
    return None


def shared_path(*parts):
    """<source dir>/../shared/<parts>, which must exist: a missing model or tokenizer is a failure of
    the scenario that needs it, never a skip."""
    shared = shared_dir()
    path = os.path.join(shared or os.path.join(wc.source_dir(), "..", "shared"), *parts)
    if not os.path.exists(path):
        raise CheckFailed("required test data missing: %s" % os.path.abspath(path))
    return path


def stories_dir():
    """stories260K (a real tiny Llama with its SentencePiece tokenizer) as a Hugging Face folder."""
    d = shared_path("models", "stories260K", "hf-f32")
    shared_path("models", "stories260K", "hf-f32", "config.json")
    return d


class Server:
    def __init__(self, build_dir, extra=(), data_dir=None, name="tinkerd"):
        self.binary = os.path.join(build_dir, "tinkerd")
        self.extra = list(extra)
        self.own_data_dir = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="tinkerd-e2e-data-")
        fd, self.log_path = tempfile.mkstemp(prefix=name + "-", suffix=".log")
        os.close(fd)
        self.name, self.proc, self.port, self._log = name, None, None, None
        self.starts = 0

    def start(self, timeout=120.0):
        if not os.access(self.binary, os.X_OK):
            raise CheckFailed("no server binary at %s" % self.binary)
        if self.port is None:  # a restart keeps the port, so clients keep their base URL
            self.port = free_port()
        self.starts += 1
        self._log = open(self.log_path, "ab")
        self._log.write(("\n===== start %d: port %d =====\n" % (self.starts, self.port)).encode())
        self._log.flush()
        cmd = [self.binary, "--host", "127.0.0.1", "--port", str(self.port),
               "--data-dir", self.data_dir] + self.extra + shlex.split(os.environ.get("TINKERD_E2E_SERVER_ARGS", ""))
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout):
        deadline = time.monotonic() + timeout
        w = TinkerWire("127.0.0.1", self.port, timeout=5)
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise CheckFailed("%s exited with %d during startup" % (self.name, self.proc.returncode))
            try:
                if w.healthz() == {"status": "ok"}:
                    w.close()
                    return
            except (OSError, ApiError, ValueError):
                w.close()
            time.sleep(0.2)
        raise CheckFailed("%s not healthy after %.0f s" % (self.name, timeout))

    def wire(self, api_key="tml-test", timeout=60.0):
        return TinkerWire("127.0.0.1", self.port, api_key, timeout)

    def kill9(self):
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self._close_log()

    def restart(self, timeout=120.0):
        self.kill9()
        return self.start(timeout)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._close_log()

    def _close_log(self):
        if self._log:
            self._log.close()
            self._log = None

    def cleanup(self):
        """Stops the server; removes its data dir and log unless TINKERD_E2E_KEEP is set."""
        self.stop()
        if os.environ.get("TINKERD_E2E_KEEP"):
            print("  kept %s: data %s, log %s" % (self.name, self.data_dir, self.log_path))
            return
        if self.own_data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        try:
            os.unlink(self.log_path)
        except OSError:
            pass

    def child_pids(self):
        """The server's child processes (the followers `--dp` started)."""
        pids = []  # every thread's: --dp restarts a follower from its supervisor thread
        for task in sorted(os.listdir("/proc/%d/task" % self.proc.pid)):
            try:
                with open("/proc/%d/task/%s/children" % (self.proc.pid, task)) as f:
                    pids += [int(p) for p in f.read().split()]
            except OSError:
                pass  # a thread that ended meanwhile
        return pids

    def tail(self, lines=60):
        try:
            with open(self.log_path, "rb") as f:
                data = f.read().decode(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(data[-lines:])


class Context:
    """What a scenario gets: the build dir, servers it starts (cleaned up afterwards), notes."""

    def __init__(self, build_dir):
        self.build_dir = build_dir
        self.servers = []
        self.notes = []
        self.failures = []
        self.known = {}  # case name -> the server bug that makes it fail (see case())
        self.known_hits = []
        self.scratch = []

    def start_server(self, extra=(), name=None, data_dir=None):
        s = Server(self.build_dir, extra, data_dir, name or "tinkerd-%d" % len(self.servers))
        self.servers.append(s)
        return s.start()

    def note(self, msg):
        self.notes.append(msg)
        print("  " + msg, flush=True)

    def case(self, name, fn, *args, **kw):
        """Runs one independent check; a failure is recorded (and reported by finish()) so the
        scenario's other cases still run. Returns fn's value, or None when it failed. A case named in
        self.known (name -> server bug) that fails is a loud KNOWN FAILURE, not a scenario failure."""
        t0 = time.monotonic()
        try:
            value = fn(*args, **kw)
        except Exception as e:  # noqa: BLE001 - every failure of a case is recorded the same way
            what = "%s: %s" % (type(e).__name__, e)
            if name in self.known:
                self.known_hits.append(name)
                print("  KNOWN FAILURE %s: %s\n      (server bug: %s)" % (name, what, self.known[name]),
                      flush=True)
                return None
            if not isinstance(e, (CheckFailed, AssertionError)):
                traceback.print_exc()
            self.failures.append("%s: %s" % (name, what))
            print("  FAIL %s: %s" % (name, what), flush=True)
            return None
        if name in self.known:
            print("  KNOWN FAILURE NOW PASSES %s: remove it from the known failures (%s)"
                  % (name, self.known[name]), flush=True)
        print("  ok   %s (%.2f s)" % (name, time.monotonic() - t0), flush=True)
        return value

    def finish(self):
        if self.failures:
            raise CheckFailed("%d case(s) failed:\n    " % len(self.failures) + "\n    ".join(self.failures))

    def scratch_dir(self):
        """A temporary directory for the scenario's own files (model dirs), removed by cleanup()."""
        path = tempfile.mkdtemp(prefix="tinkerd-e2e-scratch-")
        self.scratch.append(path)
        return path

    def cleanup(self):
        for s in self.servers:
            s.cleanup()
        for path in self.scratch:
            shutil.rmtree(path, ignore_errors=True)


# ---------------------------------------------------------------- checks

def check(cond, msg):
    if not cond:
        raise CheckFailed(msg)


def rel_close(a, b, rel):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and bool(np.all(np.abs(a - b) <= rel * np.maximum(np.abs(b), 1e-12) + 1e-12))


def check_close(a, b, rel, msg):
    if not rel_close(a, b, rel):
        raise CheckFailed("%s: %r vs %r (rel %g)" % (msg, _short(a), _short(b), rel))


def check_abs(a, b, tol, msg):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or np.max(np.abs(a - b), initial=0.0) > tol:
        raise CheckFailed("%s: %r vs %r (abs %g)" % (msg, _short(a), _short(b), tol))


def _short(x):
    x = np.asarray(x)
    return x.tolist() if x.size <= 8 else "%s...(%d values)" % (x.reshape(-1)[:6].tolist(), x.size)


def expect_status(fn, statuses, msg):
    """fn must raise ApiError with one of `statuses` and a non-empty body; returns the error."""
    try:
        fn()
    except ApiError as e:
        check(e.status in statuses, "%s: HTTP %d (expected %s): %s" % (msg, e.status, statuses, e.body[:300]))
        check(len(e.body) > 0, "%s: HTTP %d with an empty body" % (msg, e.status))
        return e
    raise CheckFailed("%s: succeeded, expected HTTP %s" % (msg, statuses))


def expect_user_error(fn, msg, statuses=(400, 404, 422)):
    """fn must fail cleanly: a 4xx at submission or a failed future with category user."""
    try:
        fn()
    except RequestFailed as e:
        check(e.category == "user", "%s: future failed with category %r (want user): %s"
              % (msg, e.category, e.message))
        return e
    except ApiError as e:
        check(e.status in statuses, "%s: HTTP %d (expected %s): %s" % (msg, e.status, statuses, e.body[:300]))
        check(len(e.body) > 0, "%s: HTTP %d with an empty body" % (msg, e.status))
        return e
    raise CheckFailed("%s: succeeded, expected a user error" % msg)


def new_client(wire, base_model=BUILTIN_MODEL, rank=8, session_id=None, model_seq_id=0, **kw):
    """create_session (if none given) + create_model; returns the TrainingClient."""
    sid = session_id or wire.create_session()
    return TrainingClient.create(wire, sid, model_seq_id, base_model, rank, **kw)


# ---------------------------------------------------------------- data

def memorisation_sequences(seed, n=4, length=16, prompt=6, vocab=TOKEN_LIMIT):
    """n (tokens, targets, weights) memorisation sequences: weight 0 on the first `prompt` targets, 1
    on the answer. The wire datums (sft_batch) and the SDK's (sdk_common.sft_batch) share them."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        seq = rng.integers(1, vocab, size=length + 1)
        w = np.ones(length, dtype=np.float32)
        w[:prompt] = 0.0
        out.append((seq[:-1], seq[1:], w))
    return out


def sft_batch(seed, **kw):
    return [wc.Datum(t, target_tokens=y, weights=w) for t, y, w in memorisation_sequences(seed, **kw)]


def weighted_nll(result, datums):
    """-sum(logprobs * weights) over the batch, from the returned per-datum logprobs."""
    return float(-sum(np.sum(result.logprobs(i).astype(np.float64) * d.inputs["weights"])
                      for i, d in enumerate(datums)))


def mean_nll(result, datums):
    return weighted_nll(result, datums) / float(sum(d.inputs["weights"].sum() for d in datums))


def all_logprobs(result):
    return np.concatenate([o["logprobs"].reshape(-1) for o in result.outputs])
