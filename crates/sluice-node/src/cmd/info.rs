//! `INFO [section ...]` — server, clients, memory, stats, replication, cpu, errorstats and
//! keyspace, in Redis's
//! `field:value` text format (a verbatim string in RESP3, a bulk string in RESP2), with the fields
//! monitoring tools read.

use std::fmt::Write;
use std::sync::atomic::Ordering::Relaxed;

use sluice_resp::ArgIter;
use sluice_resp::reply;

use super::{Args, CmdError, Command, Ctx};

const SECTIONS: [&str; 14] = [
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "replication",
    "cpu",
    "errorstats",
    "commandstats",
    "latencystats",
    "cluster",
    "scripting",
    "regions",
    "keyspace",
];

/// Sections only `INFO all`, `INFO everything` or their own name asks for (as in Redis: they
/// grow with the commands used).
const NOT_DEFAULT: [&str; 2] = ["commandstats", "latencystats"];

#[derive(Debug)]
pub struct Info<'a>(ArgIter<'a>);

impl<'a> Command<'a> for Info<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(Info(args.rest()))
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let wanted: Vec<String> = self
            .0
            .map(|s| String::from_utf8_lossy(s).to_ascii_lowercase())
            .collect();
        let all = wanted
            .iter()
            .any(|w| matches!(w.as_str(), "all" | "everything"));
        let default = wanted.is_empty() || wanted.iter().any(|w| w == "default");
        let mut text = String::new();
        for section in SECTIONS {
            if all
                || (default && !NOT_DEFAULT.contains(&section))
                || wanted.iter().any(|w| w == section)
            {
                if !text.is_empty() {
                    text.push_str("\r\n");
                }
                write_section(ctx, section, &mut text);
            }
        }
        reply::verbatim(ctx.out, ctx.session.proto, "txt", text.as_bytes());
        Ok(())
    }
}

/// CPU seconds this process (`RUSAGE_SELF`) and its waited-for children spent in the kernel
/// and in user space, as Redis's `# CPU` reports them.
fn cpu(t: &mut String) -> std::fmt::Result {
    t.push_str("# CPU\r\n");
    for (who, prefix) in [
        (libc::RUSAGE_SELF, "used_cpu"),
        (libc::RUSAGE_CHILDREN, "used_cpu"),
    ] {
        // SAFETY: all-zero bytes are a valid `rusage` (integers), which getrusage fills through
        // a pointer to our own, valid for its size.
        let usage = unsafe {
            let mut u: libc::rusage = std::mem::zeroed();
            (libc::getrusage(who, &mut u) == 0).then_some(u)
        };
        let (sys, user) = usage.map_or((0.0, 0.0), |u| (seconds(u.ru_stime), seconds(u.ru_utime)));
        let suffix = if who == libc::RUSAGE_SELF {
            ""
        } else {
            "_children"
        };
        write!(
            t,
            "{prefix}_sys{suffix}:{sys:.6}\r\n{prefix}_user{suffix}:{user:.6}\r\n"
        )?;
    }
    Ok(())
}

fn seconds(tv: libc::timeval) -> f64 {
    tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6
}

/// `errorstat_<WORD>:count=N` per error word ([`crate::errorstats`]).
fn errorstats(shared: &crate::shared::Shared, t: &mut String) -> std::fmt::Result {
    t.push_str("# Errorstats\r\n");
    for (word, count) in shared.errors.counts() {
        write!(t, "errorstat_{word}:count={count}\r\n")?;
    }
    Ok(())
}

fn human(bytes: usize) -> String {
    let b = bytes as f64;
    match bytes {
        0..1024 => format!("{bytes}B"),
        1024..1_048_576 => format!("{:.2}K", b / 1024.0),
        1_048_576..1_073_741_824 => format!("{:.2}M", b / 1_048_576.0),
        _ => format!("{:.2}G", b / 1_073_741_824.0),
    }
}

