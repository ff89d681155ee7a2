//! A small reader of kernel BTF (/sys/kernel/btf/vmlinux): struct member offsets by name.
//!
//! Rust eBPF code gets no CO-RE relocations, so the loader looks the offsets up here and hands
//! them to the programs as globals ([`fdaudit_common::Config`]).

use std::path::Path;

use fdaudit_common::{Config, CredNsOffsets, CONFIG_MAGIC, NO_OFFSET};
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

/// The raw BTF: the kernel's file mapped read-only (6.16+ lets /sys/kernel/btf/vmlinux be
/// mmap'd), else a copy read into memory.
enum Bytes {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

/// BTF indexed for lookups by name, without decoding it: one pass over the type section
/// records where each type starts; members are read from the raw bytes when asked for.
///
/// Building a `Vec` of every type and member and a map of every struct name (the previous
/// parser, and aya's) costs tens of milliseconds of start-up, most of it page faults on the
/// fresh memory; mapping the file and indexing it costs a few (docs/performance.md).
pub struct Btf {
    data: Bytes,
    /// Byte offset of each type's record in `data`, by type id (id 0 is void: no record).
    types: Vec<u32>,
    /// The string section: start and end in `data`.
    strings: (usize, usize),
    /// STRUCTs and UNIONs with a name and members, by type id (ascending).
    composites: Vec<u32>,
    /// FUNCs, by type id (ascending): what [`Btf::func_id`] searches.
    funcs: Vec<u32>,
}

/// One type record's header.
#[derive(Debug, Clone, Copy)]
struct Header {
    name: u32,
    kind: u32,
    vlen: usize,
    kind_flag: bool,
    /// Size, or the type referred to (aliases, pointers).
    size_or_type: u32,
    /// Where the kind-specific tail (members, ...) starts.
    tail: usize,
}

impl Btf {
    /// Reads the running kernel's BTF.
    pub fn from_sys_fs() -> Result<Self, BtfError> {
        Self::from_file(Path::new(VMLINUX_BTF))
    }

    /// Maps `path` read-only (private, as the kernel requires) or, where it cannot be
    /// mapped, reads it; then indexes it.
    pub fn from_file(path: &Path) -> Result<Self, BtfError> {
        let read_err = |source| BtfError::Read {
            path: path.display().to_string(),
            source,
        };
        let file = std::fs::File::open(path).map_err(read_err)?;
        // SAFETY: a private read-only mapping; the kernel's BTF never changes while mapped
        // (and a regular file changed under us gives wrong offsets, not unsafety: every
        // read below is bounds-checked).
        let data = match unsafe { memmap2::MmapOptions::new().map_copy_read_only(&file) } {
            Ok(m) => Bytes::Mapped(m),
            Err(_) => {
                let mut v = Vec::new();
                std::io::Read::read_to_end(&mut &file, &mut v).map_err(read_err)?;
                Bytes::Owned(v)
            }
        };
        Self::index(data)
    }

    /// The raw bytes (what aya parses for itself, for the fentry programs).
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    fn index(data: Bytes) -> Result<Self, BtfError> {
        let u16_at = |o: usize| -> Result<u16, BtfError> {
            data.get(o..o + 2)
                .map(|b| u16::from_le_bytes([b[0], b[1]]))
                .ok_or(BtfError::Malformed("truncated header"))
        };
        let u32_at = |o: usize| le_u32(&data, o);
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
        if strs_start + str_len > data.len() {
            return Err(BtfError::Malformed("string section out of bounds"));
        }
        if types_end > data.len() || types_end > u32::MAX as usize {
            return Err(BtfError::Malformed("type section out of bounds"));
        }

        // Type id 0 is void. ~24 bytes per record in kernel BTF.
        let mut types = Vec::with_capacity(type_len / 24 + 1);
        types.push(0);
        let mut composites = Vec::new();
        let mut funcs = Vec::new();
        let mut o = types_start;
        while o < types_end {
            let h = header(&data, o)?;
            if matches!(h.kind, KIND_STRUCT | KIND_UNION) && h.name != 0 && h.vlen > 0 {
                composites.push(types.len() as u32);
            } else if h.kind == KIND_FUNC {
                funcs.push(types.len() as u32);
            }
            types.push(o as u32);
            o = h.tail + tail_len(h)?;
        }
        if o != types_end {
            return Err(BtfError::Malformed("type section length mismatch"));
        }
        Ok(Btf {
            data,
            types,
            strings: (strs_start, strs_start + str_len),
            composites,
            funcs,
        })
    }

