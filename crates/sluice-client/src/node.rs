//! One node: a multiplexed, pipelined connection and its circuit breaker.
//!
//! Every caller's request goes through one channel to the node's connection task. The task
//! writes whatever is queued in one `write`, and the reader hands replies out in FIFO order to
//! the callers' oneshot channels: RESP answers in request order, so the n-th reply belongs to the
//! n-th request written. A caller that gave up (its deadline passed) just drops its receiver; its
//! reply is still read and discarded, which keeps the order.
//!
//! # Faults
//! - Refused connect, reset, EOF (a half-open socket closed by the peer): everything in flight
//!   fails at once with [`CallError::Down`]; reconnect after a backoff that doubles from
//!   `backoff_min` to `backoff_max`. While disconnected, new requests fail at once.
//! - Garbage on the wire: everything in flight fails with [`CallError::Garbage`] and the
//!   connection is dropped (the stream cannot be resynchronised).
//! - A node that accepts but never answers: callers time out on their own deadlines; once the
//!   oldest request has waited `stall` with no byte read, the connection is dropped and redialled.
//!
//! # Breaker
//! Closed: calls go through; `failures` consecutive failures open it. Open: calls fail at once
//! with [`CallError::Open`] (no socket work, so a dead node costs nothing per check) until
//! `cooldown` has passed. Half-open: one probe call goes through; success closes the breaker,
//! failure opens it for another `cooldown`. A probe whose caller vanished is replaced after
//! `cooldown`.
//!
//! # Reachability
//! The connection task dials as soon as the node is made and keeps redialling while it cannot
//! connect, requests or not. Each change between reached and not (the first failed dial
//! included) is logged once, with the reason, and counted ([`Node::went_down`],
//! [`Node::came_back`]): a wrong address or a dead node is said, not only hidden by the fail
//! mode, and a streak of failed dials or calls says it only once.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, sleep, sleep_until, timeout, timeout_at};

use sluice_resp::value::{self, Value};

/// Why a call got no reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallError {
    /// Not connected, or the connection broke with the request in flight.
    Down,
    /// The node sent something that is not RESP.
    Garbage,
    /// The deadline passed first.
    Timeout,
    /// The breaker is open: the call was not attempted.
    Open,
    /// The node answered that it cannot decide now (`READONLY`, `LOADING`, `NOREPLICAS`,
    /// `MASTERDOWN`, `CLUSTERDOWN`): see [`cannot_answer`].
    Unavailable,
}

/// The error replies that mean "this node cannot decide now" rather than "this request is
/// wrong": the rule's fail mode applies to them. `WRONGTYPE`, `ERR` and the rest are the
/// request's own fault and are passed on.
pub fn cannot_answer(error: &str) -> bool {
    let class = error.split(' ').next().unwrap_or_default();
    matches!(
        class,
        "NOREPLICAS" | "READONLY" | "LOADING" | "MASTERDOWN" | "CLUSTERDOWN"
    )
}

/// Who a client logs in as at every node: `AUTH [user] password` is its first command on each
/// new connection (a node with `--requirepass` or ACL users answers nothing else).
#[derive(Clone, Debug)]
pub struct Credentials {
    /// The ACL user; `None` is the `default` user (`AUTH password`).
    pub user: Option<String>,
    pub password: String,
}

impl Credentials {
    fn frame(&self) -> BytesMut {
        let mut out = BytesMut::with_capacity(64);
        match &self.user {
            Some(user) => value::encode_command(
                &mut out,
                &[b"AUTH", user.as_bytes(), self.password.as_bytes()],
            ),
            None => value::encode_command(&mut out, &[b"AUTH", self.password.as_bytes()]),
        }
        out
    }
}

/// A connection to a node: plain TCP, TLS when the client has a TLS config, or a Unix
/// socket (`unix:PATH`).
enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
    Unix(UnixStream),
}

/// The prefix of a node's address that names a Unix socket: `unix:/run/sluice.sock`.
pub const UNIX_PREFIX: &str = "unix:";

/// Sends AUTH and reads its one reply within `limit`; `Err` with the node's words if refused.
async fn login<S>(stream: &mut S, auth: &Credentials, limit: Duration) -> Result<(), String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let exchange = async {
        stream
            .write_all(&auth.frame())
            .await
            .map_err(|e| e.to_string())?;
        let mut buf = BytesMut::with_capacity(256);
        loop {
            if let Some(reply) = value::decode(&mut buf).map_err(|e| e.to_string())? {
                return if reply.is_ok() {
                    Ok(())
                } else {
                    Err(reply.text())
                };
            }
            if stream.read_buf(&mut buf).await.map_err(|e| e.to_string())? == 0 {
                return Err("connection closed during AUTH".into());
            }
        }
    };
    timeout(limit, exchange)
        .await
        .unwrap_or_else(|_| Err("AUTH timed out".into()))
}

