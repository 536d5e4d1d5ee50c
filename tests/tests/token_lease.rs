//! `RL.LEASE` end to end: leases of tokens taken, returned, retried, lost and expired, against
//! real servers on loopback (a replica for the expiry's return), the `redis` crate as the
//! client; every process stopped by its PID.

use std::time::{Duration, Instant};

use redis::Connection;
use sluice_tests::{Sluice, rl_check, wait_until};

fn lease(c: &mut Connection, args: &[&str]) -> redis::RedisResult<Vec<i64>> {
    let mut cmd = redis::cmd("RL.LEASE");
    for a in args {
        cmd.arg(*a);
    }
    cmd.query(c)
}

fn err_text(e: redis::RedisError) -> String {
    format!("{} {}", e.code().unwrap_or(""), e.detail().unwrap_or(""))
}

/// The key's remaining tokens as a check of cost 0 reads them.
fn remaining(c: &mut Connection, key: &str, extra: &[&str]) -> i64 {
    let mut args = vec![key, "10", "1d", "COST", "0"];
    args.extend_from_slice(extra);
    rl_check(c, &args).unwrap()[2]
}

/// 10 per day: nothing refills while a test runs; the lease lives an hour.
fn take(
    c: &mut Connection,
    key: &str,
    holder: &str,
    want: u64,
    used: Option<(i64, u64)>,
) -> Vec<i64> {
    let want = want.to_string();
    let used = used.map(|(id, n)| (id.to_string(), n.to_string()));
    let mut args = vec![
        key,
        "10",
        "1d",
        "HOLDER",
        holder,
        "WANT",
        want.as_str(),
        "TTL",
        "1h",
    ];
    if let Some((id, n)) = &used {
        args.extend(["USED", id.as_str(), n.as_str()]);
    }
    lease(c, &args).unwrap()
}

#[test]
fn grants_up_to_want_partially_returns_and_ends() {
    let server = Sluice::start();
    for (i, mut c) in [server.client(), server.resp3()].into_iter().enumerate() {
        let key = format!("api:{i}");
        let k = key.as_str();
        let a = take(&mut c, k, "gw-a", 6, None);
        let id = a[0];
        assert!(id > 0, "{a:?}");
        assert_eq!(a[1..5], [6, 10, 4, -1], "{a:?}");
        assert!(a[5] > 0, "{a:?}");
        // valid_ms: a bucket's tokens are valid for the lease's TTL (an hour).
        assert_eq!(a.len(), 7, "{a:?}");
        assert_eq!(a[6], 3_600_000, "{a:?}");
        // Another holder wants 6: the 4 left.
        let b = take(&mut c, k, "gw-b", 6, None);
        assert_ne!(b[0], id);
        assert_eq!(b[1..4], [4, 10, 0], "{b:?}");
        assert!(b[4] > 0, "retry_after when nothing remains: {b:?}");
        // A admitted 2 and wants 3: of the 4 it holds, 1 goes back.
        let a = take(&mut c, k, "gw-a", 3, Some((id, 2)));
        assert_eq!(a[..4], [id, 3, 10, 1], "{a:?}");
        assert_eq!(remaining(&mut c, k, &[]), 1);
        // A admitted 1 more and ends its lease: 2 go back.
        let a = take(&mut c, k, "gw-a", 0, Some((id, 3)));
        assert_eq!(a[..4], [id, 0, 10, 3], "{a:?}");
        // The record is gone: the next call makes a new one, whatever it names.
        let a = take(&mut c, k, "gw-a", 1, Some((id, 3)));
        assert_ne!(a[0], id);
        assert_eq!(a[1..4], [1, 10, 2], "{a:?}");
    }
}

