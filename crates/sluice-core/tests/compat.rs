//! `CL.THROTTLE` and Redis `GCRA` against the answers of the implementations they copy:
//! redis-cell's own case table (`redis-cell-impl/src/lib.rs`, `it_rate_limits`) and Redis's
//! `tests/unit/type/gcra.tcl`, plus the argument errors of both.

use sluice_core::compat::{
    ClThrottle, ClThrottleReply, GcraCmd, GcraReply, cl_throttle, gcra, keep_held,
};
use sluice_core::{Algo, CheckError, Nanos, Params, State, check};

const MS: u64 = 1_000_000;
const T0: u64 = 1_780_000_000_123_456_789;

fn args(s: &str) -> Vec<&[u8]> {
    s.split_whitespace().map(str::as_bytes).collect()
}

fn throttle(slot: &mut Option<State>, a: &str, now: u64) -> (i64, i64, i64, i64, i64) {
    let req = ClThrottle::parse(&args(a)).unwrap();
    let (r, _) = cl_throttle(slot, &req, Nanos(now)).unwrap();
    let ClThrottleReply {
        limited,
        max_tokens: limit,
        remaining,
        retry_after,
        reset_after,
    } = r;
    (limited, limit, remaining, retry_after, reset_after)
}

#[test]
fn redis_cell_case_table() {
    // max_burst 4 (limit 5), 1 per second; (offset ms, quantity) → reply.
    type Reply = (i64, i64, i64, i64, i64);
    let cases: [(u64, u64, Reply); 15] = [
        (0, 6, (1, 5, 5, -1, 0)),
        (0, 1, (0, 5, 4, -1, 1)),
        (0, 1, (0, 5, 3, -1, 2)),
        (0, 1, (0, 5, 2, -1, 3)),
        (0, 1, (0, 5, 1, -1, 4)),
        (0, 1, (0, 5, 0, -1, 5)),
        (0, 1, (1, 5, 0, 1, 5)),
        (3000, 1, (0, 5, 2, -1, 3)),
        (3100, 1, (0, 5, 1, -1, 4)), // reset 3.9 s rounds up
        (4000, 1, (0, 5, 1, -1, 4)),
        (8000, 1, (0, 5, 4, -1, 1)),
        (9500, 1, (0, 5, 4, -1, 1)),
        (9500, 0, (0, 5, 4, -1, 1)),
        (9500, 2, (0, 5, 2, -1, 3)),
        (9500, 5, (1, 5, 2, 3, 3)),
    ];
    let mut slot = None;
    for (i, (offset, quantity, want)) in cases.into_iter().enumerate() {
        let got = throttle(&mut slot, &format!("4 1 1 {quantity}"), T0 + offset * MS);
        assert_eq!(got, want, "case {i}");
    }
}

#[test]
fn redis_cell_rounds_seconds_at_millisecond_granularity() {
    // 3 per 10 s, burst 0: T = 3.333… s, so one request resets after 3.333 s → 4.
    let mut slot = None;
    assert_eq!(throttle(&mut slot, "0 3 10", T0), (0, 1, 0, -1, 4));
    // 1.000333 s left: the sub-second part has no whole millisecond, so it is not rounded up.
    assert_eq!(
        throttle(&mut slot, "0 3 10", T0 + 2333 * MS),
        (1, 1, 0, 1, 1)
    );
    // 1.001333 s left: it has one, so 2.
    assert_eq!(
        throttle(&mut slot, "0 3 10", T0 + 2332 * MS),
        (1, 1, 0, 2, 2)
    );
    // 0.333 ms left: no whole second and no whole millisecond, so redis-cell says 0.
    let (limited, _, _, retry, reset) = throttle(&mut slot, "0 3 10", T0 + 3333 * MS);
    assert_eq!((limited, retry, reset), (1, 0, 0));
}

#[test]
fn redis_cell_argument_errors() {
    let err = |a: &str| ClThrottle::parse(&args(a)).unwrap_err();
    assert_eq!(
        err("1 2"),
        "Cell error: Store error: Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]"
    );
    assert_eq!(err("1 2 3 4 5"), err("1 2"));
    assert_eq!(
        err("x 2 3"),
        "Cell error: Store error: Couldn't parse as integer: x"
    );
    assert_eq!(
        err("1 2 3 1.5"),
        "Cell error: Store error: Couldn't parse as integer: 1.5"
    );
    assert_eq!(
        err("1 0 3"),
        "Cell error: Store error: Zero rates are not supported"
    );
    assert_eq!(
        err("1 2 0"),
        "Cell error: Store error: Zero rates are not supported"
    );
    assert_eq!(ClThrottle::parse(&args("1 2 3")).unwrap().quantity, 1);
}

