#!/usr/bin/env bash
# What each program's load (BPF_PROG_LOAD: the verifier and the JIT) costs at start-up, for
# each fdaudit binary given, alternated ROUNDS times: `strace -f -T -e trace=bpf` of
# `FDAUDIT trace -q [ARGS] -- /bin/true`, each program's load call's wall time (strace's own
# overhead included, alike for every binary). Root; run under `flock /tmp/fdaudit-root.lock`.
# Prints one line per run: binary, then program=ms for each program loaded (the kernel's
# 15-character names).
#   bench/trace/prog-load.sh [ROUNDS] FDAUDIT... [-- TRACE-ARGS...]   (e.g. -- --origin)
set -euo pipefail
rounds=5
if [[ ${1:-} =~ ^[0-9]+$ ]]; then rounds=$1; shift; fi
bins=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do bins+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ ${#bins[@]} -ge 1 ] || { echo "usage: $0 [ROUNDS] FDAUDIT... [-- TRACE-ARGS...]" >&2; exit 2; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for _ in $(seq "$rounds"); do
  for bin in "${bins[@]}"; do
    strace -f -T -e trace=bpf -o "$log" "$bin" trace -q "$@" -- /bin/true >/dev/null 2>&1
    BIN="$bin" python3 - "$log" <<'EOF'
import os, re, sys
pending, took = {}, {}
for line in open(sys.argv[1]):
    line = line.rstrip()
    m = re.match(r'(\d+)\s+bpf\(BPF_PROG_LOAD.*prog_name="([^"]*)".*<unfinished', line)
    if m:
        pending[m.group(1)] = m.group(2)
        continue
    m = re.match(r'(\d+)\s+bpf\(BPF_PROG_LOAD.*prog_name="([^"]*)".*<([0-9.]+)>$', line)
    if m:
        took[m.group(2)] = float(m.group(3))
        continue
    m = re.match(r'(\d+)\s+<\.\.\. bpf resumed>.*<([0-9.]+)>$', line)
    if m and m.group(1) in pending:
        took[pending.pop(m.group(1))] = float(m.group(2))
named = sorted((n, t) for n, t in took.items() if n)
print(os.environ["BIN"], " ".join(f"{n}={t * 1000:.1f}" for n, t in named))
EOF
  done
done
