//! `--metrics-port P`: `GET /metrics` in the Prometheus text format (OpenMetrics), served by a
//! small axum server on its own thread.
//!
//! Nothing here is on the request path: a scrape reads the per-thread counters of
//! [`crate::stats`] and sums them, reads the store's and replication's gauges, and encodes them
//! with `prometheus-client` (a [`Collector`] that builds every family at scrape time). Counters
//! are the raw sums since start (CONFIG RESETSTAT resets INFO only), so they are monotonic.
//! Each scrape first drops the names of rules that no longer exist from the registry
//! ([`crate::stats::Stats::retire_rules`]): their series end.
//!
//! # Who may scrape
//! A scrape logs in as the HTTP front's requests do ([`crate::http::login`]: `Authorization:
//! Bearer <password>` or `Basic base64(user:password)`, both of which Prometheus's
//! `authorization` and `basic_auth` scrape settings send; none needed while `default` is on and
//! `nopass`), and its user must be allowed `INFO`, whose figures these are: `401` otherwise,
//! `403` for a user without `INFO`.
//!
//! # Labels
//! Label values come from clients in places (rule names, Envoy domains), so each is escaped as
//! the text format requires (`\\`, `\"`, `\n`; `prometheus-client` writes them as given): a
//! value cannot end its label or its line.
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
//!   `sluice_rejected_connections_total`, `sluice_tls_handshakes_refused_total`.
//! - `sluice_keys`, `sluice_used_memory_bytes`, `sluice_maxmemory_bytes`,
//!   `sluice_expired_keys_total`, `sluice_evicted_keys_total`, `sluice_rejected_keys_total`.
//! - `sluice_replication_role{role}`, `sluice_connected_replicas`,
//!   `sluice_replica_lag_bytes{replica}`, `sluice_replica_ack_age_seconds{replica}`,
//!   `sluice_master_link_up`, `sluice_master_last_io_seconds`.
//! - `sluice_cluster_enabled`, `sluice_cluster_slots_owned`, `sluice_cluster_epoch`.
//! - `sluice_top_denied_requests{rule,key}`: the 5 keys denied most in the last minute and
//!   their denials, as `RL.TOP` counts them (an upper estimate, within `N / 33` of the truth
//!   for `N` denials): five series a scrape. Only for a user who may run `RL.TOP` (its labels
//!   are clients' keys).
//! - `sluice_etcd_watch_restarts_total{watch}`: etcd watches re-established from a fresh read
//!   (`table`: the cluster table's, `--etcd`; `rules`: the rules', `--rules-etcd`).
//! - With `--region`: `sluice_region_share{rule}` (the share enforced here, 0 to 1),
//!   `sluice_region_demand{rule}` (the region's smoothed requests per second),
//!   `sluice_region_published_share{rule,region}` and `sluice_region_published_demand{rule,region}`
//!   (every region's record), `sluice_region_coordinator`, `sluice_region_etcd_up`,
//!   `sluice_region_share_valid_seconds` (how long the shares hold without etcd).

use std::io;
use std::net::TcpListener as StdListener;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use axum::Router;
use axum::extract::Request;
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};

use crate::cmd;
use crate::shared::Shared;
use sluice_core::Algo;

use crate::stats::{CmdTotals, Outcome, latency_bucket};
use crate::top::{Kind, Window};

/// The RESP commands that check a limit: `sluice_check_duration_seconds{api="resp"}` sums them.
pub const CHECK_COMMANDS: &[&str] = &["rl.check", "rl.hit", "rl.hits", "cl.throttle", "gcra"];

/// How many keys `sluice_top_denied_requests` shows: few, so its cardinality stays bounded.
const TOP_DENIED: usize = 5;

/// The histogram's upper bounds: 2^k ns for k in this range (256 ns to about 1.07 s), each
/// the start of a latency bucket, so the counts are exact.
const HISTOGRAM_POW2: std::ops::RangeInclusive<u32> = 8..=30;

