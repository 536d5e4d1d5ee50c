//! `--metrics-port P`: `GET /metrics` in the Prometheus text format (OpenMetrics), served by a
//! small axum server on its own thread.
//!
//! Nothing here is on the request path: a scrape reads the per-thread counters of
//! [`crate::stats`] and sums them, reads the store's and replication's gauges, and encodes them
//! with `prometheus-client` (a [`Collector`] that builds every family at scrape time). Counters
//! are the raw sums since start (CONFIG RESETSTAT resets INFO only), so they are monotonic.
//!
//! # Metrics
//! - `sluice_checks_total{rule,algo,result}`: checks by outcome (`allowed`, `denied`,
//!   `shadow_denied`); `rule` only on named rules (Envoy descriptors, rules), so plain RL.CHECKs
//!   are labelled by algorithm only.
//! - `sluice_checks_near_limit_total{rule,algo}`: allowed checks that left under 20% of the limit.
//! - `sluice_check_duration_seconds{api}`: check latency (`resp`: every checking command of
//!   [`CHECK_COMMANDS`], `grpc`: Envoy's ShouldRateLimit), buckets at powers of two of
//!   nanoseconds.
//! - `sluice_commands_total{command}`, `sluice_commands_failed_total{command}`,
//!   `sluice_commands_rejected_total{command}`.
//! - `sluice_connected_clients`, `sluice_connections_received_total`,
//!   `sluice_rejected_connections_total`.
//! - `sluice_keys`, `sluice_used_memory_bytes`, `sluice_maxmemory_bytes`,
//!   `sluice_expired_keys_total`, `sluice_evicted_keys_total`, `sluice_rejected_keys_total`.
//! - `sluice_replication_role{role}`, `sluice_connected_replicas`,
//!   `sluice_replica_lag_bytes{replica}`, `sluice_replica_ack_age_seconds{replica}`,
//!   `sluice_master_link_up`, `sluice_master_last_io_seconds`.
//! - `sluice_cluster_enabled`, `sluice_cluster_slots_owned`, `sluice_cluster_epoch`.

use std::io;
use std::net::TcpListener as StdListener;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use axum::Router;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};

use crate::cmd;
use crate::shared::Shared;
use crate::stats::{CmdTotals, Outcome, latency_bucket};

/// The RESP commands that check a limit: `sluice_check_duration_seconds{api="resp"}` sums them.
pub const CHECK_COMMANDS: &[&str] = &["rl.check", "rl.hit", "rl.hits", "cl.throttle", "gcra"];

/// The histogram's upper bounds: 2^k ns for k in this range (256 ns to about 1.07 s), each
/// the start of a latency bucket, so the counts are exact.
const HISTOGRAM_POW2: std::ops::RangeInclusive<u32> = 8..=30;

/// Starts the metrics server on `listener` (already bound, so a taken port fails the start).
pub fn start(
    listener: StdListener,
    shared: Arc<Shared>,
) -> io::Result<std::thread::JoinHandle<()>> {
    listener.set_nonblocking(true)?;
    crate::runtime_thread("sluice-metrics", move || serve(listener, shared))
}

async fn serve(listener: StdListener, shared: Arc<Shared>) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => return sluice_log::log(&format!("metrics: cannot register its listener: {e}")),
    };
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Scrape(shared.clone())));
    let registry = Arc::new(registry);
    let app = Router::new().route(
        "/metrics",
        get(move || {
            let registry = registry.clone();
            async move { render(&registry) }
        }),
    );
    let mut shutdown = shared.shutdown_signal();
    let stop = async move {
        let _ = shutdown.wait_for(|stop| *stop).await;
    };
    if let Err(e) = axum::serve(listener, app)
        .with_graceful_shutdown(stop)
        .await
    {
        sluice_log::log(&format!("metrics: server stopped: {e}"));
    }
}

