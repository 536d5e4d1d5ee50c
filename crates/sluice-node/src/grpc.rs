//! `--grpc-port P`: Envoy's rate limit service (`ShouldRateLimit`) on its own thread.
//!
//! The matching and the answer are [`sluice_envoy::service`]'s; this module supplies the check
//! (this node's store, RL.CHECK's semantics, `ALGO FIXED` unless the config's `algorithm`
//! says otherwise), the config (`--envoy-config DIR`, polled every second and reloaded when a
//! file changes; a config that does not load is logged and the previous one stays), and the
//! counters (the gRPC thread owns the last [`crate::stats`] slot: one current-thread runtime,
//! so one writer).
//!
//! In a cluster, a descriptor key another node owns is forwarded to its owner as an `RL.CHECK`
//! through [`sluice_client`] (the sidecar's engine: slot map from `CLUSTER SLOTS`, `MOVED`
//! followed, one pipelined connection per node, a deadline of [`FORWARD_DEADLINE`]), so Envoy
//! may call any node.
//!
//! # Who may call
//! A call logs in as the HTTP front's requests do ([`crate::http::login`]): its `authorization`
//! metadata is `Bearer <password>` for `default` or `Basic base64(user:password)`; without it,
//! it runs as `default` only when that user is on and `nopass`. Each descriptor's check is an
//! `RL.CHECK` of its store key (`envoy:domain|key_value...`, see [`sluice_envoy::service`]) and
//! must pass the ACL as that command would: the user's bit for `rl.check` and its key
//! patterns for a write of that key (so a restricted user needs `~envoy:*`, or narrower).
//!
//! Errors, as gRPC statuses Envoy's `failure_mode_deny` acts on: no or wrong credentials are
//! `UNAUTHENTICATED`; a user the ACL refuses is `PERMISSION_DENIED` with Redis's `NOPERM` text;
//! a bad request (empty or oversized domain, descriptors past the bounds of
//! [`sluice_envoy::service`]) is `INVALID_ARGUMENT`; a check that cannot be made (a read-only
//! replica, a full store at `--maxmemory-policy reject`, an owner that does not answer a
//! forwarded check in time) is `UNAVAILABLE`.
//!
//! The metrics registry keeps the rule names of the config now loaded (and forgets those of a
//! config replaced): see [`crate::stats`].

use std::io;
use std::net::TcpListener as StdListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::RwLock;
use sluice_core::Params;
use sluice_envoy::Config;
use sluice_envoy::pb::{
    RateLimitRequest, RateLimitResponse, RateLimitService, RateLimitServiceServer,
};
use sluice_envoy::service::{CallError, Headers, should_rate_limit};
use tonic::{Request, Response, Status};

use crate::acl::User;
use crate::cmd;
use crate::shared::Shared;

/// How often the config directory is looked at for changes.
const RELOAD_EVERY: Duration = Duration::from_secs(1);

/// The loaded config of `--envoy-config DIR`, and what its files looked like when loaded.
#[derive(Debug)]
pub struct EnvoyConfig {
    dir: PathBuf,
    current: RwLock<Arc<Config>>,
    seen: parking_lot::Mutex<Fingerprint>,
}

/// Each config file's name, length and modification time.
type Fingerprint = Vec<(PathBuf, u64, Option<SystemTime>)>;

fn fingerprint(dir: &Path) -> io::Result<Fingerprint> {
    Config::files_of(dir)?
        .into_iter()
        .map(|p| {
            let meta = std::fs::metadata(&p)?;
            Ok((p, meta.len(), meta.modified().ok()))
        })
        .collect()
}

impl EnvoyConfig {
    /// Loads `dir`; a config that does not load stops the start with its reason.
    pub fn open(dir: &Path) -> io::Result<EnvoyConfig> {
        let seen = fingerprint(dir)?;
        let config = Config::load_dir(dir).map_err(|e| {
            io::Error::new(io::ErrorKind::InvalidData, format!("--envoy-config: {e}"))
        })?;
        sluice_log::log(&format!(
            "Envoy config: {} domains from {}",
            config.domains(),
            dir.display()
        ));
        Ok(EnvoyConfig {
            dir: dir.to_path_buf(),
            current: RwLock::new(Arc::new(config)),
            seen: parking_lot::Mutex::new(seen),
        })
    }

