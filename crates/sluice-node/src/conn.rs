//! One connection: read, decode every complete request, execute each, write once.
//!
//! The loop reads into a `BytesMut`, hands the parser the whole buffer, and executes every
//! complete request in it (pipelining) before writing all their replies with one write.
//! Requests borrow their arguments from the read buffer (zero-copy); the clock is read once per
//! batch for the commands' `now`, and once more at its end for the command statistics. A framing error gets Redis's `-ERR Protocol error: ...` and closes this connection
//! only; a bad argument is an error reply and the connection goes on.
//!
//! Reading and writing are independent: replies that the socket cannot take yet stay in the
//! output buffer while the loop keeps reading, as Redis does. So the two memory bounds are
//! enforced where they grow: unparsed input past `client-query-buffer-limit`, or unsent output
//! past `client-output-buffer-limit` (a client that never reads), closes that client alone.
//! As in Redis, a MULTI queue's bytes count as input, and a client that must authenticate and
//! has not may hold 1 MiB of it at most, in requests of 10 arguments of 16 KB at most (the
//! parser's limits before AUTH, see [`Core::run_batch`]).
//!
//! [`Core`] is the part of a connection that does no I/O: its session, buffers and parser, and
//! the batch that parses and executes. This loop (tokio, readiness) and the io_uring loop
//! (the `uring` module) both drive one; a connection the io_uring loop does not carry further
//! (WAIT, SUBSCRIBE, PSYNC) goes on here with its [`Core`] as it was ([`resume`]).

use sluice_store::Ahead;
use std::io::ErrorKind::WouldBlock;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use sluice_resp::{Parser, Request, RequestRef};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::clients::ClientHandle;
use crate::cmd::{self, Ctx, Session};
use crate::repl::{Handoff, Job};
use crate::shared::Shared;
use crate::wire::{Stream, Wire};

/// Read buffer growth step; a pipelined batch of small commands fits in one.
const READ_CHUNK: usize = 16 * 1024;

/// Why a connection ended, for the log lines that matter to an operator.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Close {
    Quietly,
    QueryBufferLimit,
    OutputBufferLimit,
    Idle,
    /// PSYNC: the socket goes on, on the replication thread.
    HandOff,
}

/// A plain connection: TCP (from `peer`), or the Unix socket (`peer` is unspecified).
pub async fn serve(stream: Stream, peer: SocketAddr, shared: Arc<Shared>, thread: usize) {
    serve_wire(stream, peer, shared, thread, Wire::Plain).await;
}

/// A connection on the TLS port: the same loop, with rustls between the socket and the parser.
pub async fn serve_tls(
    stream: TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared>,
    thread: usize,
    config: Arc<rustls::ServerConfig>,
) {
    match rustls::ServerConnection::new(config) {
        Ok(tls) => {
            let wire = Wire::Tls(Box::new(tls));
            serve_wire(Stream::Tcp(stream), peer, shared, thread, wire).await;
        }
        Err(e) => sluice_log::log(&format!("TLS: cannot start a session for {peer}: {e}")),
    }
}

async fn serve_wire(
    stream: Stream,
    peer: SocketAddr,
    shared: Arc<Shared>,
    thread: usize,
    wire: Wire,
) {
    let mut core = Core::open(&stream, peer, shared, thread);
    core.session.tls = !matches!(wire, Wire::Plain);
    drive(stream, wire, core, false).await;
}

/// Carries on a connection the io_uring loop started, on this loop: `core` as that loop left
/// it (unexecuted requests in its read buffer, replies owed in its output buffer), and
/// `handoff` if a PSYNC in its last batch hands the socket to the replication thread once the
/// owed replies are written.
pub(crate) async fn resume(stream: Stream, core: Core, handoff: bool) {
    drive(stream, Wire::Plain, core, handoff).await;
}

