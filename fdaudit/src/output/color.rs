//! Colour for people, only where it carries meaning: leaked fds, finding severity, what a
//! closing strategy costs. Never in JSON, never into a pipe unless asked.
//!
//! `--color auto` (the default) colours when stdout is a terminal (and TERM is not `dumb`),
//! `NO_COLOR` (non-empty) turns it off and `CLICOLOR_FORCE` (non-empty, not `0`) on even
//! into a pipe; `--color always|never` overrides both (<https://no-color.org>,
//! <https://bixense.com/clicolors/>).

use std::io::IsTerminal as _;
use std::sync::atomic::{AtomicU8, Ordering};

use anstyle::{AnsiColor, Effects, Style};

/// `--color WHEN`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ColorChoice {
    /// Colour when stdout is a terminal, unless NO_COLOR is set (CLICOLOR_FORCE forces it).
    #[default]
    Auto,
    /// Always colour, even into a pipe or file.
    Always,
    /// Never colour.
    Never,
}

/// What the environment says, read once (kept apart so the decision is testable).
#[derive(Debug, Clone, Copy, Default)]
pub struct Env {
    pub no_color: bool,
    pub clicolor_force: bool,
    pub dumb_term: bool,
    pub stdout_tty: bool,
}

impl Env {
    pub fn read() -> Env {
        let set = |k: &str| std::env::var_os(k).is_some_and(|v| !v.is_empty());
        Env {
            no_color: set("NO_COLOR"),
            clicolor_force: std::env::var_os("CLICOLOR_FORCE")
                .is_some_and(|v| !v.is_empty() && v != "0"),
            dumb_term: std::env::var_os("TERM").is_some_and(|t| t == "dumb"),
            stdout_tty: std::io::stdout().is_terminal(),
        }
    }
}

/// Whether to colour stdout.
pub fn decide(choice: ColorChoice, env: Env) -> bool {
    match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto if env.no_color => false,
        ColorChoice::Auto if env.clicolor_force => true,
        ColorChoice::Auto => env.stdout_tty && !env.dumb_term,
    }
}

/// 0 = not decided yet (auto from the environment), 1 = off, 2 = on.
static ENABLED: AtomicU8 = AtomicU8::new(0);
/// The `--color` given: 0 = auto, 1 = always, 2 = never.
static CHOICE: AtomicU8 = AtomicU8::new(0);

/// Decides once for the whole run, from `--color` and the environment.
pub fn init(choice: ColorChoice) {
    let on = decide(choice, Env::read());
    ENABLED.store(if on { 2 } else { 1 }, Ordering::Relaxed);
    let c = match choice {
        ColorChoice::Auto => 0,
        ColorChoice::Always => 1,
        ColorChoice::Never => 2,
    };
    CHOICE.store(c, Ordering::Relaxed);
}

/// Whether stdout gets colour (decided by [`init`]; without it, `auto`).
pub fn enabled() -> bool {
    match ENABLED.load(Ordering::Relaxed) {
        0 => {
            init(ColorChoice::Auto);
            enabled()
        }
        v => v == 2,
    }
}

/// Whether another destination gets colour (trace's records on stderr, an `-o` file):
/// the same rules as for stdout, with that destination's tty-ness.
pub fn enabled_for(tty: bool) -> bool {
    let choice = match CHOICE.load(Ordering::Relaxed) {
        1 => ColorChoice::Always,
        2 => ColorChoice::Never,
        _ => ColorChoice::Auto,
    };
    decide(
        choice,
        Env {
            stdout_tty: tty,
            ..Env::read()
        },
    )
}

/// What a piece of text means, which decides its colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Paint {
    /// An fd that leaked into a child; a critical finding.
    Alarm,
    /// A high-severity finding; a close strategy whose cost grows with NOFILE.
    Bad,
    /// A medium-severity finding; transient leaks.
    Warn,
    /// The cheap, correct way (close_range, closefrom).
    Good,
    /// Less important detail.
    Dim,
}

impl Paint {
    fn style(self) -> Style {
        match self {
            Paint::Alarm => Style::new()
                .fg_color(Some(AnsiColor::Red.into()))
                .effects(Effects::BOLD),
            Paint::Bad => Style::new().fg_color(Some(AnsiColor::Red.into())),
            Paint::Warn => Style::new().fg_color(Some(AnsiColor::Yellow.into())),
            Paint::Good => Style::new().fg_color(Some(AnsiColor::Green.into())),
            Paint::Dim => Style::new().effects(Effects::DIMMED),
        }
    }

    /// The comfy-table equivalent, for table cells (comfy-table measures the text without
    /// the escapes).
    pub fn cell(self, text: impl Into<String>) -> comfy_table::Cell {
        use comfy_table::{Attribute, Cell, Color};
        let c = Cell::new(text.into());
        match self {
            Paint::Alarm => c.fg(Color::Red).add_attribute(Attribute::Bold),
            Paint::Bad => c.fg(Color::Red),
            Paint::Warn => c.fg(Color::Yellow),
            Paint::Good => c.fg(Color::Green),
            Paint::Dim => c.add_attribute(Attribute::Dim),
        }
    }
}

/// `text` wrapped in the escapes for `p` when `on` (colour is on), else `text` as it is.
pub fn paint_if(on: bool, text: &str, p: Paint) -> String {
    if on && !text.is_empty() {
        let s = p.style();
        format!("{s}{text}{s:#}")
    } else {
        text.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_follows_the_tty_no_color_and_clicolor_force() {
        let tty = Env {
            stdout_tty: true,
            ..Env::default()
        };
        let pipe = Env::default();
        assert!(decide(ColorChoice::Auto, tty));
        assert!(!decide(ColorChoice::Auto, pipe));
        assert!(!decide(
            ColorChoice::Auto,
            Env {
                no_color: true,
                ..tty
            }
        ));
        assert!(decide(
            ColorChoice::Auto,
            Env {
                clicolor_force: true,
                ..pipe
            }
        ));
        assert!(
            !decide(
                ColorChoice::Auto,
                Env {
                    clicolor_force: true,
                    no_color: true,
                    ..pipe
                }
            ),
            "NO_COLOR wins over CLICOLOR_FORCE"
        );
        assert!(!decide(
            ColorChoice::Auto,
            Env {
                dumb_term: true,
                ..tty
            }
        ));
        assert!(decide(
            ColorChoice::Always,
            Env {
                no_color: true,
                ..pipe
            }
        ));
        assert!(!decide(
            ColorChoice::Never,
            Env {
                clicolor_force: true,
                ..tty
            }
        ));
    }

    #[test]
    fn paint_adds_escapes_only_when_on() {
        assert_eq!(paint_if(false, "LEAKED", Paint::Alarm), "LEAKED");
        let on = paint_if(true, "LEAKED", Paint::Alarm);
        assert!(
            on.starts_with('\x1b') && on.contains("LEAKED") && on.ends_with('m'),
            "{on:?}"
        );
        assert_eq!(paint_if(true, "", Paint::Bad), "");
    }
}
