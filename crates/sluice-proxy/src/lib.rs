//! # sluice-proxy — `sluice proxy`, the gateway sidecar: a RESP front on [`sluice_client`].
//!
//! A gateway in any language talks to the sidecar on localhost as if it were one Sluice node; the
//! sidecar routes to the cluster (or the Sentinel's primary) and applies the gateway options:
//! fail mode, blocked cache, key splitting, approximate mode (leases of tokens).
//!
//! # Format
//! ```text
//! sluice proxy [--port 6390] (--upstream HOST:PORT[,...] | --sentinel HOST:PORT[,...] --master-name NAME)
//!              [--bind 127.0.0.1] [--timeout-ms 20] [--gateways N] [--fail-mode open|closed|local]
//!              [--requirepass PASS] [--http-port P] [--client-query-buffer-limit 64mb]
//!              [--unixsocket PATH [--unixsocketperm MODE]]
//!              [--upstream-user USER] [--upstream-password PASS | --upstream-password-file FILE]
//!              [--upstream-tls-ca-cert-file CA [--upstream-tls-cert-file CRT --upstream-tls-key-file KEY]]
//!              [--sentinel-tls yes] [--require-upstream]
//!              [--supervised no|systemd|auto] [--pidfile FILE]
//! ```
//! One upstream is a single node (`HOST:PORT`, or `unix:PATH` for a node's `--unixsocket`);
//! several are the seeds of a cluster. Commands: `RL.CHECK` (with
//! `FAILMODE open|closed|local`, `SPLIT k`, `APPROX ms`), `RL.HIT` and `RL.HITS` (each rule's
//! fail mode when the node cannot answer), `RL.RULE GET|LIST|HISTORY`, `CL.THROTTLE` and `GCRA`
//! (forwarded as they are), `RL.WHERE key`, `INFO`, and what clients send on connect (`HELLO 2|3`
//! with `AUTH` and `SETNAME`, `AUTH`, `CLIENT ...`, `SELECT 0`, `READONLY`, `PING`, `ECHO`,
//! `COMMAND`, `CONFIG GET`, `QUIT`, `RESET`). Anything else is an error naming the sidecar's
//! commands.
//!
//! # Layout
//! - `lib.rs`: flags, the listener, and dispatch of each request to what answers it.
//! - `conn`: one connection's loop: a read's requests become one batch per node, replies are
//!   forwarded as bytes in request order.
//! - `session`: the connection commands the sidecar answers itself, in RESP2 or RESP3.
//! - `rules`: the named rules learned from the nodes, for RL.HIT's fail modes.
//! - `metrics`: `--metrics-port`, Prometheus text from the same counters as INFO.
//! - `http`: `--http-port`, the node's HTTP API with each rule's fail mode.
//!
//! Why a crate of its own and not part of `sluice-client`: it is a program (a subcommand of the
//! `sluice` binary) where the library is not; it reuses the node's request parser and reply
//! encoders (`sluice-resp`) and RL.CHECK's own argument grammar (`sluice_core::spec`), and keeps
//! clap out of the library.
//!
//! # Invariants
//! - Each client connection is served by its own task; a slow upstream delays only the replies
//!   queued behind it on the same connection (RESP order), never another client.
//! - The sidecar runs on one thread (a current-thread runtime): a sidecar is one per gateway
//!   host, and its CPU per check is what it costs.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use sluice_client::{
    Client, Config, Credentials, Decision, FailMode, Limit, Node, Quick, Settled, Source, Topology,
};
use sluice_log::service;
use sluice_resp::Request;
use sluice_resp::reply::{self, Proto};
use tokio::net::{TcpListener, UnixListener};

use sluice_core::spec::{CheckArgs, SpecError};

mod conn;
mod http;
mod leases;
mod metrics;
mod session;

use sluice_client::rules;

use conn::{Batch, PlainCheck, Then};
use rules::{HitPlan, RuleBook, bucket_key};

