//! RL.CHECK end to end over real sockets with the `redis` crate, RESP2 and RESP3.

use sluice_tests::{Sluice, rl_check};

fn err_text(e: redis::RedisError) -> String {
    format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or(""))
}

#[test]
fn five_per_ten_seconds_allows_five_then_denies_with_retry_near_two_seconds() {
    let server = Sluice::start();
    for mut conn in [server.client(), server.resp3()] {
        let key = format!("user:{}", rand_suffix());
        let started = std::time::Instant::now();
        for expected_remaining in (0..5).rev() {
            let r = rl_check(&mut conn, &[&key, "5", "10"]).unwrap();
            assert_eq!(r[0], 1, "allowed: {r:?}");
            assert_eq!(r[1], 5);
            assert_eq!(r[2], expected_remaining);
            assert_eq!(r[3], -1);
            assert!(r[4] > 0 && r[4] <= 10_000, "{r:?}");
        }
        let denied = rl_check(&mut conn, &[&key, "5", "10"]).unwrap();
        assert_eq!(denied[0], 0, "{denied:?}");
        assert_eq!(denied[2], 0);
        // A unit refills every 2 s, counted from the first call.
        let elapsed = started.elapsed().as_millis() as i64;
        assert!(
            denied[3] <= 2_000 && denied[3] >= 2_000 - elapsed - 1,
            "retry_after_ms should be about 2000 (calls took {elapsed} ms): {denied:?}"
        );
        assert!(
            denied[4] >= 10_000 - elapsed - 1 && denied[4] <= 10_000,
            "{denied:?}"
        );
    }
}

fn rand_suffix() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

#[test]
fn every_algorithm_answers_five_integers_and_denies_past_the_limit() {
    let server = Sluice::start();
    let mut conn = server.client();
    for algo in [
        "TOKEN", "GCRA", "SLIDING", "FIXED", "LOG", "LEAKY", "token", "Sliding",
    ] {
        let key = format!("k:{algo}");
        let mut allowed = 0;
        for _ in 0..5 {
            let r = rl_check(&mut conn, &[&key, "3", "1h", "ALGO", algo]).unwrap();
            assert_eq!(r.len(), 5);
            assert_eq!(r[1], 3, "{algo}: limit field {r:?}");
            allowed += r[0];
            if r[0] == 0 {
                assert!(r[3] > 0, "{algo}: denial carries a retry: {r:?}");
            } else if algo.eq_ignore_ascii_case("LEAKY") {
                assert!(
                    r[3] >= 0,
                    "{algo}: an allowed LEAKY reply carries its wait: {r:?}"
                );
            } else {
                assert_eq!(r[3], -1, "{algo}: {r:?}");
            }
        }
        assert_eq!(allowed, 3, "{algo}");
    }
}

#[test]
fn burst_cost_dry_and_cost_zero() {
    let server = Sluice::start();
    let mut conn = server.client();
    // BURST sets the capacity reported and consumed.
    let r = rl_check(&mut conn, &["b", "1", "1m", "BURST", "10", "COST", "4"]).unwrap();
    assert_eq!(&r[..3], &[1, 10, 6]);
    // DRY answers as if made and changes nothing.
    let dry = rl_check(
        &mut conn,
        &["b", "1", "1m", "BURST", "10", "COST", "6", "DRY"],
    )
    .unwrap();
    assert_eq!(&dry[..3], &[1, 10, 0]);
    let again = rl_check(&mut conn, &["b", "1", "1m", "BURST", "10", "COST", "0"]).unwrap();
    assert_eq!(&again[..3], &[1, 10, 6], "COST 0 reads without taking");
    // DRY on a missing key creates nothing.
    rl_check(&mut conn, &["ghost", "5", "10", "DRY"]).unwrap();
    let exists: i64 = redis::cmd("EXISTS").arg("ghost").query(&mut conn).unwrap();
    assert_eq!(exists, 0);
    // COST 0 on a missing key stores nothing either.
    rl_check(&mut conn, &["ghost", "5", "10", "COST", "0"]).unwrap();
    let exists: i64 = redis::cmd("EXISTS").arg("ghost").query(&mut conn).unwrap();
    assert_eq!(exists, 0);
}

#[test]
fn bad_arguments_are_named_errors_that_change_nothing() {
    let server = Sluice::start();
    let mut conn = server.client();
    rl_check(&mut conn, &["k", "5", "10"]).unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["k", "0", "10"], "limit"),
        (&["k", "-1", "10"], "limit"),
        (&["k", "abc", "10"], "limit"),
        (&["k", "5", "0"], "period"),
        (&["k", "5", "10y"], "period"),
        (&["k", "5", "10", "BURST", "0"], "BURST"),
        (&["k", "5", "10", "BURST"], "BURST"),
        (&["k", "5", "10", "COST", "-1"], "COST"),
        (&["k", "5", "10", "COST", "6"], "COST"),
        (&["k", "5", "10", "ALGO", "NOPE"], "ALGO"),
        (&["k", "5", "10", "FROB"], "FROB"),
        (&["k", "5", "10", "ALGO", "SLIDING", "BURST", "3"], "BURST"),
        (&["k", "20000", "10", "ALGO", "LOG"], "LOG"),
    ];
    for (args, named) in cases {
        let e = rl_check(&mut conn, args).unwrap_err();
        let text = err_text(e);
        assert!(text.starts_with("ERR"), "{args:?}: {text}");
        assert!(text.contains(named), "{args:?} should name {named}: {text}");
    }
    let arity = rl_check(&mut conn, &["k", "5"]).unwrap_err();
    assert!(err_text(arity).contains("wrong number of arguments for 'rl.check' command"));
    // Nothing above consumed a unit.
    let r = rl_check(&mut conn, &["k", "5", "10", "DRY"]).unwrap();
    assert_eq!(r[2], 3, "one real check so far, DRY shows the next: {r:?}");
}