    /// Whether the string at `off` is `name`: compared in place (the lookups below make
    /// tens of thousands of these at start-up).
    fn name_is(&self, off: u32, name: &str) -> bool {
        let start = self.strings.0 + off as usize;
        let end = start + name.len();
        end < self.strings.1
            && self.data.get(start..end) == Some(name.as_bytes())
            && self.data.get(end) == Some(&0)
    }

    /// The name offset of type `id` (a record's first word), for the searches by name.
    fn name_of(&self, id: u32) -> Option<u32> {
        let o = *self.types.get(id as usize)? as usize;
        le_u32(&self.data, o).ok()
    }

    /// The header of type `id` (None for void and ids out of range).
    fn header(&self, id: u32) -> Option<Header> {
        let o = *self.types.get(id as usize).filter(|_| id != 0)?;
        header(&self.data, o as usize).ok()
    }

    fn resolve(&self, mut id: u32) -> u32 {
        for _ in 0..32 {
            match self.header(id) {
                Some(h) if is_alias(h.kind) => id = h.size_or_type,
                _ => break,
            }
        }
        id
    }

    /// Bit offset of `member` in the composite `id`, searching anonymous members too.
    fn find_member(&self, id: u32, member: &str) -> Option<(u32, u32, bool)> {
        let h = self
            .header(self.resolve(id))
            .filter(|h| matches!(h.kind, KIND_STRUCT | KIND_UNION))?;
        let members = (0..h.vlen).filter_map(|i| {
            let o = h.tail + 12 * i;
            let name = le_u32(&self.data, o).ok()?;
            let ty = le_u32(&self.data, o + 4).ok()?;
            let off = le_u32(&self.data, o + 8).ok()?;
            // With kind_flag, the top 8 bits are the bitfield size.
            let (bits, bitfield) = if h.kind_flag {
                (off & 0xff_ffff, off >> 24 != 0)
            } else {
                (off, false)
            };
            Some((name, ty, bits, bitfield))
        });
        for (name, ty, bits, bitfield) in members.clone() {
            if name != 0 && self.name_is(name, member) {
                return Some((bits, ty, bitfield));
            }
        }
        for (_, ty, bits, _) in members.filter(|m| m.0 == 0) {
            if let Some((off, ty, bf)) = self.find_member(ty, member) {
                return Some((bits + off, ty, bf));
            }
        }
        None
    }

    /// The first complete definition of struct (or union) `ty`.
    fn struct_id(&self, ty: &str) -> Option<u32> {
        self.composites
            .iter()
            .copied()
            .find(|&id| self.name_of(id).is_some_and(|n| self.name_is(n, ty)))
    }

    /// The type id of kernel function `name` (what fentry programs attach to by id).
    pub fn func_id(&self, name: &str) -> Option<u32> {
        self.funcs
            .iter()
            .copied()
            .find(|&id| self.name_of(id).is_some_and(|n| self.name_is(n, name)))
    }

