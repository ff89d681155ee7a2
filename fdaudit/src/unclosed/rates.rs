//! Rates and the projection of `fdaudit unclosed` (issue #40 item 2): per stack, the fds
//! seen opened and closed since the start ([`StackRates`], from successive reads of the
//! live set); per process, its open fds over the reports fitted by least squares
//! ([`fit`]), and the time that growth takes to reach the NOFILE soft limit
//! ([`Projection`]). Pure: no file or map is read here.

use std::collections::{BTreeMap, HashMap};

use crate::engine::unclosed::LiveEntry;

/// A least-squares line through (seconds, open fds).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fit {
    /// Fds per second.
    pub slope: f64,
    pub intercept: f64,
    /// The fit's quality, 0 to 1 (1 when every point is on the line, including a flat one).
    pub r2: f64,
    pub points: usize,
}

/// Fits `y = slope * x + intercept` to `points` (at least two distinct x, else None):
/// bench's least squares ([`crate::stats::LinearFit`]), its R² kept within 0 to 1.
pub fn fit(points: &[(f64, f64)]) -> Option<Fit> {
    let f = crate::stats::LinearFit::fit(points)?;
    Some(Fit {
        slope: f.slope,
        intercept: f.intercept,
        r2: f.r2.clamp(0.0, 1.0),
        points: f.points,
    })
}

/// What the growth so far says about a process's NOFILE limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Projection {
    /// Fewer than two reports (or all at one instant): nothing to fit.
    TooFewReports,
    /// The fit's slope is zero or negative.
    NoGrowth(Fit),
    /// Growing with no limit known (unlimited, or prlimit refused).
    NoLimit(Fit),
    /// Seconds from now until the open fds reach the soft limit at the fitted rate (0
    /// when already there).
    Limit(f64, Fit),
}

impl Projection {
    /// From the fit of a process's points, its open fds now and its soft limit.
    pub fn of(fit: Option<Fit>, open: u64, limit: Option<u64>) -> Self {
        // Less than one fd an hour is no growth a person acts on.
        const MIN_SLOPE: f64 = 1.0 / 3600.0;
        match (fit, limit) {
            (None, _) => Self::TooFewReports,
            (Some(f), _) if f.slope < MIN_SLOPE => Self::NoGrowth(f),
            (Some(f), None) => Self::NoLimit(f),
            (Some(f), Some(l)) => Self::Limit((l.saturating_sub(open)) as f64 / f.slope, f),
        }
    }

    pub fn fit(&self) -> Option<Fit> {
        match *self {
            Self::TooFewReports => None,
            Self::NoGrowth(f) | Self::NoLimit(f) | Self::Limit(_, f) => Some(f),
        }
    }

    /// The JSON `projection` word.
    pub fn word(&self) -> &'static str {
        match self {
            Self::TooFewReports => "too few reports",
            Self::NoGrowth(_) => "no growth",
            Self::NoLimit(_) => "no limit",
            Self::Limit(..) => "limit",
        }
    }

    /// For the text table: `no growth`, `in 4m05s (R² 0.98)`, ...
    pub fn text(&self) -> String {
        match self {
            Self::Limit(secs, f) => format!(
                "in {} (R² {:.2})",
                super::model::age((secs * 1e9).min(u64::MAX as f64) as u64),
                f.r2
            ),
            Self::NoLimit(f) => format!("+{:.1}/min, no limit (R² {:.2})", f.slope * 60.0, f.r2),
            other => other.word().to_owned(),
        }
    }
}

/// Each process's (seconds since the start, open fds) at each report, and at attach.
#[derive(Debug, Default)]
pub struct History {
    points: BTreeMap<u32, Vec<(f64, f64)>>,
}

/// Points kept per process (the oldest go first: the fit follows recent growth).
const MAX_POINTS: usize = 1024;

impl History {
    pub fn add(&mut self, pid: u32, secs: f64, open: u64) {
        let v = self.points.entry(pid).or_default();
        if v.len() == MAX_POINTS {
            v.remove(0);
        }
        v.push((secs, open as f64));
    }

    pub fn fit(&self, pid: u32) -> Option<Fit> {
        fit(self.points.get(&pid)?)
    }

    /// Forgets an exited process.
    pub fn remove(&mut self, pid: u32) {
        self.points.remove(&pid);
    }
}

/// Fds seen opened and closed per stack: an entry of the live set is one fd's life (its
/// process, number and creation time); one that appears between two reads was opened,
/// one that goes was closed. Reads are [`super::RESOLVE_EVERY`] apart: an fd opened and
/// closed between two is not seen (docs/unclosed.md).
#[derive(Debug, Default)]
pub struct StackRates {
    last: HashMap<(u32, i32), (u64, i32)>,
    pub opened: HashMap<i32, u64>,
    pub closed: HashMap<i32, u64>,
}

impl StackRates {
    /// Counts what changed since the last read.
    pub fn observe(&mut self, entries: &[LiveEntry]) {
        let now: HashMap<(u32, i32), (u64, i32)> = entries
            .iter()
            .map(|e| ((e.pid, e.fd), (e.live.time_ns, e.live.stack_id)))
            .collect();
        for (k, v) in &self.last {
            if now.get(k) != Some(v) {
                *self.closed.entry(v.1).or_default() += 1;
            }
        }
        for (k, v) in &now {
            if self.last.get(k) != Some(v) {
                *self.opened.entry(v.1).or_default() += 1;
            }
        }
        self.last = now;
    }

    /// Entries the report dropped: `closed` when their fd had gone (not at an exit).
    pub fn dropped(&mut self, key: (u32, i32), closed: bool) {
        if let Some((_, stack)) = self.last.remove(&key) {
            if closed {
                *self.closed.entry(stack).or_default() += 1;
            }
        }
    }

    /// (opened, closed) of `stack`.
    pub fn of(&self, stack: i32) -> (u64, u64) {
        (
            self.opened.get(&stack).copied().unwrap_or(0),
            self.closed.get(&stack).copied().unwrap_or(0),
        )
    }
}

/// Per minute over `secs` (0 before any time has passed).
pub fn per_min(n: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        n as f64 * 60.0 / secs
    } else {
        0.0
    }
}

#[cfg(test)]
#[path = "rates_tests.rs"]
mod tests;