/// `sluice proxy` flags.
#[derive(clap::Args, Debug, Clone)]
pub struct ProxyConfig {
    /// Port to listen on (0: any free port; the ready line names it). 6390, clear of a node's
    /// 6379 and the 6380 a local replica often takes.
    #[arg(long, default_value_t = 6390)]
    pub port: u16,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: String,
    /// Also listen on this Unix socket, as a node's `--unixsocket`: a gateway on this host
    /// skips TCP. A file left there by a crash is replaced; one a live process listens on
    /// refuses the start. Removed at shutdown.
    #[arg(long, value_name = "PATH")]
    pub unixsocket: Option<std::path::PathBuf>,
    /// The permissions of `--unixsocket`'s file, in octal (`770`); 0 leaves them as the umask
    /// makes them.
    #[arg(long, default_value = "0", value_parser = parse_perm, value_name = "MODE")]
    pub unixsocketperm: u32,
    /// One node, or the seed nodes of a cluster, as HOST:PORT[,HOST:PORT...]. A node on the
    /// same host can be reached over its Unix socket: `unix:/run/sluice/sluice.sock`.
    #[arg(long, value_delimiter = ',', conflicts_with = "sentinel")]
    pub upstream: Vec<String>,
    /// Sentinels to ask for the primary, as HOST:PORT[,...] (with --master-name).
    #[arg(long, value_delimiter = ',', requires = "master_name")]
    pub sentinel: Vec<String>,
    /// The primary's name in Sentinel.
    #[arg(long)]
    pub master_name: Option<String>,
    /// `yes`: reach the Sentinels over TLS (their `tls-port`) with the `--upstream-tls-*`
    /// certificates, which it needs. `no` (the default): plain, even when the nodes are TLS.
    #[arg(long = "sentinel-tls", default_value = "no", value_parser = ["yes", "no"], requires_all = ["sentinel", "upstream_tls_ca_cert_file"])]
    pub sentinel_tls: String,
    /// Refuse to start (exit 1) when no upstream can be reached within 5 seconds. Without it
    /// the sidecar starts anyway, logs the upstream it cannot reach, and checks get their fail
    /// mode until it answers.
    #[arg(long = "require-upstream")]
    pub require_upstream: bool,
    /// Deadline of one check, in milliseconds.
    #[arg(long, default_value_t = 20)]
    pub timeout_ms: u64,
    /// Gateways sharing the limits (fail mode local holds a 1/gateways share of each here; an
    /// approximate lease takes at most a 1/gateways share of what the node has left).
    #[arg(long, default_value_t = 1)]
    pub gateways: u32,
    /// Fail mode of RL.CHECK without FAILMODE.
    #[arg(long, default_value = "open", value_parser = ["open", "closed", "local"])]
    pub fail_mode: String,
    /// Most keys held in each local map (local buckets, blocked cache, approximate leases).
    #[arg(long, default_value_t = 100_000)]
    pub max_local_keys: usize,
    /// Require clients to authenticate (AUTH or HELLO AUTH) with this password; over HTTP,
    /// `Authorization: Bearer <password>`.
    #[arg(long)]
    pub requirepass: Option<String>,
    /// Serve Prometheus metrics (`GET /metrics`) on this port, on the `--bind` address.
    #[arg(long = "metrics-port")]
    pub metrics_port: Option<u16>,
    /// Most input one client may hold (unparsed bytes and its MULTI queue); past it the client
    /// is closed. 64 MB, as a node's default; before AUTH, 1 MiB whatever this says.
    #[arg(long = "client-query-buffer-limit", default_value = "64mb", value_parser = sluice_core::size::parse_bytes)]
    pub client_query_buffer_limit: u64,
    /// Most connected clients, as a node's `maxclients`; one more is answered `-ERR max number
    /// of clients reached` and closed.
    #[arg(long, default_value_t = 10_000)]
    pub maxclients: usize,
    #[command(flatten)]
    pub log: sluice_log::LogArgs,
    /// `--supervised systemd` and `--pidfile`, as a node takes them.
    #[command(flatten)]
    pub service: sluice_log::service::ServiceArgs,
    /// The ACL user the sidecar logs in to the nodes as (default: the `default` user).
    #[arg(long, requires = "upstream_password_source")]
    pub upstream_user: Option<String>,
    /// The password the sidecar logs in to the nodes with (`AUTH [user] password` on every
    /// connection). Prefer `--upstream-password-file`: flags show in `ps`.
    #[arg(long, group = "upstream_password_source")]
    pub upstream_password: Option<String>,
    /// A file holding the upstream password (its first line; a trailing newline is dropped).
    #[arg(long, group = "upstream_password_source")]
    pub upstream_password_file: Option<std::path::PathBuf>,
    /// Reach the nodes over TLS (their `--tls-port`), trusting the CA certificates in this
    /// file (PEM).
    #[arg(long = "upstream-tls-ca-cert-file")]
    pub upstream_tls_ca_cert_file: Option<std::path::PathBuf>,
    /// The certificate the sidecar presents to nodes with `--tls-auth-clients yes` (PEM).
    #[arg(long = "upstream-tls-cert-file", requires_all = ["upstream_tls_key_file", "upstream_tls_ca_cert_file"])]
    pub upstream_tls_cert_file: Option<std::path::PathBuf>,
    /// The key of `--upstream-tls-cert-file` (PEM).
    #[arg(long = "upstream-tls-key-file", requires = "upstream_tls_cert_file")]
    pub upstream_tls_key_file: Option<std::path::PathBuf>,
    /// Serve the HTTP API (as a node's `--http-port`) on this port, on the `--bind` address.
    #[arg(long = "http-port")]
    pub http_port: Option<u16>,
    #[command(flatten)]
    pub subject_headers: sluice_http::body::SubjectHeaderArgs,
}

