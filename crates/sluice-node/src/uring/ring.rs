//! One worker's io_uring: its setup (or why it cannot be had), its completion eventfd, and the
//! few operations the connection loop submits.
//!
//! Every operation carries `user_data` = connection slot << 8 | [`Op`], so a completion finds
//! its connection without a lookup table. A buffer a send points at belongs to the
//! connection's slot, which lives until none of its operations is in flight.
//!
//! Receives are multishot: one receive per connection stays armed, and each arrival takes a
//! buffer from a ring of provided buffers ([`Buffers`]) that the ring owns; the loop copies the
//! bytes to the connection and gives the buffer back at once.
//!
//! The ring has room for [`BUFFERS`] buffers but lends only as many as the load has needed:
//! [`FIRST_LENT`] at first, twice as many each time many connections found none in one turn
//! (ENOBUFS). The kernel takes buffers in the order they were lent and each comes back to the
//! end of the line, so the receives cycle through every buffer lent: lending all of them from
//! the start made every worker touch (and keep resident) 4 MB after its first thousand
//! arrivals. The buffers are mapped untouched, so one never lent costs no memory. One
//! connection that sends more than the buffers hold in a turn (a bulk load through
//! `redis-cli --pipe`) is no reason to lend more: its receive is armed again and takes the
//! rest next turn, where more buffers would only hold more of its bytes at once.
//!
//! # Invariants
//! - The kernel writes into a provided buffer it holds whenever it runs this thread's task work,
//!   at any return to user mode (COOP_TASKRUN only spares the interrupt). So no Rust reference
//!   ever spans the buffer region: it is kept as a raw pointer, and a slice is made only over
//!   the one buffer a completion handed back, before it is lent again.
//! - Buffers are registered with a ring only inside a [`Lent`], whose ring field drops before
//!   its buffers: no path, an error in [`Ring::new`] included, frees memory the kernel may
//!   still write.

use std::alloc::Layout;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU16, Ordering};

use io_uring::types::{BufRingEntry, Fd};
use io_uring::{IoUring, Probe, cqueue, opcode, squeue};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// Submission queue entries: enough for a send and a receive of a few thousand connections
/// per turn; a fuller turn submits early ([`Ring::push`]).
const SQ_ENTRIES: u32 = 4096;
/// Completion queue entries: a multishot receive posts one per arrival, so this is sized for
/// bursts (the kernel keeps what overflows until it is reaped, IORING_FEAT_NODROP).
const CQ_ENTRIES: u32 = 16384;
/// Provided buffers for the receives, and their size: at most 4 MB per worker thread. A
/// receive takes one per arrival and the loop gives it back in the same turn, so running out
/// (ENOBUFS, and the receive is armed again) takes more arrivals in one turn than there are
/// buffers lent.
const BUFFERS: u16 = 1024;
const BUFFER_LEN: usize = 4096;
/// Buffers lent before any turn has run out: 256 KB, enough for a turn in which each of 64
/// connections received. More are lent as turns run out ([`Buffers::grow`]).
const FIRST_LENT: u16 = 64;
/// A reap in which at least one receive in this many buffers lent found none lends more:
/// many connections wanted a buffer at once.
const STARVED_PER_LENT: u16 = 4;
/// The buffer group of [`Buffers`].
const GROUP: u16 = 0;

/// Set in the environment, io_uring setup fails as where the kernel or a container forbids it,
/// so the fallback to epoll can be tested on a machine that has io_uring.
pub const DENY_ENV: &str = "SLUICE_TEST_IO_URING_DENIED";

/// What a completion is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Recv = 1,
    Send = 2,
    Cancel = 3,
}

/// A completion: the slot, the operation, and its result (bytes, or a negated errno).
#[derive(Clone, Copy, Debug)]
pub struct Done {
    pub slot: usize,
    pub op: Op,
    pub result: i32,
    /// The provided buffer a receive filled ([`Ring::received`] reads it).
    pub buffer: Option<u16>,
    /// A multishot receive stays armed after this completion.
    pub more: bool,
}

fn user_data(slot: usize, op: Op) -> u64 {
    ((slot as u64) << 8) | op as u64
}

fn decode(user_data: u64, result: i32, flags: u32) -> Done {
    let op = match user_data & 0xff {
        1 => Op::Recv,
        2 => Op::Send,
        _ => Op::Cancel,
    };
    Done {
        slot: (user_data >> 8) as usize,
        op,
        result,
        buffer: cqueue::buffer_select(flags),
        more: cqueue::more(flags),
    }
}

