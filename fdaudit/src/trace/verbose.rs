//! `trace -v`: the backend, where start-up and exit time went, and the probe-cost
//! calibration.

use std::time::{Duration, Instant};

use crate::engine::session::Session;

/// `-v`: the ring buffer's first and last sizes, and how long fdaudit took to exit after
/// the command (or the trace) ended.
pub fn verbose_exit(ended: Instant, command: bool, (first_ring, end_ring): (u64, u64)) {
    verbose_ring(first_ring, end_ring);
    crate::diag!(
        "fdaudit: exit {:.1} ms (from the {} to fdaudit's exit)",
        ms(ended.elapsed()),
        if command {
            "command's exit"
        } else {
            "end of the trace"
        }
    );
}

/// `-v`: the ring buffer's size, and whether a burst made it grow.
fn verbose_ring(first: u64, end: u64) {
    if end > first {
        crate::diag!(
            "fdaudit: ring buffer {} KiB, grown to {} KiB under a burst",
            first >> 10,
            end >> 10
        );
    } else {
        crate::diag!("fdaudit: ring buffer {} KiB", first >> 10);
    }
}

/// `-v`, `--origin`: the origin records the kernel sent and those fdaudit decoded, so that
/// an fd named `not seen` tells a record never sent from one sent and not read.
pub fn verbose_origins(records: Option<(u64, u64)>) {
    if let Some((sent, decoded)) = records {
        crate::diag!("fdaudit: origin records: {sent} sent by the kernel, {decoded} decoded");
    }
}

/// `-v`: the probe-cost calibration (ns, ms), if a spawn needed it.
pub fn verbose_calibration(calibrated: Option<(f64, f64)>) {
    match calibrated {
        Some((ns, took)) => crate::diag!(
            "fdaudit: probes' cost {ns:.0} ns per counted syscall, measured in {took:.1} ms when the first spawn needed it"
        ),
        None => crate::diag!(
            "fdaudit: probes' cost not measured: no spawn made a counted syscall"
        ),
    }
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// `-v`: the backend and where start-up time went.
pub fn verbose_startup(session: &Session, startup: Duration, command: bool) {
    match (session.backend(), session.fallback()) {
        (None, _) => crate::diag!("fdaudit: backend: none (--no-syscalls hooks no syscall)"),
        (Some(b), None) => crate::diag!("fdaudit: backend: {}", b.as_str()),
        (Some(b), Some(why)) => {
            crate::diag!("fdaudit: backend: {} ({why})", b.as_str())
        }
    }
    let t = session.timings();
    crate::diag!(
        "fdaudit: start-up {:.1} ms until {} (BTF {:.1} ms{}{}, beside it the feature probes \
         {:.1} ms (waited for {:.1} ms), maps {:.1} ms (of it waiting for aya's loader {:.1} \
         ms; beside them an untraced close() timing {:.1} ms), programs {:.1} ms)",
        ms(startup),
        if command {
            "the command was released"
        } else {
            "the processes were traced"
        },
        t.btf_ms,
        if t.btf_cached {
            " (cached offsets)"
        } else {
            ""
        },
        if t.aya_btf_ms > 0.0 {
            format!(" + aya's parse {:.1} ms", t.aya_btf_ms)
        } else {
            String::new()
        },
        t.probes_ms,
        t.probes_wait_ms,
        t.maps_ms,
        t.loader_wait_ms,
        t.close_timing_ms,
        t.attach_ms,
    );
}
