//! # sluice-grpc — `--grpc-port`: Envoy's rate limit service (`ShouldRateLimit`) over gRPC
//!
//! A program of its own in front of a node: tonic's server, the config directory and its reload,
//! the forwarding of checks another node owns, and the mapping of failures to gRPC statuses.
//! The matching and the answer are [`sluice_envoy::service`]'s. What it asks of the node is the
//! [`Node`] trait: log a caller in, check one descriptor as `RL.CHECK` would, count what
//! happened. `sluice-node` implements it (`sluice_node::grpc`) and starts the service's thread;
//! nothing here knows the node's state, its command table or its ACL.
//!
//! # Config
//! `--envoy-config DIR` ([`EnvoyConfig`]) is polled every second and reloaded when a file
//! appears, goes or changes; a config that does not load is logged and the previous one stays.
//! Each load tells the node the rule names it counts under ([`Node::config_loaded`]).
//!
//! # Cluster
//! A descriptor key another node owns ([`Checked::Elsewhere`]) is forwarded to its owner as an
//! `RL.CHECK` through [`sluice_client`] (the sidecar's engine: slot map from `CLUSTER SLOTS`,
//! `MOVED` followed, one pipelined connection per node, a deadline of [`FORWARD_DEADLINE`]), so
//! Envoy may call any node.
//!
//! # Errors
//! As gRPC statuses Envoy's `failure_mode_deny` acts on: no or wrong credentials are
//! `UNAUTHENTICATED`; a user the node refuses is `PERMISSION_DENIED` with Redis's `NOPERM` text;
//! a bad request (empty or oversized domain, descriptors past the bounds of
//! [`sluice_envoy::service`]) is `INVALID_ARGUMENT`; a check that cannot be made (a read-only
//! replica, a full store, an owner that does not answer a forwarded check in time) is
//! `UNAVAILABLE`.
//!
//! # Invariants
//! - The service reads no clock for its decisions: `now` is the node's ([`Node::now`]), once a
//!   call. It times a call with [`Instant`] for the latency histogram only.
//! - It spawns no thread: the node runs [`serve`] on a runtime of its own choosing.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::RwLock;
use sluice_core::{Decision, Nanos};
use sluice_envoy::Config;
use sluice_envoy::pb::{
    RateLimitRequest, RateLimitResponse, RateLimitService, RateLimitServiceServer,
};
use sluice_envoy::service::{CallError, Check, Headers, Verdict, should_rate_limit};
use tonic::{Request, Response, Status};

/// How often the config directory is looked at for changes.
const RELOAD_EVERY: Duration = Duration::from_secs(1);

/// How long a forwarded check may take before the call answers `UNAVAILABLE`.
pub const FORWARD_DEADLINE: Duration = Duration::from_millis(200);

/// The node's side of the service: the narrow surface the front calls.
pub trait Node: Send + Sync + 'static {
    /// A caller logged in.
    type User: Send + Sync;
    /// What one call's checks share (the node's view of the cluster, looked up once a call).
    type Call: Default + Send;

    /// The user an `authorization` value (`Bearer <password>` for `default`, `Basic
    /// base64(user:password)`) logs in as; without one, `default` when it needs no password.
    /// `None`: `UNAUTHENTICATED`.
    fn login(&self, authorization: Option<&[u8]>) -> Option<Self::User>;

    /// Whether `user` may run `RL.CHECK` at all; `Err` is the `NOPERM` text.
    fn may_check(&self, user: &Self::User) -> Result<(), String>;

    /// The node's clock, read once a call.
    fn now(&self) -> Nanos;

    /// One descriptor's check as `RL.CHECK` of its key by `user` would make it: the key's ACL,
    /// the node's role and the slot's owner first, then the store. Synchronous: it holds a
    /// shard lock for one check only.
    fn check(
        &self,
        call: &mut Self::Call,
        user: &Self::User,
        check: &Check<'_>,
        now: Nanos,
    ) -> Checked;

    /// The config now loaded counts under `rule_names` (a config replaced: its names are gone).
    fn config_loaded(&self, rule_names: std::collections::HashSet<String>);

    /// One call's outcome, for the counters: its verdicts, or `None` when the call failed.
    fn counted(&self, verdicts: Option<&[Verdict]>);

    /// One call's duration, login to answer.
    fn timed(&self, elapsed: Duration);
}

/// What became of one descriptor's check on this node.
#[derive(Debug)]
pub enum Checked {
    /// Decided here (or refused: the error is the text the call answers `UNAVAILABLE` with, or
    /// `PERMISSION_DENIED` when it starts with `NOPERM`).
    Decided(Result<Decision, String>),
    /// Another node owns the key: forward the check to it.
    Elsewhere,
}

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

    fn rule_names(&self) -> std::collections::HashSet<String> {
        self.current.read().rule_names()
    }
}

/// The gRPC service: the node, the config and, in a cluster, the client that forwards checks.
#[derive(Debug)]
pub struct Service<N> {
    node: Arc<N>,
    config: Arc<EnvoyConfig>,
    headers: Headers,
    forward: Option<sluice_client::Client>,
}

