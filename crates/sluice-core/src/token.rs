//! TOKEN (and GCRA): a token bucket kept in GCRA form, as one theoretical arrival time (`tat`).
//!
//! # Model
//! Capacity `burst` (B), refill `limit` (L) units per `period` (P): the emission interval is
//! T = P/L and the bucket's tolerance is τ = B·T. The stored `tat` is the instant at which the
//! bucket will be full again; a bucket with `tat ≤ now` is full (fresh) and is not stored.
//!
//! # Exactness
//! The emission interval is kept in whole nanoseconds, rounded up: T = ⌈P/L⌉, and τ = B·T. Then
//! every quantity is an integer and every decision is exact with respect to T: a burst of exactly
//! B is allowed at once and the next is denied, for any P and L (with a rational T = P/L stored
//! as an integer `tat`, rounding each increment would deny the last request of a "3 per second"
//! burst). Against the exact rational model (T = P/L) run on the same admitted requests, this is
//! never more permissive (checked by `tests/props.rs`; why: the stored `tat` is never before the
//! exact one, and a request the exact model denies has more than `B − c` units of debt, all
//! admitted since the exact bucket was last full, each of which added T ≥ P/L here): the rate is at most L/P and
//! slower by the factor T_exact/T (< 1 ns per emission interval: 1e-9 relative at 3 per second,
//! 0.2 % at 3000 per millisecond). When L divides P (5 per 10 s, 1000 per ms) it is the exact
//! model. `reset_after` is reported on the exact scale (`⌈(tat − now)·P / (L·T)⌉`), which is
//! never earlier than the exact model's bucket is full, so a full burst of 3 per second resets
//! after 1000 ms, not 1000 ms + 2 ns.
//!
//! # Invariants
//! - `c > B` is an error ([`CheckError::CostExceedsCapacity`]), not a denial.
//! - `COST 0` is always allowed and changes nothing.
//! - A `tat` written under other parameters is kept (grandfathered) but capped to `now + 2τ`
//!   under the current ones: at most one capacity of debt past empty, the bound `RL.SETTLE`
//!   charges an overrun to (see [`settle`]).
//! - Nothing overflows or panics for any `u64` inputs: products are `u128`
//!   (`u64 · u64 < 2^128`), and instants saturate at `u64::MAX`.

use crate::{CheckError, Decision, Nanos, Params};

/// The GCRA core shared by TOKEN, GCRA and LEAKY: what one request does to a `tat`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Gcra {
    pub allowed: bool,
    /// Whole units left after this request (or now, when denied).
    pub remaining: u64,
    /// `tat0 − now`: how far the bucket is from full before this request (LEAKY: the queue's
    /// wait before this request may be forwarded).
    pub wait: Nanos,
    /// When denied: the time until this same request would be allowed.
    pub retry_after: Nanos,
    /// The time until the bucket is full again after this request.
    pub reset_after: Nanos,
    /// The `tat` to store: `None` when the bucket is full (fresh).
    pub tat: Option<Nanos>,
}

/// The emission interval `⌈P/L⌉` in whole ns (at least 1), with zeros lifted to 1 so that no
/// input divides by zero (the command grammar already rejects them).
pub(crate) fn emission_interval(limit: u64, period: Nanos) -> u128 {
    u128::from(period.0.max(1).div_ceil(limit.max(1)))
}

/// `a / b` with a one-instruction 64-bit division whenever both fit (they nearly always do:
/// the server caps every span at 2^62 ns); the `u128` routine only otherwise.
fn div(a: u128, b: u128) -> u128 {
    match (u64::try_from(a), u64::try_from(b)) {
        (Ok(a), Ok(b)) => u128::from(a / b),
        _ => a / b,
    }
}

/// Saturates a `u128` duration into `Nanos`.
pub(crate) fn sat(x: u128) -> Nanos {
    Nanos(u64::try_from(x).unwrap_or(u64::MAX))
}

/// The stored `tat` as the current parameters read it: a full bucket is `now`, and a debt is
/// capped at one capacity (`τ`) past empty.
#[inline]
fn read_tat(tat: Option<Nanos>, tau: u128, now: Nanos) -> Nanos {
    match tat {
        Some(stored) => stored
            .min(now.saturating_add(sat(tau.saturating_mul(2))))
            .max(now),
        None => now,
    }
}

/// A time until full on the exact scale P/L (see the module docs): ≤ the integer one. When L
/// divides P (T is exact) the two scales agree and no division is needed.
#[inline]
fn exact_scale(debt: u128, limit: u64, period: Nanos, t: u128) -> Nanos {
    let (l, p) = (u128::from(limit.max(1)), u128::from(period.0.max(1)));
    if l * t == p {
        sat(debt)
    } else {
        sat((debt * p).div_ceil(l * t))
    }
}