/// Runs the connection to its end, then closes it (or hands a replica over).
async fn drive(stream: Stream, mut wire: Wire, mut core: Core, handoff: bool) {
    let why = if handoff {
        // As in the batch that ran PSYNC: held until its owed replies are written.
        let shared = core.shared.clone();
        let _batch = shared.cluster.as_ref().map(|c| c.batch(core.thread));
        let mut conn = Conn::new(&stream, &mut wire, &mut core);
        conn.write_all().await.err().unwrap_or(Close::HandOff)
    } else {
        serve_session(&stream, &mut wire, &mut core).await
    };
    let (shared, client) = (core.shared.clone(), core.client.clone());
    let mut session = core.session;
    cmd::pubsub::clear(&shared, &mut session.subs, client.id);
    if why == Close::HandOff
        && let Some(request) = session.handoff.take()
    {
        client.set_kind(crate::clients::ClientKind::Replica);
        // The replication thread feeds a plain TCP socket: anything else goes through a relay.
        let stream = match (wire, stream) {
            (Wire::Plain, Stream::Tcp(stream)) => Ok(stream),
            (wire, stream) => wire.relay(stream).await,
        };
        match stream.and_then(TcpStream::into_std) {
            Ok(stream) => shared.repl.submit(Job::Feed(Handoff { stream, request })),
            Err(e) => {
                sluice_log::log(&format!(
                    "cannot hand replica {} over: {e}",
                    client.addr_text()
                ));
                shared.clients.unregister(client.id);
            }
        }
        return;
    }
    // FIN after the last reply, so the client reads it before seeing the close.
    wire.close(&stream);
    let _ = socket2::SockRef::from(&stream).shutdown(std::net::Shutdown::Write);
    closed(&shared, &client, why);
}

/// The log line a close that matters to an operator gets, and the client's unregistering.
pub(crate) fn closed(shared: &Shared, client: &ClientHandle, why: Close) {
    let (peer, id) = (client.addr_text(), client.id);
    match why {
        Close::Quietly => {}
        Close::QueryBufferLimit => sluice_log::log(&format!(
            "closing client {peer} (id={id}) that reached the query buffer limit"
        )),
        Close::OutputBufferLimit => sluice_log::log(&format!(
            "closing client {peer} (id={id}) that reached the output buffer limit (it does not read its replies)"
        )),
        Close::Idle | Close::HandOff => {}
    }
    shared.clients.unregister(id);
}

async fn serve_session(stream: &Stream, wire: &mut Wire, core: &mut Core) -> Close {
    let shared = core.shared.clone();
    let thread = core.thread;
    let mut conn = Conn::new(stream, wire, core);
    loop {
        if conn.pending && conn.session.blocked.is_none() && !conn.closing {
            conn.pending = false;
            // Held while the batch runs, and on PSYNC until its owed replies are written.
            let batch = shared.cluster.as_ref().map(|c| c.batch(thread));
            match conn.run_batch() {
                Ok(ran) => {
                    drop(batch);
                    conn.account(ran);
                }
                Err(Close::HandOff) => {
                    return match conn.write_all().await {
                        Ok(()) => Close::HandOff,
                        Err(why) => why,
                    };
                }
                Err(why) => return why,
            }
        }
        if let Err(why) = conn.flush() {
            return why;
        }
        if let Err(why) = conn.wait().await {
            return why;
        }
    }
}

/// The tokio loop's hold on a connection: its socket, its wire and the signals it waits on,
/// around the connection's [`Core`].
struct Conn<'s> {
    stream: &'s Stream,
    wire: &'s mut Wire,
    core: &'s mut Core,
    shutdown: watch::Receiver<bool>,
    acks: watch::Receiver<u64>,
}

impl std::ops::Deref for Conn<'_> {
    type Target = Core;

    fn deref(&self) -> &Core {
        self.core
    }
}

impl std::ops::DerefMut for Conn<'_> {
    fn deref_mut(&mut self) -> &mut Core {
        self.core
    }
}

/// Where the batch's last request is, for SLOWLOG ([`Core::last_request`]).
#[derive(Clone, Copy, Debug)]
enum Last {
    /// No request ran yet.
    None,
    /// Read in place: its frame at this offset and length in the read buffer, its argument
    /// offsets in `Core::args`.
    InPlace(usize, usize),
    /// In the parser's request, which keeps it until `parse_into` reads a whole frame.
    Parsed,
}

/// Argument offsets a connection keeps room for between batches, for frames read in place: one
/// frame of a million arguments should not pin its 16 MB for the connection's life.
const KEPT_ARGS: usize = 1024;

