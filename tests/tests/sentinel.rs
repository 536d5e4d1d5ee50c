//! Failover by the real `redis-sentinel`: one primary, two replicas, three sentinels (quorum 2,
//! `down-after-milliseconds 2000`), and a Sentinel-aware client (redis-rs, `sentinel` feature)
//! checking all the way through a kill -9 of the primary.
//!
//! Asserted: Sentinel promotes a replica (ROLE says master), repoints the other one (INFO shows
//! the new primary's port and `master_link_status:up`), clients check on the new primary within
//! 10 s of the kill, a bucket consumed before the kill has the same state on the new primary,
//! and the old primary, restarted on its port, is turned into a replica of the new one.
//!
//! `cargo test -p sluice-tests --test sentinel -- --nocapture` prints the measured times.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use redis::sentinel::{SentinelClient, SentinelServerType};
use sluice_tests::{RedisSentinel, Sluice, have_tool, rl_check, wait_until};

const MASTER: &str = "mymaster";
/// Sentinel's `down-after-milliseconds`. Not 1000: on `+switch-master` a Sentinel arms the new
/// primary's down timer at once (`act_ping_time = now`) but may reconnect only a second after
/// its last attempt on the dead primary (its reconnect period, `SENTINEL_PING_PERIOD`). With
/// 1000 the first PONG could land just past the timer: `+sdown` on a healthy new primary, an
/// instant `+odown` from the other Sentinels' stale votes, and a second failover (seen in
/// this test's Sentinel logs about one run in ten). 2000 leaves a second of margin.
const DOWN_AFTER_MS: u32 = 2000;
/// The load loop's bounds: whichever comes first ends it. The count is ten times what a fast
/// host runs in the test, so the time bound comes first and the load flows to the end.
const LOAD_MAX_OPS: u64 = 5_000_000;
const LOAD_MAX_TIME: Duration = Duration::from_secs(90);
/// A bucket that refills slowly enough to compare across the failover: 20,000 per day.
const SURVIVOR: [&str; 3] = ["sentinel-test:survivor", "20000", "1d"];
const SURVIVOR_TAKEN: u64 = 5_000;

/// One field of an INFO reply.
fn info_field(info: &str, name: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(|v| v.trim().to_string())
}

fn try_info(node: &Sluice, section: &str) -> Option<String> {
    let mut c = redis::Client::open(node.url())
        .ok()?
        .get_connection_with_timeout(Duration::from_secs(2))
        .ok()?;
    c.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    redis::cmd("INFO").arg(section).query(&mut c).ok()
}

/// Whether `replica`'s INFO says it streams from `primary_port` with the link up.
fn follows(replica: &Sluice, primary_port: u16) -> bool {
    try_info(replica, "replication").is_some_and(|i| {
        info_field(&i, "role").as_deref() == Some("slave")
            && info_field(&i, "master_port") == Some(primary_port.to_string())
            && info_field(&i, "master_link_status").as_deref() == Some("up")
    })
}

/// The primary every sentinel names, once they agree.
fn agreed_primary(sentinels: &[RedisSentinel]) -> Option<u16> {
    let first = master_port(&sentinels[0])?;
    sentinels[1..]
        .iter()
        .all(|s| master_port(s) == Some(first))
        .then_some(first)
}

/// Prints the nodes' logs if the test fails: with the Sentinels' logs (printed by their
/// guards), they show who stopped answering whom.
struct LogsOnPanic<'a>(&'a [Sluice]);

impl Drop for LogsOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for n in self.0 {
                eprintln!("--- sluice :{} log ---\n{}", n.port, n.log());
            }
        }
    }
}

/// Where `sentinel` says the primary is.
fn master_port(sentinel: &RedisSentinel) -> Option<u16> {
    let mut c = redis::Client::open(sentinel.url())
        .ok()?
        .get_connection_with_timeout(Duration::from_secs(2))
        .ok()?;
    c.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let addr: Vec<String> = redis::cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg(MASTER)
        .query(&mut c)
        .ok()?;
    addr.get(1)?.parse().ok()
}

/// `SENTINEL <what> mymaster` as one map per node.
fn sentinel_list(sentinel: &RedisSentinel, what: &str) -> Vec<HashMap<String, String>> {
    let mut c = sentinel.client();
    redis::cmd("SENTINEL")
        .arg(what)
        .arg(MASTER)
        .query(&mut c)
        .unwrap_or_default()
}

/// The survivor bucket's state, without taking from it.
fn survivor_remaining(node: &Sluice) -> i64 {
    let mut c = node.client();
    rl_check(&mut c, &[SURVIVOR[0], SURVIVOR[1], SURVIVOR[2], "DRY"]).expect("DRY check")[2]
}

