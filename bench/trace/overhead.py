#!/usr/bin/env python3
"""What tracing costs the traced: 100 spawns that each close() up to RLIMIT_NOFILE's hard limit,
untraced, under `fdaudit trace`, `trace --leaks-only` and `trace --reads`; and a byte-at-a-time
read workload untraced and under `trace --reads`.

Rounds are interleaved so drift hits every mode alike; the figure per mode is the median over
rounds of the spawner's own time for its N spawns (fdaudit's start-up is not counted).

Usage: python3 bench/trace/overhead.py [--rounds 7] [--spawns 100] [--fdaudit target/release/fdaudit]
       [--compare-exec-exit]
Run as root on a quiet machine.
"""
import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time


def spawner_total_ns(cmd, env=None):
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True, text=True,
                         env=env).stdout
    times = [json.loads(l)["ns"] for l in out.splitlines() if l.startswith('{"type":"spawn_time"')]
    if not times:
        sys.exit(f"no spawn times from {cmd}")
    return sum(times), len(times)


def wall_ns(cmd):
    t0 = time.perf_counter_ns()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter_ns() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--spawns", type=int, default=100)
    ap.add_argument("--fdaudit", default="target/release/fdaudit")
    ap.add_argument("--read-bytes", type=int, default=200_000)
    ap.add_argument("--compare-exec-exit", action="store_true",
                    help="also run `trace` without the exec-exit tracepoints (FDAUDIT_EXEC_EXIT=0)")
    a = ap.parse_args()
    fd = os.path.abspath(a.fdaudit)
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    spawner = [fd, "__spawner", "--strategy", "close-loop", "--nofile", str(hard), "-n", str(a.spawns), "--json"]
    modes = {
        "untraced": spawner,
        "trace": [fd, "trace", "-q", "--"] + spawner,
        "trace --leaks-only": [fd, "trace", "-q", "--leaks-only", "--"] + spawner,
        "trace --reads": [fd, "trace", "-q", "--reads", "--"] + spawner,
    }
    envs = {}
    if a.compare_exec_exit:
        modes["trace, no exec-exit tracepoints"] = modes["trace"]
        envs["trace, no exec-exit tracepoints"] = dict(os.environ, FDAUDIT_EXEC_EXIT="0")
    reader = ["dd", "if=/dev/zero", "of=/dev/null", "bs=1", f"count={a.read_bytes}", "status=none"]
    read_modes = {
        "reads untraced": reader,
        "reads under trace --reads": [fd, "trace", "-q", "--reads", "--"] + reader,
    }
    res = {m: [] for m in list(modes) + list(read_modes)}
    for r in range(a.rounds):
        for m, cmd in modes.items():
            ns, n = spawner_total_ns(cmd, envs.get(m))
            assert n == a.spawns
            res[m].append(ns)
        for m, cmd in read_modes.items():
            res[m].append(wall_ns(cmd))
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    med = {m: statistics.median(v) for m, v in res.items()}
    print(f"machine: {platform.node()} {platform.release()} {os.cpu_count()} CPUs; NOFILE {hard}; "
          f"{a.spawns} spawns per run, {a.rounds} rounds, medians")
    print(f"{'mode':28} {'time':>10} {'per spawn':>12} {'vs untraced':>12}")
    base = med["untraced"]
    for m in modes:
        print(f"{m:28} {med[m] / 1e9:9.3f}s {med[m] / a.spawns / 1e6:10.2f}ms {med[m] / base:11.2f}x")
    rb = med["reads untraced"]
    for m in read_modes:
        print(f"{m:28} {med[m] / 1e9:9.3f}s {'':>12} {med[m] / rb:11.2f}x   (dd bs=1 count={a.read_bytes}, wall incl. start-up)")


if __name__ == "__main__":
    main()