impl ProxyConfig {
    fn client_config(&self) -> Result<Config, String> {
        let topology =
            match (&self.upstream[..], &self.sentinel[..], &self.master_name) {
                ([one], [], _) => Topology::Single(one.clone()),
                (seeds @ [_, _, ..], [], _) => Topology::Cluster(seeds.to_vec()),
                ([], sentinels @ [_, ..], Some(name)) => Topology::Sentinel {
                    sentinels: sentinels.to_vec(),
                    master_name: name.clone(),
                },
                _ => return Err(
                    "give --upstream HOST:PORT[,...] or --sentinel HOST:PORT --master-name NAME"
                        .into(),
                ),
            };
        let mut c = Config::new(topology);
        c.deadline = Duration::from_millis(self.timeout_ms.max(1));
        c.gateways = self.gateways.max(1);
        c.max_local_keys = self.max_local_keys;
        c.auth = self.upstream_credentials()?.map(Arc::new);
        if let Some(ca) = &self.upstream_tls_ca_cert_file {
            let identity = self
                .upstream_tls_cert_file
                .as_deref()
                .zip(self.upstream_tls_key_file.as_deref());
            c.tls = Some(Arc::new(sluice_client::tls::client_config(ca, identity)?));
        }
        c.sentinel_tls = self.sentinel_tls == "yes";
        Ok(c)
    }

    /// `--upstream-user` with `--upstream-password` or the first line of
    /// `--upstream-password-file`.
    fn upstream_credentials(&self) -> Result<Option<Credentials>, String> {
        let password = match (&self.upstream_password, &self.upstream_password_file) {
            (Some(p), _) => p.clone(),
            (None, Some(path)) => std::fs::read_to_string(path)
                .map_err(|e| {
                    format!(
                        "cannot read --upstream-password-file {}: {e}",
                        path.display()
                    )
                })?
                .lines()
                .next()
                .unwrap_or_default()
                .to_string(),
            (None, None) => return Ok(None),
        };
        Ok(Some(Credentials {
            user: self.upstream_user.clone(),
            password,
        }))
    }
}

/// Runs `sluice proxy` with these flags until SIGTERM or SIGINT; returns the exit code.
pub fn main(config: ProxyConfig) -> i32 {
    let level = sluice_log::Level::parse(&config.log.loglevel).unwrap_or(sluice_log::Level::Notice);
    if let Err(e) = sluice_log::configure(
        level,
        config.log.logfile.as_deref(),
        config.log.log_format == "json",
    ) {
        eprintln!("sluice proxy: cannot open --logfile: {e}");
        return 1;
    }
    if let Err(e) = config.log.configure_syslog() {
        eprintln!("sluice proxy: cannot open a syslog socket: {e}");
        return 1;
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            sluice_log::log(&format!("fatal: {e}"));
            return 1;
        }
    };
    match runtime.block_on(run(config)) {
        Ok(()) => 0,
        Err(e) => {
            sluice_log::log(&e);
            1
        }
    }
}

/// Binds the listening socket. A port another process listens on is refused with Redis's
/// words (no `SO_REUSEPORT` here: the kernel refuses a second listener on the port).
async fn listen(bind: &str, port: u16) -> Result<TcpListener, String> {
    TcpListener::bind((bind, port)).await.map_err(|e| {
        let why = if e.kind() == std::io::ErrorKind::AddrInUse {
            "Address already in use".to_string()
        } else {
            e.to_string()
        };
        format!(
            "Warning: Could not create server TCP listening socket {bind}:{port}: bind: {why}\nFailed listening on port {port} (tcp), aborting."
        )
    })
}

/// Parses `--unixsocketperm`: octal, at most 777.
fn parse_perm(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s.trim(), 8)
        .ok()
        .filter(|&mode| mode <= 0o777)
        .ok_or_else(|| format!("'{s}' is not a file mode (octal, 0 to 777)"))
}

/// Binds `--unixsocket`, as a node does: a socket file nothing listens on (a crash left it) is
/// replaced; one a live process listens on is refused with Redis's words.
fn listen_unix(path: &std::path::Path, perm: u32) -> Result<UnixListener, String> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let failed = |e: std::io::Error| {
        let why = if e.kind() == std::io::ErrorKind::AddrInUse {
            format!(
                "Address already in use (another process listens on {})",
                path.display()
            )
        } else {
            format!("{e} ({})", path.display())
        };
        format!("Failed opening Unix socket: bind: {why}")
    };
    let stale = || {
        std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket())
            && matches!(std::os::unix::net::UnixStream::connect(path),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused)
    };
    let listener = match UnixListener::bind(path) {
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && stale() => {
            std::fs::remove_file(path).map_err(failed)?;
            UnixListener::bind(path).map_err(failed)?
        }
        bound => bound.map_err(failed)?,
    };
    if perm != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(perm)).map_err(failed)?;
    }
    Ok(listener)
}

