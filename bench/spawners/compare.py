#!/usr/bin/env python3
"""Compare fdaudit trace against strace for every spawner in ./progs.

For each spawner:
  A. fdaudit trace --json -- PROG /bin/true            -> spawn object for /bin/true
  B. strace -f ... -o logs/NAME.true.strace PROG /bin/true -> child segment counts
  C. fdaudit trace --json -- PROG /bin/ls -l /proc/self/fd -> leaked_fds vs what ls printed
Baseline: `ls -l /proc/self/fd` started directly by this script (same way, close_fds=False).

usage: compare.py [NAME ...]     (default: all)
"""
import json, os, re, shutil, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
PROGS = os.path.join(HERE, "progs")
LOGS = os.environ.get("LOGS", "/tmp/fdaudit-spawners-logs")
FDAUDIT = os.environ.get("FDAUDIT", os.path.join(HERE, "..", "..", "target", "release", "fdaudit"))
SECRET = "/tmp/spawners-secret.txt"
# syscalls asked for in the brief, plus dup/dup2/dup3/ioctl (fdaudit has dup_calls; libuv uses ioctl(FIOCLEX))
STRACE_SET = ("close,close_range,fcntl,poll,ppoll,getdents64,openat,execve,execveat,"
              "clone,clone3,fork,vfork,dup,dup2,dup3,ioctl")
PY = "/root/.pyenv/versions/3.11.7/bin/python3"   # real interpreter, not the pyenv shim (a bash script)
JAVA17 = "/usr/lib/jvm/java-17-openjdk-amd64/bin/java"
JAVA25 = "/usr/lib/jvm/temurin-25-jdk-amd64/bin/java"

SPAWNERS = [
    # name, argv prefix, how the secret was opened
    ("python-run-closefds-True", [PY, "py_spawn.py", "closefds_true"], "os.open + os.set_inheritable(True)"),
    ("python-run-closefds-False", [PY, "py_spawn.py", "closefds_false"], "os.open + os.set_inheritable(True)"),
    ("python-run-PATH-search", [PY, "py_spawn.py", "closefds_true"], "os.open + os.set_inheritable(True)", "path"),
    ("python-run-shell=True", [PY, "py_spawn.py", "shell"], "os.open + os.set_inheritable(True)"),
    ("perl-system", ["/usr/bin/perl", "pl_spawn.pl"], "open + fcntl(F_SETFD,0)"),
    ("bash-plain", ["/bin/bash", "sh_spawn.sh"], "exec 7<file"),
    ("java17-ProcessBuilder", [JAVA17, "-cp", "java", "JSpawn", "ProcessBuilder"], "new FileInputStream (no O_CLOEXEC)"),
    ("java17-Runtime.exec", [JAVA17, "-cp", "java", "JSpawn", "RuntimeExec"], "new FileInputStream (no O_CLOEXEC)"),
    ("java17-PB-FORK", [JAVA17, "-Djdk.lang.Process.launchMechanism=FORK", "-cp", "java", "JSpawn", "ProcessBuilder"], "new FileInputStream"),
    ("java17-PB-VFORK", [JAVA17, "-Djdk.lang.Process.launchMechanism=VFORK", "-cp", "java", "JSpawn", "ProcessBuilder"], "new FileInputStream"),
    ("java25-ProcessBuilder", [JAVA25, "-cp", "java", "JSpawn", "ProcessBuilder"], "new FileInputStream"),
    ("node-spawnSync", ["/usr/bin/node", "node_spawn.js"], "fs.openSync (O_CLOEXEC, cannot clear)"),
    ("go-os/exec", ["./go_spawn"], "syscall.Open without O_CLOEXEC"),
    ("ruby-system", ["/usr/bin/ruby", "rb_spawn.rb", "system"], "File.open + close_on_exec=false"),
    ("ruby-Process.spawn", ["/usr/bin/ruby", "rb_spawn.rb", "spawn"], "File.open + close_on_exec=false"),
    ("sbcl-run-program", ["/usr/bin/sbcl", "--script", "sbcl_spawn.lisp"], "sb-unix:unix-open (no O_CLOEXEC)"),
    ("gdc-spawnProcess", ["./d_spawn", "spawnProcess"], "File(...,\"r\") = fopen (no O_CLOEXEC)"),
    ("gdc-execute", ["./d_spawn", "execute"], "File(...,\"r\") = fopen (no O_CLOEXEC)"),
]

