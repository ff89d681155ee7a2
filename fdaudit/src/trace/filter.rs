//! Output filters of `trace` (`--exec`, `--comm`, `--parent-comm`, `--only-leaks`,
//! `--min-closes`): which spawns are printed and summed. They never narrow what the kernel
//! follows: a filtered-out shell still has its children traced, so nothing below it is
//! missed.

use anyhow::Context as _;

use crate::engine::spawn::Spawn;

/// The task name the kernel gives an exec'd program: the file name, cut to 15 bytes
/// (TASK_COMM_LEN - 1).
pub fn comm_of(exec_path: &str) -> &str {
    let name = exec_path.rsplit('/').next().unwrap_or(exec_path);
    let mut end = name.len().min(15);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    &name[..end]
}

/// Whether `name` (as a user types it: a comm, or a longer program name) names `comm`.
fn comm_matches(name: &str, comm: &str) -> bool {
    name == comm || comm_of(name) == comm
}

/// What to keep; empty lists keep everything.
#[derive(Debug, Default, Clone)]
pub struct Filter {
    /// Keep spawns whose exec path matches one of these globs (`*` also matches `/`).
    pub exec: Vec<glob::Pattern>,
    /// Keep spawns whose new program has one of these names.
    pub comm: Vec<String>,
    /// Keep spawns whose parent has one of these names.
    pub parent_comm: Vec<String>,
    /// Keep only spawns that leaked at least one fd.
    pub only_leaks: bool,
    /// Keep only spawns that made at least this many close() calls.
    pub min_closes: u32,
}

impl Filter {
    /// Builds the filter from the command line; a bad glob is an error that names it.
    pub fn new(
        exec: &[String],
        comm: &[String],
        parent_comm: &[String],
        only_leaks: bool,
        min_closes: u32,
    ) -> anyhow::Result<Filter> {
        let exec = exec
            .iter()
            .map(|g| {
                glob::Pattern::new(g)
                    .with_context(|| format!("--exec {g:?} is not a valid glob (try '*/true')"))
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(Filter {
            exec,
            comm: comm.to_vec(),
            parent_comm: parent_comm.to_vec(),
            only_leaks,
            min_closes,
        })
    }

    /// Whether any filter is set.
    pub fn is_active(&self) -> bool {
        !self.exec.is_empty()
            || !self.comm.is_empty()
            || !self.parent_comm.is_empty()
            || self.only_leaks
            || self.min_closes > 0
    }

    /// Whether `s` is printed and summed.
    pub fn keeps(&self, s: &Spawn) -> bool {
        // Names and paths are bytes; a glob or name given on the command line is text, so
        // bytes that are not UTF-8 match only `*`/`?` (as U+FFFD).
        let exec_path = s.exec_path.lossy();
        let parent_comm = s.parent_comm.lossy();
        (self.exec.is_empty() || self.exec.iter().any(|p| p.matches(&exec_path)))
            && (self.comm.is_empty()
                || self
                    .comm
                    .iter()
                    .any(|n| comm_matches(n, comm_of(&exec_path))))
            && (self.parent_comm.is_empty()
                || self
                    .parent_comm
                    .iter()
                    .any(|n| comm_matches(n, &parent_comm)))
            && (!self.only_leaks || s.leaked_count > 0)
            && s.calls.close_calls >= u64::from(self.min_closes)
    }

    /// The filters in command-line form, for the headline.
    pub fn describe(&self) -> String {
        let mut v = Vec::new();
        for p in &self.exec {
            v.push(format!("--exec {}", p.as_str()));
        }
        for n in &self.comm {
            v.push(format!("--comm {n}"));
        }
        for n in &self.parent_comm {
            v.push(format!("--parent-comm {n}"));
        }
        if self.only_leaks {
            v.push("--only-leaks".into());
        }
        if self.min_closes > 0 {
            v.push(format!("--min-closes {}", self.min_closes));
        }
        v.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::report::tests::spawn;

    #[test]
    fn comm_is_the_file_name_cut_to_15_bytes() {
        assert_eq!(comm_of("/bin/true"), "true");
        assert_eq!(comm_of("/usr/lib/jvm/lib/jspawnhelper"), "jspawnhelper");
        assert_eq!(comm_of("/x/a-very-long-program-name"), "a-very-long-pro");
        assert_eq!(comm_of("sh"), "sh");
        assert!(comm_matches("a-very-long-program-name", "a-very-long-pro"));
    }

    #[test]
    fn filters_combine_with_and() {
        let t = spawn("python3", "/bin/true", 19_997, 1, 0);
        let mut leak = spawn("bash", "/usr/bin/cat", 0, 1, 2);
        leak.leaked_count = 2;
        let f = |exec: &[&str], comm: &[&str], parent: &[&str], only: bool, min: u32| {
            let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
            Filter::new(&s(exec), &s(comm), &s(parent), only, min).expect("valid")
        };
        let none = f(&[], &[], &[], false, 0);
        assert!(!none.is_active() && none.keeps(&t) && none.keeps(&leak));
        let exec = f(&["*/true"], &[], &[], false, 0);
        assert!(exec.keeps(&t) && !exec.keeps(&leak));
        assert_eq!(exec.describe(), "--exec */true");
        assert!(f(&["/usr/*"], &[], &[], false, 0).keeps(&leak));
        assert!(f(&[], &["cat"], &[], false, 0).keeps(&leak));
        assert!(!f(&[], &["cat"], &[], false, 0).keeps(&t));
        assert!(f(&[], &[], &["python3"], false, 0).keeps(&t));
        assert!(!f(&[], &[], &["python3"], false, 0).keeps(&leak));
        assert!(f(&[], &[], &[], true, 0).keeps(&leak));
        assert!(!f(&[], &[], &[], true, 0).keeps(&t));
        assert!(f(&[], &[], &[], false, 64).keeps(&t));
        assert!(!f(&[], &[], &[], false, 64).keeps(&leak));
        assert!(
            !f(&["*/true"], &[], &["bash"], false, 0).keeps(&t),
            "all must hold"
        );
        assert!(Filter::new(&["[".into()], &[], &[], false, 0).is_err());
    }
}