/// One connection's state apart from its socket: its session, buffers, parser and where it
/// stands. Whichever loop drives the socket runs its batches ([`Core::run_batch`]).
#[derive(Debug)]
pub(crate) struct Core {
    pub(crate) shared: Arc<Shared>,
    pub(crate) session: Session,
    pub(crate) thread: usize,
    pub(crate) client: Arc<ClientHandle>,
    parser: Parser,
    /// Reused for every request: parsing fills it in place.
    request: Request,
    /// The argument offsets of the request read in place last ([`Parser::parse_in_place`]),
    /// and the vector the next one is read into.
    args: Vec<(usize, usize)>,
    spare: Vec<(usize, usize)>,
    pub(crate) rbuf: BytesMut,
    pub(crate) out: BytesMut,
    query_limit: usize,
    output_limit: usize,
    /// Once set, read nothing more: flush what is owed, then close.
    pub(crate) closing: bool,
    pub(crate) last_active: Instant,
    /// Requests in `rbuf` wait while the connection is blocked (WAIT) and run when it wakes.
    pub(crate) pending: bool,
}

/// What a batch did, for [`Core::account`].
pub(crate) struct Ran {
    executed: u64,
    read_at: std::time::Instant,
    /// The batch's time, when its end was read already (see [`Core::batch_done`]).
    elapsed: Option<Duration>,
}

impl<'s> Conn<'s> {
    fn new(stream: &'s Stream, wire: &'s mut Wire, core: &'s mut Core) -> Conn<'s> {
        Conn {
            stream,
            wire,
            shutdown: core.shared.shutdown_signal(),
            acks: core.shared.repl.acks(),
            core,
        }
    }
}

impl Core {
    /// A new client on `stream`: its socket options, its registration and its session.
    pub(crate) fn open(
        stream: &Stream,
        peer: SocketAddr,
        shared: Arc<Shared>,
        thread: usize,
    ) -> Core {
        shared.stats.connections_received.fetch_add(1, Relaxed);
        let client = match stream {
            Stream::Tcp(tcp) => {
                let _ = tcp.set_nodelay(true);
                let keepalive = crate::live::Live::get(&shared.live.tcp_keepalive);
                if keepalive > 0 {
                    let ka = socket2::TcpKeepalive::new().with_time(Duration::from_secs(keepalive));
                    let _ = socket2::SockRef::from(tcp).set_tcp_keepalive(&ka);
                }
                let laddr = tcp.local_addr().unwrap_or(shared.local_addr);
                shared.clients.register(peer, laddr)
            }
            Stream::Unix(_) => {
                let path = shared.config.unixsocket.as_deref().unwrap_or(Path::new(""));
                shared.clients.register_unix(path.to_string_lossy().into())
            }
        };
        client
            .fd
            .store(std::os::fd::AsRawFd::as_raw_fd(stream), Relaxed);
        let mut session = Session::new(client.clone(), shared.acl.default_user());
        session.thread = thread;
        let limit = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        let mut parser = Parser::new(shared.config.limits());
        parser.set_unauthenticated(!session.authenticated);
        Core {
            parser,
            request: Request::default(),
            args: Vec::new(),
            spare: Vec::new(),
            rbuf: BytesMut::with_capacity(READ_CHUNK),
            out: BytesMut::with_capacity(READ_CHUNK),
            query_limit: limit(shared.config.client_query_buffer_limit),
            output_limit: limit(shared.config.client_output_buffer_limit),
            closing: false,
            last_active: Instant::now(),
            pending: false,
            shared,
            session,
            thread,
            client,
        }
    }

