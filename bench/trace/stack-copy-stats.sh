#!/usr/bin/env bash
# What `trace --origin`'s stack copy (origin_stack_copy, tail-called by origin_exit) costs
# per new call site, from the kernel's own statistics (kernel.bpf_stats_enabled, `bpftool
# prog show`; a tail-called program's run time counts in origin_exit's): one process makes
# N open()/close() pairs of /etc/hostname without O_CLOEXEC from a recursive function,
#   one:  N times from the same depth (one call site: one copy);
#   many: once from each depth 1..N (N call sites: N copies),
# 0.3 ms apart, alternated ROUNDS times; (many - one) / (copies many - copies one) is the
# cost of a copy (the run time also holds every other process's syscalls' early exits:
# noise). Also prints the
# new program's verified and xlated instructions and the sites STACK_SITES holds at the end.
# Root; run under `flock -o /tmp/fdaudit-root.lock`.
#   bench/trace/stack-copy-stats.sh [ROUNDS] [N] FDAUDIT
set -euo pipefail
rounds=3
n=1000
if [[ ${1:-} =~ ^[0-9]+$ ]]; then rounds=$1; shift; fi
if [[ ${1:-} =~ ^[0-9]+$ ]]; then n=$1; shift; fi
[ $# -eq 1 ] || { echo "usage: $0 [ROUNDS] [N] FDAUDIT" >&2; exit 2; }
bin=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"; sysctl -q kernel.bpf_stats_enabled="$old"' EXIT
old=$(sysctl -n kernel.bpf_stats_enabled)
cat > "$dir/sites.c" <<'C'
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
__attribute__((noinline)) int at_depth(int d) {
    volatile char pad[64];
    pad[0] = (char)d;
    int r;
    if (d > 0) {
        r = at_depth(d - 1);
    } else {
        int fd = open("/etc/hostname", O_RDONLY);
        if (fd >= 0) close(fd);
        r = fd;
    }
    return r + pad[0] * 0;
}
int main(int argc, char **argv) {
    int n = atoi(argv[2]);
    int many = strcmp(argv[1], "many") == 0;
    for (int i = 1; i <= n; i++) {
        at_depth(many ? i : n / 2);
        usleep(300); /* the reader drains the ring: no copy is skipped for a full one */
    }
    return 0;
}
C
gcc -O2 -o "$dir/sites" "$dir/sites.c"
sysctl -q kernel.bpf_stats_enabled=1
for _ in $(seq "$rounds"); do
  for w in one many; do
    "$bin" trace -q --origin --json -o /dev/null -- \
      bash -c "sleep 1; $dir/sites $w $n; touch $dir/done; sleep 2" &
    while [ ! -e "$dir/done" ]; do sleep 0.1; done
    rm -f "$dir/done"
    sites=$(bpftool -j map dump name STACK_SITES 2>/dev/null |
      python3 -c 'import json, sys; print(len(json.load(sys.stdin)))' || echo '?')
    bpftool prog show --json | W="$w" N="$n" SITES="$sites" python3 -c '
import json, os
for p in json.load(__import__("sys").stdin):
    if p.get("name", "").startswith("origin_stack") and os.environ["W"] == "one":
        print("origin_stack_copy verified_insns", p.get("verified_insns"),
              "xlated_insns", p.get("bytes_xlated", 0) // 8)
    if p.get("name") == "origin_exit" and p.get("run_cnt"):
        n = int(os.environ["N"])
        print(os.environ["W"], "sites", os.environ["SITES"], "run_cnt", p["run_cnt"],
              "run_time_ns", p["run_time_ns"], "ns_per_open", round(p["run_time_ns"] / n))'
    wait
  done
done
cat /proc/loadavg
