//! `COMMAND`, `COMMAND COUNT`, `COMMAND INFO [name ...]`, `COMMAND DOCS [name ...]`,
//! `COMMAND LIST` — all answered from the static command table.

use sluice_resp::ArgIter;
use sluice_resp::reply::{self, Proto};

use super::{Args, COMMANDS, CmdError, Command, CommandSpec, Ctx, lookup};

#[derive(Debug)]
pub enum CommandCmd<'a> {
    All,
    Count,
    Info(ArgIter<'a>),
    Docs(ArgIter<'a>),
    List,
}

impl<'a> Command<'a> for CommandCmd<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let Some(sub) = args.next() else {
            return Ok(CommandCmd::All);
        };
        Ok(match sub.to_ascii_uppercase().as_slice() {
            b"COUNT" if args.is_empty() => CommandCmd::Count,
            b"COUNT" => {
                return Err(CmdError::msg(
                    "ERR wrong number of arguments for 'command|count' command",
                ));
            }
            // With no names, every command, as COMMAND itself answers.
            b"INFO" if args.is_empty() => CommandCmd::All,
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
            CommandCmd::All => {
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
                reply::array(ctx.out, names.len());
                for name in names {
                    // A name per argument: past the output limit the connection is closed.
                    if ctx.output_full() {
                        ctx.session.close = true;
                        break;
                    }
                    match lookup(name) {
                        Some(spec) => info(ctx.out, p, spec),
                        None => reply::null(ctx.out, p),
                    }
                }
            }
            CommandCmd::Docs(names) => {
                // A map: each command once, however often it is named.
                let specs: Vec<&CommandSpec> = if names.len() == 0 {
                    COMMANDS.iter().collect()
                } else {
                    let mut seen = vec![false; COMMANDS.len()];
                    names
                        .filter_map(lookup)
                        .filter(|&spec| !std::mem::replace(&mut seen[super::row(spec)], true))
                        .collect()
                };
                reply::map(out, p, specs.len());
                for spec in specs {
                    reply::bulk(out, spec.name.as_bytes());
                    let args = parse_syntax(spec.syntax);
                    reply::map(out, p, 4);
                    reply::bulk(out, b"summary");
                    reply::bulk(out, spec.summary.as_bytes());
                    reply::bulk(out, b"since");
                    reply::bulk(out, spec.since.as_bytes());
                    reply::bulk(out, b"group");
                    reply::bulk(out, spec.group.as_bytes());
                    reply::bulk(out, b"arguments");
                    write_args(out, p, &args);
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

/// One argument as `COMMAND DOCS` describes it (the fields redis-cli reads for its hints).
#[derive(Debug, PartialEq)]
struct ArgDoc {
    name: String,
    kind: &'static str,
    token: Option<String>,
    optional: bool,
    multiple: bool,
    children: Vec<ArgDoc>,
}

impl ArgDoc {
    fn word(w: &str) -> ArgDoc {
        let (w, multiple) = match w.strip_suffix("...") {
            Some(base) => (base.trim(), true),
            None => (w, false),
        };
        let is_token = w.chars().all(|c| c.is_ascii_uppercase() || c == '-');
        ArgDoc {
            name: w.to_ascii_lowercase(),
            kind: if is_token {
                "pure-token"
            } else if w == "key" {
                "key"
            } else {
                "string"
            },
            token: is_token.then(|| w.to_string()),
            optional: false,
            multiple,
            children: Vec::new(),
        }
    }
}

/// Parses Redis's documentation syntax (`key [NX|XX] [EX seconds|KEEPTTL] [member ...]`) into
/// argument docs: `[..]` is optional, `|` separates alternatives (a `oneof`), `TOKEN value` is a
/// value introduced by its token, `x ...` repeats.
fn parse_syntax(syntax: &str) -> Vec<ArgDoc> {
    let spaced = syntax
        .replace('[', " [ ")
        .replace(']', " ] ")
        .replace('|', " | ")
        .replace(" ...", "...");
    let tokens: Vec<&str> = spaced.split_whitespace().collect();
    let mut pos = 0;
    let alternatives = parse_alternatives(&tokens, &mut pos);
    alternatives.into_iter().next().unwrap_or_default()
}

fn parse_alternatives(tokens: &[&str], pos: &mut usize) -> Vec<Vec<ArgDoc>> {
    let mut alternatives = vec![Vec::new()];
    while let Some(&t) = tokens.get(*pos) {
        *pos += 1;
        match t {
            "]" => break,
            "|" => alternatives.push(Vec::new()),
            "[" => {
                let inner = parse_alternatives(tokens, pos);
                let mut arg = group(inner);
                arg.optional = true;
                if let Some(seq) = alternatives.last_mut() {
                    seq.push(arg);
                }
            }
            "..." => {
                if let Some(last) = alternatives.last_mut().and_then(|seq| seq.last_mut()) {
                    last.multiple = true;
                }
            }
            w => {
                let seq = alternatives.last_mut().expect("never empty");
                // `TOKEN value`: the value is introduced by the token.
                match seq.last_mut() {
                    Some(prev)
                        if prev.kind == "pure-token"
                            && !prev.multiple
                            && !w.chars().any(|c| c.is_ascii_uppercase()) =>
                    {
                        let value = ArgDoc::word(w);
                        prev.name = value.name;
                        prev.kind = value.kind;
                        prev.multiple = value.multiple;
                    }
                    _ => seq.push(ArgDoc::word(w)),
                }
            }
        }
    }
    alternatives
}

/// A bracketed group as one argument: itself if it holds one, a `oneof` for alternatives, a
/// `block` for a sequence.
fn group(mut alternatives: Vec<Vec<ArgDoc>>) -> ArgDoc {
    let as_one = |mut seq: Vec<ArgDoc>| {
        if seq.len() == 1 {
            seq.pop().expect("one")
        } else {
            ArgDoc {
                name: seq.first().map_or_else(String::new, |a| a.name.clone()),
                kind: "block",
                token: None,
                optional: false,
                multiple: false,
                children: seq,
            }
        }
    };
    if alternatives.len() == 1 {
        return as_one(alternatives.pop().expect("one"));
    }
    let children: Vec<ArgDoc> = alternatives.into_iter().map(as_one).collect();
    ArgDoc {
        name: children
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>()
            .join("_"),
        kind: "oneof",
        token: None,
        optional: false,
        multiple: false,
        children,
    }
}

fn write_args(out: &mut bytes::BytesMut, p: Proto, args: &[ArgDoc]) {
    reply::array(out, args.len());
    for a in args {
        let flags: Vec<&str> = [("optional", a.optional), ("multiple", a.multiple)]
            .into_iter()
            .filter_map(|(f, on)| on.then_some(f))
            .collect();
        let fields = 2
            + usize::from(a.token.is_some())
            + usize::from(!flags.is_empty())
            + usize::from(!a.children.is_empty());
        reply::map(out, p, fields);
        reply::bulk(out, b"name");
        reply::bulk(out, a.name.as_bytes());
        reply::bulk(out, b"type");
        reply::bulk(out, a.kind.as_bytes());
        if let Some(t) = &a.token {
            reply::bulk(out, b"token");
            reply::bulk(out, t.as_bytes());
        }
        if !flags.is_empty() {
            reply::bulk(out, b"flags");
            reply::set(out, p, flags.len());
            for f in flags {
                reply::simple(out, f);
            }
        }
        if !a.children.is_empty() {
            reply::bulk(out, b"arguments");
            write_args(out, p, &a.children);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(args: &[ArgDoc]) -> Vec<String> {
        args.iter()
            .map(|a| {
                let mut s = format!("{}:{}", a.name, a.kind);
                if let Some(t) = &a.token {
                    s += &format!("@{t}");
                }
                if a.optional {
                    s += "?";
                }
                if a.multiple {
                    s += "*";
                }
                if !a.children.is_empty() {
                    s += &format!("({})", shape(&a.children).join(" "));
                }
                s
            })
            .collect()
    }

    #[test]
    fn rl_check_syntax_becomes_argument_docs() {
        let spec = super::super::lookup(b"rl.check").unwrap();
        assert_eq!(
            shape(&parse_syntax(spec.syntax)),
            [
                "key:key",
                "limit:string",
                "period:string",
                "burst:string@BURST?",
                "cost:string@COST?",
                "algo:string@ALGO?",
                "dry:pure-token@DRY?",
                "mode:string@FAILMODE?",
                "k:string@SPLIT?",
                "ms:string@APPROX?",
            ]
        );
    }

    #[test]
    fn alternatives_and_repeats() {
        assert_eq!(shape(&parse_syntax("key ...")), ["key:key*"]);
        assert_eq!(
            shape(&parse_syntax("key value [NX|XX] [EX seconds|KEEPTTL]")),
            [
                "key:key",
                "value:string",
                "nx_xx:oneof?(nx:pure-token@NX xx:pure-token@XX)",
                "seconds_keepttl:oneof?(seconds:string@EX keepttl:pure-token@KEEPTTL)",
            ]
        );
        assert!(parse_syntax("").is_empty());
    }

    #[test]
    fn every_command_syntax_parses() {
        for spec in COMMANDS {
            let args = parse_syntax(spec.syntax);
            assert!(args.iter().all(|a| !a.name.is_empty()), "{}", spec.name);
        }
    }
}