/// A ring whose completions are signalled on an eventfd the tokio runtime waits on.
pub struct Ring {
    lent: Lent,
    eventfd: AsyncFd<OwnedFd>,
}

/// A ring and the buffers registered with it, made together so they cannot be dropped apart.
struct Lent {
    // Dropped before the buffers (fields drop in declaration order). The loop ends only once
    // every connection's operations have completed, so by then no receive can still write
    // into them; on an error in `Ring::new` nothing was submitted yet.
    ring: IoUring,
    buffers: Buffers,
}

impl Lent {
    /// `ring` with [`Buffers`], every one lent to the kernel, registered as [`GROUP`].
    fn new(ring: IoUring) -> io::Result<Lent> {
        let lent = Lent {
            ring,
            buffers: Buffers::new()?,
        };
        // SAFETY: the entries and the buffers live as long as the ring: both are `lent`'s, and
        // its ring drops first.
        unsafe {
            lent.ring.submitter().register_buf_ring_with_flags(
                lent.buffers.entries as u64,
                BUFFERS,
                GROUP,
                0,
            )?;
        }
        Ok(lent)
    }
}

/// The provided buffers: room for [`BUFFERS`] of [`BUFFER_LEN`] bytes, and the ring of
/// entries that lends them to the kernel (page-aligned, as the kernel wants it). Both are
/// allocated here and freed on drop; neither is ever behind a reference that outlives one
/// access (module invariants).
struct Buffers {
    entries: *mut BufRingEntry,
    /// The buffers, one after another: what the kernel writes into. Mapped anonymous and
    /// untouched, so only the pages of buffers lent and written are resident.
    data: *mut u8,
    /// The next entry to fill, and (as published) how far the kernel may take.
    tail: u16,
    /// Buffers `0..lent` go round between the kernel and the loop; the rest were never lent.
    lent: u16,
}

impl Buffers {
    fn entries_layout() -> Layout {
        Layout::from_size_align(usize::from(BUFFERS) * size_of::<BufRingEntry>(), 4096)
            .expect("a valid layout")
    }

    const DATA_LEN: usize = BUFFERS as usize * BUFFER_LEN;

    /// The buffers, the first [`FIRST_LENT`] ready to lend (the tail published), not
    /// registered yet.
    fn new() -> io::Result<Buffers> {
        // SAFETY: the layout has a non-zero size.
        let entries =
            unsafe { std::alloc::alloc_zeroed(Self::entries_layout()) }.cast::<BufRingEntry>();
        if entries.is_null() {
            return Err(io::ErrorKind::OutOfMemory.into());
        }
        // Mapped, not allocated: an allocator may hand back memory it has touched (and zero
        // it by writing), and these pages must stay untouched until the kernel first fills them.
        // SAFETY: a new private anonymous mapping, which aliases nothing.
        let data = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                Self::DATA_LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if data == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            // SAFETY: allocated just above with this layout, and not kept.
            unsafe { std::alloc::dealloc(entries.cast(), Self::entries_layout()) };
            return Err(e);
        }
        // Where transparent huge pages are `always`, one receive would make 2 MB resident.
        // Advice only: where it is refused the buffers work the same.
        // SAFETY: the mapping just made, whole.
        unsafe { libc::madvise(data, Self::DATA_LEN, libc::MADV_NOHUGEPAGE) };
        let mut buffers = Buffers {
            entries,
            data: data.cast(),
            tail: 0,
            lent: 0,
        };
        buffers.lend_up_to(FIRST_LENT);
        Ok(buffers)
    }

    /// Lends buffers never lent until `lent` of them go round.
    fn lend_up_to(&mut self, lent: u16) {
        while self.lent < lent.min(BUFFERS) {
            self.give_back(self.lent);
            self.lent += 1;
        }
    }

    /// A turn ran out of buffers: twice as many go round from now on (up to [`BUFFERS`]).
    fn grow(&mut self) {
        self.lend_up_to(self.lent.saturating_mul(2));
    }

    /// Where buffer `bid` (below [`BUFFERS`]) starts. An address only: no reference is made,
    /// for the kernel may be writing into the buffers around it.
    fn buffer(&self, bid: u16) -> *mut u8 {
        debug_assert!(bid < BUFFERS);
        self.data.wrapping_add(usize::from(bid) * BUFFER_LEN)
    }

    /// Lends buffer `bid` to the kernel again.
    fn give_back(&mut self, bid: u16) {
        let index = usize::from(self.tail & (BUFFERS - 1));
        let addr = self.buffer(bid);
        // SAFETY: `index` is within the entries; the kernel reads only entries up to the
        // published tail, and this one is past it, so this is the only access to it.
        let entry = unsafe { &mut *self.entries.add(index) };
        entry.set_addr(addr as u64);
        entry.set_len(BUFFER_LEN as u32);
        entry.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
        // SAFETY: the tail field of the first entry, 2-byte aligned inside the entries, which
        // the kernel reads concurrently: only ever accessed atomically, published with release
        // ordering so the entry is seen filled.
        unsafe {
            let tail = BufRingEntry::tail(self.entries).cast::<AtomicU16>();
            (*tail).store(self.tail, Ordering::Release);
        }
    }
}

