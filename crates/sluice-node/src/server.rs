//! The thread-per-core runtime.
//!
//! `run` binds one SO_REUSEPORT listener per thread on the same address (the kernel spreads new
//! connections across them), then starts each thread with its own current-thread tokio runtime.
//! A connection lives on the thread that accepted it for its whole life, so nothing about a
//! connection is ever shared between threads; what is shared ([`Shared`]) is the store (sharded
//! locks), counters (per-thread cache lines) and the client registry (touched on connect only).
//!
//! `--unixsocket` adds one Unix listener, accepted on thread 0 and handed round-robin to every
//! thread's loop (Linux has no SO_REUSEPORT spreading for Unix sockets, and a listener that
//! every thread polled would leave each connection with whichever thread woke first: a burst
//! of clients could all land on one). Its connections then live like TCP ones, epoll or
//! io_uring.
//!
//! Each thread also runs the timing wheels of its own subset of store shards every few
//! milliseconds, so expiry needs no extra thread and no lock another thread holds for long.

use std::io;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::os::unix::net::{UnixListener as StdUnixListener, UnixStream as StdUnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::config::Config;
use crate::conn;
use crate::shared::Shared;
use crate::wire::Stream;

/// How often each thread runs its shards' timing wheels.
use sluice_store::EXPIRE_BUDGET;

const EXPIRE_EVERY: Duration = Duration::from_millis(10);
/// How long shutdown waits for connections to write the replies in flight.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// A started server: its address and a handle to stop it.
#[derive(Debug)]
pub struct Server {
    pub shared: Arc<Shared>,
    threads: Vec<std::thread::JoinHandle<()>>,
    /// This process's claims on its ports (plain and TLS), held for its life (see [`bind_all`]).
    _claim: [Option<std::os::unix::net::UnixListener>; 2],
    /// `--unixsocket`'s file, removed when this drops (after [`Server::join`]).
    _unix_file: Option<SocketFile>,
}

impl Server {
    /// Binds every listener and starts every thread. Returns once the server accepts connections.
    pub fn start(mut config: Config) -> io::Result<Server> {
        let threads = config.threads();
        raise_open_files_limit(config.maxclients);
        if !config.bind.is_loopback() && config.requirepass.is_none() {
            sluice_log::log(&format!(
                "WARNING: listening on {} without --requirepass: anyone who can reach this address can use and flush this server. Set --requirepass or bind 127.0.0.1.",
                config.bind
            ));
        }
        // `--port 0 --tls-port N`: TLS only, as Redis (without a TLS port, 0 picks a free port).
        let (listeners, claim) = if config.tls_only() {
            ((0..threads).map(|_| None).collect::<Vec<_>>(), None)
        } else {
            let (l, c) = bind_all(SocketAddr::new(config.bind, config.port), threads)?;
            (l.into_iter().map(Some).collect(), c)
        };
        let (tls_listeners, tls_claim) = match config.tls_port {
            Some(port) => {
                let (l, c) = bind_all(SocketAddr::new(config.bind, port), threads)?;
                (l.into_iter().map(Some).collect(), c)
            }
            None => ((0..threads).map(|_| None).collect::<Vec<_>>(), None),
        };
        // The address this node is known by: its plain port's, or its TLS port's when TLS only.
        let local_addr = match (listeners.first(), tls_listeners.first()) {
            (Some(Some(l)), _) | (_, Some(Some(l))) => l.local_addr()?,
            _ => return Err(io::Error::other("no listener")),
        };
        // `--tls-port 0` picked a free port: the one bound is what CONFIG GET and the cluster
        // table report.
        if let Some(Some(l)) = tls_listeners.first() {
            config.tls_port = Some(l.local_addr()?.port());
        }
        // Bound before anything slow, so a taken port fails the start at once, not a thread later.
        let side_port = |port: Option<u16>| {
            port.map(|p| bind_one(SocketAddr::new(config.bind, p)))
                .transpose()
        };
        let unix = config
            .unixsocket
            .as_deref()
            .map(|path| bind_unix(path, config.unixsocketperm))
            .transpose()?;
        let metrics = side_port(config.metrics_port)?;
        let grpc = side_port(config.grpc_port)?;
        let http = side_port(config.http_port)?;
        let shared = Arc::new(Shared::new(
            config,
            local_addr,
            crate::cmd::STATS_ROWS,
            crate::cmd::acl_catalog(),
        )?);
        let _ = shared
            .settings_at_start
            .set(crate::cmd::config_values(&shared));
        warn_unsafe_defaults(&shared.config);
        let started = std::time::Instant::now();
        match crate::persist::load(&shared.persist, &shared.store, shared.clock.now()) {
            Ok(Some(loaded)) => {
                sluice_log::log(&format!(
                    "snapshot loaded: {} entries in {} ms",
                    loaded.entries,
                    started.elapsed().as_millis()
                ));
                if let Some(origin) = loaded.origin {
                    shared.repl.loaded(origin);
                }
            }
            Ok(None) => {
                if let Some(dir) = &shared.config.dir {
                    sluice_log::log(&format!(
                        "no snapshot found in --dir {}: starting empty (every client has a fresh quota); check the path if a snapshot was expected",
                        dir.display()
                    ));
                }
            }
            Err(e) => return Err(io::Error::other(e)),
        }
        if let Some(path) = shared.config.aclfile.clone() {
            let n = crate::acl::load_file(&shared.acl, &path, shared.config.requirepass.as_deref())
                .map_err(io::Error::other)?;
            sluice_log::log(&format!("ACL file {} loaded: {n} users", path.display()));
        }
        let rules_file = match shared.config.rules.clone() {
            Some(path) => {
                let (n, seen) =
                    crate::rules::file::load(&shared, &path).map_err(io::Error::other)?;
                sluice_log::log(&format!("rules file {} loaded: {n} rules", path.display()));
                Some((path, seen))
            }
            None => None,
        };
        let envoy = match &shared.config.envoy_config {
            Some(dir) => Some(sluice_grpc::EnvoyConfig::open(dir)?),
            None => None,
        };
        let uring = shared.config.io == crate::config::IoLoop::Uring && uring_permitted();
        if let Some(Some(l)) = tls_listeners.first() {
            sluice_log::log(&format!("TLS on {}", l.local_addr()?));
        }
        // Each worker holds a sender until it has chosen its loop (a ring, or epoll), or until
        // it fails to start: the node is ready, and INFO names its loops, only once all are
        // gone.
        let (chosen_tx, chosen) = std::sync::mpsc::channel::<()>();
        let (mut unix_listener, unix_file, mut handed) = match unix {
            Some((listener, file)) => {
                sluice_log::log(&format!("Unix socket {}", file.path.display()));
                let (senders, receivers): (Vec<_>, Vec<_>) =
                    (0..threads).map(|_| mpsc::unbounded_channel()).unzip();
                let receivers = receivers.into_iter().map(Some).collect();
                (Some((listener, senders)), Some(file), receivers)
            }
            None => (None, None, (0..threads).map(|_| None).collect::<Vec<_>>()),
        };
        let mut handles = listeners
            .into_iter()
            .zip(tls_listeners)
            .enumerate()
            .map(|(index, (tcp, tls))| {
                let shared = shared.clone();
                let chosen = chosen_tx.clone();
                let listeners = Listeners {
                    tcp,
                    tls,
                    unix: if index == 0 {
                        unix_listener.take()
                    } else {
                        None
                    },
                    handed: handed[index].take(),
                };
                std::thread::Builder::new()
                    .name(format!("sluice-{index}"))
                    .spawn(move || thread_main(index, threads, listeners, shared, uring, chosen))
            })
            .collect::<io::Result<Vec<_>>>()?;
        drop(chosen_tx);
        // Nothing is sent: this returns when the last sender is dropped.
        let _ = chosen.recv();
        handles.push(crate::repl::thread::start(shared.clone())?);
        handles.extend(crate::cluster::control::start(shared.clone())?);
        handles.extend(crate::persist::saver::start(shared.clone())?);
        if let Some((path, seen)) = rules_file {
            handles.push(crate::rules::file::start_watcher(
                shared.clone(),
                path,
                seen,
            )?);
        }
        handles.extend(crate::rules::etcd::start(shared.clone())?);
        handles.extend(crate::regions::task::start(shared.clone())?);
        if let Some(listener) = metrics {
            sluice_log::log(&format!(
                "metrics on http://{}/metrics",
                listener.local_addr()?
            ));
            handles.push(crate::metrics::start(listener, shared.clone())?);
        }
        if let Some(listener) = grpc {
            sluice_log::log(&format!(
                "Envoy rate limit service (gRPC) on {}",
                listener.local_addr()?
            ));
            handles.push(crate::grpc::start(listener, envoy, shared.clone())?);
        }
        if let Some(listener) = http {
            sluice_log::log(&format!("HTTP API on http://{}", listener.local_addr()?));
            handles.push(crate::http::start(listener, shared.clone())?);
        }
        Ok(Server {
            shared,
            threads: handles,
            _claim: [claim, tls_claim],
            _unix_file: unix_file,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.shared.local_addr
    }

    /// Waits until every thread has stopped (after `Shared::shutdown`), then writes the
    /// shutdown snapshot (with `--dir`, unless SHUTDOWN NOSAVE): the replies in flight are
    /// written by then, so every check a client saw allowed is in it.
    pub fn join(self) {
        for t in self.threads {
            let _ = t.join();
        }
        sluice_log::service::notify(&self.shared.config.service, "STOPPING=1");
        let persist = &self.shared.persist;
        if persist.enabled() && !persist.skip_shutdown_save.load(Relaxed) {
            crate::persist::log_save(
                "Saving the final snapshot",
                persist.save(&self.shared.store, self.shared.clock.now(), || {
                    self.shared.repl.origin(&self.shared.store)
                }),
            );
        }
    }
}

/// Warns at start about settings that surprise in production.
fn warn_unsafe_defaults(config: &Config) {
    if config.maxmemory == 0 {
        sluice_log::warn(
            "WARNING: no --maxmemory set: clients choose the keys, so memory grows with every new key until the system runs out. Set --maxmemory (and --maxmemory-policy) for production.",
        );
    }
}

/// Raises the open-files limit so `maxclients` connections fit, as Redis does at start.
fn raise_open_files_limit(maxclients: usize) {
    // Listeners, the runtime's own descriptors and some slack above the clients.
    let wanted = maxclients as u64 + 64;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit write and read `lim`, a plain struct of integers we own,
    // through a pointer valid for its size.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 || lim.rlim_cur >= wanted {
            return;
        }
        let target = wanted.min(lim.rlim_max);
        lim.rlim_cur = target;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 || target < wanted {
            sluice_log::log(&format!(
                "WARNING: open files limit is {target}, below maxclients {maxclients} + 64: some clients will be refused by the system"
            ));
        }
    }
}

/// Binds `n` listeners to the same address with SO_REUSEPORT. With port 0 the first one picks
/// the port and the others join it.
///
/// SO_REUSEPORT would also let this process join the listeners of another process on the same
/// port, as root or the same user, and the kernel would then split new connections between
/// two independent stores. So a fixed port is first probed without SO_REUSEPORT: any listener
/// there, of any process, makes that bind fail, and the start fails with Redis's message.
/// Two nodes started at the same instant could both pass the probe before either listens, so
/// each also claims the address by binding an abstract Unix socket named after it (per network
/// namespace, as ports are, and released by the kernel when the process ends): only one node
/// holds it.
fn bind_all(
    addr: SocketAddr,
    n: usize,
) -> io::Result<(Vec<StdListener>, Option<std::os::unix::net::UnixListener>)> {
    let claim = if addr.port() != 0 {
        let claim = claim(addr)?;
        drop(bind_one(addr)?);
        Some(claim)
    } else {
        None
    };
    let mut listeners = Vec::with_capacity(n);
    let mut addr = addr;
    for _ in 0..n {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        socket.set_reuse_address(true)?;
        socket.set_reuse_port(true)?;
        socket.set_nonblocking(true)?;
        socket.bind(&addr.into()).map_err(|e| bind_error(addr, e))?;
        socket.listen(1024)?;
        let listener: StdListener = socket.into();
        addr = listener.local_addr()?;
        listeners.push(listener);
    }
    Ok((listeners, claim))
}

/// The abstract Unix socket `sluice-listen-ADDR`, bound: this process's claim on `addr`.
fn claim(addr: SocketAddr) -> io::Result<std::os::unix::net::UnixListener> {
    claim_name(&format!("sluice-listen-{addr}")).map_err(|e| bind_error(addr, e))
}

/// The abstract Unix socket `name`, bound (`AddrInUse` if another process holds it).
fn claim_name(name: &str) -> io::Result<StdUnixListener> {
    use std::os::linux::net::SocketAddrExt;
    let name = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
    StdUnixListener::bind_addr(&name)
}

/// One listener of this process alone on `addr` (SO_REUSEADDR, so sockets in TIME_WAIT do not
/// block a restart, but no SO_REUSEPORT, so any other listener there does).
fn bind_one(addr: SocketAddr) -> io::Result<StdListener> {
    StdListener::bind(addr).map_err(|e| bind_error(addr, e))
}

/// Redis's words for a listening socket that cannot be bound, naming the address.
fn bind_error(addr: SocketAddr, e: io::Error) -> io::Error {
    let why = match e.kind() {
        io::ErrorKind::AddrInUse => "Address already in use".to_string(),
        _ => e.to_string(),
    };
    io::Error::new(
        e.kind(),
        format!("Could not create server TCP listening socket {addr}: bind: {why}"),
    )
}

/// A thread's listeners: the plain port's (none when TLS only), the TLS port's if there is
/// one, and with `--unixsocket` where its Unix clients come from: thread 0 accepts them all and
/// hands them round-robin (to itself too), every thread takes its share from `handed`.
struct Listeners {
    tcp: Option<StdListener>,
    tls: Option<StdListener>,
    unix: Option<(StdUnixListener, Vec<Hand>)>,
    handed: Option<Handed>,
}

/// Where thread 0 hands a thread the Unix clients it accepted (out of its own runtime).
type Hand = mpsc::UnboundedSender<StdUnixStream>;
type Handed = mpsc::UnboundedReceiver<StdUnixStream>;

/// `--unixsocket`'s listener, on `path`.
///
/// As the TCP ports, a socket another process listens on refuses the start with Redis's words;
/// unlike Redis, which unlinks whatever is at the path, and so would silently take a running
/// node's clients. A socket file nothing listens on (a connect is refused: a crash left it) is
/// replaced. Two nodes started at once on the same path are kept apart by a claim, as the ports
/// are (see [`bind_all`]).
fn bind_unix(path: &Path, perm: u32) -> io::Result<(StdUnixListener, SocketFile)> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let in_use = |e: io::Error| {
        let why = match e.kind() {
            io::ErrorKind::AddrInUse => format!(
                "Address already in use (another process listens on {})",
                path.display()
            ),
            _ => format!("{e} ({})", path.display()),
        };
        io::Error::new(e.kind(), format!("Failed opening Unix socket: bind: {why}"))
    };
    let claim = claim_name(&format!("sluice-unix-{:016x}", path_hash(path))).map_err(in_use)?;
    let listener = match StdUnixListener::bind(path) {
        Err(e) if e.kind() == io::ErrorKind::AddrInUse && is_stale(path) => {
            sluice_log::log(&format!(
                "removing the stale Unix socket {} (nothing listens on it)",
                path.display()
            ));
            std::fs::remove_file(path).map_err(in_use)?;
            StdUnixListener::bind(path).map_err(in_use)?
        }
        bound => bound.map_err(in_use)?,
    };
    if perm != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(perm)).map_err(in_use)?;
    }
    listener.set_nonblocking(true)?;
    let meta = std::fs::symlink_metadata(path)?;
    Ok((
        listener,
        SocketFile {
            path: path.to_path_buf(),
            id: (meta.dev(), meta.ino()),
            _claim: claim,
        },
    ))
}

