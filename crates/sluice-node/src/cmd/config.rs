//! `CONFIG GET pattern [pattern ...]`, `CONFIG SET name value [name value ...]`,
//! `CONFIG RESETSTAT`, `CONFIG REWRITE`, `CONFIG HELP` — for the settings that exist.
//!
//! The settings with a `set` below change at run time; the others answer as Redis does for an
//! immutable setting (the README says why each cannot change).
//!
//! # Rewrite
//! `CONFIG REWRITE` writes the running values into the config file the server started with
//! ([`crate::conffile`]): every line of a setting that can change at run time (and
//! `replicaof`, which REPLICAOF changes) gets the current value in place; such a setting with
//! no line gets one appended if it changed since start; comments and every other line stay.
//! A size is written in units as Redis writes it (`maxmemory 2gb`, not `2147483648`).
//! Sentinel sends it after each REPLICAOF, so a restarted node keeps the role it was given.

use sluice_resp::reply;

use std::sync::atomic::Ordering::Relaxed;

use super::{Args, CmdError, Command, Ctx};
use crate::glob::glob_match;
use crate::live::Live;
use crate::shared::Shared;

/// Validates a new value of a setting, changing nothing: what to apply once every value of the
/// CONFIG SET has been validated.
type Parse = fn(&str) -> Result<Change, String>;

/// One setting CONFIG knows: how to read it and, if it can change at run time, how to parse a
/// new value.
struct Setting {
    name: &'static str,
    get: fn(&Shared) -> String,
    /// `None` for settings fixed at start.
    set: Option<Parse>,
}

/// A validated new value. CONFIG SET applies its changes only after all of them parsed, so a
/// bad value anywhere in the call changes nothing, as in Redis.
#[derive(Debug)]
enum Change {
    MaxClients(usize),
    MaxMemory(u64),
    Policy(sluice_store::EvictionPolicy),
    RequirePass(Option<String>),
    Timeout(u64),
    MinReplicasToWrite(u64),
    MinReplicasMaxLag(u64),
    MasterAuth(Option<String>),
    ReplicaPriority(u64),
    SaveInterval(u64),
    TcpKeepalive(u64),
    ReplTimeout(u64),
    LogLevel(sluice_log::Level),
    SlowlogSlowerThan(i64),
    SlowlogMaxLen(usize),
    ReplicaReadOnly(bool),
    BusyReplyThreshold(u64),
}

impl Change {
    fn apply(self, s: &Shared) {
        match self {
            Change::MaxClients(n) => s.maxclients.store(n, Relaxed),
            Change::MaxMemory(n) => s
                .store
                .set_maxmemory(usize::try_from(n).unwrap_or(usize::MAX)),
            Change::Policy(p) => s.store.set_policy(p),
            Change::RequirePass(p) => {
                s.acl.set_requirepass(p.as_deref());
                *s.requirepass.write() = p;
            }
            Change::Timeout(secs) => s.timeout_secs.store(secs, Relaxed),
            Change::MinReplicasToWrite(n) => {
                s.repl.min_replicas.set_to_write(n);
                s.repl.refresh_good_replicas();
            }
            Change::MinReplicasMaxLag(secs) => {
                s.repl.min_replicas.set_max_lag_secs(secs);
                s.repl.refresh_good_replicas();
            }
            Change::MasterAuth(p) => *s.live.masterauth.write() = p,
            Change::ReplicaPriority(n) => s.live.replica_priority.store(n, Relaxed),
            Change::SaveInterval(n) => s.live.save_interval.store(n, Relaxed),
            Change::TcpKeepalive(n) => s.live.tcp_keepalive.store(n, Relaxed),
            Change::ReplTimeout(n) => s.live.repl_timeout.store(n, Relaxed),
            Change::LogLevel(l) => sluice_log::set_level(l),
            Change::SlowlogSlowerThan(us) => s.slowlog.set_slower_than(us),
            Change::SlowlogMaxLen(n) => s.slowlog.set_max_len(n),
            Change::ReplicaReadOnly(on) => s.repl.set_replica_read_only(on),
            Change::BusyReplyThreshold(ms) => crate::script::busy::set_threshold_ms(ms),
        }
    }
}

