//! Property tests: each algorithm against a simple, obviously-correct reference model, driven by
//! random sequences of (advance time, cost) steps. Failing cases are kept in
//! `tests/props.proptest-regressions` (proptest writes it beside this file; keep it committed).
//!
//! TOKEN's model is the exact rational GCRA (T = P/L, state `tat·L` in `u128`). The
//! implementation rounds T up to whole ns (see `token.rs`), so the model is run on the requests
//! the implementation admitted, and the properties are: it never admits what the exact model
//! denies, never shows more remaining, is identical when L divides P, and is identical for a
//! burst at one instant whatever L and P.

use std::collections::BTreeMap;

use proptest::prelude::*;
use sluice_core::{Algo, Decision, MAX_SPAN, Nanos, Params, State, check};

const T0: u64 = 1_780_000_000_123_456_789;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 96,
        ..ProptestConfig::default()
    }
}

/// Exact GCRA over rationals: `tat` is kept multiplied by L.
struct ExactGcra {
    l: u128,
    p: u128,
    b: u128,
    tat_l: u128,
}

impl ExactGcra {
    /// (allowed, remaining, time until full after this request in units of 1/L ns).
    fn decide(&self, now: u64, cost: u64) -> (bool, u64, u128) {
        let now_l = u128::from(now) * self.l;
        let debt = self.tat_l.max(now_l) - now_l;
        let c = u128::from(cost);
        let allowed = debt + c * self.p <= self.b * self.p;
        let after = if allowed { debt + c * self.p } else { debt };
        (allowed, ((self.b * self.p - after) / self.p) as u64, after)
    }
    fn admit(&mut self, now: u64, cost: u64) {
        let now_l = u128::from(now) * self.l;
        self.tat_l = self.tat_l.max(now_l) + u128::from(cost) * self.p;
    }
}

fn period() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(1_000_000u64),
        Just(1_000_000_000),
        Just(10_000_000_000),
        Just(365 * 24 * 3600 * 1_000_000_000),
        1u64..=20_000_000_000,
    ]
}