#[test]
fn a_retry_is_harmless_and_a_lost_reply_is_returned() {
    let server = Sluice::start();
    let mut c = server.client();
    let first = take(&mut c, "r", "gw", 5, None);
    let id = first[0];
    // The same call twice (a retry): the second finds 5 held already.
    let once = take(&mut c, "r", "gw", 5, Some((id, 2)));
    let twice = take(&mut c, "r", "gw", 5, Some((id, 2)));
    assert_eq!(once[..4], [id, 5, 10, 3], "{once:?}");
    assert_eq!(twice[..4], once[..4], "{twice:?}");
    assert_eq!(remaining(&mut c, "r", &[]), 3);
    // A call naming no lease while one exists: the holder never got its reply. Its 5 unused
    // go back before the new lease takes 5.
    let lost = take(&mut c, "l", "gw", 5, None);
    let again = take(&mut c, "l", "gw", 5, None);
    assert_ne!(again[0], lost[0]);
    assert_eq!(again[1..4], [5, 10, 5], "{again:?}");
    // A count above what the lease was given is refused, and changes nothing.
    let e = lease(
        &mut c,
        &[
            "l",
            "10",
            "1d",
            "HOLDER",
            "gw",
            "WANT",
            "5",
            "USED",
            &again[0].to_string(),
            "6",
        ],
    )
    .unwrap_err();
    assert!(err_text(e).contains("exceeds the 5 tokens"));
    assert_eq!(
        take(&mut c, "l", "gw", 5, Some((again[0], 0)))[..4],
        again[..4]
    );
}

#[test]
fn a_fixed_window_change_expires_held_tokens_without_a_return() {
    let server = Sluice::start();
    let mut c = server.client();
    let args = |want: &'static str, used: Option<(i64, i64)>| {
        let mut v: Vec<String> = ["w", "10", "1s", "HOLDER", "gw", "WANT", want, "TTL", "1h"]
            .map(String::from)
            .into();
        v.extend(["ALGO".into(), "FIXED".into()]);
        if let Some((id, n)) = used {
            v.extend(["USED".into(), id.to_string(), n.to_string()]);
        }
        v
    };
    let call = |c: &mut Connection, v: Vec<String>| {
        lease(c, &v.iter().map(String::as_str).collect::<Vec<_>>()).unwrap()
    };
    let read = |c: &mut Connection| {
        rl_check(c, &["w", "10", "1s", "ALGO", "FIXED", "COST", "0"]).unwrap()[2]
    };
    let first = call(&mut c, args("6", None));
    assert_eq!(first[1..4], [6, 10, 4], "{first:?}");
    // The tokens are valid until the window ends (within its second), not for the TTL's hour.
    assert!((1..=1000).contains(&first[6]), "valid_ms: {first:?}");
    // Wait for the next window: the count is back to 10.
    wait_until(Duration::from_secs(3), || {
        (read(&mut c) == 10).then_some(())
    })
    .expect("the next window");
    // 2 were admitted; the other 4 ended with their window. Giving them back would credit the
    // new window: the holder holds 4 taken now, and the window has 6 left.
    let next = call(&mut c, args("4", Some((first[0], 2))));
    assert_eq!(next[..4], [first[0], 4, 10, 6], "{next:?}");
    // 1 of the new 4 admitted (cumulative 3): 3 come back, in their window.
    let end = call(&mut c, args("0", Some((first[0], 3))));
    assert_eq!(end[1..4], [0, 10, 9], "{end:?}");
}

#[test]
fn an_expired_lease_is_returned_by_the_node() {
    let server = Sluice::start();
    let mut c = server.client();
    let ttl = Duration::from_millis(300);
    let start = Instant::now();
    let r = lease(
        &mut c,
        &["e", "10", "1d", "HOLDER", "gw", "WANT", "6", "TTL", "300ms"],
    )
    .unwrap();
    assert_eq!(r[1..4], [6, 10, 4], "{r:?}");
    // Nobody touches the key: the node returns the 6 by itself.
    wait_until(Duration::from_secs(5), || {
        (remaining(&mut c, "e", &[]) == 10).then_some(())
    })
    .expect("the expired lease returned");
    let took = start.elapsed();
    assert!(
        took >= ttl - Duration::from_millis(10),
        "returned early: {took:?}"
    );
    assert!(took <= 2 * ttl, "returned after {took:?}, past two TTLs");
    // The key was fresh again, and is not kept.
    let exists: i64 = redis::cmd("EXISTS").arg("e").query(&mut c).unwrap();
    assert_eq!(exists, 0);
}