    /// Executes every complete request in `rbuf`, appending the replies to `out`. Stops early
    /// at a framing error, QUIT, a blocking command, or PSYNC (`Err(HandOff)`, with the stats
    /// charged and the owed replies still to write); `Err` ends the connection.
    ///
    /// The parser's limits before AUTH follow the session: set at each batch's start, and
    /// lifted by the request that authenticates, so the next request of the same batch may be
    /// large. An authenticated client pays one test of a flag the parser holds per request.
    /// (A RESET back to a user with a password brings them back from the next batch.)
    pub(crate) fn run_batch(&mut self) -> Result<Ran, Close> {
        if self.parser.unauthenticated() == self.session.authenticated {
            self.parser.set_unauthenticated(!self.session.authenticated);
        }
        // One clock read per batch serves the idle timer, the client's `idle=` and the
        // commands' `now`.
        let read_at = std::time::Instant::now();
        self.last_active = Instant::from_std(read_at);
        let now = self.shared.clock.at(read_at);
        let mut executed = 0u64;
        let mut elapsed = None;
        // Whole ordinary frames run where they lie in `rbuf` (`Parser::parse_in_place`): the
        // first `taken` bytes have run and leave the buffer when the batch stops reading it.
        // Anything else goes through `parse_into`, from the buffer's front.
        let mut taken = 0;
        let mut last = Last::None;
        // Once the tables outgrow the cache, each request's key is prefetched one request
        // ahead: its table lines load while the request before it runs.
        let prefetch = self.shared.store.prefetching();
        let mut next = Ahead::NONE;
        if prefetch {
            next = self.prefetch_next(0);
        }
        loop {
            self.spare.clear();
            let request = match self
                .parser
                .parse_in_place(&self.rbuf[taken..], &mut self.spare)
            {
                Some(len) => {
                    // Read into `spare`, so that an attempt that fails leaves `args`, the
                    // last request's (which SLOWLOG may name), whole; swapped on success.
                    std::mem::swap(&mut self.args, &mut self.spare);
                    last = Last::InPlace(taken, len);
                    taken += len;
                    RequestRef::in_place(&self.rbuf[taken - len..taken], &self.args)
                }
                None if taken > 0 && taken == self.rbuf.len() => {
                    // Every byte read ran in place: the batch is over.
                    elapsed = self.batch_done(read_at, executed, last);
                    break;
                }
                None => {
                    if taken > 0 {
                        // Bytes that are not a whole ordinary frame follow frames read in
                        // place: the last of those is split off into the parser's request
                        // (one reference count, no copy) before the buffer moves past it, so
                        // SLOWLOG can still name it.
                        if let Last::InPlace(at, len) = last {
                            debug_assert_eq!(at + len, taken, "the last frame read in place");
                            self.rbuf.advance(at);
                            let frame = self.rbuf.split_to(len).freeze();
                            self.request.set_frame(frame, &self.args);
                            last = Last::Parsed;
                        } else {
                            self.rbuf.advance(taken);
                        }
                        taken = 0;
                    }
                    match self.parser.parse_into(&mut self.rbuf, &mut self.request) {
                        Ok(true) => {
                            last = Last::Parsed;
                            self.request.view()
                        }
                        Ok(false) => {
                            elapsed = self.batch_done(read_at, executed, last);
                            break;
                        }
                        Err(e) => {
                            e.write_reply(&mut self.out);
                            self.closing = true;
                            break;
                        }
                    }
                }
            };
            // The hash taken of this request's key (if it was), then the next one's.
            let ahead = next;
            if prefetch {
                next = self.prefetch_next(taken);
            }
            executed += 1;
            let mut ctx = Ctx {
                shared: &self.shared,
                session: &mut self.session,
                out: &mut self.out,
                now,
                ahead,
            };
            // At `slowlog-log-slower-than 0` every command is logged on its own, with its own
            // time, as it ends (as Redis logs; a CONFIG SET earlier in the batch counts): a
            // SLOWLOG later in the same pipeline sees it. Otherwise a batch is timed once, and
            // logged as one entry when its average is slow.
            if self.shared.slowlog.logs_every_command() {
                let started = std::time::Instant::now();
                cmd::execute(request, &mut ctx);
                let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
                self.log_slow(micros, 1, Some(request));
            } else {
                cmd::execute(request, &mut ctx);
            }
            if self.parser.unauthenticated() && self.session.authenticated {
                self.parser.set_unauthenticated(false);
            }
            // As Redis, the hard output limit is checked reply by reply: a pipeline of large
            // replies is cut where it crosses it.
            if self.out.len() > self.output_limit {
                return Err(Close::OutputBufferLimit);
            }
            if self.session.close {
                self.closing = true;
                break;
            }
            if self.session.handoff.is_some() {
                // Nothing may follow PSYNC on this socket but what the replication thread
                // writes; replies owed to the commands before it go first.
                self.rbuf.advance(taken);
                self.request.clear();
                let slot = self.shared.stats.slot(self.thread);
                self.session.batch.charge(slot, read_at.elapsed());
                return Err(Close::HandOff);
            }
            if self.session.blocked.is_some() {
                self.pending = true;
                break;
            }
        }
        self.rbuf.advance(taken);
        // Release the last frame so the read buffer is ours alone again and can be reused in
        // place rather than reallocated; and the argument lists of a huge frame read in place.
        self.request.clear();
        if self.args.capacity().max(self.spare.capacity()) > KEPT_ARGS {
            self.args = Vec::new();
            self.spare = Vec::new();
        }
        Ok(Ran {
            executed,
            read_at,
            elapsed,
        })
    }

