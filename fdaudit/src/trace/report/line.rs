//! The line printed for each spawn as it happens.

use super::LeakPolicy;
use crate::engine::{
    flags::SpawnFlags,
    origin::{FoundBy, Origin},
    spawn::Spawn,
};
use crate::output::{self, color::Paint, fmt_ns, table::Term};

/// What a strategy costs, as a colour: close_range is the cheap, correct way; the sweeps
/// whose cost grows with NOFILE are red, those that grow with the fds open yellow.
pub fn strategy_paint(s: &str) -> Option<Paint> {
    match s {
        "close-range" => Some(Paint::Good),
        "close-loop" | "fcntl-scan" | "poll-scan" => Some(Paint::Bad),
        "procfd-walk" => Some(Paint::Warn),
        _ => None,
    }
}

/// One line for a spawn, as it happens; coloured when `term` takes colour. The fds in
/// `policy`'s baseline are shown apart.
pub fn spawn_line(s: &Spawn, policy: &LeakPolicy, term: Term) -> String {
    let mut line = exec_part(s, term);
    if let Some(tid) = s.exec_tid {
        line.push_str(&format!(" (exec by thread {tid})"));
    }
    if let Some(c) = s.identity.container_label() {
        line.push_str(&format!(" in {c}"));
    }
    if s.argv.len() > 1 {
        line.push_str(&args_part(s));
    }
    if s.window_ns > 0 {
        line.push_str(&format!(
            "  window {} (untraced ~{})",
            fmt_ns(s.window_ns as f64),
            fmt_ns(s.window_corrected_ns as f64)
        ));
    }
    if !s.flags.contains(SpawnFlags::NO_SYSCALLS) {
        line.push_str(&strategy_part(s, term));
    }
    let leaks = if s.flags.transient() && s.leaked_count > 0 {
        // Passed on to the next image, whose own line says what crossed.
        let why = if s.flags.contains(SpawnFlags::OWN_IMAGE) {
            "the runtime's own helper: what its next exec gets is judged there"
        } else {
            "closed or passed on by its next exec"
        };
        format!(
            "  {} {why}",
            term.paint(&format!("transient {}:", s.leaked_count), Paint::Warn),
        )
    } else if s.leaked_count > 0 {
        leaks_part(s, policy, term)
    } else {
        String::new()
    };
    match &s.boundary {
        Some(b) if !leaks.contains("CRITICAL") => line.push_str(&format!("  crossed {b}")),
        _ => {}
    }
    line.push_str(&leaks);
    if !s.flags.is_empty() {
        line.push_str(&format!(
            "  [{}]",
            s.flags.names().collect::<Vec<_>>().join(",")
        ));
    }
    line
}

/// `parent[ppid] -> pid path`, or what failed when the exec did not succeed.
fn exec_part(s: &Spawn, term: Term) -> String {
    let parent = s.parent_comm.escaped();
    if s.exec_ok {
        return format!(
            "{parent}[{}] -> {} {}",
            s.parent_pid,
            s.pid,
            s.exec_path.escaped()
        );
    }
    let path = if s.exec_path.is_empty() {
        String::new()
    } else {
        format!(" {}", s.exec_path.escaped())
    };
    let errno = match (s.exec_error, s.exec_errno) {
        (Some(name), _) => format!(": {name}"),
        (None, Some(n)) => format!(": errno {n}"),
        (None, None) => String::new(),
    };
    format!(
        "{parent}[{}] -> {} {}{path}{errno} ({}), exited",
        s.parent_pid,
        s.pid,
        term.paint("EXEC FAILED", Paint::Bad),
        crate::output::count(s.exec_attempts, "attempt", "attempts")
    )
}

/// ` (arg1 arg2 …)`: the arguments after argv[0], escaped, `''` for an empty one.
fn args_part(s: &Spawn) -> String {
    let args: Vec<String> = s.argv[1..]
        .iter()
        .map(|a| {
            if a.is_empty() {
                "''".to_owned()
            } else {
                output::escape_bytes(a)
            }
        })
        .collect();
    format!(" ({})", args.join(" "))
}

