//! Asking the Sentinels who the primary is before serving (`--sentinel`, `--master-name`).
//!
//! A primary killed and restarted comes back from its last snapshot, up to `--save-interval`
//! old. Served again as a primary, that snapshot grants a second time the quota spent since
//! it was written, which the replicas hold and a promoted replica keeps: the failover bound no
//! longer holds. So a node started with `--sentinel` asks, before it binds a port, every
//! Sentinel listed `SENTINEL get-master-addr-by-name NAME` (and `SENTINEL master NAME` for the
//! configuration epoch and the timings; the newest epoch wins), each with a deadline of
//! [`ASK_TIMEOUT`]:
//!
//! - **Another node is the primary** (a failover happened while this one was down): the node
//!   starts as its replica, as if `--replicaof` named it, and syncs from it. Its snapshot is
//!   never served as a primary.
//! - **This node is still the primary**: the Sentinels have not decided. This is Redis's
//!   "persistence off and auto restart" hazard (a primary back before Sentinel's
//!   `down-after-milliseconds` ends is seen healthy, so no failover happens, while it serves
//!   older state than its replicas hold), and the fix is Redis's: stay unreachable long enough
//!   for the Sentinels to see the failure. The node binds no port and asks again every
//!   [`POLL`] until they name another node, or until `down-after-milliseconds` +
//!   `failover-timeout` (as the Sentinel reports them; at most [`MAX_WAIT`]) have passed: then
//!   no failover is coming (no quorum, no replica fit), and the node starts as the primary
//!   with a warning. Two cases start it as the primary at once: the Sentinel knows no replica
//!   it could promote (waiting cannot bring a failover), or every replica it lists answers
//!   that it holds no more of this node's stream than the snapshot does (a graceful stop
//!   writes a last snapshot: nothing would be granted twice, and a failover would only cost
//!   its time).
//! - **No Sentinel answers** (or none knows `NAME`): the node starts as configured, with a
//!   warning.
//!
//! The Sentinels are reached over plain TCP without AUTH (a Sentinel with `requirepass` or
//! TLS only is not asked: the node then starts as configured, with the warning); the
//! replicas over plain TCP with `--masteruser`/`--masterauth` (one on TLS only counts as
//! ahead, so the node waits).
//!
//! This runs once, before the server exists: it reads and changes the [`Config`] only.

use std::io::{Read, Write};
use std::net::{IpAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use sluice_resp::value::{self, Value};

use crate::config::{Config, MasterAddr};

/// How long connecting to one Sentinel, and its replies, may take.
pub const ASK_TIMEOUT: Duration = Duration::from_millis(500);
/// How often a node the Sentinels still name asks them again.
pub const POLL: Duration = Duration::from_millis(250);
/// The longest a node waits for the Sentinels' verdict: under systemd's default start timeout
/// (90 s), so a `Type=notify` unit is not failed for waiting.
pub const MAX_WAIT: Duration = Duration::from_secs(60);
/// Sentinel's defaults, for a Sentinel that does not report its own.
const DEFAULT_DOWN_AFTER_MS: u64 = 30_000;
const DEFAULT_FAILOVER_TIMEOUT_MS: u64 = 180_000;

/// What one Sentinel said of the primary named `NAME`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    pub primary: MasterAddr,
    /// The configuration epoch of the Sentinel's view: a failover raises it.
    pub epoch: u64,
    /// `down-after-milliseconds` + `failover-timeout`: how long a failover may still take.
    pub failover_within: Duration,
    /// Replicas the Sentinel could promote: not down, priority above 0.
    pub promotable: usize,
    /// Every replica the Sentinel knows of, promotable or not.
    pub replicas: Vec<MasterAddr>,
}

