//! The ring-buffer drain: a thread of its own that only copies records out of the kernel's
//! ring into memory, so that a burst of spawns never waits for decoding, /proc look-ups or
//! printing to free ring space. Self-contained: it owns the ring and hands out raw records
//! in ring order; whoever consumes them decodes at its own pace. The queue between them is
//! bounded ([`MAX_QUEUE_BYTES`]): a record that does not fit is dropped and counted
//! ([`Drain::dropped`]), said with the records the kernel lost.

use std::{
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        mpsc, Arc,
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use aya::maps::{MapData, RingBuf};

use crate::engine::ebpf::{self, RingSlot};

/// The most bytes of records copied out of the ring and not yet taken by the consumer:
/// what a decoder slowed down (by a traced process, or by a starved CPU) can make fdaudit
/// hold. Four of the largest rings.
pub const MAX_QUEUE_BYTES: u64 = 64 << 20;

/// The counts a bounded queue's ends share.
#[derive(Debug)]
struct QueueCounts {
    /// Bytes sent and not yet taken.
    queued: AtomicU64,
    /// Records dropped because they did not fit.
    dropped: AtomicU64,
    max_bytes: u64,
}

/// The sending end of a queue of records bounded by bytes.
pub struct QueueTx {
    tx: mpsc::Sender<Vec<u8>>,
    counts: Arc<QueueCounts>,
}

/// The receiving end: what is taken frees room.
pub struct QueueRx {
    rx: mpsc::Receiver<Vec<u8>>,
    counts: Arc<QueueCounts>,
}

/// A queue that holds at most `max_bytes` of records.
pub fn bounded_queue(max_bytes: u64) -> (QueueTx, QueueRx) {
    let (tx, rx) = mpsc::channel();
    let counts = Arc::new(QueueCounts {
        queued: AtomicU64::new(0),
        dropped: AtomicU64::new(0),
        max_bytes,
    });
    let rx = QueueRx {
        rx,
        counts: Arc::clone(&counts),
    };
    (QueueTx { tx, counts }, rx)
}

impl QueueTx {
    /// Queues a copy of `rec`, or drops and counts it when the queue is full; `None` when
    /// the consumer is gone.
    pub fn push(&self, rec: &[u8]) -> Option<()> {
        if !self.admit(rec.len()) {
            return Some(());
        }
        self.tx.send(rec.to_vec()).ok()
    }

    /// [`QueueTx::push`] of a record already copied out.
    pub fn push_owned(&self, rec: Vec<u8>) -> Option<()> {
        if !self.admit(rec.len()) {
            return Some(());
        }
        self.tx.send(rec).ok()
    }

    /// Counts `len` bytes in, or the record dropped when they do not fit.
    fn admit(&self, len: usize) -> bool {
        let n = len as u64;
        let c = &self.counts;
        // Only this thread adds: a check then an add cannot overshoot.
        if c.queued.load(Ordering::Acquire) + n > c.max_bytes {
            c.dropped.fetch_add(1, Ordering::AcqRel);
            return false;
        }
        c.queued.fetch_add(n, Ordering::AcqRel);
        true
    }
}

impl QueueRx {
    fn taken(&self, rec: Vec<u8>) -> Vec<u8> {
        self.counts
            .queued
            .fetch_sub(rec.len() as u64, Ordering::AcqRel);
        rec
    }

    /// Every record queued now.
    pub fn take_all(&self) -> Vec<Vec<u8>> {
        self.rx.try_iter().map(|r| self.taken(r)).collect()
    }

    /// One record, waiting up to `timeout`.
    fn recv_timeout(&self, timeout: Duration) -> Option<Vec<u8>> {
        self.rx.recv_timeout(timeout).ok().map(|r| self.taken(r))
    }

    /// Records dropped so far because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.counts.dropped.load(Ordering::Acquire)
    }
}