/// `  strategy to bound: counts`: how the child closed fds before exec.
fn strategy_part(s: &Spawn, term: Term) -> String {
    let name = s.strategy.as_str();
    let shown = match strategy_paint(name) {
        Some(p) => term.paint(name, p),
        None => name.to_string(),
    };
    let mut part = format!("  {shown}");
    if let Some(b) = s.close_loop_bound {
        part.push_str(&format!(" to {b}"));
    }
    let counts = window_counts(s);
    if !counts.is_empty() {
        part.push_str(": ");
        part.push_str(&counts.join(", "));
    }
    part
}

/// `  LEAKED n: fd kind target, …`: the fds that crossed the exec; those the traced
/// command itself inherited apart, by number only (the baseline note named them):
/// `  inherited 2: 10, 251`.
fn leaks_part(s: &Spawn, policy: &LeakPolicy, term: Term) -> String {
    let inherited: Vec<String> = s
        .leaked_fds
        .iter()
        .filter(|f| policy.in_baseline(f))
        .map(|f| f.fd.to_string())
        .collect();
    let new = s.leaked_count as usize - inherited.len();
    let fds: Vec<String> = s
        .leaked_fds
        .iter()
        .filter(|f| !policy.in_baseline(f))
        .map(|f| match (f.family, f.protocol) {
            (Some(fam), Some(p)) => {
                format!("{} {} {fam} {p} {}", f.fd, f.kind, f.target.escaped())
            }
            _ if f.deleted => format!("{} {} {} (deleted)", f.fd, f.kind, f.target.escaped()),
            _ => format!("{} {} {}", f.fd, f.kind, f.target.escaped()),
        })
        .zip(s.leaked_fds.iter().filter(|f| !policy.in_baseline(f)))
        .map(|(text, f)| match &f.origin {
            Some(o) => format!("{text} ({})", origin_brief(o)),
            None => text,
        })
        .collect();
    let mut part = String::new();
    if new > 0 {
        let leaked = match &s.boundary {
            Some(b) => term.paint(
                &format!("CRITICAL: LEAKED {new} across a boundary ({b}):"),
                Paint::Alarm,
            ),
            None => term.paint(&format!("LEAKED {new}:"), Paint::Alarm),
        };
        part = format!("  {leaked} {}", fds.join(", "));
    }
    if !inherited.is_empty() {
        part.push_str(&format!(
            "  inherited {}: {}",
            inherited.len(),
            inherited.join(", ")
        ));
    }
    part
}

/// `openat by o22[18864] at open_hostname+0x1d < __open+0x51`: the call and its innermost
/// frames (the caller first; a frame found by scanning the stack says so), or
/// `origin unknown: before tracing` / `origin unknown: not seen (REASON)`. An fd made
/// inheritable after its creation names both: `opened by openat(O_CLOEXEC) by p[7] at …;
/// made inheritable by ioctl(FIONCLEX) by p[7] at …`.
pub fn origin_brief(o: &Origin) -> String {
    let c = match o {
        Origin::Known(c) => c,
        Origin::Unknown {
            unknown,
            reason: Some(r),
        } => {
            return format!(
                "origin unknown: {unknown} ({})",
                output::escape_bytes(r.as_bytes())
            )
        }
        Origin::Unknown { unknown, .. } => return format!("origin unknown: {unknown}"),
    };
    match &c.created_by {
        Some(made) => format!(
            "opened by {}; made inheritable by {}",
            call_brief(made),
            call_brief(c)
        ),
        None => call_brief(c),
    }
}

