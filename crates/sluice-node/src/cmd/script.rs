//! `SCRIPT LOAD|EXISTS|FLUSH|KILL|HELP` — the node's script cache.
//!
//! # Format
//! - `SCRIPT LOAD script` → the body's SHA1 as a bulk string (a body that does not compile is
//!   refused, as in Redis).
//! - `SCRIPT EXISTS sha1 [sha1 ...]` → one `:1`/`:0` per SHA1.
//! - `SCRIPT FLUSH [ASYNC|SYNC]` → `+OK`: every thread forgets every script.
//! - `SCRIPT KILL` → `-NOTBUSY No scripts in execution right now.` A script never runs past
//!   its time limit here (it is stopped; see `script`), and a running script holds its own
//!   thread, so there is never one for this connection's thread to kill.

use sluice_resp::reply;

use super::{Args, CmdError, Command, Ctx};
use crate::script::{self, cache};

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
            ScriptCmd::Kill => {
                return Err(CmdError::msg("NOTBUSY No scripts in execution right now."));
            }
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