/// A client on either listener, split in halves for [`conn::serve`].
enum Accepted {
    Tcp(tokio::net::TcpStream, std::net::SocketAddr),
    Unix(tokio::net::UnixStream),
}

/// Runs the sidecar until SIGTERM or SIGINT.
pub async fn run(config: ProxyConfig) -> Result<(), String> {
    use tokio::signal::unix::{SignalKind, signal};
    sluice_log::set_role(b'P');
    let client_config = config.client_config()?;
    let default_mode = FailMode::parse(config.fail_mode.as_bytes()).unwrap_or_default();
    let listener = listen(&config.bind, config.port).await?;
    let unix = match &config.unixsocket {
        Some(path) => Some(listen_unix(path, config.unixsocketperm)?),
        None => None,
    };
    let metrics = match config.metrics_port {
        Some(port) => Some(listen(&config.bind, port).await?),
        None => None,
    };
    let http_listener = match config.http_port {
        Some(p) => Some(listen(&config.bind, p).await?),
        None => None,
    };
    let client = Client::connect(client_config).await;
    if config.require_upstream
        && !client
            .wait_reachable(tokio::time::Instant::now() + REQUIRE_UPSTREAM_WAIT)
            .await
    {
        let topology = client.config().topology.to_string();
        let tried: Vec<String> = client
            .upstreams()
            .iter()
            .map(|u| u.addr.to_string())
            .filter(|a| *a != topology)
            .collect();
        let tried = if tried.is_empty() {
            String::new()
        } else {
            format!("; nodes tried: {}", tried.join(", "))
        };
        return Err(format!(
            "--require-upstream: no upstream answered within {} s (upstream {topology}{tried}); not starting",
            REQUIRE_UPSTREAM_WAIT.as_secs()
        ));
    }
    let rules = rules::start(&client);
    let state = Arc::new(Proxy {
        client,
        default_mode,
        requirepass: config.requirepass.clone(),
        query_limit: usize::try_from(config.client_query_buffer_limit).unwrap_or(usize::MAX),
        max_clients: config.maxclients,
        clients: std::sync::atomic::AtomicUsize::new(0),
        rules,
        allowed: AtomicU64::new(0),
        denied: AtomicU64::new(0),
        leases: Arc::default(),
    });
    if let Some(listener) = metrics {
        sluice_log::log(&format!(
            "metrics on http://{}/metrics",
            listener.local_addr().map_err(|e| e.to_string())?
        ));
        metrics::spawn(listener, state.clone());
    }
    if let Some(l) = http_listener {
        let front = Arc::new(http::Front {
            proxy: state.clone(),
            subjects: config.subject_headers.headers(),
        });
        sluice_log::log(&format!(
            "HTTP API on http://{}",
            l.local_addr().map_err(|e| e.to_string())?
        ));
        tokio::spawn(http::serve(l, front));
    }
    let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    if let Some(path) = &config.unixsocket {
        sluice_log::log(&format!("Unix socket {}", path.display()));
    }
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    sluice_log::log(&format!(
        "Sluice proxy ready to accept connections on {local} (upstream {}, timeout {} ms, gateways {}, fail mode {})",
        state.client.config().topology,
        config.timeout_ms,
        config.gateways,
        default_mode.name()
    ));
    if let Err(e) = service::write_pidfile(&config.service) {
        return Err(format!("cannot write --pidfile: {e}"));
    }
    service::notify(&config.service, "READY=1");
    let mut next_id = 0u64;
    // A Unix client is named in log lines as a node's CLIENT LIST names it: `PATH:0`.
    let unix_name: Arc<str> = config
        .unixsocket
        .as_deref()
        .map_or_else(String::new, |p| format!("{}:0", p.display()))
        .into();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => Accepted::Tcp(stream, peer),
                Err(_) => continue,
            },
            accepted = async { unix.as_ref().expect("guarded").accept().await }, if unix.is_some() => {
                match accepted {
                    Ok((stream, _)) => Accepted::Unix(stream),
                    Err(_) => continue,
                }
            }
            _ = term.recv() => break,
            _ = int.recv() => break,
        };
        let Some(seat) = Seat::take(&state) else {
            let _ = match &accepted {
                Accepted::Tcp(s, _) => s.try_write(b"-ERR max number of clients reached\r\n"),
                Accepted::Unix(s) => s.try_write(b"-ERR max number of clients reached\r\n"),
            };
            continue;
        };
        next_id += 1;
        let state = state.clone();
        let unix_name = unix_name.clone();
        tokio::spawn(async move {
            match accepted {
                Accepted::Tcp(stream, peer) => {
                    let _ = stream.set_nodelay(true);
                    conn::serve(stream.into_split(), peer, state, next_id).await;
                }
                Accepted::Unix(stream) => {
                    conn::serve(stream.into_split(), unix_name, state, next_id).await;
                }
            }
            drop(seat);
        });
    }
    if let Some(path) = &config.unixsocket {
        drop(unix);
        if std::fs::remove_file(path).is_ok() {
            sluice_log::log("Removing the unix socket file.");
        }
    }
    service::notify(&config.service, "STOPPING=1");
    sluice_log::log("proxy shutting down");
    service::remove_pidfile(&config.service);
    Ok(())
}

