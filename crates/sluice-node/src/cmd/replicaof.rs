//! `REPLICAOF host port | NO ONE` (and its old name `SLAVEOF`) — follow a primary, or become
//! one.
//!
//! `+OK` at once; the link is made in the background (`INFO replication` shows it). Promotion
//! keeps every bucket and starts a new replication id. A node never replicates from itself.

use std::net::{IpAddr, ToSocketAddrs};

use sluice_resp::reply;

use super::args::parse_i64;
use super::{Args, CmdError, Command, Ctx};
use crate::repl::MasterAddr;

#[derive(Debug)]
pub struct ReplicaOf(Option<MasterAddr>);

impl Command<'_> for ReplicaOf {
    fn parse(args: &mut Args<'_>) -> Result<Self, CmdError> {
        let host = args.required()?;
        let port = args.required()?;
        args.finish()?;
        if host.eq_ignore_ascii_case(b"no") && port.eq_ignore_ascii_case(b"one") {
            return Ok(ReplicaOf(None));
        }
        let port = parse_i64(port).ok_or(CmdError::NotInteger)?;
        let port = u16::try_from(port)
            .ok()
            .filter(|&p| p > 0)
            .ok_or_else(|| CmdError::msg("ERR Invalid master port"))?;
        let host = std::str::from_utf8(host)
            .ok()
            .filter(|h| !h.is_empty() && !h.contains(char::is_whitespace))
            .ok_or_else(|| CmdError::msg("ERR Invalid master host"))?;
        Ok(ReplicaOf(Some(MasterAddr {
            host: host.to_string(),
            port,
        })))
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        if let Some(to) = &self.0
            && is_self(ctx, to)
        {
            return Err(CmdError::msg(
                "ERR can't replicate from myself: REPLICAOF names this node's own address",
            ));
        }
        let promote = self.0.is_none();
        if ctx.shared.repl.set_master(&ctx.shared.store, self.0) {
            if promote {
                crate::cluster::adopt::promoted(ctx.shared);
            }
            reply::simple(ctx.out, "OK");
        } else {
            reply::simple(ctx.out, "OK Already connected to specified master");
        }
        Ok(())
    }
}

/// Whether `to` is this node: one of our ports (plain or TLS), and an address of ours (the
/// bound one, or loopback when bound to loopback or to every address).
fn is_self(ctx: &Ctx<'_>, to: &MasterAddr) -> bool {
    let local = ctx.shared.local_addr;
    if to.port != local.port() && Some(to.port) != ctx.shared.config.tls_port {
        return false;
    }
    let Ok(addrs) = (to.host.as_str(), to.port).to_socket_addrs() else {
        return false;
    };
    addrs.map(|a| a.ip()).any(|ip: IpAddr| {
        ip == local.ip()
            || (ip.is_loopback() && (local.ip().is_loopback() || local.ip().is_unspecified()))
    })
}
