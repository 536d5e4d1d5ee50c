//! `RL.SETTLE` end to end: reserve with `RL.CHECK ... COST`, settle with the actual cost, for
//! every algorithm it applies to: a refund, a charge into debt, the cap on the debt. Real
//! servers on loopback, the `redis` crate as the client; every process stopped by its PID.

use std::time::Duration;

use redis::Connection;
use sluice_tests::{Sluice, rl_check, wait_until};

fn settle(c: &mut Connection, args: &[&str]) -> redis::RedisResult<Vec<i64>> {
    let mut cmd = redis::cmd("RL.SETTLE");
    for a in args {
        cmd.arg(*a);
    }
    cmd.query(c)
}

fn err_text(e: redis::RedisError) -> String {
    format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or(""))
}

/// 10 per day: no unit refills while a test runs, and a window boundary is a day apart.
const LIMIT: &str = "10";
const PERIOD: &str = "1d";

fn with_algo<'a>(args: &[&'a str], algo: &'a str) -> Vec<&'a str> {
    let mut v = args.to_vec();
    v.extend(["ALGO", algo]);
    v
}

#[test]
fn every_algorithm_refunds_charges_into_debt_and_caps_the_debt() {
    let server = Sluice::start();
    for (i, mut c) in [server.client(), server.resp3()].into_iter().enumerate() {
        for algo in ["TOKEN", "GCRA", "SLIDING", "FIXED", "LOG"] {
            let key = format!("llm:{algo}:{i}");
            let k = key.as_str();
            let check = |c: &mut Connection, cost: &str| {
                rl_check(c, &with_algo(&[k, LIMIT, PERIOD, "COST", cost], algo)).unwrap()
            };
            let settle = |c: &mut Connection, reserved: &str, actual: &str| {
                settle(c, &with_algo(&[k, LIMIT, PERIOD, reserved, actual], algo)).unwrap()
            };
            assert_eq!(check(&mut c, "6")[..3], [1, 10, 4], "{algo}");
            // Refund: 6 reserved, 2 used. The reply is what a check of 2 would have said.
            let r = settle(&mut c, "6", "2");
            assert_eq!(r[..4], [1, 10, 8, -1], "{algo}: {r:?}");
            assert!(r[4] > 0, "{algo}: {r:?}");
            // Charge into debt: 2 reserved, 14 used, 4 past empty.
            let r = settle(&mut c, "2", "14");
            assert_eq!(r[..3], [0, 10, 0], "{algo}: {r:?}");
            assert!(r[3] > 0, "{algo}: retry_after in debt {r:?}");
            assert_eq!(check(&mut c, "1")[0], 0, "{algo}: the debt denies");
            assert_eq!(settle(&mut c, "4", "0")[..3], [1, 10, 0], "{algo}");
            // The cap: 1000 more is one capacity of debt, so 10 back is empty, not in debt.
            assert_eq!(settle(&mut c, "0", "1000")[0], 0, "{algo}");
            assert_eq!(settle(&mut c, "10", "0")[..3], [1, 10, 0], "{algo}");
            // Refunds stop at a fresh key, which is not stored.
            assert_eq!(settle(&mut c, "10", "0")[..3], [1, 10, 10], "{algo}");
            assert_eq!(settle(&mut c, "10", "0")[..3], [1, 10, 10], "{algo}");
            let exists: i64 = redis::cmd("EXISTS").arg(k).query(&mut c).unwrap();
            assert_eq!(exists, 0, "{algo}");
        }
    }
}

#[test]
fn token_debt_makes_the_next_request_wait_longer() {
    let server = Sluice::start();
    let mut c = server.client();
    // 10 per 10 s: a unit a second. 5 past empty: a request of 1 fits in 6 s.
    rl_check(&mut c, &["t", "10", "10", "COST", "10"]).unwrap();
    let r = settle(&mut c, &["t", "10", "10", "10", "15"]).unwrap();
    assert_eq!(r[..3], [0, 10, 0]);
    assert!((5_900..=6_000).contains(&r[3]), "{r:?}");
    assert!((14_900..=15_000).contains(&r[4]), "{r:?}");
    let denied = rl_check(&mut c, &["t", "10", "10"]).unwrap();
    assert!(denied[0] == 0 && denied[3] > 5_000, "{denied:?}");
}

#[test]
fn bad_arguments_are_refused_and_change_nothing() {
    let server = Sluice::start();
    let mut c = server.client();
    rl_check(&mut c, &["k", "10", "1h", "COST", "3"]).unwrap();
    for (args, want) in [
        (
            &["k", "10", "1h", "1", "0", "ALGO", "LEAKY"][..],
            "ERR RL.SETTLE does not apply to ALGO LEAKY",
        ),
        (
            &["k", "10", "1h", "11", "0"],
            "ERR reserved 11 exceeds the capacity 10",
        ),
        (
            &["k", "10", "1h", "-1", "0"],
            "ERR reserved must be a non-negative integer",
        ),
        (
            &["k", "10", "1h", "1", "x"],
            "ERR actual must be a non-negative integer",
        ),
        (
            &["k", "0", "1h", "1", "1"],
            "ERR limit must be a positive integer",
        ),
        (&["k", "10", "1q", "1", "1"], "ERR period must be"),
        (
            &["k", "10", "1h", "1", "1", "COST", "2"],
            "ERR unknown option 'COST'",
        ),
        (
            &["k", "10", "1h", "1", "1", "BURST"],
            "ERR BURST needs a value",
        ),
        (&["k", "10", "1h", "1", "1", "ALGO", "FIXED"], "WRONGTYPE"),
        (&["k", "10", "1h", "1"], "ERR wrong number of arguments"),
    ] {
        let got = err_text(settle(&mut c, args).unwrap_err());
        assert!(got.starts_with(want), "{args:?}: {got}");
    }
    assert_eq!(
        rl_check(&mut c, &["k", "10", "1h", "COST", "0"]).unwrap()[2],
        7
    );
    // BURST is the capacity, as for the check.
    rl_check(&mut c, &["b", "10", "1h", "BURST", "20", "COST", "15"]).unwrap();
    let r = settle(&mut c, &["b", "10", "1h", "15", "5", "BURST", "20"]).unwrap();
    assert_eq!(r[..3], [1, 20, 15]);
}

#[test]
fn a_settle_replicates_like_a_check() {
    let primary = Sluice::start();
    let to = format!("127.0.0.1:{}", primary.port);
    let replica = Sluice::start_with(&["--replicaof", to.as_str()]);
    let mut p = primary.client();
    let mut r = replica.client();
    for algo in ["TOKEN", "SLIDING", "FIXED", "LOG"] {
        let key = format!("rep:{algo}");
        let k = key.as_str();
        rl_check(&mut p, &with_algo(&[k, "10", "1d", "COST", "8"], algo)).unwrap();
        settle(&mut p, &with_algo(&[k, "10", "1d", "8", "3"], algo)).unwrap();
    }
    let dry = |c: &mut Connection, algo: &str| {
        let key = format!("rep:{algo}");
        rl_check(c, &with_algo(&[&key, "10", "1d", "COST", "0"], algo)).map(|v| v[2])
    };
    let synced = wait_until(Duration::from_secs(20), || {
        ["TOKEN", "SLIDING", "FIXED", "LOG"]
            .iter()
            .all(|a| dry(&mut r, a).ok() == Some(7))
            .then_some(())
    });
    assert!(synced.is_some(), "{}", replica.log());
    let e = settle(&mut r, &["rep:TOKEN", "10", "1d", "1", "0"]).unwrap_err();
    assert!(err_text(e).starts_with("READONLY"));
}
