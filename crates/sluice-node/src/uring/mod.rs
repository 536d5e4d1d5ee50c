//! The io_uring connection loop (`--io uring`): all plain clients of one worker thread (TCP
//! and `--unixsocket`) in one ring.
//!
//! Each worker keeps its tokio runtime for the control plane (accept, housekeeping, the
//! shutdown signal, timers, and the connections this loop hands back) and adds a ring for the
//! data plane. Every connection has one multishot receive armed (its bytes arrive in the
//! ring's provided buffers and are copied to the connection's read buffer) and at most one
//! send in flight. A turn of the loop reaps every completion, runs the batch of each
//! connection that received (the same [`Core::run_batch`] the epoll loop runs), queues the
//! sends, and hands all of them to the kernel with one `io_uring_enter`. Under load that is
//! one system call per turn for all connections, where the epoll loop makes a read, a write
//! and a read that finds nothing for each batch of each connection.
//!
//! Tokio stays because the control plane is built on it (watch channels, timers, the
//! replication and cluster tasks that share the worker), and because it makes the handoff
//! simple: the ring's completions signal an eventfd that the runtime waits on with the rest.
//!
//! What this loop does not carry goes on in the epoll loop ([`conn::resume`]) with the
//! connection's [`Core`] as it stands (its unexecuted bytes, its owed replies): a connection
//! that blocks (WAIT), subscribes, or hands its socket to replication (PSYNC). TLS clients
//! never come here.
//!
//! Invariant: a slot's `sending` buffer is touched only while no send is in flight, and a
//! slot is freed only when none of its operations is.

mod ring;

use std::collections::VecDeque;
use std::mem;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

pub use ring::DENY_ENV;
use ring::{Done, Op, Ring};

use crate::conn::{self, Close, Core};
use crate::shared::Shared;
use crate::wire::{StdStream, Stream};

/// How often an idle loop looks for clients killed (CLIENT KILL, ACL DELUSER; a busy one
/// looks every turn) or idle too long.
const SWEEP_EVERY: Duration = Duration::from_millis(10);
/// Turns run back to back while completions keep coming, before the loop lets the thread's
/// other tasks run.
const TURNS_BEFORE_YIELD: u32 = 64;

/// Whether io_uring can be had here: `Err` says why not.
pub fn probe() -> std::io::Result<()> {
    ring::setup().map(drop)
}

/// The accept loop's way to hand a plain client (TCP or Unix) to this thread's ring loop.
pub type Accepted = mpsc::UnboundedSender<(Stream, SocketAddr)>;

/// How a connection's time in the ring ends.
#[derive(Debug)]
enum End {
    /// Closed, for this reason.
    Close(Close),
    /// Carried on by the epoll loop; `handoff`: PSYNC ran, the socket goes to replication.
    Resume { handoff: bool },
}

/// One connection in the ring.
#[derive(Debug)]
struct Slot {
    stream: StdStream,
    core: Core,
    /// The replies a send in flight reads from; new replies go to `core.out` meanwhile.
    sending: BytesMut,
    recv_busy: bool,
    send_busy: bool,
    /// The cancels asked for the operations in flight.
    recv_cancelled: bool,
    send_cancelled: bool,
    end: Option<End>,
}

/// One worker's ring loop and its connections.
#[derive(Debug)]
pub struct Loop {
    ring: Ring,
    shared: Arc<Shared>,
    thread: usize,
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    live: usize,
    done: VecDeque<Done>,
    /// Connections handed back to the epoll loop, drained at shutdown as the accept loop's.
    resumed: JoinSet<()>,
    kills_seen: u64,
    last_idle_sweep: Instant,
}

