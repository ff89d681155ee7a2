//! Output helpers shared by the subcommands: tables for people, JSON lines for machines.

pub mod ci;
pub mod color;
pub mod github;
pub mod junit;
pub mod sarif;
pub mod table;

use std::io::Write;

use serde::Serialize;

pub mod stream;
pub mod text;

pub use text::{escape, escape_bytes};

/// Prints a diagnostic line on stderr, wrapped between words to stderr's terminal when it
/// has a width. Unlike `eprintln!` it never panics: a closed or full stderr must not turn a
/// finished trace into a crash.
#[macro_export]
macro_rules! diag {
    ($($arg:tt)*) => {{
        $crate::output::diag_line(&format!($($arg)*));
    }};
}

/// What [`diag!`] does.
pub fn diag_line(msg: &str) {
    let text = match table::stderr_width() {
        Some(w) => msg
            .split('\n')
            .map(|l| table::wrap_opts(l, w, 2, false).join("\n"))
            .collect::<Vec<_>>()
            .join("\n"),
        None => msg.to_string(),
    };
    let _ = writeln!(std::io::stderr(), "{text}");
}

/// Whether an error is a write to a closed pipe (`fdaudit ... | head`): not worth reporting.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// A progress bar on stderr when it is a terminal (hidden otherwise): `{spinner} {what}
/// [bar] {pos}/{len}` and the rest of `template` (an indicatif template tail).
pub fn progress(len: u64, what: &str, tail: &str) -> indicatif::ProgressBar {
    use std::io::IsTerminal as _;
    let bar = if std::io::stderr().is_terminal() {
        indicatif::ProgressBar::new(len)
    } else {
        indicatif::ProgressBar::hidden()
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(&format!(
            "{{spinner}} {what} [{{bar:24}}] {{pos}}/{{len}}{tail}"
        ))
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar
}

/// Writes one JSON object and a newline to `out`.
pub fn json_line<W: Write, T: Serialize>(out: &mut W, value: &T) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, value)?;
    out.write_all(b"\n")
}

/// `x` rounded to `digits` decimals: JSON shows `104.534`, not `104.53425000000001`.
pub fn round(x: f64, digits: i32) -> f64 {
    let m = 10f64.powi(digits);
    (x * m).round() / m
}

/// Serialises an `f64` to 3 decimals (`#[serde(serialize_with = "output::round3")]`).
pub fn round3<S: serde::Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(round(*x, 3))
}

/// Serialises an `f64` of nanoseconds as a whole number.
pub fn round_ns<S: serde::Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_i64(x.round() as i64)
}

/// Serialises an `Option<f64>` to 2 decimals.
pub fn round2_opt<S: serde::Serializer>(x: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    match x {
        Some(v) => s.serialize_some(&round(*v, 2)),
        None => s.serialize_none(),
    }
}

/// Serialises an `Option<f64>` to 3 decimals.
pub fn round3_opt<S: serde::Serializer>(x: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    match x {
        Some(v) => s.serialize_some(&round(*v, 3)),
        None => s.serialize_none(),
    }
}

/// A duration for people: ns, µs, ms or s with three significant digits.
pub fn fmt_ns(ns: f64) -> String {
    let (v, unit) = if ns < 1e3 {
        (ns, "ns")
    } else if ns < 1e6 {
        (ns / 1e3, "µs")
    } else if ns < 1e9 {
        (ns / 1e6, "ms")
    } else {
        (ns / 1e9, "s")
    };
    if v >= 100.0 {
        format!("{v:.0} {unit}")
    } else if v >= 10.0 {
        format!("{v:.1} {unit}")
    } else {
        format!("{v:.2} {unit}")
    }
}

/// `n` and the noun in the right number: `1 spawn`, `2 spawns`, `0 processes`.
pub fn count(n: impl Into<u64>, singular: &str, plural: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { singular } else { plural })
}

#[cfg(test)]
mod tests {
    #[test]
    fn counts_in_the_right_number() {
        assert_eq!(super::count(1u32, "spawn", "spawns"), "1 spawn");
        assert_eq!(super::count(0u32, "spawn", "spawns"), "0 spawns");
        assert_eq!(super::count(2u64, "process", "processes"), "2 processes");
    }

    #[test]
    fn durations_with_three_significant_digits() {
        assert_eq!(super::fmt_ns(512.0), "512 ns");
        assert_eq!(super::fmt_ns(1_530_000.0), "1.53 ms");
        assert_eq!(super::fmt_ns(25_100_000.0), "25.1 ms");
        assert_eq!(super::fmt_ns(11_630_000_000.0), "11.6 s");
        assert_eq!(super::fmt_ns(80_000.0), "80.0 µs");
    }
}