/// Whether `path` is a socket nothing listens on: a connect to it is refused.
fn is_stale(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    let socket = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket());
    socket
        && matches!(StdUnixStream::connect(path), Err(e) if e.kind() == io::ErrorKind::ConnectionRefused)
}

/// A stable name for a socket path, whatever its spelling (`./s.sock`, `/tmp/../tmp/s.sock`):
/// its directory resolved, then its file name.
fn path_hash(path: &Path) -> u64 {
    use std::hash::{Hash, Hasher};
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mut h = std::hash::DefaultHasher::new();
    dir.hash(&mut h);
    path.file_name().hash(&mut h);
    h.finish()
}

/// The socket file this node made, and its claim on the path.
#[derive(Debug)]
struct SocketFile {
    path: PathBuf,
    /// Its device and inode: removed at shutdown only if the path still names this file.
    id: (u64, u64),
    _claim: StdUnixListener,
}

impl Drop for SocketFile {
    /// Removes the file, as Redis does at shutdown (or a start that fails after the bind),
    /// unless another node has replaced it since.
    fn drop(&mut self) {
        use std::os::unix::fs::MetadataExt;
        let ours =
            std::fs::symlink_metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == self.id);
        if ours && std::fs::remove_file(&self.path).is_ok() {
            sluice_log::log("Removing the unix socket file.");
        }
    }
}

