//! In-flight leases from the gateway side: `sluice-client`'s `acquire` and its `Lease` guard
//! against a real node, then each fail mode with the node gone.
//!
//! Every wait has a deadline; every process is stopped by its PID when its guard drops.

use std::time::Duration;

use sluice_client::{Client, Concurrency, Config, FailMode, Source, Topology};
use sluice_tests::{Sluice, runtime};

fn single(port: u16) -> Config {
    Config::new(Topology::Single(format!("127.0.0.1:{port}")))
}

/// `RL.ACQUIRE`'s in_flight for `key` as the node sees it (a denied acquire of max 0 would be
/// refused, so ask with a huge max and give the lease straight back).
fn in_flight(node: &Sluice, key: &str) -> i64 {
    let mut c = node.client();
    let r: Vec<redis::Value> = redis::cmd("RL.ACQUIRE")
        .arg(key)
        .arg(10_000)
        .arg("1s")
        .query(&mut c)
        .unwrap();
    let (redis::Value::Int(n), redis::Value::Int(id)) = (&r[2], &r[4]) else {
        panic!("{r:?}");
    };
    let _: i64 = redis::cmd("RL.RELEASE")
        .arg(key)
        .arg(*id)
        .query(&mut c)
        .unwrap();
    n - 1
}

/// Two leases of `max 2` are granted, a third is denied with the time until the earliest
/// ends; a guard dropped gives its slot back (in the background), `release` at once; `renew`
/// keeps a lease past its first ttl.
#[test]
fn acquire_returns_a_guard_that_releases_on_drop() {
    let node = Sluice::start();
    let rt = runtime();
    let client = rt.block_on(Client::connect(single(node.port)));
    let c = Concurrency::new(2, Duration::from_secs(30)).fail_mode(FailMode::Closed);
    rt.block_on(async {
        let (d1, l1) = client.acquire(b"report", &c).await.unwrap();
        let (d2, l2) = client.acquire(b"report", &c).await.unwrap();
        assert!(d1.allowed && d2.allowed, "{d1:?} {d2:?}");
        assert!(matches!(d2.source, Source::Node(_)), "{d2:?}");
        assert_eq!((d2.max, d2.in_flight), (2, 2));
        let (l1, l2) = (l1.unwrap(), l2.unwrap());
        assert_ne!(l1.id(), l2.id());
        let (d3, l3) = client.acquire(b"report", &c).await.unwrap();
        assert!(!d3.allowed && l3.is_none(), "{d3:?}");
        assert!(
            (29_000..=30_000).contains(&d3.retry_after_ms),
            "retry_after_ms {} is not the time until the first lease ends",
            d3.retry_after_ms
        );
        // Dropped: released in the background.
        drop(l1);
        let mut freed = false;
        for _ in 0..250 {
            if in_flight(&node, "report") == 1 {
                freed = true;
                break;
            }
            // An async wait: the release runs on this runtime.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(freed, "a dropped lease was not released");
        assert!(l2.renew(Duration::from_secs(60)).await);
        assert!(l2.release().await, "release of a held lease");
        assert_eq!(in_flight(&node, "report"), 0);
    });
}

/// The node refuses bad arguments as an error, not a fail mode.
#[test]
fn a_bad_request_is_an_error_not_a_fail_mode() {
    let node = Sluice::start();
    let rt = runtime();
    let client = rt.block_on(Client::connect(single(node.port)));
    let c = Concurrency::new(20_000, Duration::from_secs(1));
    let e = rt.block_on(client.acquire(b"k", &c)).unwrap_err();
    assert!(e.0.contains("10000"), "{e:?}");
    let mut raw = node.client();
    let () = redis::cmd("SET").arg("s").arg("v").query(&mut raw).unwrap();
    let c = Concurrency::new(2, Duration::from_secs(1));
    let e = rt.block_on(client.acquire(b"s", &c)).unwrap_err();
    assert!(e.0.starts_with("WRONGTYPE"), "{e:?}");
}

/// With the node gone: `open` admits (a lease the node never knew), `closed` denies, and
/// `local` holds `max ÷ gateways` (at least one) per key in the process, freed when the guard
/// drops.
#[test]
fn fail_modes_when_the_node_is_gone() {
    let mut node = Sluice::start();
    let rt = runtime();
    let mut config = single(node.port);
    config.gateways = 2;
    let client = rt.block_on(Client::connect(config));
    node.signal(libc::SIGKILL);
    assert!(node.wait_exit(Duration::from_secs(10)).is_some());
    rt.block_on(async {
        let open = Concurrency::new(4, Duration::from_secs(1)).fail_mode(FailMode::Open);
        let (d, l) = client.acquire(b"k", &open).await.unwrap();
        assert!(d.allowed && d.source == Source::FailOpen, "{d:?}");
        assert_eq!(
            l.as_ref().map(|l| l.id()),
            Some(0),
            "fail mode open's lease is id 0"
        );

        let closed = Concurrency::new(4, Duration::from_secs(1)).fail_mode(FailMode::Closed);
        let (d, l) = client.acquire(b"k", &closed).await.unwrap();
        assert!(
            !d.allowed && d.source == Source::FailClosed && l.is_none(),
            "{d:?}"
        );

        let local = Concurrency::new(4, Duration::from_secs(1)).fail_mode(FailMode::Local);
        let (a, la) = client.acquire(b"k", &local).await.unwrap();
        let (b, lb) = client.acquire(b"k", &local).await.unwrap();
        let (c, lc) = client.acquire(b"k", &local).await.unwrap();
        assert!(
            a.allowed && b.allowed && !c.allowed && lc.is_none(),
            "{a:?} {b:?} {c:?}"
        );
        assert_eq!(c.source, Source::LocalBucket);
        // Another key has slots of its own.
        let (other, _lo) = client.acquire(b"other", &local).await.unwrap();
        assert!(other.allowed);
        drop(la);
        let (again, lagain) = client.acquire(b"k", &local).await.unwrap();
        assert!(
            again.allowed && lagain.is_some(),
            "a dropped local lease kept its slot"
        );
        drop(lb);
    });
}

/// `RL.ACQUIRE key max ttl` through the sidecar: the node's reply, field for field.
fn acquire_via(
    c: &mut redis::Connection,
    key: &str,
    max: u64,
    ttl: &str,
) -> (i64, i64, Option<i64>) {
    let r: Vec<redis::Value> = redis::cmd("RL.ACQUIRE")
        .arg(key)
        .arg(max)
        .arg(ttl)
        .query(c)
        .unwrap();
    let int = |v: &redis::Value| match v {
        redis::Value::Int(n) => Some(*n),
        _ => None,
    };
    (int(&r[0]).unwrap(), int(&r[2]).unwrap(), int(&r[4]))
}

fn release_via(c: &mut redis::Connection, key: &str, id: i64) -> i64 {
    redis::cmd("RL.RELEASE").arg(key).arg(id).query(c).unwrap()
}

/// Through `sluice proxy`: acquire, renew and release reach the node; with the node gone,
/// `--fail-mode local` holds `max ÷ gateways` leases per key in the sidecar (released and renewed
/// by their ids through it), and `--fail-mode closed` denies.
#[test]
fn leases_through_the_sidecar_and_its_fail_modes() {
    let mut node = Sluice::start();
    let upstream = format!("127.0.0.1:{}", node.port);
    let local = Sluice::start_proxy(&[
        "--upstream",
        &upstream,
        "--fail-mode",
        "local",
        "--gateways",
        "2",
    ]);
    let closed = Sluice::start_proxy(&["--upstream", &upstream, "--fail-mode", "closed"]);
    let mut c = local.client();
    let (allowed, held, id) = acquire_via(&mut c, "job", 3, "30s");
    assert_eq!((allowed, held), (1, 1));
    let id = id.expect("a lease id");
    assert!(id > 0, "a node's id");
    assert_eq!(in_flight(&node, "job"), 1, "the lease is on the node");
    let renewed: i64 = redis::cmd("RL.RENEW")
        .arg("job")
        .arg(id)
        .arg("1m")
        .query(&mut c)
        .unwrap();
    assert_eq!(renewed, 1);
    assert_eq!(release_via(&mut c, "job", id), 1);
    assert_eq!(release_via(&mut c, "job", id), 0, "released twice");
    let e = redis::cmd("RL.ACQUIRE")
        .arg("job")
        .arg(0)
        .arg("1s")
        .query::<redis::Value>(&mut c);
    assert!(
        format!("{e:?}").contains("max must be an integer from 1 to 10000"),
        "{e:?}"
    );

    node.signal(libc::SIGKILL);
    assert!(node.wait_exit(Duration::from_secs(10)).is_some());
    // Local: 4 ÷ 2 gateways = 2 leases of "job" here.
    let (a, _, ida) = acquire_via(&mut c, "job", 4, "30s");
    let (b, _, idb) = acquire_via(&mut c, "job", 4, "30s");
    let (third, n, none) = acquire_via(&mut c, "job", 4, "30s");
    assert_eq!((a, b, third, n, none), (1, 1, 0, 2, None));
    let (ida, idb) = (ida.unwrap(), idb.unwrap());
    assert!(
        ida < 0 && idb < 0 && ida != idb,
        "local ids have the top bit set: {ida} {idb}"
    );
    let renewed: i64 = redis::cmd("RL.RENEW")
        .arg("job")
        .arg(ida)
        .arg("1m")
        .query(&mut c)
        .unwrap();
    assert_eq!(renewed, 1);
    assert_eq!(release_via(&mut c, "job", ida), 1);
    let (again, _, _) = acquire_via(&mut c, "job", 4, "30s");
    assert_eq!(again, 1, "a released local lease freed its slot");
    // Closed: denied.
    let mut cc = closed.client();
    let (denied, _, none) = acquire_via(&mut cc, "job", 4, "30s");
    assert_eq!((denied, none), (0, None));
}