/// One GCRA step with capacity `burst` units. The caller has checked `cost ≤ burst`.
pub(crate) fn gcra(
    tat: Option<Nanos>,
    limit: u64,
    period: Nanos,
    burst: u64,
    cost: u64,
    now: Nanos,
) -> Gcra {
    let t = emission_interval(limit, period);
    let (b, c) = (u128::from(burst), u128::from(cost));
    debug_assert!(c <= b);
    let tau = b * t;
    let tat0 = read_tat(tat, tau, now);
    let wait = tat0.saturating_sub(now);
    let debt = u128::from(wait.0);
    // What the debt may be before this request for it to fit.
    let room = (b - c) * t;
    let reset = |debt: u128| exact_scale(debt, limit, period, t);
    if c == 0 || debt <= room {
        let new_tat = tat0.saturating_add(sat(c * t));
        let after = u128::from(new_tat.saturating_sub(now).0);
        Gcra {
            allowed: true,
            remaining: sat(div(tau.saturating_sub(after), t)).0,
            wait,
            retry_after: Nanos::ZERO,
            reset_after: reset(after),
            tat: (new_tat > now).then_some(new_tat),
        }
    } else {
        Gcra {
            allowed: false,
            remaining: sat(div(tau.saturating_sub(debt), t)).0,
            wait,
            retry_after: sat(debt - room),
            reset_after: reset(debt),
            // debt > room ≥ 0: the (possibly capped) tat is still live.
            tat: Some(tat0),
        }
    }
}

/// TOKEN/GCRA: one check against the stored `tat` (`None` = fresh key). Returns the decision and
/// the `tat` to store (`None` = fresh, drop the key). Pure: the caller decides whether to store.
pub fn check(
    tat: Option<Nanos>,
    params: &Params,
    now: Nanos,
) -> Result<(Decision, Option<Nanos>), CheckError> {
    bucket_check(tat, params, now, false)
}

/// The GCRA bucket behind TOKEN, GCRA and LEAKY. `carry_wait`: allowed replies carry the wait
/// before the request leaves the queue (LEAKY) instead of `None`.
pub(crate) fn bucket_check(
    tat: Option<Nanos>,
    params: &Params,
    now: Nanos,
    carry_wait: bool,
) -> Result<(Decision, Option<Nanos>), CheckError> {
    if params.cost > params.burst {
        return Err(CheckError::CostExceedsCapacity);
    }
    let g = gcra(
        tat,
        params.limit,
        params.period,
        params.burst,
        params.cost,
        now,
    );
    let retry_after = match (g.allowed, carry_wait) {
        (true, true) => Some(g.wait),
        (true, false) => None,
        (false, _) => Some(g.retry_after),
    };
    let decision = Decision {
        allowed: g.allowed,
        limit: params.burst,
        remaining: g.remaining,
        retry_after,
        reset_after: g.reset_after,
    };
    Ok((decision, g.tat))
}

/// TOKEN/GCRA `RL.SETTLE`: moves the stored `tat` by `(actual − reserved)·T`. A refund stops at
/// a full bucket (`tat = now`); a charge may pass empty, up to one capacity of debt
/// (`tat ≤ now + 2τ`). The decision is the bucket's after the correction: allowed while it is
/// not past empty (then exactly what a check of `actual` would have answered), else denied with
/// the time until a request of cost 1 fits.
pub fn settle(
    tat: Option<Nanos>,
    params: &Params,
    reserved: u64,
    actual: u64,
    now: Nanos,
) -> (Decision, Option<Nanos>) {
    let t = emission_interval(params.limit, params.period);
    let tau = u128::from(params.burst) * t;
    let debt = u128::from(read_tat(tat, tau, now).saturating_sub(now).0);
    // Capped at one capacity of debt, and at what an instant can say (only reachable with
    // parameters the server refuses).
    let after = if actual >= reserved {
        debt.saturating_add(u128::from(actual - reserved) * t)
            .min(tau.saturating_mul(2))
            .min(u128::from(u64::MAX))
    } else {
        debt.saturating_sub(u128::from(reserved - actual) * t)
    };
    let allowed = after <= tau;
    let decision = Decision {
        allowed,
        limit: params.burst,
        remaining: sat(div(tau.saturating_sub(after), t)).0,
        // Past empty: a request of cost 1 fits once the debt is down to (B − 1)·T.
        retry_after: (!allowed).then(|| sat(after - (tau - t))),
        reset_after: exact_scale(after, params.limit, params.period, t),
    };
    let new_tat = now.saturating_add(sat(after));
    (decision, (new_tat > now).then_some(new_tat))
}