fn set_replica_read_only(v: &str) -> Result<Change, String> {
    crate::config::parse_yes_no(v).map(Change::ReplicaReadOnly)
}

fn set_replica_priority(v: &str) -> Result<Change, String> {
    bounded(v).map(Change::ReplicaPriority)
}

/// Redis's `save "<seconds> <changes> ..."`: the first pair's seconds become the snapshot
/// interval (every interval saves, whatever changed); `""` turns periodic saves off.
fn set_save(v: &str) -> Result<Change, String> {
    match v.split_whitespace().next() {
        None => Ok(Change::SaveInterval(0)),
        Some(secs) => bounded(secs).map(Change::SaveInterval),
    }
}

fn set_slowlog_slower_than(v: &str) -> Result<Change, String> {
    let n: i64 = v
        .parse()
        .map_err(|_| "argument couldn't be parsed into an integer")?;
    if !(-1..=crate::config::MAX_SECONDS as i64).contains(&n) {
        return Err(format!(
            "argument must be between -1 and {} inclusive",
            crate::config::MAX_SECONDS
        ));
    }
    Ok(Change::SlowlogSlowerThan(n))
}

fn set_slowlog_max_len(v: &str) -> Result<Change, String> {
    let n: u64 = v
        .parse()
        .map_err(|_| "argument couldn't be parsed into an integer")?;
    if n > crate::config::MAX_SLOWLOG_LEN {
        return Err(format!(
            "argument must be between 0 and {} inclusive",
            crate::config::MAX_SLOWLOG_LEN
        ));
    }
    Ok(Change::SlowlogMaxLen(n as usize))
}

fn set_repl_timeout(v: &str) -> Result<Change, String> {
    match bounded(v)? {
        0 => Err("argument must be between 1 and 2147483647 inclusive".into()),
        n => Ok(Change::ReplTimeout(n)),
    }
}

/// `busy-reply-threshold` (and its old name `lua-time-limit`): milliseconds, Redis's range.
fn set_busy_reply_threshold(v: &str) -> Result<Change, String> {
    let n: i64 = v
        .parse()
        .map_err(|_| "argument couldn't be parsed into an integer")?;
    u64::try_from(n)
        .map(Change::BusyReplyThreshold)
        .map_err(|_| format!("argument must be between 0 and {} inclusive", i64::MAX))
}

fn busy_reply_threshold(_: &Shared) -> String {
    crate::script::busy::threshold_ms().to_string()
}

