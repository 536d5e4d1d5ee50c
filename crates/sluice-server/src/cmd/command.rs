//! `COMMAND`, `COMMAND COUNT`, `COMMAND INFO [name ...]`, `COMMAND DOCS [name ...]`,
//! `COMMAND LIST` — all answered from the static command table.

use bytes::Bytes;
use sluice_resp::reply::{self, Proto};

use super::{Args, COMMANDS, CmdError, Command, CommandSpec, Ctx, lookup};

#[derive(Debug)]
pub enum CommandCmd<'a> {
    All,
    Count,
    Info(&'a [Bytes]),
    Docs(&'a [Bytes]),
    List,
}

impl<'a> Command<'a> for CommandCmd<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let Some(sub) = args.next() else {
            return Ok(CommandCmd::All);
        };
        Ok(match sub.to_ascii_uppercase().as_slice() {
            b"COUNT" => CommandCmd::Count,
            b"INFO" => CommandCmd::Info(args.rest()),
            b"DOCS" => CommandCmd::Docs(args.rest()),
            b"LIST" => CommandCmd::List,
            _ => {
                return Err(CmdError::msg(format!(
                    "ERR unknown subcommand '{}'. Try COMMAND HELP.",
                    String::from_utf8_lossy(sub)
                )));
            }
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let p = ctx.session.proto;
        let out = &mut *ctx.out;
        match self {
            CommandCmd::All | CommandCmd::Info([]) => {
                reply::array(out, COMMANDS.len());
                for spec in COMMANDS {
                    info(out, p, spec);
                }
            }
            CommandCmd::Count => reply::integer(out, COMMANDS.len() as i64),
            CommandCmd::List => {
                reply::array(out, COMMANDS.len());
                for spec in COMMANDS {
                    reply::bulk(out, spec.name.as_bytes());
                }
            }
            CommandCmd::Info(names) => {
                reply::array(out, names.len());
                for name in names {
                    match lookup(name) {
                        Some(spec) => info(out, p, spec),
                        None => reply::null_array(out, p),
                    }
                }
            }
            CommandCmd::Docs(names) => {
                let specs: Vec<&CommandSpec> = if names.is_empty() {
                    COMMANDS.iter().collect()
                } else {
                    names.iter().filter_map(|n| lookup(n)).collect()
                };
                reply::map(out, p, specs.len());
                for spec in specs {
                    reply::bulk(out, spec.name.as_bytes());
                    reply::map(out, p, 3);
                    reply::bulk(out, b"summary");
                    reply::bulk(out, spec.summary.as_bytes());
                    reply::bulk(out, b"since");
                    reply::bulk(out, spec.since.as_bytes());
                    reply::bulk(out, b"group");
                    reply::bulk(out, spec.group.as_bytes());
                }
            }
        }
        Ok(())
    }
}

/// One command's entry in Redis 7's 10-element form.
fn info(out: &mut bytes::BytesMut, p: Proto, spec: &CommandSpec) {
    reply::array(out, 10);
    reply::bulk(out, spec.name.as_bytes());
    reply::integer(out, i64::from(spec.arity));
    reply::set(out, p, spec.flags.len());
    for f in spec.flags {
        reply::simple(out, f);
    }
    reply::integer(out, i64::from(spec.first_key));
    reply::integer(out, i64::from(spec.last_key));
    reply::integer(out, i64::from(spec.step));
    reply::set(out, p, 0); // ACL categories
    reply::array(out, 0); // tips
    reply::array(out, 0); // key specs
    reply::array(out, 0); // subcommands
}
