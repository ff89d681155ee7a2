#!/usr/bin/env bash
# Per-program run time of fdaudit's kernel programs (the kernel's own statistics:
# kernel.bpf_stats_enabled, `bpftool prog show`), for each fdaudit binary given, alternated
# ROUNDS times, on 1000 spawns of /bin/true. Root; run under `flock /tmp/fdaudit-root.lock`.
# Prints: binary program run_cnt run_time_ns ns_per_run.
#   bench/trace/prog-stats.sh [ROUNDS] FDAUDIT...
set -euo pipefail
rounds=2
if [[ ${1:-} =~ ^[0-9]+$ ]]; then rounds=$1; shift; fi
[ $# -ge 1 ] || { echo "usage: $0 [ROUNDS] FDAUDIT..." >&2; exit 2; }
old=$(sysctl -n kernel.bpf_stats_enabled)
trap 'sysctl -q kernel.bpf_stats_enabled="$old"' EXIT
sysctl -q kernel.bpf_stats_enabled=1
for _ in $(seq "$rounds"); do
  for bin in "$@"; do
    "$bin" trace -q --json -o /dev/null -- \
      bash -c 'sleep 1; for i in $(seq 1000); do /bin/true; done; touch /tmp/prog-stats.done; sleep 3' &
    while [ ! -e /tmp/prog-stats.done ]; do sleep 0.1; done
    rm -f /tmp/prog-stats.done
    bpftool prog show --json | BIN="$bin" python3 -c '
import json, os, sys
for p in json.load(sys.stdin):
    n = p.get("name", "")
    if n.startswith("sched_process") and p.get("run_cnt"):
        print(os.environ["BIN"], n, p["run_cnt"], p["run_time_ns"], round(p["run_time_ns"] / p["run_cnt"]))'
    wait
  done
done