TRUE = ["/bin/true"]
LS = ["/bin/ls", "-l", "/proc/self/fd"]


def run(argv, timeout=300):
    t = time.time()
    p = subprocess.run(argv, cwd=PROGS, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       close_fds=False, timeout=timeout)   # keep the environment's inherited fds
    return p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace"), p.returncode, time.time() - t


LS_RE = re.compile(r"^\S+\s+\d+\s+\S+\s+\S+\s+\d+\s+\w+\s+\d+\s+[\d:]+\s+(\d+) -> (.*)$")


def parse_ls(text):
    fds = {}
    for line in text.splitlines():
        m = LS_RE.match(line)
        if m:
            fds[int(m.group(1))] = m.group(2)
    # drop ls's own opendir("/proc/self/fd") fd: it is not inherited
    return {fd: t for fd, t in fds.items() if not re.fullmatch(r"/proc/\d+/fd", t)}


def fdaudit(cmd):
    out, err, rc, dt = run([FDAUDIT, "trace", "--json", "--"] + cmd)
    objs, rest = [], []
    for line in out.splitlines():
        if line.startswith('{"type":'):
            objs.append(json.loads(line))
        else:
            rest.append(line)
    return objs, "\n".join(rest), err, rc


# ---------------------------------------------------------------- strace parsing
LINE_RE = re.compile(r"^(\d+)\s+(.*)$")


def strace_events(path):
    """Return list of (pid, syscall, args, ret) in log order (resumed calls placed at resume point)."""
    pending, events = {}, []
    with open(path, errors="replace") as f:
        for raw in f:
            m = LINE_RE.match(raw.rstrip("\n"))
            if not m:
                continue
            pid, body = int(m.group(1)), m.group(2)
            if body.startswith("---") or body.startswith("+++"):
                continue
            if body.endswith("<unfinished ...>"):
                pending[pid] = body[: -len("<unfinished ...>")].rstrip()
                continue
            rm = re.match(r"^<\.\.\. (\w+) resumed>(.*)$", body)
            if rm:
                body = pending.pop(pid, rm.group(1) + "(") + rm.group(2)
            cm = re.match(r"^(\w+)\((.*)\)\s+=\s+(.*)$", body)
            if not cm:
                continue
            events.append((pid, cm.group(1), cm.group(2), cm.group(3)))
    return events


def retval(ret):
    m = re.match(r"^(-?\d+|0x[0-9a-f]+|\?)", ret)
    if not m or m.group(1) == "?":
        return None
    return int(m.group(1), 0)


def poll_nfds(args):
    if args.startswith("NULL"):
        m = re.match(r"NULL,\s*(\d+)", args)
        return int(m.group(1)) if m else 0
    depth = 0
    for i, ch in enumerate(args):
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
            if depth == 0:
                m = re.match(r"\s*,\s*(\d+)", args[i + 1:])
                return int(m.group(1)) if m else None
    return None


PROCFD_RE = re.compile(r'"(/proc/self/fd|/proc/\d+/fd|/dev/fd|/proc/thread-self/fd)/?"')


