#!/usr/bin/env bash
# Benchmark: `fdaudit scan --json` against `lsof -n -P` and `lsfd` on the same state.
#
# Starts NPROC fixture processes (tests/src/bin/scan-fixture-hold.rs) holding FDS fds
# each (files, directories, pipes, unix socket pairs, TCP sockets; half without
# close-on-exec), then times each tool RUNS times, in turns, and prints the medians and
# ratios. Needs lsof and util-linux's lsfd (apt-get install -y lsof util-linux time).
#
# Usage: bench/scan/run.sh [NPROC] [FDS] [RUNS]     (default 100 1260 5 = 126,000 fds)
#        FDAUDIT=/path/to/fdaudit bench/scan/run.sh   (time another build)
#        BASELINE=/path/to/old/fdaudit bench/scan/run.sh   (also time an older build, in turns)
set -euo pipefail

NPROC=${1:-100}
FDS=${2:-1260}
RUNS=${3:-5}
cd "$(dirname "$0")/../.."
export FDAUDIT_SKIP_EBPF=1

for tool in lsof lsfd /usr/bin/time; do
    command -v "$tool" >/dev/null || { echo "missing $tool: apt-get install -y lsof util-linux time" >&2; exit 2; }
done

cargo build --release --quiet -p fdaudit --bin fdaudit -p fdaudit-tests --bin scan-fixture-hold
FDAUDIT=${FDAUDIT:-$PWD/target/release/fdaudit}
HOLD=$PWD/target/release/scan-fixture-hold

ulimit -n "$(( FDS + 64 > $(ulimit -Hn) ? $(ulimit -Hn) : FDS + 64 ))"
work=$(mktemp -d)
pids=()
cleanup() {
    exec 9>&- 2>/dev/null || true
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# The fixtures wait for EOF on a fifo that only this script holds open for writing.
mkfifo "$work/hold"
exec 9<>"$work/hold"
for i in $(seq 1 "$NPROC"); do
    "$HOLD" "$FDS" <"$work/hold" >"$work/ready.$i" 9>&- &
    pids+=($!)
done
for i in $(seq 1 "$NPROC"); do
    for _ in $(seq 1 200); do
        [[ -s $work/ready.$i ]] && break
        sleep 0.05
    done
    [[ -s $work/ready.$i ]] || { echo "fixture $i did not start" >&2; exit 1; }
done
held=$(cat "$work"/ready.* | awk '{s += $3} END {print s}')
total=$("$FDAUDIT" scan --json 2>/dev/null | tail -n 1 | sed 's/.*"fd_count":\([0-9]*\).*/\1/')
echo "state: $NPROC fixture processes holding $held fds; $total fds on the machine; $(nproc) CPUs; kernel $(uname -r)"

declare -A wall cpu
run() { # name cmd...
    local name=$1; shift
    /usr/bin/time -f '%e %U %S' -o "$work/time" "$@" >/dev/null 2>&1 || true
    read -r e u s <"$work/time"
    wall[$name]+="$e "
    cpu[$name]+="$(echo "$u + $s" | bc -l) "
}
for _ in $(seq 1 "$RUNS"); do
    run fdaudit "$FDAUDIT" scan --json
    [[ -n ${BASELINE:-} ]] && run baseline "$BASELINE" scan --json
    run lsof lsof -n -P
    run lsfd lsfd
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
rss=$(/usr/bin/time -f %M "$FDAUDIT" scan --json 2>&1 >/dev/null | tail -n 1)
fw=$(echo "${wall[fdaudit]}" | median); fc=$(echo "${cpu[fdaudit]}" | median)
printf '\n%-22s %12s %8s %14s %8s\n' "median of $RUNS" "wall (s)" ratio "CPU u+s (s)" ratio
for t in fdaudit ${BASELINE:+baseline} lsof lsfd; do
    w=$(echo "${wall[$t]}" | median); c=$(echo "${cpu[$t]}" | median)
    case $t in fdaudit) label="fdaudit scan --json" ;; baseline) label="baseline scan --json" ;; lsof) label="lsof -n -P" ;; lsfd) label="lsfd" ;; esac
    printf '%-22s %12.2f %7.2fx %14.2f %7.2fx\n' "$label" "$w" "$(echo "$w / $fw" | bc -l)" "$c" "$(echo "$c / $fc" | bc -l)"
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine slows every tool and hides fdaudit's second thread)"
echo "fdaudit scan --json peak RSS: ${rss} KiB"
