//! `CLUSTER <subcommand>` — Redis Cluster's client-facing view of the slot table, and the
//! internal steps the admin tool drives.
//!
//! For clients: `SLOTS`, `SHARDS`, `NODES`, `INFO`, `MYID`, `KEYSLOT`, `COUNTKEYSINSLOT`,
//! `GETKEYSINSLOT`, in the reply shapes redis-rs, redis-py, ioredis, Jedis, Lettuce,
//! `redis-cli -c` and `redis-benchmark --cluster` parse.
//! For the admin tool and peers: `SETTABLE <text>` (installs a table with a higher epoch),
//! `GETTABLE`, and the slot migration steps `IMPORT`, `IMPORT-STATUS`, `MIGRATE-FEED`,
//! `PAUSE`, `UNPAUSE`, `MIGRATE-STATUS`, `MIGRATE-CANCEL` (see `cluster::migrate`).

use std::time::{Duration, Instant};

use sluice_cluster::{SlotTable, key_slot};
use sluice_resp::reply;

use super::args::parse_i64;
use super::{Args, CmdError, Command, Ctx};
use crate::cluster::Job;
use crate::cluster::{self, Cluster};
use crate::cluster::{format_ranges, parse_range};
use crate::repl::PsyncRequest;

#[derive(Debug)]
pub enum ClusterCmd<'a> {
    Info,
    MyId,
    Slots,
    Shards,
    Nodes,
    KeySlot(&'a [u8]),
    CountKeysInSlot(u16),
    GetKeysInSlot(u16, usize),
    SetTable(&'a [u8]),
    GetTable,
    /// Source host, port, its TLS port if given (`TLS-PORT n`), ranges.
    Import(String, u16, Option<u16>, Vec<(u16, u16)>),
    ImportStatus,
    MigrateFeed(Vec<(u16, u16)>),
    Pause(u64, Vec<(u16, u16)>),
    Unpause,
    MigrateStatus,
    MigrateCancel,
    Help,
}

fn slot_arg(b: &[u8]) -> Result<u16, CmdError> {
    parse_i64(b)
        .and_then(|n| u16::try_from(n).ok())
        .filter(|&n| usize::from(n) < sluice_cluster::SLOTS)
        .ok_or_else(|| CmdError::msg("ERR Invalid or out of range slot"))
}

fn ranges(args: &mut Args<'_>) -> Result<Vec<(u16, u16)>, CmdError> {
    ranges_in(args.rest())
}

/// [`ranges`] of these arguments.
fn ranges_in<'x>(items: impl IntoIterator<Item = &'x [u8]>) -> Result<Vec<(u16, u16)>, CmdError> {
    let mut out = Vec::new();
    for a in items {
        out.push(parse_range(a).ok_or_else(|| {
            CmdError::msg(format!(
                "ERR '{}' is not a slot range (start-end, 0-16383)",
                String::from_utf8_lossy(a)
            ))
        })?);
    }
    if out.is_empty() {
        return Err(CmdError::Syntax);
    }
    // Overlapping and adjacent ranges merged: whatever a client lists, marking the slots
    // touches each of the 16384 at most once.
    out.sort_unstable();
    let mut merged: Vec<(u16, u16)> = Vec::with_capacity(out.len().min(sluice_cluster::SLOTS));
    for (a, b) in out {
        match merged.last_mut() {
            Some(last) if u32::from(a) <= u32::from(last.1) + 1 => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    Ok(merged)
}

impl<'a> Command<'a> for ClusterCmd<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let sub = args.required()?.to_ascii_uppercase();
        let cmd = match sub.as_slice() {
            b"INFO" => ClusterCmd::Info,
            b"MYID" => ClusterCmd::MyId,
            b"SLOTS" => ClusterCmd::Slots,
            b"SHARDS" => ClusterCmd::Shards,
            b"NODES" => ClusterCmd::Nodes,
            b"KEYSLOT" => ClusterCmd::KeySlot(args.required()?),
            b"COUNTKEYSINSLOT" => ClusterCmd::CountKeysInSlot(slot_arg(args.required()?)?),
            b"GETKEYSINSLOT" => {
                let slot = slot_arg(args.required()?)?;
                let count = parse_i64(args.required()?)
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or_else(|| CmdError::msg("ERR Invalid number of keys"))?;
                ClusterCmd::GetKeysInSlot(slot, count)
            }
            b"SETTABLE" => ClusterCmd::SetTable(args.required()?),
            b"GETTABLE" => ClusterCmd::GetTable,
            b"IMPORT" => {
                let host = String::from_utf8_lossy(args.required()?).into_owned();
                let port_arg = |a: &[u8]| {
                    parse_i64(a)
                        .and_then(|p| u16::try_from(p).ok())
                        .ok_or(CmdError::NotInteger)
                };
                let port = port_arg(args.required()?)?;
                // `CLUSTER IMPORT host port [TLS-PORT n] range...`: the source's TLS port, for
                // `--tls-cluster yes` before this node has a table that names it.
                let rest: Vec<&[u8]> = args.rest().collect();
                let (tls_port, rest) = match rest.as_slice() {
                    [opt, n, rest @ ..] if opt.eq_ignore_ascii_case(b"TLS-PORT") => {
                        (Some(port_arg(n)?), rest)
                    }
                    rest => (None, rest),
                };
                ClusterCmd::Import(host, port, tls_port, ranges_in(rest.iter().copied())?)
            }
            b"IMPORT-STATUS" => ClusterCmd::ImportStatus,
            b"MIGRATE-FEED" => ClusterCmd::MigrateFeed(ranges(args)?),
            b"PAUSE" => {
                let ms = parse_i64(args.required()?)
                    .and_then(|n| u64::try_from(n).ok())
                    .ok_or(CmdError::NotInteger)?;
                if ms > sluice_cluster::MAX_PAUSE_MS {
                    return Err(CmdError::msg(format!(
                        "ERR CLUSTER PAUSE lasts at most {} ms",
                        sluice_cluster::MAX_PAUSE_MS
                    )));
                }
                ClusterCmd::Pause(ms, ranges(args)?)
            }
            b"UNPAUSE" => ClusterCmd::Unpause,
            b"MIGRATE-STATUS" => ClusterCmd::MigrateStatus,
            b"MIGRATE-CANCEL" => ClusterCmd::MigrateCancel,
            b"HELP" => ClusterCmd::Help,
            _ => {
                return Err(CmdError::msg(format!(
                    "ERR unknown subcommand '{}'. Try CLUSTER HELP.",
                    String::from_utf8_lossy(&sub)
                )));
            }
        };
        if !matches!(
            cmd,
            ClusterCmd::Import(..) | ClusterCmd::MigrateFeed(_) | ClusterCmd::Pause(..)
        ) {
            args.finish()?;
        }
        Ok(cmd)
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let cluster = enabled(ctx)?;
        let view = cluster.view();
        let out = &mut *ctx.out;
        let proto = ctx.session.proto;
        let tls = ctx.session.tls;
        match self {
            ClusterCmd::MyId => reply::bulk(out, cluster.myid.as_bytes()),
            ClusterCmd::KeySlot(key) => reply::integer(out, i64::from(key_slot(key))),
            ClusterCmd::Info => {
                let text = info(cluster);
                reply::verbatim(out, proto, "txt", text.as_bytes());
            }
            ClusterCmd::Slots => match &view {
                None => reply::array(out, 0),
                Some(v) => slots(out, &v.table, tls),
            },
            ClusterCmd::Shards => match &view {
                None => reply::array(out, 0),
                Some(v) => {
                    let links = Links::of(ctx.shared, &cluster.myid);
                    shards(out, proto, &v.table, &links)
                }
            },
            ClusterCmd::Nodes => {
                let text = nodes(cluster, tls);
                reply::verbatim(out, proto, "txt", text.as_bytes());
            }
            ClusterCmd::CountKeysInSlot(slot) => {
                let n = ctx
                    .shared
                    .store
                    .count_where(ctx.now, |k| key_slot(k) == slot);
                reply::integer(out, n as i64);
            }
            ClusterCmd::GetKeysInSlot(slot, count) => {
                let keys = ctx
                    .shared
                    .store
                    .keys_where(ctx.now, count, |k| key_slot(k) == slot);
                reply::array(out, keys.len());
                for k in keys {
                    reply::bulk(out, &k);
                }
            }
            ClusterCmd::GetTable => match &view {
                None => reply::null(out, proto),
                Some(v) => reply::bulk(out, v.table.encode().as_bytes()),
            },
            ClusterCmd::SetTable(text) => {
                set_table(ctx.shared, text)?;
                reply::simple(ctx.out, "OK");
            }
            ClusterCmd::Import(host, port, tls_port, ranges) => {
                if let Some(tls_port) = tls_port {
                    cluster.learn_tls_port(&host, port, tls_port);
                }
                sluice_log::log(&format!(
                    "CLUSTER IMPORT of slots {} from {host}:{port}",
                    format_ranges(&ranges).join(" ")
                ));
                let (tx, asker) = tokio::sync::oneshot::channel();
                ctx.session.asked.push(tx);
                cluster.jobs.submit(Job::Import {
                    host,
                    port,
                    ranges,
                    asker,
                });
                reply::simple(out, "OK");
            }
            ClusterCmd::ImportStatus => import_status(out, cluster),
            // It hands the socket over: inside EXEC that would break the array of replies.
            ClusterCmd::MigrateFeed(_) if ctx.session.in_exec => {
                return Err(CmdError::msg(
                    "ERR Command not allowed inside a transaction",
                ));
            }
            ClusterCmd::MigrateFeed(ranges) => migrate_feed(ctx.session, &ranges)?,
            ClusterCmd::Pause(ms, ranges) => {
                let until = Instant::now() + Duration::from_millis(ms);
                let pause = cluster.pause(&ranges, until, ctx.session.thread);
                let (tx, asker) = tokio::sync::oneshot::channel();
                ctx.session.asked.push(tx);
                cluster.jobs.submit(Job::PauseAsked { pause, asker });
                let offset = ctx.shared.repl.flush(&ctx.shared.store, true);
                reply::integer(out, offset as i64);
            }
            ClusterCmd::Unpause => {
                cluster.unpause();
                reply::simple(out, "OK");
            }
            ClusterCmd::MigrateStatus => {
                let (feeds, acked) = ctx.shared.repl.feeds_acked();
                reply::array(out, 2);
                reply::integer(out, feeds as i64);
                reply::integer(out, if feeds == 0 { -1 } else { acked as i64 });
            }
            ClusterCmd::MigrateCancel => {
                cluster.unpause();
                ctx.shared.repl.close_feeds(&ctx.shared.store);
                reply::simple(out, "OK");
            }
            ClusterCmd::Help => help(out),
        }
        Ok(())
    }
}

