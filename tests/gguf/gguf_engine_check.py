"""Part (e) of the GGUF reference test (gguf_reference.py): tinkerd itself serving the tiny qwen3moe GGUFs that
part (b) wrote (F32 and Q8_0, --dtype fp32), their per-token logprobs through the official tinker SDK's
compute_logprobs against transformers' own GGUF loading of the same files, |diff| <= 1e-4 in fp32."""
import json
import pathlib
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request

import numpy as np

TOLERANCE = 1e-4


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(proc, port, log_path, timeout=180):
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if proc.poll() is not None:
            raise AssertionError(f"(e) tinkerd exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/healthz", timeout=5) as r:
                if json.loads(r.read()) == {"status": "ok"}:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"(e) tinkerd not healthy after {timeout} s:\n{log_path.read_text()[-3000:]}")


def transformers_logprobs(model, ids):
    import torch
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].double()
    logp = torch.log_softmax(logits, dim=-1)
    return np.array([float(logp[i - 1, ids[i]]) for i in range(1, len(ids))])


def engine_logprobs(port, name, ids):
    import tinker
    from tinker import types
    svc = tinker.ServiceClient(base_url=f"http://127.0.0.1:{port}", api_key="tml-gguf-reference")
    sc = svc.create_sampling_client(base_model=name)
    sc = sc.result() if hasattr(tinker, "BackcompatSamplingClientFuture") and isinstance(
        sc, tinker.BackcompatSamplingClientFuture) else sc
    got = sc.compute_logprobs(types.ModelInput.from_ints(ids)).result(timeout=300)
    assert got[0] is None and len(got) == len(ids), f"(e) {name}: compute_logprobs gave {len(got)} values"
    return np.array(got[1:], dtype=np.float64)


def check_engine(tinkerd, work, ids, models, load_transformers, flags=(), tolerance=TOLERANCE, must_differ=0.0):
    """models: {served name: GGUF path}; load_transformers(path) -> transformers' model of that GGUF. flags: more
    server flags; the logprobs must be within `tolerance` of transformers' and, when must_differ > 0, further
    than that from them (the flags changed the numerics)."""
    data_dir = pathlib.Path(tempfile.mkdtemp(prefix="gguf-engine-", dir=work))
    log_path = data_dir / "server.log"
    port = free_port()
    cmd = [str(tinkerd), "--host", "127.0.0.1", "--port", str(port), "--data-dir", str(data_dir), "--dtype", "fp32",
           "--threads", "2", *flags]
    for name, path in models.items():
        cmd += ["--model", f"{name}={path}"]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_healthy(proc, port, log_path)
            for name, path in models.items():
                want = transformers_logprobs(load_transformers(path), ids)
                got = engine_logprobs(port, name, ids)
                err = float(np.abs(got - want).max())
                assert err <= tolerance, f"(e) {name}: tinkerd's logprobs differ from transformers' by {err}"
                assert err > must_differ, f"(e) {name}: {' '.join(flags)} changed nothing (max |diff| {err})"
                print(f"(e) {name} {' '.join(flags)}: tinkerd logprobs vs transformers' GGUF loading, "
                      f"max |diff| {err:.2e}")
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    shutil.rmtree(data_dir, ignore_errors=True)  # kept (with its server.log) when a check failed
