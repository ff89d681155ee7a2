#!/usr/bin/env python3
"""What `fdaudit unclosed` costs (issue #40's three targets), in interleaved rounds.

Workloads:
  pairs      N open()/close() pairs (bench/unclosed/pairs.c), the tracer started with them
             (`fdaudit unclosed -o /dev/null -- pairs N`). Figures: the whole command's wall
             time, its CPU time (the command and every descendant it waited for: fdaudit's
             own included) and the loop's own clock (the hot path alone, no start-up or
             report).
  outstanding  fds held open at the report: `--holders` processes (bench/unclosed/hold.c)
             opening `--held` fds in all, after `unclosed --json -p` follows them; then
             SIGINT.
             Figures: SIGINT to the report's first byte, SIGINT to fdaudit's exit, and
             fdaudit's peak RSS (wait4's ru_maxrss). Runs once per round, untraced has no
             meaning here.
  getppid    an untraced loop of getppid() (bench/trace/getppid.c) while the tracer follows
             an idle `sleep`: what any process pays per syscall
  followed-getppid  the getppid() loop started with the tracer (`trace` and `origin`
             compared: #38's "a process that makes no fd pays nothing more than `trace`")
  bystander-pairs  the pairs loop, untraced, while the tracer follows an idle `sleep`
             (the loop's own clock): what a bystander that opens files pays

Tracers: untraced; `unclosed` (`fdaudit unclosed`); `trace` (`fdaudit trace -q`, for
followed-getppid); `origin` (`fdaudit trace -q --origin`:
pairs.c's opens have no close-on-exec, so one origin record per open, #38's target; with
--also NAME, `origin@NAME` runs that build's); the kernel's floors, programs that do nothing (bench/unclosed/floor.py):
`floor-raw` on raw_syscalls sys_enter and sys_exit (the hooks of unclosed's own pair),
`floor-raw-exit` on sys_exit alone (what a design with no sys_enter program would pay),
`floor-tp` on syscalls/sys_exit_openat and syscalls/sys_enter_close (the issue's floor: the
least any design that sees opens and closes pays); `bpftrace`, a memleak-style script
(a live map keyed by pid and fd with a user stack id, per open and close) when bpftrace is
installed, else skipped and said.

Every ratio is of medians over the interleaved rounds; the minimum is printed too.
Root; under the lock the other eBPF users take:
  flock /tmp/fdaudit-root.lock python3 bench/unclosed/run.py [--rounds 5]
      [--workloads pairs,getppid,bystander-pairs,outstanding] [--tracers untraced,unclosed,...]
      [--pairs 100000] [--held 100000 --holders 6] [--also NAME=FDAUDIT] [--prog-stats]
      [--json-out FILE]
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
import threading
import time

# The tracer-output reader trace's benchmark already has.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "trace"))
from overhead import wait_for_line  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
# --also NAME=FDAUDIT: more builds of `unclosed` (e.g. before a change), tracer NAME each.
ALSO = {}
FLOORS = {
    "floor-raw": ["raw:sys_enter", "raw:sys_exit"],
    "floor-raw-exit": ["raw:sys_exit"],
    "floor-tp": ["tp:syscalls/sys_exit_openat", "tp:syscalls/sys_enter_close"],
}
# memleak for fds: a live map keyed by (pid, fd) holding a user stack id, kept at the open's
# exit and dropped at close (bpftrace's own stack map).
BPFTRACE = """
tracepoint:syscalls:sys_exit_openat /pid == {PID} && args->ret >= 0/ {{
  @live[pid, args->ret] = ustack;
}}
tracepoint:syscalls:sys_enter_close /pid == {PID}/ {{ delete(@live[pid, args->fd]); }}
"""


def cc(src, out):
    if subprocess.run(["cc", "-O2", "-o", out, src]).returncode:
        sys.exit(f"failed to compile {src}")
    return out


def run_ns(cmd):
    """Wall time and CPU time (user + system, of it and its waited-for descendants)."""
    t0 = time.perf_counter_ns()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter_ns() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{cmd} failed: status {status:#x}")
    return wall, int((ru.ru_utime + ru.ru_stime) * 1e9)


def stop(proc):
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def quiesce():
    """Waits (up to 5 s) until no fdaudit is left (a holder child keeps the syscall trace
    events registered for a while after a trace: every syscall takes the slow path)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and subprocess.run(
            ["pgrep", "-x", "fdaudit"], stdout=subprocess.DEVNULL).returncode == 0:
        time.sleep(0.1)


