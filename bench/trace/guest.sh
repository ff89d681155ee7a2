#!/bin/sh
# The fentry-vs-raw-tp part of the overhead benchmark, for a VM guest (busybox sh: no python).
# Prints "@@ BENCH <workload> <mode> <microseconds>" lines, rounds interleaved; the host
# side (bench/trace/guest-table.py) turns them into medians and ratios.
#   guest.sh [ROUNDS] [SPAWNS] [BYSTANDER_SPAWNS] [GETPPID_CALLS]
# Needs fdaudit and `getppid` (bench/trace/getppid.c, built static) on PATH.
F=fdaudit; R=${1:-3}; N=${2:-30}; M=${3:-100}; G=${4:-300000}
hard=$(ulimit -Hn)
storm() { echo __spawner --strategy close-loop --nofile "$hard" -n "$1"; }
us() { # us CMD...: wall time of CMD in microseconds
  s=$EPOCHREALTIME; "$@" >/dev/null 2>&1; e=$EPOCHREALTIME
  echo "$s $e" | awk '{ printf "%d", ($2 - $1) * 1e6 }'
}
follow() { # follow TRACER_ARGS -- CMD...: CMD's time while `fdaudit trace ARGS` follows an idle sleep
  args=""; while [ "$1" != -- ]; do args="$args $1"; shift; done; shift
  sleep 1000 & idle=$!
  rm -f /tmp/follow.err; $F trace -q $args -p $idle 2>/tmp/follow.err >/dev/null & tr=$!
  until grep -q "fdaudit: tracing" /tmp/follow.err 2>/dev/null; do sleep 0.05; done
  sleep 0.05; t=$(us "$@")
  kill -INT $tr; wait $tr; kill $idle; wait $idle 2>/dev/null
  echo "$t"
}
steady() { # steady [TRACE_ARGS...]: the spawner's own time for its spawns (start-up excluded), µs
  $F "$@" $(storm "$N") --json 2>/dev/null |
    awk -F'"ns":' '/"spawn_time"/ { split($2, a, /[,}]/); t += a[1] } END { printf "%d", t / 1000 }'
}
b() { echo "@@ BENCH $1 $2 $3"; }
for r in $(seq "$R"); do
  b storm untraced "$(us $F $(storm "$N"))"
  b storm-steady untraced "$(steady)"
  b true untraced "$(us /bin/true)"
  b bystander untraced "$(us $F $(storm "$M"))"
  b getppid untraced "$(us getppid "$G")"
  for k in raw-tp fentry; do
    b storm "trace-$k" "$(us $F trace -q --backend $k -- $F $(storm "$N"))"
    b storm-steady "trace-$k" "$(steady trace -q --backend $k -- $F)"
    b true "trace-$k" "$(us $F trace -q --backend $k -- /bin/true)"
    b bystander "trace-$k" "$(follow --backend $k -- $F $(storm "$M"))"
    b getppid "trace-$k" "$(follow --backend $k -- getppid "$G")"
  done
  b storm leaks-only "$(us $F trace -q --no-syscalls -- $F $(storm "$N"))"
  b true leaks-only "$(us $F trace -q --no-syscalls -- /bin/true)"
  echo "@@ round $r done"
done