#[test]
fn another_algorithm_or_a_counter_on_the_same_key_is_wrongtype() {
    let server = Sluice::start();
    let mut conn = server.client();
    rl_check(&mut conn, &["k", "5", "10"]).unwrap();
    let e = rl_check(&mut conn, &["k", "5", "10", "ALGO", "SLIDING"]).unwrap_err();
    assert_eq!(e.code(), Some("WRONGTYPE"));
    let e = rl_check(&mut conn, &["k", "5", "10", "ALGO", "GCRA"]).unwrap_err();
    assert_eq!(e.code(), Some("WRONGTYPE"));
    let e = redis::cmd("GET")
        .arg("k")
        .query::<Option<String>>(&mut conn)
        .unwrap_err();
    assert_eq!(e.code(), Some("WRONGTYPE"));
    let _: () = redis::cmd("SET")
        .arg("c")
        .arg("1")
        .query(&mut conn)
        .unwrap();
    let e = rl_check(&mut conn, &["c", "5", "10"]).unwrap_err();
    assert_eq!(e.code(), Some("WRONGTYPE"));
}

#[test]
fn new_limit_on_a_live_key_keeps_its_state() {
    let server = Sluice::start();
    let mut conn = server.client();
    for _ in 0..4 {
        rl_check(&mut conn, &["g", "10", "1h"]).unwrap();
    }
    // Raising the limit keeps the 4 already taken (grandfathered).
    let r = rl_check(&mut conn, &["g", "20", "1h"]).unwrap();
    assert_eq!(r[0], 1);
    assert!(r[2] < 19, "state kept, not reset: {r:?}");
    // Lowering it caps the bucket at the new capacity: denied, with a finite retry.
    let r = rl_check(&mut conn, &["g", "1", "1h"]).unwrap();
    assert_eq!(r[0], 0, "{r:?}");
    assert!(r[3] > 0 && r[3] <= 3_600_000, "{r:?}");
}

#[test]
fn a_bucket_is_removed_once_it_is_full_again() {
    // About real time: the bucket refills in 200 ms and must then be gone.
    let server = Sluice::start();
    let mut conn = server.client();
    let r = rl_check(&mut conn, &["short", "2", "200ms"]).unwrap();
    assert_eq!(r[0], 1);
    assert!(r[4] > 0 && r[4] <= 100, "{r:?}");
    let pttl: i64 = redis::cmd("PTTL").arg("short").query(&mut conn).unwrap();
    assert!(
        pttl > 0 && pttl <= 100,
        "a bucket's TTL is the time until it is fresh: {pttl}"
    );
    let size: i64 = redis::cmd("DBSIZE").query(&mut conn).unwrap();
    assert_eq!(size, 1);
    std::thread::sleep(std::time::Duration::from_millis(250));
    let size: i64 = redis::cmd("DBSIZE").query(&mut conn).unwrap();
    assert_eq!(size, 0, "the full bucket is dropped");
    let pttl: i64 = redis::cmd("PTTL").arg("short").query(&mut conn).unwrap();
    assert_eq!(pttl, -2);
    // And a fresh call answers exactly like a fresh key.
    let r = rl_check(&mut conn, &["short", "2", "200ms"]).unwrap();
    assert_eq!(&r[..4], &[1, 2, 1, -1]);
}

/// The arguments after the key are parsed once per worker and remembered by their wire bytes
/// (issue 23): a check that repeats them, one that differs by a byte, a bad one between them,
/// and the same options on another connection must each answer as if parsed afresh.
#[test]
fn repeated_arguments_answer_as_if_parsed_afresh() {
    let server = Sluice::start();
    let mut a = server.client();
    let mut b = server.client();
    let limit = |r: Vec<i64>| r[1];
    assert_eq!(limit(rl_check(&mut a, &["m:1", "10", "60"]).unwrap()), 10);
    assert_eq!(limit(rl_check(&mut a, &["m:2", "10", "60"]).unwrap()), 10);
    assert_eq!(limit(rl_check(&mut a, &["m:3", "11", "60"]).unwrap()), 11);
    assert_eq!(limit(rl_check(&mut b, &["m:4", "11", "60"]).unwrap()), 11);
    let bad = rl_check(&mut a, &["m:5", "11", "60", "ALGO", "NOPE"]).unwrap_err();
    assert!(err_text(bad).contains("unknown ALGO 'NOPE'"));
    let bad = rl_check(&mut a, &["m:5", "11", "60", "ALGO", "NOPE"]).unwrap_err();
    assert!(err_text(bad).contains("unknown ALGO 'NOPE'"));
    // The same bytes split differently between key and arguments.
    assert_eq!(limit(rl_check(&mut a, &["11", "60", "1"]).unwrap()), 60);
    // DRY remembered is DRY answered: what a check would leave, and nothing consumed.
    let dry = ["m:6", "3", "1h", "DRY"];
    let first = rl_check(&mut a, &dry).unwrap();
    let again = rl_check(&mut b, &dry).unwrap();
    assert_eq!((first[2], again[2]), (2, 2));
    // A SLIDING tail after a TOKEN one on the same key is WRONGTYPE, not the remembered TOKEN.
    rl_check(&mut a, &["m:7", "5", "60"]).unwrap();
    let wrong = err_text(rl_check(&mut a, &["m:7", "5", "60", "ALGO", "SLIDING"]).unwrap_err());
    assert!(wrong.contains("WRONGTYPE"), "{wrong}");
}