/// `SETTABLE <text>`: installs the table if its epoch is higher.
fn set_table(shared: &crate::shared::Shared, text: &[u8]) -> Result<(), CmdError> {
    let text =
        std::str::from_utf8(text).map_err(|_| CmdError::msg("ERR the table is not UTF-8 text"))?;
    let table =
        SlotTable::decode(text).map_err(|e| CmdError::msg(format!("ERR invalid table: {e}")))?;
    cluster::adopt::adopt(shared, table).map_err(|e| CmdError::msg(format!("ERR {e}")))
}

/// `IMPORT-STATUS`: one line per import.
fn import_status(out: &mut bytes::BytesMut, cluster: &Cluster) {
    let all = cluster.imports.all();
    reply::array(out, all.len());
    for s in all {
        let line = format!(
            "source={} slots={} state={} entries={} offset={}",
            s.source,
            format_ranges(&s.ranges).join(","),
            s.state,
            s.entries,
            s.offset
        );
        reply::bulk(out, line.as_bytes());
    }
}

/// `MIGRATE-FEED <start-end> ...`: hands the connection to the replication thread as a feed
/// of those slots.
fn migrate_feed(session: &mut super::Session, ranges: &[(u16, u16)]) -> Result<(), CmdError> {
    if !session.replica_capa {
        return Err(CmdError::msg(format!(
            "ERR MIGRATE-FEED needs REPLCONF capa {} first",
            sluice_repl::CAPA
        )));
    }
    let mut filter = [false; sluice_cluster::SLOTS];
    for &(a, b) in ranges {
        for s in a..=b {
            filter[usize::from(s)] = true;
        }
    }
    session.handoff = Some(PsyncRequest {
        peer: session.client.addr,
        client: session.client.clone(),
        listening_port: 0,
        replid: b"?".to_vec(),
        offset: -1,
        filter: Some(std::sync::Arc::new(filter)),
    });
    Ok(())
}

