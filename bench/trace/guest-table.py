#!/usr/bin/env python3
"""Medians and ratios from guest.sh's "@@ BENCH <workload> <mode> <µs>" lines.

Usage: python3 bench/trace/guest-table.py RESULTS_LOG [LABEL]
For each workload: the median wall time per mode, its ratio to untraced, and for the storm
fentry's overhead as a fraction of raw-tp's ((fentry - untraced) / (raw-tp - untraced)).
"""
import collections
import statistics
import sys

runs = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1], errors="replace"):
    p = line.split()
    if len(p) == 5 and p[0] == "@@" and p[1] == "BENCH" and p[4].isdigit():
        runs[p[2]][p[3]].append(int(p[4]))
label = sys.argv[2] if len(sys.argv) > 2 else ""
print(f"guest benchmark{' (' + label + ')' if label else ''}: medians of wall time, emulated (QEMU TCG)")
for w, modes in runs.items():
    base = statistics.median(modes["untraced"]) if modes.get("untraced") else None
    print(f"\n{w}:")
    for m, v in modes.items():
        med = statistics.median(v)
        rel = f"{med / base:6.2f}x" if base else ""
        if w == "true" and base:
            rel += f"  +{(med - base) / 1e3:.0f} ms"
        print(f"  {m:16} {med / 1e3:10.1f} ms  {rel}  (n={len(v)})")
    if base and modes.get("trace-raw-tp") and modes.get("trace-fentry"):
        raw = statistics.median(modes["trace-raw-tp"]) - base
        fen = statistics.median(modes["trace-fentry"]) - base
        if raw > 0:
            print(f"  fentry's overhead / raw-tp's: {fen / raw:.2f}")
