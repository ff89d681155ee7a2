//! Shell completions (`fdaudit completions SHELL`) and manual pages (`cargo xtask man`), both
//! generated from the clap definition so they cannot drift from `--help`. The definition is
//! passed in by [`crate::cli`], so this module does not import the CLI that calls it.

use std::io::Write;
use std::path::Path;

use anyhow::Context as _;
use clap_complete::Shell;
use clap_mangen::roff::{bold, roman, Roff};
use clap_mangen::Man;

mod pages;

/// Arguments of `fdaudit completions`.
#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell to write the completion script for.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// Arguments of the internal `__man` command that `cargo xtask man` runs.
#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// Directory to write fdaudit.1 and one page per subcommand into.
    pub out_dir: std::path::PathBuf,
}

/// Writes the completion script of the command line `cli` for `shell` to `out`.
pub fn write_completions(mut cli: clap::Command, shell: Shell, out: &mut dyn Write) {
    clap_complete::generate(shell, &mut cli, "fdaudit", out);
}

/// `fdaudit completions SHELL`: the script of `cli` on stdout.
pub fn run_completions(cli: clap::Command, args: CompletionsArgs) -> anyhow::Result<u8> {
    let mut buf = Vec::new();
    write_completions(cli, args.shell, &mut buf);
    let mut out = std::io::stdout().lock();
    out.write_all(&buf)
        .and_then(|()| out.flush())
        .context("failed to write the completion script")?;
    Ok(0)
}

/// Sections appended to the top-level page: what `--help` has no room for. `subs`: the
/// visible subcommands, for SEE ALSO.
fn extra_sections(roff: &mut Roff, subs: &[String]) {
    roff.control("SH", ["ENVIRONMENT"]);
    for (name, text) in [
        (
            "NO_COLOR",
            "When set to a non-empty value, no colour is written (unless --color always).",
        ),
        (
            "CLICOLOR_FORCE",
            "When set to a non-empty value other than 0, colour is written even when stdout \
             is not a terminal (unless --color never or NO_COLOR).",
        ),
        (
            "COLUMNS",
            "The width tables are fitted to when stdout is a terminal that reports no size \
             (script, a serial console). Into a pipe or a file, or with neither size nor \
             COLUMNS, tables are never fitted: full rows.",
        ),
    ] {
        roff.control("TP", []);
        roff.text([bold(name)]);
        roff.text([roman(text)]);
    }
    roff.control("SH", ["SHELL COMPLETION"]);
    roff.text([roman(
        "fdaudit completions bash|zsh|fish|elvish|powershell prints a completion script; \
         see the README for where each shell loads it from.",
    )]);
    roff.control("SH", ["SEE ALSO"]);
    let mut see: Vec<String> = subs.iter().map(|s| format!("fdaudit-{s}(1)")).collect();
    see.extend(["strace(1)", "close_range(2)", "getrlimit(2)"].map(String::from));
    roff.text([roman(see.join(", "))]);
}

/// Renders one page: clap_mangen's sections, plus, for the top-level page, the extra
/// sections naming the subcommands' pages, and for a subcommand's page its EXAMPLES, EXIT
/// STATUS and SEE ALSO. `subs`: the visible subcommands.
fn render_page(
    cmd: clap::Command,
    top: bool,
    subs: &[String],
) -> std::io::Result<(String, Vec<u8>)> {
    let sub = cmd.get_name().to_string();
    let man = Man::new(cmd);
    let name = man.get_filename();
    let mut page = Vec::new();
    man.render(&mut page)?;
    let mut roff = Roff::default();
    if top {
        extra_sections(&mut roff, subs);
    } else {
        pages::sub_sections(&mut roff, &sub, subs);
    }
    roff.to_writer(&mut page)?;
    Ok((name, pages::tidy_synopsis(&page)))
}

/// Every manual page of the command line `cli`: `fdaudit.1` and `fdaudit-<sub>.1` for each
/// visible subcommand, as (file name, roff source).
pub fn man_pages(cli: clap::Command) -> std::io::Result<Vec<(String, Vec<u8>)>> {
    let mut cmd = cli.disable_help_subcommand(true);
    cmd.build();
    let subs: Vec<String> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .map(|s| s.get_name().to_string())
        .collect();
    let mut pages = vec![render_page(cmd.clone(), true, &subs)?];
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        pages.push(render_page(sub.clone(), false, &subs)?);
    }
    Ok(pages)
}

/// Writes every page of `cli` into `dir`, removing pages of subcommands that no longer exist.
pub fn write_man_pages(cli: clap::Command, dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("failed to create {}", dir.display()))?;
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("failed to read {}", dir.display()))?;
    for entry in entries {
        let path = entry
            .with_context(|| format!("failed to read {}", dir.display()))?
            .path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if name.starts_with("fdaudit") && name.ends_with(".1") {
            std::fs::remove_file(&path)
                .with_context(|| format!("failed to remove {}", path.display()))?;
        }
    }
    for (name, page) in man_pages(cli).context("failed to render the manual pages")? {
        let path = dir.join(&name);
        std::fs::write(&path, page)
            .with_context(|| format!("failed to write {}", path.display()))?;
    }
    Ok(())
}

/// `fdaudit __man DIR`: the pages of `cli`.
pub fn run_man(cli: clap::Command, args: ManArgs) -> anyhow::Result<u8> {
    write_man_pages(cli, &args.out_dir)?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Cli;
    use clap::CommandFactory as _;

    /// The pages shipped in docs/man are what the current clap definition generates.
    #[test]
    fn shipped_man_pages_are_current() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/man");
        let fresh = man_pages(Cli::command()).unwrap();
        let mut shipped: Vec<String> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        shipped.sort();
        let mut names: Vec<String> = fresh.iter().map(|(n, _)| n.clone()).collect();
        names.sort();
        assert_eq!(shipped, names, "docs/man is stale: run `cargo xtask man`");
        for (name, page) in &fresh {
            let old = std::fs::read(dir.join(name)).unwrap();
            assert!(
                old == *page,
                "docs/man/{name} is stale: run `cargo xtask man`"
            );
        }
        assert!(names.contains(&"fdaudit-trace.1".to_string()));
        assert!(
            !names.iter().any(|n| n.contains("__")),
            "hidden commands have no page"
        );
    }

    #[test]
    fn completions_name_every_visible_subcommand() {
        let mut buf = Vec::new();
        write_completions(Cli::command(), Shell::Bash, &mut buf);
        let s = String::from_utf8(buf).unwrap();
        for sub in ["scan", "trace", "bench", "diff", "doctor", "completions"] {
            assert!(s.contains(sub), "bash completion lacks {sub}");
        }
        let mut buf = Vec::new();
        write_completions(Cli::command(), Shell::Fish, &mut buf);
        assert!(String::from_utf8(buf).unwrap().contains("-a \"trace\""));
    }
}
