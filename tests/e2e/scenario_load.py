# Load: 1,000 concurrent retrieve_future long-polls (raw asyncio connections in a child process, on
# futures kept pending behind a seq_id gap on two extra models) while a training loop runs 10 steps;
# the loop (5 rounds of 10 steps; polls answered and re-sent every second) may be at most 1.5x
# slower than without them (median step), and every poll must get a valid answer.
# Then reports the round-trip overhead of one forward_backward (submit + poll) on a 1-token batch.
import multiprocessing
import resource
import statistics
import time

import wire_codec as wc
import load_poller
from harness import check, new_client, sft_batch
from tinker_wire import ApiError

POLLS = 1000
STEPS = 10
POLL_TIMEOUT = 1  # every held poll is answered and re-sent each second: 1,000 polls/s of churn
ROUNDS = 5


def raise_nofile(want=8192):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def pending_futures(wire, count):
    """count futures that stay pending: forward ops with seq ids 2.. on models whose seq 1 never comes."""
    ids = []
    tiny = [wc.Datum([5], target_tokens=[6], weights=[1.0])]
    for m in range(2):
        tc = new_client(wire, rank=4)
        for seq in range(2, 2 + count // 2):
            try:
                ids.append(wire.forward_backward(tc.model_id, seq, tiny, forward_only=True))
            except ApiError as e:  # the server caps early arrivals: poll the ones we have
                print("  gapped submission seq %d refused (HTTP %d): reusing futures" % (seq, e.status))
                break
    check(ids, "no pending futures could be created")
    return [ids[i % len(ids)] for i in range(count)], len(set(ids))


def timed_steps(tc, batch, n, rounds=1):
    """Per-step wall times of `rounds` loops of n steps (fb + optim, both awaited)."""
    times = []
    for _ in range(rounds * n):
        t0 = time.monotonic()
        tc.step(batch, 1e-3)
        times.append(time.monotonic() - t0)
    return times


def with_polls(srv, ids, tc, batch):
    ctx = multiprocessing.get_context("fork")
    stop, ready, out = ctx.Event(), ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=load_poller.main, args=("127.0.0.1", srv.port, "tml-test", ids, stop, ready, out))
    proc.start()
    try:
        check(ready.wait(60), "the %d polls were not all sent within 60 s" % len(ids))
        time.sleep(POLL_TIMEOUT + 0.2)  # into the steady state of answer / re-poll
        times = timed_steps(tc, batch, STEPS, ROUNDS)
        stop.set()
        stats = out.get(timeout=POLL_TIMEOUT * 6 + 30)
    finally:
        stop.set()
        proc.join(10)
        if proc.is_alive():
            proc.kill()
    check("crash" not in stats, "poller crashed: %s" % stats.get("crash"))
    return times, stats


def round_trip_ms(tc, n=50, forward_only=False):
    """Median and p90 of one 1-token forward_backward, submit + poll, and the median submit alone."""
    one = [wc.Datum([5], target_tokens=[6], weights=[1.0])]
    tc.forward_backward_async(one, forward_only=forward_only).result()  # warm-up
    total, submit = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        fut = tc.forward_backward_async(one, forward_only=forward_only)
        t1 = time.perf_counter()
        fut.result()
        t2 = time.perf_counter()
        total.append((t2 - t0) * 1000)
        submit.append((t1 - t0) * 1000)
    total.sort()
    return statistics.median(total), total[int(0.9 * n)], statistics.median(submit)


def run(ctx):
    nofile = raise_nofile()
    check(nofile >= POLLS + 200, "RLIMIT_NOFILE is only %d" % nofile)
    srv = ctx.start_server(extra=["--poll-timeout-seconds", str(POLL_TIMEOUT)])
    wire = srv.wire()
    wire.client_config()
    batch = sft_batch(seed=6)
    tc = new_client(wire, rank=8)
    timed_steps(tc, batch, 2)  # warm-up
    base = timed_steps(tc, batch, STEPS, ROUNDS)
    ids, distinct = pending_futures(wire, POLLS)
    loaded, stats = with_polls(srv, ids, tc, batch)
    base += timed_steps(tc, batch, STEPS, ROUNDS)  # baseline before and after: cancels drift
    b, l = statistics.median(base), statistics.median(loaded)
    ctx.note("step median %.1f ms without polls, %.1f ms with %d polls (%d vs %d steps)"
             % (b * 1000, l * 1000, POLLS, len(base), len(loaded)))
    ctx.note("poll answers: %d try_again, %d results, %d invalid; longest hold %.1f s; %d distinct futures"
             % (stats["try_again"], stats["result"], stats["invalid"], stats["max_hold"], distinct))
    check(stats["invalid"] == 0, "invalid poll answers: %s" % stats["examples"])
    check(stats["try_again"] + stats["result"] >= POLLS, "only %d poll answers for %d polls"
          % (stats["try_again"] + stats["result"], POLLS))
    check(stats["max_hold"] <= POLL_TIMEOUT + 5, "a poll was held %.1f s" % stats["max_hold"])
    check(stats["try_again"] >= 2 * POLLS, "polls were not re-sent during the loop (%d answers)"
          % stats["try_again"])
    check(l <= 1.5 * b, "training step %.1f ms with polls vs %.1f ms without (> 1.5x)" % (l * 1000, b * 1000))
    med, p90, sub = round_trip_ms(tc)
    print("ROUND_TRIP forward_backward 1-token submit+poll: median %.2f ms, p90 %.2f ms "
          "(submit alone %.2f ms)" % (med, p90, sub))
    fmed, fp90, _ = round_trip_ms(tc, forward_only=True)
    print("ROUND_TRIP forward (forward_only) 1-token submit+poll: median %.2f ms, p90 %.2f ms" % (fmed, fp90))
    return "step %.1f -> %.1f ms under %d polls; round trip %.2f ms (p90 %.2f, submit %.2f)" % (
        b * 1000, l * 1000, POLLS, med, p90, sub)
