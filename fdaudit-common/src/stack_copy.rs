//! `trace --origin`: the top of the user stack, copied once per call site (`origin_stack_copy`,
//! a tail call of `origin_exit`), so that userspace unwinds from the modules' unwind tables
//! past what the origin record's few words reach (`fdaudit::engine::stack_sites`).

use crate::{RecordHeader, ORIGIN_STACK_DEPTH};

/// Bytes the copy reads at a time (a power of two that divides a page: a chunk that starts
/// aligned never straddles the stack mapping's end).
pub const STACK_COPY_CHUNK: usize = 1024;
/// Chunks copied at most, from the chunk that holds the user sp up.
pub const STACK_COPY_CHUNKS: usize = 16;
/// The bound of a copy, in bytes.
pub const STACK_COPY_BYTES: usize = STACK_COPY_CHUNK * STACK_COPY_CHUNKS;
/// Capacity of [`crate::MAP_STACK_SITES`]: call sites copied, least recently used first out.
pub const MAX_STACK_SITES: u32 = 8192;

/// A call site, as `origin_stack_copy` tells them apart: the process and the user registers
/// at the syscall's return (the same call path from the same depth gives the same ones).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct StackSiteKey {
    pub tgid: u32,
    pub _pad: u32,
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
}

/// [`StackCopyRecord::flags`]: why the copy ends where it does.
pub mod stack_copy_flags {
    /// A chunk could not be read: the stack's mapping ends there (or its page is not in
    /// memory): the stack's outermost frame is in the copy, if any is.
    pub const AT_END: u32 = 1 << 0;
    /// The copy reached [`super::STACK_COPY_BYTES`]: the stack may go on past it.
    pub const AT_BOUND: u32 = 1 << 1;
}

/// Sent after an origin record (a modules record may come between them) by the first call
/// of its site ([`StackSiteKey`]) the process made since the site was last copied
/// ([`crate::RecordKind::StackCopy`]): the registers the unwinder starts from, the
/// frame-pointer walk (userspace's key of the site, as the origin record has it) and the
/// user stack from `base` (the sp rounded down to a chunk) for `nbytes`.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct StackCopyRecord {
    pub header: RecordHeader,
    pub pid: u32,
    pub tid: u32,
    /// Frames in `stack` (bpf_get_stack bytes / 8; 0 when it failed).
    pub nstack: u32,
    /// [`stack_copy_flags`].
    pub flags: u32,
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    /// The user address of `words[0]`, and the bytes of `words` copied.
    pub base: u64,
    pub nbytes: u64,
    /// User return addresses, innermost first (frame-pointer walk, as the origin record's).
    pub stack: [u64; ORIGIN_STACK_DEPTH],
    pub words: [u64; STACK_COPY_BYTES / 8],
}

const _: () = {
    assert!(core::mem::size_of::<StackSiteKey>() == 32);
    assert!(STACK_COPY_CHUNK.is_power_of_two() && 4096 % STACK_COPY_CHUNK == 0);
    assert!(core::mem::offset_of!(StackCopyRecord, words) % 8 == 0);
};