impl Loop {
    /// This thread's loop, or why io_uring cannot be had (call inside the thread's runtime).
    pub fn new(shared: Arc<Shared>, thread: usize) -> std::io::Result<Loop> {
        Ok(Loop {
            ring: Ring::new()?,
            kills_seen: shared.clients.kills(),
            shared,
            thread,
            slots: Vec::new(),
            free: Vec::new(),
            live: 0,
            done: VecDeque::new(),
            resumed: JoinSet::new(),
            last_idle_sweep: Instant::now(),
        })
    }

    /// Runs until shutdown has closed or handed back every connection (or `drain` has passed).
    pub async fn run(
        mut self,
        mut accepted: mpsc::UnboundedReceiver<(Stream, SocketAddr)>,
        drain: Duration,
    ) {
        let mut shutdown = self.shared.shutdown_signal();
        let mut sweep = tokio::time::interval(SWEEP_EVERY);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut stop_by: Option<Instant> = None;
        let mut turns = 0u32;
        loop {
            self.turn();
            if stop_by.is_some() && self.live == 0 && self.resumed.is_empty() {
                break;
            }
            turns += 1;
            if self.ring.has_work() {
                if turns < TURNS_BEFORE_YIELD {
                    continue;
                }
                tokio::task::yield_now().await;
            }
            turns = 0;
            // The ring last: under load it always has work, and new clients, the sweep and
            // shutdown must still get their turn.
            tokio::select! {
                biased;
                _ = shutdown.wait_for(|stop| *stop), if stop_by.is_none() => {
                    stop_by = Some(self.stop(drain));
                }
                conn = accepted.recv(), if stop_by.is_none() => match conn {
                    Some((stream, peer)) => self.add(stream, peer),
                    None => stop_by = Some(self.stop(drain)),
                },
                _ = sweep.tick() => self.sweep(stop_by),
                Some(_) = self.resumed.join_next(), if !self.resumed.is_empty() => {}
                _ = self.ring.completed() => {}
            }
        }
    }

    /// One turn: every completion handled, every operation it calls for submitted at once.
    fn turn(&mut self) {
        // Before any request: a client killed by a reply another client has read runs
        // nothing more.
        self.sweep_kills();
        self.ring.reap(&mut self.done);
        while let Some(done) = self.done.pop_front() {
            self.complete(done);
        }
        self.ring.submit();
    }

    /// A new client: registered with its session, and its first receive queued.
    fn add(&mut self, stream: Stream, peer: SocketAddr) {
        let core = Core::open(&stream, peer, self.shared.clone(), self.thread);
        // Blocking, as io_uring wants it: on a non-blocking socket a send the socket cannot
        // take yet fails with EAGAIN instead of waiting in the ring for room.
        let stream = match stream
            .into_std()
            .and_then(|s| s.set_nonblocking(false).map(|()| s))
        {
            Ok(stream) => stream,
            Err(e) => {
                let peer = core.client.addr_text();
                sluice_log::log(&format!("io_uring: cannot take client {peer} over: {e}"));
                conn::closed(&self.shared, &core.client, Close::Quietly);
                return;
            }
        };
        let slot = Slot {
            stream,
            core,
            sending: BytesMut::new(),
            recv_busy: false,
            send_busy: false,
            recv_cancelled: false,
            send_cancelled: false,
            end: None,
        };
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        self.slots[index] = Some(slot);
        self.live += 1;
        self.next_ops(index);
    }

