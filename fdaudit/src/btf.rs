//! A small reader of kernel BTF (/sys/kernel/btf/vmlinux): struct member offsets by name.
//!
//! Rust eBPF code gets no CO-RE relocations, so the loader looks the offsets up here and hands
//! them to the programs as globals ([`fdaudit_common::Config`]).

use std::{collections::HashMap, path::Path};

use fdaudit_common::{Config, CONFIG_MAGIC, NO_OFFSET};
use thiserror::Error;

/// Where the running kernel exposes its BTF.
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

const BTF_MAGIC: u16 = 0xeb9f;

const KIND_INT: u32 = 1;
const KIND_PTR: u32 = 2;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_FWD: u32 = 7;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_FUNC: u32 = 12;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_FLOAT: u32 = 16;
const KIND_DECL_TAG: u32 = 17;
const KIND_TYPE_TAG: u32 = 18;
const KIND_ENUM64: u32 = 19;

/// Errors reading BTF or finding a member in it.
#[derive(Debug, Error)]
pub enum BtfError {
    #[error("failed to read {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("not BTF data: {0}")]
    Malformed(&'static str),
    #[error("unknown BTF type kind {0}")]
    UnknownKind(u32),
    #[error("struct {0} not found in kernel BTF")]
    NoStruct(String),
    #[error("member {member} not found in {ty}")]
    NoMember { ty: String, member: String },
    #[error("{0} is a bitfield or not byte aligned")]
    Unaligned(String),
}

#[derive(Debug, Clone)]
struct Member {
    name: u32,
    ty: u32,
    /// Offset in bits.
    bit_offset: u32,
    bitfield: bool,
}

#[derive(Debug, Clone)]
enum Type {
    /// STRUCT or UNION with its members.
    Composite {
        name: u32,
        members: Vec<Member>,
    },
    /// TYPEDEF, VOLATILE, CONST, RESTRICT, TYPE_TAG: refers to another type.
    Alias(u32),
    /// FUNC: a kernel function, by name.
    Func(u32),
    Other,
}

/// Parsed BTF: types by id and the string section.
pub struct Btf {
    types: Vec<Type>,
    strings: Vec<u8>,
    /// struct name -> type id (the first complete definition).
    structs: HashMap<String, u32>,
}

impl Btf {
    /// Reads the running kernel's BTF.
    pub fn from_sys_fs() -> Result<Self, BtfError> {
        Self::from_file(Path::new(VMLINUX_BTF))
    }

    pub fn from_file(path: &Path) -> Result<Self, BtfError> {
        let data = std::fs::read(path).map_err(|source| BtfError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&data)
    }

    /// Parses raw BTF (little-endian, as on x86_64).
    pub fn parse(data: &[u8]) -> Result<Self, BtfError> {
        let u16_at = |o: usize| -> Result<u16, BtfError> {
            data.get(o..o + 2)
                .map(|b| u16::from_le_bytes([b[0], b[1]]))
                .ok_or(BtfError::Malformed("truncated header"))
        };
        let u32_at = |o: usize| le_u32(data, o);
        if u16_at(0)? != BTF_MAGIC {
            return Err(BtfError::Malformed("bad magic"));
        }
        let hdr_len = u32_at(4)? as usize;
        let type_off = u32_at(8)? as usize;
        let type_len = u32_at(12)? as usize;
        let str_off = u32_at(16)? as usize;
        let str_len = u32_at(20)? as usize;
        let types_start = hdr_len + type_off;
        let types_end = types_start + type_len;
        let strs_start = hdr_len + str_off;
        let strings = data
            .get(strs_start..strs_start + str_len)
            .ok_or(BtfError::Malformed("string section out of bounds"))?
            .to_vec();
        if types_end > data.len() {
            return Err(BtfError::Malformed("type section out of bounds"));
        }

        // Type id 0 is void.
        let mut types = vec![Type::Other];
        let mut o = types_start;
        while o < types_end {
            let ty = read_type(data, &mut o)?;
            types.push(ty);
        }
        if o != types_end {
            return Err(BtfError::Malformed("type section length mismatch"));
        }

        let mut btf = Btf {
            types,
            strings,
            structs: HashMap::new(),
        };
        let mut structs = HashMap::new();
        for (id, t) in btf.types.iter().enumerate() {
            if let Type::Composite { name, members } = t {
                if *name != 0 && !members.is_empty() {
                    structs
                        .entry(btf.str_at(*name).to_string())
                        .or_insert(id as u32);
                }
            }
        }
        btf.structs = structs;
        Ok(btf)
    }

