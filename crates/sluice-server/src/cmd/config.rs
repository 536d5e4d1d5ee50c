//! `CONFIG GET pattern [pattern ...]`, `CONFIG SET name value [name value ...]`,
//! `CONFIG RESETSTAT` — for the settings that exist. `requirepass`, `maxclients`, `timeout`,
//! `maxmemory` and `maxmemory-policy` change at run time; the others answer as Redis does for
//! an immutable setting.

use sluice_resp::reply;

use std::sync::atomic::Ordering::Relaxed;

use super::{Args, CmdError, Command, Ctx};
use crate::glob::glob_match;
use crate::shared::Shared;

/// Validates and applies a new value of a setting.
type Setter = fn(&Shared, &str) -> Result<(), String>;

/// One setting CONFIG knows: how to read it and, if it can change at run time, how to set it.
struct Setting {
    name: &'static str,
    get: fn(&Shared) -> String,
    /// Validates and applies a new value; `None` for settings fixed at start.
    set: Option<Setter>,
}

fn set_size(v: &str) -> Result<u64, String> {
    crate::config::parse_bytes(v)
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
        set: Some(|s, v| {
            let n: usize = v
                .parse()
                .ok()
                .filter(|&n| n >= 1)
                .ok_or("argument must be a positive integer")?;
            s.maxclients.store(n, Relaxed);
            Ok(())
        }),
    },
    Setting {
        name: "maxmemory",
        get: |s| s.store.maxmemory().to_string(),
        set: Some(|s, v| {
            let n = set_size(v)?;
            s.store
                .set_maxmemory(usize::try_from(n).unwrap_or(usize::MAX));
            Ok(())
        }),
    },
    Setting {
        name: "maxmemory-policy",
        get: |s| crate::config::policy_name(s.store.policy()).into(),
        set: Some(|s, v| {
            s.store.set_policy(crate::config::parse_policy(v)?);
            Ok(())
        }),
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
        set: Some(|s, v| {
            *s.requirepass.write() = (!v.is_empty()).then(|| v.to_string());
            Ok(())
        }),
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
        set: Some(|s, v| {
            let n: u64 = v
                .parse()
                .map_err(|_| "argument couldn't be parsed into an integer")?;
            s.timeout_secs.store(n, Relaxed);
            Ok(())
        }),
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
                // Validate every name before applying any value, so a bad name changes nothing.
                let mut changes = Vec::with_capacity(pairs.len() / 2);
                for pair in pairs.chunks(2) {
                    let name = String::from_utf8_lossy(pair[0]).to_ascii_lowercase();
                    let value = String::from_utf8_lossy(pair[1]).into_owned();
                    match setting(&name) {
                        Some(Setting { set: Some(set), .. }) => changes.push((name, *set, value)),
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
                for (name, set, value) in changes {
                    set(ctx.shared, &value).map_err(|why| {
                        CmdError::msg(format!(
                            "ERR CONFIG SET failed (possibly related to argument '{name}') - {why}"
                        ))
                    })?;
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