fn path_setting(p: &Option<std::path::PathBuf>) -> String {
    p.as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

/// An integer from 0 to [`crate::config::MAX_SECONDS`], in Redis's words when it is not.
fn bounded(v: &str) -> Result<u64, String> {
    let n: u64 = v
        .parse()
        .map_err(|_| "argument couldn't be parsed into an integer")?;
    if n > crate::config::MAX_SECONDS {
        return Err(format!(
            "argument must be between 0 and {} inclusive",
            crate::config::MAX_SECONDS
        ));
    }
    Ok(n)
}

fn min_replicas_max_lag(s: &Shared) -> String {
    s.repl.min_replicas.max_lag_secs().to_string()
}

fn min_replicas_to_write(s: &Shared) -> String {
    s.repl.min_replicas.to_write().to_string()
}

fn set_min_replicas_max_lag(v: &str) -> Result<Change, String> {
    bounded(v).map(Change::MinReplicasMaxLag)
}

fn set_min_replicas_to_write(v: &str) -> Result<Change, String> {
    bounded(v).map(Change::MinReplicasToWrite)
}

// Replication settings answer under their old `slave-` names too, as Redis's do.
fn replica_priority(s: &Shared) -> String {
    Live::get(&s.live.replica_priority).to_string()
}

fn yes_no(on: bool) -> String {
    if on { "yes" } else { "no" }.into()
}

fn replica_read_only(s: &Shared) -> String {
    if s.repl.replica_read_only() {
        "yes"
    } else {
        "no"
    }
    .into()
}

/// Every setting, sorted by name. `appendonly` is answered because tools such as
/// redis-benchmark ask: there is no append-only file. `save` is `<--save-interval> 1` with
/// `--dir` (a snapshot every interval), empty without.
const SETTINGS: &[Setting] = &[
    Setting {
        name: "appendonly",
        get: |_| "no".into(),
        set: None,
    },
    Setting {
        name: "bind",
        get: |s| s.config.bind.to_string(),
        set: None,
    },
    Setting {
        name: "busy-reply-threshold",
        get: busy_reply_threshold,
        set: Some(set_busy_reply_threshold),
    },
    Setting {
        name: "client-output-buffer-limit",
        get: |s| s.config.client_output_buffer_limit.to_string(),
        set: None,
    },
    Setting {
        name: "client-query-buffer-limit",
        get: |s| s.config.client_query_buffer_limit.to_string(),
        set: None,
    },
    Setting {
        name: "cluster-enabled",
        get: |s| if s.config.cluster { "yes" } else { "no" }.into(),
        set: None,
    },
    Setting {
        name: "databases",
        get: |_| "1".into(),
        set: None,
    },
    Setting {
        name: "dir",
        get: |s| path_setting(&s.config.dir),
        set: None,
    },
    Setting {
        name: "io",
        get: |s| match s.config.io {
            crate::config::IoLoop::Epoll => "epoll".into(),
            crate::config::IoLoop::Uring => "uring".into(),
        },
        set: None,
    },
    Setting {
        name: "log-format",
        get: |s| s.config.log.log_format.clone(),
        set: None,
    },
    Setting {
        name: "logfile",
        get: |s| path_setting(&s.config.log.logfile),
        set: None,
    },
    Setting {
        name: "loglevel",
        get: |_| sluice_log::level().name().into(),
        set: Some(|v| sluice_log::Level::parse(v).map(Change::LogLevel)),
    },
    Setting {
        name: "lua-time-limit",
        get: busy_reply_threshold,
        set: Some(set_busy_reply_threshold),
    },
    Setting {
        name: "masterauth",
        get: |s| s.live.masterauth().unwrap_or_default(),
        set: Some(|v| Ok(Change::MasterAuth((!v.is_empty()).then(|| v.to_string())))),
    },
    Setting {
        name: "maxclients",
        get: |s| s.maxclients.load(Relaxed).to_string(),
        set: Some(|v| {
            v.parse()
                .ok()
                .filter(|&n| n >= 1)
                .map(Change::MaxClients)
                .ok_or_else(|| "argument must be a positive integer".into())
        }),
    },
    Setting {
        name: "maxmemory",
        get: |s| s.store.maxmemory().to_string(),
        set: Some(|v| crate::config::parse_bytes(v).map(Change::MaxMemory)),
    },
    Setting {
        name: "maxmemory-policy",
        get: |s| crate::config::policy_name(s.store.policy()).into(),
        set: Some(|v| crate::config::parse_policy(v).map(Change::Policy)),
    },
    Setting {
        name: "min-replicas-max-lag",
        get: min_replicas_max_lag,
        set: Some(set_min_replicas_max_lag),
    },
    Setting {
        name: "min-replicas-to-write",
        get: min_replicas_to_write,
        set: Some(set_min_replicas_to_write),
    },
    Setting {
        name: "min-slaves-max-lag",
        get: min_replicas_max_lag,
        set: Some(set_min_replicas_max_lag),
    },
    Setting {
        name: "min-slaves-to-write",
        get: min_replicas_to_write,
        set: Some(set_min_replicas_to_write),
    },
    Setting {
        name: "pidfile",
        get: |s| path_setting(&s.config.service.pidfile),
        set: None,
    },
    Setting {
        name: "port",
        // TLS only: no plain port, 0 as in Redis.
        get: |s| {
            if s.config.tls_only() {
                0
            } else {
                s.local_addr.port()
            }
            .to_string()
        },
        set: None,
    },
    Setting {
        name: "proto-max-bulk-len",
        get: |s| s.config.proto_max_bulk_len.to_string(),
        set: None,
    },
    Setting {
        name: "repl-backlog-size",
        get: |s| s.config.repl_backlog_size.to_string(),
        set: None,
    },
    Setting {
        name: "repl-timeout",
        get: |s| Live::get(&s.live.repl_timeout).to_string(),
        set: Some(set_repl_timeout),
    },
    Setting {
        name: "replica-priority",
        get: replica_priority,
        set: Some(set_replica_priority),
    },
    Setting {
        name: "replica-read-only",
        get: replica_read_only,
        set: Some(set_replica_read_only),
    },
    Setting {
        name: "replicaof",
        get: |s| {
            s.repl
                .inner
                .lock()
                .master
                .as_ref()
                .map(|m| format!("{} {}", m.host, m.port))
                .unwrap_or_default()
        },
        set: None,
    },
    Setting {
        name: "requirepass",
        get: |s| s.requirepass.read().clone().unwrap_or_default(),
        set: Some(|v| Ok(Change::RequirePass((!v.is_empty()).then(|| v.to_string())))),
    },
    Setting {
        name: "save",
        get: |s| match (&s.config.dir, Live::get(&s.live.save_interval)) {
            (Some(_), secs) if secs > 0 => format!("{secs} 1"),
            _ => String::new(),
        },
        set: Some(set_save),
    },
    Setting {
        name: "save-interval",
        get: |s| Live::get(&s.live.save_interval).to_string(),
        set: Some(|v| bounded(v).map(Change::SaveInterval)),
    },
    Setting {
        name: "shards",
        get: |s| s.store.shard_count().to_string(),
        set: None,
    },
    Setting {
        name: "slave-priority",
        get: replica_priority,
        set: Some(set_replica_priority),
    },
    Setting {
        name: "slave-read-only",
        get: replica_read_only,
        set: Some(set_replica_read_only),
    },
    Setting {
        name: "slowlog-log-slower-than",
        get: |s| s.slowlog.slower_than().to_string(),
        set: Some(set_slowlog_slower_than),
    },
    Setting {
        name: "slowlog-max-len",
        get: |s| s.slowlog.max_len().to_string(),
        set: Some(set_slowlog_max_len),
    },
    Setting {
        name: "supervised",
        get: |s| s.config.service.supervised.clone(),
        set: None,
    },
    Setting {
        name: "syslog-enabled",
        get: |s| s.config.log.syslog_enabled.clone(),
        set: None,
    },
    Setting {
        name: "syslog-facility",
        get: |s| s.config.log.syslog_facility.clone(),
        set: None,
    },
    Setting {
        name: "syslog-ident",
        get: |s| s.config.log.syslog_ident.clone(),
        set: None,
    },
    Setting {
        name: "tcp-keepalive",
        get: |s| Live::get(&s.live.tcp_keepalive).to_string(),
        set: Some(|v| bounded(v).map(Change::TcpKeepalive)),
    },
    Setting {
        name: "threads",
        get: |s| s.config.threads().to_string(),
        set: None,
    },
    Setting {
        name: "timeout",
        get: |s| s.timeout_secs.load(Relaxed).to_string(),
        set: Some(|v| bounded(v).map(Change::Timeout)),
    },
    Setting {
        name: "tls-cluster",
        get: |s| yes_no(s.config.tls_cluster),
        set: None,
    },
    Setting {
        name: "tls-port",
        get: |s| s.config.tls_port.unwrap_or(0).to_string(),
        set: None,
    },
    Setting {
        name: "tls-replication",
        get: |s| yes_no(s.config.tls_replication),
        set: None,
    },
    Setting {
        name: "unixsocket",
        get: |s| {
            s.config
                .unixsocket
                .as_deref()
                .map_or_else(String::new, |p| p.display().to_string())
        },
        set: None,
    },
    Setting {
        name: "unixsocketperm",
        get: |s| format!("{:o}", s.config.unixsocketperm),
        set: None,
    },
];

fn setting(name: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.name == name)
}