    fn str_at(&self, off: u32) -> &str {
        let s = self.strings.get(off as usize..).unwrap_or_default();
        let end = s.iter().position(|&b| b == 0).unwrap_or(s.len());
        std::str::from_utf8(&s[..end]).unwrap_or("")
    }

    fn resolve(&self, mut id: u32) -> u32 {
        for _ in 0..32 {
            match self.types.get(id as usize) {
                Some(Type::Alias(next)) => id = *next,
                _ => break,
            }
        }
        id
    }

    /// Bit offset of `member` in the composite `id`, searching anonymous members too.
    fn find_member(&self, id: u32, member: &str) -> Option<(u32, u32, bool)> {
        let Some(Type::Composite { members, .. }) = self.types.get(self.resolve(id) as usize)
        else {
            return None;
        };
        for m in members {
            if m.name != 0 && self.str_at(m.name) == member {
                return Some((m.bit_offset, m.ty, m.bitfield));
            }
        }
        for m in members.iter().filter(|m| m.name == 0) {
            if let Some((off, ty, bf)) = self.find_member(m.ty, member) {
                return Some((m.bit_offset + off, ty, bf));
            }
        }
        None
    }

    /// The type id of kernel function `name` (what fentry programs attach to by id).
    pub fn func_id(&self, name: &str) -> Option<u32> {
        self.types.iter().enumerate().find_map(|(id, t)| match t {
            Type::Func(n) if self.str_at(*n) == name => Some(id as u32),
            _ => None,
        })
    }

    /// Byte offset of a dotted member path in a struct: `offset("file", "f_path.dentry")`.
    pub fn offset(&self, ty: &str, path: &str) -> Result<u32, BtfError> {
        let mut id = *self
            .structs
            .get(ty)
            .ok_or_else(|| BtfError::NoStruct(ty.to_string()))?;
        let mut bits = 0;
        for part in path.split('.') {
            let (off, next, bitfield) =
                self.find_member(id, part)
                    .ok_or_else(|| BtfError::NoMember {
                        ty: ty.to_string(),
                        member: path.to_string(),
                    })?;
            if bitfield {
                return Err(BtfError::Unaligned(format!("{ty}.{path}")));
            }
            bits += off;
            id = next;
        }
        if bits % 8 != 0 {
            return Err(BtfError::Unaligned(format!("{ty}.{path}")));
        }
        Ok(bits / 8)
    }