/// Asks the Sentinels of `config` before the node serves, and settles its role: a replica of
/// the primary they name, or the primary once they have had their chance to fail over.
/// Without `--sentinel` it does nothing. It never fails the start: with no answer the node
/// starts as configured.
pub fn settle(config: &mut Config) {
    let (Some(name), false) = (config.master_name.clone(), config.sentinel.is_empty()) else {
        return;
    };
    let mut deadline: Option<Instant> = None;
    loop {
        let newest = newest(config.sentinel.iter().filter_map(|s| ask(s, &name)), config);
        match (newest, deadline) {
            (Some(r), _) if !is_this_node(&r.primary, config) => {
                sluice_log::log(&format!(
                    "Sentinel names {}:{} the primary of '{name}' (epoch {}): starting as its replica, so this node's snapshot is not served as a primary",
                    r.primary.host, r.primary.port, r.epoch
                ));
                config.replicaof = Some(r.primary);
                return;
            }
            (None, None) => {
                sluice_log::warn(&format!(
                    "WARNING: no Sentinel of --sentinel answered for '{name}': starting as configured, without the Sentinels' view of who the primary is"
                ));
                return;
            }
            (Some(r), None) if r.promotable == 0 => {
                sluice_log::log(&format!(
                    "Sentinel names this node the primary of '{name}' and knows no replica it could promote: serving as the primary"
                ));
                config.replicaof = None;
                return;
            }
            (Some(r), None) if snapshot_is_newest(config, &r.replicas) => {
                sluice_log::log(&format!(
                    "Sentinel names this node the primary of '{name}', and no replica holds more of its stream than its snapshot (a clean stop): serving as the primary"
                ));
                config.replicaof = None;
                return;
            }
            (Some(r), None) => {
                let wait = r.failover_within.min(MAX_WAIT);
                sluice_log::log(&format!(
                    "Sentinel still names this node the primary of '{name}': not serving for up to {} ms, until the Sentinels fail over to a replica (this node's snapshot may be older than the replicas' state)",
                    wait.as_millis()
                ));
                deadline = Some(Instant::now() + wait);
            }
            (_, Some(end)) if Instant::now() >= end => {
                sluice_log::warn(&format!(
                    "WARNING: the Sentinels did not fail over '{name}' while this node waited: serving as the primary from its snapshot"
                ));
                config.replicaof = None;
                return;
            }
            (_, Some(_)) => {}
        }
        std::thread::sleep(POLL);
    }
}

/// The report with the newest configuration epoch; among equal epochs, one naming another
/// node (a failover got that far) over one naming this node.
fn newest(reports: impl Iterator<Item = Report>, config: &Config) -> Option<Report> {
    reports.max_by_key(|r| (r.epoch, !is_this_node(&r.primary, config)))
}

/// Whether `addr` is this node: one of its ports, on an address of this machine.
pub fn is_this_node(addr: &MasterAddr, config: &Config) -> bool {
    let ports = [Some(config.port), config.tls_port];
    if addr.port == 0 || !ports.contains(&Some(addr.port)) {
        return false;
    }
    (addr.host.as_str(), 0)
        .to_socket_addrs()
        .is_ok_and(|mut ips| ips.any(|a| is_local(a.ip())))
}

/// Whether `ip` is an address of this machine: one it can bind.
fn is_local(ip: IpAddr) -> bool {
    ip.is_loopback() || std::net::TcpListener::bind((ip, 0)).is_ok()
}

/// Asks one Sentinel; `None` if it does not answer in time, or does not know `name`.
fn ask(sentinel: &MasterAddr, name: &str) -> Option<Report> {
    let name = name.as_bytes();
    let replies = call(
        sentinel,
        &[
            b"get-master-addr-by-name".as_slice(),
            b"master",
            b"replicas",
        ]
        .map(|cmd| vec![b"SENTINEL".as_slice(), cmd, name]),
    )?;
    report(&replies[0], &replies[1], &replies[2])
}