impl Drop for Buffers {
    fn drop(&mut self) {
        // SAFETY: both allocated in `new` with these layouts, freed once; the kernel no longer
        // uses them (`Lent` drops its ring first, or they were never registered).
        unsafe {
            std::alloc::dealloc(self.entries.cast(), Self::entries_layout());
            libc::munmap(self.data.cast(), Self::DATA_LEN);
        }
    }
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring").finish_non_exhaustive()
    }
}

/// Sets up a ring with what the loop needs, or says why it cannot: not permitted (a
/// container's seccomp profile, `kernel.io_uring_disabled`), or a kernel without the
/// operations.
pub fn setup() -> io::Result<IoUring> {
    if std::env::var_os(DENY_ENV).is_some() {
        return Err(io::Error::from_raw_os_error(libc::EPERM));
    }
    // Cooperative task work (Linux 5.19): the receives and sends that became possible run at
    // this thread's next entry to the kernel instead of interrupting it; TASKRUN_FLAG says
    // when some wait, so the turn's `io_uring_enter` runs them. Not DEFER_TASKRUN (6.1): it
    // defers the same work to `io_uring_enter` alone, and on Linux 6.18 the eventfd of a ring
    // set up so is signalled about 14 ms after another thread's write while the loop waits
    // (0.3 ms with COOP_TASKRUN): a lone client got 260 requests a second. Older kernels: the
    // default.
    let ring = IoUring::builder()
        .setup_cqsize(CQ_ENTRIES)
        .setup_single_issuer()
        .setup_coop_taskrun()
        .setup_taskrun_flag()
        .build(SQ_ENTRIES)
        .or_else(|_| {
            IoUring::builder()
                .setup_cqsize(CQ_ENTRIES)
                .build(SQ_ENTRIES)
        })?;
    let mut probe = Probe::new();
    ring.submitter().register_probe(&mut probe)?;
    let needed = [
        opcode::RecvMulti::CODE,
        opcode::Send::CODE,
        opcode::AsyncCancel::CODE,
    ];
    if needed.iter().any(|&op| !probe.is_supported(op)) {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "the kernel's io_uring lacks RECV, SEND or ASYNC_CANCEL",
        ));
    }
    // Multishot receives with a ring of provided buffers came in Linux 6.0; the probe does not
    // tell, so the version does.
    if !kernel_at_least(6, 0) {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "multishot receives need Linux 6.0 or later",
        ));
    }
    Ok(ring)
}

impl Ring {
    /// A ring for this thread, its completions signalled on an eventfd registered with the
    /// thread's tokio runtime (so must be called inside it).
    pub fn new() -> io::Result<Ring> {
        let lent = Lent::new(setup()?)?;
        // SAFETY: eventfd returns a new descriptor we own, or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        lent.ring.submitter().register_eventfd(fd.as_raw_fd())?;
        // SAFETY: an `OwnedFd` keeps its descriptor open, and the same one, until it drops.
        let eventfd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
            .map_err(|e| e.into_parts().1)?;
        Ok(Ring { lent, eventfd })
    }

    /// Waits until the kernel has work for the loop: completions to reap, or task work for
    /// the next turn to run.
    ///
    /// The kernel signals the eventfd only while the loop waits here: a busy loop looks at
    /// the rings itself and needs no wakeups. The eventfd is never read: tokio registers it
    /// edge-triggered, and every signal is a new edge, so clearing tokio's readiness is
    /// enough and saves a read per wakeup (its counter would take centuries to fill).
    pub async fn completed(&mut self) {
        self.lent.ring.completion().enable_eventfd();
        // Enabled first, then looked: work that came before is seen here, work that comes
        // after signals.
        if !self.has_work()
            && let Ok(mut ready) = self.eventfd.readable().await
        {
            ready.clear_ready();
        }
        self.lent.ring.completion().disable_eventfd();
    }

