//! `SLOWLOG GET [count]`, `SLOWLOG LEN`, `SLOWLOG RESET`, `SLOWLOG HELP`: the commands that
//! took longer than `slowlog-log-slower-than` microseconds (see [`crate::slowlog`] for how a
//! command's time is taken).
//!
//! # Format
//! `GET` answers, newest first, one array per entry as Redis 4+: `[id, unix seconds,
//! microseconds, [args...], "ip:port", "client name"]`. `count` defaults to 10; -1 is all.

use sluice_resp::reply;

use super::{Args, CmdError, Command, Ctx};

#[derive(Debug)]
pub enum SlowLog {
    Get(usize),
    Len,
    Reset,
    Help,
}

const HELP: &[&str] = &[
    "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GET [<count>]",
    "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
    "    Entries are made of:",
    "    id, timestamp, time in microseconds, arguments array, client IP and port,",
    "    client name",
    "LEN",
    "    Return the length of the slowlog.",
    "RESET",
    "    Reset the slowlog.",
    "HELP",
    "    Print this help.",
];

impl Command<'_> for SlowLog {
    fn parse(args: &mut Args<'_>) -> Result<Self, CmdError> {
        let sub = args.key()?;
        let cmd = match sub.to_ascii_uppercase().as_slice() {
            b"GET" if args.remaining() <= 1 => SlowLog::Get(match args.rest().next() {
                None => 10,
                Some(n) => count(n)?,
            }),
            b"LEN" if args.is_empty() => SlowLog::Len,
            b"RESET" if args.is_empty() => SlowLog::Reset,
            b"HELP" if args.is_empty() => SlowLog::Help,
            _ => {
                return Err(CmdError::msg(format!(
                    "ERR unknown subcommand or wrong number of arguments for '{}'. Try SLOWLOG HELP.",
                    String::from_utf8_lossy(sub)
                )));
            }
        };
        Ok(cmd)
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let log = &ctx.shared.slowlog;
        match self {
            SlowLog::Get(n) => {
                let entries = log.newest(n);
                reply::array(ctx.out, entries.len());
                for e in entries {
                    reply::array(ctx.out, 6);
                    reply::integer(ctx.out, e.id as i64);
                    reply::integer(ctx.out, e.at_unix_secs as i64);
                    reply::integer(ctx.out, e.micros.min(i64::MAX as u64) as i64);
                    reply::array(ctx.out, e.args.len());
                    for a in &e.args {
                        reply::bulk(ctx.out, a);
                    }
                    reply::bulk(ctx.out, e.client_addr.as_bytes());
                    reply::bulk(ctx.out, e.client_name.as_bytes());
                }
            }
            SlowLog::Len => reply::integer(ctx.out, log.len() as i64),
            SlowLog::Reset => {
                log.reset();
                reply::simple(ctx.out, "OK");
            }
            SlowLog::Help => {
                reply::array(ctx.out, HELP.len());
                for line in HELP {
                    reply::simple(ctx.out, line);
                }
            }
        }
        Ok(())
    }
}

/// GET's count: -1 is every entry; otherwise 0 or more, as Redis.
fn count(n: &[u8]) -> Result<usize, CmdError> {
    let n: i64 = std::str::from_utf8(n)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| CmdError::msg("ERR value is out of range, must be positive"))?;
    match n {
        -1 => Ok(usize::MAX),
        n if n >= 0 => Ok(usize::try_from(n).unwrap_or(usize::MAX)),
        _ => Err(CmdError::msg(
            "ERR count should be greater than or equal to -1",
        )),
    }
}