fn help(out: &mut bytes::BytesMut) {
    let lines = [
        "CLUSTER <subcommand> [<arg> ...]. Subcommands are:",
        "INFO, MYID, SLOTS, SHARDS, NODES",
        "KEYSLOT <key>, COUNTKEYSINSLOT <slot>, GETKEYSINSLOT <slot> <count>",
        "SETTABLE <table>, GETTABLE: the slot table (sluice cluster drives these)",
        "IMPORT <host> <port> <start-end> ..., IMPORT-STATUS: pull slots from their owner",
        "MIGRATE-FEED <start-end> ...: stream those slots to an importing node",
        "PAUSE <ms> <start-end> ..., UNPAUSE, MIGRATE-STATUS, MIGRATE-CANCEL: the handover",
    ];
    reply::array(out, lines.len());
    for l in lines {
        reply::simple(out, l);
    }
}

fn info(cluster: &Cluster) -> String {
    let view = cluster.view();
    let loading = cluster.loading.load(std::sync::atomic::Ordering::Acquire);
    let (ok, known, size, epoch) = match &view {
        Some(v) => (
            !loading,
            v.table
                .shards
                .iter()
                .map(|s| 1 + s.replicas.len())
                .sum::<usize>(),
            v.table
                .shards
                .iter()
                .enumerate()
                .filter(|(i, _)| v.table.slots_of(*i) > 0)
                .count(),
            v.table.epoch,
        ),
        None => (false, 1, 0, 0),
    };
    let assigned = if view.is_some() {
        sluice_cluster::SLOTS
    } else {
        0
    };
    format!(
        "cluster_state:{}\r\ncluster_slots_assigned:{assigned}\r\ncluster_slots_ok:{assigned}\r\ncluster_slots_pfail:0\r\ncluster_slots_fail:0\r\ncluster_known_nodes:{known}\r\ncluster_size:{size}\r\ncluster_current_epoch:{epoch}\r\ncluster_my_epoch:{epoch}\r\ncluster_stats_messages_sent:0\r\ncluster_stats_messages_received:0\r\ntotal_cluster_links_buffer_limit_exceeded:0\r\n",
        if ok { "ok" } else { "fail" },
    )
}

