//! `HELLO [protover [AUTH username password] [SETNAME name]]` — switch protocol (2 or 3),
//! optionally authenticate and name the client; replies with the server's identity as a map.

use std::sync::atomic::Ordering::Relaxed;

use sluice_resp::reply::{self, Proto};

use super::args::parse_i64;
use super::client::valid_name;
use super::{Args, CmdError, Command, Ctx, auth};

#[derive(Debug)]
pub struct Hello<'a> {
    proto: Option<Proto>,
    auth: Option<(&'a [u8], &'a [u8])>,
    name: Option<&'a [u8]>,
}

impl<'a> Command<'a> for Hello<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let mut hello = Hello {
            proto: None,
            auth: None,
            name: None,
        };
        let Some(ver) = args.next() else {
            return Ok(hello);
        };
        hello.proto = Some(match parse_i64(ver) {
            Some(2) => Proto::Resp2,
            Some(3) => Proto::Resp3,
            Some(_) => return Err(CmdError::msg("NOPROTO unsupported protocol version")),
            None => {
                return Err(CmdError::msg(
                    "ERR Protocol version is not an integer or out of range",
                ));
            }
        });
        while let Some(opt) = args.next() {
            match opt.to_ascii_uppercase().as_slice() {
                b"AUTH" if args.remaining() >= 2 => {
                    hello.auth = Some((args.key()?, args.key()?));
                }
                b"SETNAME" if args.remaining() >= 1 => {
                    let name = args.key()?;
                    if !valid_name(name) {
                        return Err(CmdError::msg(
                            "ERR Client names cannot contain spaces, newlines or special characters.",
                        ));
                    }
                    hello.name = Some(name);
                }
                _ => {
                    return Err(CmdError::msg(format!(
                        "ERR Syntax error in HELLO option '{}'",
                        String::from_utf8_lossy(opt)
                    )));
                }
            }
        }
        Ok(hello)
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        if let Some((user, pass)) = self.auth {
            let user = auth::login(ctx, Some(user), pass)?;
            ctx.session.login(user);
            ctx.session.authenticated = true;
        }
        if !ctx.session.authenticated {
            return Err(CmdError::msg(
                "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time",
            ));
        }
        if let Some(proto) = self.proto {
            ctx.session.proto = proto;
            let v = if proto == Proto::Resp3 { 3 } else { 2 };
            ctx.session.client.resp.store(v, Relaxed);
        }
        if let Some(name) = self.name {
            *ctx.session.client.name.lock() = Some(String::from_utf8_lossy(name).into_owned());
        }
        let p = ctx.session.proto;
        let out = &mut *ctx.out;
        reply::map(out, p, 7);
        reply::bulk(out, b"server");
        reply::bulk(out, b"redis");
        reply::bulk(out, b"version");
        reply::bulk(out, super::REDIS_COMPAT_VERSION.as_bytes());
        reply::bulk(out, b"proto");
        reply::integer(out, if p == Proto::Resp3 { 3 } else { 2 });
        reply::bulk(out, b"id");
        reply::integer(out, ctx.session.client.id as i64);
        reply::bulk(out, b"mode");
        let cluster = ctx.shared.cluster.is_some();
        reply::bulk(out, if cluster { b"cluster" } else { b"standalone" });
        reply::bulk(out, b"role");
        let replica = ctx.shared.repl.is_replica();
        reply::bulk(out, if replica { b"replica" } else { b"master" });
        reply::bulk(out, b"modules");
        reply::array(out, 0);
        Ok(())
    }
}
