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
//! # Long and busy scripts and the other clients
//! [`busy_refusal`] is the dispatcher's look, made only while a script is listed (one that
//! reached its thread's first instruction-hook look, a few thousand instructions in; see
//! `script::busy`). A command of another client whose keys fall in a listed script's shards,
//! or one that reads every shard (DBSIZE, SCAN, RL.HIT, EXEC: a transaction's commands are not
//! looked at one by one), waits here, outside the shard's lock, while the script is long, and
//! is answered Redis's `-BUSY` once it is busy (past `busy-reply-threshold`), instead of
//! waiting on the lock for as long as the script runs. Commands on other shards and those
//! that touch none run (our difference: Redis answers every command `-BUSY` but a few, since
//! it serves nothing else while a script runs). What it cannot see: the shards a listed
//! script took for keys it did not declare (only the declared keys are listed), and a command
//! that was already waiting on a shard's lock before the script was listed (in its first few
//! thousand instructions): that one waits for the script's end, and its thread with it, so
//! `SCRIPT KILL` comes through another thread.

use sluice_resp::{RequestRef, reply};

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
/// listed ([`busy::any`]). A command on a long script's shards waits here, outside the lock,
/// until the script ends (then it runs) or goes busy (then it is refused). Never for a listed
/// script's own commands; a command of another script is refused if a busy script holds what
/// it needs, and never waits here (two scripts waiting for each other would never reach their
/// hooks): it takes the lock's bounded wait.
/// Cold and never inlined: inlined into the dispatcher, it cost every command some ten
/// instructions of register spills (scripts/callgrind.sh).
#[cold]
#[inline(never)]
pub(super) fn busy_refusal(ctx: &Ctx<'_>, spec: &CommandSpec, req: RequestRef<'_>) -> bool {
    // Nor for a command EXEC runs: the EXEC was looked at (as a command on every shard), and
    // one refused half way would break the transaction.
    if script::listed_here() || ctx.session.in_exec {
        return false;
    }
    let store = &ctx.shared.store;
    let mut shards: Vec<usize> = if spec.name.starts_with("eval") {
        eval_keys(req).map(|k| store.shard_of(k)).collect()
    } else if spec.first_key > 0 {
        spec.key_args(req).map(|k| store.shard_of(k)).collect()
    } else if TOUCH_NO_SHARD.contains(&spec.name) {
        return false;
    } else {
        // Every shard.
        (0..store.shard_count()).collect()
    };
    shards.sort_unstable();
    let holder = || busy::holder(|k| shards.binary_search(&store.shard_of(k)).is_ok());
    let in_script = script::running();
    let mut pause = WAIT_FIRST;
    loop {
        match holder() {
            busy::Holder::Free => return false,
            busy::Holder::Busy => return true,
            busy::Holder::Long if in_script => return false,
            busy::Holder::Long => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(WAIT_MOST);
            }
        }
    }
}

/// How long a command waiting for a long script sleeps between two looks: from
/// [`WAIT_FIRST`], doubling, to [`WAIT_MOST`] (what a command past a long script's end waits
/// at most more than it would have on the lock).
const WAIT_FIRST: std::time::Duration = std::time::Duration::from_micros(20);
const WAIT_MOST: std::time::Duration = std::time::Duration::from_millis(1);

/// The declared keys of an EVAL, EVALSHA, EVAL_RO or EVALSHA_RO (none if `numkeys` is not a
/// count of the arguments: the command refuses it).
fn eval_keys(req: RequestRef<'_>) -> impl Iterator<Item = &[u8]> + use<'_> {
    let numkeys = req
        .arg(2)
        .and_then(|n| std::str::from_utf8(n).ok()?.parse::<usize>().ok())
        .filter(|&n| n <= req.len().saturating_sub(3))
        .unwrap_or(0);
    (3..3 + numkeys).filter_map(move |i| req.arg(i))
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
