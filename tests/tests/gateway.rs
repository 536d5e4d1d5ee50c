//! The gateway side end to end: `sluice-client` and the `sluice proxy` sidecar against real
//! nodes (single, a 3-node cluster, a primary behind redis-sentinel) and real faulty sockets.
//!
//! Latencies here are behaviour bounds (a fail mode answers within a few deadlines, never
//! seconds), asserted with a 10× margin; speed is measured by `scripts/gateway-bench.sh`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sluice_client::{BreakerState, Client, Config, FailMode, Limit, Source, Topology};
use sluice_tests::{
    RedisSentinel, Sluice, TempDir, have_tool, info_field, redis_benchmark, redis_cli, runtime,
};

const HOUR: Duration = Duration::from_secs(3600);

fn single(port: u16) -> Config {
    Config::new(Topology::Single(format!("127.0.0.1:{port}")))
}

fn is_node(d: &sluice_client::Decision) -> bool {
    matches!(d.source, Source::Node(_))
}

/// Within 10 deadlines: generous for a shared CI machine, still far from "seconds".
fn bound(client: &Client) -> Duration {
    client.config().deadline * 10
}

#[test]
fn node_killed_mid_load_each_fail_mode_answers_in_time_then_the_node_comes_back() {
    let mut node = Sluice::start();
    let port = node.port;
    let rt = runtime();
    let client = rt.block_on(async {
        let mut config = single(port);
        config.gateways = 4;
        Client::connect(config).await
    });
    let modes = [FailMode::Open, FailMode::Closed, FailMode::Local];
    let stop = Arc::new(AtomicBool::new(false));
    // Load in the background: each mode on its own keys, every answer timed.
    let load = {
        let (client, stop) = (client.clone(), stop.clone());
        rt.spawn(async move {
            let mut seen = Vec::new();
            let started = Instant::now();
            for i in 0..200_000u64 {
                if stop.load(Ordering::Relaxed) || started.elapsed() > Duration::from_secs(10) {
                    break;
                }
                let mode = modes[(i % 3) as usize];
                let limit = Limit::new(1_000_000, HOUR).fail_mode(mode);
                let t = Instant::now();
                let d = client
                    .check(format!("load:{}", i % 97).as_bytes(), &limit, 1)
                    .await;
                seen.push((mode, t.elapsed(), d.expect("a decision").source));
                tokio::task::yield_now().await;
            }
            seen
        })
    };
    rt.block_on(async {
        wait_for(|| client.decisions()[0] > 300).await;
        node.signal(libc::SIGKILL);
        assert!(node.wait_exit(Duration::from_secs(5)).is_some());
        wait_for(|| client.decisions()[3..5].iter().sum::<u64>() > 300).await;
        stop.store(true, Ordering::Relaxed);
    });
    let seen = rt.block_on(load).unwrap();
    let limit = bound(&client);
    for mode in modes {
        let failed: Vec<_> = seen
            .iter()
            .filter(|(m, _, s)| *m == mode && !matches!(s, Source::Node(_)))
            .collect();
        assert!(!failed.is_empty(), "{mode:?}: no fail-mode answer");
        let want = match mode {
            FailMode::Open => Source::FailOpen,
            FailMode::Closed => Source::FailClosed,
            FailMode::Local => Source::LocalBucket,
        };
        assert!(failed.iter().all(|(_, _, s)| *s == want), "{mode:?}");
        let slowest = failed.iter().map(|(_, t, _)| *t).max().unwrap();
        assert!(slowest < limit, "{mode:?}: an answer took {slowest:?}");
    }

    // With the node gone, `local` allows limit ÷ gateways (40 ÷ 4) and then denies.
    rt.block_on(async {
        let local = Limit::new(40, HOUR).fail_mode(FailMode::Local);
        let mut allowed = 0;
        for _ in 0..30 {
            let t = Instant::now();
            let d = client.check(b"whale", &local, 1).await.unwrap();
            assert!(t.elapsed() < limit);
            assert_eq!(d.source, Source::LocalBucket);
            allowed += u32::from(d.allowed);
        }
        assert_eq!(allowed, 10);
        assert_ne!(client.upstreams()[0].breaker, BreakerState::Closed);
    });

    // The node comes back on its port: checks return to it and the breaker closes.
    let _node = Sluice::start_on(port, &[]);
    rt.block_on(async {
        let limit = Limit::new(40, HOUR).fail_mode(FailMode::Closed);
        let back = async {
            loop {
                let d = client.check(b"back", &limit, 1).await.unwrap();
                if is_node(&d) && client.upstreams()[0].breaker == BreakerState::Closed {
                    return d;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        let d = tokio::time::timeout(Duration::from_secs(10), back)
            .await
            .expect("checks went back to the node");
        assert_eq!(d.remaining, 39, "the restarted node counts: {d:?}");
    });
}

/// Polls `f` every 5 ms for up to 10 s (async, so the client's tasks keep running).
async fn wait_for(mut f: impl FnMut() -> bool) {
    let started = Instant::now();
    while !f() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "condition not met in 10 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[test]
fn blocked_cache_cuts_the_calls_that_reach_the_node() {
    let node = Sluice::start();
    let rt = runtime();
    let client = rt.block_on(Client::connect(single(node.port)));
    let mut reached = Vec::new();
    for cache in [true, false] {
        let before = info_field(node.port, "total_commands_processed").unwrap();
        let denied = rt.block_on(async {
            let limit = Limit::new(5, HOUR).blocked_cache(cache);
            let key = format!("hot:{cache}");
            let mut denied = 0;
            for _ in 0..400 {
                let d = client.check(key.as_bytes(), &limit, 1).await.unwrap();
                if !d.allowed {
                    denied += 1;
                    assert!(d.retry_after_ms > 0, "{d:?}");
                    if cache {
                        assert!(is_node(&d) || d.source == Source::BlockedCache);
                    }
                }
            }
            denied
        });
        assert_eq!(denied, 395, "exactly the limit allowed");
        // Minus the INFO that read `before`.
        reached.push(info_field(node.port, "total_commands_processed").unwrap() - before - 1);
    }
    let (with, without) = (reached[0], reached[1]);
    assert!(
        (400..410).contains(&without),
        "every check reached the node: {without}"
    );
    assert!(
        with * 10 <= without,
        "the blocked cache cut {with} of {without} calls: less than 90%"
    );
    assert_eq!(client.local_keys().1, 1, "one blocked key held");
}

#[test]
fn split_spreads_one_key_over_the_nodes_of_a_cluster() {
    let dir = TempDir::new("gw-cluster");
    let nodes = sluice_tests::primaries(&dir, "n", &[&[], &[], &[]]);
    sluice_tests::wait_cluster_ok(&nodes);
    let ports: Vec<u16> = nodes.iter().map(|n| n.port).collect();
    let before: Vec<u64> = ports
        .iter()
        .map(|&p| info_field(p, "total_commands_processed").unwrap())
        .collect();
    // Sub-keys differ only in their last byte, and CRC16 is linear: `key#0..7` land in at most
    // a few slot regions, so with this placement they reach 2 of the 3 nodes at best. The whale
    // is the first key whose sub-keys reach two.
    let slots = sluice_tests::cluster_slots(ports[0]).unwrap();
    let whale = (0..10_000)
        .map(|n| format!("whale:{n}"))
        .find(|k| {
            let owners: BTreeSet<u16> = (0..8)
                .filter_map(|i| {
                    let slot = sluice_tests::key_slot(format!("{k}#{i}").as_bytes());
                    sluice_tests::owner_of(&slots, slot)
                })
                .collect();
            owners.len() >= 2
        })
        .expect("a key whose sub-keys reach two nodes");
    let rt = runtime();
    let (allowed, sources) = rt.block_on(async {
        // Seeded with one node only: the rest comes from CLUSTER SLOTS.
        let client = Client::connect(Config::new(Topology::Cluster(vec![format!(
            "127.0.0.1:{}",
            nodes[0].port
        )])))
        .await;
        let limit = Limit::new(240, HOUR).split(8);
        let mut allowed = 0;
        let mut sources = BTreeMap::new();
        for _ in 0..600 {
            let d = client.check(whale.as_bytes(), &limit, 1).await.unwrap();
            allowed += u64::from(d.allowed);
            if let Source::Node(a) = &d.source {
                *sources.entry(a.to_string()).or_insert(0) += 1;
            }
            assert!(d.limit <= 30, "each sub-key holds limit ÷ 8: {d:?}");
        }
        let owners: BTreeSet<_> = (0..8)
            .map(|i| client.owner(format!("{whale}#{i}").as_bytes()).unwrap())
            .collect();
        assert!(owners.len() >= 2, "the sub-keys' owners: {owners:?}");
        (allowed, sources)
    });
    // Every sub-key is exact: at most 8 × 30, and all of it once the traffic has covered each.
    assert_eq!(allowed, 240, "{sources:?}");
    assert!(sources.len() >= 2, "answers by node: {sources:?}");
    let reached: Vec<u64> = ports
        .iter()
        .zip(&before)
        .map(|(&p, b)| info_field(p, "total_commands_processed").unwrap() - b - 1)
        .collect();
    assert!(
        reached.iter().filter(|&&n| n >= 30).count() >= 2,
        "the key's load did not spread: {reached:?}"
    );
}

#[test]
fn approximate_mode_never_admits_beyond_the_exact_limiter() {
    let node = Sluice::start();
    let rt = runtime();
    const GATEWAYS: u32 = 4;
    // 400/s, synced every 50 ms: leases of tokens never admit beyond the exact limiter (the
    // library-level twin of tests/tests/gateway_approx.rs); one request per gateway is the
    // slack for the instant the span is measured at.
    let limit = Limit::new(400, Duration::from_secs(1)).approximate(Duration::from_millis(50), 0);
    assert_eq!(limit.overshoot_bound(GATEWAYS), 0);
    let bound = u64::from(GATEWAYS);
    let before = info_field(node.port, "total_commands_processed").unwrap();
    let (allowed, checks, elapsed, calls, reached) = rt.block_on(async {
        let mut clients = Vec::new();
        for _ in 0..GATEWAYS {
            let mut c = single(node.port);
            c.gateways = GATEWAYS;
            clients.push(Client::connect(c).await);
        }
        let started = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for c in &clients {
            let c = c.clone();
            tasks.spawn(async move {
                let (mut allowed, mut checks) = (0u64, 0u64);
                while started.elapsed() < Duration::from_millis(1500) && checks < 400_000 {
                    let d = c.check(b"hot", &limit, 1).await.unwrap();
                    allowed += u64::from(d.allowed);
                    checks += 1;
                    tokio::task::yield_now().await;
                }
                (allowed, checks)
            });
        }
        let (mut allowed, mut checks) = (0, 0);
        while let Some(r) = tasks.join_next().await {
            let (a, c) = r.unwrap();
            allowed += a;
            checks += c;
        }
        let elapsed = started.elapsed();
        // The last syncs land: wait, with a deadline, until the node has counted as many
        // commands as the clients sent (each INFO counts itself too).
        let deadline = Instant::now() + Duration::from_secs(10);
        let port = node.port;
        let mut infos = 0;
        loop {
            let calls: u64 = clients.iter().map(Client::node_calls).sum();
            infos += 1;
            let seen = tokio::task::spawn_blocking(move || {
                info_field(port, "total_commands_processed").unwrap()
            })
            .await
            .unwrap();
            let reached = seen - before - infos;
            if reached >= calls || Instant::now() > deadline {
                break (allowed, checks, elapsed, calls, reached);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    // The exact limiter over the same span: a full bucket plus the refill.
    let exact = 400 + (400.0 * elapsed.as_secs_f64()).ceil() as u64;
    let overshoot = allowed as i64 - exact as i64;
    eprintln!(
        "approximate: {checks} checks, {allowed} allowed, exact {exact}, overshoot {overshoot} (bound {bound}), {calls} node calls"
    );
    assert!(
        overshoot <= bound as i64,
        "overshoot {overshoot} > {bound}, one per gateway"
    );
    assert!(
        allowed * 10 >= exact * 7,
        "approximate mode starved the key: {allowed} of {exact}"
    );
    assert!(
        reached <= calls + 5,
        "node saw {reached}, the clients sent {calls}"
    );
    assert!(
        checks >= reached * 10,
        "{checks} checks made {reached} node calls: less than a 10× cut"
    );
}

/// A real socket that misbehaves: `answer` gets each accepted connection.
fn fake_upstream(answer: fn(std::net::TcpStream)) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        // Bounded: the test makes a few dozen connections at most.
        for stream in listener.incoming().take(200).flatten() {
            std::thread::spawn(move || answer(stream));
        }
    });
    port
}

#[test]
fn garbage_half_open_and_silent_upstreams_end_in_the_fail_mode_in_time() {
    let garbage = fake_upstream(|mut s| {
        let mut buf = [0u8; 1024];
        while matches!(s.read(&mut buf), Ok(n) if n > 0) {
            let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n");
        }
    });
    let half_open = fake_upstream(|s| {
        // Closes its sending side at once and never reads: the client sees EOF.
        let _ = s.shutdown(std::net::Shutdown::Write);
        std::thread::sleep(Duration::from_secs(20));
    });
    let silent = fake_upstream(|s| {
        // Accepts and never answers (reads nothing; holds the socket open).
        std::thread::sleep(Duration::from_secs(20));
        drop(s);
    });
    let rt = runtime();
    for (name, port) in [
        ("garbage", garbage),
        ("half-open", half_open),
        ("silent", silent),
    ] {
        rt.block_on(async {
            let client = Client::connect(single(port)).await;
            for (i, mode) in [FailMode::Closed, FailMode::Open, FailMode::Local]
                .into_iter()
                .cycle()
                .take(12)
                .enumerate()
            {
                let limit = Limit::new(10, HOUR).fail_mode(mode);
                let t = Instant::now();
                let d = client.check(b"k", &limit, 1).await.unwrap();
                let took = t.elapsed();
                assert!(took < bound(&client), "{name} #{i}: {took:?}");
                let want = match mode {
                    FailMode::Open => Source::FailOpen,
                    FailMode::Closed => Source::FailClosed,
                    FailMode::Local => Source::LocalBucket,
                };
                assert_eq!(d.source, want, "{name} #{i}");
            }
            assert_ne!(
                client.upstreams()[0].breaker,
                BreakerState::Closed,
                "{name}"
            );
        });
    }
}

#[test]
fn sidecar_speaks_like_a_node_and_applies_fail_modes() {
    let mut node = Sluice::start();
    let upstream = format!("127.0.0.1:{}", node.port);
    let proxy = Sluice::start_proxy(&["--upstream", &upstream, "--gateways", "2"]);
    let mut c = proxy.client();
    let r: Vec<i64> = redis::cmd("RL.CHECK")
        .arg(&["k", "3", "1h"])
        .query(&mut c)
        .unwrap();
    assert_eq!(&r[..4], &[1, 3, 2, -1]);
    // Gateway options on the sidecar, and on a node (accepted and ignored there).
    for conn in [&mut c, &mut node.client()] {
        let r: Vec<i64> = redis::cmd("RL.CHECK")
            .arg(&[
                "opts", "10", "1h", "FAILMODE", "closed", "SPLIT", "1", "APPROX", "50",
            ])
            .query(conn)
            .unwrap();
        assert_eq!(r[0], 1);
        let e = redis::cmd("RL.CHECK")
            .arg(&["opts", "10", "1h", "FAILMODE", "sometimes"])
            .query::<Vec<i64>>(conn)
            .unwrap_err();
        assert!(e.to_string().contains("FAILMODE"), "{e}");
    }
    let r: Vec<i64> = redis::cmd("RL.CHECK")
        .arg(&["k", "3", "1h", "DRY"])
        .query(&mut c)
        .unwrap();
    assert_eq!(r[2], 1, "DRY reads the node's state: {r:?}");
    let r: Vec<i64> = redis::cmd("CL.THROTTLE")
        .arg(&["cl", "1", "5", "60"])
        .query(&mut c)
        .unwrap();
    assert_eq!(r.len(), 5);
    let owner: String = redis::cmd("RL.WHERE").arg("k").query(&mut c).unwrap();
    assert_eq!(owner, upstream);
    let e = redis::cmd("GET")
        .arg("k")
        .query::<String>(&mut c)
        .unwrap_err();
    assert!(e.to_string().contains("not a general Redis proxy"), "{e}");
    let e = redis::cmd("RL.CHECK")
        .arg(&["k", "3", "1h", "COST", "4"])
        .query::<Vec<i64>>(&mut c)
        .unwrap_err();
    assert!(e.to_string().contains("could never be allowed"), "{e}");

    if have_tool("redis-cli") {
        let out = redis_cli(proxy.port, &["PING"]);
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "PONG");
    }
    if have_tool("redis-benchmark") {
        let before = info_field(node.port, "total_commands_processed").unwrap();
        let out = redis_benchmark(
            proxy.port,
            &[
                "-n", "2000", "-c", "8", "-P", "4", "-q", "RL.CHECK", "bench", "1000000", "1000d",
            ],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let reached = info_field(node.port, "total_commands_processed").unwrap() - before;
        assert!(reached >= 2000, "{reached} of 2000 checks reached the node");
        let r: Vec<i64> = redis::cmd("RL.CHECK")
            .arg(&["bench", "1000000", "1000d", "DRY"])
            .query(&mut c)
            .unwrap();
        // redis-benchmark may send a few more than -n with -P.
        let consumed = 1_000_000 - r[2] as u64;
        assert!(
            (2000..2040).contains(&consumed),
            "{consumed} consumed for 2000 checks"
        );
        assert!(
            reached >= consumed,
            "{reached} calls reached the node for {consumed}"
        );
    }

    node.signal(libc::SIGKILL);
    assert!(node.wait_exit(Duration::from_secs(5)).is_some());
    let t = Instant::now();
    let r: Vec<i64> = redis::cmd("RL.CHECK")
        .arg(&["gone", "10", "1h", "FAILMODE", "closed"])
        .query(&mut c)
        .unwrap();
    assert!(
        t.elapsed() < Duration::from_millis(200),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(r[0], 0);
    let mut allowed = 0;
    for _ in 0..8 {
        let r: Vec<i64> = redis::cmd("RL.CHECK")
            .arg(&["gone", "10", "1h", "FAILMODE", "local"])
            .query(&mut c)
            .unwrap();
        allowed += r[0];
    }
    assert_eq!(allowed, 5, "local: 10 ÷ 2 gateways");
    let r: Vec<i64> = redis::cmd("RL.CHECK")
        .arg(&["gone", "10", "1h"])
        .query(&mut c)
        .unwrap();
    assert_eq!(r[0], 1, "the sidecar's default fail mode is open");
    let info: String = redis::cmd("INFO").query(&mut c).unwrap();
    for needle in [
        "decisions_fail_closed:1",
        "decisions_local_bucket:8",
        "decisions_fail_open:1",
    ] {
        assert!(info.contains(needle), "{needle} not in\n{info}");
    }
    assert!(!info.contains("breaker=closed"), "{info}");
}

#[test]
fn sentinel_names_the_primary() {
    if !have_tool("redis-sentinel") {
        return;
    }
    let node = Sluice::start();
    let sentinel = RedisSentinel::start(&format!(
        "sentinel monitor gw 127.0.0.1 {} 1\nsentinel down-after-milliseconds gw 5000",
        node.port
    ));
    let rt = runtime();
    rt.block_on(async {
        let client = Client::connect(Config::new(Topology::Sentinel {
            sentinels: vec![format!("127.0.0.1:{}", sentinel.port)],
            master_name: "gw".into(),
        }))
        .await;
        let d = client.check(b"k", &Limit::new(5, HOUR), 1).await.unwrap();
        assert_eq!(
            d.source,
            Source::Node(format!("127.0.0.1:{}", node.port).into())
        );
        assert_eq!(d.remaining, 4);
    });
}
