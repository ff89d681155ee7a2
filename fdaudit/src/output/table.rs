//! Tables for people that work at any width.
//!
//! A table knows how each column may give way when the terminal is narrower than its rows:
//! a shorter header, a path shortened in the middle (`/tmp/…/credentials.json`), free text
//! wrapped between words, or the column left out altogether (least important first). Cells
//! are never broken inside a word. An unknown width (a pipe, a file, or a terminal that
//! reports 0 columns, as `script` and serial consoles do) means no fitting at all: full
//! rows, every column.

use std::io::IsTerminal as _;

use comfy_table::{presets, ContentArrangement};
use unicode_width::{UnicodeWidthChar as _, UnicodeWidthStr as _};

use super::color::{self, Paint};

/// How a column gives way in a narrow terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fit {
    /// Short values (numbers, names): kept whole.
    Keep,
    /// A path or command: shortened in the middle.
    Path,
    /// Prose: wrapped between words.
    Text,
}

/// One column: its header, a shorter header for narrow terminals, how it gives way.
#[derive(Debug, Clone)]
pub struct Col {
    header: String,
    short: Option<String>,
    fit: Fit,
    /// 0: never left out; otherwise left out in a narrow terminal, highest first.
    drop: u8,
}

impl Col {
    pub fn new(header: impl Into<String>) -> Col {
        Col {
            header: header.into(),
            short: None,
            fit: Fit::Keep,
            drop: 0,
        }
    }
    /// The header to use when the table does not fit.
    pub fn short(mut self, s: impl Into<String>) -> Col {
        self.short = Some(s.into());
        self
    }
    /// Values are paths: shortened in the middle when the table does not fit.
    pub fn path(mut self) -> Col {
        self.fit = Fit::Path;
        self
    }
    /// Values are prose: wrapped between words when the table does not fit.
    pub fn text(mut self) -> Col {
        self.fit = Fit::Text;
        self
    }
    /// May be left out when the table does not fit; higher ranks go first.
    pub fn drop(mut self, rank: u8) -> Col {
        self.drop = rank;
        self
    }
}

/// A cell: its text and, when it means something, a colour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    text: String,
    paint: Option<Paint>,
}

impl Cell {
    pub fn painted(text: impl Into<String>, paint: Option<Paint>) -> Cell {
        Cell {
            text: text.into(),
            paint,
        }
    }
}

impl From<String> for Cell {
    fn from(text: String) -> Cell {
        Cell { text, paint: None }
    }
}

impl From<&str> for Cell {
    fn from(text: &str) -> Cell {
        Cell::from(text.to_string())
    }
}

/// A table for people: no borders, a header row, fitted to the terminal.
#[derive(Debug, Clone)]
pub struct Table {
    cols: Vec<Col>,
    rows: Vec<Vec<Cell>>,
}

/// Columns a shortened path or wrapped text keeps at least, first comfortably, then at
/// a pinch (after less important columns were left out).
const PATH_COMFORT: usize = 24;
const TEXT_COMFORT: usize = 32;
const PATH_MIN: usize = 10;
const TEXT_MIN: usize = 16;

/// The layout chosen for a width: header text and width limit per shown column.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Layout {
    shown: Vec<usize>,
    headers: Vec<String>,
    widths: Vec<usize>,
}

impl Layout {
    /// Characters per line: each column padded by a space on both sides, the last line's
    /// trailing space trimmed.
    fn total(&self) -> usize {
        self.shown
            .iter()
            .map(|&c| self.widths[c] + 2)
            .sum::<usize>()
            .saturating_sub(1)
    }
}

