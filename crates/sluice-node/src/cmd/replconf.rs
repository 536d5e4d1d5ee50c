//! `REPLCONF option value ...` — what a replica tells its primary before PSYNC:
//! `listening-port` (the port Sentinel and ROLE report for it), `capa` (a replica that does
//! not announce `sluice-v3` cannot read this node's stream and is refused at PSYNC),
//! `ip-address`. `ACK` and `GETACK` belong to a replica's link (read by the replication
//! thread); on any other connection they are ignored without a reply, as Redis does, which is
//! why REPLCONF is refused inside MULTI.

use sluice_resp::reply;

use super::args::parse_i64;
use super::{Args, CmdError, Command, Ctx};

#[derive(Debug)]
pub struct ReplConf<'a> {
    pairs: Vec<(&'a [u8], &'a [u8])>,
}

impl<'a> Command<'a> for ReplConf<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        if !args.remaining().is_multiple_of(2) {
            return Err(CmdError::Syntax);
        }
        let mut pairs = Vec::new();
        while let Some(option) = args.next() {
            pairs.push((option, args.required()?));
        }
        Ok(ReplConf { pairs })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        for (option, value) in self.pairs {
            match option.to_ascii_lowercase().as_slice() {
                b"listening-port" => {
                    ctx.session.replica_port = parse_i64(value)
                        .and_then(|p| u16::try_from(p).ok())
                        .ok_or(CmdError::NotInteger)?;
                }
                b"capa" => {
                    if value == sluice_repl::CAPA.as_bytes() {
                        ctx.session.replica_capa = true;
                    }
                }
                b"ack" | b"getack" => return Ok(()),
                b"ip-address" | b"rdb-only" | b"rdb-filter-only" => {}
                _ => {
                    return Err(CmdError::msg(format!(
                        "ERR Unrecognized REPLCONF option: {}",
                        String::from_utf8_lossy(option)
                    )));
                }
            }
        }
        reply::simple(ctx.out, "OK");
        Ok(())
    }
}
