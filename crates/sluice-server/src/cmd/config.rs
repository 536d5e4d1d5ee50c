//! `CONFIG GET pattern [pattern ...]`, `CONFIG SET name value [name value ...]`,
//! `CONFIG RESETSTAT` — for the settings that exist. Only `requirepass` can change at run time;
//! the others answer as Redis does for an immutable setting.

use bytes::Bytes;
use sluice_resp::reply;

use super::{Args, CmdError, Command, Ctx};
use crate::server::Shared;

/// Every setting CONFIG GET knows, with how to read it. `save` and `appendonly` are answered
/// because tools such as redis-benchmark ask: there is no persistence.
const SETTINGS: &[&str] = &[
    "appendonly",
    "bind",
    "databases",
    "port",
    "requirepass",
    "save",
    "shards",
    "threads",
];

fn read(shared: &Shared, name: &str) -> String {
    match name {
        "appendonly" => "no".into(),
        "bind" => shared.config.bind.to_string(),
        "databases" => "1".into(),
        "port" => shared.local_addr.port().to_string(),
        "requirepass" => shared.requirepass.read().clone().unwrap_or_default(),
        "save" => String::new(),
        "shards" => shared.store.shard_count().to_string(),
        "threads" => shared.config.threads().to_string(),
        _ => String::new(),
    }
}

#[derive(Debug)]
pub enum ConfigCmd<'a> {
    Get(&'a [Bytes]),
    Set(&'a [Bytes]),
    ResetStat,
}

impl<'a> Command<'a> for ConfigCmd<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let sub = args.key()?;
        Ok(match sub.to_ascii_uppercase().as_slice() {
            b"GET" if !args.is_empty() => ConfigCmd::Get(args.rest()),
            b"GET" => {
                return Err(CmdError::msg(
                    "ERR wrong number of arguments for 'config|get' command",
                ));
            }
            b"SET" if !args.is_empty() && args.remaining().is_multiple_of(2) => {
                ConfigCmd::Set(args.rest())
            }
            b"SET" => {
                return Err(CmdError::msg(
                    "ERR wrong number of arguments for 'config|set' command",
                ));
            }
            b"RESETSTAT" => ConfigCmd::ResetStat,
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
                let names: Vec<&str> = SETTINGS
                    .iter()
                    .copied()
                    .filter(|name| {
                        patterns
                            .iter()
                            .any(|p| glob_match(&p.to_ascii_lowercase(), name.as_bytes()))
                    })
                    .collect();
                reply::map(ctx.out, ctx.session.proto, names.len());
                for name in names {
                    reply::bulk(ctx.out, name.as_bytes());
                    reply::bulk(ctx.out, read(ctx.shared, name).as_bytes());
                }
            }
            ConfigCmd::Set(pairs) => {
                // Validate every pair before applying any, so a bad one changes nothing.
                let mut new_pass = None;
                for pair in pairs.chunks(2) {
                    let name = String::from_utf8_lossy(&pair[0]).to_ascii_lowercase();
                    match name.as_str() {
                        "requirepass" => {
                            new_pass = Some(String::from_utf8_lossy(&pair[1]).into_owned())
                        }
                        n if SETTINGS.contains(&n) => {
                            return Err(CmdError::msg(format!(
                                "ERR CONFIG SET failed (possibly related to argument '{n}') - can't set immutable config"
                            )));
                        }
                        n => {
                            return Err(CmdError::msg(format!(
                                "ERR Unknown option or number of arguments for CONFIG SET - '{n}'"
                            )));
                        }
                    }
                }
                if let Some(p) = new_pass {
                    *ctx.shared.requirepass.write() = (!p.is_empty()).then_some(p);
                }
                reply::simple(ctx.out, "OK");
            }
            ConfigCmd::ResetStat => reply::simple(ctx.out, "OK"),
        }
        Ok(())
    }
}

/// Redis-style glob: `*`, `?`, `[abc]`, `[^a-z]`, `\x`.
pub fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some((b'*', rest)) => {
            // Consecutive stars are one star: keeps hostile patterns from exploding.
            let rest = &rest[rest.iter().take_while(|&&c| c == b'*').count()..];
            (0..=text.len()).any(|i| glob_match(rest, &text[i..]))
        }
        Some((b'?', rest)) => !text.is_empty() && glob_match(rest, &text[1..]),
        Some((b'[', rest)) => {
            let Some((&c, text_rest)) = text.split_first() else {
                return false;
            };
            let (negate, mut p) = match rest.split_first() {
                Some((b'^', r)) => (true, r),
                _ => (false, rest),
            };
            let mut matched = false;
            while let Some((&first, r)) = p.split_first() {
                if first == b']' {
                    p = r;
                    break;
                }
                if first == b'\\' && !r.is_empty() {
                    matched |= r[0] == c;
                    p = &r[1..];
                } else if r.len() >= 2 && r[0] == b'-' && r[1] != b']' {
                    let (lo, hi) = (first.min(r[1]), first.max(r[1]));
                    matched |= (lo..=hi).contains(&c);
                    p = &r[2..];
                } else {
                    matched |= first == c;
                    p = r;
                }
            }
            matched != negate && glob_match(p, text_rest)
        }
        Some((b'\\', rest)) if !rest.is_empty() => {
            text.first() == Some(&rest[0]) && glob_match(&rest[1..], &text[1..])
        }
        Some((&c, rest)) => text.first() == Some(&c) && glob_match(rest, &text[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::glob_match;

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
