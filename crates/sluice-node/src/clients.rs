//! The registry of connected clients, for `CLIENT LIST`, `CLIENT KILL` and INFO.
//!
//! Touched only on connect, disconnect and the CLIENT commands, never per request, so one mutex
//! is enough. Each client has a handle its connection task shares: a kill request sets a flag
//! and wakes the task, which closes the connection at its next turn.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use parking_lot::Mutex;
use tokio::sync::Notify;

/// What the registry and the connection share about one client.
#[derive(Debug)]
pub struct ClientHandle {
    pub id: u64,
    pub addr: SocketAddr,
    pub laddr: SocketAddr,
    /// The socket's path for a client of `--unixsocket` (whose `addr` and `laddr` are then
    /// unspecified): CLIENT LIST shows both as `PATH:0`, as Redis does.
    pub unix: Option<Arc<str>>,
    pub created: Instant,
    /// The ACL user the connection runs as (`ACL DELUSER` closes its connections).
    pub user: Mutex<String>,
    pub name: Mutex<Option<String>>,
    pub lib_name: Mutex<Option<String>>,
    pub lib_ver: Mutex<Option<String>>,
    /// Milliseconds since `created` of the last command (for `idle=`).
    pub last_active_ms: AtomicU64,
    /// The protocol version the client speaks (2 or 3).
    pub resp: AtomicU8,
    /// Woken to close the connection (CLIENT KILL).
    pub kill: Notify,
    /// Set with `kill`, for the io_uring loop, which looks rather than waits.
    killed: AtomicBool,
    /// What the connection is now ([`ClientKind`]), for CLIENT LIST and CLIENT KILL TYPE.
    kind: AtomicU8,
    /// Waiting in a blocking command (WAIT), for INFO's `blocked_clients`. The connection
    /// loop mirrors its session's state here whenever that changes.
    pub blocked: AtomicBool,
    /// The socket's file descriptor (-1 until the connection sets it).
    pub fd: AtomicI32,
    /// The connection's buffers as of its last batch: unparsed input, its spare room, and
    /// replies not yet written (CLIENT LIST's `qbuf`, `qbuf-free`, `omem`).
    pub buffers: Buffers,
    /// Channels and patterns subscribed (CLIENT LIST's `sub`, `psub`), kept by SUBSCRIBE and
    /// its kin.
    pub subs: AtomicU32,
    pub psubs: AtomicU32,
    /// Commands queued in an open MULTI, or -1 outside one (CLIENT LIST's `multi`).
    pub multi: AtomicI32,
}

/// A connection's buffer sizes, stored by its own thread once per batch.
#[derive(Debug, Default)]
pub struct Buffers {
    pub qbuf: AtomicU64,
    pub qbuf_free: AtomicU64,
    pub omem: AtomicU64,
}

impl Buffers {
    /// Records the read buffer's length and capacity and the output's length.
    #[inline]
    pub fn store(&self, qbuf: usize, qbuf_cap: usize, omem: usize) {
        self.qbuf.store(qbuf as u64, Relaxed);
        self.qbuf_free
            .store(qbuf_cap.saturating_sub(qbuf) as u64, Relaxed);
        self.omem.store(omem as u64, Relaxed);
    }
}

/// The client classes of CLIENT LIST/KILL TYPE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientKind {
    Normal = 0,
    /// Subscribed to at least one channel or pattern.
    PubSub = 1,
    /// A replica streaming from this node.
    Replica = 2,
    /// This replica's link to its primary.
    Master = 3,
}

impl ClientKind {
    /// Parses a CLIENT TYPE name (`slave` is `replica`'s old name).
    pub fn parse(name: &[u8]) -> Option<ClientKind> {
        match name.to_ascii_lowercase().as_slice() {
            b"normal" => Some(ClientKind::Normal),
            b"pubsub" => Some(ClientKind::PubSub),
            b"replica" | b"slave" => Some(ClientKind::Replica),
            b"master" => Some(ClientKind::Master),
            _ => None,
        }
    }

    /// CLIENT LIST's `flags=`.
    fn flags(self) -> &'static str {
        match self {
            ClientKind::Normal => "N",
            ClientKind::PubSub => "P",
            ClientKind::Replica => "S",
            ClientKind::Master => "M",
        }
    }
}

#[derive(Debug, Default)]
pub struct Clients {
    next_id: AtomicU64,
    /// How many kills were asked for, so a loop that looks for killed clients looks only
    /// when there may be one.
    kills: AtomicU64,
    by_id: Mutex<BTreeMap<u64, Arc<ClientHandle>>>,
}

impl Clients {
    pub fn register(&self, addr: SocketAddr, laddr: SocketAddr) -> Arc<ClientHandle> {
        self.register_as(addr, laddr, None)
    }

    /// A client of the Unix socket at `path`.
    pub fn register_unix(&self, path: Arc<str>) -> Arc<ClientHandle> {
        let none = SocketAddr::from(([0, 0, 0, 0], 0));
        self.register_as(none, none, Some(path))
    }