class Watcher:
    """A tracer (or floor) running beside a workload: started, waited for, stopped."""

    def __init__(self, t, fd, idle_pid):
        if t in ALSO:
            t, fd = "unclosed", ALSO[t]
        if t in FLOORS:
            cmd, needle = [sys.executable, os.path.join(HERE, "floor.py")] + FLOORS[t], "attached"
        elif t == "unclosed":
            cmd, needle = [fd, "unclosed", "-o", "/dev/null", "-p", str(idle_pid)], "following"
        elif t == "origin":
            cmd, needle = [fd, "trace", "--origin", "-o", "/dev/null", "-p", str(idle_pid)], \
                "note: tracing"
        elif t == "bpftrace":
            cmd, needle = ["bpftrace", "-e", BPFTRACE.format(PID=idle_pid)], "Attaching"
        else:
            raise ValueError(t)
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        wait_for_line(self.p, needle)
        time.sleep(0.05)

    def stop(self):
        stop(self.p)


def read_ns(path):
    with open(path) as f:
        return int(f.read())


def main():
    signal.signal(signal.SIGINT, signal.default_int_handler)
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--pairs", type=int, default=100_000)
    ap.add_argument("--getppid-calls", type=int, default=2_000_000)
    ap.add_argument("--held", type=int, default=100_000, help="outstanding fds in all")
    ap.add_argument("--holders", type=int, default=6, help="processes holding them")
    ap.add_argument("--fdaudit", default="target/release/fdaudit")
    ap.add_argument("--also", action="append", default=[], metavar="NAME=FDAUDIT",
                    help="another build's `unclosed` (e.g. before a change) as tracer NAME, in "
                         "the same rounds (and in --prog-stats)")
    ap.add_argument("--workloads", default="pairs,getppid,bystander-pairs")
    ap.add_argument("--tracers", default="untraced,unclosed,floor-raw,floor-tp,bpftrace")
    ap.add_argument("--best-of", type=int, default=1,
                    help="bystander workloads: the shortest of this many runs per figure")
    ap.add_argument("--prog-stats", action="store_true",
                    help="once, after the rounds: run_time_ns/run_cnt of unclosed's programs "
                         "over one pairs run (kernel.bpf_stats_enabled)")
    ap.add_argument("--json-out", default=None)
    a = ap.parse_args()

    fd = os.path.abspath(a.fdaudit)
    workloads = a.workloads.split(",")
    tracers = a.tracers.split(",")
    for spec in a.also:
        name, _, path = spec.partition("=")
        ALSO[name] = os.path.abspath(path)
        if name not in tracers:
            tracers.insert(tracers.index("unclosed") + 1 if "unclosed" in tracers else 1, name)
        # With `origin`: the other build's `trace --origin` too, as origin@NAME.
        if "origin" in tracers:
            tracers.insert(tracers.index("origin") + 1, f"origin@{name}")
    if "bpftrace" in tracers and not shutil.which("bpftrace"):
        print("bpftrace is not installed: its comparison is skipped", file=sys.stderr)
        tracers.remove("bpftrace")
    tmp = tempfile.mkdtemp(prefix="fdaudit-ubench-")
    pairs = cc(os.path.join(HERE, "pairs.c"), os.path.join(tmp, "pairs"))
    hold = cc(os.path.join(HERE, "hold.c"), os.path.join(tmp, "hold"))
    getppid = cc(os.path.join(HERE, "..", "trace", "getppid.c"), os.path.join(tmp, "getppid"))
    clock = os.path.join(tmp, "loop-ns")

    wall, cpu, own = {}, {}, {}

    def keep(table, w, t, v):
        table.setdefault(w, {}).setdefault(t, []).append(v)

    def started_with(t, cmd):
        """`cmd` started with tracer `t` (untraced: alone; a floor: beside it)."""
        if t == "untraced":
            return run_ns(cmd)
        if t == "unclosed" or t in ALSO:
            return run_ns([ALSO.get(t, fd), "unclosed", "-o", "/dev/null", "--"] + cmd)
        if t == "trace":
            return run_ns([fd, "trace", "-q", "-o", "/dev/null", "--"] + cmd)
        if t == "origin" or t.startswith("origin@"):
            binary = ALSO[t[len("origin@"):]] if "@" in t else fd
            return run_ns([binary, "trace", "-q", "--origin", "-o", "/dev/null", "--"] + cmd)
        idle = subprocess.Popen(["sleep", "1000"])
        try:
            # A floor: attached first, the command timed beside it.
            w = Watcher(t, fd, idle.pid)
            try:
                return run_ns(cmd)
            finally:
                w.stop()
        finally:
            idle.kill()
            idle.wait()

    def beside(t, cmd):
        """`cmd`, untraced, while tracer `t` follows an idle process: the shortest of
        --best-of runs."""
        quiesce()
        if t == "untraced":
            return min(run_ns(cmd) for _ in range(a.best_of))
        idle = subprocess.Popen(["sleep", "1000"])
        try:
            w = Watcher(t, fd, idle.pid)
            try:
                return min(run_ns(cmd) for _ in range(a.best_of))
            finally:
                w.stop()
        finally:
            idle.kill()
            idle.wait()

    def pairs_case(t):
        quiesce()
        if t == "bpftrace":
            prog = BPFTRACE.replace("{PID}", "cpid").replace("{{", "{").replace("}}", "}")
            cmd = ["bpftrace", "-q", "-o", "/dev/null", "-c", f"{pairs} {a.pairs} {clock}",
                   "-e", prog]
            w, c = run_ns(cmd)
        else:
            w, c = started_with(t, [pairs, str(a.pairs), clock])
        keep(wall, "pairs", t, w)
        keep(cpu, "pairs", t, c)
        keep(own, "pairs", t, read_ns(clock))

    def bystander_pairs(t):
        best = None
        quiesce()
        idle = subprocess.Popen(["sleep", "1000"])
        try:
            w = Watcher(t, fd, idle.pid) if t != "untraced" else None
            try:
                for _ in range(a.best_of):
                    run_ns([pairs, str(a.pairs), clock])
                    ns = read_ns(clock)
                    best = ns if best is None else min(best, ns)
            finally:
                if w:
                    w.stop()
        finally:
            idle.kill()
            idle.wait()
        keep(own, "bystander-pairs", t, best)

    def getppid_case(t):
        keep(wall, "getppid", t, beside(t, [getppid, str(a.getppid_calls)])[0])

    def followed_getppid(t):
        quiesce()
        w, c = started_with(t, [getppid, str(a.getppid_calls), clock])
        keep(wall, "followed-getppid", t, w)
        keep(cpu, "followed-getppid", t, c)
        keep(own, "followed-getppid", t, read_ns(clock))

    cases = {"pairs": pairs_case, "getppid": getppid_case, "bystander-pairs": bystander_pairs,
             "followed-getppid": followed_getppid}
    load = [os.getloadavg()[0]]
    # The outstanding case per build: `unclosed` (--fdaudit) and each --also, interleaved.
    outst = {}
    for r in range(a.rounds):
        for w in workloads:
            if w == "outstanding":
                for name, binary in [("unclosed", fd)] + list(ALSO.items()):
                    outst.setdefault(name, []).append(outstanding(binary, hold, a))
                continue
            for t in tracers:
                if t == "bpftrace" and w != "pairs":
                    continue
                cases[w](t)
        load.append(os.getloadavg()[0])
        print(f"round {r + 1}/{a.rounds} done (load {load[-1]:.1f})", file=sys.stderr)

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    print(f"machine: {platform.node()} {platform.release()} {os.cpu_count()} CPUs; NOFILE hard "
          f"{hard}; {a.rounds} interleaved rounds; load average (1 min) per round: "
          + " ".join(f"{x:.1f}" for x in load))
    out = {"load": load, "rounds": a.rounds, "results": {}}
    for w in [w for w in workloads if w != "outstanding"]:
        print(f"\n{w}:")
        for name, table in (("wall", wall), ("CPU", cpu), ("loop's own clock", own)):
            res = table.get(w)
            if not res:
                continue
            base = statistics.median(res["untraced"]) if res.get("untraced") else None
            bmin = min(res["untraced"]) if res.get("untraced") else None
            print(f"  {name}:")
            for t, xs in res.items():
                m, lo = statistics.median(xs), min(xs)
                rel = f"{m / base:5.2f}x (min {lo / bmin:5.2f}x)" if base else ""
                print(f"    {t:10} median {m / 1e6:8.1f} ms  min {lo / 1e6:8.1f} ms  {rel}")
                out["results"].setdefault(w, {}).setdefault(name, {})[t] = xs
    for name, runs in outst.items():
        print(f"\noutstanding ({name}): {a.held} fds over {a.holders} process(es), "
              "SIGINT to the report")
        for key, unit, div in (("first_byte_ns", "ms", 1e6), ("exit_ns", "ms", 1e6),
                               ("maxrss_kib", "MiB", 1024)):
            xs = [o[key] for o in runs]
            print(f"  {key:14} median {statistics.median(xs) / div:8.1f} {unit}  "
                  f"min {min(xs) / div:8.1f}  max {max(xs) / div:8.1f}")
        print(f"  fds the report counted: {sorted(set(o['counted'] for o in runs))}")
        out["results"].setdefault("outstanding", {})[name] = runs
    if a.prog_stats:
        for binary in [fd] + list(ALSO.values()):
            prog_stats(binary, pairs, a.pairs)
            if "origin" in tracers:
                prog_stats(binary, pairs, a.pairs, "origin")
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(out, f, indent=1)
    shutil.rmtree(tmp, ignore_errors=True)


