//! `SCRIPT LOAD|EXISTS|FLUSH|KILL|HELP` — the node's script cache.
//!
//! # Format
//! - `SCRIPT LOAD script` → the body's SHA1 as a bulk string (a body that does not compile is
//!   refused, as in Redis).
//! - `SCRIPT EXISTS sha1 [sha1 ...]` → one `:1`/`:0` per SHA1.
//! - `SCRIPT FLUSH [ASYNC|SYNC]` → `+OK`: every thread forgets every script.
//! - `SCRIPT KILL` → `+OK` when it stopped a busy script (one past `busy-reply-threshold`)
//!   that had not written: its caller gets `-ERR Script killed by user with SCRIPT KILL...
//!   script: <sha>, on @user_script:<line>.`; `-UNKILLABLE Sorry the script already executed
//!   write commands against the dataset. ...` when every busy script has written; `-NOTBUSY No
//!   scripts in execution right now.` when none is busy. Sent from a connection on any thread
//!   but the script's own (which runs the script). With several busy scripts (one per worker
//!   thread at most) it stops every one that has not written.
//!
//! # Busy scripts and the other clients
//! [`busy_refusal`] is the dispatcher's look, made only while a script is busy: a command whose
//! keys fall in a busy script's shards is answered Redis's `-BUSY`, where it would otherwise
//! wait on the shard's lock for as long as the script runs; so is one that reads every shard
//! (DBSIZE, SCAN, RL.HIT, EXEC: a transaction's commands are not looked at one by one). Others
//! run (our difference: Redis answers every command `-BUSY` but a few, since it serves nothing
//! else while a script runs). What it cannot see: the shards a busy script took for keys it
//! did not declare (only the declared keys are published), and a command that was already
//! waiting on a shard's lock when the script went busy (it waits for the script's end); a
//! thread so waiting serves none of its clients meanwhile, so `SCRIPT KILL` must come through
//! another thread.

use sluice_resp::{Request, reply};

use super::table::CommandSpec;
use super::{Args, CmdError, Command, Ctx};
use crate::script::{self, busy, cache};

/// Redis's reply to a command refused while a script is busy.
pub(super) const BUSY: &str =
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";

/// Commands without keys that touch no shard: they run while a script is busy. Every other
/// command without key positions may read every shard.
const TOUCH_NO_SHARD: &[&str] = &[
    "acl",
    "auth",
    "client",
    "command",
    "config",
    "discard",
    "echo",
    "hello",
    "lastsave",
    "multi",
    "ping",
    "publish",
    "quit",
    "readonly",
    "readwrite",
    "reset",
    "role",
    "script",
    "select",
    "shutdown",
    "slowlog",
    "time",
    "unwatch",
];

/// Whether `req` must be answered `-BUSY` (see the module docs); only asked while a script is
/// busy ([`busy::any`]). Never for a busy script's own commands; a command of another script
/// (not busy) is, since what it would wait for is a key that script did not declare.
pub(super) fn busy_refusal(ctx: &Ctx<'_>, spec: &CommandSpec, req: &Request) -> bool {
    if script::busy_here() {
        return false;
    }
    let store = &ctx.shared.store;
    let mut shards: Vec<usize> = if spec.name.starts_with("eval") {
        eval_keys(req).map(|k| store.shard_of(k)).collect()
    } else if spec.first_key > 0 {
        spec.key_args(req).map(|k| store.shard_of(k)).collect()
    } else {
        // Every shard, or none.
        return !TOUCH_NO_SHARD.contains(&spec.name);
    };
    shards.sort_unstable();
    busy::holds_any(|k| shards.binary_search(&store.shard_of(k)).is_ok())
}

/// The declared keys of an EVAL, EVALSHA, EVAL_RO or EVALSHA_RO (none if `numkeys` is not a
/// count of the arguments: the command refuses it).
fn eval_keys(req: &Request) -> impl Iterator<Item = &[u8]> {
    let numkeys = req
        .arg(2)
        .and_then(|n| std::str::from_utf8(n).ok()?.parse::<usize>().ok())
        .filter(|&n| n <= req.len().saturating_sub(3))
        .unwrap_or(0);
    (3..3 + numkeys).filter_map(|i| req.arg(i))
}

const HELP: &[&str] = &[
    "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "EXISTS <sha1> [<sha1> ...]",
    "    Return information about the existence of the scripts in the script cache.",
    "FLUSH [ASYNC|SYNC]",
    "    Flush the Lua scripts cache. Very dangerous on replicas.",
    "    When called without the optional mode argument, the behavior is determined by the",
    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    "    * ASYNC: Asynchronously flush the scripts cache.",
    "    * SYNC: Synchronously flush the scripts cache.",
    "KILL",
    "    Kill the currently executing Lua script.",
    "LOAD <script>",
    "    Load a script into the scripts cache without executing it.",
    "HELP",
    "    Prints this help.",
];

#[derive(Debug)]
pub enum ScriptCmd<'a> {
    Load(&'a [u8]),
    Exists(Vec<&'a [u8]>),
    Flush,
    Kill,
    Help,
}

fn arity(sub: &str) -> CmdError {
    CmdError::msg(format!(
        "ERR wrong number of arguments for 'script|{sub}' command"
    ))
}

impl<'a> Command<'a> for ScriptCmd<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let sub = args.key()?;
        let n = args.remaining();
        Ok(match sub.to_ascii_uppercase().as_slice() {
            b"LOAD" if n == 1 => ScriptCmd::Load(args.key()?),
            b"LOAD" => return Err(arity("load")),
            b"EXISTS" if n >= 1 => ScriptCmd::Exists(args.rest().collect()),
            b"EXISTS" => return Err(arity("exists")),
            b"FLUSH" => {
                let mode = args.next().map(<[u8]>::to_ascii_uppercase);
                if !args.is_empty() || mode.is_some_and(|m| m != b"SYNC" && m != b"ASYNC") {
                    return Err(CmdError::msg(
                        "ERR SCRIPT FLUSH only support SYNC|ASYNC option",
                    ));
                }
                ScriptCmd::Flush
            }
            b"KILL" if n == 0 => ScriptCmd::Kill,
            b"KILL" => return Err(arity("kill")),
            b"HELP" if n == 0 => ScriptCmd::Help,
            _ => {
                return Err(CmdError::msg(format!(
                    "ERR unknown subcommand '{}'. Try SCRIPT HELP.",
                    String::from_utf8_lossy(sub)
                )));
            }
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        match self {
            ScriptCmd::Load(body) => script::load(body, ctx.out),
            ScriptCmd::Exists(shas) => {
                reply::array(ctx.out, shas.len());
                for sha in shas {
                    let known = cache::parse_sha(sha).is_some_and(|s| cache::contains(&s));
                    reply::integer(ctx.out, i64::from(known));
                }
            }
            ScriptCmd::Flush => {
                cache::flush();
                reply::simple(ctx.out, "OK");
            }
            ScriptCmd::Kill => match busy::kill() {
                busy::Kill::Killed => reply::simple(ctx.out, "OK"),
                busy::Kill::NotBusy => {
                    return Err(CmdError::msg("NOTBUSY No scripts in execution right now."));
                }
                busy::Kill::Unkillable => {
                    return Err(CmdError::msg(
                        "UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command.",
                    ));
                }
            },
            ScriptCmd::Help => {
                reply::array(ctx.out, HELP.len());
                for line in HELP {
                    reply::simple(ctx.out, line);
                }
            }
        }
        Ok(())
    }
}