/// `openat by comm[pid] at caller < callee`.
fn call_brief(c: &crate::engine::origin::Call) -> String {
    let name = |f: &crate::engine::origin::Frame| {
        // A Python frame: `func (file:line)`, or what it says of itself.
        if f.found_by == Some(FoundBy::Python) {
            return match (&f.symbol, &f.unnamed) {
                (Some(s), _) => {
                    let file = f.file.as_deref().unwrap_or("?");
                    let line = f.line.map_or("?".to_string(), |l| l.to_string());
                    output::escape_bytes(format!("{s} ({file}:{line})").as_bytes())
                }
                (None, Some(n)) => format!("[{}]", output::escape_bytes(n.as_bytes())),
                (None, None) => "[python frame]".into(),
            };
        }
        let at = match (&f.symbol, &f.module, f.offset) {
            (Some(s), _, _) => output::escape_bytes(s.as_bytes()),
            (None, Some(m), Some(off)) => {
                let base = m.rsplit('/').next().unwrap_or(m);
                format!("{}+{off:#x}", output::escape_bytes(base.as_bytes()))
            }
            _ => match &f.unnamed {
                Some(why) => format!(
                    "{:#x} (unnamed: {})",
                    f.addr,
                    output::escape_bytes(why.as_bytes())
                ),
                None => format!("{:#x}", f.addr),
            },
        };
        match f.found_by {
            Some(how) => format!("{at} (found by {})", how.as_str()),
            None => at,
        }
    };
    // Python frames come first in the stack: the innermost one calls the innermost
    // native frame (`make_leak (app.py:5) < ioctl+0x3b`).
    let python = c.stack.iter().find(|f| f.found_by == Some(FoundBy::Python));
    let mut native = c
        .stack
        .iter()
        .filter(|f| f.found_by != Some(FoundBy::Python));
    let frames: Vec<String> = match python {
        Some(p) => std::iter::once(p).chain(native.next()).map(name).collect(),
        None => native
            .take(2)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .map(name)
            .collect(),
    };
    let mut text = c.syscall.clone();
    if !c.comm.is_empty() {
        text.push_str(&format!(
            " by {}[{}]",
            output::escape_bytes(c.comm.as_bytes()),
            c.pid
        ));
    } else {
        text.push_str(&format!(" by pid {}", c.pid));
    }
    if !frames.is_empty() {
        text.push_str(&format!(" at {}", frames.join(" < ")));
    }
    if c.stack_partial.is_some() && !c.stack.is_empty() {
        text.push_str(" (partial stack)");
    }
    text
}

/// The window's syscall counts, for the spawn line.
fn window_counts(s: &Spawn) -> Vec<String> {
    let mut counts = Vec::new();
    let c = &s.calls;
    if c.close_calls > 0 {
        counts.push(format!("close {} ({} EBADF)", c.close_calls, c.close_ebadf));
    }
    if c.close_range_calls > 0 {
        let r: Vec<String> = s
            .close_ranges
            .iter()
            .map(|[a, b, f]| format!("close_range({a}, {}, {})", bound(*b), range_flags(*f)))
            .collect();
        counts.push(r.join(" "));
    }
    if c.fcntl_calls() > 0 {
        counts.push(format!("fcntl {}", c.fcntl_calls()));
    }
    if c.poll_calls > 0 {
        counts.push(format!("poll {} (nfds {})", c.poll_calls, c.poll_nfds_max));
    }
    if c.getdents64_calls > 0 {
        counts.push(format!("getdents64 {}", c.getdents64_calls));
    }
    if s.exec_attempts > 1 {
        counts.push(format!("exec attempts {}", s.exec_attempts));
    }
    counts
}

fn bound(b: u32) -> String {
    if b == u32::MAX {
        "~0U".into()
    } else {
        b.to_string()
    }
}