/// `[start, end, [ip, port, id], replicas...]` per range; `port` is the TLS port for a TLS
/// client (`tls`) where the node has one, as here and in SHARDS and NODES.
fn slots(out: &mut bytes::BytesMut, table: &SlotTable, tls: bool) {
    reply::array(out, table.ranges.len());
    for r in &table.ranges {
        let shard = &table.shards[r.shard];
        reply::array(out, 3 + shard.replicas.len());
        reply::integer(out, i64::from(r.start));
        reply::integer(out, i64::from(r.end));
        for n in std::iter::once(&shard.primary).chain(&shard.replicas) {
            reply::array(out, 3);
            reply::bulk(out, n.host.as_bytes());
            reply::integer(out, i64::from(n.port_for(tls)));
            reply::bulk(out, n.id.as_bytes());
        }
    }
}

/// What this node knows first-hand of other nodes' replication: itself, the replicas linked to
/// it, and its own primary's link. There is no gossip bus, so of any other node it knows
/// nothing, and CLUSTER SHARDS says nothing of its offset or health.
struct Links {
    myid: String,
    /// This node's replication offset.
    offset: u64,
    /// As a replica: whether the link to the primary is up.
    primary_link: Option<bool>,
    /// Replicas linked to this node: ip, listening port, acked offset, past the full sync.
    replicas: Vec<(String, u16, u64, bool)>,
}

