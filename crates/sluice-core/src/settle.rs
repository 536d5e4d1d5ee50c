//! `RL.SETTLE`: after a check of an estimated cost, correct the key by the actual cost.
//!
//! # Semantics
//! A gateway checks `COST reserved` before the work (an LLM call, an upload) and, once the
//! work has told its real cost, settles `reserved` against `actual`:
//! - `actual < reserved` gives the difference back, never beyond a fresh key (a full bucket,
//!   empty windows, an empty log);
//! - `actual > reserved` takes the difference even past empty: a debt that makes the next
//!   requests wait longer. The debt is capped at one capacity (BURST for the buckets, `limit`
//!   for the windows and the log): a key is never more than twice its capacity used, so one
//!   wild overrun costs at most one more full refill.
//!
//! The reply is RL.CHECK's five fields after the correction. While the key is not past empty
//! it is exactly what a check of `actual` would have answered at the reservation's instant
//! (`tests/settle.rs` and `tests/props.rs` check it); in debt, `allowed` is 0, `remaining` 0 and
//! `retry_after` the time until a request of cost 1 fits.
//!
//! Per algorithm: TOKEN and GCRA move the `tat`; SLIDING and FIXED the current window counts
//! (a refund after the check's window ended comes off the new window, which the node cannot
//! tell apart: it may allow up to `reserved − actual` more there); LOG removes its
//! newest entries or adds entries at now. LEAKY is refused ([`CheckError::SettleNotApplicable`]):
//! the requests queued behind this one were already told when to leave, and a new cost for it
//! would make those answers wrong.

use crate::state::State;
use crate::{Algo, CheckError, Decision, Nanos, Params, fixed, log, sliding, token};

/// Settles `reserved` against `actual` on `slot` (`None`: a fresh key). Errors change nothing:
/// `WrongType` for another algorithm's state, `CostExceedsCapacity` for a `reserved` no check
/// could have allowed, `SettleNotApplicable` for LEAKY.
pub fn settle(
    slot: &mut Option<State>,
    algo: Algo,
    params: &Params,
    reserved: u64,
    actual: u64,
    now: Nanos,
) -> Result<Decision, CheckError> {
    if slot.as_ref().is_some_and(|s| s.algo() != Some(algo)) {
        return Err(CheckError::WrongType);
    }
    if algo == Algo::Leaky {
        return Err(CheckError::SettleNotApplicable);
    }
    if algo == Algo::Sliding && params.limit > sliding::SLIDING_LIMIT_MAX {
        return Err(CheckError::LimitTooLarge {
            max: sliding::SLIDING_LIMIT_MAX,
        });
    }
    if reserved > capacity(algo, params) {
        return Err(CheckError::CostExceedsCapacity);
    }
    let (decision, new) = match (algo, slot.take()) {
        (Algo::Token | Algo::Gcra, old) => {
            let tat = match old {
                Some(State::Token { tat } | State::Gcra { tat }) => Some(tat),
                _ => None,
            };
            let (d, tat) = token::settle(tat, params, reserved, actual, now);
            let new = tat.map(|tat| match algo {
                Algo::Gcra => State::Gcra { tat },
                _ => State::Token { tat },
            });
            (d, new)
        }
        (Algo::Sliding, old) => {
            let s = old.and_then(|s| match s {
                State::Sliding(s) => Some(s),
                _ => None,
            });
            let (d, s) = sliding::settle(s, params, reserved, actual, now);
            (d, s.map(State::Sliding))
        }
        (Algo::Fixed, old) => {
            let s = old.and_then(|s| match s {
                State::Fixed(s) => Some(s),
                _ => None,
            });
            let (d, s) = fixed::settle(s, params, reserved, actual, now);
            (d, s.map(State::Fixed))
        }
        (_, old) => {
            let mut ring = old.and_then(|s| match s {
                State::Log(r) => Some(r),
                _ => None,
            });
            let result = log::settle(&mut ring, params, reserved, actual, now);
            *slot = ring.map(State::Log);
            return result;
        }
    };
    *slot = new;
    Ok(decision)
}

/// The capacity a check of this algorithm takes its cost from.
fn capacity(algo: Algo, params: &Params) -> u64 {
    match algo {
        Algo::Token | Algo::Gcra | Algo::Leaky => params.burst,
        Algo::Sliding | Algo::Fixed | Algo::Log => params.limit,
    }
}
