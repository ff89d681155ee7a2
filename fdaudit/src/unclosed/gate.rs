//! `unclosed`'s CI gates: `--fail-on-unclosed` (a followed process exited holding fds it
//! made itself while followed, as valgrind's `--track-fds` lists them; stdio and inherited
//! fds are never its own) and `--fail-on-growth N` (a followed process's outstanding set
//! grew by N or more over the run: it starts empty, fdaudit counting only fds made while
//! it follows). Pure: the reports hand in what each process held.

/// What one process held at a report: its outstanding fds and the call sites holding most.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub pid: u32,
    pub comm: String,
    pub exited: bool,
    pub count: u64,
    /// (site, fds), most first.
    pub sites: Vec<(String, u64)>,
}

/// The gates asked for and what the reports saw.
#[derive(Debug, Default)]
pub struct Gates {
    pub on_unclosed: bool,
    pub growth: Option<u64>,
    /// Processes that exited holding fds, over all reports.
    exited: Vec<Held>,
    /// The live processes at the last report.
    live: Vec<Held>,
}

impl Gates {
    pub fn new(on_unclosed: bool, growth: Option<u64>) -> Gates {
        Gates {
            on_unclosed,
            growth,
            ..Default::default()
        }
    }

    pub fn active(&self) -> bool {
        self.on_unclosed || self.growth.is_some()
    }

    /// One report's processes.
    pub fn observe(&mut self, held: Vec<Held>) {
        let (exited, live): (Vec<Held>, Vec<Held>) = held.into_iter().partition(|h| h.exited);
        self.exited.extend(exited);
        self.live = live;
    }

    /// Why the run fails, if it does (`cmd_ok`: CMD, if any, exited 0; a failing CMD's own
    /// status wins, as with `trace`).
    pub fn verdict(&self, cmd_ok: bool) -> Option<String> {
        if !cmd_ok {
            return None;
        }
        let mut why = Vec::new();
        if self.on_unclosed {
            why.extend(
                self.exited
                    .iter()
                    .filter(|h| h.count > 0)
                    .map(|h| format!("--fail-on-unclosed: {} exited holding {}", name(h), fds(h))),
            );
        }
        if let Some(n) = self.growth {
            why.extend(
                self.exited
                    .iter()
                    .chain(&self.live)
                    .filter(|h| h.count >= n)
                    .map(|h| format!("--fail-on-growth {n}: {} grew by {}", name(h), fds(h))),
            );
        }
        (!why.is_empty()).then(|| why.join("; "))
    }
}

fn name(h: &Held) -> String {
    if h.comm.is_empty() {
        format!("pid {}", h.pid)
    } else {
        format!("pid {} ({})", h.pid, crate::output::text::escape(&h.comm))
    }
}

/// `29 fds it opened: leak_one+0x31 (24), main+0x1b (5)`.
fn fds(h: &Held) -> String {
    let sites: Vec<String> = h.sites.iter().map(|(s, n)| format!("{s} ({n})")).collect();
    format!(
        "{} it opened: {}",
        crate::output::count(h.count, "fd", "fds"),
        crate::output::text::escape(&sites.join(", "))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(pid: u32, exited: bool, count: u64) -> Held {
        Held {
            pid,
            comm: "svc".into(),
            exited,
            count,
            sites: vec![("leak_one+0x31".into(), count)],
        }
    }

    #[test]
    fn unclosed_fails_on_an_exit_holding_fds_and_growth_on_n_or_more() {
        let mut g = Gates::new(true, None);
        g.observe(vec![held(1, false, 9)]);
        assert_eq!(
            g.verdict(true),
            None,
            "a live process is not judged by --fail-on-unclosed"
        );
        g.observe(vec![held(1, true, 9)]);
        let v = g.verdict(true).expect("fails");
        assert!(
            v.contains("pid 1 (svc) exited holding 9 fds it opened: leak_one+0x31 (9)"),
            "{v}"
        );
        assert_eq!(g.verdict(false), None, "CMD's own failure wins");

        let mut g = Gates::new(false, Some(10));
        g.observe(vec![held(2, false, 9)]);
        assert_eq!(g.verdict(true), None, "9 < 10");
        g.observe(vec![held(2, false, 10)]);
        assert!(g
            .verdict(true)
            .is_some_and(|v| v.contains("--fail-on-growth 10: pid 2")));
    }
}