/// How a client reaches its nodes safely: TLS, and who it logs in as.
#[derive(Clone, Debug, Default)]
pub struct Secure {
    pub tls: Option<Arc<rustls::ClientConfig>>,
    pub auth: Option<Arc<Credentials>>,
}

/// Connection and breaker settings.
#[derive(Clone, Copy, Debug)]
pub struct NodeOptions {
    pub connect_timeout: Duration,
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// No byte read for this long with requests in flight: the connection is dropped.
    pub stall: Duration,
    /// Consecutive failures that open the breaker.
    pub breaker_failures: u32,
    /// How long an open breaker refuses calls before it lets one probe through.
    pub breaker_cooldown: Duration,
}

impl Default for NodeOptions {
    fn default() -> Self {
        NodeOptions {
            connect_timeout: Duration::from_millis(500),
            backoff_min: Duration::from_millis(10),
            backoff_max: Duration::from_millis(500),
            stall: Duration::from_millis(500),
            breaker_failures: 5,
            breaker_cooldown: Duration::from_millis(100),
        }
    }
}

/// The breaker's state, as INFO and tests see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BreakerState {
    Closed,
    Open,
    HalfOpen,
}

impl BreakerState {
    pub fn name(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half-open",
        }
    }
}

#[derive(Debug)]
enum Breaker {
    Closed { failures: u32 },
    Open { until: Instant },
    HalfOpen { probe_since: Instant },
}

struct Request {
    frame: Bytes,
    reply: Waiter,
}

/// Who gets the reply: one caller gets one decoded value; a batch of `n` commands gets its `n`
/// replies as the bytes they came in (the sidecar forwards them as they are).
enum Waiter {
    One(oneshot::Sender<Result<Value, CallError>>),
    Raw(RawWait),
}

/// A batch's replies as they come: where each found so far ends (scanned once, as bytes arrive).
struct RawWait {
    n: usize,
    ends: Vec<usize>,
    tx: oneshot::Sender<Result<RawBatch, CallError>>,
}

/// A batch's replies: the bytes of all of them, and where each one ends in them.
#[derive(Debug)]
pub struct RawBatch {
    pub bytes: Bytes,
    pub ends: Vec<usize>,
}

impl Waiter {
    fn is_closed(&self) -> bool {
        match self {
            Waiter::One(tx) => tx.is_closed(),
            Waiter::Raw(w) => w.tx.is_closed(),
        }
    }

    fn fail(self, e: CallError) {
        match self {
            Waiter::One(tx) => drop(tx.send(Err(e))),
            Waiter::Raw(w) => drop(w.tx.send(Err(e))),
        }
    }
}

/// The replies of a batch sent with [`Node::send_raw`], on their way.
#[derive(Debug)]
pub struct RawReplies(Option<oneshot::Receiver<Result<RawBatch, CallError>>>);

/// A node's connection (a task on the runtime that made it) and its breaker. Dropping the last
/// handle ends the task.
#[derive(Debug)]
pub struct Node {
    addr: Arc<str>,
    tx: mpsc::UnboundedSender<Request>,
    breaker: Mutex<Breaker>,
    options: NodeOptions,
    /// Calls answered by the node, and calls that failed (any [`CallError`]).
    pub answered: AtomicU64,
    pub failed: AtomicU64,
    health: Arc<Health>,
}

/// Whether the connection task last reached the node, and how often that changed; written by
/// the task, read by INFO and metrics.
#[derive(Debug, Default)]
struct Health {
    /// 0 until the first dial ends, then [`Health::UP`] or [`Health::DOWN`].
    state: AtomicU8,
    went_down: AtomicU64,
    came_back: AtomicU64,
}

impl Health {
    const UP: u8 = 1;
    const DOWN: u8 = 2;

    /// A dial succeeded: logged and counted if the node was down.
    fn reached(&self, addr: &str) {
        if self.state.swap(Health::UP, Ordering::Relaxed) == Health::DOWN {
            self.came_back.fetch_add(1, Ordering::Relaxed);
            sluice_log::warn(&format!("upstream {addr} answers again"));
        }
    }