/// What the consumer and the thread share.
struct Shared {
    stop: AtomicBool,
    /// Flush requests made (a counter), and the last one a complete pass has answered.
    flush_requested: AtomicU64,
    flush_done: AtomicU64,
    /// Wakes the thread's poll for a flush or the stop.
    wake: OwnedFd,
    /// Written by the thread when it queued records: what [`Drain::wait`] polls, so that a
    /// signal interrupts the wait (EINTR) as it did a poll on the ring itself.
    ready: OwnedFd,
    /// The ring's size now: the first ring's, then the grown one's.
    ring_bytes: AtomicU64,
    /// Why the ring could not grow, when it could not.
    grow_failed: std::sync::Mutex<Option<String>>,
}

/// What the drain thread needs to grow the ring ([`Drain::start`]).
pub struct Grow {
    /// Where the programs look for the grown ring.
    pub slot: RingSlot,
    /// Its size.
    pub bytes: u32,
}

/// Whether the first ring (`ring_bytes`) should grow, after a pass that copied `pass` bytes
/// out of it and `total` since the start: an eighth of it waited for the reader, or a
/// sixteenth of it has gone through at all (a few of the largest spawns, or about a hundred
/// small ones). Early on purpose: while the reader is kept from a CPU (in a TCG guest for
/// hundreds of milliseconds during a fork storm) nothing grows the ring, so the grown one
/// must be in before the first such stretch; a trace of a command that spawns little
/// (`trace -- /bin/true`) never grows it.
pub fn under_pressure(pass: u64, total: u64, ring_bytes: u64) -> bool {
    pass > ring_bytes / 8 || total > ring_bytes / 16
}

/// Adds one to an eventfd.
fn post(fd: &OwnedFd) {
    let one: u64 = 1;
    // SAFETY: an 8-byte write to an eventfd.
    unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
}

/// Resets a non-blocking eventfd.
fn take(fd: &OwnedFd) {
    let mut n = 0u64;
    // SAFETY: an 8-byte read from a non-blocking eventfd.
    unsafe { libc::read(fd.as_raw_fd(), (&mut n as *mut u64).cast(), 8) };
}

fn eventfd() -> std::io::Result<OwnedFd> {
    // SAFETY: eventfd returns a new fd or -1.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl Shared {
    fn wake(&self) {
        post(&self.wake);
    }

    fn set_grow_failed(&self, why: String) {
        if let Ok(mut slot) = self.grow_failed.lock() {
            *slot = Some(why);
        }
    }
}

/// A running drain thread and the records it has copied out.
pub struct Drain {
    shared: Arc<Shared>,
    records: QueueRx,
    thread: Option<JoinHandle<()>>,
}

