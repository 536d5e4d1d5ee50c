//! Edge cases of every algorithm through the dispatcher the store calls (`check`), with time
//! moved by hand.

use sluice_core::{Algo, CheckError, Decision, LOG_LIMIT_MAX, Nanos, Params, State, check};

const SEC: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;
const YEAR: u64 = 365 * 24 * 3600 * SEC;
/// An arbitrary, realistic instant (2026, in ns since the epoch), not aligned to anything.
const T0: u64 = 1_780_000_000_123_456_789;

fn p(limit: u64, period: u64, burst: u64, cost: u64) -> Params {
    Params {
        limit,
        period: Nanos(period),
        burst,
        cost,
    }
}

fn run(slot: &mut Option<State>, algo: Algo, params: Params, now: u64) -> Decision {
    check(slot, algo, &params, Nanos(now), false).expect("check")
}

#[test]
fn token_five_per_ten_seconds() {
    for algo in [Algo::Token, Algo::Gcra] {
        let mut slot = None;
        let params = p(5, 10 * SEC, 5, 1);
        for (i, want) in [4, 3, 2, 1, 0].into_iter().enumerate() {
            let d = run(&mut slot, algo, params, T0);
            assert!(d.allowed);
            assert_eq!((d.limit, d.remaining, d.retry_after_ms()), (5, want, -1));
            assert_eq!(d.reset_after_ms(), 2000 * (i as i64 + 1));
        }
        let before = slot.clone();
        let d = run(&mut slot, algo, params, T0);
        assert!(!d.allowed);
        assert_eq!(
            (d.remaining, d.retry_after_ms(), d.reset_after_ms()),
            (0, 2000, 10_000)
        );
        assert_eq!(slot, before, "a denial changes nothing");
        // One nanosecond early is still denied; on time is allowed.
        assert!(!run(&mut slot, algo, params, T0 + 2 * SEC - 1).allowed);
        let d = run(&mut slot, algo, params, T0 + 2 * SEC);
        assert!(d.allowed);
        assert_eq!(d.remaining, 0);
        // After a full period of quiet the key is fresh again.
        let d = check(
            &mut slot,
            algo,
            &p(5, 10 * SEC, 5, 0),
            Nanos(T0 + 12 * SEC),
            false,
        )
        .unwrap();
        assert_eq!((d.remaining, d.reset_after), (5, Nanos::ZERO));
    }
}

#[test]
fn token_cost_zero_only_reads() {
    let mut slot = None;
    let d = run(&mut slot, Algo::Token, p(10, SEC, 10, 0), T0);
    assert!(d.allowed);
    assert_eq!((d.remaining, d.reset_after), (10, Nanos::ZERO));
    assert_eq!(slot, None, "fresh stays fresh");
    run(&mut slot, Algo::Token, p(10, SEC, 10, 3), T0);
    let before = slot.clone();
    let d = run(&mut slot, Algo::Token, p(10, SEC, 10, 0), T0);
    assert_eq!((d.allowed, d.remaining), (true, 7));
    assert_eq!(d.reset_after, Nanos(300 * MS));
    assert_eq!(slot, before);
}

#[test]
fn cost_above_capacity_is_an_error_and_changes_nothing() {
    for (algo, params) in [
        (Algo::Token, p(10, SEC, 4, 5)),
        (Algo::Gcra, p(10, SEC, 4, 5)),
        (Algo::Leaky, p(10, SEC, 4, 5)),
        (Algo::Sliding, p(4, SEC, 100, 5)),
        (Algo::Fixed, p(4, SEC, 100, 5)),
        (Algo::Log, p(4, SEC, 100, 5)),
    ] {
        let mut slot = None;
        run(&mut slot, algo, Params { cost: 1, ..params }, T0);
        let before = slot.clone();
        assert_eq!(
            check(&mut slot, algo, &params, Nanos(T0), false),
            Err(CheckError::CostExceedsCapacity),
            "{algo:?}"
        );
        assert_eq!(slot, before);
        // Exactly the capacity fits on a fresh key.
        let mut fresh = None;
        assert!(
            run(
                &mut fresh,
                algo,
                Params {
                    cost: params.cost - 1,
                    ..params
                },
                T0
            )
            .allowed,
            "{algo:?}"
        );
    }
}