    /// The batch's last request, for SLOWLOG, where it is: in the read buffer, or in the
    /// parser's request.
    fn last_request(&self, last: Last) -> Option<RequestRef<'_>> {
        match last {
            Last::InPlace(at, len) => {
                Some(RequestRef::in_place(&self.rbuf[at..at + len], &self.args))
            }
            Last::Parsed => Some(self.request.view()),
            Last::None => None,
        }
    }

    /// Starts loading the table lines of the key of the request buffered at `from`, if it is
    /// an RL.CHECK whose header has arrived (the check is the request that comes by the
    /// million; only it takes the hash computed here, [`Ctx::ahead`]).
    #[inline]
    fn prefetch_next(&self, from: usize) -> Ahead {
        match sluice_resp::Parser::peek_key(&self.rbuf[from..], b"RL.CHECK") {
            Some(key) => self.shared.store.prefetch(key),
            None => Ahead::NONE,
        }
    }

    /// The batch ran every whole request it read: its one end-of-batch clock read, which the
    /// statistics use too, and SLOWLOG's entry (naming the `last` request) if the batch was
    /// slow. `None` when it ran nothing, or when every command was timed and logged on its own
    /// (`slowlog-log-slower-than 0`). A batch that stops early (QUIT, WAIT) is timed in
    /// [`Core::account`] and not looked at by SLOWLOG.
    fn batch_done(
        &self,
        read_at: std::time::Instant,
        executed: u64,
        last: Last,
    ) -> Option<Duration> {
        if executed == 0 || self.shared.slowlog.logs_every_command() {
            return None;
        }
        let elapsed = read_at.elapsed();
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        if self.shared.slowlog.is_slow(nanos / executed) {
            self.log_slow(nanos / executed / 1000, executed, self.last_request(last));
        }
        Some(elapsed)
    }

    /// Logs the last command that ran (`last`), or the batch of `executed` commands it ended,
    /// as taking `micros` each.
    #[cold]
    fn log_slow(&self, micros: u64, executed: u64, last: Option<RequestRef<'_>>) {
        let at_unix_secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let name = self.client.name.lock().clone().unwrap_or_default();
        let args = last.map_or_else(Vec::new, |request| {
            crate::slowlog::entry_args(request.args())
        });
        self.shared.slowlog.push(crate::slowlog::Entry {
            id: 0,
            at_unix_secs,
            micros,
            args,
            client_addr: self.client.addr_text(),
            client_name: if executed > 1 {
                format!("{name} pipelined={executed}")
            } else {
                name
            },
        });
    }

    /// A batch's statistics: the command count, the batch's one clock read for the command
    /// statistics, and the client's last activity.
    pub(crate) fn account(&mut self, ran: Ran) {
        self.shared.stats.add_commands(self.thread, ran.executed);
        if !self.session.batch.is_empty() {
            let slot = self.shared.stats.slot(self.thread);
            let elapsed = ran.elapsed.unwrap_or_else(|| ran.read_at.elapsed());
            self.session.batch.charge(slot, elapsed);
        }
        self.client
            .buffers
            .store(self.rbuf.len(), self.rbuf.capacity(), self.out.len());
        if ran.executed > 0 {
            let since_created = ran.read_at.saturating_duration_since(self.client.created);
            self.client
                .last_active_ms
                .store(since_created.as_millis() as u64, Relaxed);
        }
    }

    /// The two memory bounds, where they grow: input (unparsed bytes and the MULTI queue, as
    /// Redis counts it) past the query buffer limit (1 MiB before AUTH), unsent replies
    /// (`unsent`, the output buffer and what is on its way) past the output buffer limit.
    pub(crate) fn check_limits(&self, unsent: usize) -> Result<(), Close> {
        if unsent > self.output_limit {
            return Err(Close::OutputBufferLimit);
        }
        let queued = self.session.transaction.as_ref().map_or(0, |tx| tx.bytes);
        let limit = self.parser.query_limit(self.query_limit);
        if self.rbuf.len().saturating_add(queued) > limit {
            return Err(Close::QueryBufferLimit);
        }
        Ok(())
    }

    /// Room for the next read: a quarter chunk free at least.
    pub(crate) fn reserve_read(&mut self) {
        if self.rbuf.capacity() - self.rbuf.len() < READ_CHUNK / 4 {
            self.rbuf.reserve(READ_CHUNK);
        }
    }
}

