//! The fentry backend: loading, attaching and probing its programs, and detaching them
//! without making fdaudit's caller wait for the kernel's trampoline removal.

use aya::{programs::Program, Ebpf};

use aya_obj::generated::{
    bpf_attach_type, bpf_prog_type, perf_event_attr, perf_type_id, PERF_FLAG_FD_CLOEXEC,
};

use super::{
    raw, FentrySpec, LoadError, FAILED_EXEC_PROGRAMS, FENTRY_PROGRAMS, SYSCALL_PREFIX, TP_PROGRAMS,
    TP_READ_PROGRAMS,
};
use crate::engine::{btf::Btf, handover};

/// Loads one fentry-backend program against `btf` and attaches it.
fn load_and_attach_fentry(
    prog: &mut Program,
    spec: &FentrySpec,
    btf: &aya::Btf,
) -> Result<(), LoadError> {
    let function = spec.function();
    let fail = |source| LoadError::Fentry {
        name: spec.name,
        function: function.clone(),
        source,
    };
    match prog {
        Program::FEntry(p) => {
            p.load(&function, btf).map_err(fail)?;
            p.attach().map_err(fail)?;
        }
        Program::FExit(p) => {
            p.load(&function, btf).map_err(fail)?;
            p.attach().map_err(fail)?;
        }
        _ => return Err(LoadError::MissingProgram(spec.name)),
    }
    Ok(())
}

/// Loads and attaches every fentry-backend program (the read ones only with `reads`), one
/// after the other: each attach rewrites the hooked function's entry under ftrace's lock
/// anyway, and attaching from one thread per program was no faster in a 6.12 guest
/// (docs/performance.md).
pub fn attach_fentry(ebpf: &mut Ebpf, btf: &aya::Btf, reads: bool) -> Result<(), LoadError> {
    for spec in FENTRY_PROGRAMS.iter().filter(|p| reads || !p.reads_only) {
        let prog = ebpf
            .program_mut(spec.name)
            .ok_or(LoadError::MissingProgram(spec.name))?;
        load_and_attach_fentry(prog, spec, btf)?;
    }
    Ok(())
}

/// Detaches and unloads the fentry-backend programs (all of them, or the ones a failed
/// [`attach_fentry`] attached), one thread each: removing a trampoline waits for RCU
/// grace periods, which concurrent removals share (one after the other, they add up:
/// docs/performance.md).
pub fn detach_fentry(ebpf: &mut Ebpf) {
    std::thread::scope(|s| {
        for (name, prog) in ebpf.programs_mut() {
            if !FENTRY_PROGRAMS.iter().any(|p| p.name == name) {
                continue;
            }
            // Not loaded is the usual case after a failure: nothing to undo.
            match prog {
                Program::FEntry(p) => drop(s.spawn(move || p.unload())),
                Program::FExit(p) => drop(s.spawn(move || p.unload())),
                _ => {}
            }
        }
    });
}

/// Whether the kernel accepts a tracing (fentry) program on [`SYSCALL_PREFIX`]`close`,
/// found by loading the smallest one (`r0 = 0; exit`): a refusal costs one syscall, where
/// trying the real programs first needs aya's own parse of vmlinux BTF and
/// aya's `is_program_supported` parses it too. Err is the reason, in one line.
pub fn probe_fentry(btf: &Btf) -> Result<(), String> {
    let function = format!("{SYSCALL_PREFIX}close");
    let id = btf
        .func_id(&function)
        .ok_or_else(|| format!("{function} is not in the kernel BTF"))?;
    let fentry = Some((bpf_attach_type::BPF_TRACE_FENTRY as u32, id));
    raw::load_minimal(bpf_prog_type::BPF_PROG_TYPE_TRACING, fentry)
        .map(drop)
        .map_err(|e| {
            format!("the kernel refuses tracing programs on {function} (BPF_PROG_LOAD: {e})")
        })
}

/// Leaves every link to a child that closes them once fdaudit has exited, all at once
/// ([`close_at_once`]).
///
/// Removing a BPF trampoline waits for RCU-tasks grace periods under ftrace's lock, one
/// trampoline after the other, and closing the last fd of a link does that removal;
/// detaching a program from a syscall trace event (a perf event) waits for two grace
/// periods too: on fdaudit's way out, its caller would wait for all of them, and even the
/// raw tracepoints' quick detach is part of every exit (figures: docs/performance.md). So
/// a child that holds a copy of every BPF fd (and nothing else: not the caller's pipes)
/// waits for fdaudit to exit, closes them (the kernel detaches as the last copy goes) and
/// keeps the trace events registered a little longer ([`hand_bpf_fds_to_a_child`]). Until
/// then those programs stay attached, writing into maps nobody reads any more. Falls back to
/// [`detach_fentry`] when the child cannot be made.
pub fn detach_after_exit(ebpf: &mut Ebpf) {
    let ids = trace_event_ids(ebpf);
    if hand_bpf_fds_to_a_child(&ids).is_err() {
        detach_fentry(ebpf);
    }
}

