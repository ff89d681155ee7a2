//! The bpf(2) calls aya 0.14 has no API for, on aya-obj's binding of `union bpf_attr`
//! (include/uapi/linux/bpf.h): reading a program's info and loading the smallest program
//! to probe what the kernel accepts.

use std::os::fd::{FromRawFd as _, OwnedFd};

use aya_obj::generated::{bpf_attr, bpf_cmd, bpf_prog_type};

/// bpf(`cmd`, `attr`): the syscall's non-negative return, or the error.
///
/// # Safety
/// Every pointer `attr` holds must be valid for what `cmd` reads or writes through it, for
/// the length `attr` gives, during the call.
pub unsafe fn bpf(cmd: bpf_cmd, attr: &mut bpf_attr) -> std::io::Result<i64> {
    // SAFETY: `attr` is a whole bpf_attr; the caller vouches for the pointers in it.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            std::ptr::from_mut(attr),
            size_of::<bpf_attr>() as u32,
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(rc)
}

/// Loads `r0 = 0; exit` as a `prog_type` program (a tracing one with its expected attach
/// type and the BTF id of the function it would attach to): the cheapest way to learn
/// whether the kernel takes such a program, one syscall.
pub fn load_minimal(
    prog_type: bpf_prog_type,
    attach: Option<(u32, u32)>,
) -> std::io::Result<OwnedFd> {
    // mov64 r0, 0; exit
    let insns: [u64; 2] = [0xb7, 0x95];
    let license = c"GPL";
    // SAFETY: all-zero bytes are a valid bpf_attr.
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    // SAFETY: the BPF_PROG_LOAD member of the zeroed union; every bit pattern is valid.
    let load = unsafe { &mut attr.__bindgen_anon_3 };
    load.prog_type = prog_type as u32;
    load.insn_cnt = insns.len() as u32;
    load.insns = insns.as_ptr() as u64;
    load.license = license.as_ptr() as u64;
    if let Some((expected_attach_type, attach_btf_id)) = attach {
        load.expected_attach_type = expected_attach_type;
        load.attach_btf_id = attach_btf_id;
    }
    // SAFETY: `insns` and `license` outlive the call.
    let fd = unsafe { bpf(bpf_cmd::BPF_PROG_LOAD, &mut attr) }?;
    // SAFETY: BPF_PROG_LOAD returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}