#[derive(Debug)]
pub enum ConfigCmd<'a> {
    Get(Vec<&'a [u8]>),
    Set(Vec<&'a [u8]>),
    ResetStat,
    Rewrite,
    Help,
}

impl<'a> Command<'a> for ConfigCmd<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let sub = args.key()?;
        Ok(match sub.to_ascii_uppercase().as_slice() {
            b"GET" if !args.is_empty() => ConfigCmd::Get(args.rest().collect()),
            b"GET" => {
                return Err(CmdError::msg(
                    "ERR wrong number of arguments for 'config|get' command",
                ));
            }
            b"SET" if !args.is_empty() && args.remaining().is_multiple_of(2) => {
                ConfigCmd::Set(args.rest().collect())
            }
            b"SET" => {
                return Err(CmdError::msg(
                    "ERR wrong number of arguments for 'config|set' command",
                ));
            }
            b"RESETSTAT" => ConfigCmd::ResetStat,
            b"REWRITE" => ConfigCmd::Rewrite,
            b"HELP" => ConfigCmd::Help,
            _ => {
                return Err(CmdError::msg(format!(
                    "ERR unknown subcommand '{}'. Try CONFIG HELP.",
                    String::from_utf8_lossy(sub)
                )));
            }
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        match self {
            ConfigCmd::Get(patterns) => {
                let matched: Vec<&Setting> = SETTINGS
                    .iter()
                    .filter(|s| {
                        patterns
                            .iter()
                            .any(|p| glob_match(&p.to_ascii_lowercase(), s.name.as_bytes()))
                    })
                    .collect();
                reply::map(ctx.out, ctx.session.proto, matched.len());
                for s in matched {
                    reply::bulk(ctx.out, s.name.as_bytes());
                    reply::bulk(ctx.out, (s.get)(ctx.shared).as_bytes());
                }
            }
            ConfigCmd::Set(pairs) => {
                // Parse every name and value before applying any, so a bad one changes
                // nothing; a name given twice is refused, as Redis does.
                let mut names = Vec::with_capacity(pairs.len() / 2);
                let mut changes = Vec::with_capacity(pairs.len() / 2);
                for pair in pairs.chunks(2) {
                    let name = String::from_utf8_lossy(pair[0]).to_ascii_lowercase();
                    let value = String::from_utf8_lossy(pair[1]);
                    let failed = |why: &str| {
                        CmdError::msg(format!(
                            "ERR CONFIG SET failed (possibly related to argument '{name}') - {why}"
                        ))
                    };
                    if names.contains(&name) {
                        return Err(failed("duplicate parameter"));
                    }
                    match setting(&name) {
                        Some(Setting { set: Some(set), .. }) => {
                            changes.push(set(&value).map_err(|why| failed(&why))?);
                            names.push(name);
                        }
                        Some(_) => {
                            return Err(CmdError::msg(format!(
                                "ERR CONFIG SET failed (possibly related to argument '{name}') - can't set immutable config"
                            )));
                        }
                        None => {
                            return Err(CmdError::msg(format!(
                                "ERR Unknown option or number of arguments for CONFIG SET - '{name}'"
                            )));
                        }
                    }
                }
                for change in changes {
                    change.apply(ctx.shared);
                }
                reply::simple(ctx.out, "OK");
            }
            ConfigCmd::ResetStat => {
                ctx.shared.stats.reset();
                ctx.shared.errors.reset();
                reply::simple(ctx.out, "OK");
            }
            ConfigCmd::Rewrite => {
                let Some(path) = &ctx.shared.config.config_file else {
                    return Err(CmdError::msg(
                        "ERR The server is running without a config file",
                    ));
                };
                rewrite(ctx.shared, path)
                    .map_err(|e| CmdError::msg(format!("ERR Rewriting config file: {e}")))?;
                sluice_log::log(&format!(
                    "CONFIG REWRITE executed with success ({})",
                    path.display()
                ));
                reply::simple(ctx.out, "OK");
            }
            ConfigCmd::Help => {
                reply::array(ctx.out, HELP.len());
                for line in HELP {
                    reply::simple(ctx.out, line);
                }
            }
        }
        Ok(())
    }
}

const HELP: &[&str] = &[
    "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GET <pattern> [<pattern> ...]",
    "    Return parameters matching the glob-like <pattern> and their values.",
    "SET <directive> <value> [<directive> <value> ...]",
    "    Set the configuration <directive> to <value>; all or none change.",
    "RESETSTAT",
    "    Reset statistics reported by the INFO command.",
    "REWRITE",
    "    Rewrite the configuration file the server started with, keeping its comments.",
    "HELP",
    "    Print this help.",
];

/// Every setting's name and value now, for [`Shared::settings_at_start`].
pub fn values(s: &Shared) -> Vec<(String, String)> {
    SETTINGS
        .iter()
        .map(|st| (st.name.to_string(), (st.get)(s)))
        .collect()
}

/// The settings a rewrite writes: those that change at run time under their flag's name,
/// and `replicaof`. Aliases (`slave-*`, `min-slaves-*`) and names with no flag stay out.
fn rewritable() -> Vec<&'static Setting> {
    let flags = <crate::config::Config as clap::CommandFactory>::command();
    SETTINGS
        .iter()
        .filter(|s| s.set.is_some() || s.name == "replicaof")
        .filter(|s| flags.get_arguments().any(|a| a.get_long() == Some(s.name)))
        .collect()
}