    /// A dial failed: logged and counted if the node was up or not yet dialled.
    fn lost(&self, addr: &str, why: &str) {
        if self.state.swap(Health::DOWN, Ordering::Relaxed) != Health::DOWN {
            self.went_down.fetch_add(1, Ordering::Relaxed);
            sluice_log::warn(&format!(
                "upstream {addr} unreachable: {why} (its checks get their fail mode until it answers)"
            ));
        }
    }
}

impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request").finish_non_exhaustive()
    }
}

impl Node {
    /// Starts the connection task for `addr` (`host:port`, or `unix:PATH` for a node's
    /// `--unixsocket`) on the current tokio runtime.
    /// With `secure.tls`, every connection is TLS; with `secure.auth`, it logs in first. A
    /// failed handshake or a refused login counts as a failed connect (the node is down for
    /// this client until it is accepted).
    pub fn spawn(addr: Arc<str>, options: NodeOptions, secure: Secure) -> Arc<Node> {
        let (tx, rx) = mpsc::unbounded_channel();
        let health = Arc::new(Health::default());
        tokio::spawn(run(addr.clone(), rx, options, secure, health.clone()));
        Arc::new(Node {
            addr,
            tx,
            breaker: Mutex::new(Breaker::Closed { failures: 0 }),
            options,
            answered: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            health,
        })
    }

    /// Whether the last dial reached the node (connected, and past TLS and AUTH); `None`
    /// before the first dial ends.
    pub fn reachable(&self) -> Option<bool> {
        match self.health.state.load(Ordering::Relaxed) {
            Health::UP => Some(true),
            Health::DOWN => Some(false),
            _ => None,
        }
    }

    /// Whether the node is connected and answered the last call made to it, none failing since:
    /// a call sent now is most likely answered, not left to time out.
    pub fn answering(&self) -> bool {
        self.reachable() == Some(true)
            && matches!(*self.breaker.lock(), Breaker::Closed { failures: 0 })
    }

    /// Times the node became unreachable (the first failed dial counts).
    pub fn went_down(&self) -> u64 {
        self.health.went_down.load(Ordering::Relaxed)
    }

    /// Times the node was reached again after being unreachable.
    pub fn came_back(&self) -> u64 {
        self.health.came_back.load(Ordering::Relaxed)
    }

    pub fn addr(&self) -> &Arc<str> {
        &self.addr
    }

    /// Sends one encoded command and waits for its reply until `deadline`.
    pub async fn call(&self, frame: Bytes, deadline: Instant) -> Result<Value, CallError> {
        if !self.admit(Instant::now()) {
            self.failed.fetch_add(1, Ordering::Relaxed);
            return Err(CallError::Open);
        }
        let (reply, rx) = oneshot::channel();
        let reply = Waiter::One(reply);
        let result = match self.tx.send(Request { frame, reply }) {
            Err(_) => Err(CallError::Down),
            Ok(()) => match timeout_at(deadline, rx).await {
                Ok(Ok(r)) => r,
                Ok(Err(_)) => Err(CallError::Down),
                Err(_) => Err(CallError::Timeout),
            },
        };
        self.record(result.is_ok());
        result
    }

    /// Sends `n` encoded commands in one go; [`Node::wait_raw`] gets their replies, as bytes.
    /// The batch is written whole, so its replies arrive together and in order.
    pub fn send_raw(&self, frames: Bytes, n: usize) -> RawReplies {
        if !self.admit(Instant::now()) {
            return RawReplies(None);
        }
        let (tx, rx) = oneshot::channel();
        let reply = Waiter::Raw(RawWait {
            n,
            ends: Vec::with_capacity(n),
            tx,
        });
        match self.tx.send(Request {
            frame: frames,
            reply,
        }) {
            Ok(()) => RawReplies(Some(rx)),
            Err(_) => RawReplies(None),
        }
    }

    /// The replies of a [`Node::send_raw`] batch, all of them, by `deadline`.
    pub async fn wait_raw(
        &self,
        replies: RawReplies,
        deadline: Instant,
    ) -> Result<RawBatch, CallError> {
        let result = match replies.0 {
            None => Err(CallError::Open),
            Some(rx) => match timeout_at(deadline, rx).await {
                Ok(Ok(r)) => r,
                Ok(Err(_)) => Err(CallError::Down),
                Err(_) => Err(CallError::Timeout),
            },
        };
        self.record(result.is_ok());
        result
    }

