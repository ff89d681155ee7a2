//! Time prefixes for trace lines, as strace prints them: `-t` wall-clock time of day,
//! `-tt` with microseconds, `-ttt` seconds since the epoch; `-r` the time since the
//! previous line.

/// CLOCK_MONOTONIC and CLOCK_REALTIME now, in ns.
fn clocks() -> (i128, i128) {
    let get = |clock| {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes into the struct we pass.
        unsafe { libc::clock_gettime(clock, &mut ts) };
        i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
    };
    (get(libc::CLOCK_MONOTONIC), get(libc::CLOCK_REALTIME))
}

/// Prefixes lines with the time of the exec they report.
#[derive(Debug, Clone)]
pub struct Stamper {
    /// 0: no wall-clock time; 1: `-t`; 2: `-tt`; 3 or more: `-ttt`.
    absolute: u8,
    relative: bool,
    /// CLOCK_REALTIME − CLOCK_MONOTONIC, ns: kernel timestamps are monotonic.
    offset_ns: i128,
    last_ns: Option<u64>,
}

impl Stamper {
    pub fn new(absolute: u8, relative: bool) -> Stamper {
        let (mono, real) = clocks();
        Stamper {
            absolute,
            relative,
            offset_ns: real - mono,
            last_ns: None,
        }
    }

    pub fn is_active(&self) -> bool {
        self.absolute > 0 || self.relative
    }

    /// The prefix (with a trailing space, or empty) for an event at `mono_ns`
    /// (CLOCK_MONOTONIC; 0 = unknown, use now).
    pub fn prefix(&mut self, mono_ns: u64) -> String {
        if !self.is_active() {
            return String::new();
        }
        let mono_ns = if mono_ns == 0 {
            u64::try_from(clocks().0).unwrap_or(0)
        } else {
            mono_ns
        };
        let mut out = String::new();
        if self.absolute > 0 {
            let real = i128::from(mono_ns) + self.offset_ns;
            out.push_str(&format_absolute(self.absolute, real));
            out.push(' ');
        }
        if self.relative {
            let delta = self.last_ns.map_or(0, |l| mono_ns.saturating_sub(l));
            out.push_str(&format_relative(delta));
            out.push(' ');
        }
        self.last_ns = Some(mono_ns);
        out
    }
}

/// `-t` `HH:MM:SS`, `-tt` `HH:MM:SS.uuuuuu` (local time), `-ttt` `SECONDS.uuuuuu`.
pub fn format_absolute(level: u8, real_ns: i128) -> String {
    let secs = real_ns.div_euclid(1_000_000_000);
    let micros = real_ns.rem_euclid(1_000_000_000) / 1000;
    if level >= 3 {
        return format!("{secs}.{micros:06}");
    }
    let t = libc::time_t::try_from(secs).unwrap_or(0);
    // SAFETY: localtime_r writes into the struct we pass.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let hms = if unsafe { libc::localtime_r(&t, &mut tm) }.is_null() {
        let s = secs.rem_euclid(86_400);
        (s / 3600, s / 60 % 60, s % 60)
    } else {
        (
            i128::from(tm.tm_hour),
            i128::from(tm.tm_min),
            i128::from(tm.tm_sec),
        )
    };
    let mut s = format!("{:02}:{:02}:{:02}", hms.0, hms.1, hms.2);
    if level == 2 {
        s.push_str(&format!(".{micros:06}"));
    }
    s
}

/// `-r`: seconds since the previous line, `S.uuuuuu`, right-aligned like strace.
pub fn format_relative(delta_ns: u64) -> String {
    format!(
        "{:>6}.{:06}",
        delta_ns / 1_000_000_000,
        delta_ns % 1_000_000_000 / 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_strace() {
        assert_eq!(
            format_absolute(3, 1_700_000_000_123_456_789),
            "1700000000.123456"
        );
        let t = format_absolute(1, 1_700_000_000_123_456_789);
        let b = t.as_bytes();
        assert!(
            t.len() == 8 && b[2] == b':' && b[5] == b':',
            "HH:MM:SS, not {t:?}"
        );
        let tt = format_absolute(2, 1_700_000_000_123_456_789);
        assert!(tt.starts_with(&t) && tt.ends_with(".123456"), "{tt}");
        assert_eq!(format_relative(1_500_000), "     0.001500");
        assert_eq!(format_relative(12_000_000_000), "    12.000000");
    }

    #[test]
    fn relative_counts_from_the_previous_line() {
        let mut s = Stamper::new(0, true);
        assert_eq!(s.prefix(5_000_000_000), "     0.000000 ");
        assert_eq!(s.prefix(5_250_000_000), "     0.250000 ");
        assert_eq!(s.prefix(5_250_000_000), "     0.000000 ");
        let mut off = Stamper::new(0, false);
        assert_eq!(off.prefix(1), "");
        let mut abs = Stamper::new(3, false);
        let p = abs.prefix(0);
        assert!(p.ends_with(' ') && p.contains('.'), "{p:?}");
    }
}
