//! `cargo xtask sizes`: the largest files and functions outside tests, against the limits of
//! issue #9 (600 lines a file, 80 a function), and the import cycles between sibling modules.
//!
//! Rust is read as text: comments, strings and character literals are blanked first, so
//! their braces and `crate::` paths do not count. A file's lines are those before its first
//! line starting with `#[cfg(test)]`; a function runs from its `fn` line to its closing
//! brace. The `tests` crate and `tests.rs` modules are test code and are left out.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result};

/// The crates measured, relative to the workspace root.
pub const CRATES: [&str; 4] = ["fdaudit", "fdaudit-common", "fdaudit-ebpf", "xtask"];

/// One file outside tests.
#[derive(Debug)]
pub struct Source {
    /// Relative to the workspace root.
    pub path: PathBuf,
    /// Its module path inside its crate (`["trace", "report"]`; empty for the crate root).
    pub module: Vec<String>,
    /// The text before `#[cfg(test)]`, comments, strings and literals blanked.
    pub code: String,
}

/// A function and its length in lines.
#[derive(Debug)]
pub struct Function {
    pub path: PathBuf,
    pub name: String,
    pub line: usize,
    pub lines: usize,
}

/// The `.rs` files of `krate`'s `src/` and its build script, test modules left out.
pub fn sources(root: &Path, krate: &str) -> Result<Vec<Source>> {
    let src = root.join(krate).join("src");
    let mut files = Vec::new();
    walk(&src, &mut files)?;
    let build = root.join(krate).join("build.rs");
    if build.is_file() {
        files.push(build);
    }
    let mut out = Vec::new();
    for file in files {
        if file.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("failed to read {}", file.display()))?;
        let before_tests = match text.find("\n#[cfg(test)]") {
            Some(i) => &text[..i + 1],
            None if text.starts_with("#[cfg(test)]") => "",
            None => &text,
        };
        out.push(Source {
            module: module_path(&src, &file),
            path: file.strip_prefix(root).unwrap_or(&file).to_path_buf(),
            code: blank_non_code(before_tests),
        });
    }
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("failed to read {}", dir.display()))?;
    for entry in entries {
        let path = entry
            .with_context(|| format!("failed to read {}", dir.display()))?
            .path();
        if path.is_dir() {
            walk(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// `src/trace/report.rs` → `["trace", "report"]`; `mod.rs`, `main.rs`, `lib.rs` name their
/// directory's module.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let Ok(rel) = file.strip_prefix(src) else {
        return Vec::new(); // build.rs
    };
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "main" | "lib")
    ) {
        parts.pop();
    }
    parts
}

/// `src` with comments, string literals and character literals replaced by spaces (line
/// breaks kept, so line numbers hold).
pub fn blank_non_code(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let blank = |out: &mut String, s: &[char]| {
        out.extend(s.iter().map(|&ch| if ch == '\n' { '\n' } else { ' ' }));
    };
    let mut i = 0;
    while i < c.len() {
        let end = match c[i] {
            '/' if c.get(i + 1) == Some(&'/') => {
                (i..c.len()).find(|&j| c[j] == '\n').unwrap_or(c.len())
            }
            '/' if c.get(i + 1) == Some(&'*') => block_comment_end(&c, i),
            '"' => string_end(&c, i + 1),
            'r' | 'b' if !ident_char(c.get(i.wrapping_sub(1))) => match raw_string_end(&c, i) {
                Some(e) => e,
                None => {
                    out.push(c[i]);
                    i += 1;
                    continue;
                }
            },
            // '\n', '\'', '\u{…}': the escaped character is skipped before the closing quote.
            '\'' if c.get(i + 1) == Some(&'\\') => (i + 3..c.len())
                .find(|&j| c[j] == '\'')
                .map_or(c.len(), |j| j + 1),
            '\'' if c.get(i + 2) == Some(&'\'') => i + 3,
            ch => {
                out.push(ch);
                i += 1;
                continue;
            }
        };
        blank(&mut out, &c[i..end]);
        i = end;
    }
    out
}

fn ident_char(c: Option<&char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || *c == '_')
}

/// The end (exclusive) of a `/* */` comment starting at `i`, nested ones included.
fn block_comment_end(c: &[char], mut i: usize) -> usize {
    let mut depth = 0;
    while i < c.len() {
        if c[i] == '/' && c.get(i + 1) == Some(&'*') {
            depth += 1;
            i += 2;
        } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += 1;
        }
    }
    c.len()
}

/// The end (exclusive) of a string whose contents start at `i`.
fn string_end(c: &[char], mut i: usize) -> usize {
    while i < c.len() {
        match c[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            _ => i += 1,
        }
    }
    c.len()
}