    fn complete(&mut self, done: Done) {
        let Some(slot) = self.slots.get_mut(done.slot).and_then(Option::as_mut) else {
            return;
        };
        match done.op {
            Op::Cancel => return,
            Op::Recv => {
                if !done.more {
                    slot.recv_busy = false;
                    slot.recv_cancelled = false;
                }
                if done.result > 0 {
                    // A connection that reads no more (a framing error, QUIT, a close) keeps
                    // nothing that arrives before its receive is cancelled: a client cannot
                    // make it hold input it will never parse.
                    let keep = !slot.core.closing && !matches!(slot.end, Some(End::Close(_)));
                    let rbuf = &mut slot.core.rbuf;
                    self.ring.received(&done, |bytes| {
                        if keep {
                            rbuf.extend_from_slice(bytes);
                        }
                    });
                    slot.core.pending = true;
                    if slot.end.is_none() {
                        // Killed by a batch earlier in this turn: its own requests do not run.
                        slot.end = if slot.core.client.killed() {
                            Some(End::Close(Close::Quietly))
                        } else {
                            run(slot).err()
                        };
                    }
                } else if done.result == -libc::ENOBUFS {
                    // Every provided buffer was taken this turn: armed again below, by when
                    // this turn has given them back.
                } else if done.result != -libc::ECANCELED {
                    // The end of the stream, or a failed socket.
                    slot.end.get_or_insert(End::Close(Close::Quietly));
                }
            }
            Op::Send => {
                slot.send_busy = false;
                slot.send_cancelled = false;
                match usize::try_from(done.result) {
                    Ok(n) => slot.sending.advance(n.min(slot.sending.len())),
                    // Cancelled before it sent anything: the replies are still owed.
                    Err(_) if done.result == -libc::ECANCELED => {}
                    Err(_) => {
                        slot.sending.clear();
                        slot.core.out.clear();
                        slot.end.get_or_insert(End::Close(Close::Quietly));
                    }
                }
            }
        }
        self.next_ops(done.slot);
    }

    /// Queues what the slot needs next: a send of its owed replies, its next receive (or the
    /// cancel of the one in flight when it stops reading), and once it ends, the cancel of
    /// what is in flight (a send to a client that does not read would never complete) and
    /// its end once nothing is.
    fn next_ops(&mut self, index: usize) {
        let Some(slot) = self.slots[index].as_mut() else {
            return;
        };
        let fd = slot.stream.as_raw_fd();
        if !slot.send_busy && slot.end.is_none() {
            if slot.sending.is_empty() {
                mem::swap(&mut slot.sending, &mut slot.core.out);
            }
            if !slot.sending.is_empty() {
                slot.send_busy = true;
                // SAFETY: `sending` is neither touched nor freed until this send completes
                // (`complete`): `send_busy` is set, and the slot that owns it is freed only
                // when none of its operations is in flight (module invariant).
                unsafe {
                    self.ring
                        .send(index, fd, slot.sending.as_ptr(), slot.sending.len())
                };
            }
        }
        let owes = slot.send_busy || !slot.core.out.is_empty();
        if slot.core.closing && slot.end.is_none() && !owes {
            // QUIT, a framing error, shutdown: the owed replies are out, so it closes.
            slot.end = Some(End::Close(Close::Quietly));
        }
        let reading = slot.end.is_none() && !slot.core.closing;
        if reading && !slot.recv_busy {
            slot.recv_busy = true;
            self.ring.recv(index, fd);
        } else if !reading && slot.recv_busy && !slot.recv_cancelled {
            slot.recv_cancelled = true;
            self.ring.cancel(index, Op::Recv);
        }
        if slot.end.is_some() && slot.send_busy && !slot.send_cancelled {
            slot.send_cancelled = true;
            self.ring.cancel(index, Op::Send);
        }
        if slot.end.is_some() && !slot.recv_busy && !slot.send_busy {
            self.finish(index);
        }
    }

    /// The slot's end, with nothing of it in flight: closed, or carried on by the epoll loop.
    fn finish(&mut self, index: usize) {
        let Some(mut slot) = self.slots[index].take() else {
            return;
        };
        self.free.push(index);
        self.live -= 1;
        match slot.end {
            Some(End::Resume { handoff }) => {
                if !slot.sending.is_empty() {
                    slot.sending.extend_from_slice(&slot.core.out);
                    slot.core.out = mem::take(&mut slot.sending);
                }
                let peer = slot.core.client.addr_text();
                let stream = slot.stream;
                match stream
                    .set_nonblocking(true)
                    .and_then(|()| Stream::from_std(stream))
                {
                    Ok(stream) => {
                        self.resumed.spawn(conn::resume(stream, slot.core, handoff));
                    }
                    Err(e) => {
                        sluice_log::log(&format!("io_uring: cannot hand client {peer} back: {e}"));
                        conn::closed(&self.shared, &slot.core.client, Close::Quietly);
                    }
                }
            }
            Some(End::Close(why)) => {
                // FIN after the last reply, so the client reads it before seeing the close.
                let _ = slot.stream.shutdown(std::net::Shutdown::Write);
                conn::closed(&self.shared, &slot.core.client, why);
            }
            None => unreachable!("finish is called for a slot that ends"),
        }
    }

