//! `GCRA key max_burst requests_per_period period [TOKENS n]` — the rate-limit command Redis
//! added in 2026, with its validation order, error texts and reply.
//!
//! # Format
//! `*5 :limited :max_burst+1 :remaining :retry_after_s :reset_after_s` (all integers, as in
//! Redis's `gcra.json`); a cost that can never fit answers `[1, max_burst+1, 0, -1, -1]`. The
//! state is GCRA's, shared with `RL.CHECK ... ALGO GCRA` and `CL.THROTTLE` on the same key.
//!
//! [`GcraCompat`] is the one command type behind both `GCRA` and `CL.THROTTLE`: they differ
//! only in how they parse, the arithmetic in [`sluice_core::compat`], and the line a cost that
//! can never fit answers.

use sluice_core::compat::{self, Bucket, GCRA_TOKENS_OVERFLOW, GcraCmd, GcraReply};
use sluice_core::{CheckError, Nanos, State};
use sluice_resp::reply;
use sluice_store::StoreError;

use super::{Args, CmdError, Command, Ctx};

/// `GCRA`: [`GcraCompat`] over Redis's arguments.
pub type Gcra<'a> = GcraCompat<'a, GcraCmd>;

/// Parses the arguments after the key; the error is the whole reply line without its `-`.
pub type ParseFn<R> = fn(&[&[u8]]) -> Result<R, String>;
/// Checks a `Gcra` slot at `now`: the reply, and whether the slot changed.
pub type CheckFn<R> = fn(&mut Option<State>, &R, Nanos) -> Result<(GcraReply, bool), CheckError>;

/// A GCRA-compatible request: how it parses and checks, from [`sluice_core::compat`].
pub trait CompatRequest: Sized {
    const PARSE: ParseFn<Self>;
    const CHECK: CheckFn<Self>;
    /// The bucket the request checks, for the tokens out on lease on its key.
    const BUCKET: fn(&Self) -> Bucket;
    /// The reply line for a cost that can never fit, where it is not the store's own error.
    const NEVER_FITS: Option<&'static str> = None;
}

/// `gcra` reports an increment past `i64::MAX` µs as "never fits"; Redis answers it with its
/// overflow line.
impl CompatRequest for GcraCmd {
    const PARSE: ParseFn<Self> = GcraCmd::parse;
    const CHECK: CheckFn<Self> = compat::gcra;
    const BUCKET: fn(&Self) -> Bucket = GcraCmd::bucket;
    const NEVER_FITS: Option<&'static str> = Some(GCRA_TOKENS_OVERFLOW);
}

/// A key and a [`CompatRequest`]; replies with the request's five integers.
#[derive(Debug)]
pub struct GcraCompat<'a, R> {
    key: &'a [u8],
    request: R,
}

impl<'a, R: CompatRequest> Command<'a> for GcraCompat<'a, R> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let key = args.key()?;
        let rest: Vec<&[u8]> = args.rest().collect();
        let request = R::PARSE(&rest).map_err(CmdError::msg)?;
        Ok(GcraCompat { key, request })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let now = ctx.now;
        let bucket = R::BUCKET(&self.request);
        // Tokens out on lease (`RL.LEASE ... ALGO GCRA`) stay with their holders, as for
        // RL.CHECK: the bucket is lowered to its capacity less them, on a copy that is kept
        // only when the check changes the key, so a refusal or an error writes nothing.
        let held =
            (ctx.shared.token_leases).held_for(self.key, sluice_core::Algo::Gcra, bucket.cost > 0);
        let reply = ctx
            .shared
            .store
            .limiter(self.key, now, |slot| {
                let (reply, changed) = if held == 0 {
                    R::CHECK(slot, &self.request, now)?
                } else {
                    let mut lowered = slot.clone();
                    compat::keep_held(&mut lowered, &bucket, held, now)?;
                    let (reply, changed) = R::CHECK(&mut lowered, &self.request, now)?;
                    if changed {
                        *slot = lowered;
                    }
                    (reply, changed)
                };
                Ok((reply, changed.then(|| reset_after(slot, now))))
            })
            .map_err(|e| match (e, R::NEVER_FITS) {
                (StoreError::Check(CheckError::CostExceedsCapacity), Some(line)) => {
                    CmdError::msg(line)
                }
                (other, _) => other.into(),
            })?;
        reply::int_array(ctx.out, &reply.to_array());
        Ok(())
    }
}

/// How long the store keeps a GCRA slot: until its theoretical arrival time.
fn reset_after(slot: &Option<State>, now: Nanos) -> Nanos {
    match slot {
        Some(State::Gcra { tat }) => tat.saturating_sub(now),
        _ => Nanos::ZERO,
    }
}
