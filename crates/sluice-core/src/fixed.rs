//! FIXED: one counter per window, reset when the window ends. A fresh key's window is
//! period-aligned (it starts at the last multiple of `period` since the Unix epoch).
//!
//! # A window is `[start, start + period)`
//! A stored count holds until a period after its window's start, whatever that start's
//! alignment, and only then does the key start a new, aligned window. On the node that wrote
//! it the start is aligned, so this is the aligned window. A state from another clock (a
//! primary, a slot's source, a snapshot saved under a clock stepped since) arrives with its
//! start moved by the measured difference (`State::shifted`), which keeps the window's age:
//! the count then holds for the rest of the sender's window as this clock measures it, never
//! less (a receiver behind would otherwise see the start before its own aligned window and
//! reset the count at once; one ahead would end it early by the difference), and never more
//! (to within the error of the measurement). When the moved window ends the key is fresh, and
//! its next window is aligned to this clock: like any fresh key's first window, it may be
//! shorter than a period.
//!
//! # Invariants
//! - The state is `{window start, count}`, 16 bytes; a key with count 0 is fresh and not stored.
//! - `count ≤ 2·limit`: past `limit` is a debt `RL.SETTLE` charged (see [`settle`]); a count
//!   written under a larger limit is capped to the same bound (grandfathered).
//! - A window start written under another period is read with the current period: the count
//!   holds while `now < start + period`.
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

/// The start of the window a check at `now` counts in (see [`window`]).
pub(crate) fn current_start(state: Option<Fixed>, params: &Params, now: Nanos) -> Nanos {
    window(state, params, now).0
}

/// The current window's start and end, and its count (capped at two limits): the stored
/// window while it has not ended (see the module docs), else a fresh aligned one.
fn window(state: Option<Fixed>, params: &Params, now: Nanos) -> (Nanos, Nanos, u64) {
    let p = u128::from(params.period.0.max(1));
    let now128 = u128::from(now.0);
    if let Some(s) = state {
        let end = u128::from(s.start.0) + p;
        if now128 < end {
            return (
                s.start,
                sat(end),
                s.count.min(params.limit.saturating_mul(2)),
            );
        }
    }
    let start = now128 - now128 % p;
    // `start ≤ now`, so it fits in u64.
    (sat(start), sat(start + p), 0)
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