/// `--io uring`: whether io_uring can be had here; if not, the log says why and that the
/// server uses epoll.
fn uring_permitted() -> bool {
    match crate::uring::probe() {
        Ok(()) => {
            sluice_log::log(
                "io_uring connection loop for plain clients, TCP and Unix socket (--io uring)",
            );
            true
        }
        Err(e) => {
            sluice_log::log(&format!(
                "io_uring is not available ({e}): serving clients with epoll instead of --io uring"
            ));
            false
        }
    }
}

/// This thread's io_uring loop, with the sender the accept loop hands it clients by; `None`
/// (epoll) if `--io epoll`, or if the ring cannot be had (logged).
fn uring_loop(
    index: usize,
    shared: &Arc<Shared>,
) -> Option<(
    crate::uring::Loop,
    crate::uring::Accepted,
    UnboundedReceiver,
)> {
    match crate::uring::Loop::new(shared.clone(), index) {
        Ok(ring) => {
            shared
                .uring_threads
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            Some((ring, tx, rx))
        }
        Err(e) => {
            sluice_log::log(&format!(
                "thread {index}: io_uring setup failed ({e}): serving its clients with epoll"
            ));
            None
        }
    }
}

type UnboundedReceiver = mpsc::UnboundedReceiver<(Stream, SocketAddr)>;