    /// Whether a struct of that name exists.
    pub fn has_struct(&self, ty: &str) -> bool {
        self.structs.contains_key(ty)
    }
}

/// Every offset the programs need, looked up in `btf`.
pub fn config_from_btf(btf: &Btf) -> Result<Config, BtfError> {
    let o = |ty: &str, path: &str| btf.offset(ty, path);
    let regs = crate::arch::syscall_regs(o)?;
    Ok(Config {
        task_pid: o("task_struct", "pid")?,
        task_tgid: o("task_struct", "tgid")?,
        task_files: o("task_struct", "files")?,
        task_mm: o("task_struct", "mm")?,
        task_comm: o("task_struct", "comm")?,
        task_signal: o("task_struct", "signal")?,
        task_exit_code: o("task_struct", "exit_code")?,
        signal_live: o("signal_struct", "live")?,
        files_fdt: o("files_struct", "fdt")?,
        fdt_max_fds: o("fdtable", "max_fds")?,
        fdt_fd: o("fdtable", "fd")?,
        fdt_open_fds: o("fdtable", "open_fds")?,
        file_inode: o("file", "f_inode")?,
        file_flags: o("file", "f_flags")?,
        file_dentry: o("file", "f_path.dentry")?,
        file_private: o("file", "private_data")?,
        dentry_name: o("dentry", "d_name.name")?,
        inode_mode: o("inode", "i_mode")?,
        inode_ino: o("inode", "i_ino")?,
        inode_sb: o("inode", "i_sb")?,
        inode_rdev: o("inode", "i_rdev")?,
        sb_magic: o("super_block", "s_magic")?,
        sb_dev: o("super_block", "s_dev")?,
        socket_sk: o("socket", "sk")?,
        socket_type: o("socket", "type")?,
        sk_family: o("sock", "__sk_common.skc_family")?,
        mm_arg_start: o("mm_struct", "arg_start")?,
        mm_arg_end: o("mm_struct", "arg_end")?,
        bprm_filename: o("linux_binprm", "filename")?,
        regs_arg0: regs.arg0,
        regs_arg1: regs.arg1,
        regs_arg2: regs.arg2,
        regs_nr: regs.nr,
        regs_exit_arg0: regs.exit_arg0,
        hot_mask: fdaudit_common::HOT_SLOTS - 1,
        file_mnt: o("file", "f_path.mnt")?,
        file_pos: o("file", "f_pos")?,
        dentry_parent: o("dentry", "d_parent")?,
        vfsmount_root: o("vfsmount", "mnt_root")?,
        mount_mnt: o("mount", "mnt")?,
        mount_parent: o("mount", "mnt_parent")?,
        mount_mountpoint: o("mount", "mnt_mountpoint")?,
        reads: 0,
        // x86 only: what tells a compat (int $0x80) syscall apart, and its argument registers.
        task_ti_status: o("task_struct", "thread_info.status").unwrap_or(NO_OFFSET),
        regs_bx: o("pt_regs", "bx").unwrap_or(NO_OFFSET),
        regs_cx: o("pt_regs", "cx").unwrap_or(NO_OFFSET),
        inode_nlink: o("inode", "__i_nlink")?,
        task_self_exec_id: o("task_struct", "self_exec_id")?,
        task_parent_exec_id: o("task_struct", "parent_exec_id")?,
        magic: CONFIG_MAGIC,
        cgroup_level: 0,
        task_btf: 0, // set by the loader, which probes for the helper
        cgroup_id: 0,
    })
}

/// A little-endian u32 at `o`.
fn le_u32(data: &[u8], o: usize) -> Result<u32, BtfError> {
    data.get(o..o + 4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or(BtfError::Malformed("truncated"))
}

/// Reads the type record at `*o` (its header and kind-specific tail) and moves past it.
fn read_type(data: &[u8], o: &mut usize) -> Result<Type, BtfError> {
    let name = le_u32(data, *o)?;
    let info = le_u32(data, *o + 4)?;
    let size_or_type = le_u32(data, *o + 8)?;
    *o += 12;
    let vlen = (info & 0xffff) as usize;
    let kind = (info >> 24) & 0x1f;
    let kind_flag = info >> 31 == 1;
    Ok(match kind {
        KIND_INT => {
            *o += 4;
            Type::Other
        }
        KIND_FUNC => Type::Func(name),
        KIND_PTR | KIND_FWD | KIND_FUNC_PROTO | KIND_FLOAT => {
            if kind == KIND_FUNC_PROTO {
                *o += 8 * vlen;
            }
            Type::Other
        }
        KIND_ARRAY => {
            *o += 12;
            Type::Other
        }
        KIND_STRUCT | KIND_UNION => {
            let mut members = Vec::with_capacity(vlen);
            for _ in 0..vlen {
                let m_name = le_u32(data, *o)?;
                let m_ty = le_u32(data, *o + 4)?;
                let m_off = le_u32(data, *o + 8)?;
                *o += 12;
                let (bit_offset, bitfield) = if kind_flag {
                    (m_off & 0xff_ffff, m_off >> 24 != 0)
                } else {
                    (m_off, false)
                };
                members.push(Member {
                    name: m_name,
                    ty: m_ty,
                    bit_offset,
                    bitfield,
                });
            }
            Type::Composite { name, members }
        }
        KIND_ENUM => {
            *o += 8 * vlen;
            Type::Other
        }
        KIND_ENUM64 => {
            *o += 12 * vlen;
            Type::Other
        }
        KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
            Type::Alias(size_or_type)
        }
        KIND_VAR | KIND_DECL_TAG => {
            *o += 4;
            Type::Other
        }
        KIND_DATASEC => {
            *o += 12 * vlen;
            Type::Other
        }
        k => return Err(BtfError::UnknownKind(k)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a tiny BTF blob by hand: int, struct inner { u32 a; u32 b; },
    /// struct outer { u64 x; union { u32 y; }; struct inner in; u32 bf:3; }.
    pub(crate) fn sample() -> Vec<u8> {
        let mut strings = b"\0int\0inner\0a\0b\0outer\0x\0y\0in\0bf\0".to_vec();
        let s = |name: &str, strings: &[u8]| -> u32 {
            let needle = format!("\0{name}\0");
            strings
                .windows(needle.len())
                .position(|w| w == needle.as_bytes())
                .expect("string present") as u32
                + 1
        };
        let mut types: Vec<u32> = Vec::new();
        // [1] int, size 4
        types.extend([s("int", &strings), KIND_INT << 24, 4, 32]);
        // [2] struct inner, 2 members
        types.extend([s("inner", &strings), (KIND_STRUCT << 24) | 2, 8]);
        types.extend([s("a", &strings), 1, 0, s("b", &strings), 1, 32]);
        // [3] anonymous union { int y; }
        types.extend([0, (KIND_UNION << 24) | 1, 4]);
        types.extend([s("y", &strings), 1, 0]);
        // [4] typedef inner_t = inner  (name reuses "in")
        types.extend([s("in", &strings), KIND_TYPEDEF << 24, 2]);
        // [5] struct outer (kind_flag set for the bitfield), 4 members
        types.extend([
            s("outer", &strings),
            (1 << 31) | (KIND_STRUCT << 24) | 4,
            24,
        ]);
        types.extend([s("x", &strings), 1, 0]);
        types.extend([0, 3, 64]);
        types.extend([s("in", &strings), 4, 96]);
        types.extend([s("bf", &strings), 1, (3 << 24) | 160]);
        let type_bytes: Vec<u8> = types.iter().flat_map(|v| v.to_le_bytes()).collect();
        strings.push(0);
        let mut out = Vec::new();
        out.extend(BTF_MAGIC.to_le_bytes());
        out.extend([1u8, 0]);
        out.extend(24u32.to_le_bytes());
        out.extend(0u32.to_le_bytes());
        out.extend((type_bytes.len() as u32).to_le_bytes());
        out.extend((type_bytes.len() as u32).to_le_bytes());
        out.extend((strings.len() as u32).to_le_bytes());
        out.extend(type_bytes);
        out.extend(strings);
        out
    }

    #[test]
    fn offsets_through_anonymous_members_and_typedefs() {
        let btf = Btf::parse(&sample()).expect("sample parses");
        assert_eq!(btf.offset("outer", "x").unwrap(), 0);
        assert_eq!(btf.offset("outer", "y").unwrap(), 8);
        assert_eq!(btf.offset("outer", "in").unwrap(), 12);
        assert_eq!(btf.offset("outer", "in.b").unwrap(), 16);
        assert_eq!(btf.offset("inner", "b").unwrap(), 4);
    }

    #[test]
    fn errors_name_what_is_missing() {
        let btf = Btf::parse(&sample()).expect("sample parses");
        assert!(matches!(
            btf.offset("nope", "x"),
            Err(BtfError::NoStruct(_))
        ));
        let e = btf.offset("outer", "in.zz").unwrap_err();
        assert_eq!(e.to_string(), "member in.zz not found in outer");
        assert!(matches!(
            btf.offset("outer", "bf"),
            Err(BtfError::Unaligned(_))
        ));
    }

    #[test]
    fn rejects_garbage_and_truncation() {
        assert!(matches!(
            Btf::parse(b"hello world, not btf at all"),
            Err(BtfError::Malformed(_))
        ));
        let mut blob = sample();
        blob.truncate(40);
        assert!(Btf::parse(&blob).is_err());
        assert!(Btf::parse(&[]).is_err());
    }

    #[test]
    #[ignore = "needs BTF (/sys/kernel/btf/vmlinux)"]
    fn running_kernel_has_every_offset() {
        // BTF is readable by any user; on a kernel without it the loader fails the same way.
        let btf = Btf::from_sys_fs().unwrap_or_else(|e| panic!("{VMLINUX_BTF} not readable: {e}"));
        let cfg = config_from_btf(&btf).expect("all offsets found");
        assert!(cfg.task_tgid > 0 && cfg.files_fdt < 64 && cfg.regs_nr > 0);
        assert_eq!(cfg.magic, CONFIG_MAGIC);
        if cfg!(target_arch = "x86_64") {
            // thread_info is the first member of task_struct on x86_64.
            assert!(cfg.task_ti_status < 64, "{cfg:?}");
            assert!(cfg.regs_bx != NO_OFFSET && cfg.regs_cx != NO_OFFSET);
        }
    }
}