/// What the load loop saw, per node port.
#[derive(Debug, Default)]
struct Progress {
    ok: u64,
    errors: u64,
    connects: u64,
    /// When the first check succeeded, and how many did, per node port.
    by_port: HashMap<u16, (Instant, u64)>,
    last_ok: Option<Instant>,
    /// The longest time between two successful checks.
    max_gap: Duration,
}

/// A client thread that keeps checking through Sentinel, bounded in count and time; stopped
/// and joined on drop.
struct Load {
    stop: Arc<AtomicBool>,
    progress: Arc<Mutex<Progress>>,
    handle: Option<JoinHandle<()>>,
}

impl Load {
    fn start(sentinel_urls: Vec<String>) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let progress = Arc::new(Mutex::new(Progress::default()));
        let (s, p) = (stop.clone(), progress.clone());
        let handle = std::thread::spawn(move || load_loop(sentinel_urls, &s, &p));
        Load {
            stop,
            progress,
            handle: Some(handle),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&Progress) -> T) -> T {
        f(&self.progress.lock().unwrap())
    }

    fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take()
            && let Err(panic) = h.join()
            && !std::thread::panicking()
        {
            // The load thread's own assertion failed: fail the test with it.
            std::panic::resume_unwind(panic);
        }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Connects to the primary Sentinel names (get_connection asks the sentinels again on every
/// call) and learns its port.
fn connect(client: &mut SentinelClient) -> redis::RedisResult<(redis::Connection, u16)> {
    let mut c = client.get_connection()?;
    c.set_read_timeout(Some(Duration::from_secs(2)))?;
    c.set_write_timeout(Some(Duration::from_secs(2)))?;
    let port: Vec<String> = redis::cmd("CONFIG").arg("GET").arg("port").query(&mut c)?;
    let port = port.get(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    Ok((c, port))
}

fn load_loop(urls: Vec<String>, stop: &AtomicBool, progress: &Mutex<Progress>) {
    let mut client = SentinelClient::build(urls, MASTER, None, SentinelServerType::Master)
        .expect("sentinel client");
    let end = Instant::now() + LOAD_MAX_TIME;
    let mut conn: Option<(redis::Connection, u16)> = None;
    for i in 0..LOAD_MAX_OPS {
        if stop.load(Ordering::Relaxed) || Instant::now() >= end {
            break;
        }
        let Some((c, port)) = conn.as_mut() else {
            match connect(&mut client) {
                Ok(c) => {
                    conn = Some(c);
                    progress.lock().unwrap().connects += 1;
                }
                // No primary yet (the sentinels still name the dead one, or none): ask again.
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
            continue;
        };
        let key = format!("sentinel-test:load:{}", i % 64);
        let result = rl_check(c, &[&key, "1000000", "1d"]);
        let now = Instant::now();
        let mut p = progress.lock().unwrap();
        match result {
            Ok(r) if r.len() == 5 && r[0] == 1 => {
                p.ok += 1;
                if let Some(last) = p.last_ok {
                    p.max_gap = p.max_gap.max(now - last);
                }
                p.last_ok = Some(now);
                p.by_port.entry(*port).or_insert((now, 0)).1 += 1;
            }
            _ => {
                p.errors += 1;
                conn = None;
            }
        }
        drop(p);
        // A steady load, not a flood: the machine also runs three sentinels and three nodes.
        std::thread::sleep(Duration::from_micros(300));
    }
}

#[test]
fn sentinel_fails_over_under_load() {
    if !have_tool("redis-sentinel") {
        return;
    }
    let started = Instant::now();
    let node_args = ["--threads", "1"];
    let mut primary = Sluice::start_with(&node_args);
    let primary_port = primary.port;
    let master_arg = format!("127.0.0.1:{primary_port}");
    let replicas = [start_replica(&master_arg), start_replica(&master_arg)];
    let _logs = LogsOnPanic(&replicas);
    for r in &replicas {
        await_link(r, primary_port);
    }

    let sentinels = start_sentinels(primary_port);
    println!("topology up in {:?}", started.elapsed());

    consume_survivor(&primary);
    let survivor_before = survivor_remaining(&primary);
    let survivor_at = Instant::now();

    let urls: Vec<String> = sentinels.iter().map(RedisSentinel::url).collect();
    let mut load = Load::start(urls);
    let warm = wait_until(Duration::from_secs(15), || {
        load.with(|p| p.by_port.get(&primary_port).is_some_and(|e| e.1 >= 1000))
            .then_some(())
    });
    assert!(
        warm.is_some(),
        "the Sentinel client did not check on the primary: {:?}",
        load.with(|p| format!("{p:?}"))
    );

    // kill -9 the primary under load.
    primary.signal(libc::SIGKILL);
    let killed = Instant::now();
    assert!(
        primary.wait_exit(Duration::from_secs(10)).is_some(),
        "the primary did not die"
    );

    // Sentinel promotes one replica: the test follows the primary every Sentinel names.
    let new_port = wait_until(Duration::from_secs(30), || {
        agreed_primary(&sentinels).filter(|&p| p != primary_port)
    })
    .expect("Sentinel did not fail over within 30 s");
    let switched = killed.elapsed();
    let (new_primary, other) = match replicas.iter().position(|r| r.port == new_port) {
        Some(0) => (&replicas[0], &replicas[1]),
        Some(_) => (&replicas[1], &replicas[0]),
        None => panic!("Sentinel promoted {new_port}, which is none of the replicas"),
    };
    println!("Sentinel switched the primary to :{new_port} {switched:?} after the kill -9");

    every_sentinel_names(&sentinels, new_port);

    // Restart the old primary on its port now: Sentinel turns it into a replica some seconds
    // after it sees it as a primary again, which overlaps the checks below.
    let old = Sluice::start_on(primary_port, &node_args);
    let restarted = Instant::now();

    let role = wait_until(Duration::from_secs(10), || {
        new_primary
            .try_role()
            .filter(|r| matches!(r, redis::Role::Primary { .. }))
    });
    assert!(
        role.is_some(),
        "ROLE on the promoted node: {:?}",
        new_primary.try_role()
    );

    // Sentinel repoints the other replica.
    assert!(
        wait_until(Duration::from_secs(20), || follows(other, new_port)
            .then_some(()))
        .is_some(),
        "replica {} was not repointed to {new_port}: {:?}",
        other.port,
        try_info(other, "replication")
    );

    clients_resume_on(&load, new_port, killed);

    // The bucket state survived: the same remaining, give or take the refill since.
    let survivor_after = survivor_remaining(new_primary);
    let refill = || refill_allowance(survivor_at);
    let refill_now = refill();
    println!(
        "survivor bucket: {survivor_before} remaining before the kill, {survivor_after} on the new primary"
    );
    assert!(
        survivor_after >= survivor_before && survivor_after <= survivor_before + refill_now,
        "survivor bucket: {survivor_before} before the kill, {survivor_after} on the new primary (refill allowance {refill_now})"
    );

    old_primary_rejoins(&old, new_port, restarted, survivor_before, survivor_at);

    // The client kept checking on the new primary all along.
    let after = load.with(|p| p.by_port.get(&new_port).map_or(0, |e| e.1));
    assert!(
        wait_until(Duration::from_secs(10), || {
            load.with(|p| p.by_port.get(&new_port).is_some_and(|e| e.1 > after))
                .then_some(())
        })
        .is_some(),
        "the client stopped checking"
    );
    stop_and_report(&mut load, primary_port, new_port, other.port);
    one_failover_only(&sentinels, new_port, new_primary);
    println!("test took {:?}", started.elapsed());
}

/// Every sentinel switched once, and none ever saw the promoted node down: a second failover
/// loses quota for nothing, and is the sign of a new primary that stopped answering.
fn one_failover_only(sentinels: &[RedisSentinel], new_port: u16, new_primary: &Sluice) {
    let sdown = format!("+sdown master {MASTER} 127.0.0.1 {new_port}");
    for s in sentinels {
        let log = s.log();
        let switches = log.matches("+switch-master").count();
        assert!(
            switches == 1 && !log.contains(&sdown),
            "sentinel {}: {switches} switches, new primary seen down: {}\nnew primary's log:\n{}",
            s.port,
            log.contains(&sdown),
            new_primary.log()
        );
    }
}

/// Sentinel turns the restarted old primary into a replica of the new one. It notices the
/// restart on its next INFO of the instance (every 10 s while it is down): on a busy CI
/// machine that has taken just over 30 s, hence the longer deadline.
fn old_primary_rejoins(
    old: &Sluice,
    new_port: u16,
    restarted: Instant,
    survivor_before: i64,
    survivor_at: Instant,
) {
    let converted = wait_until(Duration::from_secs(60), || {
        follows(old, new_port).then(|| restarted.elapsed())
    });
    let converted = converted.unwrap_or_else(|| {
        panic!(
            "the restarted old primary was not converted within 60 s: {:?}\nlog:\n{}",
            try_info(old, "replication"),
            old.log()
        )
    });
    println!(
        "Sentinel converted the restarted old primary into a replica {converted:?} after its restart"
    );
    match old.try_role() {
        Some(redis::Role::Replica { primary_port, .. }) => assert_eq!(primary_port, new_port),
        other => panic!("ROLE on the old primary: {other:?}"),
    }
    // Its copy of the survivor bucket came from the new primary.
    assert!(
        wait_until(Duration::from_secs(10), || {
            let r = survivor_remaining(old);
            (r >= survivor_before && r <= survivor_before + refill_allowance(survivor_at))
                .then_some(())
        })
        .is_some(),
        "old primary's survivor bucket: {} (before the kill {survivor_before}, refill allowance {})",
        survivor_remaining(old),
        refill_allowance(survivor_at)
    );
}

/// What the survivor bucket (20,000 a day) may have refilled since `since`, plus one.
fn refill_allowance(since: Instant) -> i64 {
    (since.elapsed().as_secs_f64() * 20_000.0 / 86_400.0).ceil() as i64 + 1
}

/// A replica of `master_arg` (`host:port`).
fn start_replica(master_arg: &str) -> Sluice {
    Sluice::start_with(&["--threads", "1", "--replicaof", master_arg])
}

/// Waits until replica `r` is linked to the primary on `primary_port`.
fn await_link(r: &Sluice, primary_port: u16) {
    assert!(
        wait_until(Duration::from_secs(20), || follows(r, primary_port)
            .then_some(()))
        .is_some(),
        "replica {} did not link to the primary; log:\n{}",
        r.port,
        r.log()
    );
}

/// Three sentinels monitoring the primary on `primary_port`, once each knows both replicas
/// (from the primary's INFO) and the two other sentinels (from __sentinel__:hello, our
/// pub/sub): before that, no failover can be decided.
fn start_sentinels(primary_port: u16) -> Vec<RedisSentinel> {
    let config = format!(
        "sentinel monitor {MASTER} 127.0.0.1 {primary_port} 2\n\
         sentinel down-after-milliseconds {MASTER} {DOWN_AFTER_MS}\n\
         sentinel failover-timeout {MASTER} 10000\n\
         sentinel parallel-syncs {MASTER} 1"
    );
    let sentinels: Vec<RedisSentinel> = (0..3).map(|_| RedisSentinel::start(&config)).collect();
    for s in &sentinels {
        let known = wait_until(Duration::from_secs(20), || {
            let replicas = sentinel_list(s, "REPLICAS");
            let peers = sentinel_list(s, "SENTINELS");
            (replicas.len() == 2 && peers.len() == 2).then_some(())
        });
        assert!(
            known.is_some(),
            "sentinel {} did not discover the topology: replicas {:?}, sentinels {:?}",
            s.port,
            sentinel_list(s, "REPLICAS"),
            sentinel_list(s, "SENTINELS")
        );
    }
    sentinels
}

/// A bucket consumed before the kill, on every replica before the kill (WAIT).
fn consume_survivor(primary: &Sluice) {
    let mut c = primary.client();
    let taken = SURVIVOR_TAKEN.to_string();
    let r = rl_check(
        &mut c,
        &[SURVIVOR[0], SURVIVOR[1], SURVIVOR[2], "COST", &taken],
    )
    .expect("consume survivor");
    assert_eq!(r[0], 1, "{r:?}");
    let acked: i64 = redis::cmd("WAIT").arg(2).arg(5000).query(&mut c).unwrap();
    assert_eq!(acked, 2, "both replicas acked the survivor bucket");
}

/// Every sentinel names the new primary before the old one comes back (empty, and a primary
/// in its own eyes): a sentinel still naming the old address would send clients there.
fn every_sentinel_names(sentinels: &[RedisSentinel], new_port: u16) {
    for s in sentinels {
        assert!(
            wait_until(Duration::from_secs(10), || {
                master_port(s).filter(|&p| p == new_port)
            })
            .is_some(),
            "sentinel {} still names {:?}",
            s.port,
            master_port(s)
        );
    }
}

/// Clients check on the new primary within 10 s of the kill.
fn clients_resume_on(load: &Load, new_port: u16, killed: Instant) {
    let resumed = wait_until(Duration::from_secs(15), || {
        load.with(|p| p.by_port.get(&new_port).map(|e| e.0))
    })
    .map(|first| first.saturating_duration_since(killed))
    .unwrap_or_else(|| {
        panic!(
            "no check on the new primary: {:?}",
            load.with(|p| format!("{p:?}"))
        )
    });
    println!("clients checked on the new primary {resumed:?} after the kill -9");
    assert!(
        resumed < Duration::from_secs(10),
        "clients resumed {resumed:?} after the kill"
    );
}

/// Stops the load and reports it; no client ever checked on the replica that stayed one.
fn stop_and_report(load: &mut Load, old_port: u16, new_port: u16, other_port: u16) {
    load.stop();
    load.with(|p| {
        println!(
            "load: {} checks ({} on the old primary, {} on the new), {} errors, {} connections, longest gap {:?}",
            p.ok,
            p.by_port.get(&old_port).map_or(0, |e| e.1),
            p.by_port.get(&new_port).map_or(0, |e| e.1),
            p.errors,
            p.connects,
            p.max_gap
        );
        assert!(
            !p.by_port.contains_key(&other_port),
            "a client checked on a replica: {:?}",
            p.by_port.keys()
        );
    });
}
