//! `unclosed --pprof FILE`: the outstanding fds as a pprof profile (`profile.proto`,
//! gzipped, as `go tool pprof` and every pprof reader take it): sample type
//! `outstanding_fds`/`count`, one sample per creating stack, its locations and functions
//! from the frames fdaudit named. The messages are declared by hand from upstream's schema
//! (google/pprof, `proto/profile.proto`), as trace/perfetto's are: field numbers and types
//! are upstream's; fields not written are left out.

use std::collections::HashMap;

use prost::Message as _;

use crate::engine::origin::Frame;

#[derive(Clone, PartialEq, prost::Message)]
pub struct Profile {
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    pub period: i64,
}

/// Both fields are string-table indexes.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueType {
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    /// Innermost first.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Label {
    #[prost(int64, tag = "1")]
    pub key: i64,
    #[prost(int64, tag = "2")]
    pub str: i64,
    #[prost(int64, tag = "3")]
    pub num: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Mapping {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(int64, tag = "5")]
    pub filename: i64,
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    /// Every location of it carries its function already: no reader symbolizes it again.
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Location {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    #[prost(uint64, tag = "3")]
    pub address: u64,
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Line {
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    #[prost(int64, tag = "2")]
    pub line: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Function {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(int64, tag = "2")]
    pub name: i64,
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    #[prost(int64, tag = "4")]
    pub filename: i64,
}

/// Builds the profile: ids are 1-based, string 0 is "" (as the format wants), equal
/// modules, functions and locations are written once.
#[derive(Default)]
struct Builder {
    p: Profile,
    strings: HashMap<String, i64>,
    mappings: HashMap<(String, String), u64>,
    functions: HashMap<(String, String), u64>,
    locations: HashMap<(u64, u64, u64, i64), u64>,
}

impl Builder {
    fn string(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = self.p.string_table.len() as i64;
        self.p.string_table.push(s.to_owned());
        self.strings.insert(s.to_owned(), i);
        i
    }

    fn mapping(&mut self, f: &Frame) -> u64 {
        let Some(module) = f.module.clone() else {
            return 0;
        };
        let build_id = f.build_id.clone().unwrap_or_default();
        if let Some(&id) = self.mappings.get(&(module.clone(), build_id.clone())) {
            return id;
        }
        let id = self.p.mapping.len() as u64 + 1;
        let m = Mapping {
            id,
            filename: self.string(&module),
            build_id: self.string(&build_id),
            has_functions: true,
        };
        self.p.mapping.push(m);
        self.mappings.insert((module, build_id), id);
        id
    }

    fn function(&mut self, f: &Frame) -> u64 {
        // `leak_one+0x31`: the function is `leak_one`; unnamed, its address in its module.
        let name = match &f.symbol {
            Some(s) => s
                .rsplit_once("+0x")
                .map_or(s.as_str(), |(n, _)| n)
                .to_owned(),
            None => match (&f.module, f.offset) {
                (Some(m), Some(off)) => {
                    format!("{:#x} in {}", off, m.rsplit('/').next().unwrap_or(m))
                }
                // A caller fdaudit does not know (its `unnamed` says why).
                _ if f.addr == 0 => "[unknown]".to_owned(),
                _ => format!("{:#x}", f.addr),
            },
        };
        let file = f
            .file
            .clone()
            .or_else(|| f.module.clone())
            .unwrap_or_default();
        let key = (name, file);
        if let Some(&id) = self.functions.get(&key) {
            return id;
        }
        let id = self.p.function.len() as u64 + 1;
        let name = self.string(&key.0);
        let filename = self.string(&key.1);
        self.p.function.push(Function {
            id,
            name,
            system_name: name,
            filename,
        });
        self.functions.insert(key, id);
        id
    }

    fn location(&mut self, f: &Frame) -> u64 {
        let mapping_id = self.mapping(f);
        let function_id = self.function(f);
        let address = f.offset.unwrap_or(f.addr);
        let line = f.line.map_or(0, i64::from);
        let key = (mapping_id, address, function_id, line);
        if let Some(&id) = self.locations.get(&key) {
            return id;
        }
        let id = self.p.location.len() as u64 + 1;
        self.p.location.push(Location {
            id,
            mapping_id,
            address,
            line: vec![Line { function_id, line }],
        });
        self.locations.insert(key, id);
        id
    }
}

/// The profile of `stacks` (frames innermost first, stack id, outstanding fds), taken at
/// `time_nanos` (Unix time).
pub fn profile(stacks: &[(Vec<Frame>, i32, u64)], time_nanos: i64) -> Profile {
    let mut b = Builder::default();
    b.string("");
    let kind = ValueType {
        r#type: b.string("outstanding_fds"),
        unit: b.string("count"),
    };
    b.p.sample_type = vec![kind.clone()];
    b.p.period_type = Some(kind);
    b.p.period = 1;
    b.p.time_nanos = time_nanos;
    let key = b.string("stack_id");
    for (frames, stack_id, count) in stacks {
        let mut location_id: Vec<u64> = frames.iter().map(|f| b.location(f)).collect();
        if location_id.is_empty() {
            // A stack the kernel did not take still holds its fds: one named location.
            location_id.push(b.location(&named("[no user stack]")));
        }
        b.p.sample.push(Sample {
            location_id,
            value: vec![*count as i64],
            label: vec![Label {
                key,
                str: 0,
                num: i64::from(*stack_id),
            }],
        });
    }
    b.p
}

/// A frame with a name only.
fn named(name: &str) -> Frame {
    Frame {
        symbol: Some(name.into()),
        ..Frame::default()
    }
}

/// The profile encoded and gzipped.
pub fn encode(p: &Profile) -> std::io::Result<Vec<u8>> {
    use std::io::Write as _;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&p.encode_to_vec())?;
    gz.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(sym: &str, module: &str, offset: u64, line: Option<u32>) -> Frame {
        Frame {
            addr: 0x7000 + offset,
            file: line.map(|_| "/src/svc.c".into()),
            line,
            module: Some(module.into()),
            offset: Some(offset),
            ..named(sym)
        }
    }

    #[test]
    fn one_sample_per_stack_with_shared_functions_and_a_gzip_that_decodes() {
        let open = frame("__open+0x51", "/usr/lib/libc.so.6", 0x100, None);
        let stacks = vec![
            (
                vec![open.clone(), frame("leak_one+0x31", "/svc", 0x20, Some(9))],
                4,
                120,
            ),
            (
                vec![open, frame("leak_one+0x40", "/svc", 0x2f, Some(10))],
                5,
                3,
            ),
            (vec![], -14, 2),
        ];
        let p = profile(&stacks, 42);
        assert_eq!(p.string_table[0], "", "string 0 is empty");
        let s = |i: i64| p.string_table[i as usize].as_str();
        assert_eq!(s(p.sample_type[0].r#type), "outstanding_fds");
        assert_eq!(s(p.sample_type[0].unit), "count");
        assert_eq!(p.sample.len(), 3);
        assert_eq!(p.sample[0].value, vec![120]);
        let names: Vec<&str> = p.function.iter().map(|f| s(f.name)).collect();
        assert_eq!(
            names,
            ["__open", "leak_one", "[no user stack]"],
            "one function per name"
        );
        assert_eq!(
            p.location.len(),
            4,
            "__open's location is shared: {:?}",
            p.location
        );
        assert_eq!(p.mapping.len(), 2);
        assert_eq!(p.sample[2].label[0].num, -14);
        let gz = encode(&p).expect("encodes");
        assert_eq!(&gz[..2], &[0x1f, 0x8b], "gzip magic");
        let mut raw = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut raw)
            .expect("gunzips");
        assert_eq!(Profile::decode(&raw[..]).expect("decodes"), p);
    }
}