impl Drain {
    /// Starts the thread; it owns `ring` (`ring_bytes` long) from now on, and grows it as
    /// `grow` says when a burst puts it [`under_pressure`].
    pub fn start(
        ring: RingBuf<MapData>,
        ring_bytes: u64,
        grow: Option<Grow>,
    ) -> std::io::Result<Drain> {
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            flush_requested: AtomicU64::new(0),
            flush_done: AtomicU64::new(0),
            wake: eventfd()?,
            ready: eventfd()?,
            ring_bytes: AtomicU64::new(ring_bytes),
            grow_failed: std::sync::Mutex::new(None),
        });
        let (tx, rx) = bounded_queue(MAX_QUEUE_BYTES);
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("fdaudit-drain".into())
            .spawn(move || run(ring, grow, &thread_shared, &tx))?;
        Ok(Drain {
            shared,
            records: rx,
            thread: Some(thread),
        })
    }

    /// Waits up to `timeout` for a record (a signal ends the wait early, as it ends a
    /// poll(2)), then returns every record copied out so far.
    pub fn wait(&self, timeout: Duration) -> Vec<Vec<u8>> {
        let mut out: Vec<Vec<u8>> = self.records.take_all();
        if out.is_empty() {
            let mut pfd = libc::pollfd {
                fd: self.shared.ready.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
            // SAFETY: one valid pollfd; EINTR (a signal) just ends the wait.
            unsafe { libc::poll(&mut pfd, 1, ms) };
        }
        take(&self.shared.ready);
        out.extend(self.records.take_all());
        out
    }

    /// Records dropped because the decoder had [`MAX_QUEUE_BYTES`] still to take.
    pub fn dropped(&self) -> u64 {
        self.records.dropped()
    }

    /// Readable when records wait to be taken ([`Drain::wait`] resets it): for a caller
    /// that polls it together with other fds.
    pub fn ready_fd(&self) -> std::os::fd::RawFd {
        self.shared.ready.as_raw_fd()
    }

    /// The ring's size now (bytes): the first ring's, or the grown one's once it is in.
    pub fn ring_bytes(&self) -> u64 {
        self.shared.ring_bytes.load(Ordering::Acquire)
    }

    /// Why the ring could not grow under pressure, if it could not.
    pub fn grow_failed(&self) -> Option<String> {
        self.shared.grow_failed.lock().ok()?.clone()
    }

    /// Every record in the ring now: the thread makes one complete pass after this call
    /// and everything it copied is returned (waits at most `timeout` for the pass).
    pub fn flush(&self, timeout: Duration) -> Vec<Vec<u8>> {
        let want = self.shared.flush_requested.fetch_add(1, Ordering::AcqRel) + 1;
        self.shared.wake();
        let deadline = Instant::now() + timeout;
        let mut out = Vec::new();
        while self.shared.flush_done.load(Ordering::Acquire) < want && Instant::now() < deadline {
            out.extend(self.records.recv_timeout(Duration::from_millis(1)));
        }
        out.extend(self.records.take_all());
        out
    }
}

