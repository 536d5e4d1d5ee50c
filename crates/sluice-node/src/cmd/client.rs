//! `CLIENT SETNAME|GETNAME|SETINFO|ID|LIST|INFO|KILL|HELP` — connection introspection.

use std::net::SocketAddr;

use sluice_resp::reply;

use super::args::parse_u64;
use super::{Args, CmdError, Command, Ctx};
use crate::clients::{ClientHandle, ClientKind};

/// Redis refuses names with spaces, newlines or other non-printable bytes.
pub fn valid_name(name: &[u8]) -> bool {
    name.iter().all(|&c| (b'!'..=b'~').contains(&c))
}

#[derive(Debug)]
pub enum Client<'a> {
    SetName(&'a [u8]),
    GetName,
    SetInfo {
        lib_name: bool,
        value: &'a [u8],
    },
    Id,
    /// `LIST [TYPE t] [ID id ...]`.
    List {
        kind: Option<ClientKind>,
        ids: Option<ahash::AHashSet<u64>>,
    },
    Info,
    KillAddr(Named),
    KillFilter(Vec<KillFilter>),
    Help,
}

#[derive(Debug)]
pub enum KillFilter {
    Id(u64),
    Addr(Named),
    LAddr(Named),
    Type(ClientKind),
    SkipMe(bool),
    /// The connections running as this ACL user.
    User(String),
}

fn arity(sub: &str) -> CmdError {
    CmdError::msg(format!(
        "ERR wrong number of arguments for 'client|{sub}' command"
    ))
}

/// An address `CLIENT KILL` names: `IP:PORT`, or `PATH:0` for a client of `--unixsocket` (as
/// CLIENT LIST shows them).
#[derive(Debug)]
pub struct Named {
    text: String,
    ip: Option<SocketAddr>,
}

impl Named {
    /// Whether this names a client's end `addr`, or its socket `unix`.
    fn is(&self, unix: Option<&str>, addr: SocketAddr) -> bool {
        match unix {
            Some(path) => self.text.strip_suffix(":0") == Some(path),
            None => self.ip == Some(addr),
        }
    }
}

fn parse_addr(b: &[u8]) -> Result<Named, CmdError> {
    let text = std::str::from_utf8(b).map_err(|_| CmdError::msg("ERR No such client"))?;
    let ip = text.parse().ok();
    if ip.is_none() && !text.ends_with(":0") {
        return Err(CmdError::msg("ERR No such client"));
    }
    Ok(Named {
        text: text.to_string(),
        ip,
    })
}

/// `SETINFO LIB-NAME|LIB-VER value`.
fn parse_setinfo<'a>(args: &mut Args<'a>) -> Result<Client<'a>, CmdError> {
    let attr = args.key()?.to_ascii_uppercase();
    let value = args.key()?;
    let lib_name = match attr.as_slice() {
        b"LIB-NAME" => true,
        b"LIB-VER" => false,
        _ => {
            return Err(CmdError::msg(format!(
                "ERR Unrecognized option '{}'",
                String::from_utf8_lossy(&attr)
            )));
        }
    };
    if !valid_name(value) {
        return Err(CmdError::msg(
            "ERR lib-name/lib-ver cannot contain spaces, newlines or special characters.",
        ));
    }
    Ok(Client::SetInfo { lib_name, value })
}

/// `LIST [TYPE t] [ID id ...]`.
fn parse_list<'a>(args: &mut Args<'a>) -> Result<Client<'a>, CmdError> {
    let mut ids = None;
    let mut kind = None;
    while let Some(opt) = args.next() {
        match opt.to_ascii_uppercase().as_slice() {
            b"TYPE" => kind = Some(parse_kind(args.required()?)?),
            b"ID" => {
                let mut list = ahash::AHashSet::new();
                while let Some(id) = args.next() {
                    list.insert(
                        parse_u64(id)
                            .filter(|&i| i > 0)
                            .ok_or_else(|| CmdError::msg("ERR Invalid client ID"))?,
                    );
                }
                if list.is_empty() {
                    return Err(CmdError::Syntax);
                }
                ids = Some(list);
            }
            _ => return Err(CmdError::Syntax),
        }
    }
    Ok(Client::List { kind, ids })
}

/// `KILL field value [field value ...]`: the filters, the last of each kind winning.
fn parse_kill_filters(args: &mut Args<'_>) -> Result<Vec<KillFilter>, CmdError> {
    let mut filters = Vec::new();
    while let Some(field) = args.next() {
        let v = args.key()?;
        filters.push(match field.to_ascii_uppercase().as_slice() {
            b"ID" => KillFilter::Id(
                parse_u64(v)
                    .filter(|&id| id > 0)
                    .ok_or_else(|| CmdError::msg("ERR client-id should be greater than 0"))?,
            ),
            b"ADDR" => KillFilter::Addr(parse_addr(v)?),
            b"LADDR" => KillFilter::LAddr(parse_addr(v)?),
            b"TYPE" => KillFilter::Type(parse_kind(v)?),
            b"USER" => KillFilter::User(String::from_utf8_lossy(v).into_owned()),
            b"SKIPME" => match v.to_ascii_lowercase().as_slice() {
                b"yes" => KillFilter::SkipMe(true),
                b"no" => KillFilter::SkipMe(false),
                _ => return Err(CmdError::Syntax),
            },
            _ => return Err(CmdError::Syntax),
        });
    }
    // The last filter of each kind wins, as in Redis: however many a client sends, each
    // connection is matched against at most five.
    let mut kinds = Vec::new();
    filters.reverse();
    filters.retain(|f| {
        let kind = std::mem::discriminant(f);
        let first = !kinds.contains(&kind);
        kinds.push(kind);
        first
    });
    Ok(filters)
}

