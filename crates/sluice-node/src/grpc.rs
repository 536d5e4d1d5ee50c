//! `--grpc-port P`: the node's side of Envoy's rate limit service, which `sluice-grpc` serves.
//!
//! [`Front`] is what the service calls ([`sluice_grpc::Node`]): a call logs in as the HTTP
//! front's requests do ([`crate::http::login`]); each descriptor's check is an `RL.CHECK` of its
//! store key (`envoy:domain|key_value...`, see [`sluice_envoy::service`]) and must pass the ACL
//! as that command would (the user's bit for `rl.check` and its key patterns for a write of that
//! key, so a restricted user needs `~envoy:*`, or narrower), the slot check and the role check,
//! then this node's store (`ALGO FIXED` unless the config's `algorithm` says otherwise). The
//! counters go to the last [`crate::stats`] slot, which the gRPC thread owns (one current-thread
//! runtime, so one writer); the metrics registry keeps the rule names of the config now loaded.
//!
//! [`start`] runs [`sluice_grpc::serve`] on a thread of its own, over plain TCP or this node's
//! TLS (`--grpc-tls yes`), and in cluster mode with a client seeded with this node (over TLS
//! with `--tls-cluster yes`) to forward checks of keys other nodes own.

use std::collections::HashSet;
use std::io;
use std::net::TcpListener as StdListener;
use std::sync::Arc;
use std::time::Duration;

use sluice_core::{Decision, Nanos, Params};
use sluice_envoy::service::{Check, Headers, Verdict};
use sluice_grpc::{Checked, EnvoyConfig, Incoming, Service};

use crate::acl::User;
use crate::cmd;
use crate::shared::Shared;

/// The node as the gRPC service sees it.
#[derive(Debug)]
pub struct Front {
    pub(crate) shared: Arc<Shared>,
}

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
    let service = service(shared.clone(), config);
    crate::thread::runtime_thread("sluice-grpc", move || serve(listener, service, shared))
}

/// The service on `shared` with `config` (none: no descriptor has a limit), before it serves.
/// The fuzz target `grpc_request` calls it in-process.
pub fn service(shared: Arc<Shared>, config: Option<EnvoyConfig>) -> Service<Front> {
    let headers = match shared.config.envoy_headers.as_str() {
        "ratelimit" => Headers::RateLimit,
        "x-ratelimit" => Headers::XRateLimit,
        _ => Headers::Off,
    };
    Service::new(Arc::new(Front { shared }), config, headers)
}

async fn serve(listener: StdListener, service: Service<Front>, shared: Arc<Shared>) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => return sluice_log::log(&format!("grpc: cannot register its listener: {e}")),
    };
    let forward = shared.cluster.is_some().then(|| forward_config(&shared));
    let mut shutdown = shared.shutdown_signal();
    let stop = async move {
        let _ = shutdown.wait_for(|stop| *stop).await;
    };
    let tls = (shared.config.grpc_tls)
        .then(|| shared.tls.as_ref().map(|t| t.with_alpn(b"h2")))
        .flatten();
    let incoming = match tls {
        Some(config) => Incoming::Tls(crate::tls::accept_tls(listener, config)),
        None => Incoming::Tcp(listener),
    };
    sluice_grpc::serve(service, incoming, forward, stop).await;
}

/// The client config that forwards checks of other nodes' keys: this node is the seed, the
/// client learns the slot map from it and follows MOVED.
fn forward_config(shared: &Shared) -> sluice_client::Config {
    let mut me = shared.local_addr;
    if me.ip().is_unspecified() {
        me.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    let mut config =
        sluice_client::Config::new(sluice_client::Topology::Cluster(vec![me.to_string()]));
    // `--tls-cluster yes`: forwarded checks go over TLS, from this node's TLS port (the nodes
    // then report their TLS ports to this client).
    if let (Some(tls), true, Some(port)) = (
        &shared.tls,
        shared.config.tls_cluster,
        shared.config.tls_port,
    ) {
        me.set_port(port);
        config.topology = sluice_client::Topology::Cluster(vec![me.to_string()]);
        config.tls = Some(tls.client.clone());
    }
    config.auth = crate::cluster::adopt::peer_credentials(shared).map(Arc::new);
    config
}

impl sluice_grpc::Node for Front {
    type User = Arc<User>;
    type Call = Option<Arc<crate::cluster::View>>;

    fn login(&self, authorization: Option<&[u8]>) -> Option<Arc<User>> {
        crate::http::login(&self.shared, authorization)
    }

    fn may_check(&self, user: &Arc<User>) -> Result<(), String> {
        let rl_check = cmd::lookup(b"rl.check").map(cmd::row);
        match rl_check.is_some_and(|row| user.allows(row)) {
            true => Ok(()),
            false => Err(cmd::noperm("rl.check")),
        }
    }

    fn now(&self) -> Nanos {
        self.shared.clock.now()
    }

    fn check(&self, view: &mut Self::Call, user: &Arc<User>, c: &Check<'_>, now: Nanos) -> Checked {
        let shared = &*self.shared;
        // The key is the user's to write first, as RL.CHECK's would be.
        if !user.may_touch(c.key, true) {
            return Checked::Decided(Err(cmd::NOPERM_KEY.into()));
        }
        // From the slot check to the store, as a worker's batch: a slot pause waits for it.
        let _batch = (shared.cluster.as_ref()).map(|cl| cl.batch(shared.stats.grpc_slot()));
        let decided: Result<Decision, String> =
            match cmd::may_serve(shared, view, false, std::iter::once(c.key), true) {
                Err(cmd::Refusal::Redirect(_)) => return Checked::Elsewhere,
                Err(cmd::Refusal::ReadOnly) => {
                    Err("READONLY this node is a read-only replica".into())
                }
                Err(cmd::Refusal::NoReplicas) => {
                    Err("NOREPLICAS Not enough good replicas to write.".into())
                }
                Ok(()) => {
                    let params = Params {
                        limit: c.limit,
                        period: c.period,
                        burst: c.limit,
                        cost: c.cost,
                    };
                    let ahead = sluice_store::Ahead::NONE;
                    cmd::rl_check::check_key(shared, c.key, ahead, c.algo, &params, now, false)
                        .map_err(|e| cmd::CmdError::from(e).text("rl.check"))
                }
            };
        Checked::Decided(decided)
    }

    fn config_loaded(&self, rule_names: HashSet<String>) {
        let shared = &self.shared;
        shared.stats.set_envoy_rules(rule_names);
        shared
            .stats
            .retire_rules(|name| shared.rules.get(name).is_some());
    }

    fn counted(&self, verdicts: Option<&[Verdict]>) {
        let stats = &self.shared.stats;
        let slot = stats.slot(stats.grpc_slot());
        let now = self.shared.clock.now();
        match verdicts {
            Some(verdicts) => {
                for v in verdicts {
                    let rule = stats.rule_id(&v.rule);
                    slot.check(rule, v.algo, &v.decision, v.shadow, &v.key, now);
                }
            }
            None => slot.fail(cmd::SHOULD_RATE_LIMIT_ROW),
        }
    }

    fn timed(&self, elapsed: Duration) {
        let stats = &self.shared.stats;
        stats
            .slot(stats.grpc_slot())
            .time(cmd::SHOULD_RATE_LIMIT_ROW, 1, elapsed);
    }
}