/// A thread's listeners in its runtime.
struct Registered {
    tcp: Option<TcpListener>,
    tls: Option<TcpListener>,
    unix: Option<(UnixListener, Vec<Hand>)>,
    handed: Option<Handed>,
}

impl Listeners {
    /// Registers every listener with this thread's runtime (call inside it).
    fn register(self) -> io::Result<Registered> {
        let tcp = |l: Option<StdListener>| l.map(TcpListener::from_std).transpose();
        Ok(Registered {
            tcp: tcp(self.tcp)?,
            tls: tcp(self.tls)?,
            unix: match self.unix {
                Some((l, hands)) => Some((UnixListener::from_std(l)?, hands)),
                None => None,
            },
            handed: self.handed,
        })
    }
}

fn thread_main(
    index: usize,
    threads: usize,
    listeners: Listeners,
    shared: Arc<Shared>,
    uring: bool,
    chosen: std::sync::mpsc::Sender<()>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            sluice_log::log(&format!("thread {index}: cannot start its runtime: {e}"));
            shared.shutdown();
            return;
        }
    };
    if index == 0 {
        let _ = shared.repl.stream_runtime.set(runtime.handle().clone());
    }
    runtime.block_on(async move {
        let listeners = match listeners.register() {
            Ok(l) => l,
            Err(e) => {
                sluice_log::log(&format!(
                    "thread {index}: cannot register its listener: {e}"
                ));
                shared.shutdown();
                return;
            }
        };
        let housekeeping = tokio::spawn(housekeeping(index, threads, shared.clone()));
        let ring = uring.then(|| uring_loop(index, &shared)).flatten();
        drop(chosen);
        match ring {
            Some((ring, tx, rx)) => {
                tokio::join!(
                    accept_loop(index, listeners, &shared, Some(tx)),
                    ring.run(rx, DRAIN_TIMEOUT)
                );
            }
            None => accept_loop(index, listeners, &shared, None).await,
        }
        housekeeping.abort();
    });
}