#[test]
fn an_expiry_return_reaches_a_replica() {
    let primary = Sluice::start();
    let to = format!("127.0.0.1:{}", primary.port);
    let replica = Sluice::start_with(&["--replicaof", to.as_str()]);
    let (mut p, mut r) = (primary.client(), replica.client());
    wait_until(Duration::from_secs(10), || {
        let info: String = redis::cmd("INFO").arg("replication").query(&mut r).ok()?;
        info.contains("master_link_status:up").then_some(())
    })
    .expect("the replica's link up");
    let e = lease(&mut r, &["x", "10", "1d", "HOLDER", "gw", "WANT", "6"]).unwrap_err();
    assert!(err_text(e).contains("READONLY"));
    let got = lease(
        &mut p,
        &["x", "10", "1d", "HOLDER", "gw", "WANT", "6", "TTL", "500ms"],
    )
    .unwrap();
    assert_eq!(got[1..4], [6, 10, 4], "{got:?}");
    wait_until(Duration::from_secs(5), || {
        (remaining(&mut r, "x", &[]) == 4).then_some(())
    })
    .expect("the take on the replica");
    wait_until(Duration::from_secs(5), || {
        (remaining(&mut r, "x", &[]) == 10).then_some(())
    })
    .expect("the expiry's return on the replica");
    assert_eq!(remaining(&mut p, "x", &[]), 10);
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let server = Sluice::start();
    let mut c = server.client();
    let held = take(&mut c, "b", "gw", 5, None);
    let id = held[0].to_string();
    let long = "h".repeat(65);
    let cases: &[(&[&str], &str)] = &[
        (
            &["b", "10", "1d", "WANT", "5"],
            "wrong number of arguments for 'rl.lease'",
        ),
        (
            &["b", "10", "1d", "HOLDER", "gw", "TTL", "1s"],
            "needs HOLDER",
        ),
        (
            &["b", "10", "1d", "HOLDER", "", "WANT", "5"],
            "HOLDER must be 1 to 64 bytes",
        ),
        (
            &["b", "10", "1d", "HOLDER", &long, "WANT", "5"],
            "HOLDER must be 1 to 64 bytes",
        ),
        (
            &["b", "10", "1d", "HOLDER", "gw", "WANT", "-1"],
            "WANT must be",
        ),
        (
            &["b", "10", "1d", "HOLDER", "gw", "WANT", "x"],
            "WANT must be",
        ),
        (
            &["b", "10", "1d", "HOLDER", "gw", "WANT", "11"],
            "exceeds the capacity 10",
        ),
        (
            &[
                "b", "10", "1d", "HOLDER", "gw", "WANT", "5", "USED", "0", "1",
            ],
            "USED id",
        ),
        (
            &[
                "b", "10", "1d", "HOLDER", "gw", "WANT", "5", "USED", &id, "-1",
            ],
            "USED count",
        ),
        (
            &[
                "b", "10", "1d", "HOLDER", "gw", "WANT", "5", "USED", &id, "6",
            ],
            "exceeds the 5",
        ),
        (
            &["b", "10", "1d", "HOLDER", "gw", "WANT", "5", "TTL", "0"],
            "TTL must be",
        ),
        (
            &["b", "10", "1d", "HOLDER", "gw", "WANT", "5", "TTL", "2h"],
            "TTL must be",
        ),
        (
            &["b", "10", "1d", "HOLDER", "gw", "WANT", "5", "TTL", "x"],
            "TTL must be",
        ),
        (
            &["b", "10", "1d", "HOLDER", "gw", "WANT", "5", "BURST", "0"],
            "BURST",
        ),
        (
            &[
                "b", "10", "1d", "HOLDER", "gw", "WANT", "5", "ALGO", "LEAKY",
            ],
            "LEAKY",
        ),
        (
            &["b", "10", "1d", "HOLDER", "gw", "WANT", "5", "ALGO", "LOG"],
            "LOG",
        ),
        (
            &["b", "10", "1d", "HOLDER", "gw", "WANT", "5", "ALGO", "NOPE"],
            "NOPE",
        ),
        (
            &[
                "b", "10", "1d", "HOLDER", "gw", "WANT", "5", "ALGO", "FIXED", "BURST", "5",
            ],
            "BURST",
        ),
        (
            &[
                "b", "10", "1d", "HOLDER", "gw", "WANT", "5", "ALGO", "FIXED",
            ],
            "WRONGTYPE",
        ),
        (
            &["b", "10", "1d", "HOLDER", "gw", "WANT", "5", "FOO", "1"],
            "unknown option 'FOO' for 'rl.lease'",
        ),
        (&["b", "0", "1d", "HOLDER", "gw", "WANT", "5"], "limit"),
        (&["b", "10", "1x", "HOLDER", "gw", "WANT", "5"], "period"),
        (
            &["b", "10", "1d", "HOLDER", "gw", "TTL", "1s", "WANT"],
            "WANT needs a value",
        ),
    ];
    for (args, want) in cases {
        let e = err_text(lease(&mut c, args).unwrap_err());
        assert!(e.contains(want), "{args:?}: {e}");
        assert_eq!(remaining(&mut c, "b", &[]), 5, "{args:?} changed the key");
    }
    // The lease is as it was: the same id, 5 held.
    assert_eq!(
        take(&mut c, "b", "gw", 5, Some((held[0], 0)))[..4],
        held[..4]
    );
    // A key holding in-flight leases, and a string, answer WRONGTYPE.
    let _: redis::Value = redis::cmd("RL.ACQUIRE")
        .arg("inflight")
        .arg(2)
        .arg("10s")
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("SET").arg("s").arg("1").query(&mut c).unwrap();
    for key in ["inflight", "s"] {
        let e =
            err_text(lease(&mut c, &[key, "10", "1d", "HOLDER", "gw", "WANT", "1"]).unwrap_err());
        assert!(e.starts_with("WRONGTYPE"), "{key}: {e}");
    }
    // Options in any order and case.
    let r = lease(
        &mut c,
        &[
            "o", "10", "1d", "algo", "gcra", "want", "2", "burst", "4", "ttl", "5s", "holder", "gw",
        ],
    )
    .unwrap();
    assert_eq!(r[1..4], [2, 4, 2], "{r:?}");
    let info = format!(
        "{:?}",
        redis::cmd("COMMAND")
            .arg("INFO")
            .arg("rl.lease")
            .query::<redis::Value>(&mut c)
            .unwrap()
    );
    assert!(
        info.contains("rl.lease") && info.contains("write"),
        "{info}"
    );
}

