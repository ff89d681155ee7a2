#!/usr/bin/env bash
# Soak test of `fdaudit watch`: runs it for DURATION seconds (default 600) on the whole host
# while a spawn-heavy workload execs NAMES distinct executables (default 3000, more than the
# default label-set cap of 2000), each with a leaked fd 7; samples fdaudit's RSS and the
# number of exported series and fdaudit's CPU time every 30 s. Needs root; holds /tmp/fdaudit-bpf.lock throughout.
#   bash bench/watch/soak.sh [DURATION] [NAMES]    (prints a table; numbers go to README)
set -euo pipefail
cd "$(dirname "$0")/../.."
DURATION=${1:-600}
NAMES=${2:-3000}
PORT=${PORT:-19750}
BIN=target/release/fdaudit
[ -x "$BIN" ] || cargo build --release --quiet -p fdaudit
work=$(mktemp -d /tmp/fdaudit-soak.XXXXXX)
mkdir "$work/bin"
for i in $(seq 0 $((NAMES - 1))); do ln -s /bin/true "$work/bin/t$i"; done

exec 9>/tmp/fdaudit-bpf.lock
flock 9
"$BIN" watch --listen "127.0.0.1:$PORT" --scan-interval 60 --duration "$DURATION" \
  2>"$work/watch.err" &
watch_pid=$!
sleep 2
# The workload: nice'd, one exec per iteration, names drawn at random.
( exec 7</etc/hostname
  while kill -0 "$watch_pid" 2>/dev/null; do
    "$work/bin/t$((RANDOM % NAMES))"
  done ) &
load_pid=$!
echo "t_s rss_kib cpu_s spawns_total series overflow_total"
tck=$(getconf CLK_TCK)
t=0
while kill -0 "$watch_pid" 2>/dev/null; do
  rss=$(awk '/^VmRSS/ {print $2}' "/proc/$watch_pid/status" 2>/dev/null || echo 0)
  # utime + stime of fdaudit (fields 14 and 15 of stat; comm has no spaces here).
  cpu=$(awk -v t="$tck" '{printf "%.1f", ($14 + $15) / t}' "/proc/$watch_pid/stat" 2>/dev/null || echo 0)
  m=$(curl -s "127.0.0.1:$PORT/metrics" || true)
  spawns=$(printf '%s\n' "$m" | awk '/^fdaudit_spawns_total/ {s += $NF} END {print s + 0}')
  series=$(printf '%s\n' "$m" | grep -c '^fdaudit_spawns_total' || true)
  over=$(printf '%s\n' "$m" | awk '/^fdaudit_series_overflow_total/ {print $NF}')
  echo "$t $rss $cpu $spawns $series ${over:-0}"
  sleep 30
  t=$((t + 30))
done
wait "$watch_pid" || true
kill "$load_pid" 2>/dev/null || true
wait "$load_pid" 2>/dev/null || true
cat "$work/watch.err" >&2
rm -rf "$work"