/// What an accept loop's turn brought.
enum Accepted {
    /// A client on the plain port, or a Unix client handed to this thread.
    Plain(Stream, SocketAddr),
    /// A client on the TLS port.
    Tls(tokio::net::TcpStream, SocketAddr),
    /// Nothing for this thread: a Unix client handed on, or the hand-over closed.
    Nothing,
    Failed(io::Error),
}

async fn accept_loop(
    index: usize,
    listeners: Registered,
    shared: &Arc<Shared>,
    uring: Option<crate::uring::Accepted>,
) {
    let Registered {
        tcp: listener,
        tls,
        unix,
        mut handed,
    } = listeners;
    let mut shutdown = shared.shutdown_signal();
    let mut connections = JoinSet::new();
    let tls_config = shared.tls.as_ref().map(|t| t.server.clone());
    // Unix clients of the listener here (thread 0) go to each thread in turn.
    let mut next_hand = 0usize;
    // A Unix client has no address: CLIENT LIST shows the socket's path.
    let unspecified = SocketAddr::from(([0, 0, 0, 0], 0));
    loop {
        let accepted = tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => break,
            accepted = async { listener.as_ref().expect("guarded").accept().await }, if listener.is_some() => {
                match accepted {
                    Ok((s, peer)) => Accepted::Plain(Stream::Tcp(s), peer),
                    Err(e) => Accepted::Failed(e),
                }
            }
            accepted = async { tls.as_ref().expect("guarded").accept().await }, if tls.is_some() => {
                match accepted {
                    Ok((s, peer)) => Accepted::Tls(s, peer),
                    Err(e) => Accepted::Failed(e),
                }
            }
            accepted = async { unix.as_ref().expect("guarded").0.accept().await }, if unix.is_some() => {
                let hands = &unix.as_ref().expect("guarded").1;
                match accepted.and_then(|(s, _)| s.into_std()) {
                    Ok(s) => {
                        next_hand = (next_hand + 1) % hands.len();
                        // A thread that has stopped takes no more: the client is closed.
                        let _ = hands[next_hand].send(s);
                        Accepted::Nothing
                    }
                    Err(e) => Accepted::Failed(e),
                }
            }
            stream = async { handed.as_mut().expect("guarded").recv().await }, if handed.is_some() => {
                match stream.map(tokio::net::UnixStream::from_std) {
                    Some(Ok(s)) => Accepted::Plain(Stream::Unix(s), unspecified),
                    Some(Err(e)) => Accepted::Failed(e),
                    None => {
                        handed = None;
                        Accepted::Nothing
                    }
                }
            }
        };
        let full = || shared.clients.len() >= shared.maxclients.load(Relaxed);
        match accepted {
            Accepted::Nothing => {}
            // As Redis: tell the client why, then close (a TLS client only sees the close).
            Accepted::Plain(stream, _) if full() => {
                let _ = stream.try_write(b"-ERR max number of clients reached\r\n");
                shared.stats.rejected_connections.fetch_add(1, Relaxed);
            }
            Accepted::Tls(..) if full() => {
                shared.stats.rejected_connections.fetch_add(1, Relaxed);
            }
            Accepted::Plain(stream, peer) => match &uring {
                Some(ring) => {
                    let _ = ring.send((stream, peer));
                }
                None => {
                    connections.spawn(conn::serve(stream, peer, shared.clone(), index));
                }
            },
            Accepted::Tls(stream, peer) => {
                let config = tls_config.clone().expect("a TLS listener has a TLS config");
                connections.spawn(conn::serve_tls(stream, peer, shared.clone(), index, config));
            }
            Accepted::Failed(e) => {
                // EMFILE and friends: back off instead of spinning, keep serving the others.
                sluice_log::log(&format!("accept failed: {e}"));
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        while connections.try_join_next().is_some() {}
    }
    drop(listener);
    drop(tls);
    drop(unix);
    drop(handed);
    drop(uring);
    let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        connections.abort_all();
    }
}