impl Links {
    fn of(shared: &crate::shared::Shared, myid: &str) -> Links {
        let inner = shared.repl.inner.lock();
        Links {
            myid: myid.to_string(),
            offset: inner.offset,
            primary_link: inner.master.as_ref().map(|_| inner.link_up_since.is_some()),
            replicas: inner
                .replicas()
                .map(|r| (r.ip.to_string(), r.port, r.ack, r.online))
                .collect(),
        }
    }

    /// `(replication-offset, health)` of `node`, a member of a shard whose primary is
    /// `primary`, if this node knows them first-hand.
    fn of_node(&self, node: &sluice_cluster::Node, primary: &str) -> Option<(u64, &'static str)> {
        if node.id == self.myid {
            return Some((self.offset, "online"));
        }
        if primary == self.myid {
            // One of my replicas: linked (loading while its full sync runs), or not at all.
            let linked = self
                .replicas
                .iter()
                .find(|r| r.0 == node.host && node.listens_on(r.1));
            return Some(match linked {
                Some(&(_, _, ack, true)) => (ack, "online"),
                Some(&(_, _, ack, false)) => (ack, "loading"),
                None => (0, "failed"),
            });
        }
        // My primary: what I have applied of its stream is what I know of its offset.
        match self.primary_link {
            Some(up) if node.id == primary => {
                Some((self.offset, if up { "online" } else { "failed" }))
            }
            _ => None,
        }
    }
}

/// Redis 7's CLUSTER SHARDS: per shard, its slots and its nodes, with `port` and, for a node
/// that has one, `tls-port`. `replication-offset` and `health` are given for the nodes this one
/// has a replication link with (see [`Links`]).
fn shards(out: &mut bytes::BytesMut, proto: reply::Proto, table: &SlotTable, links: &Links) {
    reply::array(out, table.shards.len());
    for (i, shard) in table.shards.iter().enumerate() {
        reply::map(out, proto, 2);
        reply::bulk(out, b"slots");
        let ranges: Vec<_> = table.ranges.iter().filter(|r| r.shard == i).collect();
        reply::array(out, ranges.len() * 2);
        for r in ranges {
            reply::integer(out, i64::from(r.start));
            reply::integer(out, i64::from(r.end));
        }
        reply::bulk(out, b"nodes");
        reply::array(out, 1 + shard.replicas.len());
        for (n, role) in std::iter::once((&shard.primary, "master"))
            .chain(shard.replicas.iter().map(|r| (r, "replica")))
        {
            let known = links.of_node(n, &shard.primary.id);
            let fields = 5 + usize::from(n.tls_port.is_some()) + 2 * usize::from(known.is_some());
            reply::map(out, proto, fields);
            reply::bulk(out, b"id");
            reply::bulk(out, n.id.as_bytes());
            reply::bulk(out, b"port");
            reply::integer(out, i64::from(n.port));
            if let Some(tls_port) = n.tls_port {
                reply::bulk(out, b"tls-port");
                reply::integer(out, i64::from(tls_port));
            }
            reply::bulk(out, b"ip");
            reply::bulk(out, n.host.as_bytes());
            reply::bulk(out, b"endpoint");
            reply::bulk(out, n.host.as_bytes());
            reply::bulk(out, b"role");
            reply::bulk(out, role.as_bytes());
            if let Some((offset, health)) = known {
                reply::bulk(out, b"replication-offset");
                reply::integer(out, offset as i64);
                reply::bulk(out, b"health");
                reply::bulk(out, health.as_bytes());
            }
        }
    }
}