fn render(registry: &Registry) -> axum::response::Response {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, registry) {
        Ok(()) => (
            [(
                CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        )
            .into_response(),
        Err(_) => axum::http::StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

/// Builds every metric family from the server's state at scrape time.
#[derive(Debug)]
struct Scrape(Arc<Shared>);

fn counter(enc: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> std::fmt::Result {
    ConstCounter::new(v).encode(enc.encode_descriptor(name, help, None, MetricType::Counter)?)
}

fn gauge(enc: &mut DescriptorEncoder, name: &str, help: &str, v: i64) -> std::fmt::Result {
    ConstGauge::new(v).encode(enc.encode_descriptor(name, help, None, MetricType::Gauge)?)
}

fn clamp(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn outcome_label(o: Outcome) -> &'static str {
    match o {
        Outcome::Allowed => "allowed",
        Outcome::Denied => "denied",
        Outcome::ShadowDenied => "shadow_denied",
        Outcome::NearLimit => "near_limit",
    }
}

/// A histogram of `t`'s latency buckets, cut at [`HISTOGRAM_POW2`]: per-interval counts, the
/// last one unbounded (+Inf).
fn histogram_buckets(t: &CmdTotals) -> Vec<(f64, u64)> {
    let mut out = Vec::new();
    let mut from = 0;
    for k in HISTOGRAM_POW2 {
        let to = latency_bucket(1u64 << k);
        out.push((
            (1u64 << k) as f64 / 1e9,
            t.latency[from..to].iter().sum::<u64>(),
        ));
        from = to;
    }
    out.push((f64::MAX, t.latency[from..].iter().sum::<u64>()));
    out
}

impl Collector for Scrape {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        let shared = &self.0;
        let lower = |a: sluice_core::Algo| a.name().to_ascii_lowercase();

        // Checks by rule, algorithm and outcome.
        let checks = shared.stats.checks();
        {
            let mut family = enc.encode_descriptor(
                "sluice_checks",
                "Rate limit checks by outcome (allowed, denied, shadow_denied); rule only for named rules",
                None,
                MetricType::Counter,
            )?;
            for (rule, algo, outcome, n) in checks.iter().filter(|c| c.2 != Outcome::NearLimit) {
                let mut labels = Vec::with_capacity(3);
                if !rule.is_empty() {
                    labels.push(("rule", rule.clone()));
                }
                labels.push(("algo", lower(*algo)));
                labels.push(("result", outcome_label(*outcome).to_string()));
                ConstCounter::new(*n).encode(family.encode_family(&labels)?)?;
            }
        }
        {
            let mut family = enc.encode_descriptor(
                "sluice_checks_near_limit",
                "Allowed checks that left under 20% of the limit",
                None,
                MetricType::Counter,
            )?;
            for (rule, algo, _, n) in checks.iter().filter(|c| c.2 == Outcome::NearLimit) {
                let mut labels = Vec::with_capacity(2);
                if !rule.is_empty() {
                    labels.push(("rule", rule.clone()));
                }
                labels.push(("algo", lower(*algo)));
                ConstCounter::new(*n).encode(family.encode_family(&labels)?)?;
            }
        }
        // Check latency: the rows of every checking command, and ShouldRateLimit's.
        {
            let mut family = enc.encode_descriptor(
                "sluice_check_duration",
                "Time to answer one check (resp: RL.CHECK, RL.HIT, RL.HITS, CL.THROTTLE and GCRA; grpc: Envoy's ShouldRateLimit)",
                Some(&Unit::Seconds),
                MetricType::Histogram,
            )?;
            let resp = CHECK_COMMANDS
                .iter()
                .filter_map(|name| cmd::lookup(name.as_bytes()))
                .fold(CmdTotals::default(), |mut sum, spec| {
                    sum.plus(&shared.stats.command_raw(cmd::row(spec)));
                    sum
                });
            let grpc = shared.stats.command_raw(cmd::SHOULD_RATE_LIMIT_ROW);
            for (api, t) in [("resp", resp), ("grpc", grpc)] {
                let count: u64 = t.latency.iter().sum();
                family
                    .encode_family(&[("api", api)])?
                    .encode_histogram::<NoLabelSet>(
                        t.nanos as f64 / 1e9,
                        count,
                        &histogram_buckets(&t),
                        None,
                    )?;
            }
        }
        // Commands.
        let rows: Vec<(&str, CmdTotals)> = (0..=cmd::SHOULD_RATE_LIMIT_ROW)
            .map(|row| (cmd::row_name(row), shared.stats.command_raw(row)))
            .filter(|(_, t)| t.calls + t.rejected > 0)
            .collect();
        for (name, help, field) in [
            (
                "sluice_commands",
                "Commands run, by command",
                (|t: &CmdTotals| t.calls) as fn(&CmdTotals) -> u64,
            ),
            (
                "sluice_commands_failed",
                "Commands that ran and answered an error",
                |t| t.failed,
            ),
            (
                "sluice_commands_rejected",
                "Commands refused before running (arity, auth, redirect, read-only)",
                |t| t.rejected,
            ),
        ] {
            let mut family = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
            for (command, t) in &rows {
                ConstCounter::new(field(t))
                    .encode(family.encode_family(&[("command", *command)])?)?;
            }
        }
        // Connections.
        gauge(
            &mut enc,
            "sluice_connected_clients",
            "Client connections open now",
            shared.clients.len() as i64,
        )?;
        counter(
            &mut enc,
            "sluice_connections_received",
            "Connections accepted since start",
            shared.stats.connections_received.load(Relaxed),
        )?;
        counter(
            &mut enc,
            "sluice_rejected_connections",
            "Connections refused at maxclients",
            shared.stats.rejected_connections.load(Relaxed),
        )?;
        // Keys and memory.
        let now = shared.clock.now();
        gauge(
            &mut enc,
            "sluice_keys",
            "Live buckets and counters",
            clamp(shared.store.len(now) as u64),
        )?;
        ConstGauge::new(clamp(shared.store.used_memory() as u64)).encode(
            enc.encode_descriptor(
                "sluice_used_memory",
                "Memory the store accounts for its keys",
                Some(&Unit::Bytes),
                MetricType::Gauge,
            )?,
        )?;
        ConstGauge::new(clamp(shared.store.maxmemory() as u64)).encode(enc.encode_descriptor(
            "sluice_maxmemory",
            "The memory limit (0: none)",
            Some(&Unit::Bytes),
            MetricType::Gauge,
        )?)?;
        counter(
            &mut enc,
            "sluice_expired_keys",
            "Keys dropped back to fresh state",
            shared.store.expired_total(),
        )?;
        counter(
            &mut enc,
            "sluice_evicted_keys",
            "Live buckets evicted at maxmemory (their clients may pass early)",
            shared.store.evicted_total(),
        )?;
        counter(
            &mut enc,
            "sluice_rejected_keys",
            "New keys refused at maxmemory (policy reject)",
            shared.store.rejected_total(),
        )?;
        // Replication.
        {
            let inner = shared.repl.inner.lock();
            let role = if inner.master.is_some() {
                "replica"
            } else {
                "master"
            };
            ConstGauge::new(1i64).encode(
                enc.encode_descriptor(
                    "sluice_replication_role",
                    "This node's replication role (1 on the current role)",
                    None,
                    MetricType::Gauge,
                )?
                .encode_family(&[("role", role)])?,
            )?;
            gauge(
                &mut enc,
                "sluice_repl_offset",
                "Replication stream offset (master_repl_offset)",
                clamp(inner.offset),
            )?;
            let replicas: Vec<_> = inner.replicas().collect();
            gauge(
                &mut enc,
                "sluice_connected_replicas",
                "Replicas attached",
                replicas.len() as i64,
            )?;
            {
                let mut family = enc.encode_descriptor(
                    "sluice_replica_lag",
                    "Stream bytes a replica has not acknowledged yet",
                    Some(&Unit::Bytes),
                    MetricType::Gauge,
                )?;
                for r in &replicas {
                    let name = format!("{}:{}", r.ip, r.port);
                    ConstGauge::new(clamp(inner.offset.saturating_sub(r.ack)))
                        .encode(family.encode_family(&[("replica", name)])?)?;
                }
            }
            {
                let mut family = enc.encode_descriptor(
                    "sluice_replica_ack_age",
                    "Time since a replica's last acknowledgement",
                    Some(&Unit::Seconds),
                    MetricType::Gauge,
                )?;
                for r in &replicas {
                    let name = format!("{}:{}", r.ip, r.port);
                    ConstGauge::new(r.last_ack.elapsed().as_secs_f64())
                        .encode(family.encode_family(&[("replica", name)])?)?;
                }
            }
            if inner.master.is_some() {
                let up = inner.link_up_since.is_some();
                gauge(
                    &mut enc,
                    "sluice_master_link_up",
                    "1 while the link to the primary is up",
                    i64::from(up),
                )?;
                ConstGauge::new(inner.last_io.elapsed().as_secs_f64()).encode(
                    enc.encode_descriptor(
                        "sluice_master_last_io",
                        "Time since the primary last sent anything",
                        Some(&Unit::Seconds),
                        MetricType::Gauge,
                    )?,
                )?;
            }
        }
        // Cluster.
        gauge(
            &mut enc,
            "sluice_cluster_enabled",
            "1 in cluster mode",
            i64::from(shared.cluster.is_some()),
        )?;
        if let Some(cluster) = &shared.cluster {
            let view = cluster.view();
            let owned = view
                .as_ref()
                .and_then(|v| {
                    v.my_shard
                        .filter(|_| v.primary)
                        .map(|s| v.table.slots_of(s))
                })
                .unwrap_or(0);
            gauge(
                &mut enc,
                "sluice_cluster_slots_owned",
                "Slots this node serves as primary",
                owned as i64,
            )?;
            gauge(
                &mut enc,
                "sluice_cluster_epoch",
                "The slot table's epoch",
                clamp(cluster.epoch()),
            )?;
        }
        Ok(())
    }
}
