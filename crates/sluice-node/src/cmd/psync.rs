//! `PSYNC replid offset` (and `SYNC`) — a replica asks for the stream. The connection leaves
//! the request path here: the connection loop hands its socket to the replication thread,
//! which answers `+FULLRESYNC` or `+CONTINUE` (see `repl`).
//!
//! Only a Sluice replica can read the stream (it holds bucket states, not an RDB file), so a
//! replica that did not announce `REPLCONF capa sluice-v3` is refused with an error.

use super::args::parse_i64;
use super::{Args, CmdError, Command, Ctx};
use crate::repl::PsyncRequest;

#[derive(Debug)]
pub struct Psync<'a> {
    replid: &'a [u8],
    offset: i64,
}

impl<'a> Command<'a> for Psync<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let replid = args.required()?;
        let offset = parse_i64(args.required()?).ok_or(CmdError::NotInteger)?;
        args.finish()?;
        Ok(Psync { replid, offset })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        start(ctx, self.replid, self.offset)
    }
}

#[derive(Debug)]
pub struct Sync;

impl Command<'_> for Sync {
    fn parse(args: &mut Args<'_>) -> Result<Self, CmdError> {
        args.finish()?;
        Ok(Sync)
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        start(ctx, b"?", -1)
    }
}

fn start(ctx: &mut Ctx<'_>, replid: &[u8], offset: i64) -> Result<(), CmdError> {
    if !ctx.session.replica_capa {
        return Err(CmdError::msg(format!(
            "ERR this node streams Sluice bucket states, not an RDB file: only a Sluice replica (REPLCONF capa {}) can sync from it",
            sluice_repl::CAPA
        )));
    }
    ctx.session.handoff = Some(PsyncRequest {
        peer: ctx.session.client.addr,
        client: ctx.session.client.clone(),
        listening_port: ctx.session.replica_port,
        replid: replid.to_vec(),
        offset,
        filter: None,
    });
    Ok(())
}