def strace_segments(path, target):
    """For each process whose successful execve path == target, counts from its creation
    (or its previous successful execve) up to that execve."""
    events = strace_events(path)
    parent = {}
    for pid, sc, args, ret in events:
        if sc in ("clone", "clone3", "fork", "vfork"):
            r = retval(ret)
            if r and r > 0:
                parent[r] = (pid, sc, args[:120])
    segs, cur = [], {}
    for pid, sc, args, ret in events:
        c = cur.setdefault(pid, {"close": 0, "ebadf": 0, "close_range": [], "setfd": 0, "getfd": 0,
                                 "poll": 0, "poll_nfds": 0, "getdents64": 0, "procfd": 0, "execve": 0,
                                 "dup": 0, "ioctl_cloexec": 0, "other_fcntl": 0, "closed_fds": []})
        if sc == "close":
            c["close"] += 1
            if "EBADF" in ret:
                c["ebadf"] += 1
            else:
                c["closed_fds"].append(int(args.split(",")[0]))
        elif sc == "close_range":
            c["close_range"].append(args)
        elif sc == "fcntl":
            if "F_SETFD" in args:
                c["setfd"] += 1
            elif "F_GETFD" in args:
                c["getfd"] += 1
            else:
                c["other_fcntl"] += 1
        elif sc in ("poll", "ppoll"):
            c["poll"] += 1
            n = poll_nfds(args) or 0
            c["poll_nfds"] = max(c["poll_nfds"], n)
        elif sc == "getdents64":
            c["getdents64"] += 1
        elif sc == "openat":
            if PROCFD_RE.search(args):
                c["procfd"] += 1
        elif sc in ("dup", "dup2", "dup3"):
            c["dup"] += 1
        elif sc == "ioctl" and ("FIOCLEX" in args or "FIONCLEX" in args):
            c["ioctl_cloexec"] += 1
        elif sc in ("execve", "execveat"):
            c["execve"] += 1
            if retval(ret) == 0:
                m = re.match(r'"([^"]*)"', args) if sc == "execve" else re.match(r'[^,]+,\s*"([^"]*)"', args)
                ep = m.group(1) if m else "?"
                seg = dict(c, pid=pid, exec_path=ep, parent=parent.get(pid))
                segs.append(seg)
                cur.pop(pid)
    return [s for s in segs if s["exec_path"] == target], segs


# ---------------------------------------------------------------- main
def fa_counts(s):
    return {"close": s["close_calls"], "ebadf": s["close_ebadf"], "close_range": s["close_range_calls"],
            "ranges": s["close_ranges"], "setfd": s["fcntl_setfd_calls"], "getfd": s["fcntl_getfd_calls"],
            "poll": s["poll_calls"], "poll_nfds": s["poll_nfds_max"], "getdents64": s["getdents64_calls"],
            "procfd": s["procfd_opens"], "execve": s["exec_attempts"], "dup": s.get("dup_calls")}


def main():
    os.makedirs(LOGS, exist_ok=True)
    names = sys.argv[1:]
    base_out, _, _, _ = run(LS)
    baseline = parse_ls(base_out)
    print("baseline fds >=3 inherited from the environment:",
          {k: v for k, v in baseline.items() if k >= 3})
    results = []
    for name, prefix, secret_how, *opt in SPAWNERS:
        if names and name not in names:
            continue
        if opt == ["path"]:   # bare names: the runtime searches $PATH (several execve attempts)
            TRUE[:] = ["true"]; LS[:] = ["ls", "-l", "/proc/self/fd"]
            TGT_TRUE, TGT_LS = shutil.which("true"), shutil.which("ls")
        else:
            TRUE[:] = ["/bin/true"]; LS[:] = ["/bin/ls", "-l", "/proc/self/fd"]
            TGT_TRUE, TGT_LS = TRUE[0], LS[0]
        r = {"name": name, "cmd": prefix, "secret": secret_how}
        # A: fdaudit /bin/true
        objs, _, err, rc = fdaudit(prefix + TRUE)
        spawns = [o for o in objs if o.get("type") == "spawn"]
        r["fa_all_spawns"] = [(o["parent_comm"], o["exec_path"], o["flags"], o["strategy"]) for o in spawns]
        tgt = [o for o in spawns if o["exec_path"] == TGT_TRUE]
        r["fa_true"] = tgt[-1] if tgt else None
        r["fa_true_n"] = len(tgt)
        r["fa_target"] = TGT_TRUE
        r["fa_summary"] = [o for o in objs if o.get("type") == "summary"]
        r["fa_stderr"] = err.strip()[-600:]
        # B: strace /bin/true
        log = os.path.join(LOGS, name.replace("/", "_") + ".true.strace")
        _, serr, src, sdt = run(["strace", "-f", "-qq", "-e", "trace=" + STRACE_SET, "-o", log] + prefix + TRUE, timeout=900)
        st, allsegs = strace_segments(log, TGT_TRUE)
        r["st_true"] = st[-1] if st else None
        r["st_true_n"] = len(st)
        r["st_all_execs"] = [(s["pid"], s["exec_path"], s["parent"][1] if s["parent"] else None) for s in allsegs]
        r["strace_secs"] = round(sdt, 2)
        # C: fdaudit ls
        objs, lsout, err, rc = fdaudit(prefix + LS)
        spawns = [o for o in objs if o.get("type") == "spawn" and o["exec_path"] == TGT_LS]
        real = parse_ls(lsout)
        r["ls_real"] = {k: v for k, v in real.items() if k >= 3}
        r["ls_fa"] = {l["fd"]: l["target"] for l in spawns[-1]["leaked_fds"]} if spawns else None
        r["ls_beyond_baseline"] = {k: v for k, v in r["ls_real"].items() if baseline.get(k) != v}
        results.append(r)
        show(r)
    with open(os.path.join(HERE, "results.json"), "w") as f:
        json.dump({"baseline": baseline, "results": results}, f, indent=1, default=str)
    table(results)