    /// Byte offset of a dotted member path in a struct: `offset("file", "f_path.dentry")`.
    pub fn offset(&self, ty: &str, path: &str) -> Result<u32, BtfError> {
        let mut id = self
            .struct_id(ty)
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
}

impl Btf {
    /// Size in bytes of struct (or union) `ty`.
    pub fn size(&self, ty: &str) -> Result<u32, BtfError> {
        self.struct_id(ty)
            .and_then(|id| self.header(id))
            .map(|h| h.size_or_type)
            .ok_or_else(|| BtfError::NoStruct(ty.to_string()))
    }
}

/// The credentials, namespace and root offsets ([`CredNsOffsets`]), each group all or nothing: a
/// group with a member the kernel lacks has its first offset [`NO_OFFSET`] and is not read.
fn credns_from_btf(btf: &Btf) -> CredNsOffsets {
    let o = |ty: &str, path: &str| btf.offset(ty, path);
    let mut c = CredNsOffsets::ZEROED;
    let creds = (|| -> Result<(), BtfError> {
        c.task_cred = o("task_struct", "cred")?;
        c.cred_uid = o("cred", "uid")?;
        c.cred_euid = o("cred", "euid")?;
        c.cred_suid = o("cred", "suid")?;
        c.cred_gid = o("cred", "gid")?;
        c.cred_egid = o("cred", "egid")?;
        c.cred_sgid = o("cred", "sgid")?;
        c.cred_cap_effective = o("cred", "cap_effective")?;
        c.cred_cap_permitted = o("cred", "cap_permitted")?;
        c.cred_user_ns = o("cred", "user_ns")?;
        c.user_ns_inum = o("user_namespace", "ns.inum")?;
        c.task_atomic_flags = o("task_struct", "atomic_flags")?;
        Ok(())
    })();
    let namespaces = (|| -> Result<(), BtfError> {
        c.task_nsproxy = o("task_struct", "nsproxy")?;
        c.nsproxy_mnt_ns = o("nsproxy", "mnt_ns")?;
        c.nsproxy_net_ns = o("nsproxy", "net_ns")?;
        c.nsproxy_cgroup_ns = o("nsproxy", "cgroup_ns")?;
        c.mnt_ns_inum = o("mnt_namespace", "ns.inum")?;
        c.net_ns_inum = o("net", "ns.inum")?;
        c.cgroup_ns_inum = o("cgroup_namespace", "ns.inum")?;
        c.task_thread_pid = o("task_struct", "thread_pid")?;
        c.pid_level = o("pid", "level")?;
        c.pid_numbers = o("pid", "numbers")?;
        c.upid_size = btf.size("upid")?;
        c.upid_ns = o("upid", "ns")?;
        c.pid_ns_inum = o("pid_namespace", "ns.inum")?;
        Ok(())
    })();
    // The root directory's inode; its number and device through the fd walk's inode_ino,
    // inode_sb and sb_dev, which config_from_btf requires.
    let root = (|| -> Result<(), BtfError> {
        c.task_fs = o("task_struct", "fs")?;
        c.fs_root_dentry = o("fs_struct", "root.dentry")?;
        c.dentry_inode = o("dentry", "d_inode")?;
        Ok(())
    })();
    if creds.is_err() {
        c.task_cred = NO_OFFSET;
    }
    if root.is_err() {
        c.task_fs = NO_OFFSET;
    }
    if namespaces.is_err() {
        c.task_nsproxy = NO_OFFSET;
    }
    c
}

/// The boundary groups ([`CredNsOffsets`]) this kernel's BTF left unread (`doctor`).
pub fn boundary_groups_missing(c: &CredNsOffsets) -> Vec<&'static str> {
    [
        ("credentials", c.task_cred),
        ("namespaces", c.task_nsproxy),
        ("root", c.task_fs),
    ]
    .into_iter()
    .filter(|&(_, gate)| gate == NO_OFFSET)
    .map(|(name, _)| name)
    .collect()
}

fn is_alias(kind: u32) -> bool {
    matches!(
        kind,
        KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG
    )
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
        origin: 0, // set by the loader (`trace --origin`)
        regs_arg3: regs.arg3,
        regs_sp: regs.sp,
        mm_start_code: o("mm_struct", "start_code")?,
        mm_end_code: o("mm_struct", "end_code")?,
        regs_arg4: regs.arg4,
        signal_rlim: o("signal_struct", "rlim")?,
        unclosed: 0,
        task_group_leader: o("task_struct", "group_leader")?,
        task_start_time: o("task_struct", "start_time")?,
        credns: credns_from_btf(btf),
        quiet_spawns: 0, // set by the loader (`watch`)
        cgroup_filter: fdaudit_common::cgroup_filter::NONE, // set by the loader
        io_kiocb_opcode: io_uring_hook(btf),
    })
}

/// io_kiocb->opcode where the kernel has the io_uring_submit_req trace event (6.0+; its
/// record struct is in the BTF: `trace_event_raw_io_uring_submit_req`), else NO_OFFSET.
fn io_uring_hook(btf: &Btf) -> u64 {
    let event = btf.size("trace_event_raw_io_uring_submit_req").is_ok();
    let opcode = btf.offset("io_kiocb", "opcode").ok().filter(|_| event);
    u64::from(opcode.unwrap_or(NO_OFFSET))
}