    fn register_as(
        &self,
        addr: SocketAddr,
        laddr: SocketAddr,
        unix: Option<Arc<str>>,
    ) -> Arc<ClientHandle> {
        let id = self.next_id.fetch_add(1, Relaxed) + 1;
        let handle = Arc::new(ClientHandle {
            id,
            addr,
            laddr,
            unix,
            created: Instant::now(),
            user: Mutex::new("default".into()),
            name: Mutex::new(None),
            lib_name: Mutex::new(None),
            lib_ver: Mutex::new(None),
            last_active_ms: AtomicU64::new(0),
            resp: AtomicU8::new(2),
            kill: Notify::new(),
            killed: AtomicBool::new(false),
            kind: AtomicU8::new(ClientKind::Normal as u8),
            blocked: AtomicBool::new(false),
            fd: AtomicI32::new(-1),
            buffers: Buffers::default(),
            subs: AtomicU32::new(0),
            psubs: AtomicU32::new(0),
            multi: AtomicI32::new(-1),
        });
        self.by_id.lock().insert(id, handle.clone());
        handle
    }

    pub fn unregister(&self, id: u64) {
        self.by_id.lock().remove(&id);
    }

    pub fn len(&self) -> usize {
        self.by_id.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many clients wait in a blocking command.
    pub fn blocked(&self) -> usize {
        self.by_id
            .lock()
            .values()
            .filter(|c| c.blocked.load(Relaxed))
            .count()
    }

    /// A snapshot of every client, in id order.
    pub fn all(&self) -> Vec<Arc<ClientHandle>> {
        self.by_id.lock().values().cloned().collect()
    }

    /// Kills every client `matches` selects; returns how many.
    pub fn kill_where(&self, matches: impl Fn(&ClientHandle) -> bool) -> usize {
        let victims: Vec<_> = self
            .by_id
            .lock()
            .values()
            .filter(|c| matches(c))
            .cloned()
            .collect();
        for c in &victims {
            c.killed.store(true, Relaxed);
            c.kill.notify_one();
        }
        if !victims.is_empty() {
            // Release: whoever sees the new count (Acquire) sees the victims' `killed` too.
            self.kills
                .fetch_add(1, std::sync::atomic::Ordering::Release);
        }
        victims.len()
    }
}

impl Clients {
    /// The kills asked for so far: a change means some client is to close.
    pub fn kills(&self) -> u64 {
        self.kills.load(std::sync::atomic::Ordering::Acquire)
    }
}

impl ClientHandle {
    /// Whether CLIENT KILL (or ACL DELUSER) asked this connection to close.
    pub fn killed(&self) -> bool {
        self.killed.load(Relaxed)
    }

    pub fn kind(&self) -> ClientKind {
        match self.kind.load(Relaxed) {
            1 => ClientKind::PubSub,
            2 => ClientKind::Replica,
            3 => ClientKind::Master,
            _ => ClientKind::Normal,
        }
    }

    pub fn set_kind(&self, kind: ClientKind) {
        self.kind.store(kind as u8, Relaxed);
    }

    /// Records how many channels and patterns the connection is subscribed to.
    pub fn set_subs(&self, channels: usize, patterns: usize) {
        self.subs.store(channels as u32, Relaxed);
        self.psubs.store(patterns as u32, Relaxed);
    }

    /// The client's address as CLIENT LIST's `addr=` shows it: `IP:PORT`, or `PATH:0` on the
    /// Unix socket.
    pub fn addr_text(&self) -> String {
        match &self.unix {
            Some(path) => format!("{path}:0"),
            None => self.addr.to_string(),
        }
    }

    /// The address the client reached, as `laddr=` shows it.
    pub fn laddr_text(&self) -> String {
        match &self.unix {
            Some(path) => format!("{path}:0"),
            None => self.laddr.to_string(),
        }
    }

    /// One `CLIENT LIST` line, in Redis's field order (the fields that mean something here).
    pub fn list_line(&self, current_cmd: &str) -> String {
        let age = self.created.elapsed().as_secs();
        let idle_ms = (self.created.elapsed().as_millis() as u64)
            .saturating_sub(self.last_active_ms.load(Relaxed));
        let b = &self.buffers;
        let (qbuf, qbuf_free, omem) = (
            b.qbuf.load(Relaxed),
            b.qbuf_free.load(Relaxed),
            b.omem.load(Relaxed),
        );
        format!(
            "id={} addr={} laddr={} fd={} name={} age={} idle={} flags={} db=0 sub={} psub={} ssub=0 multi={} qbuf={qbuf} qbuf-free={qbuf_free} argv-mem=0 multi-mem=0 obl=0 oll=0 omem={omem} tot-mem={} events=r cmd={} user={} redir=-1 resp={} lib-name={} lib-ver={}\n",
            self.id,
            self.addr_text(),
            self.laddr_text(),
            self.fd.load(Relaxed),
            self.name.lock().as_deref().unwrap_or(""),
            age,
            idle_ms / 1000,
            self.kind().flags(),
            self.subs.load(Relaxed),
            self.psubs.load(Relaxed),
            self.multi.load(Relaxed),
            qbuf + qbuf_free + omem,
            current_cmd,
            self.user.lock(),
            self.resp.load(Relaxed),
            self.lib_name.lock().as_deref().unwrap_or(""),
            self.lib_ver.lock().as_deref().unwrap_or(""),
        )
    }
}