#[test]
fn holders_per_key_and_records_per_node_are_capped() {
    let server = Sluice::start();
    let mut c = server.client();
    let call = |key: &str, holder: &str| {
        let mut cmd = redis::cmd("RL.LEASE");
        cmd.arg(key)
            .arg(1000)
            .arg("1d")
            .arg("HOLDER")
            .arg(holder)
            .arg("WANT")
            .arg(1);
        cmd.arg("TTL").arg("1h");
        cmd
    };
    // 250 holders on each of 400 keys: 100,000 records, the most a node keeps.
    for k in 0..400 {
        let mut pipe = redis::pipe();
        for h in 0..250 {
            pipe.add_command(call(&format!("k{k}"), &format!("h{h}")))
                .ignore();
        }
        let () = pipe.query(&mut c).unwrap();
    }
    let e =
        err_text(lease(&mut c, &["new", "1000", "1d", "HOLDER", "h", "WANT", "1"]).unwrap_err());
    assert!(e.contains("100000 leases of tokens"), "{e}");
    assert_eq!(
        remaining(&mut c, "new", &[]),
        10,
        "the refused call changed nothing"
    );
    // A holder that has a record still renews it, and WANT 0 needs no room.
    let _: Vec<i64> = call("k0", "h0").query(&mut c).unwrap();
    let r = lease(&mut c, &["new", "1000", "1d", "HOLDER", "h", "WANT", "0"]).unwrap();
    assert_eq!(r[1], 0);
    // FLUSHALL forgets every record: room again, up to 256 holders on a key.
    let () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
    let mut pipe = redis::pipe();
    for h in 0..256 {
        pipe.add_command(call("one", &format!("h{h}"))).ignore();
    }
    let () = pipe.query(&mut c).unwrap();
    let e = err_text(
        lease(
            &mut c,
            &["one", "1000", "1d", "HOLDER", "late", "WANT", "1"],
        )
        .unwrap_err(),
    );
    assert!(e.contains("256 holders"), "{e}");
    let left = rl_check(&mut c, &["one", "1000", "1d", "COST", "0"]).unwrap()[2];
    assert_eq!(left, 1000 - 256);
}

