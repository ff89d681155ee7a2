#!/usr/bin/env python3
"""What tracing costs, as users feel it: wall time of whole commands, start-up and exit
included, untraced and under each tracer, in interleaved rounds.

Workloads:
  storm      N spawns that each close() from 3 to NOFILE's hard limit (`fdaudit __spawner
             --strategy close-loop`), the tracer started with the command (`-- CMD`)
  true       `/bin/true` alone, the tracer started with it
  bystander  an UNtraced storm of M spawns while the tracer follows an idle `sleep`
  getppid    an untraced loop of getppid() calls while the tracer follows an idle `sleep`
             (bench/trace/getppid.c, compiled on demand with cc; skipped without one)
  openclose  N open()/close() pairs without O_CLOEXEC, the tracer started with them
             (bench/trace/openclose.c, compiled on demand with cc): `--origin`'s worst case

Tracers: untraced; `fdaudit trace -q` (with --backend B when given); `trace-B` for
`trace -q --backend B` (trace-raw-tp, trace-tp, trace-fentry); `reads-B` for `trace -q --reads
--backend B`; `trace -q --no-syscalls`;
`trace -q --reads`; `trace -q --origin`; `no-failed-exec`, `trace -q` without the failed-exec
programs (FDAUDIT_FAILED_EXEC=0); bpftrace counting close() per process (installed with apt-get when
--install-bpftrace and missing); `strace -f -c`; on the bystander workloads only, the kernel's
floor for tp's hooks: `floor-tp`, a program that does nothing on syscalls/sys_enter_close,
and `floor-tp-exit`, the same plus one on sys_exit_execve (both attached by bpftrace).

Figures: the median over rounds of the wall time, with the middle half of the runs (first to
third quartile) as its spread; `vs untraced` is the ratio of medians, and for `true` the
difference in ms. Rounds interleave every tracer so drift hits them alike. For the commands
started with their tracer (storm, true), the median CPU time (user + system, of the command
and every descendant it waited for) is printed too: on a shared machine it moves far less
than wall time.

Usage (as root; on a shared machine under the lock other eBPF users take):
  flock /tmp/fdaudit-bpf.lock python3 bench/trace/overhead.py [--rounds 5] [--spawns 100]
      [--bystander-spawns 300] [--backend auto|fentry|tp|raw-tp] [--workloads storm,true,...]
      [--tracers untraced,trace,...] [--slow-rounds 1] [--json-out FILE]
"""
import argparse
import json
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time



def quartiles(xs):
    """The first and third quartiles (the spread printed beside each median)."""
    if len(xs) < 2:
        return xs[0], xs[0]
    q = statistics.quantiles(xs, n=4)
    return q[0], q[2]


def wall_ns(cmd):
    return run_ns(cmd)[0]


def run_ns(cmd):
    """Wall time of `cmd`, and the CPU time (user + system) of it and the descendants it
    waited for: less sensitive than wall time to the other load of a shared machine."""
    t0 = time.perf_counter_ns()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter_ns() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise subprocess.CalledProcessError(p.returncode, cmd)
    return wall, int((ru.ru_utime + ru.ru_stime) * 1e9)


def wait_for_line(proc, needle, timeout=60.0):
    """Reads the tracer's stderr (or stdout) until `needle` shows it is attached."""
    deadline = time.monotonic() + timeout
    stream = proc.stdout
    seen = []
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            break
        seen.append(line)
        if needle in line:
            return
    proc.kill()
    sys.exit(f"tracer never said {needle!r}: {''.join(seen)}")


def best_wall_ns(cmd, best_of):
    """The shortest wall time of `best_of` runs of `cmd`."""
    return min(wall_ns(cmd) for _ in range(best_of))


def follow_idle(tracer_cmd, needle, workload, best_of=1):
    """Starts an idle sleep, attaches the tracer to it, times `workload` (untraced; the
    shortest of `best_of` runs), stops."""
    idle = subprocess.Popen(["sleep", "1000"])
    cmd = [a.replace("{PID}", str(idle.pid)) for a in tracer_cmd]
    tr = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for_line(tr, needle)
        time.sleep(0.05)
        return best_wall_ns(workload, best_of)
    finally:
        tr.send_signal(signal.SIGINT)
        try:
            tr.wait(timeout=30)
        except subprocess.TimeoutExpired:
            tr.kill()
            tr.wait()
        idle.kill()
        idle.wait()