/// A little-endian u32 at `o`.
fn le_u32(data: &[u8], o: usize) -> Result<u32, BtfError> {
    data.get(o..o + 4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or(BtfError::Malformed("truncated"))
}

/// The header of the type record at `o`.
fn header(data: &[u8], o: usize) -> Result<Header, BtfError> {
    let info = le_u32(data, o + 4)?;
    Ok(Header {
        name: le_u32(data, o)?,
        kind: (info >> 24) & 0x1f,
        vlen: (info & 0xffff) as usize,
        kind_flag: info >> 31 == 1,
        size_or_type: le_u32(data, o + 8)?,
        tail: o + 12,
    })
}

/// The length of a record's kind-specific tail (after its 12-byte header).
fn tail_len(h: Header) -> Result<usize, BtfError> {
    Ok(match h.kind {
        KIND_INT | KIND_VAR | KIND_DECL_TAG => 4,
        KIND_ARRAY => 12,
        KIND_STRUCT | KIND_UNION | KIND_DATASEC | KIND_ENUM64 => 12 * h.vlen,
        KIND_ENUM | KIND_FUNC_PROTO => 8 * h.vlen,
        KIND_PTR | KIND_FWD | KIND_FLOAT | KIND_FUNC => 0,
        k if is_alias(k) => 0,
        k => return Err(BtfError::UnknownKind(k)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Btf {
        /// Parses raw BTF (little-endian, as on x86_64).
        fn parse(data: &[u8]) -> Result<Self, BtfError> {
            Self::index(Bytes::Owned(data.to_vec()))
        }

        /// Whether a struct of that name exists.
        fn has_struct(&self, ty: &str) -> bool {
            self.struct_id(ty).is_some()
        }
    }

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
    fn a_boundary_group_the_kernel_lacks_is_not_read() {
        let btf = Btf::parse(&sample()).expect("sample parses");
        let c = credns_from_btf(&btf);
        assert_eq!(
            (c.task_cred, c.task_nsproxy, c.task_fs),
            (NO_OFFSET, NO_OFFSET, NO_OFFSET)
        );
        assert_eq!(
            boundary_groups_missing(&c),
            ["credentials", "namespaces", "root"]
        );
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
    fn a_mapped_file_reads_as_the_bytes_do() {
        let path = std::env::temp_dir().join(format!("fdaudit-btf-{}", std::process::id()));
        std::fs::write(&path, sample()).expect("temp file written");
        let btf = Btf::from_file(&path);
        let _ = std::fs::remove_file(&path);
        let btf = btf.expect("the sample maps and parses");
        assert_eq!(btf.bytes(), sample());
        assert_eq!(btf.offset("outer", "in.b").unwrap(), 16);
        assert!(btf.has_struct("inner") && !btf.has_struct("in"));
        assert_eq!(btf.func_id("outer"), None);
    }

    #[test]
    fn a_file_that_cannot_be_mapped_is_read() {
        // procfs files refuse mmap: the bytes are read instead, and parsed (as not BTF).
        assert!(matches!(
            Btf::from_file(Path::new("/proc/self/status")),
            Err(BtfError::Malformed("bad magic"))
        ));
        assert!(matches!(
            Btf::from_file(Path::new("/nonexistent/vmlinux")),
            Err(BtfError::Read { .. })
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
        // Both groups of the boundary offsets resolve; struct upid is an int and a pointer.
        let c = cfg.credns;
        assert!(
            c.task_cred != NO_OFFSET && c.task_nsproxy != NO_OFFSET && c.task_fs != NO_OFFSET,
            "{c:?}"
        );
        assert!(boundary_groups_missing(&c).is_empty(), "{c:?}");
        // fs_struct->root is a struct path: the dentry follows the vfsmount pointer.
        assert!(c.fs_root_dentry >= 8 && c.dentry_inode > 0, "{c:?}");
        assert_eq!(c.upid_size, 16);
        assert!(
            c.cred_euid > c.cred_uid && c.pid_numbers > c.pid_level,
            "{c:?}"
        );
    }
}