    /// Whether completions wait to be reaped, or task work to be run by the next turn.
    pub fn has_work(&mut self) -> bool {
        !self.lent.ring.completion().is_empty() || self.lent.ring.submission().taskrun()
    }

    /// Moves every posted completion to `into`. Where many receives found no buffer (one in
    /// [`STARVED_PER_LENT`] buffers lent), more are lent, once per reap, before the loop arms
    /// them again.
    pub fn reap(&mut self, into: &mut std::collections::VecDeque<Done>) {
        let mut starved: u16 = 0;
        into.extend(self.lent.ring.completion().map(|cqe| {
            let done = decode(cqe.user_data(), cqe.result(), cqe.flags());
            if done.op == Op::Recv && done.result == -libc::ENOBUFS {
                starved = starved.saturating_add(1);
            }
            done
        }));
        if starved.saturating_mul(STARVED_PER_LENT) >= self.lent.buffers.lent {
            self.lent.buffers.grow();
        }
    }

    /// Hands the queued operations to the kernel and runs the task work waiting (the
    /// receives and sends that became possible): one `io_uring_enter` for all of them.
    pub fn submit(&mut self) {
        let sq = self.lent.ring.submission();
        if sq.is_empty() && !sq.taskrun() {
            return;
        }
        drop(sq);
        // An error (EINTR, EAGAIN under memory pressure) leaves the entries queued: the next
        // turn submits them.
        let _ = self.lent.ring.submit();
    }

    /// Arms `slot`'s multishot receive: each arrival fills a provided buffer.
    pub fn recv(&mut self, slot: usize, fd: RawFd) {
        let entry = opcode::RecvMulti::new(Fd(fd), GROUP)
            .build()
            .user_data(user_data(slot, Op::Recv));
        // SAFETY: the receive writes only into provided buffers, which live as long as the
        // ring (`Lent`).
        unsafe { self.push(entry) };
    }

    /// The bytes a receive completion carries, handed to `take`; the buffer then goes back to
    /// the kernel.
    pub fn received(&mut self, done: &Done, take: impl FnOnce(&[u8])) {
        // The kernel hands back only the ids it was lent, all below `lent`.
        let Some(bid) = done.buffer.filter(|&bid| bid < self.lent.buffers.lent) else {
            return;
        };
        let len = usize::try_from(done.result).unwrap_or(0).min(BUFFER_LEN);
        let buffers = &mut self.lent.buffers;
        // SAFETY: `bid < lent <= BUFFERS` and `len <= BUFFER_LEN`, so the slice is inside buffer `bid`
        // alone. The completion handed that buffer back: the kernel wrote its first `len` bytes
        // and writes nothing into it until `give_back` lends it again, after `take` is done
        // with the slice (which cannot outlive the call).
        let bytes = unsafe { std::slice::from_raw_parts(buffers.buffer(bid), len) };
        take(bytes);
        buffers.give_back(bid);
    }

    /// Queues a send of `len` bytes at `buf`.
    ///
    /// # Safety
    /// `buf..buf+len` must stay allocated and unchanged until this operation completes.
    pub unsafe fn send(&mut self, slot: usize, fd: RawFd, buf: *const u8, len: usize) {
        let len = u32::try_from(len).unwrap_or(u32::MAX);
        let entry = opcode::Send::new(Fd(fd), buf, len)
            .flags(libc::MSG_NOSIGNAL)
            .build()
            .user_data(user_data(slot, Op::Send));
        // SAFETY: the caller keeps the buffer as this function requires.
        unsafe { self.push(entry) };
    }

    /// Queues the cancel of `slot`'s operation `op` in flight.
    pub fn cancel(&mut self, slot: usize, op: Op) {
        let entry = opcode::AsyncCancel::new(user_data(slot, op))
            .build()
            .user_data(user_data(slot, Op::Cancel));
        // SAFETY: a cancel points at no buffer.
        unsafe { self.push(entry) };
    }

    /// # Safety
    /// The buffers `entry` points at outlive the operation.
    unsafe fn push(&mut self, entry: squeue::Entry) {
        loop {
            // SAFETY: the caller keeps what `entry` points at alive until the operation
            // completes (this function's contract).
            if unsafe { self.lent.ring.submission().push(&entry) }.is_ok() {
                return;
            }
            // Full: hand the kernel what is queued, which empties the queue (a submission
            // without waiting is not held back by completions not reaped yet).
            let _ = self.lent.ring.submit();
        }
    }
}

