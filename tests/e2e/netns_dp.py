#!/usr/bin/python3
# Issue 15 §4: a data-parallel group over two "hosts", two network namespaces this test makes itself (a
# veth pair, 10.x addresses; traffic only there): rank 0 (`--dist-init tcp://10.a.b.1:PORT --rank 0
# --world-size 2`, HTTP on its own loopback) in one, rank 1 in the other. The official SDK, run inside
# rank 0's namespace, trains a run for a few steps; rank 1 is killed between steps (rank 0's keepalive
# finds it gone and trains alone), restarted by hand, the group re-forms (generation >= 1), and the run
# trains on; every loss equals a `--dp 1` server's. Last, rank 0's link goes down: rank 1 hears no
# keepalive, finds rank 0's store unreachable and exits with "rank 0 is gone". The namespaces and links
# are always deleted. Needs root and `ip`; without them it FAILS (never skips).
# Usage: .venv/bin/python tests/e2e/netns_dp.py --build <build dir>
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

STEPS_BEFORE, STEPS_AFTER = 3, 3
LR = 2e-3
TAG = "%d" % (os.getpid() % 100000)
NS = ["tkdp0-" + TAG, "tkdp1-" + TAG]
VETH = ["tkv0-" + TAG, "tkv1-" + TAG]
SUBNET = "10.213.%d" % (os.getpid() % 250 + 1)
ADDR = [SUBNET + ".1", SUBNET + ".2"]
HTTP_PORT, DIST_PORT = 18080, 29617
DIST_FLAGS = ["--world-size", "2", "--dist-timeout-seconds", "8", "--dist-keepalive-seconds", "1"]


class Failed(Exception):
    pass