fn token_case() -> impl Strategy<Value = (u64, u64, u64, Vec<(u64, u64)>)> {
    // Parameters inside the documented domain: a full refill spans at most MAX_SPAN.
    let within_span = |&(limit, period, burst): &(u64, u64, u64)| {
        u128::from(period.div_ceil(limit)) * u128::from(burst) <= u128::from(MAX_SPAN.0)
    };
    (1u64..=5000, period(), 1u64..=5000)
        .prop_filter("refill longer than MAX_SPAN", within_span)
        .prop_flat_map(|(limit, period, burst)| {
            let t = period.div_ceil(limit);
            let advance =
                prop_oneof![4 => 0..=t.saturating_mul(2), 1 => 0..=period.saturating_mul(2)];
            let steps = prop::collection::vec((advance, 0..=burst), 1..60);
            (Just(limit), Just(period), Just(burst), steps)
        })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn token_never_admits_what_the_exact_model_denies((limit, period, burst, steps) in token_case()) {
        let mut slot = None;
        let mut model = ExactGcra { l: limit.into(), p: period.into(), b: burst.into(), tat_l: 0 };
        let whole = period % limit == 0;
        let mut now = T0;
        for (advance, cost) in steps {
            now += advance;
            let params = Params { limit, period: Nanos(period), burst, cost };
            let d = check(&mut slot, Algo::Token, &params, Nanos(now), false).unwrap();
            let (m_allowed, m_remaining, m_after) = model.decide(now, cost);
            let now_l = u128::from(now) * model.l;
            prop_assert!(!d.allowed || m_allowed, "admitted what the exact model denies");
            if d.allowed == m_allowed {
                prop_assert!(d.remaining <= m_remaining);
            } else {
                // Denied here, admitted by the exact model (the integer T is a hair slower):
                // our `remaining` is before the request, so compare with the model's before.
                let debt = model.tat_l.max(now_l) - now_l;
                prop_assert!(u128::from(d.remaining) <= (model.b * model.p - debt) / model.p);
            }
            // Never says "full" before the exact bucket is full (after the same admissions).
            let m_after = if d.allowed == m_allowed { m_after } else { model.tat_l.max(now_l) - now_l };
            prop_assert!(u128::from(d.reset_after.0) * model.l >= m_after);
            if whole {
                prop_assert_eq!((d.allowed, d.remaining), (m_allowed, m_remaining));
                prop_assert_eq!(u128::from(d.reset_after.0) * model.l, m_after);
            }
            if d.allowed {
                model.admit(now, cost);
            }
            // The stored tat is never before the exact one.
            let tat = match &slot { Some(State::Token { tat }) => tat.0, None => now, Some(s) => panic!("{s:?}") };
            prop_assert!(u128::from(tat.max(now)) * model.l >= model.tat_l.max(u128::from(now) * model.l));
            if cost > 0 {
                // COST 0 only reads; a real request leaves the slot fresh iff reset_after is 0.
                prop_assert_eq!(slot.is_none(), d.reset_after == Nanos::ZERO);
            }
        }
    }

    #[test]
    fn gcra_family_bursts_at_one_instant_exactly(
        limit in 1u64..=5000, period in period(), burst in 1u64..=200, costs in prop::collection::vec(0u64..=20, 1..40),
    ) {
        let mut model = ExactGcra { l: limit.into(), p: period.into(), b: burst.into(), tat_l: 0 };
        let (mut token, mut leaky) = (None, None);
        let t = period.div_ceil(limit);
        let mut queued = 0u64;
        for cost in costs.into_iter().map(|c| c.min(burst)) {
            let params = Params { limit, period: Nanos(period), burst, cost };
            let d = check(&mut token, Algo::Token, &params, Nanos(T0), false).unwrap();
            let q = check(&mut leaky, Algo::Leaky, &params, Nanos(T0), false).unwrap();
            let (m_allowed, m_remaining, _) = model.decide(T0, cost);
            prop_assert_eq!((d.allowed, d.remaining), (m_allowed, m_remaining));
            prop_assert_eq!((q.allowed, q.remaining), (m_allowed, m_remaining));
            if q.allowed {
                // A LEAKY request waits behind everything queued before it.
                prop_assert_eq!(q.retry_after, Some(Nanos(queued * t)));
                queued += cost;
                model.admit(T0, cost);
            } else {
                prop_assert_eq!(d.retry_after, q.retry_after);
            }
        }
    }
}

/// Window counts by window index: the obvious model of SLIDING and FIXED.
#[derive(Default)]
struct Windows(BTreeMap<u64, u64>);

impl Windows {
    fn count(&self, w: u64) -> u64 {
        self.0.get(&w).copied().unwrap_or(0)
    }
    /// SLIDING's estimate at `now`, multiplied by the period.
    fn estimate_p(&self, now: u64, p: u64) -> u128 {
        let w = now / p;
        let el = now % p;
        let prev = if w == 0 { 0 } else { self.count(w - 1) };
        u128::from(self.count(w)) * u128::from(p) + u128::from(prev) * u128::from(p - el)
    }
    fn sliding_allows(&self, now: u64, p: u64, limit: u64, cost: u64) -> bool {
        self.estimate_p(now, p) + u128::from(cost) * u128::from(p)
            <= u128::from(limit) * u128::from(p)
    }
}

