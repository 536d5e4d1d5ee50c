//! SLIDING: the sliding-window counter. A fresh key's windows are aligned to multiples of
//! `period` since the Unix epoch (a stored state's follow its start, see below); the state holds
//! the current window's start and the counts of the current and the previous window. At `elapsed` into the current window the estimate is
//! `current + previous × (period − elapsed) / period`, and a request is allowed iff
//! `estimate + cost ≤ limit`.
//!
//! # Exactness
//! Everything is compared multiplied by `period` in `u128` (`(current + cost)·P + previous·(P −
//! elapsed) ≤ limit·P`), so there is no rounding in decisions; `retry_after` is the first
//! nanosecond at which the same request fits (the previous window's weight decays continuously,
//! and the window may roll over first).
//!
//! # A state's windows follow its start
//! A stored state's windows are `[start, start + period)` and the one after it, whatever the
//! start's alignment; only a fresh key (no weight left) starts on the aligned grid. On the node
//! that wrote it the start is aligned, so these are the aligned windows. A state from another
//! clock (a primary, a slot's source, a snapshot saved under a clock stepped since) arrives
//! with its start moved by the measured difference (`State::shifted`), which keeps the
//! window's age: every estimate, `retry_after` and `reset_after` on this clock is the one the
//! sender would have made at the same moment (to within the error of the measurement), until
//! the key is fresh. Read against this clock's aligned windows instead, a start moved back (a
//! receiver behind) would turn the current count into the previous window's, or drop it.
//! A start after `now` (clocks too close to be corrected, see `repl::skew`) is a current
//! window that has not begun: its counts weigh in full until it does.
//!
//! # Invariants
//! - State is 16 bytes: counts are `u32`, so `limit` is capped at [`SLIDING_LIMIT_MAX`]
//!   (larger limits answer [`CheckError::LimitTooLarge`]).
//! - Counts are capped to twice the current `limit`: past `limit` is a debt `RL.SETTLE` charged
//!   (see [`settle`]), and grandfathered state is capped to the same bound.
//!   A window start written under another period is read with the current period: the current
//!   window while `now < start + period`, the previous one for a period after that, else
//!   expired.
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
#[inline]
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
    let (l, cost) = (u128::from(limit), u128::from(params.cost));
    let Window {
        p,
        start,
        elapsed,
        lead,
        prev,
        curr,
    } = Window::read(state, params, now);
    let weight = p - elapsed;
    let used = curr * p + prev * weight;
    // COST 0 only reads: allowed even in debt, as for every algorithm.
    let allowed = cost == 0 || used + cost * p <= l * p;
    let (prev_after, curr_after) = if allowed {
        (prev, curr + cost)
    } else {
        (prev, curr)
    };
    let remaining = if allowed {
        (l * p).saturating_sub(used + cost * p) / p
    } else {
        (l * p).saturating_sub(used) / p
    };
    let retry_after = (!allowed).then(|| sat(lead + retry(prev, curr, cost, l, p, elapsed)));
    let decision = Decision {
        allowed,
        limit,
        remaining: sat(remaining).0,
        retry_after,
        reset_after: reset_after(prev_after, curr_after, p, elapsed, lead),
    };
    Ok((decision, stored(start, prev_after, curr_after)))
}

/// The start of the window a check at `now` counts in (see [`Window::read`]).
pub(crate) fn current_start(state: Option<Sliding>, params: &Params, now: Nanos) -> Nanos {
    sat(Window::read(state, params, now).start)
}

/// The current window as a key's state reads at `now`.
struct Window {
    /// The period, at least 1 ns.
    p: u128,
    start: u128,
    /// Time since `start`; 0 while the window has not begun.
    elapsed: u128,
    /// Time until `start`, for a window that has not begun (see the module docs); else 0.
    lead: u128,
    /// Counts of the previous and the current window, capped at [`debt_cap`].
    prev: u128,
    curr: u128,
}

impl Window {
    fn read(state: Option<Sliding>, params: &Params, now: Nanos) -> Window {
        let p = u128::from(params.period.0.max(1));
        let now128 = u128::from(now.0);
        let cap = debt_cap(params.limit);
        if let Some(s) = state {
            let (sp, sc) = (u128::from(s.prev).min(cap), u128::from(s.curr).min(cap));
            let s_start = u128::from(s.start.0);
            let window = |start: u128, prev: u128, curr: u128| Window {
                p,
                start,
                elapsed: now128.saturating_sub(start),
                lead: start.saturating_sub(now128),
                prev,
                curr,
            };
            if now128 < s_start + p {
                return window(s_start, sp, sc);
            }
            if now128 < s_start + 2 * p && sc > 0 {
                return window(s_start + p, sc, 0);
            }
        }
        let start = now128 - now128 % p;
        Window {
            p,
            start,
            elapsed: now128 - start,
            lead: 0,
            prev: 0,
            curr: 0,
        }
    }
}

/// The most a count may be: two limits (one of debt), within the `u32` a count is stored in.
fn debt_cap(limit: u64) -> u128 {
    u128::from(limit)
        .saturating_mul(2)
        .min(u128::from(u32::MAX))
}

/// The time until neither count weighs anything, for a window `lead` from beginning.
fn reset_after(prev: u128, curr: u128, p: u128, elapsed: u128, lead: u128) -> Nanos {
    if curr > 0 {
        sat(lead + 2 * p - elapsed)
    } else if prev > 0 {
        sat(lead + p - elapsed)
    } else {
        Nanos::ZERO
    }
}

/// The state to store for these counts (`None` = fresh). Counts are ≤ [`debt_cap`] ≤
/// `u32::MAX`; `start` is a stored start, at most a period past one, or `≤ now`.
fn stored(start: u128, prev: u128, curr: u128) -> Option<Sliding> {
    (prev + curr > 0).then(|| Sliding {
        start: sat(start),
        prev: prev as u32,
        curr: curr as u32,
    })
}

/// SLIDING `RL.SETTLE`: the counts move by `actual − reserved`. A charge goes into the current
/// window, until the weighted estimate is two limits (one limit of debt, which decays as the
/// windows move on); a refund comes off the current window, then the previous one (the
/// reservation may have been counted there if the window rolled over since), never below 0.
pub fn settle(
    state: Option<Sliding>,
    params: &Params,
    reserved: u64,
    actual: u64,
    now: Nanos,
) -> (Decision, Option<Sliding>) {
    let limit = params.limit;
    let l = u128::from(limit);
    let Window {
        p,
        start,
        elapsed,
        lead,
        prev,
        curr,
    } = Window::read(state, params, now);
    let weight = p - elapsed;
    let (prev, curr) = if actual >= reserved {
        let used = curr * p + prev * weight;
        let room = (2 * l * p).saturating_sub(used) / p;
        let extra = u128::from(actual - reserved).min(room);
        (prev, (curr + extra).min(debt_cap(limit)))
    } else {
        let give = u128::from(reserved - actual);
        let from_curr = give.min(curr);
        (prev - (give - from_curr).min(prev), curr - from_curr)
    };
    let used = curr * p + prev * weight;
    let allowed = used <= l * p;
    let decision = Decision {
        allowed,
        limit,
        remaining: sat((l * p).saturating_sub(used) / p).0,
        retry_after: (!allowed).then(|| sat(lead + retry(prev, curr, 1, l, p, elapsed))),
        reset_after: reset_after(prev, curr, p, elapsed, lead),
    };
    (decision, stored(start, prev, curr))
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
