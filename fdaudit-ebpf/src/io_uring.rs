//! `fdaudit unclosed`: io_uring requests that can make fds. An io_uring open, accept,
//! socket, pipe or recvmsg installs fds without any syscall of the fd-making table, so the
//! live set never holds them; each such request of a followed process is counted
//! (`Stats::unclosed_io_uring`) and the run is incomplete: a gate passes no verdict on it.
//! A request that targets a fixed-file slot makes no fd and is counted all the same.

use aya_ebpf::{macros::raw_tracepoint, programs::RawTracePointContext};

use crate::{
    current_tgid,
    kernel::{conf, read_kernel, stat_add},
    STATS, TRACKED,
};

/// include/uapi/linux/io_uring.h, enum io_uring_op: the requests that can install fds.
const MAKES_FDS: [u8; 7] = [
    10, // IORING_OP_RECVMSG (SCM_RIGHTS)
    13, // IORING_OP_ACCEPT
    18, // IORING_OP_OPENAT
    28, // IORING_OP_OPENAT2
    45, // IORING_OP_SOCKET
    54, // IORING_OP_FIXED_FD_INSTALL
    62, // IORING_OP_PIPE
];

// io_uring:io_uring_submit_req: TP_PROTO(struct io_kiocb *req) (6.0+; the loader attaches it
// only where the BTF has the event and io_kiocb->opcode). Fires in io_submit_sqes() for
// each request, in the submitting task: the io_uring_enter caller, or the ring's SQPOLL
// thread, a thread of the same process.
#[raw_tracepoint(tracepoint = "io_uring_submit_req")]
pub fn unclosed_io_uring(ctx: RawTracePointContext) -> i32 {
    let _ = try_unclosed_io_uring(&ctx);
    0
}

fn try_unclosed_io_uring(ctx: &RawTracePointContext) -> Result<(), i64> {
    let req: u64 = ctx.arg(0);
    let opcode: u8 = read_kernel(req + conf!(io_kiocb_opcode))?;
    if !MAKES_FDS.contains(&opcode) || TRACKED.get_ptr(current_tgid()).is_none() {
        return Ok(());
    }
    stat_add(&STATS, |s| &mut s.unclosed_io_uring);
    Ok(())
}