#[test]
fn token_limit_change_keeps_state_capped_to_new_capacity() {
    let mut slot = None;
    for _ in 0..5 {
        run(&mut slot, Algo::Token, p(5, 10 * SEC, 5, 1), T0);
    }
    // Raised capacity, same debt in time: 10 s of debt is 10 units at 1/s with burst 10.
    let d = check(
        &mut slot,
        Algo::Token,
        &p(10, 10 * SEC, 10, 1),
        Nanos(T0),
        true,
    )
    .unwrap();
    assert_eq!(
        (d.allowed, d.remaining, d.retry_after_ms()),
        (false, 0, 1000)
    );
    // Lowered to 1 per second: the 10 s debt is capped to one capacity past empty (the bound
    // RL.SETTLE's debt has), two emission intervals.
    let d = run(&mut slot, Algo::Token, p(1, SEC, 1, 1), T0);
    assert_eq!(
        (d.allowed, d.retry_after_ms(), d.reset_after_ms()),
        (false, 2000, 2000)
    );
    assert_eq!(
        slot,
        Some(State::Token {
            tat: Nanos(T0 + 2 * SEC)
        })
    );
    assert!(!run(&mut slot, Algo::Token, p(1, SEC, 1, 1), T0 + 2 * SEC - 1).allowed);
    assert!(run(&mut slot, Algo::Token, p(1, SEC, 1, 1), T0 + 2 * SEC).allowed);
}

#[test]
fn token_one_ms_period_with_thousands_is_exact_when_the_interval_is_whole() {
    for limit in [1000, 2000, 4000, 5000, 8000] {
        let mut slot = None;
        let params = p(limit, MS, limit, 1);
        let allowed = (0..limit + 5)
            .filter(|_| run(&mut slot, Algo::Token, params, T0).allowed)
            .count();
        assert_eq!(allowed as u64, limit);
        // Exactly one emission interval later, exactly one more.
        let t = MS / limit;
        assert!(!run(&mut slot, Algo::Token, params, T0 + t - 1).allowed);
        assert!(run(&mut slot, Algo::Token, params, T0 + t).allowed);
    }
}

#[test]
fn token_fractional_interval_bursts_exactly() {
    // T = 333.3 ns and 333.3 ms: a burst of exactly the capacity fits, the next does not.
    for (limit, period) in [(3000, MS), (3, SEC), (7, SEC)] {
        let mut slot = None;
        let params = p(limit, period, limit, 1);
        let allowed = (0..limit + 10)
            .filter(|_| run(&mut slot, Algo::Token, params, T0).allowed)
            .count() as u64;
        assert_eq!(allowed, limit);
    }
    let mut slot = None;
    let params = p(3, SEC, 3, 1);
    let remaining: Vec<u64> = (0..3)
        .map(|_| run(&mut slot, Algo::Token, params, T0).remaining)
        .collect();
    assert_eq!(remaining, [2, 1, 0]);
    let d = run(&mut slot, Algo::Token, params, T0);
    assert_eq!(
        (d.allowed, d.retry_after_ms(), d.reset_after_ms()),
        (false, 334, 1000)
    );
    // A cost of the whole capacity on a fresh key fits.
    assert!(run(&mut None, Algo::Token, p(3000, MS, 3000, 3000), T0).allowed);
}

#[test]
fn token_period_of_a_year() {
    let mut slot = None;
    let params = p(12, YEAR, 12, 1);
    for _ in 0..12 {
        assert!(run(&mut slot, Algo::Token, params, T0).allowed);
    }
    let d = run(&mut slot, Algo::Token, params, T0);
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Some(Nanos(YEAR / 12)));
    assert_eq!(d.reset_after, Nanos(YEAR));
}

#[test]
fn no_panic_at_u64_extremes() {
    let extremes = [
        0,
        1,
        2,
        u32::MAX as u64,
        u64::MAX / 2,
        u64::MAX - 1,
        u64::MAX,
    ];
    for algo in Algo::ALL {
        for &limit in &extremes {
            for &period in &extremes {
                for &cost in &[0, 1, u64::MAX] {
                    for &now in &[0, T0, u64::MAX] {
                        let params = p(limit, period, limit, cost.min(limit));
                        let mut slot = None;
                        for step in 0..3u64 {
                            let _ = check(
                                &mut slot,
                                algo,
                                &params,
                                Nanos(now.saturating_add(step)),
                                false,
                            );
                        }
                        let _ = check(&mut slot, algo, &params, Nanos(0), false);
                    }
                }
            }
        }
    }
}

#[test]
fn token_saturates_instead_of_overflowing() {
    let mut slot = None;
    let params = p(1, u64::MAX, u64::MAX, u64::MAX);
    let d = run(&mut slot, Algo::Token, params, u64::MAX - 5);
    assert!(d.allowed);
    assert_eq!(d.reset_after, Nanos(5));
    assert_eq!(slot, Some(State::Token { tat: Nanos::MAX }));
    // Time ends at u64::MAX: the debt saturates there, and a second full-cost request is denied.
    let d = run(&mut slot, Algo::Token, params, u64::MAX - 5);
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Some(Nanos(5)));
}