impl Table {
    pub fn new(cols: impl IntoIterator<Item = Col>) -> Table {
        Table {
            cols: cols.into_iter().collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; missing cells are empty, extra ones ignored.
    pub fn add_row<C: Into<Cell>>(&mut self, row: impl IntoIterator<Item = C>) -> &mut Self {
        let mut r: Vec<Cell> = row
            .into_iter()
            .map(Into::into)
            .take(self.cols.len())
            .collect();
        r.resize(self.cols.len(), Cell::from(""));
        self.rows.push(r);
        self
    }

    fn natural(&self, c: usize, header: &str) -> usize {
        self.rows
            .iter()
            .map(|r| r[c].text.width())
            .chain(std::iter::once(header.width()))
            .max()
            .unwrap_or(0)
    }

    /// Chooses what to show at `width` columns (`None`: everything, full width).
    fn layout(&self, width: Option<usize>) -> Layout {
        let n = self.cols.len();
        let mut l = Layout {
            shown: (0..n).collect(),
            headers: self.cols.iter().map(|c| c.header.clone()).collect(),
            widths: (0..n)
                .map(|c| self.natural(c, &self.cols[c].header))
                .collect(),
        };
        let Some(w) = width else { return l };
        if l.total() <= w {
            return l;
        }
        // 1. Shorter headers.
        for (c, col) in self.cols.iter().enumerate() {
            if let Some(s) = &col.short {
                l.headers[c] = s.clone();
                l.widths[c] = self.natural(c, s);
            }
        }
        // 2. Leave out the least important columns while the rest cannot fit even with
        // paths and prose at a comfortable width.
        let natural = l.widths.clone();
        loop {
            let mut comfy = l.clone();
            self.shrink(&mut comfy, 0, (PATH_COMFORT, TEXT_COMFORT));
            if comfy.total() <= w {
                break;
            }
            let Some(victim) = l
                .shown
                .iter()
                .copied()
                .filter(|&c| self.cols[c].drop > 0)
                .max_by_key(|&c| (self.cols[c].drop, c))
            else {
                break;
            };
            l.shown.retain(|&c| c != victim);
        }
        // 3. Paths and prose only as narrow as needed: first down to a comfortable width,
        // then to their minimum.
        l.widths = natural;
        self.shrink(&mut l, w, (PATH_COMFORT, TEXT_COMFORT));
        self.shrink(&mut l, w, (PATH_MIN, TEXT_MIN));
        l
    }

    /// Narrows the shown path and prose columns, always the widest first (so they end up
    /// alike rather than one squeezed), until the table fits in `w` or each is down to its
    /// floor (`(path, prose)`; never below its header).
    fn shrink(&self, l: &mut Layout, w: usize, (path_floor, text_floor): (usize, usize)) {
        while l.total() > w {
            let Some(c) = l
                .shown
                .iter()
                .copied()
                .filter(|&c| {
                    let floor = match self.cols[c].fit {
                        Fit::Keep => return false,
                        Fit::Path => path_floor,
                        Fit::Text => text_floor,
                    };
                    l.widths[c] > floor.max(l.headers[c].width())
                })
                .max_by_key(|&c| l.widths[c])
            else {
                return;
            };
            l.widths[c] -= 1;
        }
    }

    /// The table laid out for `width` terminal columns (`None`: full rows), with colour
    /// escapes when `color`.
    pub fn render(&self, width: Option<usize>, color: bool) -> String {
        let l = self.layout(width);
        let mut t = comfy_table::Table::new();
        t.load_preset(presets::NOTHING)
            .set_content_arrangement(ContentArrangement::Disabled);
        if color {
            t.enforce_styling();
        } else {
            t.force_no_tty();
        }
        t.set_header(l.shown.iter().map(|&c| l.headers[c].clone()));
        for r in &self.rows {
            t.add_row(l.shown.iter().map(|&c| {
                let limit = l.widths[c];
                let text = match self.cols[c].fit {
                    Fit::Keep => r[c].text.clone(),
                    Fit::Path => shorten_middle(&r[c].text, limit),
                    Fit::Text => wrap(&r[c].text, limit).join("\n"),
                };
                match r[c].paint {
                    Some(p) if color => p.cell(text),
                    _ => comfy_table::Cell::new(text),
                }
            }));
        }
        t.trim_fmt()
    }
}

impl Table {
    /// The table laid out for `term`.
    pub fn render_for(&self, term: Term) -> String {
        self.render(term.width, term.color)
    }
}

/// Where output for people goes: its width (`None`: unknown, no fitting) and whether it
/// takes colour. Renderers take one so tests can fix it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Term {
    pub width: Option<usize>,
    pub color: bool,
}

impl Term {
    /// stdout as it is: its terminal's width, colour as decided by `--color`.
    pub fn stdout() -> Term {
        Term {
            width: stdout_width(),
            color: color::enabled(),
        }
    }