/// Sends `commands` to `to` in one write and reads their replies, all within
/// [`ASK_TIMEOUT`]; `None` if it does not answer them all in time.
fn call(to: &MasterAddr, commands: &[Vec<&[u8]>]) -> Option<Vec<Value>> {
    let addr = (to.host.as_str(), to.port).to_socket_addrs().ok()?.next()?;
    let mut stream = TcpStream::connect_timeout(&addr, ASK_TIMEOUT).ok()?;
    stream.set_read_timeout(Some(ASK_TIMEOUT)).ok()?;
    stream.set_write_timeout(Some(ASK_TIMEOUT)).ok()?;
    let mut out = BytesMut::new();
    for args in commands {
        value::encode_command(&mut out, args);
    }
    stream.write_all(&out).ok()?;
    let deadline = Instant::now() + ASK_TIMEOUT;
    let mut buf = BytesMut::with_capacity(4096);
    let mut replies = Vec::with_capacity(commands.len());
    while replies.len() < commands.len() {
        match value::decode(&mut buf).ok()? {
            Some(v) => replies.push(v),
            None => {
                if Instant::now() >= deadline {
                    return None;
                }
                let mut chunk = [0u8; 4096];
                let n = stream.read(&mut chunk).ok()?;
                if n == 0 {
                    return None;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
        }
    }
    Some(replies)
}

/// A [`Report`] from the replies to `get-master-addr-by-name`, `master` and `replicas`.
pub fn report(addr: &Value, master: &Value, replicas: &Value) -> Option<Report> {
    let Value::Array(addr) = addr else {
        return None;
    };
    let [host, port] = &addr[..] else {
        return None;
    };
    let primary = MasterAddr {
        host: host.text(),
        port: port.text().parse().ok().filter(|&p| p > 0)?,
    };
    let master = fields(master);
    let ms = |name: &str, default: u64| {
        field(&master, name)
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let failover_within = Duration::from_millis(
        ms("down-after-milliseconds", DEFAULT_DOWN_AFTER_MS)
            .min(MAX_WAIT.as_millis() as u64)
            .saturating_add(ms("failover-timeout", DEFAULT_FAILOVER_TIMEOUT_MS)),
    );
    // A Sentinel that does not answer `SENTINEL replicas` (an error: an old Sentinel, an ACL)
    // may still have one to promote: it counts as one, so the node waits for the failover
    // (bounded) rather than serve its snapshot at once.
    let listed = matches!(replicas, Value::Array(_));
    let replicas: Vec<Vec<(String, String)>> = match replicas {
        Value::Array(list) => list.iter().map(fields).collect(),
        _ => Vec::new(),
    };
    let promotable = if !listed {
        1
    } else {
        replicas
            .iter()
            .filter(|r| {
                let flags = field(r, "flags").unwrap_or_default();
                // Not `disconnected`: a Sentinel sets it on a replica it has just learned of
                // until its link is up, which a failover may still use.
                let up = !flags.split(',').any(|f| matches!(f, "s_down" | "o_down"));
                let priority = field(r, "replica-priority").or_else(|| field(r, "slave-priority"));
                up && priority.as_deref() != Some("0")
            })
            .count()
    };
    let replicas = replicas
        .iter()
        .filter_map(|r| {
            Some(MasterAddr {
                host: field(r, "ip")?,
                port: field(r, "port")?.parse().ok()?,
            })
        })
        .collect();
    Some(Report {
        primary,
        epoch: ms("config-epoch", 0),
        failover_within,
        promotable,
        replicas,
    })
}

/// Whether this node's snapshot holds all of its stream that any replica holds: it records
/// the replication id and offset it was taken at (a graceful stop writes the last one), and
/// every replica the Sentinel lists answers `INFO replication` within [`ASK_TIMEOUT`] with
/// that id and an offset no further. Then no replica knows of quota this node would grant
/// again, and a failover would only cost the time it takes. A replica that does not answer
/// (down, TLS, another password than `--masterauth`) counts as ahead.
fn snapshot_is_newest(config: &Config, replicas: &[MasterAddr]) -> bool {
    let Some((replid, offset)) = snapshot_origin(config) else {
        return false;
    };
    !replicas.is_empty()
        && replicas.iter().all(|r| {
            replica_position(r, config).is_some_and(|(id, at)| id == replid && at <= offset)
        })
}

/// The replication id and offset `--dir`'s snapshot was taken at, if a primary saved it.
fn snapshot_origin(config: &Config) -> Option<(String, u64)> {
    let path = config.dir.as_ref()?.join(crate::persist::FILE_NAME);
    let bytes = std::fs::read(path).ok()?;
    let reader = sluice_repl::SnapshotReader::new(&bytes).ok()?;
    reader.iter().find_map(|rec| match rec {
        Ok(sluice_repl::Record::Origin { replid, offset }) => {
            Some((String::from_utf8_lossy(replid).into_owned(), offset))
        }
        _ => None,
    })
}

/// A replica's `master_replid` and `slave_repl_offset`, asked with the credentials this
/// node's replication uses (`--masteruser`, `--masterauth`).
fn replica_position(replica: &MasterAddr, config: &Config) -> Option<(String, u64)> {
    let mut args: Vec<Vec<&[u8]>> = Vec::new();
    if let Some(pass) = &config.masterauth {
        let mut auth: Vec<&[u8]> = vec![b"AUTH"];
        auth.extend(config.masteruser.as_deref().map(str::as_bytes));
        auth.push(pass.as_bytes());
        args.push(auth);
    }
    args.push(vec![b"INFO", b"replication"]);
    let replies = call(replica, &args)?;
    let info = replies.last()?.text();
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    Some((
        field("master_replid")?.to_string(),
        field("slave_repl_offset")?.parse().ok()?,
    ))
}

/// A Sentinel's flat `name value name value ...` reply (or a RESP3 map) as pairs.
fn fields(v: &Value) -> Vec<(String, String)> {
    match v {
        Value::Array(items) => items
            .chunks_exact(2)
            .map(|kv| (kv[0].text(), kv[1].text()))
            .collect(),
        Value::Map(pairs) => pairs.iter().map(|(k, v)| (k.text(), v.text())).collect(),
        _ => Vec::new(),
    }
}

fn field(fields: &[(String, String)], name: &str) -> Option<String> {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use clap::Parser;

    fn bulk(s: &str) -> Value {
        Value::Bulk(Bytes::copy_from_slice(s.as_bytes()))
    }

    fn flat(pairs: &[(&str, &str)]) -> Value {
        Value::Array(pairs.iter().flat_map(|(k, v)| [bulk(k), bulk(v)]).collect())
    }

    #[test]
    fn a_report_reads_the_sentinels_fields() {
        let addr = Value::Array(vec![bulk("127.0.0.1"), bulk("7001")]);
        let master = flat(&[
            ("name", "rl"),
            ("config-epoch", "3"),
            ("down-after-milliseconds", "2000"),
            ("failover-timeout", "10000"),
        ]);
        let replicas = Value::Array(vec![
            flat(&[
                ("ip", "127.0.0.1"),
                ("port", "7002"),
                ("flags", "slave"),
                ("slave-priority", "100"),
            ]),
            flat(&[
                ("flags", "s_down,slave,disconnected"),
                ("slave-priority", "100"),
            ]),
            flat(&[("flags", "slave"), ("slave-priority", "0")]),
            flat(&[("flags", "slave,disconnected"), ("slave-priority", "100")]),
        ]);
        let r = report(&addr, &master, &replicas).unwrap();
        assert_eq!(
            (r.primary.host.as_str(), r.primary.port),
            ("127.0.0.1", 7001)
        );
        assert_eq!(r.epoch, 3);
        assert_eq!(r.failover_within, Duration::from_millis(12_000));
        assert_eq!(r.promotable, 2);
        let ports: Vec<u16> = r.replicas.iter().map(|a| a.port).collect();
        assert_eq!(ports, [7002], "the replicas with an address");
        // A Sentinel that does not know the name answers nil.
        assert!(report(&Value::Nil, &Value::Error("ERR".into()), &Value::Nil).is_none());
        // One that reports no timings: Sentinel's defaults.
        let r = report(&addr, &Value::Nil, &Value::Array(vec![])).unwrap();
        assert_eq!(r.failover_within, Duration::from_millis(210_000));
        assert_eq!(r.promotable, 0);
        // One that refuses to list its replicas may have one to promote.
        let r = report(&addr, &Value::Nil, &Value::Error("ERR unknown".into())).unwrap();
        assert_eq!((r.promotable, r.replicas.len()), (1, 0));
    }

    #[test]
    fn this_node_is_its_port_on_a_local_address() {
        let c = Config::parse_from(["sluice", "--port", "7000", "--tls-port", "7443"]);
        let at = |host: &str, port| MasterAddr {
            host: host.into(),
            port,
        };
        assert!(is_this_node(&at("127.0.0.1", 7000), &c));
        assert!(is_this_node(&at("localhost", 7443), &c));
        assert!(!is_this_node(&at("127.0.0.1", 7001), &c));
        // TEST-NET-1: no machine's own address.
        assert!(!is_this_node(&at("192.0.2.1", 7000), &c));
    }

    #[test]
    fn the_newest_epoch_wins_and_a_failover_breaks_a_tie() {
        let c = Config::parse_from(["sluice", "--port", "7000"]);
        let r = |port, epoch| Report {
            primary: MasterAddr {
                host: "127.0.0.1".into(),
                port,
            },
            epoch,
            failover_within: Duration::ZERO,
            promotable: 1,
            replicas: Vec::new(),
        };
        let pick = |rs: Vec<Report>| newest(rs.into_iter(), &c).map(|r| r.primary.port);
        assert_eq!(pick(vec![r(7001, 1), r(7000, 2)]), Some(7000));
        assert_eq!(pick(vec![r(7000, 2), r(7001, 2)]), Some(7001));
        assert_eq!(pick(vec![]), None);
    }
}