/// Whether the running kernel is at least `major.minor` (from uname).
fn kernel_at_least(major: u32, minor: u32) -> bool {
    // SAFETY: all-zero bytes are a valid `utsname` (arrays of bytes).
    let mut name: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: uname fills the struct we own, through a pointer valid for its whole size.
    if unsafe { libc::uname(&mut name) } != 0 {
        return false;
    }
    // SAFETY: uname's release is a NUL-terminated string.
    let release = unsafe { std::ffi::CStr::from_ptr(name.release.as_ptr()) };
    let mut parts = release
        .to_str()
        .unwrap_or("")
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|p| p.parse::<u32>().ok());
    let have = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    have >= (major, minor)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The entries lend each of the first `lent` buffers once, each its own `BUFFER_LEN`
    /// bytes inside the region, and the published tail lends them all.
    fn assert_lent(buffers: &Buffers, lent: u16) {
        assert_eq!(buffers.lent, lent);
        let start = buffers.data.addr() as u64;
        let mut seen = vec![false; usize::from(lent)];
        for index in 0..usize::from(lent) {
            // SAFETY: `index` is within the entries, which nothing writes during the test (no
            // receive is armed).
            let entry = unsafe { &*buffers.entries.add(index) };
            let bid = entry.bid();
            assert!(bid < lent);
            assert_eq!(entry.addr(), start + u64::from(bid) * BUFFER_LEN as u64);
            assert_eq!(entry.len(), BUFFER_LEN as u32);
            assert!(!std::mem::replace(&mut seen[usize::from(bid)], true));
        }
        // SAFETY: the tail field of the first entry, read atomically as the kernel reads it.
        let tail = unsafe { &*BufRingEntry::tail(buffers.entries).cast::<AtomicU16>() };
        assert_eq!(tail.load(Ordering::Acquire), lent);
    }

    #[test]
    fn buffers_lend_the_first_few_then_twice_as_many_as_turns_run_out() {
        let mut buffers = Buffers::new().expect("buffers");
        assert_lent(&buffers, FIRST_LENT);
        buffers.grow();
        assert_lent(&buffers, 2 * FIRST_LENT);
        for _ in 0..16 {
            buffers.grow();
        }
        assert_lent(&buffers, BUFFERS);
    }

    /// Registered inside a `Lent` and dropped with it, ring first (where io_uring is permitted).
    #[test]
    fn lent_registers_the_buffers_with_its_ring() {
        let ring = match setup() {
            Ok(ring) => ring,
            Err(e) => return eprintln!("skipped: no io_uring here ({e})"),
        };
        let lent = Lent::new(ring).expect("registered");
        assert_lent(&lent.buffers, FIRST_LENT);
    }

    /// More connections receive before the loop reaps than there are buffers lent: those that
    /// found none end with ENOBUFS, the reap lends more, and once armed again every
    /// connection's bytes arrive whole.
    #[test]
    fn a_turn_that_runs_out_of_buffers_lends_more_and_loses_nothing() {
        if let Err(e) = setup() {
            return eprintln!("skipped: no io_uring here ({e})");
        }
        let runtime = current_thread();
        runtime.block_on(async {
            let mut ring = Ring::new().expect("a ring");
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a listener");
            let addr = listener.local_addr().expect("its address");
            let count = 3 * usize::from(FIRST_LENT);
            let mut pairs = Vec::new();
            for slot in 0..count {
                let theirs = std::net::TcpStream::connect(addr).expect("connected");
                let (ours, _) = listener.accept().expect("accepted");
                ring.recv(slot, ours.as_raw_fd());
                pairs.push((theirs, ours));
            }
            ring.submit();
            for (slot, (theirs, _)) in pairs.iter_mut().enumerate() {
                std::io::Write::write_all(theirs, format!("c{slot:04}").as_bytes())
                    .expect("written");
            }
            let fds: Vec<RawFd> = pairs.iter().map(|(_, ours)| ours.as_raw_fd()).collect();
            let got = receive(&mut ring, &fds, 5).await;
            for (slot, bytes) in got.iter().enumerate() {
                assert_eq!(bytes, format!("c{slot:04}").as_bytes());
            }
            assert!(
                ring.lent.buffers.lent > FIRST_LENT,
                "{count} arrivals in one turn lent more than {FIRST_LENT} buffers"
            );
            // The ring goes before the sockets its receives are armed on.
            drop(ring);
        });
    }

    /// One connection that sends far more than the buffers lent hold finds none many turns
    /// over; its bytes arrive whole, and no more buffers are lent for it.
    #[test]
    fn one_bulk_sender_lends_no_more_buffers() {
        if let Err(e) = setup() {
            return eprintln!("skipped: no io_uring here ({e})");
        }
        let runtime = current_thread();
        runtime.block_on(async {
            let mut ring = Ring::new().expect("a ring");
            let (mut theirs, ours) = connected();
            ring.recv(0, ours.as_raw_fd());
            ring.submit();
            let sent: Vec<u8> = (0..4 << 20).map(|i: u32| i.to_le_bytes()[1]).collect();
            let writer = std::thread::spawn({
                let sent = sent.clone();
                move || std::io::Write::write_all(&mut theirs, &sent).expect("written")
            });
            let got = receive(&mut ring, &[ours.as_raw_fd()], sent.len()).await;
            writer.join().expect("the writer");
            assert!(got[0] == sent, "the bytes arrived whole and in order");
            assert_eq!(ring.lent.buffers.lent, FIRST_LENT);
            drop(ring);
        });
    }

    /// A runtime on this thread, as a worker's loop has.
    fn current_thread() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
    }

    /// A connected pair on loopback: (the sender's end, ours).
    fn connected() -> (std::net::TcpStream, std::net::TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a listener");
        let theirs = std::net::TcpStream::connect(listener.local_addr().expect("its address"))
            .expect("connected");
        let (ours, _) = listener.accept().expect("accepted");
        (theirs, ours)
    }

    /// Runs turns until each of `fds` (armed as slots 0, 1, ...) has received `len` bytes, a
    /// receive that found no buffer (ENOBUFS) armed again, and returns the bytes of each.
    async fn receive(ring: &mut Ring, fds: &[RawFd], len: usize) -> Vec<Vec<u8>> {
        let mut got = vec![Vec::new(); fds.len()];
        let mut done = std::collections::VecDeque::new();
        let all_in = async {
            while got.iter().any(|bytes| bytes.len() < len) {
                ring.completed().await;
                ring.submit();
                ring.reap(&mut done);
                while let Some(d) = done.pop_front() {
                    assert_eq!(d.op, Op::Recv);
                    if d.result > 0 {
                        ring.received(&d, |b| got[d.slot].extend_from_slice(b));
                    } else if d.result == 0 {
                        // The sender closed: everything it sent has arrived.
                        continue;
                    } else {
                        assert_eq!(d.result, -libc::ENOBUFS, "slot {}", d.slot);
                    }
                    if !d.more {
                        ring.recv(d.slot, fds[d.slot]);
                    }
                }
                ring.submit();
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(10), all_in)
            .await
            .expect("every connection's bytes arrived");
        got
    }

    /// Bytes that arrive while the loop waits end the wait: the eventfd is signalled for the
    /// arrival, and nothing else runs on this runtime that could wake it.
    #[test]
    fn an_arrival_while_waiting_signals_the_eventfd() {
        if let Err(e) = setup() {
            return eprintln!("skipped: no io_uring here ({e})");
        }
        let runtime = current_thread();
        runtime.block_on(async {
            let mut ring = Ring::new().expect("a ring");
            let (mut theirs, ours) = connected();
            ring.recv(7, ours.as_raw_fd());
            ring.submit();
            assert!(!ring.has_work(), "nothing has arrived yet");
            // The wait is polled first (the eventfd enabled, nothing to reap), then the
            // write: only the eventfd can end the wait, and nothing else runs on this runtime.
            let wait = async {
                ring.completed().await;
                ring.submit();
                let mut done = std::collections::VecDeque::new();
                ring.reap(&mut done);
                let done = done.pop_front().expect("a completion once woken");
                assert_eq!((done.slot, done.op), (7, Op::Recv));
                let mut bytes = Vec::new();
                ring.received(&done, |b| bytes.extend_from_slice(b));
                bytes
            };
            let write = async {
                tokio::task::yield_now().await;
                std::io::Write::write_all(&mut theirs, b"PING\r\n").expect("written");
            };
            let woken = tokio::time::timeout(std::time::Duration::from_secs(10), async {
                tokio::join!(wait, write).0
            });
            assert_eq!(woken.await.expect("the arrival woke the wait"), b"PING\r\n");
        });
    }
}