    /// The breaker's state now.
    pub fn breaker(&self) -> BreakerState {
        match *self.breaker.lock() {
            Breaker::Closed { .. } => BreakerState::Closed,
            Breaker::Open { until } if Instant::now() >= until => BreakerState::HalfOpen,
            Breaker::Open { .. } => BreakerState::Open,
            Breaker::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }

    fn admit(&self, now: Instant) -> bool {
        let mut b = self.breaker.lock();
        match *b {
            Breaker::Closed { .. } => true,
            Breaker::Open { until } if now < until => false,
            Breaker::HalfOpen { probe_since }
                if now < probe_since + self.options.breaker_cooldown =>
            {
                false
            }
            Breaker::Open { .. } | Breaker::HalfOpen { .. } => {
                *b = Breaker::HalfOpen { probe_since: now };
                true
            }
        }
    }

    fn record(&self, ok: bool) {
        let counter = if ok { &self.answered } else { &self.failed };
        counter.fetch_add(1, Ordering::Relaxed);
        let mut b = self.breaker.lock();
        let open = Breaker::Open {
            until: Instant::now() + self.options.breaker_cooldown,
        };
        *b = match (&*b, ok) {
            (_, true) => Breaker::Closed { failures: 0 },
            (Breaker::Closed { failures }, false)
                if failures + 1 < self.options.breaker_failures =>
            {
                Breaker::Closed {
                    failures: failures + 1,
                }
            }
            (Breaker::Open { until }, false) => Breaker::Open { until: *until },
            (_, false) => open,
        };
    }
}

/// The connection task: connect, serve, and on any fault fail what is in flight and redial.
async fn run(
    addr: Arc<str>,
    mut rx: mpsc::UnboundedReceiver<Request>,
    options: NodeOptions,
    secure: Secure,
    health: Arc<Health>,
) {
    let mut backoff = options.backoff_min;
    loop {
        match dial(&addr, &options, &secure).await {
            Ok(stream) => {
                health.reached(&addr);
                backoff = options.backoff_min;
                if serve(stream, &mut rx, &options).await.is_ok() {
                    return;
                }
            }
            Err(why) => {
                health.lost(&addr, &why);
                if !refuse_for(backoff, &mut rx).await {
                    return;
                }
                backoff = (backoff * 2).min(options.backoff_max);
            }
        }
    }
}

/// Connects and logs in; `Err` says why not (a refused connect, a failed TLS handshake, a
/// refused login: each a setup mistake the fail mode would hide from the callers).
async fn dial(addr: &str, options: &NodeOptions, secure: &Secure) -> Result<Stream, String> {
    let slow = || {
        format!(
            "no answer within {} ms",
            options.connect_timeout.as_millis()
        )
    };
    let mut stream = match addr.strip_prefix(UNIX_PREFIX) {
        // As Redis, TLS is a TCP port's: a Unix socket is plain.
        Some(_) if secure.tls.is_some() => {
            return Err("TLS is not spoken over a Unix socket: give the node's TLS port".into());
        }
        Some(path) => Stream::Unix(
            timeout(options.connect_timeout, UnixStream::connect(path))
                .await
                .map_err(|_| slow())?
                .map_err(|e| format!("{path}: {e}"))?,
        ),
        None => tcp(addr, options, secure).await?,
    };
    if let Some(auth) = secure.auth.as_deref() {
        let logged_in = match &mut stream {
            Stream::Plain(s) => login(s, auth, options.connect_timeout).await,
            Stream::Tls(s) => login(s.as_mut(), auth, options.connect_timeout).await,
            Stream::Unix(s) => login(s, auth, options.connect_timeout).await,
        };
        logged_in.map_err(|why| format!("refused AUTH: {why}"))?;
    }
    Ok(stream)
}

/// Connects over TCP, and TLS with `secure.tls`.
async fn tcp(addr: &str, options: &NodeOptions, secure: &Secure) -> Result<Stream, String> {
    let slow = || {
        format!(
            "no answer within {} ms",
            options.connect_timeout.as_millis()
        )
    };
    let tcp = timeout(options.connect_timeout, TcpStream::connect(addr))
        .await
        .map_err(|_| slow())?
        .map_err(|e| e.to_string())?;
    let _ = tcp.set_nodelay(true);
    Ok(match &secure.tls {
        None => Stream::Plain(tcp),
        Some(config) => {
            let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
            let host = host.trim_start_matches('[').trim_end_matches(']');
            let name = rustls::pki_types::ServerName::try_from(host.to_string())
                .map_err(|e| format!("{host} is not a TLS server name: {e}"))?;
            let connect = tokio_rustls::TlsConnector::from(config.clone()).connect(name, tcp);
            let tls = timeout(options.connect_timeout, connect)
                .await
                .map_err(|_| slow())?;
            Stream::Tls(Box::new(tls.map_err(|e| format!("TLS failed: {e}"))?))
        }
    })
}

/// Fails every request that arrives during `wait` with `Down`. `false` when every handle is gone.
async fn refuse_for(wait: Duration, rx: &mut mpsc::UnboundedReceiver<Request>) -> bool {
    let end = sleep(wait);
    tokio::pin!(end);
    loop {
        tokio::select! {
            _ = &mut end => return true,
            r = rx.recv() => match r {
                Some(req) => {
                    req.reply.fail(CallError::Down);
                }
                None => return false,
            },
        }
    }
}

/// Most requests gathered into one write.
const BATCH: usize = 512;

/// Serves one connection. `Ok` when every handle is gone; `Err` when the connection broke (what
/// was in flight has been failed).
async fn serve(
    stream: Stream,
    rx: &mut mpsc::UnboundedReceiver<Request>,
    options: &NodeOptions,
) -> Result<(), ()> {
    match stream {
        Stream::Plain(tcp) => {
            let (rd, wr) = tcp.into_split();
            serve_halves(rd, wr, rx, options).await
        }
        Stream::Tls(tls) => {
            let (rd, wr) = tokio::io::split(*tls);
            serve_halves(rd, wr, rx, options).await
        }
        Stream::Unix(unix) => {
            let (rd, wr) = unix.into_split();
            serve_halves(rd, wr, rx, options).await
        }
    }
}

/// [`serve`] on the two halves of a connection.
async fn serve_halves<R, W>(
    mut rd: R,
    mut wr: W,
    rx: &mut mpsc::UnboundedReceiver<Request>,
    options: &NodeOptions,
) -> Result<(), ()>
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let mut inflight: VecDeque<Waiter> = VecDeque::new();
    let mut rbuf = BytesMut::with_capacity(16 * 1024);
    let mut wbuf = BytesMut::with_capacity(16 * 1024);
    let mut progress = Instant::now();
    let fail = |inflight: &mut VecDeque<Waiter>, e: CallError| {
        for w in inflight.drain(..) {
            w.fail(e);
        }
        Err(())
    };
    loop {
        tokio::select! {
            read = rd.read_buf(&mut rbuf) => {
                match read {
                    Ok(0) | Err(_) => return fail(&mut inflight, CallError::Down),
                    Ok(_) => progress = Instant::now(),
                }
                if deliver(&mut rbuf, &mut inflight).is_err() {
                    return fail(&mut inflight, CallError::Garbage);
                }
            }
            req = rx.recv() => {
                let Some(first) = req else { return Ok(()) };
                if inflight.is_empty() {
                    progress = Instant::now();
                }
                let mut next = Some(first);
                let mut n = 0;
                while let Some(r) = next.take() {
                    // A caller that already gave up is not sent.
                    if !r.reply.is_closed() {
                        wbuf.extend_from_slice(&r.frame);
                        inflight.push_back(r.reply);
                    }
                    n += 1;
                    if n < BATCH {
                        next = rx.try_recv().ok();
                    }
                }
                if wbuf.is_empty() {
                    continue;
                }
                match timeout(options.stall, wr.write_all(&wbuf)).await {
                    Ok(Ok(())) => wbuf.clear(),
                    _ => return fail(&mut inflight, CallError::Down),
                }
            }
            _ = sleep_until(progress + options.stall), if !inflight.is_empty() => {
                return fail(&mut inflight, CallError::Timeout);
            }
        }
    }
}