def sh(*args, check=True):
    r = subprocess.run(list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if check and r.returncode != 0:
        raise Failed("`%s` failed (%d): %s" % (" ".join(args), r.returncode, r.stdout.strip()))
    return r


def make_namespaces():
    if os.geteuid() != 0:
        raise Failed("needs root to create network namespaces (ip netns add); run as root")
    try:
        sh("ip", "netns", "add", NS[0])
    except (OSError, Failed) as e:
        raise Failed("cannot create a network namespace (needs root and iproute2's `ip`): %s" % e)
    sh("ip", "netns", "add", NS[1])
    sh("ip", "link", "add", VETH[0], "type", "veth", "peer", "name", VETH[1])
    for k in range(2):
        sh("ip", "link", "set", VETH[k], "netns", NS[k])
        sh("ip", "-n", NS[k], "addr", "add", ADDR[k] + "/24", "dev", VETH[k])
        sh("ip", "-n", NS[k], "link", "set", VETH[k], "up")
        sh("ip", "-n", NS[k], "link", "set", "lo", "up")


def delete_namespaces():
    for k in range(2):
        sh("ip", "netns", "del", NS[k], check=False)  # takes its end of the veth pair (and the pair) with it
    sh("ip", "link", "del", VETH[0], check=False)


class Rank:
    """One tinkerd process of the group inside its namespace, its output in a log file."""

    def __init__(self, build, rank, data_dir):
        self.rank, self.data_dir = rank, data_dir
        self.cmd = ["ip", "netns", "exec", NS[rank], os.path.join(build, "tinkerd"), "--data-dir", data_dir,
                    "--dist-init", "tcp://%s:%d" % (ADDR[0], DIST_PORT), "--rank", str(rank)] + DIST_FLAGS
        if rank == 0:
            self.cmd += ["--host", "127.0.0.1", "--port", str(HTTP_PORT)]
        fd, self.log_path = tempfile.mkstemp(prefix="tinkerd-netns-rank%d-" % rank, suffix=".log")
        os.close(fd)
        self.proc = None

    def start(self):
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        return self

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def wait_log(self, text, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.log():
                return
            time.sleep(0.2)
        raise Failed("%s: no %r in rank %d's log after %.0f s" % (what, text, self.rank, timeout))

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def client_main(port, phases):
    """In rank 0's namespace (or against the --dp 1 server): one run, `phases` groups of steps; after each
    group but the last prints its losses and waits for a line on stdin. Prints JSON lines."""
    import sdk_common as sdk
    deadline = time.monotonic() + 60
    svc = None
    while svc is None:
        try:
            svc = sdk.service(type("Srv", (), {"port": port}))
            tc = sdk.resolved(sdk.new_training_client(svc, rank=8, seed=3))
        except Exception:  # noqa: BLE001 - the server is still starting: retry until the deadline
            if time.monotonic() > deadline:
                raise
            svc = None
            time.sleep(0.5)
    batch = sdk.sft_batch(5)
    for k, n in enumerate(phases):
        losses = sdk.train(tc, batch, [LR] * n)
        print(json.dumps({"losses": losses}), flush=True)
        if k + 1 < len(phases):
            sys.stdin.readline()


def start_client(port, netns=None):
    cmd = ([] if netns is None else ["ip", "netns", "exec", netns]) + [
        sys.executable, os.path.abspath(__file__), "--client", str(port), str(STEPS_BEFORE), str(STEPS_AFTER)]
    return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def read_losses(client, what):
    line = client.stdout.readline()
    if not line:
        raise Failed("%s: the SDK client ended early (exit %s)" % (what, client.wait()))
    return json.loads(line)["losses"]


def reference_losses(build):
    """The same steps on a --dp 1 server on this host's loopback."""
    from harness import Context
    ctx = Context(build)
    try:
        srv = ctx.start_server(name="tinkerd-netns-dp1")
        client = start_client(srv.port)
        losses = read_losses(client, "--dp 1")
        client.stdin.write("\n")
        client.stdin.flush()
        losses += read_losses(client, "--dp 1")
        client.wait(timeout=30)
        return losses
    finally:
        ctx.cleanup()


def check_close(got, want, what):
    if len(got) != len(want) or any(abs(a - b) > 1e-5 * abs(b) for a, b in zip(got, want)):
        raise Failed("%s: losses %s vs --dp 1 %s" % (what, got, want))


def run_group(build, data_dir):
    """Both phases on the two-namespace group; returns (losses, generation line)."""
    ranks = [Rank(build, 0, data_dir + "/rank0").start(), Rank(build, 1, data_dir + "/rank1").start()]
    client = None
    try:
        ranks[1].wait_log("rank 1 of 2 joined", 60, "start-up")
        client = start_client(HTTP_PORT, NS[0])
        losses = read_losses(client, "before the kill")
        ranks[1].stop(signal.SIGKILL)
        ranks[0].wait_log("training goes on in rank 0 alone", 30, "rank 1 killed")
        restarted = Rank(build, 1, data_dir + "/rank1")
        ranks[1] = restarted.start()
        ranks[0].wait_log("data-parallel group re-formed: 2 ranks (generation", 60, "rank 1 restarted")
        client.stdin.write("\n")
        client.stdin.flush()
        losses += read_losses(client, "after re-forming")
        client.wait(timeout=30)
        reformed = [l for l in ranks[0].log().splitlines() if "re-formed" in l][-1]
        sh("ip", "-n", NS[0], "link", "set", VETH[0], "down")  # rank 0's machine vanishes for rank 1
        try:
            ranks[1].proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            raise Failed("rank 1 still running 60 s after rank 0's link went down")
        if "rank 0 is gone" not in ranks[1].log():
            raise Failed("rank 1 exited without saying rank 0 is gone:\n" + ranks[1].log()[-2000:])
        return losses, reformed
    except Failed:
        for r in ranks:
            print("----- rank %d log tail -----\n%s" % (r.rank, "\n".join(r.log().splitlines()[-40:])))
        raise
    finally:
        if client and client.poll() is None:
            client.kill()
        for r in ranks:
            r.stop()
            os.unlink(r.log_path)


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--client":
        return client_main(int(sys.argv[2]), [int(sys.argv[3]), int(sys.argv[4])])
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--build", required=True)
    build = os.path.abspath(ap.parse_args().build)
    t0 = time.monotonic()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: sys.exit("FAIL e2e_dp_netns: interrupted"))
    data_dir = tempfile.mkdtemp(prefix="tinkerd-netns-")
    try:
        make_namespaces()
        want = reference_losses(build)
        got, reformed = run_group(build, data_dir)
        check_close(got, want, "two namespaces, a rank killed and restarted")
        print("PASS e2e_dp_netns (%.1f s): %d steps equal --dp 1 (%s); %s" % (
            time.monotonic() - t0, len(got), ", ".join("%.5f" % x for x in got), reformed.strip()[-60:]))
        return 0
    except Failed as e:
        print("FAIL e2e_dp_netns (%.1f s): %s" % (time.monotonic() - t0, e), flush=True)
        return 1
    finally:
        delete_namespaces()
        subprocess.run(["rm", "-rf", data_dir])


if __name__ == "__main__":
    sys.exit(main())