/// The end of a `b"…"`, `r"…"`, `r#"…"#` or `br#"…"#` literal at `i`, if one starts there.
fn raw_string_end(c: &[char], i: usize) -> Option<usize> {
    let mut j = i;
    if c[j] == 'b' {
        j += 1;
        if c.get(j) == Some(&'"') {
            return Some(string_end(c, j + 1));
        }
        if c.get(j) == Some(&'\'') {
            return None; // b'x' is read as a character literal next
        }
    }
    if c.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let hashes = c[j..].iter().take_while(|&&h| h == '#').count();
    j += hashes;
    if c.get(j) != Some(&'"') {
        return None;
    }
    j += 1;
    while j < c.len() {
        if c[j] == '"'
            && c[j + 1..]
                .iter()
                .take(hashes)
                .filter(|&&h| h == '#')
                .count()
                == hashes
        {
            return Some(j + 1 + hashes);
        }
        j += 1;
    }
    Some(c.len())
}

/// The functions with a body in `code` (blanked), with their first line and length.
pub fn functions(path: &Path, code: &str) -> Vec<Function> {
    let c: Vec<char> = code.chars().collect();
    let line_at = |i: usize| c[..i].iter().filter(|&&ch| ch == '\n').count() + 1;
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(at) = find_word(&c, i, "fn") {
        i = at + 2;
        let name_start = (i..c.len())
            .find(|&j| !c[j].is_whitespace())
            .unwrap_or(c.len());
        let name: String = c[name_start..]
            .iter()
            .take_while(|ch| ch.is_alphanumeric() || **ch == '_')
            .collect();
        if name.is_empty() || name_start == i {
            continue; // a `fn(…)` type
        }
        let Some(open) = (i..c.len()).find(|&j| c[j] == '{' || c[j] == ';') else {
            break;
        };
        if c[open] == ';' {
            continue; // a declaration
        }
        let mut depth = 0;
        let close = (open..c.len())
            .find(|&j| {
                match c[j] {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => {}
                }
                depth == 0
            })
            .unwrap_or(c.len() - 1);
        let first = line_at(at);
        out.push(Function {
            path: path.to_path_buf(),
            name,
            line: first,
            lines: line_at(close) - first + 1,
        });
    }
    out
}

/// The next `word` at or after `from` that is a whole word.
fn find_word(c: &[char], from: usize, word: &str) -> Option<usize> {
    let w: Vec<char> = word.chars().collect();
    (from..c.len().saturating_sub(w.len() - 1)).find(|&i| {
        c[i..i + w.len()] == w[..]
            && !ident_char(i.checked_sub(1).map(|p| &c[p]))
            && !ident_char(c.get(i + w.len()))
    })
}

/// Lines of a blanked file (the text before its tests).
pub fn line_count(code: &str) -> usize {
    code.lines().count()
}

/// The modules `code`, in module `module`, refers to: `crate::a::b`, `super::c`, and each
/// path of a `crate::{…}` group, resolved to the longest prefix in `modules`.
pub fn references(
    module: &[String],
    code: &str,
    modules: &BTreeSet<Vec<String>>,
) -> BTreeSet<Vec<String>> {
    let c: Vec<char> = code.chars().collect();
    let mut out = BTreeSet::new();
    for (start, base) in [
        ("crate::", Vec::new()),
        ("super::", module[..module.len().saturating_sub(1)].to_vec()),
    ] {
        let mut i = 0;
        while let Some(at) = find_word(&c, i, start.trim_end_matches("::")) {
            i = at + start.len();
            if c[at..].iter().take(start.len()).collect::<String>() != start {
                continue;
            }
            for path in paths_at(&c, i) {
                let mut full = base.clone();
                for seg in path {
                    if seg == "super" {
                        full.pop();
                    } else {
                        full.push(seg);
                    }
                }
                while !full.is_empty() && !modules.contains(&full) {
                    full.pop();
                }
                if !full.is_empty() {
                    out.insert(full);
                }
            }
        }
    }
    out
}

/// The paths written at `i`: `a::b::C` (one), or `{a::b, c::{d, e}}` (each, with the
/// inner groups' first segment only).
fn paths_at(c: &[char], i: usize) -> Vec<Vec<String>> {
    let mut segs = Vec::new();
    let mut j = i;
    loop {
        let seg: String = c[j..]
            .iter()
            .take_while(|ch| ch.is_alphanumeric() || **ch == '_')
            .collect();
        if seg.is_empty() {
            break;
        }
        j += seg.chars().count();
        segs.push(seg);
        if c.get(j) == Some(&':') && c.get(j + 1) == Some(&':') {
            j += 2;
        } else {
            return vec![segs];
        }
    }
    if c.get(j) != Some(&'{') {
        return vec![segs];
    }
    // A group: split at the commas of its own level.
    let mut out = Vec::new();
    let mut depth = 0;
    let mut item_start = j + 1;
    for k in j..c.len() {
        match c[k] {
            '{' => depth += 1,
            '}' | ',' if depth == 1 => {
                let off = (item_start..k)
                    .find(|&m| !c[m].is_whitespace())
                    .unwrap_or(k);
                for p in paths_at(c, off) {
                    let mut full = segs.clone();
                    full.extend(p);
                    out.push(full);
                }
                item_start = k + 1;
                if c[k] == '}' {
                    break;
                }
            }
            '}' => depth -= 1,
            _ => {}
        }
    }
    out
}