KEYS = ["close", "ebadf", "close_range", "setfd", "getfd", "poll", "poll_nfds", "getdents64", "procfd", "execve", "dup"]


def show(r):
    print(f"\n=== {r['name']}  (secret: {r['secret']})")
    print("  fdaudit spawns:", r["fa_all_spawns"])
    print("  strace execs  :", r["st_all_execs"], f"({r['strace_secs']}s)")
    fa, st = r["fa_true"], r["st_true"]
    if not fa or not st:
        print("  MISSING", bool(fa), bool(st))
        return
    f = fa_counts(fa)
    diffs = []
    for k in KEYS:
        sv = len(st[k]) if k == "close_range" else st[k]
        mark = "" if f[k] == sv else "   <-- DIFF"
        if mark:
            diffs.append(k)
        print(f"  {k:12s} fdaudit={f[k]!s:8s} strace={sv!s:8s}{mark}")
    print(f"  close_ranges fdaudit={fa['close_ranges']} strace={st['close_range']}")
    print(f"  strace extra: ioctl(FIOCLEX/FIONCLEX)={st['ioctl_cloexec']} other fcntl={st['other_fcntl']} "
          f"closed fds(ok)={st['closed_fds'][:12]}{'...' if len(st['closed_fds']) > 12 else ''}")
    print(f"  strategy={fa['strategy']} close_loop_bound={fa.get('close_loop_bound')} window_ns={fa['window_ns']} "
          f"corrected={fa['window_corrected_ns']} flags={fa['flags']} leaked(true run)={[l['fd'] for l in fa['leaked_fds']]}")
    print(f"  ls run: real={r['ls_real']} fdaudit={r['ls_fa']} beyond-baseline={r['ls_beyond_baseline']}"
          f"  -> {'LEAKS MATCH' if r['ls_fa'] == r['ls_real'] else 'LEAKS DIFFER'}")
    r["diffs"] = diffs


def table(results):
    print("\n| runtime | strategy | close fa/st | EBADF fa/st | close_range fa/st | setfd fa/st | getfd fa/st | poll nfds fa/st | getdents fa/st | procfd fa/st | execve fa/st | leaked fa / real(ls) | window_ns | diffs |")
    print("|" + "---|" * 14)
    for r in results:
        fa, st = r["fa_true"], r["st_true"]
        if not fa or not st:
            print(f"| {r['name']} | MISSING fa={bool(fa)} st={bool(st)} |")
            continue
        f = fa_counts(fa)
        c = lambda k: f"{f[k]}/{len(st[k]) if k == 'close_range' else st[k]}"
        leak_fa = sorted(r["ls_fa"] or [])
        leak_real = sorted(r["ls_real"])
        print(f"| {r['name']} | {fa['strategy']} | {c('close')} | {c('ebadf')} | {c('close_range')} | {c('setfd')} | {c('getfd')} | "
              f"{f['poll_nfds']}/{st['poll_nfds']} | {c('getdents64')} | {c('procfd')} | {c('execve')} | {leak_fa} / {leak_real} | "
              f"{fa['window_ns']} | {','.join(r.get('diffs', [])) or 'none'} |")


if __name__ == "__main__":
    main()