#[test]
fn dry_changes_nothing() {
    for algo in Algo::ALL {
        let params = p(3, SEC, 3, 1);
        let mut slot = None;
        run(&mut slot, algo, params, T0);
        let before = slot.clone();
        for _ in 0..5 {
            let d = check(&mut slot, algo, &params, Nanos(T0), true).unwrap();
            assert!(
                d.allowed,
                "{algo:?}: dry answers as if it were the next request"
            );
            assert_eq!(d.remaining, 1, "{algo:?}");
        }
        assert_eq!(slot, before, "{algo:?}");
        let mut fresh = None;
        check(&mut fresh, algo, &params, Nanos(T0), true).unwrap();
        assert_eq!(fresh, None, "{algo:?}");
    }
}

#[test]
fn wrong_type_between_every_pair() {
    for made in Algo::ALL {
        let mut slot = None;
        run(&mut slot, made, p(3, SEC, 3, 1), T0);
        assert_eq!(slot.as_ref().and_then(State::algo), Some(made));
        for called in Algo::ALL.into_iter().filter(|&a| a != made) {
            let before = slot.clone();
            assert_eq!(
                check(&mut slot, called, &p(3, SEC, 3, 1), Nanos(T0), false),
                Err(CheckError::WrongType)
            );
            assert_eq!(slot, before);
        }
    }
}

#[test]
fn fresh_means_slot_none_and_reset_zero() {
    for algo in Algo::ALL {
        let mut slot = None;
        let d = run(&mut slot, algo, p(3, SEC, 3, 1), T0);
        assert!(slot.is_some() && d.reset_after > Nanos::ZERO, "{algo:?}");
        // Long after, a zero-cost read says fresh; a real request leaves a live key again.
        let later = T0 + 10 * SEC;
        let d = run(&mut slot, algo, p(3, SEC, 3, 0), later);
        assert_eq!((d.remaining, d.reset_after), (3, Nanos::ZERO), "{algo:?}");
        let d = run(&mut None, algo, p(3, SEC, 3, 1), later);
        assert!(d.reset_after > Nanos::ZERO, "{algo:?}");
    }
}

#[test]
fn leaky_queues_a_simultaneous_burst() {
    let mut slot = None;
    let params = p(5, 10 * SEC, 3, 1);
    let waits: Vec<i64> = (0..3)
        .map(|_| run(&mut slot, Algo::Leaky, params, T0))
        .map(|d| {
            assert!(d.allowed);
            assert_eq!(d.limit, 3);
            d.retry_after_ms()
        })
        .collect();
    assert_eq!(waits, [0, 2000, 4000], "the k-th waits (k-1)·T");
    let d = run(&mut slot, Algo::Leaky, params, T0);
    assert_eq!(
        (d.allowed, d.retry_after_ms(), d.reset_after_ms()),
        (false, 2000, 6000)
    );
    // Once the first has drained, one more fits, and it waits behind the other two.
    let d = run(&mut slot, Algo::Leaky, params, T0 + 2 * SEC);
    assert_eq!((d.allowed, d.retry_after_ms()), (true, 4000));
}

#[test]
fn fixed_window_resets_at_its_end() {
    let start = T0 - T0 % (10 * SEC);
    let now = start + 3 * SEC;
    let mut slot = None;
    let params = p(2, 10 * SEC, 2, 1);
    assert_eq!(run(&mut slot, Algo::Fixed, params, now).remaining, 1);
    assert_eq!(run(&mut slot, Algo::Fixed, params, now).remaining, 0);
    let d = run(&mut slot, Algo::Fixed, params, now);
    assert_eq!(
        (d.allowed, d.retry_after_ms(), d.reset_after_ms()),
        (false, 7000, 7000)
    );
    let d = run(&mut slot, Algo::Fixed, params, start + 10 * SEC);
    assert_eq!((d.allowed, d.remaining), (true, 1));
    // A lowered limit caps the grandfathered count.
    let d = run(
        &mut slot,
        Algo::Fixed,
        p(1, 10 * SEC, 1, 0),
        start + 10 * SEC,
    );
    assert_eq!(d.remaining, 0);
}