/// Settings whose empty value means "none": a rewrite drops their line.
fn empty_is_none(name: &str) -> bool {
    matches!(name, "replicaof" | "requirepass" | "masterauth")
}

/// Settings that are sizes in bytes: a rewrite writes them in units, as Redis does.
const SIZES: &[&str] = &["maxmemory"];

/// A setting's value as a rewrite writes it.
fn file_value(name: &str, value: String) -> String {
    match value.parse() {
        Ok(bytes) if SIZES.contains(&name) => size_in_units(bytes),
        _ => value,
    }
}

/// A size in the largest of `gb`, `mb` and `kb` that divides it exactly, else in bytes: what
/// redis-server 7.0 writes in a rewrite (`2gb`, `1000mb`, `3072kb` as `3mb`, and `1g`, a
/// billion bytes, as `1000000000`). [`crate::config::parse_bytes`] reads each back.
fn size_in_units(bytes: u64) -> String {
    [(1 << 30, "gb"), (1 << 20, "mb"), (1 << 10, "kb")]
        .into_iter()
        .find(|&(unit, _)| bytes != 0 && bytes.is_multiple_of(unit))
        .map_or_else(
            || bytes.to_string(),
            |(unit, name)| format!("{}{name}", bytes / unit),
        )
}

/// CONFIG REWRITE (see the module docs).
fn rewrite(s: &Shared, path: &std::path::Path) -> std::io::Result<()> {
    let text = std::fs::read_to_string(path)?;
    let in_file = crate::conffile::names(&text);
    let at_start = s.settings_at_start.get();
    let updates: Vec<(String, Option<String>)> = rewritable()
        .into_iter()
        .filter_map(|st| {
            let now = (st.get)(s);
            let listed = in_file.iter().any(|n| n == st.name);
            let changed = at_start
                .and_then(|v| v.iter().find(|(n, _)| n == st.name))
                .is_none_or(|(_, was)| *was != now);
            let value =
                (!(now.is_empty() && empty_is_none(st.name))).then(|| file_value(st.name, now));
            (listed || (changed && value.is_some())).then(|| (st.name.to_string(), value))
        })
        .collect();
    crate::conffile::write_atomic(path, &crate::conffile::rewrite(&text, &updates))
}