def outstanding(fd, hold, a):
    """One run: holders follow, then open their share of --held fds; SIGINT; timings."""
    quiesce()
    share = [a.held // a.holders + (1 if i < a.held % a.holders else 0)
             for i in range(a.holders)]
    hs = [subprocess.Popen([hold, str(n)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
          for n in share]
    pids = [str(h.pid) for h in hs]
    # With --json the notes are records on stdout too.
    tr = subprocess.Popen([fd, "unclosed", "--json", "--top", "3", "-p"] + pids,
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        wait_for_line(tr, "following")
        for h in hs:
            h.stdin.write(b"x")
            h.stdin.flush()
        for h in hs:
            if h.stdout.readline() != b"ready\n":
                sys.exit("a holder failed to open its fds (NOFILE?)")
        # At least one periodic read (every 250 ms) of the full set before the report.
        time.sleep(0.6)
        first = {}
        chunks = []

        def reader():
            c = tr.stdout.read(1)
            first["t"] = time.perf_counter_ns()
            chunks.append(c + tr.stdout.read())

        th = threading.Thread(target=reader)
        th.start()
        t0 = time.perf_counter_ns()
        tr.send_signal(signal.SIGINT)
        _, status, ru = os.wait4(tr.pid, 0)
        t_exit = time.perf_counter_ns()
        th.join()
        tr.returncode = status
        text = "".join(chunks)
        recs = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
        counted = sum(r.get("outstanding", 0) for r in recs if r.get("type") == "unclosed_process")
        return {"first_byte_ns": first.get("t", t_exit) - t0, "exit_ns": t_exit - t0,
                "maxrss_kib": ru.ru_maxrss, "status": status, "counted": counted,
                "report_head": text[:2000]}
    finally:
        for h in hs:
            h.stdin.close()
            h.wait()


def prog_stats(fd, pairs, n, mode="unclosed"):
    """run_time_ns / run_cnt of fdaudit's programs over one `unclosed -- pairs N` run (mode
    "origin": `trace -q --origin -- pairs N`)."""
    old = subprocess.run(["sysctl", "-n", "kernel.bpf_stats_enabled"], capture_output=True,
                         text=True).stdout.strip()
    subprocess.run(["sysctl", "-q", "kernel.bpf_stats_enabled=1"], check=True)
    done = tempfile.mktemp(prefix="fdaudit-ubench-done-")
    try:
        tracer = ["unclosed"] if mode == "unclosed" else ["trace", "-q", "--origin"]
        p = subprocess.Popen([fd] + tracer + ["-o", "/dev/null", "--", "sh", "-c",
                              f"sleep 0.5; {pairs} {n}; touch {done}; sleep 2"])
        while not os.path.exists(done):
            time.sleep(0.05)
        progs = json.loads(subprocess.run(["bpftool", "prog", "show", "--json"],
                                          capture_output=True, text=True).stdout)
        p.wait()
    finally:
        subprocess.run(["sysctl", "-q", f"kernel.bpf_stats_enabled={old or 0}"])
        if os.path.exists(done):
            os.unlink(done)
    print(f"\n{fd}: per-program run time over one `{' '.join(tracer)} -- pairs {n}` (bpf_stats; "
          f"the whole machine's syscalls run {mode}_enter/exit too):")
    for q in progs:
        if q.get("run_cnt") and q.get("name", "").startswith(("unclosed", "origin", "tp_",
                                                              "sched")):
            print(f"  {q['name']:24} run_cnt {q['run_cnt']:9}  run_time_ns {q['run_time_ns']:11}"
                  f"  {q['run_time_ns'] / q['run_cnt']:7.0f} ns/run")


if __name__ == "__main__":
    main()