/// How long the child of [`detach_after_exit`] keeps its anchors (see there) once it has
/// closed the BPF fds: long enough that a trace started soon after this one (a loop in a
/// script, the next round of a benchmark) finds them and hands its own on, short enough
/// that the syscall slow path a registered syscall trace event costs every process
/// (docs/performance.md) does not outlive fdaudit by much.
const ANCHOR_LINGER_S: i64 = 2;

/// The tracefs ids of the syscall trace events this session's tracepoint programs are
/// loaded for (the tp backend's, the failed-exec ones): what the child of
/// [`detach_after_exit`] anchors.
fn trace_event_ids(ebpf: &Ebpf) -> Vec<u64> {
    let tracepoints = TP_PROGRAMS
        .iter()
        .chain(&TP_READ_PROGRAMS)
        .map(|s| (s.name, s.tracepoint))
        .chain(FAILED_EXEC_PROGRAMS);
    tracepoints
        .filter(|(name, _)| {
            matches!(ebpf.program(name), Some(Program::TracePoint(p)) if p.fd().is_ok())
        })
        .filter_map(|(_, tracepoint)| {
            let id = super::tp::syscall_event_file(tracepoint, "id");
            std::fs::read_to_string(id).ok()?.trim().parse().ok()
        })
        .collect()
}

/// A disabled perf event on trace event `id`, with no program: it keeps the event's
/// perf registration (its `perf_refcount`) alive, and costs nothing while disabled. Only
/// a raw syscall: called between fork and _exit.
fn open_anchor(id: u64) -> i32 {
    // SAFETY: a zeroed perf_event_attr is valid; perf_event_open reads `size` bytes of it.
    let mut attr: perf_event_attr = unsafe { std::mem::zeroed() };
    attr.type_ = perf_type_id::PERF_TYPE_TRACEPOINT as u32;
    attr.size = std::mem::size_of::<perf_event_attr>() as u32;
    attr.config = id;
    attr.set_disabled(1);
    // SAFETY: the attr outlives the call; pid -1 with cpu 0 is any task on CPU 0.
    unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const perf_event_attr,
            -1,
            0,
            -1,
            PERF_FLAG_FD_CLOEXEC as libc::c_ulong,
        ) as i32
    }
}

/// The stack of each closer of [`close_at_once`]: it makes one syscall.
const CLOSER_STACK: usize = 16 << 10;

/// Closes `fds` (BPF links) all at once, each in a process of its own that shares this
/// one's memory and fd table (`clone(CLONE_VM | CLONE_FILES)`), and waits for them.
/// Releasing a tracepoint program's link waits for an RCU tasks-trace grace period
/// (`perf_event_detach_bpf_prog`), and until its turn the program stays attached: closed
/// one after the other, a session's links wait for one grace period each, during which
/// its programs still run on every process's syscalls; closed at once, they share them
/// (docs/performance.md). `stacks`
/// holds [`CLOSER_STACK`] bytes per fd. Only raw syscalls: called between fork and
/// _exit.
unsafe fn close_at_once(fds: &[i32], stacks: &mut [u8]) {
    extern "C" fn closer(fd: *mut libc::c_void) -> libc::c_int {
        // SAFETY: closing an fd of the shared table; a raw syscall, as after fork.
        unsafe { libc::syscall(libc::SYS_close, fd as libc::c_long) };
        0
    }
    let mut started = 0;
    for (&fd, stack) in fds.iter().zip(stacks.chunks_exact_mut(CLOSER_STACK)) {
        // The top of this closer's stack, 16-byte aligned (the stack grows down).
        let top = stack.as_mut_ptr_range().end as usize & !15;
        // SAFETY: `closer` only makes a syscall on its own stack, inside `stacks`, which
        // outlives it (it is waited for below); SIGCHLD makes it a waitable child.
        let pid = unsafe {
            libc::clone(
                closer,
                top as *mut libc::c_void,
                libc::CLONE_VM | libc::CLONE_FILES | libc::SIGCHLD,
                fd as isize as *mut libc::c_void,
            )
        };
        match pid {
            // SAFETY: closing an fd this process owns, here rather than in a closer.
            -1 => unsafe {
                libc::close(fd);
            },
            _ => started += 1,
        }
    }
    for _ in 0..started {
        // SAFETY: reaping this process's own children (the closers are its only ones).
        unsafe { libc::waitpid(-1, std::ptr::null_mut(), 0) };
    }
}

/// Where this process's argument strings are (`/proc/self/stat`'s arg_start and arg_end).
fn arg_area() -> Option<(usize, usize)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields 48 and 49; the 3rd is the first after the command name's ')'.
    let mut f = stat.get(stat.rfind(')')? + 2..)?.split(' ').skip(45);
    let start = f.next()?.parse().ok()?;
    let end: usize = f.next()?.parse().ok()?;
    (end > start).then_some((start, end))
}

