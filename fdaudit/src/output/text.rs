//! Strings in and out: escaping for people, lossless encoding for machines.
//!
//! Paths, command lines and comms are bytes. For people they are printed with control and
//! bidirectional-override characters escaped (a file name must not move the cursor, colour
//! the terminal or reverse the rest of the line). For machines they are JSON strings with the
//! real characters (standard JSON escaping only); where the bytes are not UTF-8 the string is
//! the lossy form and a sibling `<field>_b64` field holds the exact bytes, base64.

use std::{borrow::Cow, marker::PhantomData};

use base64::Engine as _;
use serde::{ser::SerializeMap as _, Serialize, Serializer};

/// Characters a terminal would act on rather than show: C0/C1 controls, DEL, and the
/// invisible bidirectional controls and line separators (U+202E and friends) that reorder or
/// break what follows them.
pub fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{2028}' | '\u{2029}'
            | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// Escapes control and bidi characters and invalid UTF-8 (`\xff`) so bytes are safe to print.
pub fn escape_bytes(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        push_escaped(&mut s, chunk.valid());
        for b in chunk.invalid() {
            s.push_str(&format!("\\x{b:02x}"));
        }
    }
    s
}

/// [`escape_bytes`] for text that is already a string (error messages, reasons).
pub fn escape(text: &str) -> String {
    if !text.chars().any(needs_escape) {
        return text.to_owned();
    }
    let mut s = String::with_capacity(text.len() + 8);
    push_escaped(&mut s, text);
    s
}

/// A path for a message: its bytes, escaped.
pub fn escape_path(p: &std::path::Path) -> String {
    use std::os::unix::ffi::OsStrExt as _;
    escape_bytes(p.as_os_str().as_bytes())
}

fn push_escaped(s: &mut String, text: &str) {
    for c in text.chars() {
        if c.is_control() {
            s.extend(c.escape_default());
        } else if needs_escape(c) {
            s.extend(c.escape_unicode());
        } else {
            s.push(c);
        }
    }
}

/// Base64 of the bytes when they are not valid UTF-8 (what `<field>_b64` carries).
pub fn b64_if_invalid(bytes: &[u8]) -> Option<String> {
    std::str::from_utf8(bytes)
        .is_err()
        .then(|| base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// The name of a [`Lossless`] field in JSON and of its `_b64` sibling.
pub trait FieldName {
    const NAME: &'static str;
    const B64: &'static str;
}

/// Declares a [`FieldName`] type: `lossless_field!(PathField, "path")`.
#[macro_export]
macro_rules! lossless_field {
    ($ty:ident, $name:literal) => {
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct $ty;
        impl $crate::output::text::FieldName for $ty {
            const NAME: &'static str = $name;
            const B64: &'static str = concat!($name, "_b64");
        }
    };
}

/// Field names shared by several records (same concept, same name everywhere).
pub mod fields {
    crate::lossless_field!(Target, "target");
    crate::lossless_field!(Comm, "comm");
    crate::lossless_field!(Local, "local");
    crate::lossless_field!(Remote, "remote");
}

/// Bytes (or a list of byte strings) that serialise losslessly: used with
/// `#[serde(flatten)]`, it writes `"<name>": <lossy string>` and, only when the bytes are
/// not UTF-8, `"<name>_b64": <base64>` (for a list, every element encoded, so the arrays
/// line up).
pub struct Lossless<T, F> {
    pub raw: T,
    _name: PhantomData<F>,
}

impl<T, F> Lossless<T, F> {
    pub fn new(raw: T) -> Self {
        Lossless {
            raw,
            _name: PhantomData,
        }
    }
}

impl<T: Clone, F> Clone for Lossless<T, F> {
    fn clone(&self) -> Self {
        Lossless::new(self.raw.clone())
    }
}

impl<T: std::fmt::Debug, F> std::fmt::Debug for Lossless<T, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.raw.fmt(f)
    }
}

impl<T: PartialEq, F> PartialEq for Lossless<T, F> {
    fn eq(&self, other: &Self) -> bool {
        self.raw == other.raw
    }
}

impl<T: Eq, F> Eq for Lossless<T, F> {}

impl<T: Default, F> Default for Lossless<T, F> {
    fn default() -> Self {
        Lossless::new(T::default())
    }
}

impl<T, F> std::ops::Deref for Lossless<T, F> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.raw
    }
}

impl<T, F> std::ops::DerefMut for Lossless<T, F> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.raw
    }
}