/// Starts the metrics server on `listener` (already bound, so a taken port fails the start).
pub fn start(
    listener: StdListener,
    shared: Arc<Shared>,
) -> io::Result<std::thread::JoinHandle<()>> {
    listener.set_nonblocking(true)?;
    crate::thread::runtime_thread("sluice-metrics", move || serve(listener, shared))
}

async fn serve(listener: StdListener, shared: Arc<Shared>) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => return sluice_log::log(&format!("metrics: cannot register its listener: {e}")),
    };
    // Two registries: the keys of `sluice_top_denied_requests` only for a user who may run
    // RL.TOP, which shows them.
    let registry = |keys| {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Scrape {
            shared: shared.clone(),
            keys,
        }));
        Arc::new(registry)
    };
    let (full, keyless) = (registry(true), registry(false));
    let guard = shared.clone();
    let app = Router::new()
        .route(
            "/metrics",
            get(
                move |axum::Extension(SeesKeys(keys)): axum::Extension<SeesKeys>| {
                    let registry = if keys { full.clone() } else { keyless.clone() };
                    async move { render(&registry) }
                },
            ),
        )
        .route_layer(axum::middleware::from_fn(move |req, next| {
            require_info(guard.clone(), req, next)
        }));
    let mut shutdown = shared.shutdown_signal();
    let stop = async move {
        let _ = shutdown.wait_for(|stop| *stop).await;
    };
    let served = match shared.tls.as_ref().filter(|_| shared.config.metrics_tls) {
        Some(tls) => match crate::tls::TlsListener::new(listener, tls.with_alpn(b"http/1.1")) {
            Ok(tls) => axum::serve(tls, app).with_graceful_shutdown(stop).await,
            Err(e) => Err(e),
        },
        None => {
            axum::serve(listener, app)
                .with_graceful_shutdown(stop)
                .await
        }
    };
    if let Err(e) = served {
        sluice_log::log(&format!("metrics: server stopped: {e}"));
    }
}

/// Whether the scraping user may run `RL.TOP`, and so see the keys it names.
#[derive(Debug, Clone, Copy)]
struct SeesKeys(bool);

/// A scrape's login ([`crate::http::login`]) and its user's permission to run `INFO`.
async fn require_info(shared: Arc<Shared>, mut req: Request, next: Next) -> Response {
    let value = req.headers().get(AUTHORIZATION).map(|v| v.as_bytes());
    let Some(user) = crate::http::login(&shared, value) else {
        return sluice_http::auth::unauthorized().into_response();
    };
    let may = |name: &[u8]| {
        cmd::lookup(name)
            .map(cmd::row)
            .is_some_and(|row| user.allows(row))
    };
    if !may(b"info") {
        return sluice_http::auth::forbidden(&cmd::noperm("info")).into_response();
    }
    req.extensions_mut().insert(SeesKeys(may(b"rl.top")));
    next.run(req).await
}

/// `value` as a label value of the text format: backslash, double quote and newline escaped.
fn escape_label(value: &str) -> std::borrow::Cow<'_, str> {
    if !value.contains(['\\', '"', '\n']) {
        return value.into();
    }
    let mut out = String::with_capacity(value.len() + 8);
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.into()
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

/// Builds every metric family from the server's state at scrape time: one [`Reading`], then
/// each row of [`FAMILIES`] in order.
#[derive(Debug)]
struct Scrape {
    shared: Arc<Shared>,
    /// Whether `sluice_top_denied_requests` is written (its labels are clients' keys).
    keys: bool,
}