/// The hand-off child's name, in `ps` and `pgrep -f`: not fdaudit's command line, whose
/// command it no longer follows (a `pgrep -f CMD` that finds CMD after the trace ended would
/// send a signal to it), and not `fdaudit` alone in `comm`.
const HAND_OFF_TITLE: &[u8] = b"fdaudit: detaching";
const HAND_OFF_COMM: &std::ffi::CStr = c"fdaudit-detach";

/// Gives the hand-off child its own name: overwrites its copy of the argument strings,
/// NUL-padded (what /proc/PID/cmdline reads), and its `comm`. Only memory writes and
/// prctl: called between fork and _exit.
unsafe fn retitle(args: Option<(usize, usize)>) {
    if let Some((start, end)) = args {
        let area = start as *mut u8;
        for i in 0..end - start - 1 {
            // SAFETY: the argument strings are this process's own writable memory (the
            // top of its stack), from `arg_area`; the last byte stays their final NUL.
            unsafe { *area.add(i) = HAND_OFF_TITLE.get(i).copied().unwrap_or(0) };
        }
    }
    // SAFETY: a NUL-terminated name, copied by the kernel.
    unsafe { libc::prctl(libc::PR_SET_NAME, HAND_OFF_COMM.as_ptr()) };
}

/// Forks a child that keeps this process's BPF fds open until this process exits.
///
/// Closing the last perf event of a syscall trace event unregisters it, and the kernel
/// then waits for two RCU grace periods while it holds `event_mutex`
/// (`perf_trace_event_unreg`), the mutex every perf_event_open of a trace event takes:
/// a trace started meanwhile (its tp programs, its failed-exec ones) waited for it
/// (docs/performance.md). So the child first opens an anchor on each
/// of those trace events ([`open_anchor`]), closes its BPF fds once fdaudit has exited
/// (the programs detach; the events stay registered, so nothing waits), and keeps the
/// anchors [`ANCHOR_LINGER_S`] more: a trace that starts meanwhile finds each event
/// registered (its perf_event_open only takes a reference) and its own child takes the
/// registration over. Only the last child unregisters, one event at a time and never while
/// another trace is starting ([`handover::drop_anchors`]).
fn hand_bpf_fds_to_a_child(ids: &[u64]) -> std::io::Result<()> {
    let mut gone = [0i32; 2];
    // SAFETY: pipe2 fills the array we own.
    if unsafe { libc::pipe2(gone.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // Every fd, BPF objects apart, listed before the fork (the child may only make
    // async-signal-safe calls).
    let (mut others, mut bpf_fds, mut links) = (Vec::new(), Vec::new(), Vec::new());
    for e in std::fs::read_dir("/proc/self/fd")?.flatten() {
        let Some(fd) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let target = std::fs::read_link(e.path()).unwrap_or_default();
        let target = target.to_string_lossy();
        if target == "anon_inode:bpf_link" {
            links.push(fd);
        } else if target.starts_with("anon_inode:bpf") {
            bpf_fds.push(fd);
        } else if fd != gone[0] {
            others.push(fd);
        }
    }
    let mut stacks = vec![0u8; links.len() * CLOSER_STACK];
    let mut anchors = vec![-1i32; ids.len()];
    let lock = handover::into_raw((!ids.is_empty()).then(handover::open_lock).flatten());
    // Its number may be the listing's own directory fd, in `others`: the child keeps it.
    others.retain(|&fd| fd != lock);
    let args = arg_area();
    // SAFETY: the child only writes its own copy of the argument strings and memory
    // allocated before the fork, and calls prctl, setsid, close, read, perf_event_open,
    // flock, nanosleep and _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: async-signal-safe calls on fds this process owns.
        unsafe {
            retitle(args);
            libc::setsid(); // out of the terminal's process group: Ctrl-C is not for it
            for &fd in &others {
                libc::close(fd);
            }
            for (anchor, &id) in anchors.iter_mut().zip(ids) {
                *anchor = open_anchor(id);
            }
            let mut b = 0u8;
            // EOF once every copy of the write end is closed: when fdaudit has exited.
            while libc::read(gone[0], (&mut b as *mut u8).cast(), 1) != 0
                && *libc::__errno_location() == libc::EINTR
            {}
            close_at_once(&links, &mut stacks);
            for &fd in &bpf_fds {
                libc::close(fd);
            }
            if anchors.iter().any(|&a| a >= 0) {
                let linger = libc::timespec {
                    tv_sec: ANCHOR_LINGER_S,
                    tv_nsec: 0,
                };
                libc::nanosleep(&linger, std::ptr::null_mut());
                handover::drop_anchors(&anchors, lock);
            }
            libc::_exit(0);
        }
    }
    // SAFETY: our copies of the read end and of the lock, which are the child's.
    unsafe {
        libc::close(gone[0]);
        if lock >= 0 {
            libc::close(lock);
        }
    }
    crate::engine::pause::at("hand-off");
    Ok(())
}
