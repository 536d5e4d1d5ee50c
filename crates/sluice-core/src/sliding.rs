//! SLIDING: the sliding-window counter. Windows are aligned to multiples of `period` since the
//! Unix epoch; the state holds the current window's start and the counts of the current and the
//! previous window. At `elapsed` into the current window the estimate is
//! `current + previous × (period − elapsed) / period`, and a request is allowed iff
//! `estimate + cost ≤ limit`.
//!
//! # Exactness
//! Everything is compared multiplied by `period` in `u128` (`(current + cost)·P + previous·(P −
//! elapsed) ≤ limit·P`), so there is no rounding in decisions; `retry_after` is the first
//! nanosecond at which the same request fits (the previous window's weight decays continuously,
//! and the window may roll over first).
//!
//! # Invariants
//! - State is 16 bytes: counts are `u32`, so `limit` is capped at [`SLIDING_LIMIT_MAX`]
//!   (larger limits answer [`CheckError::LimitTooLarge`]).
//! - Counts are capped to the current `limit` (grandfathered state never exceeds capacity).
//!   A window start written under another period is the current window if it is not before the
//!   current window's start, the previous one if it is within one period before, else expired.
//! - Both counts zero = fresh = not stored. `reset_after` is the time until neither count weighs
//!   anything: the end of the next window if the current count is non-zero, else the end of the
//!   current window.

use crate::token::sat;
use crate::{CheckError, Decision, Nanos, Params};

/// The largest `limit` SLIDING stores (its counts are `u32` to keep the state at 16 bytes).
pub const SLIDING_LIMIT_MAX: u64 = u32::MAX as u64;

/// A SLIDING key's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sliding {
    /// Start of the window `curr` counts.
    pub start: Nanos,
    /// Count of the window before `start`.
    pub prev: u32,
    /// Count of the window at `start`.
    pub curr: u32,
}

/// SLIDING: one check. Returns the decision and the state to store (`None` = fresh).
pub fn check(
    state: Option<Sliding>,
    params: &Params,
    now: Nanos,
) -> Result<(Decision, Option<Sliding>), CheckError> {
    let limit = params.limit;
    if limit > SLIDING_LIMIT_MAX {
        return Err(CheckError::LimitTooLarge {
            max: SLIDING_LIMIT_MAX,
        });
    }
    if params.cost > limit {
        return Err(CheckError::CostExceedsCapacity);
    }
    let p = u128::from(params.period.0.max(1));
    let (l, cost) = (u128::from(limit), u128::from(params.cost));
    let now128 = u128::from(now.0);
    let start = now128 - now128 % p;
    let elapsed = now128 - start;
    let (prev, curr) = match state {
        None => (0, 0),
        Some(s) => {
            let (sp, sc) = (u128::from(s.prev).min(l), u128::from(s.curr).min(l));
            let s_start = u128::from(s.start.0);
            if s_start >= start {
                (sp, sc)
            } else if s_start + p >= start {
                (sc, 0)
            } else {
                (0, 0)
            }
        }
    };
    // The previous window's weight, scaled by P: P − elapsed ∈ [1, P].
    let weight = p - elapsed;
    let used = curr * p + prev * weight;
    let allowed = used + cost * p <= l * p;
    let (prev_after, curr_after) = if allowed {
        (prev, curr + cost)
    } else {
        (prev, curr)
    };
    let remaining = if allowed {
        (l * p - used - cost * p) / p
    } else {
        (l * p).saturating_sub(used) / p
    };
    let retry_after = (!allowed).then(|| sat(retry(prev, curr, cost, l, p, elapsed)));
    let reset_after = if curr_after > 0 {
        sat(2 * p - elapsed)
    } else if prev_after > 0 {
        sat(weight)
    } else {
        Nanos::ZERO
    };
    let decision = Decision {
        allowed,
        limit,
        remaining: sat(remaining).0,
        retry_after,
        reset_after,
    };
    // Counts are ≤ limit ≤ u32::MAX, and start ≤ now fits in u64.
    let new = (prev_after + curr_after > 0).then(|| Sliding {
        start: sat(start),
        prev: prev_after as u32,
        curr: curr_after as u32,
    });
    Ok((decision, new))
}

/// The first offset from now at which `cost` fits, given it does not fit now.
fn retry(prev: u128, curr: u128, cost: u128, l: u128, p: u128, elapsed: u128) -> u128 {
    // In a window with counts (pv, cu), at offset e into it the request fits iff
    // pv·(P − e) ≤ (l − cu − cost)·P, i.e. e ≥ P − ⌊(l − cu − cost)·P / pv⌋.
    let first_fit = |pv: u128, cu: u128| -> Option<u128> {
        let slack = l.checked_sub(cu + cost)? * p;
        if pv == 0 {
            return Some(0);
        }
        let e = p - (slack / pv).min(p);
        (e < p).then_some(e)
    };
    if let Some(e) = first_fit(prev, curr) {
        // Denied now, so the fit is later in this window.
        return e - elapsed;
    }
    // The next window: the current count becomes the previous one. If it still does not fit
    // before that window ends (cost == limit), it fits when the window after begins.
    (p - elapsed) + first_fit(curr, 0).unwrap_or(p)
}