/// Per-thread periodic work: expire this thread's shards and its share of the leases of tokens;
/// thread 0 also samples the op rate.
async fn housekeeping(index: usize, threads: usize, shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(EXPIRE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut rounds: u64 = 0;
    let mut evicted_logged = 0;
    loop {
        tick.tick().await;
        let now = shared.clock.now();
        for shard in (index..shared.store.shard_count()).step_by(threads) {
            // Bounded steps, one shard at a time: the connections on this thread run between
            // two, so a wave of expiries or a wheel cascade is never one long stall.
            while !shared.store.expire_some(shard, now, EXPIRE_BUDGET).1 {
                tokio::task::yield_now().await;
            }
            crate::lazyfree::free(shared.store.take_lazy(shard));
            tokio::task::yield_now().await;
        }
        // Leases of tokens not renewed: their unused tokens go back.
        if !shared.token_leases.is_empty() {
            if shared.repl.is_replica() {
                // A primary demoted: its keys are the new primary's now.
                shared.token_leases.clear();
            }
            for shard in (index..crate::token_leases::SHARDS).step_by(threads) {
                shared.token_leases.sweep(shard, &shared.store, now);
            }
        }
        rounds += 1;
        if index == 0 && rounds.is_multiple_of(10) {
            shared.stats.sample_ops(now.as_millis_floor());
        }
        // Evicting a live bucket lets its client through early: say so, once a second at most.
        if index == 0 && rounds.is_multiple_of(100) {
            let evicted = shared.store.evicted_total();
            if evicted > evicted_logged {
                sluice_log::log(&format!(
                    "maxmemory reached: evicted {} live buckets (closest to full first); their clients may pass early",
                    evicted - evicted_logged
                ));
                evicted_logged = evicted;
            }
        }
    }
}