#[test]
fn acl_key_rules_and_command_docs_apply() {
    let server = Sluice::start();
    let mut admin = server.client();
    let () = redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "gw",
            "on",
            ">pw",
            "~tenant:*",
            "-@all",
            "+@ratelimit",
        ])
        .query(&mut admin)
        .unwrap();
    let mut c = server.client();
    let () = redis::cmd("AUTH")
        .arg("gw")
        .arg("pw")
        .query(&mut c)
        .unwrap();
    let ok = lease(
        &mut c,
        &["tenant:1", "10", "1d", "HOLDER", "gw", "WANT", "2"],
    )
    .unwrap();
    assert_eq!(ok[1], 2);
    let e =
        err_text(lease(&mut c, &["other", "10", "1d", "HOLDER", "gw", "WANT", "2"]).unwrap_err());
    assert!(e.starts_with("NOPERM"), "{e}");
    // redis-cli's hints come from COMMAND DOCS: every option is there.
    let docs = format!(
        "{:?}",
        redis::cmd("COMMAND")
            .arg("DOCS")
            .arg("rl.lease")
            .query::<redis::Value>(&mut admin)
            .unwrap()
    );
    for arg in [
        "HOLDER",
        "WANT",
        "USED",
        "TTL",
        "BURST",
        "ALGO",
        "ratelimit",
    ] {
        assert!(docs.contains(arg), "{arg} in {docs}");
    }
}

#[test]
fn cluster_routing_applies_as_to_a_check() {
    let dir = sluice_tests::TempDir::new("token-lease-cluster");
    let config = dir.path().join("nodes.conf");
    let server = Sluice::start_with(&[
        "--cluster",
        "yes",
        "--cluster-config-file",
        config.to_str().unwrap(),
    ]);
    let mut c = server.client();
    // No slot is served yet: the key is refused before anything is touched.
    let e = err_text(lease(&mut c, &["k", "10", "1d", "HOLDER", "gw", "WANT", "1"]).unwrap_err());
    assert!(e.starts_with("CLUSTERDOWN"), "{e}");
}

/// 25 of `key`'s 100 a second taken on lease (TOKEN, or as `extra` says), then a second and
/// more, after which the bucket alone would be full again.
fn quarter_on_lease(c: &mut Connection, key: &str, extra: &[&str]) {
    let mut args = vec![key, "100", "1s", "HOLDER", "gw", "WANT", "25", "TTL", "1h"];
    args.extend_from_slice(extra);
    let a = lease(c, &args).unwrap();
    assert_eq!(a[1], 25, "{a:?}");
    std::thread::sleep(Duration::from_millis(1100));
}

/// A bucket with tokens out on lease refills no further than its capacity less them, for
/// RL.CHECK as for RL.LEASE: the lease and a check of the whole capacity are never both
/// admitted.
#[test]
fn a_check_sees_the_tokens_out_on_lease() {
    let server = Sluice::start();
    let mut c = server.client();
    quarter_on_lease(&mut c, "t", &[]);
    let all = rl_check(&mut c, &["t", "100", "1s", "COST", "100"]).unwrap();
    assert_eq!(all[0], 0, "100 admitted with 25 out on lease: {all:?}");
    let rest = rl_check(&mut c, &["t", "100", "1s", "COST", "75"]).unwrap();
    assert_eq!(rest[0], 1, "the 75 not on lease: {rest:?}");
}