    /// `text` painted as `p` when this terminal takes colour.
    pub fn paint(&self, text: &str, p: Paint) -> String {
        color::paint_if(self.color, text, p)
    }

    /// Prose wrapped between words to the width, when it is known; continuation lines
    /// indented by `indent`. Words are never cut.
    pub fn fill(&self, text: &str, indent: usize) -> String {
        match self.width {
            Some(w) => text
                .split('\n')
                .map(|l| wrap_opts(l, w, indent, false).join("\n"))
                .collect::<Vec<_>>()
                .join("\n"),
            None => text.to_string(),
        }
    }
}

/// The width of the terminal on stdout; `None` when stdout is not a terminal, or is one
/// that reports 0 columns (`script`, serial consoles) and COLUMNS does not say.
pub fn stdout_width() -> Option<usize> {
    if !std::io::stdout().is_terminal() {
        return None;
    }
    terminal_width(1)
}

/// As [`stdout_width`], for stderr.
pub fn stderr_width() -> Option<usize> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    terminal_width(2)
}

fn terminal_width(fd: i32) -> Option<usize> {
    // SAFETY: TIOCGWINSZ writes a winsize into the struct we pass.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: as above, on a terminal fd.
    if unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) } == 0 && ws.ws_col > 0 {
        return Some(usize::from(ws.ws_col));
    }
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|&c| c > 0)
}

/// Takes characters from the start of `s` up to `max` display columns.
fn head(s: &str, max: usize) -> &str {
    let mut w = 0;
    for (i, ch) in s.char_indices() {
        w += ch.width().unwrap_or(0);
        if w > max {
            return &s[..i];
        }
    }
    s
}

/// Takes characters from the end of `s` up to `max` display columns.
fn tail(s: &str, max: usize) -> &str {
    let mut w = 0;
    for (i, ch) in s.char_indices().rev() {
        w += ch.width().unwrap_or(0);
        if w > max {
            return &s[i + ch.len_utf8()..];
        }
    }
    s
}

/// Shortens `s` to `max` display columns by replacing its middle with `…`. A path keeps
/// its file name and as many leading directories as fit: `/tmp/…/credentials.json`.
pub fn shorten_middle(s: &str, max: usize) -> String {
    if s.width() <= max {
        return s.to_string();
    }
    if max <= 1 {
        return "…".chars().take(max).collect();
    }
    let budget = max - 1;
    if let Some(slash) = s.rfind('/').filter(|&i| i > 0) {
        let name = &s[slash..];
        if name.width() < budget {
            let h = head(&s[..slash], budget - name.width());
            // Cut the head after a directory when one fits, so `…` stands for whole names.
            let h = match h.rfind('/') {
                Some(i) if i > 0 => &h[..=i],
                _ => h,
            };
            return format!("{h}…{name}");
        }
    }
    let front = budget.div_ceil(2);
    format!("{}…{}", head(s, front), tail(s, budget - front))
}

/// Display width of `s`, not counting ANSI escape sequences (`ESC [ … letter`).
pub fn visible_width(s: &str) -> usize {
    let mut w = 0;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            for e in chars.by_ref() {
                if e.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            w += c.width().unwrap_or(0);
        }
    }
    w
}