/// close_range() flags by name.
pub fn range_flags(f: u32) -> String {
    let mut names = Vec::new();
    if f & 2 != 0 {
        names.push("UNSHARE");
    }
    if f & 4 != 0 {
        names.push("CLOEXEC");
    }
    if names.is_empty() {
        "0".into()
    } else {
        names.join("|")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::origin::{Call, Frame};

    fn frame(symbol: Option<&str>, module: Option<&str>, offset: u64) -> Frame {
        Frame {
            addr: 0x1000 + offset,
            symbol: symbol.map(str::to_owned),
            file: None,
            line: None,
            module: module.map(str::to_owned),
            offset: module.map(|_| offset),
            build_id: None,
            found_by: None,
            ..Frame::default()
        }
    }

    #[test]
    fn an_origin_shows_its_call_and_the_caller_first() {
        let o = Origin::Known(Box::new(Call {
            syscall: "openat".into(),
            pid: 7,
            tid: 7,
            comm: "a\x1bb".into(),
            time_ns: 1,
            stack: vec![
                frame(Some("__open+0x51"), Some("/lib/libc.so.6"), 0x51),
                frame(None, Some("/usr/bin/app"), 0x1c),
                frame(Some("main+0x8"), Some("/usr/bin/app"), 0x8),
            ],
            stack_partial: None,
            created_by: None,
        }));
        assert_eq!(
            origin_brief(&o),
            "openat by a\\u{1b}b[7] at app+0x1c < __open+0x51"
        );
        let unknown = Origin::Unknown {
            unknown: crate::engine::origin::BEFORE_TRACING,
            reason: None,
        };
        assert_eq!(origin_brief(&unknown), "origin unknown: before tracing");
        let unseen = Origin::Unknown {
            unknown: crate::engine::seen::NOT_SEEN,
            reason: Some("an ia32 call (dup2) by pid 5".into()),
        };
        assert_eq!(
            origin_brief(&unseen),
            "origin unknown: not seen (an ia32 call (dup2) by pid 5)"
        );
    }

    #[test]
    fn an_unnamed_jit_frame_says_why() {
        let mut jit = frame(None, None, 0x10);
        jit.unnamed = Some("no perf map /tmp/perf-9.map".into());
        jit.found_by = Some(FoundBy::JitFramePointer);
        let o = Origin::Known(Box::new(Call {
            syscall: "socket".into(),
            pid: 9,
            tid: 9,
            comm: "java".into(),
            time_ns: 1,
            stack: vec![frame(Some("__socket+0x7"), Some("/lib/libc.so.6"), 7), jit],
            stack_partial: None,
            created_by: None,
        }));
        assert_eq!(
            origin_brief(&o),
            "socket by java[9] at 0x1010 (unnamed: no perf map /tmp/perf-9.map) \
             (found by jit-frame-pointer) < __socket+0x7"
        );
    }

    #[test]
    fn an_unwound_frame_and_a_partial_stack_say_so_and_a_cleared_flag_names_both_calls() {
        let mut unwound = frame(Some("load_key+0x1d"), Some("/usr/bin/app"), 0x1d);
        unwound.found_by = Some(FoundBy::EhFrame);
        let opened = Call {
            syscall: "openat(O_CLOEXEC)".into(),
            pid: 7,
            tid: 7,
            comm: "py".into(),
            time_ns: 1,
            stack: vec![
                frame(Some("__open+0x51"), Some("/lib/libc.so.6"), 0x51),
                unwound,
            ],
            stack_partial: None,
            created_by: None,
        };
        let o = Origin::Known(Box::new(Call {
            syscall: "ioctl(FIONCLEX)".into(),
            pid: 7,
            tid: 7,
            comm: "py".into(),
            time_ns: 2,
            stack: vec![frame(Some("set_inheritable+0x9"), Some("/usr/bin/py"), 0x9)],
            stack_partial: Some(crate::engine::symbolize::partial::NO_MODULE),
            created_by: Some(Box::new(opened)),
        }));
        assert_eq!(
            origin_brief(&o),
            "opened by openat(O_CLOEXEC) by py[7] at load_key+0x1d (found by eh_frame) < \
             __open+0x51; made inheritable by ioctl(FIONCLEX) by py[7] at set_inheritable+0x9 \
             (partial stack)"
        );
    }
}
