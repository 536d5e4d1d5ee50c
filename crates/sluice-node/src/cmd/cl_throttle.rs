//! `CL.THROTTLE key max_burst count period [quantity]` — redis-cell's command, for users who
//! switch without changing code.
//!
//! # Format
//! `*5 :limited :max_burst+1 :remaining :retry_after_s :reset_after_s` — seconds rounded as
//! redis-cell rounds them, `retry_after_s` -1 when allowed. Errors carry redis-cell's texts. The
//! state is GCRA's, shared with `RL.CHECK ... ALGO GCRA` on the same key.

use sluice_core::compat::{self, ClThrottle as Request};
use sluice_resp::reply;

use super::{Args, CmdError, Command, Ctx};

#[derive(Debug)]
pub struct ClThrottle<'a> {
    key: &'a [u8],
    request: Request,
}

impl<'a> Command<'a> for ClThrottle<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let key = args.key()?;
        let rest: Vec<&[u8]> = args.rest().collect();
        let request = Request::parse(&rest).map_err(CmdError::msg)?;
        Ok(ClThrottle { key, request })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let now = ctx.now;
        let r = ctx.shared.store.limiter(self.key, now, |slot| {
            let (reply, changed) = compat::cl_throttle(slot, &self.request, now)?;
            Ok((reply, changed.then(|| reset_after(slot, now))))
        })?;
        reply::int_array(
            ctx.out,
            &[
                r.limited,
                r.limit,
                r.remaining,
                r.retry_after,
                r.reset_after,
            ],
        );
        Ok(())
    }
}

/// How long the store keeps a GCRA slot: until its theoretical arrival time.
pub fn reset_after(
    slot: &Option<sluice_core::State>,
    now: sluice_core::Nanos,
) -> sluice_core::Nanos {
    match slot {
        Some(sluice_core::State::Gcra { tat }) => tat.saturating_sub(now),
        _ => sluice_core::Nanos::ZERO,
    }
}