/// The same for the checks of several keys at once: `RL.HITS KEYS` (whose store call
/// `RL.HIT` and `RL.ALLOW` share) admits no more than the tokens not on lease.
#[test]
fn a_multi_key_check_sees_the_tokens_out_on_lease() {
    let server = Sluice::start();
    let mut c = server.client();
    quarter_on_lease(&mut c, "t", &[]);
    let hits = |c: &mut Connection, cost: &str| -> Vec<redis::Value> {
        redis::cmd("RL.HITS")
            .arg(&["KEYS", "t", "100", "1s", "other", "100", "1s", "COST", cost])
            .query(c)
            .unwrap()
    };
    let all = hits(&mut c, "100");
    assert_eq!(
        all[0],
        redis::Value::Int(0),
        "100 admitted with 25 out on lease: {all:?}"
    );
    // Nothing of the refused call was taken: the other key is still full.
    let other = rl_check(&mut c, &["other", "100", "1s", "COST", "0"]).unwrap();
    assert_eq!(other[2], 100, "{other:?}");
    let rest = hits(&mut c, "75");
    assert_eq!(
        rest[0],
        redis::Value::Int(1),
        "the 75 not on lease: {rest:?}"
    );
}

/// A rule's bucket (`RL.HIT rule subject`, bucket `rule:subject`) keeps them too.
#[test]
fn a_rule_check_sees_the_tokens_out_on_lease() {
    let server = Sluice::start();
    let mut c = server.client();
    let set: redis::RedisResult<i64> = redis::cmd("RL.RULE")
        .arg(&["SET", "r", "LIMIT", "100", "WINDOW", "1s", "ALGO", "TOKEN"])
        .query(&mut c);
    set.expect("RL.RULE SET");
    quarter_on_lease(&mut c, "r:u", &[]);
    let hit = |c: &mut Connection, cost: &str| -> Vec<redis::Value> {
        redis::cmd("RL.HIT")
            .arg(&["r", "u", "COST", cost])
            .query(c)
            .unwrap()
    };
    let all = hit(&mut c, "100");
    assert_eq!(
        all[0],
        redis::Value::Int(0),
        "100 admitted with 25 out on lease: {all:?}"
    );
    let rest = hit(&mut c, "75");
    assert_eq!(
        rest[0],
        redis::Value::Int(1),
        "the 75 not on lease: {rest:?}"
    );
}

/// A DRY check answers as its real call would, and changes nothing.
#[test]
fn a_dry_check_sees_the_tokens_out_on_lease() {
    let server = Sluice::start();
    let mut c = server.client();
    quarter_on_lease(&mut c, "t", &[]);
    let dry = rl_check(&mut c, &["t", "100", "1s", "COST", "100", "DRY"]).unwrap();
    assert_eq!(dry[0], 0, "a dry 100 with 25 out on lease: {dry:?}");
    let dry = rl_check(&mut c, &["t", "100", "1s", "COST", "75", "DRY"]).unwrap();
    assert_eq!(dry[0], 1, "a dry 75: {dry:?}");
    let real = rl_check(&mut c, &["t", "100", "1s", "COST", "75"]).unwrap();
    assert_eq!(
        real[0], 1,
        "the 75 not on lease, after the dry checks: {real:?}"
    );
}