fn window_case() -> impl Strategy<Value = (u64, u64, Vec<(u64, u64)>)> {
    (1u64..=20, prop_oneof![1u64..=50, Just(1_000_000_000)]).prop_flat_map(|(limit, period)| {
        let steps = prop::collection::vec((0..=period + period / 2, 0..=limit), 1..60);
        (Just(limit), Just(period), steps)
    })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn sliding_matches_window_counts((limit, period, steps) in window_case()) {
        let mut slot = None;
        let mut model = Windows::default();
        let mut now = T0;
        for (advance, cost) in steps {
            now += advance;
            let params = Params { limit, period: Nanos(period), burst: limit, cost };
            let d: Decision = check(&mut slot, Algo::Sliding, &params, Nanos(now), false).unwrap();
            let est = model.estimate_p(now, period);
            let (l, p, c) = (u128::from(limit), u128::from(period), u128::from(cost));
            let allowed = model.sliding_allows(now, period, limit, cost);
            prop_assert_eq!(d.allowed, allowed);
            let remaining = if allowed { (l * p - est - c * p) / p } else { (l * p).saturating_sub(est) / p };
            prop_assert_eq!(u128::from(d.remaining), remaining);
            if let Some(r) = d.retry_after {
                // The first nanosecond at which the same request fits.
                prop_assert!(!allowed && r.0 > 0);
                prop_assert!(model.sliding_allows(now + r.0, period, limit, cost));
                prop_assert!(!model.sliding_allows(now + r.0 - 1, period, limit, cost));
            }
            if allowed && cost > 0 {
                *model.0.entry(now / period).or_default() += cost;
            }
            // Fresh exactly when neither window weighs anything.
            let reset = d.reset_after.0;
            prop_assert_eq!(model.estimate_p(now + reset, period), 0);
            if reset > 0 {
                prop_assert!(model.estimate_p(now + reset - 1, period) > 0);
            }
            if cost > 0 {
                prop_assert_eq!(slot.is_none(), reset == 0);
            }
        }
    }

    #[test]
    fn fixed_matches_window_counts((limit, period, steps) in window_case()) {
        let mut slot = None;
        let mut model = Windows::default();
        let mut now = T0;
        for (advance, cost) in steps {
            now += advance;
            let params = Params { limit, period: Nanos(period), burst: limit, cost };
            let d = check(&mut slot, Algo::Fixed, &params, Nanos(now), false).unwrap();
            let used = model.count(now / period);
            let allowed = used + cost <= limit;
            let window_end = (now / period + 1) * period - now;
            prop_assert_eq!(d.allowed, allowed);
            if allowed {
                *model.0.entry(now / period).or_default() += cost;
            }
            let used = model.count(now / period);
            prop_assert_eq!(d.remaining, limit - used);
            prop_assert_eq!(d.retry_after, (!allowed).then_some(Nanos(window_end)));
            prop_assert_eq!(d.reset_after, Nanos(if used > 0 { window_end } else { 0 }));
        }
    }

    #[test]
    fn log_matches_a_list_of_timestamps((limit, period, steps) in window_case(), dry_mask in any::<u64>()) {
        let mut slot = None;
        let mut model: Vec<u64> = Vec::new();
        let live = |model: &Vec<u64>, now: u64| model.iter().filter(|&&t| t + period > now).count() as u64;
        let mut now = T0;
        for (i, (advance, cost)) in steps.into_iter().enumerate() {
            now += advance;
            let dry = dry_mask >> (i % 64) & 1 == 1;
            let params = Params { limit, period: Nanos(period), burst: limit, cost };
            let d = check(&mut slot, Algo::Log, &params, Nanos(now), dry).unwrap();
            let n = live(&model, now);
            let allowed = n + cost <= limit;
            prop_assert_eq!(d.allowed, allowed);
            prop_assert_eq!(d.remaining, limit - n - if allowed { cost } else { 0 });
            if let Some(r) = d.retry_after {
                prop_assert!(live(&model, now + r.0) + cost <= limit);
                prop_assert!(live(&model, now + r.0 - 1) + cost > limit);
            }
            if allowed && !dry {
                model.extend(std::iter::repeat_n(now, cost as usize));
            }
            let newest = model.iter().rev().find(|&&t| t + period > now).copied();
            let expect_reset = match (allowed && dry && cost > 0, newest) {
                (true, _) => period,
                (false, Some(t)) => t + period - now,
                (false, None) => 0,
            };
            prop_assert_eq!(d.reset_after, Nanos(expect_reset));
        }
    }
}