impl<F> Lossless<Vec<u8>, F> {
    /// The bytes, escaped for people.
    pub fn escaped(&self) -> String {
        escape_bytes(&self.raw)
    }

    pub fn lossy(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.raw)
    }
}

impl<F> From<&[u8]> for Lossless<Vec<u8>, F> {
    fn from(b: &[u8]) -> Self {
        Lossless::new(b.to_vec())
    }
}

impl<F> From<&str> for Lossless<Vec<u8>, F> {
    fn from(s: &str) -> Self {
        Lossless::new(s.as_bytes().to_vec())
    }
}

impl<F: FieldName> Serialize for Lossless<Vec<u8>, F> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry(F::NAME, &String::from_utf8_lossy(&self.raw))?;
        if let Some(b) = b64_if_invalid(&self.raw) {
            m.serialize_entry(F::B64, &b)?;
        }
        m.end()
    }
}

impl<F: FieldName> Serialize for Lossless<Vec<Vec<u8>>, F> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        let lossy: Vec<Cow<'_, str>> = self
            .raw
            .iter()
            .map(|a| String::from_utf8_lossy(a))
            .collect();
        m.serialize_entry(F::NAME, &lossy)?;
        if self.raw.iter().any(|a| std::str::from_utf8(a).is_err()) {
            let all: Vec<String> = self
                .raw
                .iter()
                .map(|a| base64::engine::general_purpose::STANDARD.encode(a))
                .collect();
            m.serialize_entry(F::B64, &all)?;
        }
        m.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::lossless_field!(TestPath, "path");

    #[derive(Serialize)]
    struct Rec {
        fd: u32,
        #[serde(flatten)]
        path: Lossless<Vec<u8>, TestPath>,
    }

    #[test]
    fn escapes_control_bidi_and_invalid_bytes() {
        assert_eq!(escape_bytes(b"a\tb\n\xff/c"), "a\\tb\\n\\xff/c");
        assert_eq!(escape_bytes("é".as_bytes()), "é");
        assert_eq!(escape_bytes(b"x\x1b[31m"), "x\\u{1b}[31m");
        assert_eq!(escape("evil\u{202E}txt.exe"), "evil\\u{202e}txt.exe");
        assert_eq!(escape("a\u{2066}b\u{200f}"), "a\\u{2066}b\\u{200f}");
        assert_eq!(escape("plain"), "plain");
    }

    #[test]
    fn json_keeps_real_characters_and_exact_bytes() {
        let r = Rec {
            fd: 3,
            path: Lossless::new(b"/tmp/x\x1b[31m\nFAKE".to_vec()),
        };
        let j = serde_json::to_string(&r).unwrap();
        assert_eq!(j, r#"{"fd":3,"path":"/tmp/x\u001b[31m\nFAKE"}"#);
        let back: serde_json::Value = serde_json::from_str(&j).unwrap();
        assert_eq!(
            back["path"].as_str().unwrap().as_bytes(),
            b"/tmp/x\x1b[31m\nFAKE"
        );

        let r = Rec {
            fd: 4,
            path: Lossless::new(b"/tmp/\xff\xfe".to_vec()),
        };
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["path"], "/tmp/\u{FFFD}\u{FFFD}");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(v["path_b64"].as_str().unwrap())
            .unwrap();
        assert_eq!(bytes, b"/tmp/\xff\xfe");
        // A file literally named `\xff\xfe` is a different string, with no _b64.
        let lit = serde_json::to_value(Rec {
            fd: 5,
            path: Lossless::new(br"/tmp/\xff\xfe".to_vec()),
        })
        .unwrap();
        assert_eq!(lit["path"], r"/tmp/\xff\xfe");
        assert!(lit.get("path_b64").is_none());
    }

    crate::lossless_field!(TestArgv, "argv");

    #[test]
    fn argv_lists_keep_empty_elements_and_align_b64() {
        let a: Lossless<Vec<Vec<u8>>, TestArgv> =
            Lossless::new(vec![b"/bin/true".to_vec(), Vec::new(), b"\xff".to_vec()]);
        #[derive(Serialize)]
        struct R<'a> {
            #[serde(flatten)]
            argv: &'a Lossless<Vec<Vec<u8>>, TestArgv>,
        }
        let v = serde_json::to_value(R { argv: &a }).unwrap();
        assert_eq!(v["argv"], serde_json::json!(["/bin/true", "", "\u{FFFD}"]));
        assert_eq!(
            v["argv_b64"],
            serde_json::json!(["L2Jpbi90cnVl", "", "/w=="])
        );
    }
}
