//! # sluice-client — the gateway side of Sluice
//!
//! A tokio client for Rust gateways, and the engine of the `sluice proxy` sidecar. It keeps what
//! a gateway needs besides the node's answer: a deadline per check (20 ms by default), a fail
//! mode when the node cannot answer in time, a cache of hot denied keys, key splitting for
//! whales, and approximate mode by leases of tokens, with computed bounds (never over the exact limiter).
//!
//! ```no_run
//! # async fn demo() -> Result<(), sluice_client::ReplyError> {
//! use std::time::Duration;
//! use sluice_client::{Client, Config, FailMode, Limit, Topology};
//!
//! // A node's address, or `unix:/run/sluice/sluice.sock` for its `--unixsocket`.
//! let client = Client::connect(Config::new(Topology::Single("127.0.0.1:6379".into()))).await;
//! let per_user = Limit::new(100, Duration::from_secs(60)).fail_mode(FailMode::Local);
//! let d = client.check(b"user:42", &per_user, 1).await?;
//! if !d.allowed {
//!     println!("retry in {} ms (answered by {:?})", d.retry_after_ms, d.source);
//! }
//! # Ok(()) }
//! ```
//!
//! # Layout
//! - Commands go out and replies come in through `sluice_resp::value`, the one RESP client
//!   codec (shared with the admin tool and the nodes' calls to each other).
//! - [`node`]: one node's multiplexed, pipelined connection, reconnect with backoff, and its
//!   circuit breaker; single calls (a decoded reply) and batches (their replies as bytes).
//! - [`raw`]: where a reply ends and RL.CHECK's fields, read in place (the sidecar's batches).
//! - [`limit`]: [`Limit`] and its options, [`Decision`] and its [`Source`], approximate mode's
//!   lease sizes and bounds.
//! - [`lease`]: in-flight leases, [`Client::acquire`] and the [`Lease`] guard that releases
//!   when dropped, with the fail modes.
//! - [`client`]: [`Client`]: routing (single node, cluster slots and MOVED, Sentinel), the
//!   check path, and its pieces for the sidecar's batches; `client::approx` (private):
//!   approximate mode's leases of tokens (`RL.LEASE`), syncs and waits, and the check's first step taken without
//!   waiting ([`Quick`]); `client::outage` (private): fail mode `local` across outages, the
//!   bucket each outage starts from and the [`Debt`] charged to the node after it.
//! - [`tls`]: the TLS client config for nodes' `--tls-port` (CA, and a client certificate).
//! - [`top`]: `RL.TOP` and `RL.RATES` replies read and merged across nodes (`sluice top`, the
//!   sidecar's `/dashboard`).
//! - [`rules`]: the named rules as a gateway learns them from the nodes (`RL.RULE LIST`/`GET`),
//!   each with its fail mode, scope, tier and route.
//! - [`allow`]: [`Client::allow`], `RL.ALLOW` with the rules' fail modes, split by slot in a
//!   cluster (a dry call per slot, then the consuming calls; the race that leaves).
//! - `local` (private): the bounded, expiring maps behind the local buckets, the blocked cache
//!   and approximate mode (leases of tokens).
//!
//! # Invariants
//! - A check answers within its deadline, whatever the node does (refuse, reset, half-open,
//!   garbage, silence, or an answer that it cannot decide now: READONLY, LOADING, NOREPLICAS,
//!   MASTERDOWN, CLUSTERDOWN); only the node's own refusal of the request (bad arguments,
//!   WRONGTYPE) is an `Err`.
//! - Replies are matched to requests in FIFO order per connection; a caller that gave up does
//!   not desynchronise anyone.
//! - Local state is bounded: every map expires its entries and holds at most
//!   `Config::max_local_keys`.

pub mod allow;
pub mod client;
pub mod lease;
pub mod limit;
mod local;
pub mod node;
pub mod raw;
pub mod rules;
pub mod tls;
pub mod top;

pub use allow::{AllowRequest, Allowed};
pub use client::{Client, Config, Debt, Later, Quick, ReplyError, Settled, Topology, Upstream};
pub use lease::{Concurrency, Lease, LeaseDecision, LocalLeases};
pub use limit::{Approximate, Decision, FailMode, Limit, Source};
pub use node::{
    BreakerState, CallError, Credentials, Node, NodeOptions, RawBatch, RawReplies, Secure,
    cannot_answer,
};
pub use sluice_core::Algo;