/// RL.CHECK's parameters for 1 a second with a burst of 2, cost 1.
fn one_a_second_burst_2() -> Params {
    Params {
        limit: 1,
        period: Nanos(1000 * MS),
        burst: 2,
        cost: 1,
    }
}

#[test]
fn cl_throttle_shares_the_gcra_key_and_refuses_other_types() {
    let mut slot = None;
    let params = one_a_second_burst_2();
    check(&mut slot, Algo::Gcra, &params, Nanos(T0), false).unwrap();
    // RL.CHECK left 1 s of debt: CL.THROTTLE with capacity 2 at 1/s sees 1 remaining.
    assert_eq!(throttle(&mut slot, "1 1 1", T0).2, 0);
    let mut token = None;
    check(&mut token, Algo::Token, &params, Nanos(T0), false).unwrap();
    let req = ClThrottle::parse(&args("1 1 1")).unwrap();
    assert_eq!(
        cl_throttle(&mut token, &req, Nanos(T0)),
        Err(CheckError::WrongType)
    );
    let cmd = GcraCmd::parse(&args("1 1 1")).unwrap();
    assert_eq!(
        gcra(&mut token, &cmd, Nanos(T0)),
        Err(CheckError::WrongType)
    );
}

fn redis_gcra(slot: &mut Option<State>, a: &str, now: u64) -> GcraReply {
    let cmd = GcraCmd::parse(&args(a)).unwrap();
    gcra(slot, &cmd, Nanos(now)).unwrap().0
}

#[test]
fn redis_gcra_burst_and_recovery() {
    let mut slot = None;
    for i in 0..6 {
        let r = redis_gcra(&mut slot, "5 1 60", T0);
        assert_eq!(
            (r.limited, r.max_tokens, r.remaining, r.retry_after),
            (0, 6, 5 - i, -1),
            "request {i}"
        );
        assert_eq!(r.reset_after, 60 * (i + 1));
    }
    let before = slot.clone();
    let r = redis_gcra(&mut slot, "5 1 60", T0);
    assert_eq!(
        r,
        GcraReply {
            limited: 1,
            max_tokens: 6,
            remaining: 0,
            retry_after: 60,
            reset_after: 360
        }
    );
    assert_eq!(slot, before);
    let r = redis_gcra(&mut slot, "5 1 60", T0 + 60_000 * MS);
    assert_eq!((r.limited, r.remaining), (0, 0));
}

#[test]
fn redis_gcra_tcl_expectations() {
    let mut slot = None;
    assert_eq!(redis_gcra(&mut slot, "5 1 60 TOKENS 3", T0).remaining, 3);
    let mut slot = None;
    redis_gcra(&mut slot, "5 1 60", T0);
    redis_gcra(&mut slot, "5 1 60", T0);
    assert_eq!(redis_gcra(&mut slot, "5 1 60", T0).reset_after, 180);
    let mut slot = None;
    redis_gcra(&mut slot, "5 1 60", T0);
    assert_eq!(
        redis_gcra(&mut slot, "5 1 60 tokens 4", T0).reset_after,
        300
    );
    // max_burst 0: one at a time.
    let mut slot = None;
    assert_eq!(redis_gcra(&mut slot, "0 1 1", T0).limited, 0);
    let r = redis_gcra(&mut slot, "0 1 1", T0);
    assert_eq!((r.limited, r.max_tokens, r.retry_after), (1, 1, 1));
    assert_eq!(redis_gcra(&mut slot, "0 1 1", T0 + 1000 * MS).limited, 0);
    // Fractional periods: 2 per 0.5 s, T = 250 ms.
    let mut slot = None;
    redis_gcra(&mut slot, "0 2 0.5", T0);
    let r = redis_gcra(&mut slot, "0 2 0.5", T0 + 100 * MS);
    assert_eq!((r.limited, r.retry_after, r.reset_after), (1, 1, 1));
    assert_eq!(redis_gcra(&mut slot, "0 2 0.5", T0 + 250 * MS).limited, 0);
}

#[test]
fn redis_gcra_cost_that_never_fits() {
    let mut slot = None;
    let r = redis_gcra(&mut slot, "5 1 60 TOKENS 10", T0);
    assert_eq!(
        r,
        GcraReply {
            limited: 1,
            max_tokens: 6,
            remaining: 0,
            retry_after: -1,
            reset_after: -1
        }
    );
    assert_eq!(slot, None);
    // Exactly the capacity is retryable.
    redis_gcra(&mut slot, "5 1 60", T0);
    let r = redis_gcra(&mut slot, "5 1 60 TOKENS 6", T0);
    assert_eq!((r.limited, r.retry_after), (1, 60));
}

