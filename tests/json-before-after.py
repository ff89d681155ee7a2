#!/usr/bin/env python3
"""Compares `fdaudit trace --json` records of two builds on fixed workloads (issue #39:
behaviour unchanged when the engine's values and the JSON wire types part).

    python3 tests/json-before-after.py OLD NEW [--new-key KEY]... [--unmask KEY]... [ONLY]

ONLY: run only the workloads whose name contains it. `--new-key KEY`: a key the new
binary's records have and the old one's do not (a field a later issue added), left out of
the comparison and named in the summary; the keys named in NEW_KEYS are left out always.
`--unmask KEY`: compare a key masked by default (`--unmask runtime`: the parent's runtime,
which the retries below let through when a race varies it).

Both binaries must be named `fdaudit` (e.g. OLD in a directory of its own): the spawner
workloads run the binary itself, and its file name is their children's `parent_comm`.

Runs as root. Each workload is traced by both binaries (raw-tp) and the records are compared
after masking what differs run to run, as tests/tests/backends.rs normalize() does: keys
ending in `_ns`, pids, thread ids, inode numbers, an origin frame's address (ASLR),
`bpf_missed_runs`, `runtime` (a race with the parent's exit), `path_partial`, a pipe's or
socket's inode in its target, --demo's pid in its files' names, the binary's own path (the
spawners' runtime), and the header and note records. Key order is compared too (the records are compared as lists of pairs).
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
# Keys added to the records since the reshape began (#39), each with the issue that added
# it: left out of the comparison, and said in the summary when a new record has one.
NEW_KEYS = {}
MASKED = {"pid", "parent_pid", "exec_tid", "tid", "addr", "ino", "bpf_missed_runs", "runtime"}
LEAK = "exec 7</etc/hostname; exec 9</etc/passwd; /bin/true; /bin/echo hi >/dev/null; :"
# subprocess with close_fds=False (an inheritable fd 7 leaks) and with its default.
PYTHON = ("import os, subprocess\n"
          "fd = os.open('/etc/hostname', os.O_RDONLY)\n"
          "os.dup2(fd, 7)\n"
          "subprocess.run(['/bin/true'], close_fds=False)\n"
          "subprocess.run(['/bin/true'], pass_fds=(7,))\n"
          "subprocess.run(['/bin/true'])\n")
# The outer shell opens fd 7; its child shell forks the grandchildren that inherit it
# (with --origin: the grandparent's call).
TREE = "exec 7</etc/hostname; sh -c '/bin/true; /bin/echo x >/dev/null; :'; :"


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
    w.append(("demo", ["--demo"], []))
    w.append(("python spawn", [], ["python3", "-c", PYTHON]))
    w.append(("tree with a grandchild", [], ["sh", "-c", TREE]))
    w.append(("tree with a grandchild --origin", ["--origin"], ["sh", "-c", TREE]))
    return w


def mask_target(t):
    t = re.sub(r":\[\d+\]", ":[N]", t)
    return re.sub(r" \(inode \d+\)", " (inode N)", t)


def normalize(v, new_keys, seen_new):
    if isinstance(v, dict):
        out = []
        for k, x in v.items():
            if k in new_keys:
                seen_new.add(k)
                continue
            if k.endswith("_ns") or k in MASKED:
                continue
            if k in ("flags", "partial") and isinstance(x, list):
                x = [f for f in x if not (isinstance(f, str) and "path_partial" in f)]
            if k == "target" and isinstance(x, str):
                x = mask_target(x)
            out.append((k, normalize(x, new_keys, seen_new)))
        return out
    if isinstance(v, list):
        return [normalize(x, new_keys, seen_new) for x in v]
    if isinstance(v, str):
        # --demo's files are named with its pid.
        return re.sub(r"/fdaudit-demo-\d+-", "/fdaudit-demo-N-", v)
    return v


def run(binary, extra, cmd, new_keys=(), seen_new=None):
    seen_new = set() if seen_new is None else seen_new
    args = [binary, "trace", "--json", "--backend", "raw-tp", *extra]
    if cmd:
        args += ["--", *cmd]
    # An fd of the caller's, inheritable: the baseline every spawn starts from.
    with open("/etc/hostname", "rb") as held:
        p = subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           pass_fds=(held.fileno(),), check=False)
    recs = []
    for line in p.stderr.decode(errors="replace").splitlines():
        if not line.startswith('{"type":'):
            continue
        # The spawner workloads' runtime names the binary by its path.
        v = json.loads(line.replace(binary, "FDAUDIT"))
        if v["type"] in ("header", "note"):
            continue
        recs.append(normalize(v, new_keys, seen_new))
    return p.returncode, recs


def main():
    # Absolute: a parent gone before its runtime was read is named by its exec path, which
    # must be absolute to be kept.
    args, new_keys, only = sys.argv[1:], set(NEW_KEYS), ""
    while "--new-key" in args:
        i = args.index("--new-key")
        new_keys.add(args[i + 1])
        del args[i:i + 2]
    while "--unmask" in args:
        i = args.index("--unmask")
        MASKED.discard(args[i + 1])
        del args[i:i + 2]
    if len(args) == 3:
        only = args.pop()
    old, new = os.path.abspath(args[0]), os.path.abspath(args[1])
    failed = noisy = 0
    seen_new = set()
    for (name, extra, cmd_old), (_, _, cmd_new) in zip(workloads(old), workloads(new)):
        if only not in name:
            continue
        a = [run(old, extra, cmd_old)]
        b = [run(new, extra, cmd_new, new_keys, seen_new)]
        # What comes of a race (the parent's runtime, read from /proc while it exits, and
        # the advice drawn from it) differs from run to run of one binary: a workload whose
        # results differ is run again, up to TRIES times each, and passes when a result of
        # the new binary is one the old binary gave.
        while not any(x in a for x in b) and len(a) < TRIES:
            a.append(run(old, extra, cmd_old))
            b.append(run(new, extra, cmd_new, new_keys, seen_new))
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
    for k in sorted(seen_new):
        print(f"left out: {k} ({NEW_KEYS.get(k, 'named on the command line')})")
    print(f"{failed} differ, {noisy} needed more than one run")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
