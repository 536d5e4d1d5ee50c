//! The state every thread shares: the store, the clock, counters, the client registry, the
//! replication state and the pub/sub registry.
//!
//! The composition root of the node's state: it holds each feature's state (replication,
//! cluster view, rules, persistence, stats, clients, pub/sub) and imports only those state
//! modules. The tasks that drive them (`repl::thread`, `cluster::control`, `persist::saver`,
//! `rules::etcd`, `rules::file`), the runtime (`server`), the connections (`conn`) and the
//! commands (`cmd`) sit above it; nothing below imports it back.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use parking_lot::RwLock;
use sluice_store::{Store, StoreConfig};
use tokio::sync::watch;

use crate::clients::Clients;
use crate::clock::Clock;
use crate::config::Config;
use crate::pubsub::PubSub;
use crate::repl::Repl;
use crate::stats::Stats;

/// State every thread shares.
#[derive(Debug)]
pub struct Shared {
    pub config: Config,
    pub store: Store,
    pub clock: Clock,
    pub stats: Stats,
    pub clients: Clients,
    pub repl: Repl,
    pub pubsub: PubSub,
    /// Cluster mode (`--cluster yes`): the slot table and migrations.
    pub cluster: Option<crate::cluster::Cluster>,
    /// This process's `run_id` (40 hex characters, new at every start, as Redis's).
    pub run_id: String,
    /// `maxclients`, changeable by CONFIG SET.
    pub maxclients: AtomicUsize,
    /// Worker threads serving their plain-TCP clients from an io_uring (INFO's
    /// `multiplexing_api`); the others use epoll.
    pub uring_threads: AtomicUsize,
    /// `timeout` in seconds (0: never), changeable by CONFIG SET.
    pub timeout_secs: AtomicU64,
    /// The password clients must AUTH with, if any (`CONFIG SET requirepass` changes it).
    pub requirepass: RwLock<Option<String>>,
    /// TLS (`--tls-port`, `--tls-replication`), if configured.
    pub tls: Option<crate::tls::Tls>,
    /// ACL users (`ACL SETUSER`, `AUTH user pass`, `--aclfile`).
    pub acl: crate::acl::Acl,
    /// The records of `RL.LEASE`.
    pub token_leases: crate::token_leases::TokenLeases,
    /// Named rules (`RL.RULE`, `RL.HIT`).
    pub rules: crate::rules::Rules,
    /// The etcd thread's handle, with `--rules-etcd` (set once it starts).
    pub rules_etcd: std::sync::OnceLock<crate::rules::handle::Handle>,
    /// What this node knows of the regions' split of GLOBAL rules (`--region`).
    pub regions: crate::regions::Regions,
    /// Snapshots on disk (`--dir`).
    pub persist: crate::persist::Persist,
    /// Settings CONFIG SET changes that no feature above holds.
    pub live: crate::live::Live,
    /// SLOWLOG's entries and threshold.
    pub slowlog: crate::slowlog::SlowLog,
    /// INFO errorstats.
    pub errors: crate::errorstats::ErrorStats,
    /// The settings' values at start, by name, as CONFIG GET gives them: CONFIG REWRITE adds a
    /// line to the config file only for a setting changed since (set once by the server).
    pub settings_at_start: std::sync::OnceLock<Vec<(String, String)>>,
    /// The address actually bound (the port is resolved when `--port 0`).
    pub local_addr: SocketAddr,
    shutdown: watch::Sender<bool>,
}

impl Shared {
    /// The state of a server about to serve on `local_addr` (also used without sockets by the
    /// in-process `Executor`).
    ///
    /// # Errors
    /// If cluster mode is on and its config file cannot be read or written.
    /// `command_rows` sizes the per-command counters: the command table's rows (it lives
    /// above, in `cmd`) and Envoy's; `commands` is the table as ACL rules name it.
    pub fn new(
        config: Config,
        local_addr: SocketAddr,
        command_rows: usize,
        commands: crate::acl::Catalog,
    ) -> std::io::Result<Shared> {
        let (shutdown, _) = watch::channel(false);
        // Process-wide, as the script cache is (see `script::busy`).
        crate::script::busy::set_threshold_ms(config.busy_reply_threshold);
        let cluster = if config.cluster {
            let file = config.cluster_config_file.clone().unwrap_or_else(|| {
                std::path::PathBuf::from(format!("nodes-{}.conf", local_addr.port()))
            });
            Some(crate::cluster::Cluster::open(file, config.threads())?)
        } else {
            None
        };
        Ok(Shared {
            cluster,
            store: Store::new(StoreConfig {
                shards: config.shards(),
                maxmemory: usize::try_from(config.maxmemory).unwrap_or(usize::MAX),
                policy: config.maxmemory_policy,
            }),
            clock: Clock::new(),
            stats: Stats::new(config.threads(), command_rows),
            clients: Clients::default(),
            repl: Repl::new(&config),
            pubsub: PubSub::default(),
            run_id: crate::repl::random_id(),
            maxclients: AtomicUsize::new(config.maxclients),
            uring_threads: AtomicUsize::new(0),
            timeout_secs: AtomicU64::new(config.timeout),
            requirepass: RwLock::new(config.requirepass.clone()),
            tls: crate::tls::Tls::from_config(&config)?,
            acl: crate::acl::Acl::new(
                commands,
                config.requirepass.as_deref(),
                config.aclfile.clone(),
            ),
            persist: crate::persist::Persist::new(config.dir.clone()),
            token_leases: crate::token_leases::TokenLeases::default(),
            rules: crate::rules::Rules::new(match (&config.rules, &config.rules_etcd) {
                (Some(path), _) => crate::rules::Source::File(path.clone()),
                (None, Some(_)) => crate::rules::Source::Etcd,
                (None, None) => crate::rules::Source::Memory,
            }),
            rules_etcd: std::sync::OnceLock::new(),
            live: crate::live::Live::new(&config),
            slowlog: crate::slowlog::SlowLog::new(
                config.slowlog_log_slower_than,
                config.slowlog_max_len,
            ),
            errors: crate::errorstats::ErrorStats::default(),
            settings_at_start: std::sync::OnceLock::new(),
            regions: crate::regions::Regions::default(),
            local_addr,
            shutdown,
            config,
        })
    }

    /// The idle timeout, if one is set.
    pub fn idle_timeout(&self) -> Option<Duration> {
        match self.timeout_secs.load(Relaxed) {
            0 => None,
            s => Some(Duration::from_secs(s)),
        }
    }

    /// When a connection last active at `last_active` is closed as idle: never without a
    /// timeout, nor when the deadline is past what an `Instant` can hold (the timeout is
    /// bounded, `config::MAX_SECONDS`, but a deadline must never be able to panic).
    pub fn idle_deadline(&self, last_active: std::time::Instant) -> Option<std::time::Instant> {
        last_active.checked_add(self.idle_timeout()?)
    }

    /// Asks every thread to stop accepting, finish the replies in flight and exit.
    pub fn shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    pub fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }
}
