#!/usr/bin/env bash
# Benchmark: `fdaudit scan --json` against its floor, `lsof -n -P` and `lsfd`, on the same
# state.
#
# Starts NPROC fixture processes (tests/src/bin/scan-fixture-hold.rs) holding FDS fds
# each (files, directories, pipes, unix socket pairs, TCP sockets; half without
# close-on-exec), then runs each tool RUNS times in interleaved rounds (one run of each
# per round) and prints the min and median wall and CPU (utime+stime) of each, its ratios
# to fdaudit, and whether #44's targets are met: fdaudit's CPU at most 1.15x the floor
# program's (bench/scan/floor.c: one readlinkat and one fdinfo read per fd, nothing
# else, on as many threads as scan), and fdaudit at least 5x faster (wall) than lsof and
# lsfd. Needs cc, lsof and util-linux's lsfd (apt-get install -y gcc lsof util-linux
# time bc).
#
# Usage: bench/scan/run.sh [NPROC] [FDS] [RUNS]     (default 100 1260 5 = 126,000 fds)
#        FDAUDIT=/path/to/fdaudit bench/scan/run.sh   (time another build)
#        HOLD=target/debug/scan-fixture-hold bench/scan/run.sh   (a fixture already built)
#        BASELINE=/path/to/old/fdaudit bench/scan/run.sh   (also time an older build, in turns)
#        HOLD_ONLY=1 bench/scan/run.sh   (build the state and hold it until SIGINT or
#                                        SIGTERM: for perf or a JSON diff)
set -euo pipefail

NPROC=${1:-100}
FDS=${2:-1260}
RUNS=${3:-5}
cd "$(dirname "$0")/../.."
export FDAUDIT_SKIP_EBPF=1

for tool in cc lsof lsfd /usr/bin/time bc; do
    command -v "$tool" >/dev/null || { echo "missing $tool: apt-get install -y gcc lsof util-linux time bc" >&2; exit 2; }
done

[[ -n ${FDAUDIT:-} ]] || cargo build --release --quiet -p fdaudit --bin fdaudit
[[ -n ${HOLD:-} ]] || cargo build --release --quiet -p fdaudit-tests --bin scan-fixture-hold
FDAUDIT=${FDAUDIT:-$PWD/target/release/fdaudit}
HOLD=${HOLD:-$PWD/target/release/scan-fixture-hold}
FLOOR=$PWD/target/release/scan-floor
cc -O2 -pthread -o "$FLOOR" bench/scan/floor.c

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
if [[ -n ${HOLD_ONLY:-} ]]; then
    echo "fixture pids: ${pids[*]}"
    echo "holding the state until SIGINT or SIGTERM (pid $$)"
    trap 'exit 0' INT TERM
    sleep infinity &
    pids+=($!)
    wait $!
fi
load_start=$(cut -d' ' -f1-3 /proc/loadavg)

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
    run floor "$FLOOR"
    run lsof lsof -n -P
    run lsfd lsfd
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
minimum() { tr ' ' '\n' | grep -v '^$' | sort -g | head -n 1; }
rss=$(/usr/bin/time -f %M "$FDAUDIT" scan --json 2>&1 >/dev/null | tail -n 1)
fw=$(echo "${wall[fdaudit]}" | median); fc=$(echo "${cpu[fdaudit]}" | median)
printf '\n%-22s %9s %9s %8s %9s %9s %8s\n' "$RUNS rounds" "wall min" median ratio "CPU min" median ratio
for t in fdaudit ${BASELINE:+baseline} floor lsof lsfd; do
    w=$(echo "${wall[$t]}" | median); c=$(echo "${cpu[$t]}" | median)
    wm=$(echo "${wall[$t]}" | minimum); cm=$(echo "${cpu[$t]}" | minimum)
    case $t in
        fdaudit) label="fdaudit scan --json" ;; baseline) label="baseline scan --json" ;;
        floor) label="floor program" ;; lsof) label="lsof -n -P" ;; lsfd) label="lsfd" ;;
    esac
    printf '%-22s %9.2f %9.2f %7.2fx %9.2f %9.2f %7.2fx\n' "$label" "$wm" "$w" \
        "$(echo "$w / $fw" | bc -l)" "$cm" "$c" "$(echo "$c / $fc" | bc -l)"
done
echo "(ratio: median over fdaudit's median; wall and CPU u+s in seconds)"
verdict() { # label value op limit
    if [[ $(echo "$2 $3 $4" | bc -l) == 1 ]]; then echo "$1: $(printf %.2f "$2") (met)"; else echo "$1: $(printf %.2f "$2") (NOT met)"; fi
}
fcm=$(echo "${cpu[fdaudit]}" | minimum); flm=$(echo "${cpu[floor]}" | minimum)
verdict "target: fdaudit CPU / floor CPU <= 1.15, medians" "$(echo "$fc / $(echo "${cpu[floor]}" | median)" | bc -l)" '<=' 1.15
verdict "        the same, minima" "$(echo "$fcm / $flm" | bc -l)" '<=' 1.15
for t in lsof lsfd; do
    verdict "target: $t wall / fdaudit wall >= 5, medians" "$(echo "$(echo "${wall[$t]}" | median) / $fw" | bc -l)" '>=' 5
done
echo "load average: $load_start at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end (other work on the machine slows every tool and hides fdaudit's second thread)"
echo "fdaudit scan --json peak RSS: ${rss} KiB"
