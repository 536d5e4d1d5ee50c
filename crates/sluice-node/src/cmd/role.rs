//! `ROLE` — this node's place in replication, in Redis's reply shape (Sentinel-aware clients
//! such as redis-rs check it before they trust an address):
//! - primary: `["master", offset, [[ip, port, acked offset], ...]]` (strings inside);
//! - replica: `["slave", host, port, link state, offset]`.

use sluice_resp::reply;

use super::{Args, CmdError, Command, Ctx};

#[derive(Debug)]
pub struct Role;

impl Command<'_> for Role {
    fn parse(args: &mut Args<'_>) -> Result<Self, CmdError> {
        args.finish()?;
        Ok(Role)
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let inner = ctx.shared.repl.inner.lock();
        match &inner.master {
            None => {
                reply::array(ctx.out, 3);
                reply::bulk(ctx.out, b"master");
                reply::integer(ctx.out, inner.offset as i64);
                let online: Vec<_> = inner.replicas().filter(|r| r.online).collect();
                reply::array(ctx.out, online.len());
                for r in online {
                    reply::array(ctx.out, 3);
                    reply::bulk(ctx.out, r.ip.to_string().as_bytes());
                    reply::bulk(ctx.out, r.port.to_string().as_bytes());
                    reply::bulk(ctx.out, r.ack.to_string().as_bytes());
                }
            }
            Some(m) => {
                reply::array(ctx.out, 5);
                reply::bulk(ctx.out, b"slave");
                reply::bulk(ctx.out, m.host.as_bytes());
                reply::integer(ctx.out, i64::from(m.port));
                reply::bulk(ctx.out, inner.link.name().as_bytes());
                let offset = if inner.synced {
                    inner.offset as i64
                } else {
                    -1
                };
                reply::integer(ctx.out, offset);
            }
        }
        Ok(())
    }
}
