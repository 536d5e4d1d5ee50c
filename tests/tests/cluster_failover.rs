//! A cluster shard's failover by the real `redis-sentinel`: two primaries with one replica
//! each (`sluice cluster create --replicas 1` on four nodes), three sentinels watching both
//! primaries (two `sentinel monitor` names, quorum 2, `down-after-milliseconds 2000`), and a
//! kill -9 of one primary.
//!
//! Asserted: Sentinel promotes that shard's replica; every remaining node's CLUSTER SLOTS
//! shows the promoted node as the owner of the shard's slots within seconds (the time from the
//! kill is printed); the shard's buckets keep their state, seen through a redis-rs cluster
//! client; the old primary, restarted on its port with its config file, never serves a slot it
//! lost (CLUSTERDOWN while it asks its peers, then MOVED to the new owner) and is made a
//! replica of the new primary by Sentinel.
//!
//! `cargo test -p sluice-tests --test cluster_failover -- --nocapture` prints the times.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use redis::cluster_async::ClusterConnection;
use sluice_tests::{
    RedisSentinel, SlotsEntry, TempDir, cluster_client, cluster_node, cluster_rl_check,
    cluster_slots, covers_every_slot, have_tool, key_slot, owner_of, runtime, try_connect,
    two_shard_cluster, wait_until,
};

const SHARDS: [&str; 2] = ["shard0", "shard1"];
/// Buckets `fo:i` took `cost(i)` of 100 per day before the kill.
const PRELOAD: usize = 600;

fn pre_cost(i: usize) -> i64 {
    1 + (i % 7) as i64
}

fn info_field(port: u16, section: &str, name: &str) -> Option<String> {
    let text: String = redis::cmd("INFO")
        .arg(section)
        .query(&mut try_connect(port)?)
        .ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(|v| v.trim().to_string())
}

/// Whether the node at `replica` streams from `primary` with the link up.
fn follows(replica: u16, primary: u16) -> bool {
    info_field(replica, "replication", "role").as_deref() == Some("slave")
        && info_field(replica, "replication", "master_port") == Some(primary.to_string())
        && info_field(replica, "replication", "master_link_status").as_deref() == Some("up")
}

/// Where `sentinel` says the primary `name` is.
fn master_port(sentinel: &RedisSentinel, name: &str) -> Option<u16> {
    let mut c = try_connect(sentinel.port)?;
    let addr: Vec<String> = redis::cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg(name)
        .query(&mut c)
        .ok()?;
    addr.get(1)?.parse().ok()
}

/// `SENTINEL <what> <name>` as one map per node.
fn sentinel_list(sentinel: &RedisSentinel, what: &str, name: &str) -> Vec<HashMap<String, String>> {
    try_connect(sentinel.port)
        .and_then(|mut c| {
            redis::cmd("SENTINEL")
                .arg(what)
                .arg(name)
                .query(&mut c)
                .ok()
        })
        .unwrap_or_default()
}

/// The ports owning each preloaded bucket that came back other than 100 - cost - 1 (DRY).
async fn wrong_buckets(c: &mut ClusterConnection) -> Vec<(String, i64, i64)> {
    let mut wrong = Vec::new();
    for i in 0..PRELOAD {
        let key = format!("fo:{i}");
        let r = cluster_rl_check(c, &[&key, "100", "1d", "DRY"])
            .await
            .unwrap();
        if r[2] != 100 - pre_cost(i) - 1 {
            wrong.push((key, 100 - pre_cost(i) - 1, r[2]));
        }
    }
    wrong
}

/// `RL.CHECK` straight to one node: the reply, or `CODE detail` of its error.
fn raw_check(port: u16, key: &str) -> String {
    let Some(mut c) = try_connect(port) else {
        return "no connection".into();
    };
    let r: redis::RedisResult<Vec<i64>> = redis::cmd("RL.CHECK")
        .arg(key)
        .arg(100)
        .arg("1d")
        .arg("DRY")
        .query(&mut c);
    match r {
        Ok(r) => format!("served {r:?}"),
        Err(e) => format!("{} {}", e.code().unwrap_or("?"), e.detail().unwrap_or("")),
    }
}

