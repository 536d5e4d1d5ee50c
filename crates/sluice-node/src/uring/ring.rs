//! One worker's io_uring: its setup (or why it cannot be had), its completion eventfd, and the
//! few operations the connection loop submits.
//!
//! Every operation carries `user_data` = connection slot << 8 | [`Op`], so a completion finds
//! its connection without a lookup table. A buffer an operation points at belongs to the
//! connection's slot, which lives until none of its operations is in flight.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use io_uring::{IoUring, Probe, opcode, squeue, types::Fd};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// Submission queue entries: enough for a send and a receive of a few thousand connections
/// per turn; a fuller turn submits early ([`Ring::push`]).
const SQ_ENTRIES: u32 = 4096;
/// Completion queue entries: each connection has at most three operations in flight (a
/// receive, a send, a cancel).
const CQ_ENTRIES: u32 = 16384;

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
}

fn user_data(slot: usize, op: Op) -> u64 {
    ((slot as u64) << 8) | op as u64
}

fn decode(user_data: u64, result: i32) -> Done {
    let op = match user_data & 0xff {
        1 => Op::Recv,
        2 => Op::Send,
        _ => Op::Cancel,
    };
    Done {
        slot: (user_data >> 8) as usize,
        op,
        result,
    }
}

/// A ring whose completions are signalled on an eventfd the tokio runtime waits on.
pub struct Ring {
    ring: IoUring,
    eventfd: AsyncFd<OwnedFd>,
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
    let ring = IoUring::builder()
        .setup_cqsize(CQ_ENTRIES)
        .build(SQ_ENTRIES)?;
    let mut probe = Probe::new();
    ring.submitter().register_probe(&mut probe)?;
    let needed = [
        opcode::Recv::CODE,
        opcode::Send::CODE,
        opcode::AsyncCancel::CODE,
    ];
    if needed.iter().any(|&op| !probe.is_supported(op)) {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "the kernel's io_uring lacks RECV, SEND or ASYNC_CANCEL",
        ));
    }
    Ok(ring)
}

impl Ring {
    /// A ring for this thread, its completions signalled on an eventfd registered with the
    /// thread's tokio runtime (so must be called inside it).
    pub fn new() -> io::Result<Ring> {
        let ring = setup()?;
        // SAFETY: eventfd returns a new descriptor we own, or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        ring.submitter().register_eventfd(fd.as_raw_fd())?;
        // SAFETY: an `OwnedFd` keeps its descriptor open, and the same one, until it drops.
        let eventfd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
            .map_err(|e| e.into_parts().1)?;
        Ok(Ring { ring, eventfd })
    }

    /// Waits until the kernel has posted a completion since the last call.
    ///
    /// The eventfd is never read: tokio registers it edge-triggered, and every signal the
    /// kernel sends is a new edge, so clearing tokio's readiness is enough and saves a read
    /// per wakeup (its counter would take centuries to fill).
    pub async fn completed(&self) {
        if let Ok(mut ready) = self.eventfd.readable().await {
            ready.clear_ready();
        }
    }

    /// Whether completions wait to be reaped.
    pub fn has_completions(&mut self) -> bool {
        !self.ring.completion().is_empty()
    }

    /// Moves every posted completion to `into`.
    pub fn reap(&mut self, into: &mut std::collections::VecDeque<Done>) {
        into.extend(
            self.ring
                .completion()
                .map(|cqe| decode(cqe.user_data(), cqe.result())),
        );
    }

    /// Hands the queued operations to the kernel: one `io_uring_enter` for all of them.
    pub fn submit(&mut self) {
        if self.ring.submission().is_empty() {
            return;
        }
        // An error (EINTR, EAGAIN under memory pressure) leaves the entries queued: the next
        // turn submits them.
        let _ = self.ring.submit();
    }

    /// Queues a receive into `len` bytes at `buf`.
    ///
    /// # Safety
    /// `buf..buf+len` must stay allocated and untouched until this operation completes.
    pub unsafe fn recv(&mut self, slot: usize, fd: RawFd, buf: *mut u8, len: usize) {
        let len = u32::try_from(len).unwrap_or(u32::MAX);
        let entry = opcode::Recv::new(Fd(fd), buf, len)
            .build()
            .user_data(user_data(slot, Op::Recv));
        // SAFETY: the caller keeps the buffer as this function requires.
        unsafe { self.push(entry) };
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
            // SAFETY: passed on from the caller.
            if unsafe { self.ring.submission().push(&entry) }.is_ok() {
                return;
            }
            // Full: hand the kernel what is queued, which empties the queue (a submission
            // without waiting is not held back by completions not reaped yet).
            let _ = self.ring.submit();
        }
    }
}