fn parse_kind(t: &[u8]) -> Result<ClientKind, CmdError> {
    ClientKind::parse(t).ok_or_else(|| {
        CmdError::msg(format!(
            "ERR Unknown client type '{}'",
            String::from_utf8_lossy(t)
        ))
    })
}

impl<'a> Command<'a> for Client<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let sub = args.key()?;
        let n = args.remaining();
        let cmd = match sub.to_ascii_uppercase().as_slice() {
            b"SETNAME" if n == 1 => {
                let name = args.key()?;
                if !valid_name(name) {
                    return Err(CmdError::msg(
                        "ERR Client names cannot contain spaces, newlines or special characters.",
                    ));
                }
                Client::SetName(name)
            }
            b"SETNAME" => return Err(arity("setname")),
            b"GETNAME" if n == 0 => Client::GetName,
            b"GETNAME" => return Err(arity("getname")),
            b"SETINFO" if n == 2 => parse_setinfo(args)?,
            b"SETINFO" => return Err(arity("setinfo")),
            b"ID" if n == 0 => Client::Id,
            b"ID" => return Err(arity("id")),
            b"LIST" => parse_list(args)?,
            b"INFO" if n == 0 => Client::Info,
            b"INFO" => return Err(arity("info")),
            b"HELP" => Client::Help,
            b"KILL" if n == 1 => Client::KillAddr(parse_addr(args.key()?)?),
            b"KILL" if n >= 2 && n.is_multiple_of(2) => {
                Client::KillFilter(parse_kill_filters(args)?)
            }
            b"KILL" => return Err(CmdError::Syntax),
            _ => {
                return Err(CmdError::msg(format!(
                    "ERR unknown subcommand '{}'. Try CLIENT HELP.",
                    String::from_utf8_lossy(sub)
                )));
            }
        };
        Ok(cmd)
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let me = &ctx.session.client;
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        match self {
            Client::SetName(name) => {
                *me.name.lock() = (!name.is_empty()).then(|| text(name));
                reply::simple(ctx.out, "OK");
            }
            Client::GetName => match me.name.lock().as_deref() {
                Some(n) => reply::bulk(ctx.out, n.as_bytes()),
                None => reply::null(ctx.out, ctx.session.proto),
            },
            Client::SetInfo { lib_name, value } => {
                let slot = if lib_name { &me.lib_name } else { &me.lib_ver };
                *slot.lock() = Some(text(value));
                reply::simple(ctx.out, "OK");
            }
            Client::Id => reply::integer(ctx.out, me.id as i64),
            Client::List { kind, ids } => {
                let mut all = String::new();
                let wanted = |c: &ClientHandle| {
                    kind.is_none_or(|k| c.kind() == k)
                        && ids.as_ref().is_none_or(|ids| ids.contains(&c.id))
                };
                for c in ctx.shared.clients.all().into_iter().filter(|c| wanted(c)) {
                    let cmd = if c.id == me.id { "client|list" } else { "NULL" };
                    all.push_str(&c.list_line(cmd));
                }
                reply::verbatim(ctx.out, ctx.session.proto, "txt", all.as_bytes());
            }
            Client::Info => {
                let line = me.list_line("client|info");
                reply::verbatim(ctx.out, ctx.session.proto, "txt", line.as_bytes());
            }
            Client::KillAddr(addr) => {
                let killed = ctx
                    .shared
                    .clients
                    .kill_where(|c| addr.is(c.unix.as_deref(), c.addr));
                if killed == 0 {
                    return Err(CmdError::msg("ERR No such client"));
                }
                if addr.is(me.unix.as_deref(), me.addr) {
                    ctx.session.close = true;
                }
                reply::simple(ctx.out, "OK");
            }
            Client::KillFilter(filters) => {
                for f in &filters {
                    if let KillFilter::User(u) = f
                        && ctx.shared.acl.get(u).is_none()
                    {
                        return Err(CmdError::msg(format!("ERR No such user '{u}'")));
                    }
                }
                let skip_me = !filters
                    .iter()
                    .any(|f| matches!(f, KillFilter::SkipMe(false)));
                let my_id = me.id;
                let killed = ctx.shared.clients.kill_where(|c| {
                    (!skip_me || c.id != my_id)
                        && filters.iter().all(|f| match f {
                            KillFilter::Id(id) => c.id == *id,
                            KillFilter::Addr(a) => a.is(c.unix.as_deref(), c.addr),
                            KillFilter::LAddr(a) => a.is(c.unix.as_deref(), c.laddr),
                            KillFilter::Type(k) => c.kind() == *k,
                            KillFilter::SkipMe(_) => true,
                            KillFilter::User(u) => *c.user.lock() == *u,
                        })
                });
                reply::integer(ctx.out, killed as i64);
            }
            Client::Help => {
                let lines = [
                    "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                    "ID",
                    "    Return the ID of the current connection.",
                    "GETNAME",
                    "    Return the name of the current connection.",
                    "SETNAME <name>",
                    "    Assign the name <name> to the current connection.",
                    "SETINFO <LIB-NAME|LIB-VER> <value>",
                    "    Record the client library name or version.",
                    "LIST",
                    "    Return information about client connections.",
                    "INFO",
                    "    Return information about the current client connection.",
                    "KILL <ip:port>",
                    "    Kill connection made from <ip:port>.",
                    "KILL <option> <value> [<option> <value> [...]]",
                    "    Kill connections. Options are: ID, ADDR, LADDR, TYPE (normal|pubsub|replica|master), USER, SKIPME.",
                    "HELP",
                    "    Print this help.",
                ];
                reply::array(ctx.out, lines.len());
                for l in lines {
                    reply::simple(ctx.out, l);
                }
            }
        }
        Ok(())
    }
}