/// CLUSTER NODES: `<id> <ip:port@cport> <flags> <master> 0 0 <epoch> connected <slots>...`.
fn nodes(cluster: &Cluster, tls: bool) -> String {
    let Some(view) = cluster.view() else {
        return format!("{} :0@0 myself,master - 0 0 0 connected\n", cluster.myid);
    };
    let t = &view.table;
    let mut text = String::new();
    for (i, shard) in t.shards.iter().enumerate() {
        let me = |id: &str| if id == cluster.myid { "myself," } else { "" };
        let p = &shard.primary;
        text.push_str(&format!(
            "{} {}:{}@{} {}master - 0 0 {} connected",
            p.id,
            p.host,
            p.port_for(tls),
            u32::from(p.port) + 10000,
            me(&p.id),
            t.epoch
        ));
        for r in t.ranges.iter().filter(|r| r.shard == i) {
            if r.start == r.end {
                text.push_str(&format!(" {}", r.start));
            } else {
                text.push_str(&format!(" {}-{}", r.start, r.end));
            }
        }
        text.push('\n');
        for n in &shard.replicas {
            text.push_str(&format!(
                "{} {}:{}@{} {}slave {} 0 0 {} connected\n",
                n.id,
                n.host,
                n.port_for(tls),
                u32::from(n.port) + 10000,
                me(&n.id),
                p.id,
                t.epoch
            ));
        }
    }
    if view.my_shard.is_none() {
        text.push_str(&format!(
            "{} :0@0 myself,master - 0 0 {} connected\n",
            cluster.myid, t.epoch
        ));
    }
    text
}

/// `READONLY`.
pub type ReadOnly = SetReadOnly<true>;
/// `READWRITE`.
pub type ReadWrite = SetReadOnly<false>;

/// READONLY (`ON`) / READWRITE: whether this connection reads from a replica of the key's
/// shard.
#[derive(Debug)]
pub struct SetReadOnly<const ON: bool>;

impl<const ON: bool> Command<'_> for SetReadOnly<ON> {
    fn parse(_args: &mut Args<'_>) -> Result<Self, CmdError> {
        Ok(SetReadOnly)
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        enabled(ctx)?;
        ctx.session.readonly = ON;
        reply::simple(ctx.out, "OK");
        Ok(())
    }
}

/// The cluster, or the error of an instance with cluster support disabled.
fn enabled<'c>(ctx: &Ctx<'c>) -> Result<&'c Cluster, CmdError> {
    ctx.shared
        .cluster
        .as_ref()
        .ok_or_else(|| CmdError::msg("ERR This instance has cluster support disabled"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn import_takes_an_optional_tls_port() {
        let parse = |words: &[&str]| {
            let req = sluice_resp::Request::from_args(words);
            match ClusterCmd::parse(&mut Args::new(req.view())) {
                Ok(ClusterCmd::Import(host, port, tls, ranges)) => Ok((host, port, tls, ranges)),
                Ok(_) => panic!("not an import"),
                Err(e) => Err(e),
            }
        };
        assert_eq!(
            parse(&["CLUSTER", "IMPORT", "h", "7000", "0-9"]).unwrap(),
            ("h".into(), 7000, None, vec![(0, 9)])
        );
        assert_eq!(
            parse(&[
                "CLUSTER", "IMPORT", "h", "7000", "tls-port", "17000", "0-9", "20"
            ])
            .unwrap(),
            ("h".into(), 7000, Some(17000), vec![(0, 9), (20, 20)])
        );
        assert!(parse(&["CLUSTER", "IMPORT", "h", "7000", "TLS-PORT", "x", "0-9"]).is_err());
        assert!(parse(&["CLUSTER", "IMPORT", "h", "7000", "TLS-PORT", "17000"]).is_err());
    }

    #[test]
    fn ranges_merge_so_each_slot_is_marked_once() {
        let req = sluice_resp::Request::from_args(&[
            "PAUSE", "5-9", "0-3", "4-4", "20-30", "25-26", "31",
        ]);
        let mut args = Args::new(req.view());
        assert_eq!(ranges(&mut args).unwrap(), [(0, 9), (20, 31)]);
        // However many copies of the whole range, one range.
        let mut many = vec!["0-16383"; 100_000];
        many[0] = "PAUSE";
        let req = sluice_resp::Request::from_args(&many);
        assert_eq!(ranges(&mut Args::new(req.view())).unwrap(), [(0, 16383)]);
    }
}