    fn empty() -> EnvoyConfig {
        EnvoyConfig {
            dir: PathBuf::new(),
            current: RwLock::new(Arc::new(Config::default())),
            seen: parking_lot::Mutex::new(Vec::new()),
        }
    }

    /// Reloads the directory if a file appeared, went or changed since the last load; whether
    /// a new config is in place.
    fn reload_if_changed(&self) -> bool {
        if self.dir.as_os_str().is_empty() {
            return false;
        }
        let Ok(now) = fingerprint(&self.dir) else {
            return false;
        };
        let mut seen = self.seen.lock();
        if *seen == now {
            return false;
        }
        *seen = now;
        match Config::load_dir(&self.dir) {
            Ok(config) => {
                sluice_log::log(&format!(
                    "Envoy config reloaded: {} domains from {}",
                    config.domains(),
                    self.dir.display()
                ));
                *self.current.write() = Arc::new(config);
                true
            }
            Err(e) => {
                sluice_log::log(&format!(
                    "Envoy config not reloaded, the previous one stays: {e}"
                ));
                false
            }
        }
    }

    /// Tells the metrics registry which rule names the current config counts under, and drops
    /// the names no rule and no config has any more.
    fn register_rules(&self, shared: &Shared) {
        let names = self.current.read().rule_names();
        shared.stats.set_envoy_rules(names);
        shared
            .stats
            .retire_rules(|name| shared.rules.get(name).is_some());
    }
}

/// The gRPC service: the shared state and the config.
#[derive(Debug, Clone)]
pub struct Service {
    shared: Arc<Shared>,
    config: Arc<EnvoyConfig>,
    headers: Headers,
    /// In cluster mode: the client that forwards checks of keys other nodes own.
    forward: Option<sluice_client::Client>,
}

/// How long a forwarded check may take before the call answers `UNAVAILABLE`.
const FORWARD_DEADLINE: Duration = Duration::from_millis(200);

/// Starts the gRPC server on `listener` (already bound).
pub fn start(
    listener: StdListener,
    config: Option<EnvoyConfig>,
    shared: Arc<Shared>,
) -> io::Result<std::thread::JoinHandle<()>> {
    listener.set_nonblocking(true)?;
    if config.is_none() {
        sluice_log::log("WARNING: --grpc-port without --envoy-config: no descriptor has a limit");
    }
    let service = Service::new(shared, config);
    crate::runtime_thread("sluice-grpc", move || serve(listener, service))
}

impl Service {
    /// The service on `shared` with `config` (none: no descriptor has a limit), before it
    /// serves: in cluster mode, [`serve`] adds the client that forwards checks. The fuzz target
    /// `grpc_request` calls it in-process.
    pub fn new(shared: Arc<Shared>, config: Option<EnvoyConfig>) -> Service {
        let headers = match shared.config.envoy_headers.as_str() {
            "ratelimit" => Headers::RateLimit,
            "x-ratelimit" => Headers::XRateLimit,
            _ => Headers::Off,
        };
        Service {
            config: Arc::new(config.unwrap_or_else(EnvoyConfig::empty)),
            shared,
            headers,
            forward: None,
        }
    }
}

