//! `GCRA key max_burst requests_per_period period [TOKENS n]` — the rate-limit command Redis
//! added in 2026, with its validation order, error texts and reply.
//!
//! # Format
//! `*5 :limited :max_burst+1 :remaining :retry_after_s :reset_after_s` (all integers, as in
//! Redis's `gcra.json`); a cost that can never fit answers `[1, max_burst+1, 0, -1, -1]`. The
//! state is GCRA's, shared with `RL.CHECK ... ALGO GCRA` and `CL.THROTTLE` on the same key.

use sluice_core::CheckError;
use sluice_core::compat::{self, GCRA_TOKENS_OVERFLOW, GcraCmd};
use sluice_resp::reply;
use sluice_store::StoreError;

use super::cl_throttle::reset_after;
use super::{Args, CmdError, Command, Ctx};

#[derive(Debug)]
pub struct Gcra<'a> {
    key: &'a [u8],
    request: GcraCmd,
}

impl<'a> Command<'a> for Gcra<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let key = args.key()?;
        let rest: Vec<&[u8]> = args.rest().collect();
        let request = GcraCmd::parse(&rest).map_err(CmdError::msg)?;
        Ok(Gcra { key, request })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let now = ctx.now;
        let r = ctx
            .shared
            .store
            .limiter(self.key, now, |slot| {
                let (reply, changed) = compat::gcra(slot, &self.request, now)?;
                Ok((reply, changed.then(|| reset_after(slot, now))))
            })
            .map_err(|e| match e {
                StoreError::Check(CheckError::CostExceedsCapacity) => {
                    CmdError::msg(GCRA_TOKENS_OVERFLOW)
                }
                other => other.into(),
            })?;
        reply::int_array(
            ctx.out,
            &[
                r.limited,
                r.max_tokens,
                r.remaining,
                r.retry_after,
                r.reset_after,
            ],
        );
        Ok(())
    }
}
