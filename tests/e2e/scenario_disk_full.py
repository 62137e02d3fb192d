# A full disk (a 24 MiB tmpfs the test mounts as the data dir; needs root, as CI has): with the disk
# filled to the last byte, training keeps going (its SQLite writes use the released --disk-reserve-mib),
# a checkpoint write fails with a message that shows no server path, deleting a checkpoint works and
# frees space, a restart on the full disk comes up (and says so in its log) and removes an interrupted
# `.tmp-*` checkpoint directory, and once space is back saves work and the reserve is re-created.
import os
import subprocess
import tempfile
import time

from harness import check, new_client, sft_batch
from tinker_wire import ApiError, RequestFailed

LR = 1e-2
RESERVE = os.path.join("data", ".disk-reserve")


def fill(path):
    """Writes zeros to `path` until the filesystem refuses; returns the bytes written."""
    written = 0
    chunk = b"\0" * (1 << 16)
    with open(path, "wb", buffering=0) as f:
        for size in (1 << 16, 4096, 512, 1):
            while True:
                try:
                    written += f.write(chunk[:size])
                except OSError:
                    break
    return written


def expect_save_fails(tc, name, mount):
    try:
        tc.save_state(name)
    except (RequestFailed, ApiError) as e:
        text = getattr(e, "message", None) or getattr(e, "body", "")
        check(mount not in str(text), "the error shows the server's path: %s" % text)
        return str(text)
    raise AssertionError("save_state on a full disk succeeded")


def run(ctx):
    mount = tempfile.mkdtemp(prefix="tinkerd-full-")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", mount], capture_output=True, text=True)
    check(r.returncode == 0, "cannot mount a tmpfs for the full-disk test (needs root): %s" % r.stderr.strip())
    try:
        return full_disk(ctx, mount)
    finally:
        for srv in ctx.servers:
            srv.stop()
        subprocess.run(["umount", "-l", mount], check=False)
        os.rmdir(mount)


def full_disk(ctx, mount):
    srv = ctx.start_server(extra=["--disk-reserve-mib", "2"], data_dir=os.path.join(mount, "data"))
    wire = srv.wire()
    batch = sft_batch(seed=3)
    tc = new_client(wire, rank=8, seed=0)
    tc.train(batch, [LR])
    first = tc.save_state("before-full")
    check(os.path.exists(os.path.join(mount, RESERVE)), "no disk reserve file at start")
    filler = os.path.join(mount, "filler")
    filled = fill(filler)

    losses = tc.train(batch, [LR] * 2)  # futures rows: SQLite writes on the full disk
    check(all(l == l for l in losses), "training on a full disk: %r" % losses)
    check(not os.path.exists(os.path.join(mount, RESERVE)), "the reserve was not released on SQLITE_FULL")
    fill(filler + "b")  # what the released reserve left free: the disk is full again
    tc.train(batch, [LR])  # SQLite still writes: its pages were allocated while the reserve was free
    message = expect_save_fails(tc, "on-full", mount)
    names = [c["checkpoint_id"] for c in wire.list_checkpoints(tc.model_id)["checkpoints"]]
    check(names == ["weights/before-full"], "checkpoints listed on a full disk: %r" % names)
    wire.delete_checkpoint(first)
    names = [c["checkpoint_id"] for c in wire.list_checkpoints(tc.model_id)["checkpoints"]]
    check(names == [], "checkpoint still listed after DELETE on a full disk: %r" % names)

    srv.kill9()
    fill(filler + "2")  # the bytes the deleted checkpoint freed
    interrupted = os.path.join(mount, "data", "runs", tc.model_id, "weights", "x.tmp-deadbeef")
    os.makedirs(interrupted, exist_ok=True)
    t0 = time.monotonic()
    srv.start()
    with open(srv.log_path, "rb") as f:
        log = f.read().decode(errors="replace")
    check("disk almost full" in log, "no full-disk warning in the log at start")
    check(not os.path.exists(interrupted), "the interrupted .tmp- checkpoint dir survived the restart")
    wire.client_config()
    runs = [r["training_run_id"] for r in wire.list_training_runs(limit=10)["training_runs"]]
    check(tc.model_id in runs, "runs listed after a start on a full disk: %r" % runs)

    for extra in ("", "b", "2"):
        os.unlink(filler + extra)
    deadline = time.monotonic() + 10
    while not os.path.exists(os.path.join(mount, RESERVE)) and time.monotonic() < deadline:
        time.sleep(0.2)
    check(os.path.exists(os.path.join(mount, RESERVE)), "the reserve was not re-created once space came back")
    resumed = new_client(wire, rank=8, seed=0)
    resumed.train(batch, [LR])
    resumed.save_state("after")
    return "filled %.1f MiB; trained on the full disk; save refused (%s); delete ok; restart on a full disk " \
           "in %.1f s; .tmp- dir removed; reserve back" % (filled / 2 ** 20, message[:80], time.monotonic() - t0)