async fn serve(listener: StdListener, mut service: Service) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => return sluice_log::log(&format!("grpc: cannot register its listener: {e}")),
    };
    if service.shared.cluster.is_some() {
        // This node is the seed: the client learns the slot map from it and follows MOVED.
        let mut me = service.shared.local_addr;
        if me.ip().is_unspecified() {
            me.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        let mut config =
            sluice_client::Config::new(sluice_client::Topology::Cluster(vec![me.to_string()]));
        config.deadline = FORWARD_DEADLINE;
        // `--tls-cluster yes`: forwarded checks go over TLS, from this node's TLS port (the
        // nodes then report their TLS ports to this client).
        if let (Some(tls), true, Some(port)) = (
            &service.shared.tls,
            service.shared.config.tls_cluster,
            service.shared.config.tls_port,
        ) {
            me.set_port(port);
            config.topology = sluice_client::Topology::Cluster(vec![me.to_string()]);
            config.tls = Some(tls.client.clone());
        }
        config.auth = crate::cluster::adopt::peer_credentials(&service.shared).map(Arc::new);
        service.forward = Some(sluice_client::Client::connect(config).await);
    }
    let config = service.config.clone();
    let shared = service.shared.clone();
    config.register_rules(&shared);
    let reload = tokio::spawn(async move {
        let mut tick = tokio::time::interval(RELOAD_EVERY);
        loop {
            tick.tick().await;
            if config.reload_if_changed() {
                config.register_rules(&shared);
            }
        }
    });
    let mut shutdown = service.shared.shutdown_signal();
    let stop = async move {
        let _ = shutdown.wait_for(|stop| *stop).await;
    };
    let tls = (service.shared.config.grpc_tls)
        .then(|| service.shared.tls.as_ref().map(|t| t.with_alpn(b"h2")))
        .flatten();
    let server =
        tonic::transport::Server::builder().add_service(RateLimitServiceServer::new(service));
    let served = match tls {
        Some(config) => {
            let sessions = crate::tls::accept_tls(listener, config);
            let incoming = tokio_stream::StreamExt::map(
                tokio_stream::wrappers::ReceiverStream::new(sessions),
                |(stream, peer)| Ok::<_, std::io::Error>(TlsConn { stream, peer }),
            );
            server.serve_with_incoming_shutdown(incoming, stop).await
        }
        None => {
            let incoming =
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
            server.serve_with_incoming_shutdown(incoming, stop).await
        }
    };
    reload.abort();
    if let Err(e) = served {
        sluice_log::log(&format!("grpc: server stopped: {e}"));
    }
}

/// A gRPC connection over TLS (`--grpc-tls yes`), as tonic serves it.
struct TlsConn {
    stream: tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
    peer: std::net::SocketAddr,
}

impl tonic::transport::server::Connected for TlsConn {
    type ConnectInfo = std::net::SocketAddr;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.peer
    }
}

impl tokio::io::AsyncRead for TlsConn {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for TlsConn {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

impl Service {
    async fn answer(
        &self,
        user: &User,
        request: &RateLimitRequest,
    ) -> Result<RateLimitResponse, Status> {
        let shared = &*self.shared;
        let rl_check = cmd::lookup(b"rl.check").map(cmd::row);
        if !rl_check.is_some_and(|row| user.allows(row)) {
            return Err(Status::permission_denied(cmd::noperm("rl.check")));
        }
        let config = self.config.current.read().clone();
        let now = shared.clock.now();
        let mut view = None;
        let forward = self.forward.as_ref();
        let result = should_rate_limit(&config, request, now, self.headers, |c| {
            // Decided here, synchronously, unless the key is another node's: then the future
            // forwards a copy of the check to its owner. The key is the user's to write first,
            // as RL.CHECK's would be.
            let step = if !user.may_touch(c.key, true) {
                Step::Done(Err(cmd::NOPERM_KEY.into()))
            } else {
                match cmd::may_serve(shared, &mut view, false, std::iter::once(c.key), true) {
                    Err(cmd::Refusal::Redirect(_)) => Step::Forward(Forwarded::of(c)),
                    Err(cmd::Refusal::ReadOnly) => {
                        Step::Done(Err("READONLY this node is a read-only replica".into()))
                    }
                    Err(cmd::Refusal::NoReplicas) => {
                        Step::Done(Err("NOREPLICAS Not enough good replicas to write.".into()))
                    }
                    Ok(()) => {
                        let params = Params {
                            limit: c.limit,
                            period: c.period,
                            burst: c.limit,
                            cost: c.cost,
                        };
                        Step::Done(
                            shared
                                .store
                                .check(c.key, c.algo, &params, now, false)
                                .map_err(|e| cmd::CmdError::from(e).text("rl.check")),
                        )
                    }
                }
            };
            async move {
                match step {
                    Step::Done(result) => result,
                    Step::Forward(f) => match forward {
                        Some(client) => f.send(client).await,
                        None => Err("this node does not own the descriptor's key".into()),
                    },
                }
            }
        })
        .await;
        let slot = shared.stats.slot(shared.stats.grpc_slot());
        if result.is_err() {
            slot.fail(cmd::SHOULD_RATE_LIMIT_ROW);
        }
        match result {
            Ok((response, verdicts)) => {
                for v in verdicts {
                    slot.check(shared.stats.rule_id(&v.rule), v.algo, &v.decision, v.shadow);
                }
                Ok(response)
            }
            Err(CallError::InvalidArgument(why)) => Err(Status::invalid_argument(why)),
            Err(CallError::Unavailable(why)) if why.starts_with("NOPERM") => {
                Err(Status::permission_denied(why))
            }
            Err(CallError::Unavailable(why)) => Err(Status::unavailable(why)),
        }
    }
}

/// One descriptor's check, made here or by the key's owner.
enum Step {
    Done(Result<sluice_core::Decision, String>),
    Forward(Forwarded),
}

/// A check for another node, owned so that it can wait for the owner's answer.
struct Forwarded {
    key: Vec<u8>,
    limit: u64,
    period: sluice_core::Nanos,
    cost: u64,
    algo: sluice_core::Algo,
}

impl Forwarded {
    fn of(c: &sluice_envoy::service::Check<'_>) -> Forwarded {
        Forwarded {
            key: c.key.to_vec(),
            limit: c.limit,
            period: c.period,
            cost: c.cost,
            algo: c.algo,
        }
    }

