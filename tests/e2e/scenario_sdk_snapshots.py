# Unnamed sampler snapshots (save_weights_and_get_sampling_client) through the official SDK: 12 of one run,
# a training step before each; the FIRST then samples the same seeded tokens and logprobs as right after
# it was made (past the in-memory cache and the --max-sampler-adapters LRU, so read back from
# DATA_DIR/snapshots); after a kill -9 and restart on the same data dir and port (the SDK's clients keep
# working) old snapshots sample the same again and unrecorded directories (crash litter) are gone; then a server on a new port (the SDK's session gets no
# more heartbeats) with a 1 s session timeout and a 2 s --snapshot-ttl-seconds deletes their files and
# the sampler answers 404. A server with --snapshot-disk-mib 1 refuses the snapshot that does not fit
# with an error naming the flag, while named sampler weights and the earlier snapshots still work.
import os
import time

import numpy as np

import sdk_common as sdk
from harness import CheckFailed, check
from tinker_wire import ApiError

N = 12
P = [5, 6, 7, 8]


def sampler_id(sc):
    return getattr(sc, "_sampling_session_id", None) or getattr(sc, "sampling_session_id")


def seeded(sc):
    """8 tokens at T=1 with a fixed seed, and their logprobs."""
    s = sc.sample(sdk.prompt(P), 1, sdk.params(max_tokens=8, temperature=1.0, seed=7)).result().sequences[0]
    return list(s.tokens), np.asarray(s.logprobs, dtype=np.float64)


def snapshot_dirs(srv):
    root = os.path.join(srv.data_dir, "snapshots")
    return sorted(os.listdir(root)) if os.path.isdir(root) else []


def make_snapshots(svc, n):
    """n snapshots of one run, one SFT step before each; each sampled right after it was made."""
    tc = sdk.resolved(sdk.new_training_client(svc, rank=8, seed=0))
    batch = sdk.sft_batch(0)
    clients, made = [], []
    for _ in range(n):
        sdk.step(tc, batch, 2e-2)
        sc = sdk.resolved(tc.save_weights_and_get_sampling_client())
        clients.append(sc)
        made.append(seeded(sc))
    return tc, clients, made


def same_as_made(clients, made, indices, when):
    for i in indices:
        tokens, lps = seeded(clients[i])
        check(tokens == made[i][0], "%s: snapshot %d samples %r, made %r" % (when, i, tokens, made[i][0]))
        check(np.max(np.abs(lps - made[i][1])) <= 1e-5, "%s: snapshot %d logprobs %r vs %r"
              % (when, i, lps, made[i][1]))


def first_after_twelve(srv, clients, made):
    same_as_made(clients, made, [0, 1, 5], "after %d snapshots" % N)
    check(np.max(np.abs(made[0][1] - made[-1][1])) > 1e-3 or made[0][0] != made[-1][0],
          "the first and the last snapshot sample alike: the steps changed nothing")
    ids = [sampler_id(sc) for sc in clients]
    check(len(set(ids)) == N, "sampler ids %r" % ids)
    on_disk = snapshot_dirs(srv)
    check(all(i in on_disk for i in ids), "snapshot dirs %r, samplers %r" % (on_disk, ids))
    size = sum(os.path.getsize(os.path.join(srv.data_dir, "snapshots", ids[0], f))
               for f in os.listdir(os.path.join(srv.data_dir, "snapshots", ids[0])))
    return size


def after_restart(srv, clients, made):
    srv.kill9()  # every completed snapshot is already on disk
    # What a crash while writing leaves: a half-written temp dir, files whose row was never inserted.
    litter = [sampler_id(clients[0]) + ".tmp-dead", "sess-gone:sample:3"]
    for name in litter:
        os.makedirs(os.path.join(srv.data_dir, "snapshots", name, "sub"))
    srv.start()
    same_as_made(clients, made, [0, 3, N - 1], "after a restart")
    left = [name for name in litter if name in snapshot_dirs(srv)]
    check(not left, "unrecorded snapshot dirs kept at start-up: %r" % left)
    check(len(snapshot_dirs(srv)) == N, "snapshot dirs after the restart: %r" % snapshot_dirs(srv))


def expire(ctx, srv, clients):
    ids = [sampler_id(sc) for sc in clients]
    srv.stop()
    late = ctx.start_server(extra=["--session-timeout-seconds", "1", "--snapshot-ttl-seconds", "2"],
                            data_dir=srv.data_dir, name="tinkerd-expiry")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(i in snapshot_dirs(late) for i in ids):
        time.sleep(0.5)
    left = [i for i in ids if i in snapshot_dirs(late)]
    check(not left, "snapshot dirs still there 30 s after the session ended: %r" % left)
    w = late.wire()
    for i in (ids[0], ids[-1]):
        for what, fn in (("GET samplers", lambda: w.get_sampler(i)),
                         ("asample", lambda: w.asample({"sampling_session_id": i, "seq_id": 0}))):
            try:
                fn()
            except ApiError as e:
                check(e.status == 404, "%s %s after expiry: HTTP %d" % (what, i, e.status))
                continue
            raise CheckFailed("%s %s after expiry succeeded" % (what, i))


def budget(ctx):
    srv = ctx.start_server(extra=["--snapshot-disk-mib", "1"], name="tinkerd-budget")
    svc = sdk.service(srv)
    tc = sdk.resolved(sdk.new_training_client(svc, rank=8, seed=0))
    kept = []
    for _ in range(200):
        try:
            sc = sdk.resolved(tc.save_weights_and_get_sampling_client())
        except sdk.USER_ERRORS as e:
            check("--snapshot-disk-mib" in str(e), "the refusal does not name --snapshot-disk-mib: %s" % e)
            break
        kept.append((sc, seeded(sc)))
    else:
        raise CheckFailed("200 snapshots fit in --snapshot-disk-mib 1")
    check(len(kept) >= 1, "not even one snapshot fit in 1 MiB")
    total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(os.path.join(srv.data_dir, "snapshots"))
                for f in fs)
    check(total <= 1 << 20, "%d bytes of snapshots on disk with --snapshot-disk-mib 1" % total)
    same_as_made([sc for sc, _ in kept], [m for _, m in kept], [0], "with the budget full")
    path = tc.save_weights_for_sampler("named").result().path
    check(path.endswith("/sampler_weights/named"), "named sampler weights with the budget full: %s" % path)
    return "%d snapshots fit (%d bytes), the next refused" % (len(kept), total)


def run(ctx):
    srv = ctx.start_server()
    svc = sdk.service(srv)
    _, clients, made = make_snapshots(svc, N)
    size = ctx.case("%d snapshots: the first samples as when it was made (from disk)" % N, first_after_twelve,
                    srv, clients, made)
    ctx.case("after kill -9 + restart: old snapshots sample the same, crash litter removed", after_restart, srv, clients, made)
    ctx.case("session ended + --snapshot-ttl-seconds: files deleted, sampler 404", expire, ctx, srv, clients)
    full = ctx.case("--snapshot-disk-mib 1: the snapshot that does not fit is refused naming the flag", budget, ctx)
    ctx.finish()
    return "%d snapshots of %s bytes each; %s" % (N, size, full)
