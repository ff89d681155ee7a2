#!/usr/bin/env python3
"""How long a trace's programs stay in the kernel after `fdaudit trace` has exited.

fdaudit hands its tracepoint programs' links to a child that closes them once fdaudit has
exited (fdaudit/src/engine/ebpf/fentry.rs, `hand_bpf_fds_to_a_child`). Until a link is
released its program still runs on every process's syscalls, and each release waits for an
RCU tasks-trace grace period. This runs `fdaudit trace -q -- /bin/true` ROUNDS times and, after
each exit, polls `bpftool prog list` every 5 ms until none of fdaudit's programs is loaded.

    sudo python3 bench/trace/detach.py [--fdaudit target/release/fdaudit] [--rounds 5]
"""

import argparse
import statistics
import subprocess
import sys
import time

PREFIXES = ("tp_", "sched_process_", "failed_exec", "sys_enter", "sys_exit")


def fdaudit_programs():
    out = subprocess.run(
        ["bpftool", "prog", "list"], capture_output=True, text=True, check=True
    ).stdout
    names = []
    for line in out.splitlines():
        fields = line.split()
        if line[:1].isdigit() and len(fields) > 3 and fields[2] == "name":
            names.append(fields[3])
    return [n for n in names if n.startswith(PREFIXES)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fdaudit", default="target/release/fdaudit")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--linger", type=float, default=2.5,
                    help="seconds between rounds (the hand-off child's anchors linger 2 s)")
    args = ap.parse_args()
    if fdaudit_programs():
        sys.exit("detach.py: fdaudit programs are loaded already: wait for them to go")
    gone = []
    for _ in range(args.rounds):
        subprocess.run([args.fdaudit, "trace", "-q", "--", "/bin/true"], check=True)
        start = time.perf_counter()
        while fdaudit_programs() and time.perf_counter() - start < 10:
            time.sleep(0.005)
        gone.append((time.perf_counter() - start) * 1e3)
        time.sleep(args.linger)
    print(f"{args.fdaudit}: programs gone {statistics.median(gone):.0f} ms after exit "
          f"(median of {len(gone)}; each: {', '.join(f'{g:.0f}' for g in gone)})")


if __name__ == "__main__":
    main()