impl Collector for Scrape {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        let shared = &self.shared;
        shared
            .stats
            .retire_rules(|name| shared.rules.get(name).is_some());
        let reading = Reading::read(shared, self.keys);
        for family in FAMILIES {
            let Some(samples) = (family.read)(&reading) else {
                continue;
            };
            let unit = family.unit.as_ref();
            let mut metric = enc.encode_descriptor(family.name, family.help, unit, family.kind)?;
            match samples {
                Samples::One(value) => value.encode(metric)?,
                Samples::Labelled(rows) => {
                    for (labels, value) in &rows {
                        let labels: Vec<(&str, std::borrow::Cow<'_, str>)> = labels
                            .iter()
                            .map(|(name, v)| (*name, escape_label(v)))
                            .collect();
                        value.encode(metric.encode_family(&labels)?)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// A row of [`FAMILIES`]: a family's descriptor, and how its samples come out of a
/// [`Reading`]; `None` where the family does not apply (the link to a primary on a primary,
/// cluster figures outside cluster mode).
struct Family {
    name: &'static str,
    help: &'static str,
    unit: Option<Unit>,
    kind: MetricType,
    read: fn(&Reading) -> Option<Samples<'_>>,
}

/// A family's samples: one without labels, or one per label set (there may be none).
enum Samples<'a> {
    One(Value<'a>),
    Labelled(Vec<(Labels, Value<'a>)>),
}

type Labels = Vec<(&'static str, String)>;

/// One sample's value, as it is encoded.
enum Value<'a> {
    Counter(u64),
    Gauge(i64),
    /// A gauge in (fractional) seconds.
    Seconds(f64),
    /// A fractional gauge (a share, a rate).
    Real(f64),
    /// Latency, cut into buckets at [`HISTOGRAM_POW2`].
    Histogram(&'a CmdTotals),
}

impl Value<'_> {
    fn encode(&self, mut metric: MetricEncoder) -> std::fmt::Result {
        match self {
            Value::Counter(v) => ConstCounter::new(*v).encode(metric),
            Value::Gauge(v) => ConstGauge::new(*v).encode(metric),
            Value::Seconds(v) | Value::Real(v) => ConstGauge::new(*v).encode(metric),
            Value::Histogram(t) => metric.encode_histogram::<NoLabelSet>(
                t.nanos as f64 / 1e9,
                t.latency.iter().sum(),
                &histogram_buckets(t),
                None,
            ),
        }
    }
}

const fn family(
    name: &'static str,
    help: &'static str,
    unit: Option<Unit>,
    kind: MetricType,
    read: fn(&Reading) -> Option<Samples<'_>>,
) -> Family {
    Family {
        name,
        help,
        unit,
        kind,
        read,
    }
}

const fn counter(
    name: &'static str,
    help: &'static str,
    read: fn(&Reading) -> Option<Samples<'_>>,
) -> Family {
    family(name, help, None, MetricType::Counter, read)
}

const fn gauge(
    name: &'static str,
    help: &'static str,
    read: fn(&Reading) -> Option<Samples<'_>>,
) -> Family {
    family(name, help, None, MetricType::Gauge, read)
}

fn one(value: Value<'_>) -> Option<Samples<'_>> {
    Some(Samples::One(value))
}

/// Every family a scrape writes, in the order it writes them.
static FAMILIES: &[Family] = &[
    counter(
        "sluice_checks",
        "Rate limit checks by outcome (allowed, denied, shadow_denied); rule only for named rules",
        |r| r.checks(false),
    ),
    counter(
        "sluice_checks_near_limit",
        "Allowed checks that left under 20% of the limit",
        |r| r.checks(true),
    ),
    family(
        "sluice_check_duration",
        "Time to answer one check (resp: RL.CHECK, RL.HIT, RL.HITS, CL.THROTTLE and GCRA; grpc: Envoy's ShouldRateLimit)",
        Some(Unit::Seconds),
        MetricType::Histogram,
        |r| {
            let apis = [("resp", &r.resp_checks), ("grpc", &r.grpc_checks)];
            let rows = apis.map(|(api, t)| (vec![("api", api.to_string())], Value::Histogram(t)));
            Some(Samples::Labelled(rows.into()))
        },
    ),
    counter("sluice_commands", "Commands run, by command", |r| {
        r.commands(|t| t.calls)
    }),
    counter(
        "sluice_commands_failed",
        "Commands that ran and answered an error",
        |r| r.commands(|t| t.failed),
    ),
    counter(
        "sluice_commands_rejected",
        "Commands refused before running (arity, auth, redirect, read-only)",
        |r| r.commands(|t| t.rejected),
    ),
    gauge(
        "sluice_connected_clients",
        "Client connections open now",
        |r| one(Value::Gauge(r.clients)),
    ),
    counter(
        "sluice_connections_received",
        "Connections accepted since start",
        |r| one(Value::Counter(r.connections_received)),
    ),
    counter(
        "sluice_rejected_connections",
        "Connections refused at maxclients",
        |r| one(Value::Counter(r.rejected_connections)),
    ),
    counter(
        "sluice_tls_handshakes_refused",
        "TLS handshakes refused (a certificate not accepted, no protocol in common, an alert)",
        |r| one(Value::Counter(r.tls_handshakes_refused)),
    ),
    gauge("sluice_keys", "Live buckets and counters", |r| {
        one(Value::Gauge(r.keys))
    }),
    family(
        "sluice_used_memory",
        "Memory the store accounts for its keys",
        Some(Unit::Bytes),
        MetricType::Gauge,
        |r| one(Value::Gauge(r.used_memory)),
    ),
    family(
        "sluice_maxmemory",
        "The memory limit (0: none)",
        Some(Unit::Bytes),
        MetricType::Gauge,
        |r| one(Value::Gauge(r.maxmemory)),
    ),
    counter(
        "sluice_expired_keys",
        "Keys dropped back to fresh state",
        |r| one(Value::Counter(r.expired_keys)),
    ),
    counter(
        "sluice_evicted_keys",
        "Live buckets evicted at maxmemory (their clients may pass early)",
        |r| one(Value::Counter(r.evicted_keys)),
    ),
    counter(
        "sluice_rejected_keys",
        "New keys refused at maxmemory (policy reject)",
        |r| one(Value::Counter(r.rejected_keys)),
    ),
    gauge(
        "sluice_replication_role",
        "This node's replication role (1 on the current role)",
        |r| {
            let role = vec![("role", r.role.to_string())];
            Some(Samples::Labelled(vec![(role, Value::Gauge(1))]))
        },
    ),
    gauge(
        "sluice_repl_offset",
        "Replication stream offset (master_repl_offset)",
        |r| one(Value::Gauge(r.repl_offset)),
    ),
    gauge("sluice_connected_replicas", "Replicas attached", |r| {
        one(Value::Gauge(r.replicas.len() as i64))
    }),
    family(
        "sluice_replica_lag",
        "Stream bytes a replica has not acknowledged yet",
        Some(Unit::Bytes),
        MetricType::Gauge,
        |r| r.per_replica(|replica| Value::Gauge(replica.lag)),
    ),
    family(
        "sluice_replica_ack_age",
        "Time since a replica's last acknowledgement",
        Some(Unit::Seconds),
        MetricType::Gauge,
        |r| r.per_replica(|replica| Value::Seconds(replica.ack_age)),
    ),
    gauge(
        "sluice_master_link_up",
        "1 while the link to the primary is up",
        |r| one(Value::Gauge(i64::from(r.master?.link_up))),
    ),
    family(
        "sluice_master_last_io",
        "Time since the primary last sent anything",
        Some(Unit::Seconds),
        MetricType::Gauge,
        |r| one(Value::Seconds(r.master?.last_io)),
    ),
    gauge("sluice_cluster_enabled", "1 in cluster mode", |r| {
        one(Value::Gauge(i64::from(r.cluster.is_some())))
    }),
    gauge(
        "sluice_cluster_slots_owned",
        "Slots this node serves as primary",
        |r| one(Value::Gauge(r.cluster?.slots_owned)),
    ),
    gauge("sluice_cluster_epoch", "The slot table's epoch", |r| {
        one(Value::Gauge(r.cluster?.epoch))
    }),
    gauge(
        "sluice_top_denied_requests",
        "The keys denied most in the last minute (the top 5, as RL.TOP counts them): each key's denials",
        |r| {
            let rows = r.top_denied.as_ref()?.iter();
            Some(Samples::Labelled(
                rows.map(|(rule, key, n)| {
                    let labels = vec![("rule", rule.clone()), ("key", key.clone())];
                    (labels, Value::Gauge(*n))
                })
                .collect(),
            ))
        },
    ),
    counter(
        "sluice_etcd_watch_restarts",
        "etcd watches re-established from a fresh read (cancelled by a compaction, ended, failed, or behind a periodic read)",
        |r| r.watch_restarts(),
    ),
    gauge(
        "sluice_region_share",
        "The share of each GLOBAL rule's limit this node enforces (0 to 1)",
        |r| r.per_global_rule(|s| Value::Real(share(s.share))),
    ),
    gauge(
        "sluice_region_demand",
        "This region's smoothed demand of each GLOBAL rule (requests per second)",
        |r| r.per_global_rule(|s| Value::Real(s.demand)),
    ),
    gauge(
        "sluice_region_published_share",
        "Every region's published share of each GLOBAL rule",
        |r| r.per_published(|p| Value::Real(share(p.share))),
    ),
    gauge(
        "sluice_region_published_demand",
        "Every region's published demand of each GLOBAL rule (requests per second)",
        |r| r.per_published(|p| Value::Real(p.demand)),
    ),
    gauge(
        "sluice_region_coordinator",
        "1 while this node is its region's coordinator",
        |r| one(Value::Gauge(i64::from(r.regions.as_ref()?.coordinator))),
    ),
    gauge(
        "sluice_region_etcd_up",
        "1 while the last exchange with the regions' etcd succeeded",
        |r| one(Value::Gauge(i64::from(r.regions.as_ref()?.etcd_ok))),
    ),
    family(
        "sluice_region_share_valid",
        "How long the shares enforced here hold without etcd (then the minimum)",
        Some(Unit::Seconds),
        MetricType::Gauge,
        |r| {
            let s = r.regions.as_ref()?;
            let left = s.valid_until_ms.saturating_sub(r.now_ms);
            one(Value::Seconds(left as f64 / 1000.0))
        },
    ),
];

fn share(ppm: u32) -> f64 {
    f64::from(ppm) / f64::from(crate::rules::SHARE_WHOLE)
}

/// Everything a scrape reports, read from the server once.
struct Reading {
    /// `(rule, algo, outcome, count)`; `rule` empty for plain checks.
    checks: Vec<(String, Algo, Outcome, u64)>,
    /// The rows of every command of [`CHECK_COMMANDS`], summed.
    resp_checks: CmdTotals,
    /// ShouldRateLimit's row.
    grpc_checks: CmdTotals,
    /// Every command row that ran or was rejected at least once.
    commands: Vec<(&'static str, CmdTotals)>,
    clients: i64,
    connections_received: u64,
    rejected_connections: u64,
    tls_handshakes_refused: u64,
    keys: i64,
    used_memory: i64,
    maxmemory: i64,
    expired_keys: u64,
    evicted_keys: u64,
    rejected_keys: u64,
    role: &'static str,
    repl_offset: i64,
    replicas: Vec<ReplicaReading>,
    /// On a replica: its link to the primary.
    master: Option<MasterReading>,
    /// In cluster mode: this node's part of the slot table.
    cluster: Option<ClusterReading>,
    /// With `--region`: this node's view of the split.
    regions: Option<crate::regions::Status>,
    /// With `--etcd` or `--rules-etcd`: each watch's restarts.
    watch_restarts: Vec<(&'static str, u64)>,
    /// `(rule, key, denials)` of the keys denied most in the last minute; `None` for a
    /// scraping user who may not run `RL.TOP`.
    top_denied: Option<Vec<(String, String, i64)>>,
    now_ms: u64,
}

struct ReplicaReading {
    /// `ip:port`.
    name: String,
    /// Stream bytes not acknowledged yet.
    lag: i64,
    /// Seconds since its last acknowledgement.
    ack_age: f64,
}

#[derive(Clone, Copy)]
struct MasterReading {
    link_up: bool,
    /// Seconds since the primary last sent anything.
    last_io: f64,
}

#[derive(Clone, Copy)]
struct ClusterReading {
    slots_owned: i64,
    epoch: i64,
}

impl Reading {
    fn read(shared: &Shared, keys: bool) -> Reading {
        let resp_checks = CHECK_COMMANDS
            .iter()
            .filter_map(|name| cmd::lookup(name.as_bytes()))
            .fold(CmdTotals::default(), |mut sum, spec| {
                sum.plus(&shared.stats.command_raw(cmd::row(spec)));
                sum
            });
        let commands = (0..=cmd::SHOULD_RATE_LIMIT_ROW)
            .map(|row| (cmd::row_name(row), shared.stats.command_raw(row)))
            .filter(|(_, t)| t.calls + t.rejected > 0)
            .collect();
        let now = shared.clock.now();
        let inner = shared.repl.inner.lock();
        let replicas = inner
            .replicas()
            .map(|r| ReplicaReading {
                name: format!("{}:{}", r.ip, r.port),
                lag: clamp(inner.offset.saturating_sub(r.ack)),
                ack_age: r.last_ack.elapsed().as_secs_f64(),
            })
            .collect();
        let master = inner.master.is_some().then(|| MasterReading {
            link_up: inner.link_up_since.is_some(),
            last_io: inner.last_io.elapsed().as_secs_f64(),
        });
        Reading {
            checks: shared.stats.checks(),
            resp_checks,
            grpc_checks: shared.stats.command_raw(cmd::SHOULD_RATE_LIMIT_ROW),
            commands,
            clients: shared.clients.len() as i64,
            connections_received: shared.stats.connections_received.load(Relaxed),
            rejected_connections: shared.stats.rejected_connections.load(Relaxed),
            tls_handshakes_refused: crate::stats::TLS_HANDSHAKES_REFUSED.load(Relaxed),
            keys: clamp(shared.store.len(now) as u64),
            used_memory: clamp(shared.store.used_memory() as u64),
            maxmemory: clamp(shared.store.maxmemory() as u64),
            expired_keys: shared.store.expired_total(),
            evicted_keys: shared.store.evicted_total(),
            rejected_keys: shared.store.rejected_total(),
            role: if master.is_some() {
                "replica"
            } else {
                "master"
            },
            repl_offset: clamp(inner.offset),
            replicas,
            master,
            cluster: shared.cluster.as_ref().map(|cluster| ClusterReading {
                slots_owned: cluster_slots_owned(cluster) as i64,
                epoch: clamp(cluster.epoch()),
            }),
            regions: shared.regions.status(),
            watch_restarts: [
                (
                    "table",
                    shared.config.etcd.is_some(),
                    &shared.stats.table_watch_restarts,
                ),
                (
                    "rules",
                    shared.config.rules_etcd.is_some(),
                    &shared.stats.rules_watch_restarts,
                ),
            ]
            .into_iter()
            .filter(|(_, on, _)| *on)
            .map(|(watch, _, n)| (watch, n.load(Relaxed)))
            .collect(),
            top_denied: keys.then(|| {
                let top = shared
                    .stats
                    .top(Kind::Denied, Window::Minute, None, TOP_DENIED, now);
                top.into_iter()
                    .map(|e| {
                        let key = String::from_utf8_lossy(&e.key).into_owned();
                        (shared.stats.rule_name(e.rule), key, clamp(e.count))
                    })
                    .collect()
            }),
            now_ms: now.as_nanos() / 1_000_000,
        }
    }

    /// One sample per etcd watch this node runs, labelled `watch`; none without etcd.
    fn watch_restarts(&self) -> Option<Samples<'_>> {
        if self.watch_restarts.is_empty() {
            return None;
        }
        let rows = self.watch_restarts.iter();
        Some(Samples::Labelled(
            rows.map(|(watch, n)| (vec![("watch", watch.to_string())], Value::Counter(*n)))
                .collect(),
        ))
    }

    /// One sample per GLOBAL rule, labelled by rule.
    fn per_global_rule(
        &self,
        f: impl Fn(&crate::regions::RuleStatus) -> Value<'static>,
    ) -> Option<Samples<'_>> {
        let rows = self.regions.as_ref()?.rules.iter();
        Some(Samples::Labelled(
            rows.map(|s| (vec![("rule", s.name.clone())], f(s)))
                .collect(),
        ))
    }

    /// One sample per (GLOBAL rule, region that publishes it).
    fn per_published(
        &self,
        f: impl Fn(&crate::regions::Published) -> Value<'static>,
    ) -> Option<Samples<'_>> {
        let status = self.regions.as_ref()?;
        let rows = status.rules.iter().flat_map(|s| {
            s.regions.iter().map(|(region, p)| {
                let labels = vec![("rule", s.name.clone()), ("region", region.clone())];
                (labels, f(p))
            })
        });
        Some(Samples::Labelled(rows.collect()))
    }

    /// The checks that left under 20% of the limit (`near_limit`), or the others by outcome;
    /// labelled `rule` (named rules only), `algo`, and `result` for the others.
    fn checks(&self, near_limit: bool) -> Option<Samples<'_>> {
        let rows = self
            .checks
            .iter()
            .filter(|c| (c.2 == Outcome::NearLimit) == near_limit)
            .map(|(rule, algo, outcome, n)| {
                let mut labels = Vec::with_capacity(3);
                if !rule.is_empty() {
                    labels.push(("rule", rule.clone()));
                }
                labels.push(("algo", algo.name().to_ascii_lowercase()));
                if !near_limit {
                    labels.push(("result", outcome_label(*outcome).to_string()));
                }
                (labels, Value::Counter(*n))
            });
        Some(Samples::Labelled(rows.collect()))
    }

    /// One of each command row's counters, labelled `command`.
    fn commands(&self, field: fn(&CmdTotals) -> u64) -> Option<Samples<'_>> {
        let rows = self.commands.iter().map(|(name, t)| {
            (
                vec![("command", name.to_string())],
                Value::Counter(field(t)),
            )
        });
        Some(Samples::Labelled(rows.collect()))
    }

    /// One value per replica, labelled `replica` with its `ip:port`.
    fn per_replica(&self, value: fn(&ReplicaReading) -> Value<'_>) -> Option<Samples<'_>> {
        let rows = self
            .replicas
            .iter()
            .map(|r| (vec![("replica", r.name.clone())], value(r)));
        Some(Samples::Labelled(rows.collect()))
    }
}

/// The slots this node serves as primary (0 while it has no table or is a replica).
fn cluster_slots_owned(cluster: &crate::cluster::Cluster) -> usize {
    cluster
        .view()
        .as_ref()
        .and_then(|v| {
            v.my_shard
                .filter(|_| v.primary)
                .map(|s| v.table.slots_of(s))
        })
        .unwrap_or(0)
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

#[cfg(test)]
mod tests {
    use super::escape_label;

    #[test]
    fn label_values_cannot_end_their_label_or_line() {
        assert_eq!(escape_label("plain.rule"), "plain.rule");
        assert_eq!(
            escape_label("evil\"} 1\nsluice_up{injected=\"yes\\"),
            r#"evil\"} 1\nsluice_up{injected=\"yes\\"#
        );
    }
}