def bpftrace_close_counter(pid_filter):
    prog = "tracepoint:syscalls:sys_enter_close " + pid_filter + "{ @closes[pid] = count(); }"
    return prog


# The kernel's floor for the tp backend's hooks: a program that does nothing (a pid filter
# no process passes) on the same syscall tracepoints, attached by bpftrace. What any tool
# that hooks these tracepoints costs a bystander, whatever its programs do (bystander
# workloads only: bpftrace takes ~0.4 s to start).
FLOORS = {
    # sys_enter_close: every syscall takes the slow path and perf_syscall_enter's bit
    # test; close() runs the program.
    "floor-tp": ["sys_enter_close"],
    # and an exit tracepoint (as the failed-exec programs and tp's --reads attach): every
    # syscall's exit runs perf_syscall_exit's bit test too.
    "floor-tp-exit": ["sys_enter_close", "sys_exit_execve"],
}


def bpftrace_floor(tracepoints):
    return " ".join(f"tracepoint:syscalls:{tp} /pid == 1/ {{}}" for tp in tracepoints)


def main():
    # The followers are stopped with SIGINT, as Ctrl-C would. Started in the background by a
    # non-interactive shell (`cmd &`), this script inherits SIGINT ignored, its children
    # would too, and fdaudit keeps a signal its caller ignored ignored (caller.rs): each
    # follower then ran until follow_idle's 30 s timeout killed it. A handler of our own is
    # reset to the default in every child's exec.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--slow-rounds", type=int, default=1,
                    help="rounds that also run strace on the storms (it is ~100x slower)")
    ap.add_argument("--spawns", type=int, default=100)
    ap.add_argument("--bystander-spawns", type=int, default=300)
    ap.add_argument("--getppid-calls", type=int, default=2_000_000)
    ap.add_argument("--openclose-pairs", type=int, default=100_000)
    ap.add_argument("--fdaudit", default="target/release/fdaudit")
    ap.add_argument("--backend", default=None, help="passed to fdaudit trace --backend")
    ap.add_argument("--base-fdaudit", default=None,
                    help="another fdaudit (e.g. main's) measured in the same rounds as "
                         "base-trace and base-leaks-only")
    ap.add_argument("--workloads", default="storm,true,bystander,getppid")
    ap.add_argument("--tracers", default="untraced,trace,leaks-only,reads,bpftrace,strace")
    ap.add_argument("--install-bpftrace", action="store_true",
                    help="apt-get install bpftrace when it is missing")
    ap.add_argument("--best-of", type=int, default=1,
                    help="bystander workloads: each tracer's figure in a round is the shortest "
                         "of this many runs while it follows (interrupts and the other "
                         "engineers' load only ever add time)")
    ap.add_argument("--json-out", default=None)
    ap.add_argument("--label", default="", help="printed in the header (e.g. 'VM guest, TCG')")
    a = ap.parse_args()

    fd = os.path.abspath(a.fdaudit)
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    workloads = a.workloads.split(",")
    tracers = a.tracers.split(",")
    wants_bpftrace = "bpftrace" in tracers or any(t in FLOORS for t in tracers)
    if wants_bpftrace and not shutil.which("bpftrace"):
        if a.install_bpftrace:
            subprocess.run(["apt-get", "install", "-y", "-qq", "bpftrace"], check=True,
                           env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
        else:
            print("bpftrace not found (--install-bpftrace installs it): skipped", file=sys.stderr)
            tracers[:] = [t for t in tracers if t != "bpftrace" and t not in FLOORS]
    if "strace" in tracers and not shutil.which("strace"):
        print("strace not found: skipped", file=sys.stderr)
        tracers.remove("strace")
    tmp = tempfile.mkdtemp(prefix="fdaudit-overhead-")
    getppid = os.path.join(tmp, "getppid")
    if "getppid" in workloads:
        src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "getppid.c")
        if not shutil.which("cc") or subprocess.run(["cc", "-O2", "-o", getppid, src]).returncode:
            print("no C compiler: the getppid workload is skipped", file=sys.stderr)
            workloads.remove("getppid")
    openclose = os.path.join(tmp, "openclose")
    if "openclose" in workloads:
        src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "openclose.c")
        if not shutil.which("cc") or subprocess.run(["cc", "-O2", "-o", openclose, src]).returncode:
            print("no C compiler: the openclose workload is skipped", file=sys.stderr)
            workloads.remove("openclose")

    backend = ["--backend", a.backend] if a.backend else []
    trace = {
        "trace": [fd, "trace", "-q"] + backend,
        "leaks-only": [fd, "trace", "-q", "--no-syscalls"],
        "reads": [fd, "trace", "-q", "--reads"] + backend,
        "origin": [fd, "trace", "-q", "--origin"] + backend,
        # Without the failed-exec programs, the only syscall exit tracepoints of `trace`.
        "no-failed-exec": ["env", "FDAUDIT_FAILED_EXEC=0", fd, "trace", "-q"] + backend,
    }
    # trace-BACKEND (trace-raw-tp, trace-tp, trace-fentry): `trace -q --backend BACKEND`, to
    # compare backends in the same interleaved rounds.
    # reads-BACKEND: `trace -q --reads --backend BACKEND` (#24 item 3: tp's reads from the read
    # syscalls' exit tracepoints against raw-tp's sys_exit).
    for t in tracers:
        if t.startswith("trace-"):
            trace[t] = [fd, "trace", "-q", "--backend", t[len("trace-"):]]
        elif t.startswith("reads-"):
            trace[t] = [fd, "trace", "-q", "--reads", "--backend", t[len("reads-"):]]
    if a.base_fdaudit:
        base_fd = os.path.abspath(a.base_fdaudit)
        trace["base-trace"] = [base_fd, "trace", "-q"]
        trace["base-leaks-only"] = [base_fd, "trace", "-q", "--no-syscalls"]
        # Once each, after untraced, whether or not --tracers named them too.
        tracers[:] = [t for t in tracers if t not in ("base-trace", "base-leaks-only")]
        tracers[1:1] = ["base-trace", "base-leaks-only"]

    def storm(n):
        return [fd, "__spawner", "--strategy", "close-loop", "--nofile", str(hard), "-n", str(n)]

    def with_tracer(t, cmd):
        """The command run under tracer `t`, started with it."""
        if t == "untraced":
            return cmd
        if t in trace:
            return trace[t] + ["--"] + cmd
        if t == "bpftrace":
            return ["bpftrace", "-q", "-o", "/dev/null", "-c", " ".join(cmd),
                    "-e", bpftrace_close_counter("")]
        if t == "strace":
            return ["strace", "-f", "-c", "-o", "/dev/null", "--"] + cmd
        raise ValueError(t)

    def quiesce():
        """Waits (up to 5 s) until no fdaudit is left: a trace's holder child keeps the
        syscall trace events registered 2 s after it ends (fentry.rs, `ANCHOR_LINGER_S`),
        and every syscall on the machine takes the slow path meanwhile, which would tax the
        next bystander run, untraced ones included."""
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and subprocess.run(
                ["pgrep", "-x", "fdaudit"], stdout=subprocess.DEVNULL).returncode == 0:
            time.sleep(0.1)

    def bystander(t, cmd):
        """Times `cmd`, untraced, while tracer `t` follows an idle process."""
        quiesce()
        n = a.best_of
        if t == "untraced":
            return best_wall_ns(cmd, n)
        if t in trace:
            # -q also silences the note that says the tracer is attached: the records go
            # to /dev/null instead.
            quiet = [x for x in trace[t] if x != "-q"]
            return follow_idle(quiet + ["-o", "/dev/null", "-p", "{PID}"], "note: tracing", cmd,
                               n)
        if t == "bpftrace":
            return follow_idle(["bpftrace", "-e", bpftrace_close_counter("/pid == {PID}/")],
                               "Attaching", cmd, n)
        if t in FLOORS:
            return follow_idle(["bpftrace", "-e", bpftrace_floor(FLOORS[t])], "Attaching", cmd,
                               n)
        if t == "strace":
            return follow_idle(["strace", "-f", "-c", "-o", "/dev/null", "-p", "{PID}"],
                               "attached", cmd, n)
        raise ValueError(t)

    cpu = {}

    def timed(w, t, cmd):
        """Wall time of a command started with its tracer; keeps its CPU time too."""
        wall, used = run_ns(cmd)
        cpu.setdefault(w, {}).setdefault(t, []).append(used)
        return wall

    cases = {
        "storm": (lambda t: timed("storm", t, with_tracer(t, storm(a.spawns)))),
        "true": (lambda t: timed("true", t, with_tracer(t, ["/bin/true"]))),
        "bystander": (lambda t: bystander(t, storm(a.bystander_spawns))),
        "getppid": (lambda t: bystander(t, [getppid, str(a.getppid_calls)])),
        "openclose": (lambda t: timed("openclose", t,
                                      with_tracer(t, [openclose, str(a.openclose_pairs)]))),
    }
    res = {w: {t: [] for t in tracers} for w in workloads}
    load_before = os.getloadavg()
    for r in range(a.rounds):
        for w in workloads:
            for t in tracers:
                if t == "strace" and w == "storm" and r >= a.slow_rounds:
                    continue
                if t in FLOORS and w not in ("bystander", "getppid"):
                    continue
                res[w][t].append(cases[w](t))
        print(f"round {r + 1}/{a.rounds} done (load {os.getloadavg()[0]:.1f})", file=sys.stderr)
    load_after = os.getloadavg()

    print(f"machine: {platform.node()} {platform.release()} {os.cpu_count()} CPUs; NOFILE {hard}; "
          f"{a.rounds} interleaved rounds, medians of wall time"
          f"{f' (bystanders: the shortest of {a.best_of} runs each)' if a.best_of > 1 else ''}"
          f"{'; ' + a.label if a.label else ''}")
    print(f"load average (1 min) {load_before[0]:.1f} before, {load_after[0]:.1f} after; "
          f"fdaudit backend: {a.backend or 'auto'}")
    what = {
        "storm": f"{a.spawns} spawns closing 3..{hard}, tracer started with them",
        "true": "/bin/true, tracer started with it",
        "bystander": f"untraced {a.bystander_spawns}-spawn storm, tracer following an idle sleep",
        "getppid": f"untraced {a.getppid_calls} getppid(), tracer following an idle sleep",
        "openclose": f"{a.openclose_pairs} open()/close() pairs, tracer started with them",
    }
    out = {"load": [load_before[0], load_after[0]], "backend": a.backend or "auto",
           "best_of": a.best_of, "label": a.label, "results": {}}
    for w in workloads:
        print(f"\n{w}: {what[w]}")
        base = statistics.median(res[w]["untraced"]) if res[w].get("untraced") else None
        for t in tracers:
            if not res[w][t]:
                continue
            m = statistics.median(res[w][t])
            rel = ""
            if base:
                rel = f"{m / base:6.2f}x"
                if w == "true":
                    rel += f"  +{(m - base) / 1e6:.1f} ms"
            q1, q3 = quartiles(res[w][t])
            used = ""
            if cpu.get(w, {}).get(t):
                c = statistics.median(cpu[w][t])
                cbase = statistics.median(cpu[w]["untraced"]) if cpu[w].get("untraced") else None
                used = f"; CPU {c / 1e6:.1f} ms" + (f" ({c / cbase:.2f}x)" if cbase else "")
            print(f"  {t:12} {m / 1e6:10.1f} ms  {rel}   (n={len(res[w][t])}, "
                  f"middle half {q1 / 1e6:.1f}-{q3 / 1e6:.1f} ms{used})")
            out["results"].setdefault(w, {})[t] = {"median_ns": m, "q1_ns": q1, "q3_ns": q3,
                                                   "runs": res[w][t],
                                                   "cpu_ns": cpu.get(w, {}).get(t, [])}
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(out, f, indent=1)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
