//! FIXED: one counter per period-aligned window (windows start at multiples of `period` since
//! the Unix epoch), reset when the window ends.
//!
//! # Invariants
//! - The state is `{window start, count}`, 16 bytes; a key with count 0 is fresh and not stored.
//! - `count ≤ 2·limit`: past `limit` is a debt `RL.SETTLE` charged (see [`settle`]); a count
//!   written under a larger limit is capped to the same bound (grandfathered).
//! - A window start written under another period counts as the current window while it is not
//!   before the current window's start, and as expired otherwise.
//! - `COST > limit` is an error; `COST 0` only reads.

use crate::token::sat;
use crate::{CheckError, Decision, Nanos, Params};

/// A FIXED key's state: how much of the window starting at `start` has been used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fixed {
    pub start: Nanos,
    pub count: u64,
}

/// FIXED: one check. Returns the decision and the state to store (`None` = fresh).
#[inline]
pub fn check(
    state: Option<Fixed>,
    params: &Params,
    now: Nanos,
) -> Result<(Decision, Option<Fixed>), CheckError> {
    let limit = params.limit;
    let cost = params.cost;
    if cost > limit {
        return Err(CheckError::CostExceedsCapacity);
    }
    let (start, window_end, count) = window(state, params, now);
    let allowed = cost <= limit.saturating_sub(count);
    let count_after = if allowed { count + cost } else { count };
    let decision = Decision {
        allowed,
        limit,
        remaining: limit.saturating_sub(count_after),
        retry_after: (!allowed).then(|| window_end.saturating_sub(now)),
        reset_after: if count_after > 0 {
            window_end.saturating_sub(now)
        } else {
            Nanos::ZERO
        },
    };
    let new = (count_after > 0).then_some(Fixed {
        start,
        count: count_after,
    });
    Ok((decision, new))
}

/// The current window's start and end, and its count (capped at two limits).
fn window(state: Option<Fixed>, params: &Params, now: Nanos) -> (Nanos, Nanos, u64) {
    let p = u128::from(params.period.0.max(1));
    let now128 = u128::from(now.0);
    let start = now128 - now128 % p;
    let count = match state {
        Some(s) if u128::from(s.start.0) >= start => s.count.min(params.limit.saturating_mul(2)),
        _ => 0,
    };
    // `start ≤ now`, so it fits in u64.
    (sat(start), sat(start + p), count)
}

/// FIXED `RL.SETTLE`: the current window's count moves by `actual − reserved`, never below 0
/// and at most to two limits (one limit of debt, which ends with the window). The count moved
/// is the current window's: a refund after the check's window ended comes off the new one
/// (the node cannot tell which window the reservation was in), and may allow up to
/// `reserved − actual` more there.
pub fn settle(
    state: Option<Fixed>,
    params: &Params,
    reserved: u64,
    actual: u64,
    now: Nanos,
) -> (Decision, Option<Fixed>) {
    let limit = params.limit;
    let (start, window_end, count) = window(state, params, now);
    let count = if actual >= reserved {
        count
            .saturating_add(actual - reserved)
            .min(limit.saturating_mul(2))
    } else {
        count.saturating_sub(reserved - actual)
    };
    let allowed = count <= limit;
    let left = window_end.saturating_sub(now);
    let decision = Decision {
        allowed,
        limit,
        remaining: limit.saturating_sub(count),
        retry_after: (!allowed).then_some(left),
        reset_after: if count > 0 { left } else { Nanos::ZERO },
    };
    (decision, (count > 0).then_some(Fixed { start, count }))
}
