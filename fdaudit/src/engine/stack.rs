//! `trace --origin`'s frames as resolved (by [`super::symbolize`]) and shown: where each
//! is, what names it, how it was found, and why a stack stops short when it does.

/// One user stack frame.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Frame {
    pub addr: u64,
    /// The ELF symbol containing `addr` with the offset into it (`open_hostname+0x1c`).
    pub symbol: Option<String>,
    /// Source file and line of the call (DWARF), when the module has them.
    pub file: Option<String>,
    pub line: Option<u32>,
    /// The mapped file `addr` is in, and the offset into that file.
    pub module: Option<String>,
    pub offset: Option<u64>,
    /// The module's GNU build id (hex), to find its debug file elsewhere.
    pub build_id: Option<String>,
    /// How the frame was found ([`FoundBy`]). Absent: the innermost frame, the
    /// instruction pointer at the call.
    pub found_by: Option<FoundBy>,
    /// The module's identity (device and inode, as maps gave them): what names it.
    pub module_id: Option<crate::untrusted::FileId>,
    /// A frame in anonymous executable memory (a JIT's code): the process whose perf map
    /// names it ([`super::jit`]), when the frames are named.
    pub jit_pid: Option<u32>,
    /// How its code runs, where its perf map entry says: `jit` or `interpreted`.
    pub code: Option<&'static str>,
    /// Why a JIT frame has no name (no perf map, not in it, the map refused).
    pub unnamed: Option<String>,
}

/// How a frame above the innermost one was found ([`Frame::found_by`]; JSON `found_by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FoundBy {
    /// Unwound from the modules' unwind tables (`.eh_frame`) over the copied stack words.
    EhFrame,
    /// The kernel's frame-pointer walk, kept only through functions the unwind tables say
    /// keep a frame pointer.
    FramePointers,
    /// A JIT's code, reached by its frame pointer (`super::symbolize::jit_frames`).
    JitFramePointer,
    /// The interpreter's own frame chain (CPython: [`super::pyframes`]).
    Python,
}

impl FoundBy {
    /// Its name in the JSON and the text.
    pub fn as_str(self) -> &'static str {
        match self {
            FoundBy::EhFrame => "eh_frame",
            FoundBy::FramePointers => "frame-pointers",
            FoundBy::JitFramePointer => "jit-frame-pointer",
            FoundBy::Python => "python",
        }
    }
}

/// Why a stack shown is partial (JSON `stack_partial`): it does not reach the stack's
/// outermost frame.
pub mod partial {
    /// The innermost frame's module was never known: only that frame is shown.
    pub const NO_MODULE: &str =
        "the module of the innermost frame is unknown (the process was gone before it was read)";
    /// Unwinding stopped before the outermost frame.
    pub const UNWIND_ENDS: &str = "unwinding ends where the copied stack words end or a frame's \
                                   unwind rule is one fdaudit does not follow";
    /// The frame-pointer walk stopped at a function without a frame pointer, or at its depth.
    pub const FP_ENDS: &str =
        "the frame-pointer walk ends at a function without a frame pointer or at its depth";
    /// Unwinding over the call site's stack copy ended before the outermost frame, and
    /// the copy stopped at its bound (`fdaudit_common::STACK_COPY_BYTES`).
    pub const COPY_BOUND: &str = "unwinding ends before the outermost frame, and the stack \
                                  copy stopped at its bound (16 KiB above the stack pointer)";
    /// Unwinding over the stack copy stopped at its depth.
    pub const SITE_DEPTH: &str = "the stack is deeper than the 64 frames fdaudit unwinds";
    /// The kernel gave no user stack.
    pub const NO_STACK: &str = "the kernel gave no user stack";
    /// The innermost frame's module was not known when the process no longer ran the image
    /// the call was made in.
    pub const IMAGE_GONE: &str = "the process exec'd (or its pid is another process's) before \
                                  the call's modules were read: the image it was made in is gone";
}

/// A call's frames, innermost first, and why they stop short of the outermost, if they do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stack {
    pub frames: Vec<Frame>,
    pub partial: Option<&'static str>,
}