/// One of `--maxclients` connections, given back when dropped.
struct Seat(Arc<Proxy>);

impl Seat {
    fn take(proxy: &Arc<Proxy>) -> Option<Seat> {
        let taken = proxy.clients.fetch_add(1, Ordering::Relaxed);
        if taken >= proxy.max_clients {
            proxy.clients.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(Seat(proxy.clone()))
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.0.clients.fetch_sub(1, Ordering::Relaxed);
    }
}

#[derive(Debug)]
pub(crate) struct Proxy {
    client: Client,
    default_mode: FailMode,
    requirepass: Option<String>,
    /// `--client-query-buffer-limit`.
    query_limit: usize,
    /// `--maxclients`, and the clients connected now.
    max_clients: usize,
    clients: std::sync::atomic::AtomicUsize,
    rules: Arc<RuleBook>,
    /// RL.CHECK answers (not DRY) that allowed and that denied, whatever their source.
    allowed: AtomicU64,
    denied: AtomicU64,
    /// Fail mode `local`'s leases (RL.ACQUIRE when the node cannot answer).
    leases: Arc<sluice_client::LocalLeases>,
}

/// How long `--require-upstream` waits at start for an upstream to answer.
const REQUIRE_UPSTREAM_WAIT: Duration = Duration::from_secs(5);

const NOT_A_PROXY: &str = "this is sluice proxy, a rate-limit sidecar, not a general Redis proxy: it answers RL.CHECK, RL.HIT, RL.HITS, RL.RULE GET|LIST|HISTORY, RL.ACQUIRE, RL.RELEASE, RL.RENEW, RL.SETTLE, CL.THROTTLE, GCRA, RL.WHERE, INFO and the connection commands (HELLO, AUTH, CLIENT, SELECT 0, READONLY, PING, ECHO, COMMAND, CONFIG GET, QUIT, RESET)";

/// The key a request is routed by: RL.HIT's and RL.HITS's first bucket (`rule:subject`), a
/// rule's name for RL.RULE, else the first argument.
pub(crate) fn route_key(req: &Request) -> Bytes {
    let arg = |i| req.arg_bytes(i).unwrap_or_default();
    let name = req.arg(0).unwrap_or_default();
    if name.eq_ignore_ascii_case(b"RL.HIT") {
        Bytes::from(bucket_key(&arg(1), &arg(2)))
    } else if name.eq_ignore_ascii_case(b"RL.HITS") {
        if arg(1).eq_ignore_ascii_case(b"KEYS") {
            arg(2)
        } else {
            Bytes::from(bucket_key(&arg(2), &arg(1)))
        }
    } else if name.eq_ignore_ascii_case(b"RL.RULE") {
        arg(2)
    } else {
        arg(1)
    }
}

impl Proxy {
    fn count(&self, d: &Decision) {
        self.count_one(d.allowed);
    }

