#!/usr/bin/env bash
# Run time of `trace --origin`'s sys_exit program (origin_exit, with the origin_modules tail
# call it makes for a process's first origin record) per run, from the kernel's own
# statistics (kernel.bpf_stats_enabled, `bpftool prog show`), for each fdaudit binary given,
# alternated ROUNDS times, on two workloads:
#   repeat: one process, 5000 open()/close() of /etc/hostname without O_CLOEXEC (one site);
#   new:    200 processes, one such open each (each its process's first origin record).
# Root; run under `flock -o /tmp/fdaudit-root.lock`. Prints: binary workload run_cnt
# run_time_ns ns_per_run ns_per_open.
#   bench/trace/origin-stats.sh [ROUNDS] FDAUDIT...
set -euo pipefail
rounds=2
if [[ ${1:-} =~ ^[0-9]+$ ]]; then rounds=$1; shift; fi
[ $# -ge 1 ] || { echo "usage: $0 [ROUNDS] FDAUDIT..." >&2; exit 2; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"; sysctl -q kernel.bpf_stats_enabled="$old"' EXIT
old=$(sysctl -n kernel.bpf_stats_enabled)
cat > "$dir/opens.c" <<'C'
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1;
    for (int i = 0; i < n; i++) { int fd = open("/etc/hostname", O_RDONLY); if (fd >= 0) close(fd); }
    return 0;
}
C
gcc -O2 -o "$dir/opens" "$dir/opens.c"
sysctl -q kernel.bpf_stats_enabled=1
declare -A work=(
  [repeat]="$dir/opens 5000"
  [new]="for i in \$(seq 200); do $dir/opens 1; done"
)
declare -A opens=([repeat]=5000 [new]=200)
for _ in $(seq "$rounds"); do
  for w in repeat new; do
    for bin in "$@"; do
      "$bin" trace -q --origin --json -o /dev/null -- \
        bash -c "sleep 1; ${work[$w]}; touch $dir/done; sleep 2" &
      while [ ! -e "$dir/done" ]; do sleep 0.1; done
      rm -f "$dir/done"
      bpftool prog show --json | BIN="$bin" W="$w" N="${opens[$w]}" python3 -c '
import json, os, sys
for p in json.load(sys.stdin):
    if p.get("name") in ("origin_exit", "origin_modules") and os.environ["W"] == "new" \
            and not os.environ.get("SHOWN"):
        print(os.environ["BIN"], p["name"], "verified_insns", p.get("verified_insns"),
              "xlated_insns", p.get("bytes_xlated", 0) // 8)
    if p.get("name") == "origin_exit" and p.get("run_cnt"):
        n = int(os.environ["N"])
        print(os.environ["BIN"], os.environ["W"], p["run_cnt"], p["run_time_ns"],
              round(p["run_time_ns"] / p["run_cnt"]), round(p["run_time_ns"] / n))'
      wait
    done
  done
done
cat /proc/loadavg