#[test]
fn redis_gcra_argument_errors_in_order() {
    let err = |a: &str| GcraCmd::parse(&args(a)).unwrap_err();
    assert_eq!(
        err("1 1"),
        "ERR wrong number of arguments for 'gcra' command"
    );
    assert_eq!(
        err("1 1 1 TOKENS 1 x"),
        "ERR wrong number of arguments for 'gcra' command"
    );
    assert_eq!(
        err("-1 5 10"),
        "ERR value is out of range, must be positive"
    );
    assert_eq!(
        err("notanumber 5 10"),
        "ERR value is out of range, must be positive"
    );
    assert_eq!(err("x 0 x"), "ERR value is out of range, must be positive");
    assert_eq!(
        err("10 0 10"),
        "ERR value is out of range, value must between 1 and 9223372036854775807"
    );
    assert_eq!(
        err("10 notanumber 10"),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        err("10 05 10"),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(err("10 5 0"), "ERR period must be > 0 and < 1e12");
    assert_eq!(err("10 5 -1"), "ERR period must be > 0 and < 1e12");
    assert_eq!(err("10 5 1e12"), "ERR period must be > 0 and < 1e12");
    assert_eq!(err("10 5 notanumber"), "ERR value is not a valid float");
    assert_eq!(err("10 5 10 COUNT 1"), "ERR syntax error");
    assert_eq!(err("10 5 10 TOKENS"), "ERR Missing TOKENS value");
    assert_eq!(
        err("10 5 10 TOKENS 0"),
        "ERR value is out of range, value must between 1 and 9223372036854775807"
    );
    assert_eq!(
        err("10 5 10 TOKENS notanumber"),
        "ERR value is not an integer or out of range"
    );
    assert!(
        err("1 1 86400 TOKENS 200000000")
            .ends_with("tokens_per_period and TOKENS would cause an overflow")
    );
    assert!(
        err("200000000 1 86400")
            .ends_with("tokens_per_period and max_burst would cause an overflow")
    );
    assert!(err("1 1 2147483647 TOKENS 2147483647").contains("would cause an overflow"));
    assert_eq!(GcraCmd::parse(&args("10 5 0.5")).unwrap().period, 0.5);
}

/// `keep_held` leaves a check exactly `capacity − held` (none once `held` reaches the
/// capacity), from `now` as each command reads it (GCRA in whole µs, at an instant that is not
/// one); a bucket already that low, a zero hold and a bucket with no rate are left as they are.
#[test]
fn keep_held_leaves_the_capacity_less_the_tokens_held() {
    // max_burst 99 (capacity 100), 100 a second: 10 ms a token.
    let cell = ClThrottle::parse(&args("99 100 1 0")).unwrap();
    let redis = GcraCmd::parse(&args("99 100 1")).unwrap();
    for held in [1u64, 25, 99, 100, 250] {
        let left = 100i64.saturating_sub(held as i64).max(0);
        let mut slot = None;
        assert!(keep_held(&mut slot, &cell.bucket(), held, Nanos(T0)).unwrap());
        let (_, _, remaining, _, _) = throttle(&mut slot, "99 100 1 0", T0);
        assert_eq!(remaining, left, "CL.THROTTLE, {held} held");
        let mut slot = None;
        assert!(keep_held(&mut slot, &redis.bucket(), held, Nanos(T0)).unwrap());
        let GcraReply { remaining, .. } = redis_gcra(&mut slot, "99 100 1 TOKENS 1", T0);
        // The GCRA request takes one of what is left, when something is.
        assert_eq!(remaining, (left - 1).max(0), "GCRA, {held} held");
    }
    // Lower already: a bucket with 30 of its tokens taken, 25 held.
    let mut slot = None;
    throttle(&mut slot, "99 100 1 30", T0);
    let before = slot.clone();
    assert!(!keep_held(&mut slot, &cell.bucket(), 25, Nanos(T0)).unwrap());
    assert_eq!(slot, before);
    // Nothing held, or no rate to hold back by: nothing changes.
    let mut slot = None;
    assert!(!keep_held(&mut slot, &cell.bucket(), 0, Nanos(T0)).unwrap());
    let no_rate = sluice_core::compat::Bucket {
        emission_interval_ns: 0,
        ..cell.bucket()
    };
    assert!(!keep_held(&mut slot, &no_rate, 25, Nanos(T0)).unwrap());
    assert_eq!(slot, None);
    // A TOKEN bucket's state is not a GCRA bucket.
    let mut token = None;
    let params = one_a_second_burst_2();
    check(&mut token, Algo::Token, &params, Nanos(T0), false).unwrap();
    assert_eq!(
        keep_held(&mut token, &cell.bucket(), 25, Nanos(T0)),
        Err(CheckError::WrongType)
    );
}
