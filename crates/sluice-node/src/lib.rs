//! # sluice-node — the Sluice node, as a library
//!
//! A Redis-protocol server whose native command is `RL.CHECK`.
//!
//! # Layout: state below, tasks above
//!
//! State (no module here imports [`Shared`]):
//! - [`acl`]: ACL users, their passwords and the bitsets of the commands each may run.
//! - [`config`]: the clap `Config` (flags and defaults).
//! - [`clock`]: the process clock (monotonic, anchored to Unix time).
//! - [`clients`], [`stats`], [`pubsub`] (with [`glob`]): the client registry, the counters,
//!   the channels and patterns.
//! - [`repl`]: replication state ([`repl::Repl`]): backlog, replicas, the link's state.
//! - [`cluster`]: this node's view of the slot table and the slot check.
//! - [`rules`]: named rules (versions, floors, shadow, rollout); [`rules::handle`] is the
//!   commands' side of the etcd thread.
//! - [`persist`]: snapshots on disk (`--dir`).
//! - [`jobs`]: a queue of work for one background loop.
//! - [`conffile`]: the config file (redis.conf syntax), its reading and its rewrite.
//! - [`live`], [`slowlog`], [`errorstats`]: settings CONFIG SET changes, SLOWLOG's entries,
//!   INFO errorstats' counts.
//! - [`token_leases`]: the records of `RL.LEASE` (leases of tokens) and their expiry.
//! - [`tls`]: TLS settings, the certificate that follows its files, the replica's TLS relay.
//! - [`regions`]: what this node knows of the split of GLOBAL rules between regions
//!   ([`regions::share`] is its arithmetic).
//! - [`script`]: Lua scripting: the script cache, a Lua state per worker thread, the sandbox
//!   and the RESP conversions; its commands run through a host the `EVAL` command gives it.
//!
//! The composition: [`shared`] holds every feature's state ([`Shared`]) and imports only the
//! modules above.
//!
//! Tasks and fronts (they hold an `Arc<Shared>`):
//! - [`repl::thread`] with [`repl::primary`] and [`repl::replica`]: the replication thread.
//! - [`cluster::control`] with [`cluster::adopt`], [`cluster::peers`], [`cluster::etcd`] and
//!   [`cluster::migrate`]: the cluster control thread.
//! - [`persist::saver`], [`rules::file`], [`rules::etcd`]: the saver and the rules' watchers.
//! - [`regions::task`]: the region thread (etcd lease, election, demand, shares).
//! - [`cmd`]: the commands (one file each), the table, the dispatcher and the slot check.
//! - [`conn`]: the connection loop (read, decode every frame, execute, write once), over
//!   [`wire`] (plain TCP or TLS).
//! - [`uring`]: the io_uring connection loop (`--io uring`) for plain-TCP clients, sharing
//!   [`conn`]'s batch and handing it the connections it does not carry.
//! - [`server`]: thread-per-core runtime, SO_REUSEPORT listeners, housekeeping, shutdown.
//! - [`peer`]: a small async RESP client for node-to-node calls.
//! - [`metrics`]: Prometheus over HTTP.
//! - [`grpc`]: the node's side of Envoy's rate limit service ([`grpc::Front`], the
//!   `sluice_grpc::Node` the crate `sluice-grpc` serves).
//! - [`http`]: the seed's API over HTTP (`--http-port`): checks, gateway auth, rules.
//! - [`exec`]: the in-process executor (commands without a socket) for tests and fuzzing.
//! - [`thread`]: [`runtime_thread`], the thread with a runtime of its own each task above runs
//!   on.
//! - [`sentinel_start`]: before the server exists, asks the Sentinels (`--sentinel`) who the
//!   primary is and settles this node's role.
//!
//! The `sluice` binary (crate `sluice`) only parses flags and calls [`run`]; everything testable
//! lives here. The sidecar and the admin tool are crates of their own (`sluice-proxy`,
//! `sluice-admin`).

pub mod acl;
pub mod clients;
pub mod clock;
pub mod cluster;
pub mod cmd;
pub mod conffile;
pub mod config;
pub mod conn;
pub mod errorstats;
pub mod exec;
pub mod glob;
pub mod grpc;
pub mod http;
pub mod jobs;
pub mod lazyfree;
pub mod live;
pub mod metrics;
pub mod peer;
pub mod persist;
pub mod pubsub;
pub mod rand;
pub mod regions;
pub mod repl;
pub mod rule_id;
pub mod rules;
pub mod script;
pub mod sentinel_start;
pub mod server;
pub mod shared;
pub mod slowlog;
pub mod stats;
pub mod thread;
pub mod tls;
pub mod token_leases;
pub mod top;
pub mod uring;
pub mod wire;

use std::io;
use std::sync::{Arc, mpsc};
use std::task::Poll;

use sluice_log::service;

pub use cmd::REDIS_COMPAT_VERSION;
pub use config::Config;
pub use exec::Executor;
pub use server::Server;
pub use shared::Shared;
pub use thread::runtime_thread;

/// Runs a server until `shutdown` completes or a `SHUTDOWN` command arrives.
///
/// `shutdown` is polled once before the server starts accepting, so whatever it sets up on its
/// first poll (signal handlers, in the binary) is in place before the ready line is logged.
pub fn run(
    config: Config,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let (armed_tx, armed_rx) = mpsc::channel::<()>();
    let (server_tx, server_rx) = mpsc::channel::<Arc<Shared>>();
    std::thread::Builder::new()
        .name("sluice-signals".into())
        .spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                let _ = armed_tx.send(());
                return;
            };
            rt.block_on(async move {
                let mut fut = std::pin::pin!(shutdown);
                let fired =
                    std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx).is_ready())).await;
                let _ = armed_tx.send(());
                if !fired {
                    fut.await;
                }
            });
            if let Ok(shared) = server_rx.recv() {
                shared.shutdown();
            }
        })?;
    let _ = armed_rx.recv();
    sluice_etcd::use_tls(&config.etcd_tls).map_err(io::Error::other)?;
    let mut config = config;
    sentinel_start::settle(&mut config);
    let server = Server::start(config)?;
    let _ = server_tx.send(server.shared.clone());
    let shared = server.shared.clone();
    if let Err(e) = service::write_pidfile(&shared.config.service) {
        server.shared.shutdown();
        server.join();
        return Err(io::Error::other(format!("cannot write --pidfile: {e}")));
    }
    sluice_log::log(&format!(
        "Sluice {} ready to accept connections on {} (threads={}, shards={})",
        env!("CARGO_PKG_VERSION"),
        server.local_addr(),
        shared.config.threads(),
        shared.store.shard_count()
    ));
    service::notify(&shared.config.service, "READY=1");
    server.join();
    service::remove_pidfile(&shared.config.service);
    sluice_log::log("Sluice stopped");
    Ok(())
}