    /// Shutdown: every connection writes what it owes and closes. Returns the drain deadline.
    fn stop(&mut self, drain: Duration) -> Instant {
        for index in 0..self.slots.len() {
            if let Some(slot) = self.slots[index].as_mut() {
                slot.core.closing = true;
                self.next_ops(index);
            }
        }
        Instant::now() + drain
    }

    /// Closes the clients killed since the last sweep or idle past the timeout; past the
    /// drain deadline, every connection left.
    fn sweep(&mut self, stop_by: Option<Instant>) {
        let now = Instant::now();
        if let Some(deadline) = stop_by
            && now >= deadline
        {
            self.resumed.abort_all();
            self.end_where(|slot| {
                // Wakes its operations in flight, so the slot can go.
                let _ = slot.stream.shutdown(std::net::Shutdown::Both);
                Some(Close::Quietly)
            });
            return;
        }
        self.sweep_kills();
        if now.duration_since(self.last_idle_sweep) >= Duration::from_millis(100) {
            self.last_idle_sweep = now;
            let shared = self.shared.clone();
            let now = now.into_std();
            self.end_where(|slot| {
                let deadline = shared.idle_deadline(slot.core.last_active.into_std())?;
                (now >= deadline).then_some(Close::Idle)
            });
        }
    }

    /// Closes the clients killed (CLIENT KILL, ACL DELUSER) since the last look: one atomic
    /// load when none was.
    fn sweep_kills(&mut self) {
        let kills = self.shared.clients.kills();
        if kills != self.kills_seen {
            self.kills_seen = kills;
            self.end_where(|slot| slot.core.client.killed().then_some(Close::Quietly));
        }
    }

    /// Ends every slot that `why` gives a reason to close.
    fn end_where(&mut self, mut why: impl FnMut(&Slot) -> Option<Close>) {
        for index in 0..self.slots.len() {
            let Some(slot) = self.slots[index].as_mut() else {
                continue;
            };
            if slot.end.is_none()
                && let Some(why) = why(slot)
            {
                slot.end = Some(End::Close(why));
                self.next_ops(index);
            }
        }
    }
}

/// Runs the slot's batch as the epoll loop does; `Err` says how its time in the ring ends.
fn run(slot: &mut Slot) -> Result<(), End> {
    let core = &mut slot.core;
    if !core.pending || core.closing || core.session.blocked.is_some() {
        return Ok(());
    }
    core.pending = false;
    // Held while the batch runs (a PSYNC takes it again in the epoll loop for its owed replies);
    // the shared state is cloned for it in cluster mode only, so a batch costs no shared count.
    let shared = core.shared.cluster.is_some().then(|| core.shared.clone());
    let batch = shared
        .as_ref()
        .and_then(|s| s.cluster.as_ref())
        .map(|c| c.batch(core.thread));
    match core.run_batch() {
        Ok(ran) => {
            drop(batch);
            core.account(ran);
        }
        Err(Close::HandOff) => return Err(End::Resume { handoff: true }),
        Err(why) => return Err(End::Close(why)),
    }
    if core.session.blocked.is_some() || core.session.subs.is_some() {
        return Err(End::Resume { handoff: false });
    }
    core.check_limits(core.out.len() + slot.sending.len())
        .map_err(End::Close)
}
