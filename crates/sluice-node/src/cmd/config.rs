//! `CONFIG GET pattern [pattern ...]`, `CONFIG SET name value [name value ...]`,
//! `CONFIG RESETSTAT` — for the settings that exist. `requirepass`, `maxclients`, `timeout`,
//! `maxmemory`, `maxmemory-policy`, `min-replicas-to-write` and `min-replicas-max-lag` change
//! at run time; the others answer as Redis does for
//! an immutable setting.

use sluice_resp::reply;

use std::sync::atomic::Ordering::Relaxed;

use super::{Args, CmdError, Command, Ctx};
use crate::glob::glob_match;
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
        }
    }
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
    s.config.replica_priority.to_string()
}

fn replica_read_only(s: &Shared) -> String {
    if s.config.replica_read_only {
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
        name: "databases",
        get: |_| "1".into(),
        set: None,
    },
    Setting {
        name: "masterauth",
        get: |s| s.config.masterauth.clone().unwrap_or_default(),
        set: None,
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
        name: "port",
        get: |s| s.local_addr.port().to_string(),
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
        get: |s| s.config.repl_timeout.to_string(),
        set: None,
    },
    Setting {
        name: "replica-priority",
        get: replica_priority,
        set: None,
    },
    Setting {
        name: "replica-read-only",
        get: replica_read_only,
        set: None,
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
        get: |s| match (&s.config.dir, s.config.save_interval) {
            (Some(_), secs) if secs > 0 => format!("{secs} 1"),
            _ => String::new(),
        },
        set: None,
    },
    Setting {
        name: "shards",
        get: |s| s.store.shard_count().to_string(),
        set: None,
    },
    Setting {
        name: "slave-priority",
        get: replica_priority,
        set: None,
    },
    Setting {
        name: "slave-read-only",
        get: replica_read_only,
        set: None,
    },
    Setting {
        name: "tcp-keepalive",
        get: |s| s.config.tcp_keepalive.to_string(),
        set: None,
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
                reply::simple(ctx.out, "OK");
            }
            // Settings come from flags, not a file, so there is nothing to rewrite. Sentinel
            // sends this inside MULTI during a failover and ignores the answer.
            ConfigCmd::Rewrite => {
                return Err(CmdError::msg(
                    "ERR The server is running without a config file",
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::glob::glob_match;

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
