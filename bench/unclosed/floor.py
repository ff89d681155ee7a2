#!/usr/bin/env python3
"""The kernel's floor for a set of hooks: a program that does nothing (`r0 = 0; exit`) on
each, loaded and attached with bpf(2) alone (no bpftrace, no libbpf), held until SIGINT or
SIGTERM. What any tool on those hooks costs before its programs do any work.

  floor.py HOOK...     prints "attached" once every program is attached
  HOOK: raw:NAME       a raw tracepoint (raw:sys_enter, raw:sys_exit: every syscall)
        tp:CAT/NAME    a tracepoint (tp:syscalls/sys_exit_openat: that syscall only)
x86_64 and aarch64 (the syscall numbers below); root.
"""
import ctypes
import os
import platform
import signal
import struct
import sys

NR = {"x86_64": (321, 298), "aarch64": (280, 241)}[platform.machine()]
BPF_PROG_LOAD, BPF_RAW_TRACEPOINT_OPEN = 5, 17
PROG_TRACEPOINT, PROG_RAW_TRACEPOINT = 5, 17
PERF_TYPE_TRACEPOINT = 2
PERF_EVENT_IOC_ENABLE, PERF_EVENT_IOC_SET_BPF = 0x2400, 0x40042408
# r0 = 0; exit
NOTHING = bytes([0xB7, 0, 0, 0, 0, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0])

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def check(r, what):
    if r < 0:
        e = ctypes.get_errno()
        sys.exit(f"floor.py: {what}: {os.strerror(e)}")
    return r


def bpf(cmd, attr):
    buf = ctypes.create_string_buffer(attr, 128)
    return check(libc.syscall(NR[0], cmd, buf, 128), f"bpf({cmd})")


def load(prog_type):
    insns = ctypes.create_string_buffer(NOTHING, len(NOTHING))
    lic = ctypes.create_string_buffer(b"GPL")
    attr = struct.pack("IIQQIIQII16s", prog_type, len(NOTHING) // 8, ctypes.addressof(insns),
                       ctypes.addressof(lic), 0, 0, 0, 0, 0, b"floor")
    return bpf(BPF_PROG_LOAD, attr)


def attach(hook):
    kind, _, name = hook.partition(":")
    if kind == "raw":
        prog = load(PROG_RAW_TRACEPOINT)
        cname = ctypes.create_string_buffer(name.encode())
        return [prog, bpf(BPF_RAW_TRACEPOINT_OPEN, struct.pack("QI", ctypes.addressof(cname), prog))]
    if kind == "tp":
        prog = load(PROG_TRACEPOINT)
        with open(f"/sys/kernel/tracing/events/{name}/id") as f:
            tp_id = int(f.read())
        # One event on CPU 0 (as libbpf does): the program runs on every CPU's hits.
        attr = ctypes.create_string_buffer(
            struct.pack("IIQQQQQI", PERF_TYPE_TRACEPOINT, 128, tp_id, 1, 0, 0, 0, 1), 128)
        pfd = check(libc.syscall(NR[1], attr, -1, 0, -1, 0), f"perf_event_open({name})")
        check(libc.ioctl(pfd, PERF_EVENT_IOC_SET_BPF, prog), f"PERF_EVENT_IOC_SET_BPF({name})")
        check(libc.ioctl(pfd, PERF_EVENT_IOC_ENABLE, 0), f"PERF_EVENT_IOC_ENABLE({name})")
        return [prog, pfd]
    sys.exit(f"floor.py: {hook}: neither raw:NAME nor tp:CAT/NAME")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    # Started in the background by a non-interactive shell, SIGINT comes ignored: ours.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    held = [fd for hook in sys.argv[1:] for fd in attach(hook)]
    print("attached", flush=True)
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    for fd in held:
        os.close(fd)


if __name__ == "__main__":
    main()