impl Drop for Drain {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Gives every record `ring` holds to `take`; the bytes taken (records and the kernel's
/// headers), or None when `take` says the consumer is gone.
fn take_all(ring: &mut RingBuf<MapData>, mut take: impl FnMut(&[u8]) -> Option<()>) -> Option<u64> {
    let mut bytes = 0;
    while let Some(item) = ring.next() {
        bytes += item.len() as u64 + 8; // the kernel's record header
        take(&item)?;
    }
    Some(bytes)
}

/// Copies every record `ring` holds to `tx`; the bytes copied, or None when the consumer is
/// gone.
fn copy_out(ring: &mut RingBuf<MapData>, tx: &QueueTx) -> Option<u64> {
    take_all(ring, |r| tx.push(r))
}

/// Both rings' records while the grown ring is being put in its slot: a program that looked
/// up the slot before the update still writes to the first ring, so a record there can be
/// written after the first ring was read and before a later record (another process's, a
/// child's exec after its parent's call) that is read from the grown ring. The grown ring's
/// records wait until a read of the first ring after them finds nothing new (a few rounds
/// at most). `first` copies the first ring's records to `tx`, `grown` the grown ring's into
/// the held ones; the bytes copied from (the first ring, the grown ring), or None when the
/// consumer is gone.
fn copy_in_order(
    mut first: impl FnMut() -> Option<u64>,
    mut grown: impl FnMut(&mut Vec<Vec<u8>>) -> u64,
    tx: &QueueTx,
) -> Option<(u64, u64)> {
    let (mut held, mut held_bytes, mut first_bytes) = (Vec::new(), 0, 0);
    for _ in 0..ORDER_ROUNDS {
        held_bytes += grown(&mut held);
        let more = first()?;
        first_bytes += more;
        if more == 0 {
            break;
        }
    }
    for item in held {
        tx.push_owned(item)?;
    }
    Some((first_bytes, held_bytes))
}

/// Copies every record `ring` holds into `held`; the bytes copied.
fn hold_all(ring: &mut RingBuf<MapData>, held: &mut Vec<Vec<u8>>) -> u64 {
    take_all(ring, |r| {
        held.push(r.to_vec());
        Some(())
    })
    .unwrap_or(0)
}

/// Reads of the first ring after the grown ring's, at most, before the grown ring's
/// records go on anyway (the first ring still busy).
const ORDER_ROUNDS: usize = 8;

/// The ring growing on a thread of its own (creating it clears its pages, and putting it
/// in its slot waits for an RCU grace period), while the drain thread goes on copying out
/// the first ring. The reader goes to the drain thread *before* the ring is put in its
/// slot: the programs write to it from the slot update on, while the update itself still
/// waits for the grace period, and a flush answered in that wait without the grown
/// ring's reader would miss records already written (`bench -- CMD` then filed a run's
/// last spawns under the next run's limit).
fn start_growing(grow: Grow, shared: &Arc<Shared>) -> mpsc::Receiver<RingBuf<MapData>> {
    let (tx, rx) = mpsc::channel();
    let thread_shared = Arc::clone(shared);
    let grow_shared = Arc::clone(shared);
    let grown = move || -> Result<(), String> {
        let (map, reader) = ebpf::create_ring(grow.bytes).map_err(|e| ebpf::one_line(&e))?;
        tx.send(reader)
            .map_err(|_| "the drain thread is gone".to_string())?;
        // Any record in the grown ring is written after this send, so a flush asked after
        // it finds the reader (the pass takes it after reading the request); the wake has
        // the thread poll the grown ring from now on.
        grow_shared.wake();
        grow.slot.fill(&map).map_err(|e| ebpf::one_line(&e))?;
        grow_shared
            .ring_bytes
            .store(u64::from(grow.bytes), Ordering::Release);
        Ok(())
    };
    let spawned = std::thread::Builder::new()
        .name("fdaudit-grow".into())
        .spawn(move || {
            if let Err(why) = grown() {
                thread_shared.set_grow_failed(why);
            }
        });
    if let Err(e) = spawned {
        shared.set_grow_failed(format!("failed to start a thread: {e}"));
    }
    rx
}

/// The thread: copy out everything, answer flushes, sleep in poll until the kernel or the
/// consumer wakes it; grow the ring when a pass finds it under pressure.
fn run(mut ring: RingBuf<MapData>, mut grow: Option<Grow>, shared: &Arc<Shared>, tx: &QueueTx) {
    // Signals are for the consumer's thread: its wait is what a signal must interrupt.
    // SAFETY: a full set, applied to this thread only.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
    }
    let pollfd = |fd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let mut fds = vec![pollfd(ring.as_raw_fd()), pollfd(shared.wake.as_raw_fd())];
    let first_bytes = shared.ring_bytes.load(Ordering::Acquire);
    // The growth under way: where the grown ring's reader comes from.
    let mut growing: Option<mpsc::Receiver<RingBuf<MapData>>> = None;
    let mut grown: Option<RingBuf<MapData>> = None;
    let mut total = 0;
    loop {
        let asked = shared.flush_requested.load(Ordering::Acquire);
        if let Some(rx) = &growing {
            if let Ok(reader) = rx.try_recv() {
                fds.push(pollfd(reader.as_raw_fd()));
                grown = Some(reader);
                growing = None;
            }
        }
        // Whether the grown ring was in its slot before this pass: then no program writes
        // to the first ring any more (the slot update waited for the ones running).
        let settled = shared.ring_bytes.load(Ordering::Acquire) != first_bytes;
        // The first ring before the grown one: the programs switch to the grown one for
        // good once it is in, so a process's records there come after its records here.
        let Some(first) = copy_out(&mut ring, tx) else {
            return; // the consumer is gone
        };
        let later = match grown.as_mut() {
            None => Some((0, 0)),
            Some(g) if settled => copy_out(g, tx).map(|b| (0, b)),
            Some(g) => copy_in_order(|| copy_out(&mut ring, tx), |h| hold_all(g, h), tx),
        };
        let Some((first_again, later)) = later else {
            return;
        };
        let first = first + first_again;
        if first + later > 0 {
            post(&shared.ready);
        }
        total += first;
        if under_pressure(first, total, first_bytes) {
            if let Some(g) = grow.take() {
                growing = Some(start_growing(g, shared));
            }
        }
        shared.flush_done.store(asked, Ordering::Release);
        if shared.stop.load(Ordering::Acquire) {
            return;
        }
        // A spawn record wakes the ring's poll at once (not a node agent's: `quiet_spawns`);
        // an exit record does not (unless an eighth of the ring waits: fdaudit-ebpf's
        // `wake`), so the timeout is also the tick that brings the records no wake-up
        // brought; a flush (the trace's end) wakes
        // the thread itself, and so does the grown ring's arrival.
        // SAFETY: valid pollfds.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 200) };
        if fds[1].revents != 0 {
            take(&shared.wake);
        }
    }
}

/// Spawns per CPU the grown ring holds at their largest (with their exit records): what
/// one CPU can produce while the drain thread waits for a CPU of its own.
pub const RECORDS_PER_CPU: u64 = 256;
/// The first ring's size when `--buffer-pages` is not given: 1 MiB holds ~70 of the
/// largest spawns and thousands of common ones; the ring grows to
/// [`default_ring_bytes`] once a pass finds it [`under_pressure`]. Creating the
/// 8 MiB ring at once cost every trace its cleared pages at start-up and exit
/// (docs/performance.md).
pub const FIRST_RING_BYTES: u64 = 1 << 20;
/// Bounds of the default ring size.
pub const MIN_RING_BYTES: u64 = 8 << 20;
pub const MAX_RING_BYTES: u64 = 256 << 20;
/// The largest ring `--buffer-pages` may ask for.
pub const MAX_BUFFER_BYTES: u64 = 1 << 30;

/// The most bytes one spawn and its exit put on the ring.
pub fn max_spawn_bytes() -> u64 {
    (fdaudit_common::MAX_SPAWN_BYTES + size_of::<fdaudit_common::ExitRecord>() + 8) as u64
}

/// Grown ring size for `ncpus` CPUs: [`RECORDS_PER_CPU`] of the largest spawns per CPU,
/// a power of two (the kernel's rule), within [`MIN_RING_BYTES`]..=[`MAX_RING_BYTES`].
pub fn default_ring_bytes(ncpus: u64) -> u64 {
    (ncpus.max(1) * RECORDS_PER_CPU * max_spawn_bytes())
        .next_power_of_two()
        .clamp(MIN_RING_BYTES, MAX_RING_BYTES)
}

/// Why a `--buffer-pages` value cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum BufferPagesError {
    #[error("--buffer-pages {0} is not a power of two (the kernel sizes ring buffers in powers of two): try {1}")]
    NotPowerOfTwo(u64, u64),
    #[error(
        "--buffer-pages {pages} is {bytes} bytes, above the {max}-byte limit: ask for fewer pages"
    )]
    TooLarge { pages: u64, bytes: u64, max: u64 },
}