#[test]
fn sliding_weights_the_previous_window() {
    let period = 10 * SEC;
    let start = T0 - T0 % period;
    let mut slot = None;
    let params = p(10, period, 10, 1);
    for _ in 0..10 {
        assert!(run(&mut slot, Algo::Sliding, params, start + 9 * SEC).allowed);
    }
    // 2.5 s into the next window the previous 10 still weigh 7.5: 2 more fit.
    let now = start + period + 2500 * MS;
    assert_eq!(run(&mut slot, Algo::Sliding, params, now).remaining, 1);
    assert_eq!(run(&mut slot, Algo::Sliding, params, now).remaining, 0);
    let d = run(&mut slot, Algo::Sliding, params, now);
    assert!(!d.allowed);
    // 2 + 10·(1 − e/10) + 1 ≤ 10 ⇔ e ≥ 3 s: half a second from now.
    assert_eq!(d.retry_after, Some(Nanos(500 * MS)));
    // Current count non-zero: fresh after the next window ends.
    assert_eq!(d.reset_after, Nanos(period + 7500 * MS));
    let d = run(&mut slot, Algo::Sliding, params, now + 500 * MS);
    assert!(d.allowed);
}

#[test]
fn sliding_cost_of_the_whole_limit_waits_for_the_window_after_next() {
    let period = SEC;
    let start = T0 - T0 % period;
    let mut slot = None;
    run(
        &mut slot,
        Algo::Sliding,
        p(4, period, 4, 1),
        start + 100 * MS,
    );
    let d = run(
        &mut slot,
        Algo::Sliding,
        p(4, period, 4, 4),
        start + 100 * MS,
    );
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Some(Nanos(2 * period - 100 * MS)));
}

#[test]
fn sliding_limit_above_its_cap_is_an_error() {
    let too_big = u32::MAX as u64 + 1;
    assert_eq!(
        check(
            &mut None,
            Algo::Sliding,
            &p(too_big, SEC, too_big, 1),
            Nanos(T0),
            false
        ),
        Err(CheckError::LimitTooLarge {
            max: u32::MAX as u64
        })
    );
}

#[test]
fn log_counts_exact_timestamps() {
    let mut slot = None;
    let params = p(3, 10 * SEC, 3, 1);
    run(&mut slot, Algo::Log, params, T0);
    run(&mut slot, Algo::Log, params, T0 + SEC);
    run(
        &mut slot,
        Algo::Log,
        Params { cost: 1, ..params },
        T0 + 2 * SEC,
    );
    let d = run(
        &mut slot,
        Algo::Log,
        Params { cost: 2, ..params },
        T0 + 3 * SEC,
    );
    assert!(!d.allowed);
    // Two of the three must expire: the second oldest goes at T0 + 11 s.
    assert_eq!(d.retry_after, Some(Nanos(8 * SEC)));
    assert_eq!(d.reset_after, Nanos(9 * SEC));
    let d = run(
        &mut slot,
        Algo::Log,
        Params { cost: 2, ..params },
        T0 + 11 * SEC,
    );
    assert_eq!(
        (d.allowed, d.remaining, d.reset_after),
        (true, 0, Nanos(10 * SEC))
    );
    assert_eq!(slot.as_ref().map(State::heap_bytes), Some(4 * 8));
}

#[test]
fn log_limit_change_rebuilds_the_ring() {
    let mut slot = None;
    for i in 0..5 {
        run(&mut slot, Algo::Log, p(5, 10 * SEC, 5, 1), T0 + i);
    }
    let d = run(&mut slot, Algo::Log, p(2, 10 * SEC, 2, 0), T0 + 5);
    assert_eq!((d.allowed, d.remaining), (true, 0));
    let d = run(&mut slot, Algo::Log, p(2, 10 * SEC, 2, 1), T0 + 5);
    assert!(!d.allowed);
    // Only the newest four (two limits: one of debt) were kept, T0 + 1 to T0 + 4: three must go
    // before one more fits, the third of them (T0 + 3) last.
    assert_eq!(d.retry_after, Some(Nanos(10 * SEC - 2)));
    assert_eq!(slot.as_ref().map(State::heap_bytes), Some(5 * 8));
    let d = run(&mut slot, Algo::Log, p(8, 10 * SEC, 8, 1), T0 + 5);
    assert_eq!((d.allowed, d.remaining), (true, 3));
}

#[test]
fn log_limit_cap() {
    assert!(run(&mut None, Algo::Log, p(LOG_LIMIT_MAX, SEC, 1, 1), T0).allowed);
    assert_eq!(
        check(
            &mut None,
            Algo::Log,
            &p(LOG_LIMIT_MAX + 1, SEC, 1, 1),
            Nanos(T0),
            false
        ),
        Err(CheckError::LimitTooLarge { max: LOG_LIMIT_MAX })
    );
}
