//! `WAIT numreplicas timeout` — block until `numreplicas` replicas have acked every change
//! made so far, or `timeout` ms pass (0: forever); reply with how many did.
//!
//! It flushes the journals at once and asks every replica for an ack (GETACK in the stream),
//! so it returns within a round trip when the replicas are up. The connection then waits in
//! its loop (see `conn`), not here; inside MULTI it answers at once, as Redis does.

use std::time::{Duration, Instant};

use sluice_resp::reply;

use super::args::parse_i64;
use super::{Args, CmdError, Command, Ctx};

/// A connection waiting in WAIT.
#[derive(Debug, Clone, Copy)]
pub struct Blocked {
    pub offset: u64,
    pub numreplicas: usize,
    pub deadline: Option<Instant>,
}

#[derive(Debug)]
pub struct Wait {
    numreplicas: usize,
    timeout_ms: u64,
}

impl Command<'_> for Wait {
    fn parse(args: &mut Args<'_>) -> Result<Self, CmdError> {
        let n = parse_i64(args.required()?).ok_or(CmdError::NotInteger)?;
        let t = parse_i64(args.required()?).ok_or(CmdError::NotInteger)?;
        args.finish()?;
        if t < 0 {
            return Err(CmdError::msg("ERR timeout is negative"));
        }
        Ok(Wait {
            numreplicas: usize::try_from(n).unwrap_or(0),
            timeout_ms: t as u64,
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let repl = &ctx.shared.repl;
        if repl.is_replica() {
            return Err(CmdError::msg(
                "ERR WAIT cannot be used with replica instances. Please also note that since Redis 4.0 if a replica is configured to be writable (which is not the default) writes to replicas are just local and are not propagated.",
            ));
        }
        let offset = repl.flush(&ctx.shared.store, true);
        let acked = repl.acked(offset);
        if acked >= self.numreplicas || ctx.session.in_exec {
            reply::integer(ctx.out, acked as i64);
            return Ok(());
        }
        ctx.session.blocked = Some(Blocked {
            offset,
            numreplicas: self.numreplicas,
            // A timeout too far away to be a point in time waits forever, as 0 does.
            deadline: (self.timeout_ms > 0)
                .then(|| Instant::now().checked_add(Duration::from_millis(self.timeout_ms)))
                .flatten(),
        });
        Ok(())
    }
}