/// A multi-key call that is refused takes nothing, the tokens above the holders' share
/// included: the bucket reads as it would have without the call.
#[test]
fn a_refused_multi_key_check_lowers_nothing() {
    let server = Sluice::start();
    let mut c = server.client();
    // 100 per 10 s: 75 left after the lease, 90 a second and a half later.
    let a = lease(
        &mut c,
        &["t", "100", "10s", "HOLDER", "gw", "WANT", "25", "TTL", "1h"],
    )
    .unwrap();
    assert_eq!(a[1], 25, "{a:?}");
    std::thread::sleep(Duration::from_millis(1500));
    let refused: Vec<redis::Value> = redis::cmd("RL.HITS")
        .arg(&[
            "KEYS", "t", "100", "10s", "other", "100", "10s", "COST", "100",
        ])
        .query(&mut c)
        .unwrap();
    assert_eq!(refused[0], redis::Value::Int(0), "{refused:?}");
    let left = rl_check(&mut c, &["t", "100", "10s", "COST", "0"]).unwrap();
    assert!(
        left[2] >= 89,
        "the refused call lowered the bucket to {}",
        left[2]
    );
}

/// redis-cell's `CL.THROTTLE` and Redis's `GCRA` check the same GCRA state as
/// `RL.CHECK ... ALGO GCRA`, and leave the tokens out on lease to their holders as it does:
/// 100 is refused and changes nothing, then 75 fits and leaves nothing.
#[test]
fn the_gcra_commands_see_the_tokens_out_on_lease() {
    let server = Sluice::start();
    let mut c = server.client();
    let cell = |c: &mut Connection, key: &str, quantity: &str| -> Vec<i64> {
        redis::cmd("CL.THROTTLE")
            .arg(&[key, "99", "100", "1", quantity])
            .query(c)
            .unwrap()
    };
    let gcra = |c: &mut Connection, key: &str, tokens: &str| -> Vec<i64> {
        redis::cmd("GCRA")
            .arg(&[key, "99", "100", "1", "TOKENS", tokens])
            .query(c)
            .unwrap()
    };
    for (key, check) in [
        ("cell", cell as fn(&mut Connection, &str, &str) -> Vec<i64>),
        ("gcra", gcra),
    ] {
        quarter_on_lease(&mut c, key, &["ALGO", "GCRA"]);
        let all = check(&mut c, key, "100");
        assert_eq!(
            all[0], 1,
            "{key}: 100 admitted with 25 out on lease: {all:?}"
        );
        assert_eq!(all[2], 75, "{key}: remaining with 25 out on lease: {all:?}");
        // The bucket the lease lowered is full again, so the key is gone: the refusal's
        // lowering was not kept.
        let kept: i64 = redis::cmd("EXISTS").arg(key).query(&mut c).unwrap();
        assert_eq!(kept, 0, "{key}: the refused request wrote the key");
        let rest = check(&mut c, key, "75");
        assert_eq!(rest[0], 0, "{key}: the 75 not on lease: {rest:?}");
        assert!(rest[2] <= 1, "{key}: left after the 75: {rest:?}");
    }
}

/// Tokens taken in a FIXED window belong to that window: once it has ended and the key is gone,
/// a bucket made under the same name is not held back by them, neither for another holder's
/// lease nor for a check.
#[test]
fn a_window_s_lease_does_not_hold_back_a_bucket_of_the_same_name() {
    let server = Sluice::start();
    let mut c = server.client();
    let a = lease(
        &mut c,
        &[
            "k", "100", "1s", "HOLDER", "gw", "WANT", "25", "TTL", "1h", "ALGO", "FIXED",
        ],
    )
    .unwrap();
    assert_eq!(a[1], 25, "{a:?}");
    wait_until(Duration::from_secs(5), || {
        let n: i64 = redis::cmd("EXISTS").arg("k").query(&mut c).unwrap();
        (n == 0).then_some(())
    })
    .expect("the window's key expires");
    // A lease of half the new bucket leaves the other half to a check.
    let b = lease(
        &mut c,
        &["k", "100", "1d", "HOLDER", "gw2", "WANT", "50", "TTL", "1h"],
    )
    .unwrap();
    assert_eq!((b[1], b[3]), (50, 50), "held, remaining: {b:?}");
    let rest = rl_check(&mut c, &["k", "100", "1d", "COST", "50"]).unwrap();
    assert_eq!(rest[0], 1, "the half not on lease: {rest:?}");
}