#[test]
fn sentinel_fails_over_one_shard() {
    if !have_tool("redis-sentinel") {
        return;
    }
    let started = Instant::now();
    let dir = TempDir::new("cluster-failover");
    let config = |i: usize| dir.path().join(format!("nodes-{i}.conf"));
    let mut nodes = two_shard_cluster(&dir, &[], &[]);
    let port: Vec<u16> = nodes.iter().map(|n| n.port).collect();
    // Nodes 0 and 1 are the primaries, node 2 replicates node 0 and node 3 node 1.
    let (p0, p1, r0, r1) = (port[0], port[1], port[2], port[3]);
    let slots = cluster_slots(p1).expect("CLUSTER SLOTS");
    assert!(covers_every_slot(&slots));
    for e in &slots {
        let replica = if e.primary == p0 { r0 } else { r1 };
        assert_eq!(e.replicas, vec![replica], "{e:?}");
    }
    assert!(follows(r0, p0) && follows(r1, p1));

    // Buckets on both shards, on the replicas too before the kill (WAIT).
    let rt = runtime();
    preload_and_wait(&rt, vec![nodes[0].url(), nodes[1].url()], [p0, p1]);
    let on_shard0 = (0..PRELOAD)
        .filter(|i| owner_of(&slots, key_slot(format!("fo:{i}").as_bytes())) == Some(p0))
        .count();
    assert!(on_shard0 > PRELOAD / 4, "{on_shard0} buckets on shard 0");

    let sentinels = start_sentinels(p0, p1);
    println!("topology up in {:?}", started.elapsed());

    // kill -9 of shard 0's primary.
    nodes[0].signal(libc::SIGKILL);
    let killed = Instant::now();
    assert!(nodes[0].wait_exit(Duration::from_secs(10)).is_some());

    let promoted = wait_until(Duration::from_secs(30), || {
        master_port(&sentinels[0], SHARDS[0]).filter(|&p| p != p0)
    })
    .expect("Sentinel did not fail shard 0 over within 30 s");
    assert_eq!(
        promoted, r0,
        "Sentinel promoted a node that is not shard 0's replica"
    );
    println!(
        "Sentinel promoted :{r0} {:?} after the kill -9",
        killed.elapsed()
    );

    // Every remaining node shows the promoted node as the owner of shard 0's slots.
    let expected = promoted_slots(&slots, p0, r0);
    let everywhere = every_node_shows(&expected, [p1, r0, r1], killed);
    println!(
        "every remaining node's CLUSTER SLOTS showed the new owner {everywhere:?} after the kill -9"
    );
    assert!(everywhere < Duration::from_secs(20));

    // The buckets of both shards kept their state.
    let wrong = rt.block_on(async {
        let mut c = cluster_client(vec![nodes[1].url(), nodes[2].url()]).await;
        wrong_buckets(&mut c).await
    });
    assert_eq!(wrong, vec![], "buckets reset or changed by the failover");

    // The old primary comes back on its port with its config file (epoch 1, primary of shard
    // 0): it asks its peers first and never serves a slot it lost.
    let (probe, slot) = (0..10_000)
        .map(|i| format!("fo:{i}"))
        .map(|k| {
            let s = key_slot(k.as_bytes());
            (k, s)
        })
        .find(|(_, s)| owner_of(&slots, *s) == Some(p0))
        .unwrap();
    nodes[0] = cluster_node(p0, &config(0), &[]);
    let restarted = Instant::now();
    let moved = format!("MOVED {slot} 127.0.0.1:{r0}");
    old_primary_stands_down(p0, &probe, &moved);
    assert_eq!(cluster_slots(p0).as_ref(), Some(&expected));

    // Sentinel makes it a replica of the new primary.
    let converted = wait_until(Duration::from_secs(30), || {
        follows(p0, r0).then(|| restarted.elapsed())
    })
    .unwrap_or_else(|| {
        panic!(
            "the old primary was not made a replica of :{r0}: role {:?}, master_port {:?}\nlog:\n{}",
            info_field(p0, "replication", "role"),
            info_field(p0, "replication", "master_port"),
            nodes[0].log()
        )
    });
    println!("Sentinel made the old primary a replica of :{r0} {converted:?} after its restart");
    assert_eq!(raw_check(p0, &probe), moved, "still a replica in the table");
    let wrong = rt.block_on(async {
        let mut c = cluster_client(vec![nodes[0].url()]).await;
        wrong_buckets(&mut c).await
    });
    assert_eq!(wrong, vec![], "buckets after the old primary came back");
    println!("test took {:?}", started.elapsed());
}

/// Preloads `PRELOAD` buckets over the cluster at `urls`, then waits until the replica of each
/// primary in `primaries` has acknowledged them.
fn preload_and_wait(rt: &tokio::runtime::Runtime, urls: Vec<String>, primaries: [u16; 2]) {
    rt.block_on(async {
        let mut c = cluster_client(urls).await;
        for i in 0..PRELOAD {
            let cost = pre_cost(i).to_string();
            let r = cluster_rl_check(&mut c, &[&format!("fo:{i}"), "100", "1d", "COST", &cost])
                .await
                .unwrap();
            assert_eq!(r[0], 1);
        }
    });
    for p in primaries {
        let acked: i64 = redis::cmd("WAIT")
            .arg(1)
            .arg(5000)
            .query(&mut try_connect(p).unwrap())
            .unwrap();
        assert_eq!(acked, 1, "the replica of :{p} acked the preload");
    }
}

