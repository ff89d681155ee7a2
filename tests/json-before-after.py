#!/usr/bin/env python3
"""Compares `fdaudit trace --json` records of two builds on fixed workloads (issue #39:
behaviour unchanged when the engine's values and the JSON wire types part).

    python3 tests/json-before-after.py OLD_BINARY NEW_BINARY [--runs N]

Both binaries must be named `fdaudit` (e.g. OLD in a directory of its own): the spawner
workloads run the binary itself, and its file name is their children's `parent_comm`.

Runs as root. Each workload is traced by both binaries (raw-tp) and the records are compared
after masking what differs run to run, as tests/tests/backends.rs normalize() does: keys
ending in `_ns`, pids, thread ids, inode numbers, an origin frame's address (ASLR), `bpf_missed_runs`, `runtime` (a race with
the parent's exit), `path_partial`, a pipe's or socket's inode in its target, and the header
and note records. Key order is compared too (the records are compared as lists of pairs).
A workload passes when a result of the new binary equals one of the old binary's (up to
TRIES runs each: a race with the parent's exit varies its runtime, and the advice drawn from
it, from run to run). Exit status 1 when a workload never gave the same result.
"""

import json
import os
import re
import subprocess
import sys

STRATEGIES = [
    "none", "close-loop", "fcntl-loop", "procfd-walk", "poll-scan", "close-range",
    "close-range-cloexec", "closefrom", "posix-spawn", "posix-spawn-closefrom",
]
TRIES = 5
MASKED = {"pid", "parent_pid", "exec_tid", "tid", "addr", "ino", "bpf_missed_runs", "runtime"}
LEAK = "exec 7</etc/hostname; exec 9</etc/passwd; /bin/true; /bin/echo hi >/dev/null; :"


def workloads(binary):
    w = []
    for s in STRATEGIES:
        w.append((f"spawner {s}", [], [binary, "__spawner", "--strategy", s, "--nofile", "512",
                                       "--open-fds", "6", "-n", "2"]))
    w.append(("sh leaked fd", [], ["sh", "-c", LEAK]))
    w.append(("sh leaked fd --origin", ["--origin"], ["sh", "-c", LEAK]))
    w.append(("sh leaked fd --no-syscalls", ["--no-syscalls"], ["sh", "-c", LEAK]))
    w.append(("sh leaked fd --no-baseline", ["--no-baseline"], ["sh", "-c", LEAK]))
    w.append(("--reads", ["--reads"],
              ["sh", "-c", "exec 7</etc/hostname; dd if=/etc/passwd of=/dev/null bs=1 "
               "count=400 2>/dev/null; /bin/true"]))
    w.append(("failed exec", [], ["sh", "-c", "exec 7</etc/hostname; /nonexistent/x; "
                                  "/bin/true"]))
    return w


def mask_target(t):
    t = re.sub(r":\[\d+\]", ":[N]", t)
    return re.sub(r" \(inode \d+\)", " (inode N)", t)


def normalize(v):
    if isinstance(v, dict):
        out = []
        for k, x in v.items():
            if k.endswith("_ns") or k in MASKED:
                continue
            if k in ("flags", "partial") and isinstance(x, list):
                x = [f for f in x if not (isinstance(f, str) and "path_partial" in f)]
            if k == "target" and isinstance(x, str):
                x = mask_target(x)
            out.append((k, normalize(x)))
        return out
    if isinstance(v, list):
        return [normalize(x) for x in v]
    return v


def run(binary, extra, cmd):
    args = [binary, "trace", "--json", "--backend", "raw-tp", *extra, "--", *cmd]
    # An fd of the caller's, inheritable: the baseline every spawn starts from.
    with open("/etc/hostname", "rb") as held:
        p = subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           pass_fds=(held.fileno(),), check=False)
    recs = []
    for line in p.stderr.decode(errors="replace").splitlines():
        if not line.startswith('{"type":'):
            continue
        v = json.loads(line)
        if v["type"] in ("header", "note"):
            continue
        recs.append(normalize(v))
    return p.returncode, recs


def main():
    # Absolute: a parent gone before its runtime was read is named by its exec path, which
    # must be absolute to be kept.
    old, new = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    failed = noisy = 0
    for (name, extra, cmd_old), (_, _, cmd_new) in zip(workloads(old), workloads(new)):
        a = [run(old, extra, cmd_old)]
        b = [run(new, extra, cmd_new)]
        # What comes of a race (the parent's runtime, read from /proc while it exits, and
        # the advice drawn from it) differs from run to run of one binary: a workload whose
        # results differ is run again, up to TRIES times each, and passes when a result of
        # the new binary is one the old binary gave.
        while not any(x in a for x in b) and len(a) < TRIES:
            a.append(run(old, extra, cmd_old))
            b.append(run(new, extra, cmd_new))
        shared = [x for x in b if x in a]
        if not shared:
            failed += 1
            print(f"DIFFER {name}:\n  old {json.dumps(a[0])}\n  new {json.dumps(b[0])}")
            continue
        runs = len(a)
        kinds = len({json.dumps(x) for x in a + b})
        if runs > 1:
            noisy += 1
        print(f"same   {name}: {len(shared[0][1])} records, status {shared[0][0]}"
              f" ({runs} run(s) each, {kinds} distinct result(s))")
    print(f"{failed} differ, {noisy} needed more than one run")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