/// Ring size in bytes for `pages` pages of `page_size`.
pub fn ring_bytes_from_pages(pages: u64, page_size: u64) -> Result<u64, BufferPagesError> {
    if pages == 0 || !pages.is_power_of_two() {
        return Err(BufferPagesError::NotPowerOfTwo(
            pages,
            pages.max(1).next_power_of_two(),
        ));
    }
    let bytes = pages.saturating_mul(page_size);
    if bytes > MAX_BUFFER_BYTES {
        return Err(BufferPagesError::TooLarge {
            pages,
            bytes,
            max: MAX_BUFFER_BYTES,
        });
    }
    Ok(bytes)
}

/// CPUs online (every one of them can write to the ring).
pub fn online_cpus() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    n.max(1) as u64
}

/// The system page size.
pub fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as u64
    } else {
        4096
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_sizes_are_powers_of_two_from_cpus_and_record_size() {
        let one = default_ring_bytes(1);
        assert!(one.is_power_of_two() && one >= MIN_RING_BYTES);
        assert!(one >= RECORDS_PER_CPU * max_spawn_bytes());
        let many = default_ring_bytes(64);
        assert!(many.is_power_of_two() && many <= MAX_RING_BYTES);
        assert!(default_ring_bytes(8) >= 8 * RECORDS_PER_CPU * max_spawn_bytes());
        assert!(
            max_spawn_bytes() > 8 * 1024,
            "the largest spawn is the fd list and 8 paths"
        );
    }

    #[test]
    fn an_eighth_of_the_ring_in_one_pass_or_a_sixteenth_in_all_is_pressure() {
        let ring = FIRST_RING_BYTES;
        assert!(!under_pressure(0, 0, ring));
        // trace -- /bin/true: one spawn and one exit record.
        let one = max_spawn_bytes();
        assert!(!under_pressure(one, one, ring));
        assert!(!under_pressure(ring / 16, ring / 16, ring));
        assert!(under_pressure(ring / 32, ring / 16 + 1, ring));
        assert!(under_pressure(ring / 8 + 1, ring / 8 + 1, ring));
        // The first ring holds ~70 of the largest spawns; the grown one is bigger.
        assert!(FIRST_RING_BYTES >= 64 * max_spawn_bytes());
        assert!(default_ring_bytes(1) > FIRST_RING_BYTES);
    }

    #[test]
    fn the_queue_drops_and_counts_what_does_not_fit_and_taking_frees_room() {
        let (tx, rx) = bounded_queue(100);
        for _ in 0..4 {
            tx.push(&[0; 30]).expect("the consumer is here");
        }
        assert_eq!(
            rx.dropped(),
            1,
            "the fourth 30-byte record is over 100 bytes"
        );
        assert_eq!(rx.take_all().len(), 3);
        tx.push(&[0; 100]).expect("room again");
        tx.push(&[0; 1]).expect("the consumer is here");
        assert_eq!(rx.dropped(), 2);
        assert_eq!(rx.take_all(), vec![vec![0; 100]]);
        drop(rx);
        assert!(tx.push(&[0; 1]).is_none(), "the consumer is gone");
    }

    #[test]
    fn a_first_ring_record_written_while_the_grown_ring_is_read_goes_first() {
        let (tx, rx) = bounded_queue(1 << 20);
        // The parent's call lands in the first ring just after it was read empty, while its
        // child's exec, later, is read from the grown ring.
        let mut first_ring: Vec<Vec<u8>> = Vec::new();
        let mut late = Some(b"parent's call".to_vec());
        let first_ring = std::cell::RefCell::new(&mut first_ring);
        let copied = copy_in_order(
            || {
                let mut ring = first_ring.borrow_mut();
                let n = ring.iter().map(|r| r.len() as u64).sum();
                for r in ring.drain(..) {
                    tx.push(&r)?;
                }
                Some(n)
            },
            |held| {
                if let Some(call) = late.take() {
                    held.push(b"child's exec".to_vec());
                    first_ring.borrow_mut().push(call);
                    return 12;
                }
                0
            },
            &tx,
        );
        assert_eq!(copied, Some((13, 12)));
        assert_eq!(
            rx.take_all(),
            vec![b"parent's call".to_vec(), b"child's exec".to_vec()]
        );
    }

    #[test]
    fn buffer_pages_must_be_a_power_of_two_within_limits() {
        assert_eq!(ring_bytes_from_pages(4096, 4096).unwrap(), 16 << 20);
        let e = ring_bytes_from_pages(3000, 4096).unwrap_err();
        assert!(e.to_string().contains("try 4096"), "{e}");
        assert!(ring_bytes_from_pages(0, 4096).is_err());
        assert!(ring_bytes_from_pages(1 << 20, 4096).is_err());
    }
}
