//! The gateway's local maps, where quota could be lost or doubled:
//! - approximate mode's syncs when the node answers too late: a sync whose reply misses its
//!   deadline may still be applied by the node. A real node is stopped (`SIGSTOP`) while a
//!   sync is in flight and resumed after the deadline: it then applies the sync it had read.
//!   No unit may be admitted that the node did not hand out first, and once the leases are
//!   given back every admitted unit is charged exactly once;
//! - a gateway over its cap of local keys forgets the buckets nearest full, not a spent one.
//!
//! Every wait has a deadline; every process is stopped by its PID when its guard drops.

use std::time::Duration;

use sluice_client::{Client, Config, FailMode, Limit, Source, Topology};
use sluice_tests::{Sluice, rl_check, runtime};

const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(86_400);

#[test]
fn a_sync_that_times_out_neither_admits_untaken_tokens_nor_charges_twice() {
    let node = Sluice::start();
    let rt = runtime();
    let config = Config::new(Topology::Single(format!("127.0.0.1:{}", node.port)));
    let client = rt.block_on(Client::connect(config));
    // Fail mode closed: while the node is stopped nothing is admitted unseen by design (fail
    // mode open would admit uncharged units on purpose).
    // A burst of 100,000 refilled at 1,000 a day: the refill over the test is under a token, so
    // what the node lost is what was taken.
    let limit = Limit::new(1000, DAY)
        .burst(100_000)
        .approximate(Duration::from_millis(50), 0)
        .fail_mode(FailMode::Closed);
    let admitted = rt.block_on(async {
        let mut admitted = 0u64;
        let mut burst = async |n: usize| {
            for _ in 0..n {
                let d = client.check(b"k", &limit, 1).await.unwrap();
                admitted += u64::from(d.allowed);
            }
        };
        burst(200).await;
        tokio::time::sleep(Duration::from_millis(80)).await;
        burst(200).await;
        // The node stops with a sync due: the next checks start it, and it times out.
        node.signal(libc::SIGSTOP);
        tokio::time::sleep(Duration::from_millis(80)).await;
        burst(50).await;
        tokio::time::sleep(Duration::from_millis(400)).await;
        // Resumed, the node applies the sync it had read after the client gave up on it.
        node.signal(libc::SIGCONT);
        tokio::time::sleep(Duration::from_millis(300)).await;
        for _ in 0..6 {
            burst(50).await;
            tokio::time::sleep(Duration::from_millis(80)).await;
        }
        // A last sync of what is still counted here.
        tokio::time::sleep(Duration::from_millis(300)).await;
        burst(1).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        admitted
    });
    let mut c = node.client();
    let mut charged = || {
        let r = rl_check(&mut c, &["k", "1000", "1d", "BURST", "100000", "DRY"]).unwrap();
        (100_000 - r[2] - 1) as u64
    };
    let taken = charged();
    println!("admitted {admitted}, taken from the node {taken}");
    assert!(
        taken >= admitted,
        "{admitted} admitted but only {taken} taken from the node: a token admitted unseen"
    );
    // The client's last lease goes back (its next sync, or the node's expiry two intervals
    // later): then the node holds exactly what was admitted.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let now_charged = charged();
        if now_charged == admitted {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{admitted} admitted, {now_charged} charged on the node after the leases ended"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Fail mode `local` with a cap of 16 local keys and the node gone: a key spent for the hour
/// stays spent while 500 other keys pass through the map (each a unit short of full, for 3.6 s).
#[test]
fn a_gateway_over_its_local_map_cap_forgets_full_buckets_not_spent_ones() {
    let mut node = Sluice::start();
    let rt = runtime();
    let mut config = Config::new(Topology::Single(format!("127.0.0.1:{}", node.port)));
    config.max_local_keys = 16;
    let client = rt.block_on(Client::connect(config));
    node.signal(libc::SIGKILL);
    assert!(node.wait_exit(Duration::from_secs(10)).is_some());
    rt.block_on(async {
        let spent = Limit::new(5, HOUR).fail_mode(FailMode::Local);
        for _ in 0..5 {
            let d = client.check(b"spent", &spent, 1).await.unwrap();
            assert!(d.allowed && d.source == Source::LocalBucket, "{d:?}");
        }
        let quick = Limit::new(1000, HOUR).fail_mode(FailMode::Local);
        for i in 0..500u32 {
            let key = format!("crowd:{i}");
            client.check(key.as_bytes(), &quick, 1).await.unwrap();
            let d = client.check(b"spent", &spent, 1).await.unwrap();
            assert!(
                !d.allowed,
                "the spent bucket was forgotten after {i} other keys: {d:?}"
            );
        }
        assert!(client.local_keys().0 <= 16);
    });
}

/// Fail mode `local` with the node gone, a limit of 3 a minute and 8 gateways: the fleet does
/// not allow one per gateway (8). Each starts with 3/8 of a unit, so none is allowed until the
/// share's refill has made a whole one.
#[test]
fn a_limit_below_the_gateway_count_is_not_allowed_once_per_gateway() {
    let mut node = Sluice::start();
    let rt = runtime();
    let clients: Vec<Client> = (0..8)
        .map(|_| {
            let mut config = Config::new(Topology::Single(format!("127.0.0.1:{}", node.port)));
            config.gateways = 8;
            rt.block_on(Client::connect(config))
        })
        .collect();
    node.signal(libc::SIGKILL);
    assert!(node.wait_exit(Duration::from_secs(10)).is_some());
    let tiny = Limit::new(3, Duration::from_secs(60)).fail_mode(FailMode::Local);
    let allowed: u64 = rt.block_on(async {
        let mut n = 0;
        for c in &clients {
            for _ in 0..3 {
                let d = c.check(b"tiny", &tiny, 1).await.unwrap();
                assert_eq!(d.source, Source::LocalBucket);
                n += u64::from(d.allowed);
            }
        }
        n
    });
    println!("8 gateways, limit 3/min, node gone: {allowed} allowed");
    assert!(
        allowed <= 3,
        "{allowed} allowed by the fleet for a limit of 3"
    );
}

/// A key the node had nearly spent (10 of 100 left) when it went away: the local bucket starts
/// from that, this gateway's half of it (5), not from a full share (50).
#[test]
fn a_local_bucket_starts_from_what_the_node_had_left() {
    let mut node = Sluice::start();
    let rt = runtime();
    let mut config = Config::new(Topology::Single(format!("127.0.0.1:{}", node.port)));
    config.gateways = 2;
    let client = rt.block_on(Client::connect(config));
    let limit = Limit::new(100, HOUR).fail_mode(FailMode::Local);
    rt.block_on(async {
        for _ in 0..90 {
            let d = client.check(b"spent", &limit, 1).await.unwrap();
            assert!(d.allowed && matches!(d.source, Source::Node(_)), "{d:?}");
        }
    });
    node.signal(libc::SIGKILL);
    assert!(node.wait_exit(Duration::from_secs(10)).is_some());
    let allowed: u64 = rt.block_on(async {
        let mut n = 0;
        for _ in 0..60 {
            let d = client.check(b"spent", &limit, 1).await.unwrap();
            assert_eq!(d.source, Source::LocalBucket);
            n += u64::from(d.allowed);
        }
        n
    });
    println!("10 of 100 left on the node, 2 gateways: {allowed} allowed locally");
    assert_eq!(
        allowed, 5,
        "the local bucket did not start from the node's 10 left"
    );
}

/// The same through `sluice proxy`, whose plain checks the node answers byte for byte: the
/// sidecar reads what the key had left from those replies.
#[test]
fn the_sidecar_starts_local_buckets_from_what_the_node_had_left() {
    let mut node = Sluice::start();
    let upstream = format!("127.0.0.1:{}", node.port);
    let proxy = Sluice::start_proxy(&[
        "--upstream",
        &upstream,
        "--gateways",
        "2",
        "--fail-mode",
        "local",
    ]);
    let mut c = proxy.client();
    for _ in 0..90 {
        assert_eq!(rl_check(&mut c, &["spent", "100", "1h"]).unwrap()[0], 1);
    }
    node.signal(libc::SIGKILL);
    assert!(node.wait_exit(Duration::from_secs(10)).is_some());
    let allowed: i64 = (0..60)
        .map(|_| rl_check(&mut c, &["spent", "100", "1h"]).unwrap()[0])
        .sum();
    println!("through the sidecar, 10 of 100 left, 2 gateways: {allowed} allowed locally");
    assert_eq!(allowed, 5);
}

/// An approximate key pushed out of a full map while it holds a lease gives the lease back
/// with what it admitted: the node charges exactly that (its own expiry alone would give back
/// the admitted tokens too).
#[test]
fn an_approximate_key_pushed_out_of_the_map_reports_what_it_admitted() {
    let node = Sluice::start();
    let rt = runtime();
    let mut config = Config::new(Topology::Single(format!("127.0.0.1:{}", node.port)));
    config.max_local_keys = 2;
    let client = rt.block_on(Client::connect(config));
    let limit = Limit::new(10, DAY).approximate(Duration::from_millis(50), 0);
    rt.block_on(async {
        for _ in 0..3 {
            assert!(client.check(b"a", &limit, 1).await.unwrap().allowed);
        }
        for key in [&b"b"[..], b"c", b"d"] {
            client.check(key, &limit, 1).await.unwrap();
        }
    });
    let mut c = node.client();
    // Within two intervals and a tick the give-back (or the expiry) has landed; either way the
    // node must end up charged for exactly the 3 admitted.
    let left = sluice_tests::wait_until(Duration::from_secs(3), || {
        let r = rl_check(&mut c, &["a", "10", "1d", "COST", "0"]).unwrap();
        (r[2] == 7).then_some(r[2])
    });
    let r = rl_check(&mut c, &["a", "10", "1d", "COST", "0"]).unwrap();
    assert_eq!(
        left,
        Some(7),
        "3 admitted, the node has {} of 10 left",
        r[2]
    );
    drop(client);
}

/// A request costing more than a gateway's fair share of what is left (but within its lease
/// cap) gets a lease that covers it, in a call or two, not a sync per retry.
#[test]
fn a_costly_request_gets_a_lease_that_covers_it() {
    let node = Sluice::start();
    let rt = runtime();
    let mut config = Config::new(Topology::Single(format!("127.0.0.1:{}", node.port)));
    config.gateways = 4;
    let client = rt.block_on(Client::connect(config));
    let mut c = node.client();
    // 100 an hour, 60 spent: 40 left, a fair share of 10 for each of 4 gateways.
    rl_check(&mut c, &["costly", "100", "1h", "COST", "60"]).unwrap();
    let limit = Limit::new(100, HOUR).approximate(Duration::from_millis(50), 0);
    let calls_before = client.node_calls();
    let d = rt.block_on(client.check(b"costly", &limit, 20)).unwrap();
    let calls = client.node_calls() - calls_before;
    assert!(d.allowed, "{d:?}");
    assert!(calls <= 2, "{calls} node calls for one request");
    drop(client);
}
