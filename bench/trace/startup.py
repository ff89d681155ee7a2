#!/usr/bin/env python3
"""`trace -q -- /bin/true` against `strace -f` and `/bin/true` alone, at set spacings from
the previous trace (#44 item 3).

A trace's start-up can wait on what an earlier trace left behind: its hand-off child
(fdaudit/src/engine/ebpf/fentry.rs, `hand_bpf_fds_to_a_child`) keeps the syscall trace
events registered for a while after fdaudit exits, and when the last of them unregisters
the kernel holds `event_mutex`, which every perf_event_open of a trace event takes
(docs/performance.md). So each timed trace here starts a set time (a spacing) after the
previous trace ended, and every round runs every spacing, in a rotated order, with strace
and `/bin/true` timed in the same round just before each trace (they load no eBPF).

Printed: for each spacing, the median wall time of each command with its middle half
(first to third quartile) and its minimum, and whether trace's median is at most strace's;
then the same for `trace -v`'s split of the start-up, from one `-v` run per spacing and
round (its own rounds, interleaved the same way).

Usage (as root, under the lock the other eBPF users take):
  flock -o /tmp/fdaudit-root.lock python3 bench/trace/startup.py \
      [--fdaudit target/release/fdaudit] [--rounds 15] [--spacings 0.3,2.2,4.5] [--no-verbose]
"""

import argparse
import re
import statistics
import subprocess
import sys
import time


def quartiles(xs):
    if len(xs) < 2:
        return xs[0], xs[0]
    q = statistics.quantiles(xs, n=4)
    return q[0], q[2]


def wall_ms(cmd):
    start = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - start) * 1e3


# `trace -v`'s start-up line (fdaudit/src/trace/verbose.rs).
STARTUP = re.compile(
    r"start-up ([\d.]+) ms .*?\(BTF ([\d.]+) ms.*?maps ([\d.]+) ms.*?programs ([\d.]+) ms\)")
EXIT = re.compile(r"fdaudit: exit ([\d.]+) ms")


def verbose_split(fdaudit):
    """One `trace -v -q -- /bin/true`: (wall, start-up, BTF, maps, programs, exit) in ms."""
    start = time.perf_counter()
    out = subprocess.run([fdaudit, "trace", "-v", "-q", "--", "/bin/true"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         check=True).stderr
    wall = (time.perf_counter() - start) * 1e3
    s, e = STARTUP.search(out), EXIT.search(out)
    if not s or not e:
        sys.exit(f"startup.py: no start-up or exit line in trace -v's output:\n{out}")
    return (wall, *(float(x) for x in s.groups()), float(e.group(1)))


def sleep_until(t):
    left = t - time.perf_counter()
    if left > 0:
        time.sleep(left)


def fmt(xs):
    lo, hi = quartiles(xs)
    return f"{statistics.median(xs):6.1f} ({lo:.1f}–{hi:.1f}, min {min(xs):.1f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fdaudit", default="target/release/fdaudit")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--spacings", default="0.3,2.2,4.5",
                    help="seconds from the previous trace's exit to the timed trace's start")
    ap.add_argument("--no-verbose", action="store_true", help="skip the trace -v rounds")
    args = ap.parse_args()
    spacings = [float(s) for s in args.spacings.split(",")]
    trace = [args.fdaudit, "trace", "-q", "--", "/bin/true"]
    strace = ["strace", "-f", "-o", "/dev/null", "/bin/true"]
    true = ["/bin/true"]
    with open("/proc/loadavg") as f:
        load_before = f.read().split()[:3]
    times = {s: {"trace": [], "strace": [], "true": []} for s in spacings}
    split = {s: [] for s in spacings}
    # Whatever ran before this script: let its hand-off child go.
    time.sleep(max(spacings) + 1)
    last_trace = time.perf_counter()
    for r in range(args.rounds):
        order = spacings[r % len(spacings):] + spacings[:r % len(spacings)]
        for s in order:
            # strace and /bin/true in the same round, before the trace (alternating order).
            pair = [("strace", strace), ("true", true)]
            for name, cmd in pair if r % 2 else reversed(pair):
                times[s][name].append(wall_ms(cmd))
            sleep_until(last_trace + s)
            times[s]["trace"].append(wall_ms(trace))
            last_trace = time.perf_counter()
    if not args.no_verbose:
        for r in range(args.rounds):
            order = spacings[r % len(spacings):] + spacings[:r % len(spacings)]
            for s in order:
                sleep_until(last_trace + s)
                split[s].append(verbose_split(args.fdaudit))
                last_trace = time.perf_counter()
    with open("/proc/loadavg") as f:
        load_after = f.read().split()[:3]
    print(f"{args.fdaudit}, {args.rounds} rounds, load {' '.join(load_before)} before, "
          f"{' '.join(load_after)} after")
    print("wall ms, median (middle half, min)")
    print(f"{'spacing':>8}  {'trace -q':<28}{'strace -f':<28}{'/bin/true':<28}met")
    for s in spacings:
        t = times[s]
        met = statistics.median(t["trace"]) <= statistics.median(t["strace"])
        print(f"{s:7.1f}s  {fmt(t['trace']):<28}{fmt(t['strace']):<28}{fmt(t['true']):<28}"
              f"{'yes' if met else 'NO'}")
    if args.no_verbose:
        return
    print("trace -v -q -- /bin/true, ms, median (middle half, min)")
    names = ["wall", "start-up", "BTF", "maps", "programs", "exit"]
    for s in spacings:
        cols = list(zip(*split[s]))
        print(f"{s:7.1f}s  " + "  ".join(f"{n} {fmt(list(c)).strip()}"
                                         for n, c in zip(names, cols)))


if __name__ == "__main__":
    main()