/// Resident set size from /proc (Linux), 0 where unavailable.
fn rss_bytes() -> usize {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<usize>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// INFO replication, field for field as Redis 7.0 writes it: Sentinel and ioredis parse it
/// line by line, and Sentinel reads the replica fields only after `role:slave`.
fn replication(shared: &crate::shared::Shared, t: &mut String) -> std::fmt::Result {
    let inner = shared.repl.inner.lock();
    let secs = |i: std::time::Instant| i.elapsed().as_secs() as i64;
    t.push_str("# Replication\r\n");
    match &inner.master {
        None => t.push_str("role:master\r\n"),
        Some(m) => {
            let up = inner.link_up_since.is_some();
            write!(
                t,
                "role:slave\r\nmaster_host:{}\r\nmaster_port:{}\r\nmaster_link_status:{}\r\nmaster_last_io_seconds_ago:{}\r\nmaster_sync_in_progress:{}\r\nslave_read_repl_offset:{}\r\nslave_repl_offset:{}\r\n",
                m.host,
                m.port,
                if up { "up" } else { "down" },
                if up { secs(inner.last_io) } else { -1 },
                u8::from(inner.link == crate::repl::LinkState::Sync),
                inner.offset,
                inner.offset,
            )?;
            // How far the primary's clock is ahead of ours (Sluice's own field; see
            // `repl::skew`): times from it are moved by this much.
            if let Some(ahead) = inner.skew.ahead_ns() {
                write!(t, "master_clock_offset_ms:{}\r\n", -ahead / 1_000_000)?;
            }
            if !up {
                let down = inner.link_down_since.map_or(-1, secs);
                write!(t, "master_link_down_since_seconds:{down}\r\n")?;
            }
            write!(
                t,
                "slave_priority:{}\r\nslave_read_only:{}\r\nreplica_announced:1\r\n",
                shared.live.replica_priority.load(Relaxed),
                u8::from(shared.repl.replica_read_only()),
            )?;
        }
    }
    write!(t, "connected_slaves:{}\r\n", inner.replicas().count())?;
    // As Redis: shown while min-replicas-to-write and min-replicas-max-lag are both set.
    if shared.repl.min_replicas.enabled() {
        write!(
            t,
            "min_slaves_good_slaves:{}\r\n",
            shared.repl.min_replicas.good()
        )?;
    }
    for (i, r) in inner.replicas().enumerate() {
        write!(
            t,
            "slave{i}:ip={},port={},state={},offset={},lag={}\r\n",
            r.ip,
            r.port,
            if r.online { "online" } else { "send_bulk" },
            r.ack,
            secs(r.last_ack),
        )?;
    }
    let (backlog_active, first, histlen) = match &inner.backlog {
        Some(b) => (1, b.start() + 1, b.len()),
        None => (0, 0, 0),
    };
    write!(
        t,
        "master_failover_state:no-failover\r\nmaster_replid:{}\r\nmaster_replid2:{}\r\nmaster_repl_offset:{}\r\nsecond_repl_offset:{}\r\nrepl_backlog_active:{backlog_active}\r\nrepl_backlog_size:{}\r\nrepl_backlog_first_byte_offset:{first}\r\nrepl_backlog_histlen:{histlen}\r\n",
        inner.replid,
        inner.replid2,
        inner.offset,
        inner.second_offset,
        shared.config.repl_backlog_size,
    )?;
    // Sluice's own: where the snapshot a restarted primary loaded stands in its previous
    // stream, so that a replica ahead of it refuses to be wiped (see `repl::replica`).
    if let Some(o) = &inner.restarted {
        write!(
            t,
            "snapshot_replid:{}\r\nsnapshot_repl_offset:{}\r\n",
            o.replid, o.offset
        )?;
    }
    Ok(())
}

/// Every counters' row with calls since the last CONFIG RESETSTAT, with its name.
fn used_rows(
    shared: &crate::shared::Shared,
) -> impl Iterator<Item = (&'static str, crate::stats::CmdTotals)> + '_ {
    (0..=super::SHOULD_RATE_LIMIT_ROW)
        .map(|row| (super::row_name(row), shared.stats.command(row)))
        .filter(|(_, t)| t.calls + t.rejected > 0)
}

/// INFO commandstats, as Redis 7 writes it: `cmdstat_<name>:calls=,usec=,usec_per_call=,
/// rejected_calls=,failed_calls=` for every command called since the last CONFIG RESETSTAT.
fn commandstats(shared: &crate::shared::Shared, t: &mut String) -> std::fmt::Result {
    t.push_str("# Commandstats\r\n");
    for (name, c) in used_rows(shared) {
        let usec = c.nanos / 1000;
        let per_call = if c.calls > 0 {
            c.nanos as f64 / 1000.0 / c.calls as f64
        } else {
            0.0
        };
        write!(
            t,
            "cmdstat_{name}:calls={},usec={usec},usec_per_call={per_call:.2},rejected_calls={},failed_calls={}\r\n",
            c.calls, c.rejected, c.failed
        )?;
    }
    Ok(())
}

/// INFO latencystats, as Redis 7 writes it: p50, p99 and p99.9 in microseconds per command.
fn latencystats(shared: &crate::shared::Shared, t: &mut String) -> std::fmt::Result {
    t.push_str("# Latencystats\r\n");
    for (name, c) in used_rows(shared) {
        if c.calls == 0 {
            continue;
        }
        let us = |q| c.percentile(q) as f64 / 1000.0;
        write!(
            t,
            "latency_percentiles_usec_{name}:p50={:.3},p99={:.3},p99.9={:.3}\r\n",
            us(0.5),
            us(0.99),
            us(0.999)
        )?;
    }
    Ok(())
}

/// `multiplexing_api`: how the workers wait for their plain-TCP clients (TLS clients are on
/// epoll everywhere): `io_uring`, `epoll`, or `io_uring,epoll` where only some threads could
/// set up a ring.
fn multiplexing_api(shared: &crate::shared::Shared) -> &'static str {
    let rings = shared.uring_threads.load(Relaxed);
    if rings == 0 {
        "epoll"
    } else if rings >= shared.config.threads() {
        "io_uring"
    } else {
        "io_uring,epoll"
    }
}

fn write_section(ctx: &Ctx<'_>, section: &str, t: &mut String) {
    let shared = ctx.shared;
    // Writing to a String cannot fail.
    let _ = match section {
        "server" => {
            let uptime = shared.clock.uptime_secs();
            write!(
                t,
                "# Server\r\nredis_version:{}\r\nsluice_version:{}\r\nredis_mode:{}\r\nos:{} {}\r\narch_bits:64\r\nmultiplexing_api:{}\r\nprocess_id:{}\r\nrun_id:{}\r\ntcp_port:{}\r\nserver_time_usec:{}\r\nuptime_in_seconds:{}\r\nuptime_in_days:{}\r\nthreads:{}\r\nshards:{}\r\n",
                super::REDIS_COMPAT_VERSION,
                env!("CARGO_PKG_VERSION"),
                if shared.cluster.is_some() {
                    "cluster"
                } else {
                    "standalone"
                },
                std::env::consts::OS,
                std::env::consts::ARCH,
                multiplexing_api(shared),
                std::process::id(),
                shared.run_id,
                shared.local_addr.port(),
                shared.clock.now().as_nanos() / 1000,
                uptime,
                uptime / 86_400,
                shared.config.threads(),
                shared.store.shard_count(),
            )
        }
        "clients" => write!(
            t,
            "# Clients\r\nconnected_clients:{}\r\nmaxclients:{}\r\nblocked_clients:{}\r\n",
            shared.clients.len(),
            shared.maxclients.load(Relaxed),
            shared.clients.blocked(),
        ),
        "memory" => {
            let used = shared.store.used_memory();
            let rss = rss_bytes();
            write!(
                t,
                "# Memory\r\nused_memory:{used}\r\nused_memory_human:{}\r\nused_memory_rss:{rss}\r\nused_memory_rss_human:{}\r\nmaxmemory:{}\r\nmaxmemory_human:{}\r\nmaxmemory_policy:{}\r\nmem_allocator:jemalloc\r\nlazyfreed_objects:{}\r\n",
                human(used),
                human(rss),
                shared.store.maxmemory(),
                human(shared.store.maxmemory()),
                crate::config::policy_name(shared.store.policy()),
                crate::lazyfree::freed(),
            )
        }
        "stats" => write!(
            t,
            "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\ninstantaneous_ops_per_sec:{}\r\nrejected_connections:{}\r\nsync_full:{}\r\nsync_partial_ok:{}\r\nsync_partial_err:{}\r\nexpired_keys:{}\r\nevicted_keys:{}\r\nrejected_keys:{}\r\npubsub_channels:{}\r\ntotal_error_replies:{}\r\ntls_handshakes_refused:{}\r\n",
            shared.stats.connections_received.load(Relaxed),
            shared.stats.total_commands(),
            shared.stats.instantaneous_ops_per_sec(),
            shared.stats.rejected_connections.load(Relaxed),
            shared.repl.stats.sync_full.load(Relaxed),
            shared.repl.stats.sync_partial_ok.load(Relaxed),
            shared.repl.stats.sync_partial_err.load(Relaxed),
            shared.store.expired_total(),
            shared.store.evicted_total(),
            shared.store.rejected_total(),
            shared.pubsub.channel_count(),
            shared.errors.total(),
            shared.stats.tls_handshakes_refused(),
        ),
        "persistence" => {
            let p = &shared.persist;
            write!(
                t,
                "# Persistence\r\nloading:0\r\nrdb_bgsave_in_progress:{}\r\nrdb_last_save_time:{}\r\nrdb_last_bgsave_status:{}\r\nsnapshot_enabled:{}\r\n",
                u8::from(p.bgsave_in_progress()),
                p.last_save(),
                if p.last_ok() { "ok" } else { "err" },
                u8::from(p.enabled()),
            )
        }
        "replication" => replication(shared, t),
        "cpu" => cpu(t),
        "errorstats" => errorstats(shared, t),
        "commandstats" => commandstats(shared, t),
        "latencystats" => latencystats(shared, t),
        "cluster" => write!(
            t,
            "# Cluster\r\ncluster_enabled:{}\r\n",
            u8::from(shared.cluster.is_some())
        ),
        "scripting" => {
            t.push_str("# Scripting\r\n");
            crate::script::native::info(t);
            Ok(())
        }
        "regions" => {
            super::rl_region::info_section(shared.regions.status().as_ref(), t);
            Ok(())
        }
        "keyspace" => {
            let keys = shared.store.len(ctx.now);
            let _ = t.write_str("# Keyspace\r\n");
            if keys > 0 {
                write!(
                    t,
                    "db0:keys={keys},expires={},avg_ttl=0\r\n",
                    shared.store.expires_count(ctx.now)
                )
            } else {
                Ok(())
            }
        }
        _ => Ok(()),
    };
}