/// Wraps a table cell's prose into lines of at most `width` columns, between words; a word
/// longer than a line is shortened in the middle.
pub fn wrap(s: &str, width: usize) -> Vec<String> {
    wrap_opts(s, width, 0, true)
}

/// Wraps `s` between words into lines of at most `width` columns (ANSI escapes take no
/// room). Continuation lines start with `indent` spaces. The spaces between words on one
/// line are kept as they were. A word longer than a line is shortened in the middle when
/// `shorten`, else left whole on its own line.
pub fn wrap_opts(s: &str, width: usize, indent: usize, shorten: bool) -> Vec<String> {
    if visible_width(s) <= width {
        return vec![s.to_string()];
    }
    // (spaces before, word)
    let mut tokens: Vec<(usize, &str)> = Vec::new();
    let mut rest = s;
    while !rest.is_empty() {
        let spaces = rest.len() - rest.trim_start_matches(' ').len();
        rest = &rest[spaces..];
        let end = rest.find(' ').unwrap_or(rest.len());
        if end > 0 {
            tokens.push((spaces, &rest[..end]));
        }
        rest = &rest[end..];
    }
    let indent_s = " ".repeat(indent.min(width / 2));
    let mut lines = Vec::new();
    let mut line = String::new();
    let mut line_w = 0;
    for (i, &(spaces, word)) in tokens.iter().enumerate() {
        let room = if lines.is_empty() {
            width
        } else {
            width - indent_s.len()
        };
        let word: std::borrow::Cow<'_, str> = if shorten && visible_width(word) > room {
            shorten_middle(word, room).into()
        } else {
            word.into()
        };
        let ww = visible_width(&word);
        let lead = if i == 0 { spaces } else { spaces.max(1) };
        if line_w > 0 && line_w + lead + ww > width {
            lines.push(std::mem::take(&mut line));
            line.push_str(&indent_s);
            line_w = indent_s.len();
        } else if line_w > 0 || i == 0 {
            line.push_str(&" ".repeat(lead));
            line_w += lead;
        }
        line.push_str(&word);
        line_w += ww;
    }
    if !line.trim().is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Term {
        /// No fitting, no colour (files, pipes, tests).
        pub(crate) fn plain() -> Term {
            Term {
                width: None,
                color: false,
            }
        }
    }

    fn sample() -> Table {
        let mut t = Table::new([
            Col::new("parent"),
            Col::new("exec").path(),
            Col::new("spawns"),
            Col::new("close/spawn med").short("closes"),
            Col::new("p95").drop(2),
            Col::new("strategy"),
            Col::new("leaked fds").short("leaked"),
            Col::new("note").text().drop(1),
        ]);
        t.add_row([
            "python3",
            "/usr/lib/jvm/java-17-openjdk-amd64/lib/jspawnhelper",
            "12",
            "19997",
            "4.33 ms",
            "close-loop",
            "0",
            "the child closed every possible fd before exec, one call each",
        ]);
        t.add_row([
            "sh",
            "/bin/true",
            "1",
            "0",
            "244 µs",
            "close-range",
            "2",
            "fine",
        ]);
        t
    }

    /// Every line within `w`, and no header word or cell word split across lines.
    fn check_fits(out: &str, w: usize) {
        for line in out.lines() {
            assert!(line.width() <= w, "line wider than {w}: {line:?}\n{out}");
        }
    }

    #[test]
    fn unknown_width_means_full_rows() {
        let out = sample().render(None, false);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{out}");
        assert!(lines[0].contains("close/spawn med") && lines[0].contains("note"));
        assert!(out.contains("/usr/lib/jvm/java-17-openjdk-amd64/lib/jspawnhelper"));
        assert!(!lines[0].ends_with(' '), "trailing spaces trimmed");
    }

    #[test]
    fn wide_enough_changes_nothing() {
        let t = sample();
        assert_eq!(t.render(Some(400), false), t.render(None, false));
    }

    #[test]
    fn narrow_terminals_shorten_drop_and_never_split_words() {
        let t = sample();
        for w in [120, 100, 80, 60] {
            let out = t.render(Some(w), false);
            check_fits(&out, w);
            for word in [
                "parent",
                "exec",
                "spawns",
                "strategy",
                "close-loop",
                "close-range",
            ] {
                assert!(out.contains(word), "{word} missing at {w}:\n{out}");
            }
        }
        let out80 = t.render(Some(80), false);
        assert!(
            out80.contains("closes") && !out80.contains("close/spawn"),
            "{out80}"
        );
        assert!(
            out80.contains("/usr/lib/jvm/…/jspawnhelper") || out80.contains('…'),
            "{out80}"
        );
        let out60 = t.render(Some(60), false);
        assert!(
            !out60.contains("note"),
            "the least important column goes first:\n{out60}"
        );
    }

    #[test]
    fn prose_wraps_between_words() {
        let mut t = Table::new([Col::new("SEVERITY"), Col::new("REASON").text()]);
        t.add_row([
            "critical",
            "listening tcp socket 0.0.0.0:8080 has no close-on-exec: it leaks into every child",
        ]);
        let out = t.render(Some(50), false);
        check_fits(&out, 50);
        assert!(out.lines().count() > 2, "{out}");
        for word in ["listening", "close-on-exec:", "0.0.0.0:8080", "child"] {
            assert!(out.contains(word), "{word} split:\n{out}");
        }
    }

    #[test]
    fn colour_only_when_asked() {
        let mut t = Table::new([Col::new("what")]);
        t.add_row([Cell::painted("LEAKED", Some(Paint::Alarm))]);
        assert!(!t.render(None, false).contains('\x1b'));
        assert!(t.render(None, true).contains("\x1b["));
    }

    #[test]
    fn paths_shorten_in_the_middle() {
        assert_eq!(
            shorten_middle("/tmp/fdaudit-demo-23146/x/credentials.json", 24),
            "/tmp/…/credentials.json"
        );
        assert_eq!(shorten_middle("/bin/true", 24), "/bin/true");
        let s = shorten_middle("/usr/lib/jvm/java-17-openjdk-amd64/lib/jspawnhelper", 30);
        assert_eq!(s, "/usr/lib/jvm/…/jspawnhelper");
        let s = shorten_middle("averyveryverylongfilenamewithoutslashes", 11);
        assert_eq!((s.width(), s.as_str()), (11, "avery…ashes"));
        assert_eq!(shorten_middle("/a/averyverylongname", 8).width(), 8);
        assert_eq!(shorten_middle("abc", 1), "…");
    }

    #[test]
    fn fills_lines_keeping_spacing_and_escapes_out_of_the_count() {
        let t = Term {
            width: Some(30),
            color: true,
        };
        let leaked = t.paint("LEAKED", Paint::Alarm);
        let line = format!("sh[1] -> 2 /bin/true  window 5 ms  none  {leaked} 2: 4 socket");
        let out = t.fill(&line, 4);
        for l in out.lines() {
            assert!(visible_width(l) <= 30, "{l:?}");
        }
        assert!(out.starts_with("sh[1] -> 2 /bin/true  window"), "{out:?}");
        assert!(out.contains(&leaked), "escape kept whole: {out:?}");
        assert!(
            out.lines().skip(1).all(|l| l.starts_with("    ")),
            "{out:?}"
        );
        assert_eq!(Term::plain().fill(&line, 4), line);
        assert_eq!(visible_width(&leaked), 6);
    }

    #[test]
    fn wraps_prose() {
        assert_eq!(wrap("a bb ccc", 4), ["a bb", "ccc"]);
        assert_eq!(wrap("short", 10), ["short"]);
        let w = wrap("see /var/lib/something/very/deep/file.txt now", 16);
        assert!(w.iter().all(|l| l.width() <= 16), "{w:?}");
        assert!(w.iter().any(|l| l.ends_with("/file.txt")), "{w:?}");
    }
}