/// Hands every complete reply at the front of `rbuf` to its waiter, in order. `Err` when the
/// stream is not RESP or holds a reply nobody asked for.
fn deliver(rbuf: &mut BytesMut, inflight: &mut VecDeque<Waiter>) -> Result<(), value::Garbage> {
    loop {
        match inflight.front() {
            // A reply nobody asked for: the stream is not what we think.
            None if !rbuf.is_empty() => return Err(value::Garbage),
            None => return Ok(()),
            Some(Waiter::One(_)) => match value::decode(rbuf)? {
                Some(v) => {
                    if let Some(Waiter::One(tx)) = inflight.pop_front() {
                        let _ = tx.send(Ok(v));
                    }
                }
                None => return Ok(()),
            },
            Some(Waiter::Raw(_)) => {
                let Some(Waiter::Raw(w)) = inflight.front_mut() else {
                    return Ok(());
                };
                while w.ends.len() < w.n {
                    let at = w.ends.last().copied().unwrap_or(0);
                    match crate::raw::reply_end(rbuf, at)? {
                        Some(end) => w.ends.push(end),
                        None => return Ok(()),
                    }
                }
                if let Some(Waiter::Raw(w)) = inflight.pop_front() {
                    let bytes = rbuf.split_to(w.ends.last().copied().unwrap_or(0)).freeze();
                    let _ = w.tx.send(Ok(RawBatch {
                        bytes,
                        ends: w.ends,
                    }));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn ping() -> Bytes {
        let mut out = BytesMut::new();
        value::encode_command(&mut out, &["PING"]);
        out.freeze()
    }

    /// A real listener on `addr` that answers every PING frame with +PONG.
    async fn pong_server(addr: std::net::SocketAddr) {
        let server = tokio::net::TcpListener::bind(addr).await.expect("rebind");
        tokio::spawn(async move {
            while let Ok((s, _)) = server.accept().await {
                tokio::spawn(answer_pings(s));
            }
        });
    }

    /// Answers every PING frame on `s` with +PONG until it closes.
    async fn answer_pings<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(mut s: S) {
        let frame = ping().len();
        let (mut buf, mut pending) = ([0u8; 4096], 0);
        while let Ok(n) = s.read(&mut buf).await {
            if n == 0 {
                return;
            }
            pending += n;
            let replies = b"+PONG\r\n".repeat(pending / frame);
            pending %= frame;
            if s.write_all(&replies).await.is_err() {
                return;
            }
        }
    }

    /// `unix:PATH` reaches a node's Unix socket, pipelined as over TCP.
    #[tokio::test]
    async fn a_unix_address_reaches_the_socket() {
        let dir = std::env::temp_dir().join(format!("sluice-client-unix-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temp dir");
        let path = dir.join("node.sock");
        let _ = std::fs::remove_file(&path);
        let server = tokio::net::UnixListener::bind(&path).expect("bound");
        tokio::spawn(async move {
            while let Ok((s, _)) = server.accept().await {
                tokio::spawn(answer_pings(s));
            }
        });
        let addr = format!("{UNIX_PREFIX}{}", path.display());
        let node = Node::spawn(addr.into(), NodeOptions::default(), Secure::default());
        let deadline = Instant::now() + Duration::from_secs(5);
        let calls: Vec<_> = (0..20)
            .map(|_| {
                let node = node.clone();
                tokio::spawn(async move { node.call(ping(), deadline).await })
            })
            .collect();
        for c in calls {
            assert_eq!(c.await.unwrap(), Ok(Value::Simple("PONG".into())));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn breaker_opens_on_failures_and_closes_after_a_good_probe() {
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        // Nothing listens there now: every connect is refused.
        let options = NodeOptions {
            breaker_failures: 3,
            breaker_cooldown: Duration::from_millis(50),
            backoff_min: Duration::from_millis(1),
            backoff_max: Duration::from_millis(5),
            ..NodeOptions::default()
        };
        let node = Node::spawn(addr.to_string().into(), options, Secure::default());
        let deadline = || Instant::now() + Duration::from_millis(200);
        for _ in 0..3 {
            let r = node.call(ping(), deadline()).await;
            assert!(
                matches!(r, Err(CallError::Down | CallError::Timeout)),
                "{r:?}"
            );
        }
        assert_eq!(node.breaker(), BreakerState::Open);
        let started = Instant::now();
        assert_eq!(node.call(ping(), deadline()).await, Err(CallError::Open));
        assert!(
            started.elapsed() < Duration::from_millis(10),
            "an open breaker waits for nothing"
        );

        pong_server(addr).await;
        let back = async {
            loop {
                if node.call(ping(), deadline()).await == Ok(Value::Simple("PONG".into())) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(5), back)
            .await
            .expect("the node answered again");
        assert_eq!(node.breaker(), BreakerState::Closed);
        // Pipelined: many callers share the connection, each gets its own reply.
        let calls: Vec<_> = (0..50)
            .map(|_| {
                let node = node.clone();
                tokio::spawn(async move { node.call(ping(), deadline()).await })
            })
            .collect();
        for c in calls {
            assert_eq!(c.await.unwrap(), Ok(Value::Simple("PONG".into())));
        }
    }
}
