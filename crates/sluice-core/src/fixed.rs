//! FIXED: one counter per period-aligned window (windows start at multiples of `period` since
//! the Unix epoch), reset when the window ends.
//!
//! # Invariants
//! - The state is `{window start, count}`, 16 bytes; a key with count 0 is fresh and not stored.
//! - `count ≤ limit` always: a count written under a larger limit is capped (grandfathered).
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
    let p = u128::from(params.period.0.max(1));
    let now128 = u128::from(now.0);
    let start = now128 - now128 % p;
    let window_end = sat(start + p);
    let count = match state {
        Some(s) if u128::from(s.start.0) >= start => s.count.min(limit),
        _ => 0,
    };
    let allowed = cost <= limit - count;
    let count_after = if allowed { count + cost } else { count };
    let decision = Decision {
        allowed,
        limit,
        remaining: limit - count_after,
        retry_after: (!allowed).then(|| window_end.saturating_sub(now)),
        reset_after: if count_after > 0 {
            window_end.saturating_sub(now)
        } else {
            Nanos::ZERO
        },
    };
    // `start ≤ now`, so it fits in u64.
    let new = (count_after > 0).then_some(Fixed {
        start: sat(start),
        count: count_after,
    });
    Ok((decision, new))
}