impl<N: Node> Service<N> {
    /// The service in front of `node` with `config` (none: no descriptor has a limit),
    /// answering with `headers`. The fuzz target `grpc_request` calls it in-process.
    pub fn new(node: Arc<N>, config: Option<EnvoyConfig>, headers: Headers) -> Service<N> {
        Service {
            node,
            config: Arc::new(config.unwrap_or_else(EnvoyConfig::empty)),
            headers,
            forward: None,
        }
    }
}

/// Where calls come from: plain TCP, or TLS sessions already accepted (`--grpc-tls yes`).
#[derive(Debug)]
pub enum Incoming {
    Tcp(tokio::net::TcpListener),
    Tls(tokio::sync::mpsc::Receiver<(TlsStream, std::net::SocketAddr)>),
}

/// A TLS session on a TCP connection, as the node's acceptor hands it over.
pub type TlsStream = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;

/// Serves `service` on `incoming` until `stop` completes. `forward`: in a cluster, the client
/// config (seeded with this node) that checks of other nodes' keys go through.
pub async fn serve<N: Node>(
    mut service: Service<N>,
    incoming: Incoming,
    forward: Option<sluice_client::Config>,
    stop: impl std::future::Future<Output = ()>,
) {
    if let Some(mut config) = forward {
        config.deadline = FORWARD_DEADLINE;
        service.forward = Some(sluice_client::Client::connect(config).await);
    }
    let config = service.config.clone();
    let node = service.node.clone();
    node.config_loaded(config.rule_names());
    let reload = tokio::spawn(async move {
        let mut tick = tokio::time::interval(RELOAD_EVERY);
        loop {
            tick.tick().await;
            if config.reload_if_changed() {
                node.config_loaded(config.rule_names());
            }
        }
    });
    let server =
        tonic::transport::Server::builder().add_service(RateLimitServiceServer::new(service));
    let served = match incoming {
        Incoming::Tls(sessions) => {
            let incoming = tokio_stream::StreamExt::map(
                tokio_stream::wrappers::ReceiverStream::new(sessions),
                |(stream, peer)| Ok::<_, std::io::Error>(TlsConn { stream, peer }),
            );
            server.serve_with_incoming_shutdown(incoming, stop).await
        }
        Incoming::Tcp(listener) => {
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

/// A gRPC connection over TLS, as tonic serves it.
struct TlsConn {
    stream: TlsStream,
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

impl<N: Node> Service<N> {
    async fn answer(
        &self,
        user: &N::User,
        request: &RateLimitRequest,
    ) -> Result<RateLimitResponse, Status> {
        let node = &*self.node;
        node.may_check(user).map_err(Status::permission_denied)?;
        let config = self.config.current.read().clone();
        let now = node.now();
        let mut call = N::Call::default();
        let forward = self.forward.as_ref();
        let result = should_rate_limit(&config, request, now, self.headers, |c| {
            // Decided here, synchronously, unless the key is another node's: then the future
            // forwards a copy of the check to its owner.
            let step = match node.check(&mut call, user, c, now) {
                Checked::Decided(result) => Step::Done(result),
                Checked::Elsewhere => Step::Forward(Forwarded::of(c)),
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
        node.counted(result.as_ref().ok().map(|(_, verdicts)| &verdicts[..]));
        match result {
            Ok((response, _)) => Ok(response),
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
    Done(Result<Decision, String>),
    Forward(Forwarded),
}

/// A check for another node, owned so that it can wait for the owner's answer.
struct Forwarded {
    key: Vec<u8>,
    limit: u64,
    period: Nanos,
    cost: u64,
    algo: sluice_core::Algo,
}

impl Forwarded {
    fn of(c: &Check<'_>) -> Forwarded {
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
    async fn send(self, client: &sluice_client::Client) -> Result<Decision, String> {
        use sluice_resp::Value;
        let limit = self.limit.to_string();
        let period = format!("{}ms", self.period.0 / Nanos::PER_MS);
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
        let ms = |n: i64| u64::try_from(n).ok().map(Nanos::from_millis);
        Ok(Decision {
            allowed: allowed == 1,
            limit: u64::try_from(limit).unwrap_or(0),
            remaining: u64::try_from(remaining).unwrap_or(0),
            retry_after: ms(retry_after_ms),
            reset_after: ms(reset_after_ms).unwrap_or_default(),
        })
    }
}

#[tonic::async_trait]
impl<N: Node> RateLimitService for Service<N> {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let started = Instant::now();
        let authorization = request.metadata().get("authorization");
        let Some(user) = self.node.login(authorization.map(|v| v.as_bytes())) else {
            return Err(Status::unauthenticated(
                "authorization: Bearer <password> or Basic <user:password> required (WRONGPASS invalid username-password pair or user is disabled)",
            ));
        };
        let answer = self.answer(&user, request.get_ref()).await;
        self.node.timed(started.elapsed());
        answer.map(Response::new)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use sluice_envoy::pb::rate_limit_descriptor::Entry;
    use sluice_envoy::pb::rate_limit_response::Code;
    use sluice_envoy::pb::{RateLimitDescriptor, RateLimitService};
    use tonic::Code as Status;

    use super::*;

    /// A node without a store: what each check answers is set by the test, and what the service
    /// tells the node is written down.
    #[derive(Default)]
    struct FakeNode {
        refuse_rl_check: bool,
        answer: Mutex<Option<Checked>>,
        counted: Mutex<Vec<Option<usize>>>,
        timed: Mutex<usize>,
    }

    impl Node for FakeNode {
        type User = String;
        type Call = ();

        fn login(&self, authorization: Option<&[u8]>) -> Option<String> {
            (authorization == Some(b"Bearer right".as_slice())).then(|| "default".into())
        }

        fn may_check(&self, _user: &String) -> Result<(), String> {
            match self.refuse_rl_check {
                true => Err("NOPERM rl.check".into()),
                false => Ok(()),
            }
        }

        fn now(&self) -> Nanos {
            Nanos(1_000_000_000)
        }

        fn check(&self, _: &mut (), _: &String, check: &Check<'_>, _: Nanos) -> Checked {
            assert!(check.key.starts_with(b"envoy:"), "{:?}", check.key);
            match self.answer.lock().unwrap().take() {
                Some(answer) => answer,
                None => Checked::Decided(Ok(Decision {
                    allowed: true,
                    limit: check.limit,
                    remaining: check.limit - check.cost,
                    retry_after: None,
                    reset_after: Nanos::from_millis(1000),
                })),
            }
        }

        fn config_loaded(&self, _rule_names: std::collections::HashSet<String>) {}

        fn counted(&self, verdicts: Option<&[Verdict]>) {
            self.counted
                .lock()
                .unwrap()
                .push(verdicts.map(<[Verdict]>::len));
        }

        fn timed(&self, _elapsed: Duration) {
            *self.timed.lock().unwrap() += 1;
        }
    }

    const CONFIG: &str = "domain: api
descriptors:
  - key: user
    rate_limit:
      unit: second
      requests_per_unit: 5
";

    fn service(node: FakeNode) -> Service<FakeNode> {
        let config = Config::from_files([("api.yaml", CONFIG)]).expect("the config loads");
        let config = EnvoyConfig {
            dir: PathBuf::new(),
            current: RwLock::new(Arc::new(config)),
            seen: parking_lot::Mutex::new(Vec::new()),
        };
        Service::new(Arc::new(node), Some(config), Headers::Off)
    }

    fn call(
        service: &Service<FakeNode>,
        authorization: Option<&str>,
    ) -> Result<RateLimitResponse, tonic::Status> {
        let mut request = Request::new(RateLimitRequest {
            domain: "api".into(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![Entry {
                    key: "user".into(),
                    value: "bob".into(),
                }],
                limit: None,
                hits_addend: None,
            }],
            hits_addend: 1,
        });
        if let Some(value) = authorization {
            let value = value.parse().expect("metadata");
            request.metadata_mut().insert("authorization", value);
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        runtime
            .block_on(service.should_rate_limit(request))
            .map(Response::into_inner)
    }

    #[test]
    fn a_check_the_node_makes_is_answered_and_counted() {
        let service = service(FakeNode::default());
        let response = call(&service, Some("Bearer right")).expect("answered");
        assert_eq!(response.overall_code, Code::Ok as i32);
        assert_eq!(response.statuses[0].limit_remaining, 4);
        assert_eq!(*service.node.counted.lock().unwrap(), [Some(1)]);
        assert_eq!(*service.node.timed.lock().unwrap(), 1);
    }

    #[test]
    fn no_login_is_unauthenticated_and_nothing_is_checked() {
        let service = service(FakeNode::default());
        for authorization in [None, Some("Bearer wrong")] {
            let status = call(&service, authorization).expect_err("refused");
            assert_eq!(status.code(), Status::Unauthenticated);
        }
        assert!(service.node.counted.lock().unwrap().is_empty());
    }

    #[test]
    fn a_user_without_rl_check_is_permission_denied() {
        let service = service(FakeNode {
            refuse_rl_check: true,
            ..FakeNode::default()
        });
        let status = call(&service, Some("Bearer right")).expect_err("refused");
        assert_eq!(status.code(), Status::PermissionDenied);
        assert_eq!(status.message(), "NOPERM rl.check");
    }

    #[test]
    fn refusals_by_the_node_become_statuses_envoy_acts_on() {
        let cases = [
            (
                Checked::Decided(Err("NOPERM key".into())),
                Status::PermissionDenied,
            ),
            (
                Checked::Decided(Err("READONLY replica".into())),
                Status::Unavailable,
            ),
            // Another node's key, and no cluster client to forward it with.
            (Checked::Elsewhere, Status::Unavailable),
        ];
        for (answer, code) in cases {
            let service = service(FakeNode {
                answer: Mutex::new(Some(answer)),
                ..FakeNode::default()
            });
            let status = call(&service, Some("Bearer right")).expect_err("refused");
            assert_eq!(status.code(), code, "{status:?}");
            assert_eq!(*service.node.counted.lock().unwrap(), [None]);
        }
    }
}
