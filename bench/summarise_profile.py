# Summarises a chrome trace written by bench/profile_step: self time per op name (time not spent in
# nested ops of the same thread), top N, as a table; --shapes groups by op name and input shapes.
# Usage: summarise_profile.py TRACE [N] [--shapes]
import collections
import json
import sys


def key_of(e, by_shapes):
    shapes = e.get("args", {}).get("shapes", "")
    return f"{e['name']} {shapes}" if by_shapes and shapes else e["name"]


def self_times(events, by_shapes=False):
    by_thread = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X":
            by_thread[e.get("tid")].append(e)
    totals = collections.Counter()
    counts = collections.Counter()
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in evs:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
                stack.pop()
            if stack:
                totals[key_of(stack[-1], by_shapes)] -= e["dur"]
            totals[key_of(e, by_shapes)] += e["dur"]
            counts[key_of(e, by_shapes)] += 1
            stack.append(e)
    return totals, counts


def main():
    data = json.load(open(sys.argv[1]))
    events = data["traceEvents"] if isinstance(data, dict) else data
    args = [a for a in sys.argv[2:] if a != "--shapes"]
    n = int(args[0]) if args else 25
    totals, counts = self_times(events, "--shapes" in sys.argv)
    grand = sum(totals.values())
    print(f"total self time {grand / 1e6:.2f} s")
    for name, us in totals.most_common(n):
        print(f"{us / 1e6:8.3f} s {100 * us / grand:5.1f}%  {counts[name]:6d}x  {name}")


if __name__ == "__main__":
    main()
