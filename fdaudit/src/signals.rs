//! Ctrl-C, SIGTERM and SIGHUP as a flag that long-running commands poll, so they can stop
//! cleanly and still print what they have (the handler only stores to an atomic).

use std::sync::atomic::{AtomicI32, Ordering};

static RECEIVED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    RECEIVED.store(sig, Ordering::SeqCst);
}

/// Catches SIGINT, SIGTERM and SIGHUP from now on; a signal fdaudit's caller ignored
/// (`nohup`, a shell's background job) stays ignored, as it does in a command `trace` starts.
pub fn install() {
    let caller = crate::caller::CallerState::get();
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        if caller.ignores(sig) {
            continue;
        }
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// The signal received since [`install`], if any.
pub fn received() -> Option<i32> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}