#[cfg(test)]
mod tests {
    use super::size_in_units;
    use crate::glob::glob_match;

    #[test]
    fn sizes_are_written_in_units_as_redis_writes_them() {
        for (bytes, written) in [
            (0, "0"),
            (1023, "1023"),
            (1024, "1kb"),
            (3 << 20, "3mb"),
            (1000 << 20, "1000mb"),
            (2 << 30, "2gb"),
            (1_000_000_000, "1000000000"),
            (u64::MAX, "18446744073709551615"),
            (u64::MAX - ((1 << 30) - 1), "17179869183gb"),
        ] {
            assert_eq!(size_in_units(bytes), written);
            assert_eq!(crate::config::parse_bytes(written), Ok(bytes));
        }
    }

    #[test]
    fn globs_match_like_redis() {
        assert!(glob_match(b"*", b"port"));
        assert!(glob_match(b"p*", b"port"));
        assert!(glob_match(b"p?rt", b"port"));
        assert!(glob_match(b"[pq]ort", b"port"));
        assert!(!glob_match(b"[^p]ort", b"port"));
        assert!(glob_match(b"[a-z]ort", b"port"));
        assert!(!glob_match(b"save*x", b"save"));
        assert!(glob_match(b"\\*", b"*"));
        let hostile = [b'*'; 10_000];
        assert!(glob_match(&hostile, b"requirepass"));
    }
}