    fn count_one(&self, allowed: bool) {
        let counter = if allowed { &self.allowed } else { &self.denied };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Puts a request that the connection layer did not answer into `batch`.
    fn dispatch(self: &Arc<Self>, name: &[u8], req: &Request, proto: Proto, batch: &mut Batch) {
        let argc = req.len();
        match name {
            b"RL.CHECK" => self.rl_check(req, batch),
            b"CL.THROTTLE" | b"GCRA" if argc >= 2 => {
                self.forward(req, Then::Raw { req: req.clone() }, batch)
            }
            b"RL.HIT" if argc >= 3 => self.hits(req, false, batch),
            b"RL.HITS" if argc >= 3 => self.hits(req, true, batch),
            b"RL.RULE" if argc >= 2 => self.rule(req, batch),
            b"RL.ACQUIRE" if argc == 4 => self.acquire(req, proto, batch),
            b"RL.RELEASE" if argc == 3 => self.release_or_renew(req, false, batch),
            b"RL.RENEW" if argc == 4 => self.release_or_renew(req, true, batch),
            b"RL.SETTLE" if argc >= 6 => self.forward(req, Then::Raw { req: req.clone() }, batch),
            b"RL.WHERE" if argc == 2 => {
                let owner = self.client.owner(req.arg(1).unwrap_or_default());
                batch.ready(|out| match owner {
                    Some(a) => reply::bulk(out, a.as_bytes()),
                    None => reply::null(out, proto),
                })
            }
            b"INFO" => {
                let text = self.info();
                batch.ready(|out| reply::verbatim(out, proto, "txt", text.as_bytes()))
            }
            b"CL.THROTTLE" | b"GCRA" | b"RL.HIT" | b"RL.HITS" | b"RL.RULE" | b"RL.WHERE"
            | b"RL.ACQUIRE" | b"RL.RELEASE" | b"RL.RENEW" | b"RL.SETTLE" => batch.error(&format!(
                "ERR wrong number of arguments for '{}' command",
                String::from_utf8_lossy(name).to_lowercase()
            )),
            _ => batch.error(&format!(
                "ERR unknown command '{}': {NOT_A_PROXY}",
                String::from_utf8_lossy(req.arg(0).unwrap_or_default())
            )),
        }
    }

    /// To the owner of the request's key, or through the library's path when no owner is known.
    fn forward(self: &Arc<Self>, req: &Request, then: Then, batch: &mut Batch) {
        let key = route_key(req);
        match batch.node_for(&self.client, &key) {
            Some(node) => batch.upstream(node, req, then),
            None => {
                let (proxy, req) = (self.clone(), req.clone());
                batch.task(tokio::spawn(async move {
                    let mut out = BytesMut::new();
                    let args: Vec<&[u8]> = req.args().collect();
                    match proxy.client.command(&key, &args).await {
                        Ok(v) => v.write(&mut out),
                        Err(e) => reply::error(
                            &mut out,
                            &format!("TRYAGAIN the node cannot answer now ({e:?})"),
                        ),
                    }
                    out
                }));
            }
        }
    }

    /// `RL.CHECK key limit period [BURST n] [COST n] [ALGO a] [DRY] [FAILMODE m] [SPLIT k]
    /// [APPROX ms]`. A plain check goes to the node as it came (a node accepts and ignores the
    /// gateway options); `APPROX` and `SPLIT` take the library's path; `DRY` is forwarded.
    fn rl_check(self: &Arc<Self>, req: &Request, batch: &mut Batch) {
        // The common case, without parsing the arguments here (the node does): a multibulk
        // check with no sidecar-side option, on a key not in the blocked cache.
        if let (Some(frame), Some(key)) = (req.wire_frame(), req.arg_bytes(1))
            && is_plain_check(req)
            && !self.client.is_blocked(&key)
            && let Some(node) = batch.node_for(&self.client, &key)
        {
            let check = PlainCheck::Frame(frame.clone());
            return self.check_upstream(node, req, key, check, batch);
        }
        let (key, limit, cost, dry) = match parse_rl_check(req, self.default_mode) {
            Ok(p) => p,
            Err(e) => return batch.error(&e),
        };
        if dry {
            return self.forward(req, Then::Raw { req: req.clone() }, batch);
        }
        if limit.approximate.is_none() && limit.sub_keys() == 1 {
            if let Some(d) = self.client.cached_denial(&key, &limit) {
                self.count(&d);
                return batch.ready(|out| reply::int_array(out, &d.fields()));
            }
            if let Some(node) = batch.node_for(&self.client, &key) {
                let check = PlainCheck::Parsed(limit, cost);
                return self.check_upstream(node, req, key, check, batch);
            }
        }
        // APPROX, SPLIT, or no owner known yet: the library's path, on a task only if it waits.
        let later = match self.client.check_now(&key, &limit, cost) {
            Quick::Now(d) => {
                self.count(&d);
                return batch.ready(|out| reply::int_array(out, &d.fields()));
            }
            Quick::Later(later) => later,
        };
        let proxy = self.clone();
        batch.task(tokio::spawn(async move {
            let mut out = BytesMut::new();
            match proxy.client.check_later(&key, &limit, cost, later).await {
                Ok(d) => {
                    proxy.count(&d);
                    reply::int_array(&mut out, &d.fields());
                }
                Err(e) => reply::error(&mut out, &e.0),
            }
            out
        }));
    }

    /// A plain check for `node`, the key's debt first: what fail mode `local` admitted for it
    /// while the node could not answer is charged (`RL.SETTLE`) ahead of it on the same
    /// connection, so the node decides this check with the outage counted. Only to a node that
    /// answered its last call: a settle whose reply is late is taken as charged, so none is
    /// sent where it is likely to be (the debt stays owed until the node answers again).
    fn check_upstream(
        &self,
        node: Arc<Node>,
        req: &Request,
        key: Bytes,
        check: PlainCheck,
        batch: &mut Batch,
    ) {
        if let Some(debt) = self.client.take_debt(&key) {
            if node.answering() {
                let frame = debt.frame(&key);
                let then = Then::Settle {
                    key: key.clone(),
                    debt,
                };
                batch.upstream_frame(node.clone(), &frame, then);
            } else {
                self.client.settled(&key, debt, Settled::Lost);
            }
        }
        batch.upstream(node, req, Then::Check { key, check });
    }

    /// `RL.HIT name subject [COST n]`, `RL.HITS subject rule... [COST n]`, `RL.HITS KEYS key
    /// limit period... [COST n]`: forwarded; the plan says what each rule's fail mode answers.
    fn hits(self: &Arc<Self>, req: &Request, multi: bool, batch: &mut Batch) {
        let args: Vec<&[u8]> = req.args_from(1).collect();
        let (body, cost) = match args.len() {
            n if n >= 2 && args[n - 2].eq_ignore_ascii_case(b"COST") => (
                &args[..n - 2],
                sluice_core::spec::parse_u64(args[n - 1]).unwrap_or(1),
            ),
            _ => (&args[..], 1),
        };
        let checks = if !multi {
            self.rule_checks(body.get(1).copied().unwrap_or_default(), &body[..1])
        } else if body
            .first()
            .is_some_and(|a| a.eq_ignore_ascii_case(b"KEYS"))
        {
            keys_checks(&body[1..], self.default_mode)
        } else {
            self.rule_checks(body.first().copied().unwrap_or_default(), &body[1..])
        };
        let then = match checks {
            Some(checks) if !checks.is_empty() => Then::Hits {
                plan: HitPlan {
                    checks,
                    cost,
                    multi,
                },
                req: req.clone(),
            },
            // A rule the sidecar does not know, or arguments the node will refuse itself.
            _ => Then::Raw { req: req.clone() },
        };
        self.forward(req, then, batch);
    }

    /// The checks of `subject` under each named rule; `None` if one is not known here.
    fn rule_checks(&self, subject: &[u8], names: &[&[u8]]) -> Option<Vec<rules::Check>> {
        names
            .iter()
            .map(|name| {
                let rule = self.rules.get(name)?;
                Some((
                    bucket_key(name, subject),
                    name.to_vec(),
                    rule.limit,
                    rule.shadow,
                ))
            })
            .collect()
    }

    /// `RL.RULE GET|LIST|HISTORY`: read from a node (the one that owns the name's slot);
    /// rules are written on the nodes, or in their rules file or etcd.
    fn rule(self: &Arc<Self>, req: &Request, batch: &mut Batch) {
        let sub = req.arg(1).unwrap_or_default().to_ascii_uppercase();
        match sub.as_slice() {
            b"GET" => self.forward(req, Then::RuleGet { req: req.clone() }, batch),
            b"LIST" | b"HISTORY" => self.forward(req, Then::Raw { req: req.clone() }, batch),
            _ => batch.error(&format!(
                "ERR sluice proxy reads rules (RL.RULE GET, LIST, HISTORY); '{}' is done on the nodes, or in their rules file or etcd",
                String::from_utf8_lossy(&sub)
            )),
        }
    }

    fn info(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::from("# Proxy\r\n");
        let c = &self.client;
        let _ = write!(
            s,
            "proxy_version:{}\r\ntopology:{:?}\r\ndeadline_ms:{}\r\ngateways:{}\r\ndefault_fail_mode:{}\r\nrules_known:{}\r\nloading:0\r\n",
            env!("CARGO_PKG_VERSION"),
            c.config().topology,
            c.config().deadline.as_millis(),
            c.config().gateways,
            self.default_mode.name(),
            self.rules.len()
        );
        s.push_str("\r\n# Upstreams\r\n");
        for (i, u) in c.upstreams().iter().enumerate() {
            let state = match u.reachable {
                Some(true) => "up",
                Some(false) => "down",
                None => "unknown",
            };
            let _ = write!(
                s,
                "upstream{i}:addr={},breaker={},answered={},failed={},state={state},went_down={},came_back={}\r\n",
                u.addr,
                u.breaker.name(),
                u.answered,
                u.failed,
                u.went_down,
                u.came_back
            );
        }
        s.push_str("\r\n# Decisions\r\n");
        for (name, n) in Source::NAMES.iter().zip(c.decisions()) {
            let _ = write!(s, "decisions_{name}:{n}\r\n");
        }
        let (local, blocked, approx) = c.local_keys();
        let _ = write!(
            s,
            "checks_allowed:{}\r\nchecks_denied:{}\r\nnode_calls:{}\r\nlocal_buckets:{local}\r\nblocked_keys:{blocked}\r\napprox_keys:{approx}\r\n",
            self.allowed.load(Ordering::Relaxed),
            self.denied.load(Ordering::Relaxed),
            c.node_calls()
        );
        s
    }
}

/// `RL.HITS KEYS key limit period ...`: plain buckets with the sidecar's default fail mode;
/// `None` if a triple does not parse (the node will say why).
fn keys_checks(triples: &[&[u8]], mode: FailMode) -> Option<Vec<rules::Check>> {
    if triples.is_empty() || !triples.len().is_multiple_of(3) {
        return None;
    }
    triples
        .chunks(3)
        .map(|t| {
            let limit = sluice_core::spec::parse_u64(t[1]).filter(|&l| l > 0)?;
            let period = sluice_core::spec::parse_period(t[2]).ok()?;
            let limit = Limit::new(limit, Duration::from_nanos(period.0)).fail_mode(mode);
            Some((t[0].to_vec(), t[0].to_vec(), limit, false))
        })
        .collect()
}

/// An RL.CHECK the node can answer as it is: key, limit and period, and none of the options
/// that change what the sidecar does (`DRY` is forwarded, `APPROX` and `SPLIT` are the
/// library's). An option's value is a number or a name, never one of these words.
fn is_plain_check(req: &Request) -> bool {
    req.len() >= 4
        && !req.args_from(4).any(|a| {
            a.eq_ignore_ascii_case(b"DRY")
                || a.eq_ignore_ascii_case(b"APPROX")
                || a.eq_ignore_ascii_case(b"SPLIT")
        })
}

type Parsed = (bytes::Bytes, Limit, u64, bool);

pub(crate) fn parse_rl_check(req: &Request, default_mode: FailMode) -> Result<Parsed, String> {
    let err = |e: SpecError| format!("ERR {e}");
    let key = req.arg_bytes(1).ok_or_else(|| err(SpecError::Arity))?;
    let spec = CheckArgs::parse(req.args_from(2)).map_err(err)?;
    spec.params().map_err(err)?;
    if spec.period.0 % 1_000_000 != 0 {
        return Err("ERR period must be whole milliseconds".into());
    }
    let mut limit = Limit::new(spec.limit, Duration::from_nanos(spec.period.0))
        .algo(spec.algo)
        .fail_mode(spec.fail_mode.unwrap_or(default_mode));
    limit.burst = spec.burst;
    if let Some(k) = spec.split {
        limit = limit.split(u32::try_from(k).map_err(|_| "ERR SPLIT is too large")?);
    }
    if let Some(ms) = spec.approx_ms {
        limit = limit.approximate(Duration::from_millis(ms), 0);
    }
    Ok((key, limit, spec.cost, spec.dry))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Parsed, String> {
        parse_rl_check(&Request::from_args(args), FailMode::Open)
    }

    #[test]
    fn gateway_options_are_taken_and_validated() {
        let (key, l, cost, dry) = parse(&[
            "RL.CHECK", "k", "100", "1m", "BURST", "150", "COST", "3", "FAILMODE", "local",
            "SPLIT", "4", "APPROX", "50",
        ])
        .unwrap();
        assert_eq!(&key[..], b"k");
        assert_eq!((l.limit, l.burst, cost, dry), (100, Some(150), 3, false));
        assert_eq!(l.period, Duration::from_secs(60));
        assert_eq!(l.fail_mode, FailMode::Local);
        assert_eq!(l.split, 4);
        assert_eq!(l.approximate.unwrap().sync_every, Duration::from_millis(50));
        assert!(parse(&["RL.CHECK", "k", "10", "1s", "DRY"]).unwrap().3);
        for bad in [
            &["RL.CHECK", "k", "10", "1s", "FAILMODE", "maybe"][..],
            &["RL.CHECK", "k", "10", "1s", "SPLIT", "0"],
            &["RL.CHECK", "k", "10", "1s", "SPLIT", "11"],
            &["RL.CHECK", "k", "10", "1s", "BURST", "5", "SPLIT", "6"],
            &["RL.CHECK", "k", "10", "1s", "APPROX"],
            &["RL.CHECK", "k", "0", "1s"],
            &["RL.CHECK", "k", "10", "1x"],
            &["RL.CHECK", "k", "10", "1s", "COST", "11"],
            &["RL.CHECK", "k", "10", "1s", "NOPE"],
        ] {
            assert!(parse(bad).unwrap_err().starts_with("ERR"), "{bad:?}");
        }
    }
}