/// The import cycles among sibling modules: for each module with children, the groups of
/// its children that refer to each other round a loop (Tarjan's strongly connected
/// components). A reference from `a::x` to `b::y` counts as `a` → `b` among the children of
/// their common parent; a module using its own parent or child does not count.
pub fn cycles(sources: &[Source]) -> Vec<Vec<Vec<String>>> {
    let modules: BTreeSet<Vec<String>> = sources.iter().map(|s| s.module.clone()).collect();
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for s in sources {
        for to in references(&s.module, &s.code, &modules) {
            let common = s.module.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if common < s.module.len() && common < to.len() {
                edges
                    .entry(s.module[..=common].to_vec())
                    .or_default()
                    .insert(to[..=common].to_vec());
            }
        }
    }
    let mut found: Vec<_> = strongly_connected(&edges)
        .into_iter()
        .filter(|c| c.len() > 1)
        .collect();
    for c in &mut found {
        c.sort();
    }
    found
}

fn strongly_connected(
    edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
) -> Vec<Vec<Vec<String>>> {
    struct Tarjan<'a> {
        edges: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<Vec<String>, (usize, usize)>,
        stack: Vec<Vec<String>>,
        out: Vec<Vec<Vec<String>>>,
    }
    impl Tarjan<'_> {
        fn visit(&mut self, v: &Vec<String>) {
            let edges = self.edges;
            let n = self.index.len();
            self.index.insert(v.clone(), (n, n));
            self.stack.push(v.clone());
            for w in edges.get(v).into_iter().flatten() {
                let low = match self.index.get(w) {
                    None => {
                        self.visit(w);
                        self.index[w].1
                    }
                    Some(&(i, _)) if self.stack.contains(w) => i,
                    Some(_) => continue,
                };
                let e = self.index.get_mut(v).expect("visited");
                e.1 = e.1.min(low);
            }
            if self.index[v].0 == self.index[v].1 {
                let at = self
                    .stack
                    .iter()
                    .rposition(|x| x == v)
                    .expect("on the stack");
                self.out.push(self.stack.split_off(at));
            }
        }
    }
    let mut t = Tarjan {
        edges,
        index: BTreeMap::new(),
        stack: Vec::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    t.out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn braces_in_literals_and_comments_do_not_count() {
        let src = "fn a() {\n    let s = \"{\"; let c = '{'; let q = '\\''; // }\n    let r = r#\"}\"#; /* { /* } */ */\n}\nfn b<'x>(_: &'x str) -> fn(u8) { todo!() }\ntrait T { fn c(&self); }\n";
        let code = blank_non_code(src);
        assert_eq!(code.lines().count(), src.lines().count());
        let fns = functions(Path::new("x.rs"), &code);
        let got: Vec<(&str, usize, usize)> = fns
            .iter()
            .map(|f| (f.name.as_str(), f.line, f.lines))
            .collect();
        assert_eq!(got, [("a", 1, 4), ("b", 5, 1)]);
    }

    #[test]
    fn sibling_modules_importing_each_other_are_a_cycle() {
        let src = |module: &[&str], code: &str| Source {
            path: PathBuf::new(),
            module: module.iter().map(|s| s.to_string()).collect(),
            code: code.into(),
        };
        let sources = [
            src(&[], "mod a; mod b; mod c;"),
            src(&["a"], "use crate::{b::X, c};"),
            src(&["b"], "use super::a::inner::Y;"),
            src(&["a", "inner"], "use super::super::c::Z;"),
            src(&["c"], "use crate::a;"),
        ];
        let names: Vec<Vec<String>> = cycles(&sources)
            .into_iter()
            .map(|c| c.into_iter().map(|m| m.join("::")).collect())
            .collect();
        assert_eq!(names, [vec!["a", "b", "c"]]);
        let one_way = [
            src(&["a"], "use crate::{b::X, c};"),
            src(&["a", "inner"], "use super::super::c::Z;"),
            src(&["b"], "use crate::c::W;"),
            src(&["c"], "fn f() { a::g() }"),
        ];
        assert!(cycles(&one_way).is_empty());
    }
}