impl Conn<'_> {
    /// Writes all of `out`, waiting for the socket as long as it takes; `Err(Quietly)` if the
    /// socket fails.
    async fn write_all(&mut self) -> Result<(), Close> {
        while !self.out.is_empty() || self.wire.pending() {
            if self.stream.writable().await.is_err() {
                return Err(Close::Quietly);
            }
            match self.wire.send(self.stream, &self.core.out) {
                Ok(n) => self.out.advance(n),
                Err(e) if e.kind() == WouldBlock => {}
                Err(_) => return Err(Close::Quietly),
            }
        }
        Ok(())
    }

    /// Queues the pub/sub messages waiting, writes what the socket takes now, and checks both
    /// buffers against their limits; `Err` ends the connection.
    fn flush(&mut self) -> Result<(), Close> {
        let core = &mut *self.core;
        if let Some(subs) = core.session.subs.as_mut() {
            while let Ok(msg) = subs.rx.try_recv() {
                msg.write(&mut core.out, core.session.proto);
            }
        }
        if !self.out.is_empty() {
            match self.wire.send(self.stream, &self.core.out) {
                Ok(n) => self.out.advance(n),
                Err(e) if e.kind() == WouldBlock => {}
                Err(_) => return Err(Close::Quietly),
            }
        } else if self.wire.flush(self.stream).is_err() {
            return Err(Close::Quietly);
        }
        if self.out.len() > self.output_limit {
            return Err(Close::OutputBufferLimit);
        }
        if self.closing && self.out.is_empty() && !self.wire.pending() {
            return Err(Close::Quietly);
        }
        self.check_limits(self.out.len())?;
        self.reserve_read();
        Ok(())
    }

    /// Waits for the next thing to do: input, room to write, a WAIT's ack or timeout, a
    /// published message, shutdown, a kill or the idle timeout; `Err` ends the connection.
    async fn wait(&mut self) -> Result<(), Close> {
        let idle_deadline = self
            .shared
            .idle_deadline(self.last_active.into_std())
            .filter(|_| self.session.blocked.is_none())
            .map(Instant::from_std);
        let blocked = self.session.blocked;
        if blocked.is_some() != self.client.blocked.load(Relaxed) {
            self.client.blocked.store(blocked.is_some(), Relaxed);
        }
        let wait_deadline = blocked
            .and_then(|b| b.deadline)
            .map(Instant::from_std)
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
        let subscribed = self.session.subs.is_some();
        let Conn {
            stream,
            wire,
            core,
            shutdown,
            acks,
        } = self;
        let Core {
            shared,
            session,
            client,
            rbuf,
            out,
            closing,
            last_active,
            pending,
            ..
        } = &mut **core;
        tokio::select! {
            biased;
            _ = client.kill.notified() => return Err(Close::Quietly),
            _ = shutdown.wait_for(|stop| *stop), if !*closing => *closing = true,
            ready = stream.writable(), if !out.is_empty() || wire.pending() => {
                if ready.is_err() {
                    return Err(Close::Quietly);
                }
            }
            // WAIT: every ack may be the one it waits for; time may run out.
            _ = acks.changed(), if blocked.is_some() => {
                let b = blocked.expect("guarded");
                let acked = shared.repl.acked(b.offset);
                if acked >= b.numreplicas {
                    sluice_resp::reply::integer(out, acked as i64);
                    session.blocked = None;
                }
            }
            _ = tokio::time::sleep_until(wait_deadline), if blocked.is_some_and(|b| b.deadline.is_some()) => {
                let b = blocked.expect("guarded");
                sluice_resp::reply::integer(out, shared.repl.acked(b.offset) as i64);
                session.blocked = None;
            }
            msg = async { session.subs.as_mut().expect("guarded").rx.recv().await }, if subscribed => {
                if let Some(msg) = msg {
                    msg.write(out, session.proto);
                }
            }
            ready = stream.readable(), if !*closing => {
                if ready.is_err() {
                    return Err(Close::Quietly);
                }
                match wire.read(stream, rbuf) {
                    Ok(0) => return Err(Close::Quietly),
                    Ok(_) => *pending = true,
                    Err(e) if e.kind() == WouldBlock => {}
                    Err(_) => return Err(Close::Quietly),
                }
            }
            _ = tokio::time::sleep_until(idle_deadline.unwrap_or(*last_active)), if idle_deadline.is_some() && !*closing => {
                return Err(Close::Idle);
            }
        }
        Ok(())
    }
}