    /// `RL.CHECK key limit <period>ms COST n ALGO a` on the key's owner: the check the owner
    /// would make for a gRPC caller of its own.
    async fn send(self, client: &sluice_client::Client) -> Result<sluice_core::Decision, String> {
        use sluice_resp::Value;
        let limit = self.limit.to_string();
        let period = format!("{}ms", self.period.0 / sluice_core::Nanos::PER_MS);
        let cost = self.cost.to_string();
        let args: [&[u8]; 8] = [
            b"RL.CHECK",
            &self.key,
            limit.as_bytes(),
            period.as_bytes(),
            b"COST",
            cost.as_bytes(),
            b"ALGO",
            self.algo.name().as_bytes(),
        ];
        let reply = client.command(&self.key, &args).await.map_err(|e| {
            format!("the node that owns the descriptor's key did not answer: {e:?}")
        })?;
        if let Value::Error(e) = &reply {
            return Err(format!("the key's owner answered: {e}"));
        }
        let fields = reply.ints();
        let Some([allowed, limit, remaining, retry_after_ms, reset_after_ms]) =
            fields.as_deref().and_then(|f| <[i64; 5]>::try_from(f).ok())
        else {
            return Err(format!("the key's owner answered {reply:?}"));
        };
        let ms = |n: i64| u64::try_from(n).ok().map(sluice_core::Nanos::from_millis);
        Ok(sluice_core::Decision {
            allowed: allowed == 1,
            limit: u64::try_from(limit).unwrap_or(0),
            remaining: u64::try_from(remaining).unwrap_or(0),
            retry_after: ms(retry_after_ms),
            reset_after: ms(reset_after_ms).unwrap_or_default(),
        })
    }
}

#[tonic::async_trait]
impl RateLimitService for Service {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let started = Instant::now();
        let authorization = request.metadata().get("authorization");
        let Some(user) = crate::http::login(&self.shared, authorization.map(|v| v.as_bytes()))
        else {
            return Err(Status::unauthenticated(
                "authorization: Bearer <password> or Basic <user:password> required (WRONGPASS invalid username-password pair or user is disabled)",
            ));
        };
        let answer = self.answer(&user, request.get_ref()).await;
        let slot = self.shared.stats.slot(self.shared.stats.grpc_slot());
        slot.time(cmd::SHOULD_RATE_LIMIT_ROW, 1, started.elapsed());
        answer.map(Response::new)
    }
}