/// Three sentinels monitoring both shards (primaries `p0` and `p1`), once each knows each
/// shard's replica and the two other sentinels.
fn start_sentinels(p0: u16, p1: u16) -> Vec<RedisSentinel> {
    let sentinel_config = format!(
        "sentinel monitor {} 127.0.0.1 {p0} 2\n\
         sentinel down-after-milliseconds {0} 2000\n\
         sentinel failover-timeout {0} 10000\n\
         sentinel parallel-syncs {0} 1\n\
         sentinel monitor {} 127.0.0.1 {p1} 2\n\
         sentinel down-after-milliseconds {1} 2000\n\
         sentinel failover-timeout {1} 10000\n\
         sentinel parallel-syncs {1} 1",
        SHARDS[0], SHARDS[1]
    );
    let sentinels: Vec<RedisSentinel> = (0..3)
        .map(|_| RedisSentinel::start(&sentinel_config))
        .collect();
    for s in &sentinels {
        for name in SHARDS {
            let known = wait_until(Duration::from_secs(20), || {
                (sentinel_list(s, "REPLICAS", name).len() == 1
                    && sentinel_list(s, "SENTINELS", name).len() == 2)
                    .then_some(())
            });
            assert!(
                known.is_some(),
                "sentinel {} did not discover {name}: replicas {:?}, sentinels {:?}",
                s.port,
                sentinel_list(s, "REPLICAS", name),
                sentinel_list(s, "SENTINELS", name)
            );
        }
    }
    sentinels
}

/// `slots` after shard 0's replica `r0` took over from `p0`, which became its replica.
fn promoted_slots(slots: &[SlotsEntry], p0: u16, r0: u16) -> Vec<SlotsEntry> {
    // Every remaining node shows the promoted node as the owner of shard 0's slots.
    slots
        .iter()
        .map(|e| {
            let mut e = e.clone();
            if e.primary == p0 {
                e.primary = r0;
                e.replicas = vec![p0];
            }
            e
        })
        .collect()
}

/// Waits until every node of `ports` shows `expected` in CLUSTER SLOTS; how long after
/// `killed` that was.
fn every_node_shows(expected: &[SlotsEntry], ports: [u16; 3], killed: Instant) -> Duration {
    let mut last_seen = BTreeMap::new();
    wait_until(Duration::from_secs(20), || {
        let mut all = true;
        for p in ports {
            let seen = cluster_slots(p);
            all &= seen.as_deref() == Some(expected);
            last_seen.insert(p, seen);
        }
        all.then(|| killed.elapsed())
    })
    .unwrap_or_else(|| panic!("the nodes' CLUSTER SLOTS: {last_seen:#?}"))
}

/// The old primary, back with its config file (epoch 1, primary of shard 0), asks its peers
/// first and never serves a slot it lost: it answers `probe` with `moved` (or CLUSTERDOWN
/// while it asks), never with a check.
fn old_primary_stands_down(p0: u16, probe: &str, moved: &str) {
    let mut answers = BTreeMap::<String, u32>::new();
    let stood_down = wait_until(Duration::from_secs(10), || {
        let a = raw_check(p0, probe);
        *answers.entry(a.clone()).or_default() += 1;
        (a == moved).then_some(())
    });
    assert!(
        stood_down.is_some(),
        "the old primary's answers: {answers:?}"
    );
    assert!(
        answers
            .keys()
            .all(|a| *a == moved || a.starts_with("CLUSTERDOWN")),
        "the old primary served a slot it lost: {answers:?}"
    );
}

/// Both shards fail over at once (two replicas promoted within one table epoch): every node
/// must end up with one table in which both promoted nodes are primaries.
#[test]
fn two_promotions_in_one_epoch_converge() {
    let dir = TempDir::new("cluster-promotions");
    let nodes = two_shard_cluster(&dir, &[], &[]);
    // Nodes 2 and 3 replicate nodes 0 and 1: promote both at the same time.
    let promote = |port: u16| {
        std::thread::spawn(move || {
            let r: String = redis::cmd("REPLICAOF")
                .arg("NO")
                .arg("ONE")
                .query(&mut try_connect(port).unwrap())
                .unwrap();
            assert_eq!(r, "OK");
        })
    };
    let (a, b) = (promote(nodes[2].port), promote(nodes[3].port));
    a.join().unwrap();
    b.join().unwrap();
    let table = |port: u16| -> Option<String> {
        redis::cmd("CLUSTER")
            .arg("GETTABLE")
            .query(&mut try_connect(port)?)
            .ok()
    };
    let mut last = Vec::new();
    let converged = wait_until(Duration::from_secs(10), || {
        last = nodes.iter().map(|n| table(n.port)).collect();
        let first = last[0].clone()?;
        let promoted_both = cluster_slots(nodes[0].port).is_some_and(|s| {
            s.iter()
                .all(|e| e.primary == nodes[2].port || e.primary == nodes[3].port)
        });
        (last.iter().all(|t| t.as_ref() == Some(&first)) && promoted_both).then_some(())
    });
    assert!(converged.is_some(), "the nodes' tables: {last:#?}");
}
