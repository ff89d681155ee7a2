#!/usr/bin/env python3
"""What `fdaudit watch` costs per spawn (#44): the agent's own CPU and its kernel programs'
run time, while a C loop (bench/watch/spawnloop.c, compiled on demand with cc) spawns
/bin/true N times at full speed, one at a time.

For each round, each binary and each mode (default: leaks only; `syscalls`: --syscalls):
starts `BIN watch --scan-interval 0` on a free port, runs a warm-up of 200 spawns (the
first spawns pay one-off work: the probe-cost calibration, first allocations), then reads

  - the agent's utime + stime (/proc/PID/stat, clock ticks) and its threads' run time
    (/proc/PID/task/*/schedstat, ns: finer than a tick),
  - every attached program's run_cnt and run_time_ns (kernel.bpf_stats_enabled=1,
    `bpftool prog show --json`), turned on for the run and restored after,

runs the N spawns, waits for the agent's 200 ms tick to take the last records, reads them
again and stops the agent (SIGTERM). Prints µs per spawn: userspace (schedstat and
utime+stime), and per run of each program that ran. Rounds interleave binaries and modes
(A/B/A/B); the summary gives min and median over rounds, and the load average before and
after.

Usage (root; under the lock every eBPF user takes here):
  flock -o /tmp/fdaudit-root.lock python3 bench/watch/spawn.py [--rounds 3] [--spawns 3000]
      [--modes default,syscalls] [BIN...]        (default BIN: target/release/fdaudit)
"""
import argparse
import glob
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TCK = os.sysconf("SC_CLK_TCK")


def build_loop():
    out = os.path.join(tempfile.gettempdir(), "fdaudit-spawnloop")
    src = os.path.join(HERE, "spawnloop.c")
    if not os.path.exists(out) or os.path.getmtime(out) < os.path.getmtime(src):
        subprocess.run(["cc", "-O2", "-o", out, src], check=True)
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    # Fields 14 and 15 of stat (utime, stime); `rest` starts at field 3.
    return int(rest[11]) + int(rest[12])


def run_ns(pid):
    total = 0
    for p in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            with open(p) as f:
                total += int(f.read().split()[0])
        except OSError:
            pass  # a thread that ended between the glob and the read
    return total


def prog_stats():
    out = subprocess.run(["bpftool", "prog", "show", "--json"], check=True,
                         capture_output=True, text=True).stdout
    return {p["id"]: (p.get("name", "?"), p.get("run_cnt", 0), p.get("run_time_ns", 0))
            for p in json.loads(out)}


def one_run(binary, mode, spawns, loop):
    port = free_port()
    cmd = [binary, "watch", "--listen", f"127.0.0.1:{port}", "--scan-interval", "0"]
    if mode == "syscalls":
        cmd.append("--syscalls")
    err = tempfile.TemporaryFile()
    agent = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.time() + 30
        while True:
            err.seek(0)
            if b"watching" in err.read():
                break
            if agent.poll() is not None or time.time() > deadline:
                err.seek(0)
                sys.exit(f"{binary} watch did not start: {err.read().decode(errors='replace')}")
            time.sleep(0.05)
        subprocess.run([loop, "200"], check=True)
        time.sleep(0.5)
        t0, n0, p0 = cpu_ticks(agent.pid), run_ns(agent.pid), prog_stats()
        subprocess.run([loop, str(spawns)], check=True)
        time.sleep(0.5)
        t1, n1, p1 = cpu_ticks(agent.pid), run_ns(agent.pid), prog_stats()
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=30)
    progs = {}
    for pid_, (name, cnt, ns) in p1.items():
        before = p0.get(pid_, (name, 0, 0))
        dc, dn = cnt - before[1], ns - before[2]
        if dc > 0:
            progs[name] = (dc, dn)
    return {
        "user_us": (n1 - n0) / 1e3 / spawns,
        "ticks_us": (t1 - t0) * 1e6 / TCK / spawns,
        # ns per run, and runs per spawn.
        "progs": {k: (dn / dc / 1e3, dc / spawns) for k, (dc, dn) in progs.items()},
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--spawns", type=int, default=3000)
    ap.add_argument("--modes", default="default,syscalls")
    ap.add_argument("bins", nargs="*", default=["target/release/fdaudit"])
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root (loads eBPF programs)")
    loop = build_loop()
    modes = a.modes.split(",")
    with open("/proc/sys/kernel/bpf_stats_enabled") as f:
        old = f.read().strip()
    with open("/proc/loadavg") as f:
        load0 = f.read().split()[:3]
    results = {}
    try:
        with open("/proc/sys/kernel/bpf_stats_enabled", "w") as f:
            f.write("1")
        for r in range(a.rounds):
            for b in a.bins:
                for m in modes:
                    res = one_run(b, m, a.spawns, loop)
                    results.setdefault((b, m), []).append(res)
                    progs = " ".join(f"{k}={v[0]:.1f}x{v[1]:.2f}"
                                     for k, v in sorted(res["progs"].items()))
                    print(f"round {r + 1} {b} {m}: user {res['user_us']:.1f} us/spawn "
                          f"(utime+stime {res['ticks_us']:.1f}); kernel us/run x runs/spawn: "
                          f"{progs}", flush=True)
    finally:
        with open("/proc/sys/kernel/bpf_stats_enabled", "w") as f:
            f.write(old)
    with open("/proc/loadavg") as f:
        load1 = f.read().split()[:3]
    print(f"\n{a.spawns} spawns of /bin/true per run, {a.rounds} rounds; "
          f"load {' '.join(load0)} before, {' '.join(load1)} after")
    print("binary mode: user us/spawn min/median (utime+stime median); "
          "program us/run min/median")
    for (b, m), rs in results.items():
        us = [x["user_us"] for x in rs]
        ticks = statistics.median(x["ticks_us"] for x in rs)
        names = sorted({k for x in rs for k in x["progs"]})
        per = []
        for n in names:
            v = [x["progs"][n][0] for x in rs if n in x["progs"]]
            per.append(f"{n} {min(v):.1f}/{statistics.median(v):.1f}")
        print(f"{b} {m}: {min(us):.1f}/{statistics.median(us):.1f} ({ticks:.1f}); "
              + ", ".join(per))


if __name__ == "__main__":
    main()
