//! Regions sharing GLOBAL rules through a real etcd: real `sluice` processes on loopback,
//! `--rebalance-interval 1s` (so a lease of 3 s), one GLOBAL rule of 1,000 per minute.
//!
//! Times are asserted in rebalance intervals, with one interval of slack for the demand
//! sample that first sees new traffic (it can start up to one interval after the traffic),
//! and one for a loaded machine; each test prints the times it measured.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sluice_tests::{
    Etcd, Sluice, TempDir, free_port, http_get, primaries, try_connect, wait_until,
};

const LIMIT: f64 = 1000.0;
const PERIOD_SECS: f64 = 60.0;
const INTERVAL: Duration = Duration::from_secs(1);
const LEASE: Duration = Duration::from_secs(3);

/// A rules file with the one GLOBAL rule `g`.
fn rules_file(dir: &TempDir) -> String {
    let path = dir.path().join("rules.toml");
    std::fs::write(&path, "[g]\nlimit = 1000\nperiod = \"1m\"\nglobal = true\n").unwrap();
    path.to_str().unwrap().to_string()
}

fn region_flags<'a>(region: &'a str, etcd: &'a str, rules: &'a str) -> Vec<&'a str> {
    vec![
        "--region",
        region,
        "--regions-etcd",
        etcd,
        "--rebalance-interval",
        "1s",
        "--rules",
        rules,
    ]
}

/// `INFO regions` of the node at `port`.
fn info(port: u16) -> String {
    let Some(mut c) = try_connect(port) else {
        return String::new();
    };
    redis::cmd("INFO")
        .arg("regions")
        .query::<String>(&mut c)
        .unwrap_or_default()
}

fn field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

/// The share of `g` the node at `port` enforces.
fn share(port: u16) -> Option<f64> {
    let i = info(port);
    let v = field(&i, "global_rule_g")?;
    v.strip_prefix("share=")?.split(',').next()?.parse().ok()
}

fn coordinator(port: u16) -> bool {
    field(&info(port), "region_coordinator") == Some("1")
}

/// Waits up to `within` for `port`'s share to be in `range`; the time it took.
fn share_reaches(port: u16, range: std::ops::RangeInclusive<f64>, within: Duration) -> Duration {
    let start = Instant::now();
    wait_until(within, || share(port).filter(|s| range.contains(s))).unwrap_or_else(|| {
        panic!(
            "share of :{port} not in {range:?} within {within:?}; INFO:\n{}",
            info(port)
        )
    });
    start.elapsed()
}

/// Every 100 ms, `per_tick` pipelined `RL.HIT g u` on one node (changed with `set`).
/// Bounded: it stops on drop or after 120 s.
struct Load {
    per_tick: Arc<AtomicU64>,
    counts: Arc<Counts>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

/// Counts of one load generator.
#[derive(Default)]
struct Counts {
    allowed: AtomicU64,
    /// Pipelines answered with at least one denial.
    denied_rounds: AtomicU64,
}

impl Load {
    fn start(port: u16, per_tick: u64) -> Load {
        let per_tick = Arc::new(AtomicU64::new(per_tick));
        let counts = Arc::new(Counts::default());
        let stop = Arc::new(AtomicBool::new(false));
        let (p, k, s) = (per_tick.clone(), counts.clone(), stop.clone());
        let handle = std::thread::spawn(move || {
            let mut c = try_connect(port).expect("connect");
            // A pipeline sent while the node is stopped waits for the end of the pause.
            c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
            let deadline = Instant::now() + Duration::from_secs(120);
            while !s.load(Ordering::Relaxed) && Instant::now() < deadline {
                let mut pipe = redis::pipe();
                for _ in 0..p.load(Ordering::Relaxed) {
                    pipe.cmd("RL.HIT").arg("g").arg("u");
                }
                if let Ok(replies) = pipe.query::<Vec<Vec<i64>>>(&mut c) {
                    let n = replies.iter().filter(|r| r[0] == 1).count();
                    k.allowed.fetch_add(n as u64, Ordering::Relaxed);
                    if n < replies.len() {
                        k.denied_rounds.fetch_add(1, Ordering::Relaxed);
                    }
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Load {
            per_tick,
            counts,
            stop,
            handle: Some(handle),
        }
    }

    fn allowed(&self) -> u64 {
        self.counts.allowed.load(Ordering::Relaxed)
    }

    fn denied_rounds(&self) -> u64 {
        self.counts.denied_rounds.load(Ordering::Relaxed)
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// The exact global limit over `elapsed` from fresh buckets (a token bucket of capacity
/// 1,000 refilled at 1,000 per minute), and the README's bound on the split's overshoot: one
/// rebalance interval's worth of the limit per region.
fn exact_and_bound(elapsed: Duration, regions: f64) -> (f64, f64) {
    let exact = LIMIT + LIMIT * elapsed.as_secs_f64() / PERIOD_SECS;
    let bound = regions * LIMIT * INTERVAL.as_secs_f64() / PERIOD_SECS;
    (exact, bound)
}

#[test]
fn two_regions_split_by_demand_follow_traffic_and_fall_to_the_minimum_without_etcd() {
    let dir = TempDir::new("regions-two");
    let mut etcd = Etcd::start();
    let url = etcd.url();
    let rules = rules_file(&dir);
    let metrics_port = free_port().to_string();
    let mut flags = region_flags("mumbai", &url, &rules);
    flags.extend(["--metrics-port", &metrics_port]);
    let a = Sluice::start_with(&flags);
    let b = Sluice::start_with(&region_flags("hyderabad", &url, &rules));
    // Learning: the region started last enforces at most the minimum (0.5 ÷ 2 regions) for
    // its first lease, then both split equally.
    let learning = share_reaches(b.port, 0.0..=0.25, LEASE);
    assert!(learning < LEASE, "{learning:?}");
    share_reaches(a.port, 0.49..=0.51, LEASE * 3);
    share_reaches(b.port, 0.49..=0.51, LEASE * 3);

    // 600:400.
    let started = Instant::now();
    let la = Load::start(a.port, 30);
    let lb = Load::start(b.port, 20);
    // 3 intervals, one more for the first demand sample, and one for a loaded CI machine
    // (measured on a quiet one: 2.0-3.1 s, printed below).
    let within = INTERVAL * 5;
    let took_a = share_reaches(a.port, 0.54..=0.66, within);
    let took_b = share_reaches(b.port, 0.36..=0.44, within);
    eprintln!("600:400 reached in {took_a:?} (mumbai), {took_b:?} (hyderabad)");
    // RL.REGION INFO shows both regions' records and the regional limit.
    let mut c = a.client();
    let region_info: redis::Value = redis::cmd("RL.REGION").arg("INFO").query(&mut c).unwrap();
    let text = format!("{region_info:?}");
    for needle in [
        "mumbai",
        "hyderabad",
        "learning_until_ms",
        "last_rebalance_ms",
    ] {
        assert!(text.contains(needle), "{needle} missing from {text}");
    }
    let metrics = http_get(metrics_port.parse().unwrap(), "/metrics").unwrap_or_default();
    for needle in [
        "sluice_region_share{rule=\"g\"} 0.",
        "sluice_region_published_share{rule=\"g\",region=\"hyderabad\"} 0.",
        "sluice_region_coordinator 1",
        "sluice_region_etcd_up 1",
    ] {
        assert!(
            metrics.contains(needle),
            "{needle} missing from:\n{metrics}"
        );
    }
    let bad: redis::RedisResult<redis::Value> = redis::cmd("RL.REGION").arg("FROB").query(&mut c);
    assert!(bad.unwrap_err().to_string().contains("unknown subcommand"));

    // Traffic moves: 200:800. Mumbai falls to its minimum, Hyderabad takes the rest.
    la.per_tick.store(10, Ordering::Relaxed);
    lb.per_tick.store(40, Ordering::Relaxed);
    let took = share_reaches(b.port, 0.70..=0.80, within);
    share_reaches(a.port, 0.24..=0.26, within);
    eprintln!("200:800 followed in {took:?}");

    // etcd gone: each keeps its share for the lease, then falls to its minimum.
    etcd.stop();
    let stopped = Instant::now();
    std::thread::sleep(INTERVAL);
    let kept = share(b.port).unwrap();
    assert!(
        (0.70..=0.80).contains(&kept) || stopped.elapsed() >= LEASE,
        "hyderabad dropped its share {kept} before its lease"
    );
    assert!(field(&info(b.port), "region_etcd") == Some("unreachable"));
    share_reaches(b.port, 0.24..=0.26, LEASE + INTERVAL * 2);
    let fell = stopped.elapsed();
    // The lease runs from the last renewal (up to one interval before etcd stopped), less a
    // quarter interval of margin.
    assert!(
        fell >= LEASE - INTERVAL * 3 / 2,
        "fell after {fell:?}, before the lease"
    );
    std::thread::sleep(INTERVAL * 2);

    let (allowed_a, allowed_b) = (la.allowed(), lb.allowed());
    drop(la);
    drop(lb);
    let allowed = allowed_a + allowed_b;
    let (exact, bound) = exact_and_bound(started.elapsed(), 2.0);
    eprintln!(
        "allowed {allowed} (mumbai {allowed_a}, hyderabad {allowed_b}) over {:?}; exact global limit {exact:.0}, bound +{bound:.0}",
        started.elapsed()
    );
    assert!(
        allowed as f64 <= exact + bound,
        "{allowed} > {exact:.0} + {bound:.0}"
    );
}

/// A region of two cluster nodes (`sluice cluster create` of both, as primaries).
fn two_node_region(dir: &TempDir, name: &str, flags: &[&str]) -> Vec<Sluice> {
    primaries(dir, name, &[flags, flags])
}

/// The index of the one coordinator among `nodes`, once there is exactly one.
fn the_coordinator(nodes: &[Sluice], within: Duration) -> usize {
    wait_until(within, || {
        let c: Vec<usize> = (0..nodes.len())
            .filter(|&i| coordinator(nodes[i].port))
            .collect();
        (c.len() == 1).then(|| c[0])
    })
    .unwrap_or_else(|| {
        panic!(
            "no single coordinator among {:?}",
            nodes.iter().map(|n| n.port).collect::<Vec<_>>()
        )
    })
}

#[test]
fn three_regions_survive_a_dead_region_and_a_dead_coordinator() {
    let dir = TempDir::new("regions-three");
    let etcd = Etcd::start();
    let url = etcd.url();
    let rules = rules_file(&dir);
    let mut a = two_node_region(&dir, "a", &region_flags("a", &url, &rules));
    let b = two_node_region(&dir, "b", &region_flags("b", &url, &rules));
    let c = Sluice::start_with(&region_flags("c", &url, &rules));
    let ca = the_coordinator(&a, LEASE * 2);
    let cb = the_coordinator(&b, LEASE * 2);
    // No traffic: equal thirds (minimum 0.5 ÷ 3), on the coordinator and the other node alike.
    let third = 0.32..=0.34;
    for n in a.iter().chain(&b).chain([&c]) {
        share_reaches(n.port, third.clone(), LEASE * 4);
    }
    assert_eq!(share(a[0].port), share(a[1].port));
    assert_eq!(share(b[0].port), share(b[1].port));

    // Region c dies: after its lease, a and b take its share but its reserved minimum
    // (it may only be cut off): (1 - 1/6) / 2 each.
    drop(c);
    let survivors = 0.41..=0.42;
    let took = share_reaches(a[ca].port, survivors.clone(), LEASE + INTERVAL * 4);
    share_reaches(b[cb].port, survivors.clone(), INTERVAL * 3);
    share_reaches(b[1 - cb].port, survivors.clone(), INTERVAL * 2);
    eprintln!("a dead region's share taken in {took:?}");

    // Region a's coordinator dies: the other node is elected after its lease, learns (at
    // most the minimum), then grows back into what is free.
    let survivor = a.remove(1 - ca);
    drop(a);
    let killed = Instant::now();
    wait_until(LEASE + INTERVAL * 3, || {
        coordinator(survivor.port).then_some(())
    })
    .expect("the surviving node became coordinator");
    eprintln!("coordinator elected {:?} after the kill", killed.elapsed());
    assert!(
        share(survivor.port).unwrap() <= 0.17,
        "learning: {}",
        info(survivor.port)
    );
    let back = share_reaches(survivor.port, survivors, LEASE + INTERVAL * 3);
    eprintln!("grew back {back:?} after the election");
    // b never took more than what a left free.
    assert!(share(b[cb].port).unwrap() <= 0.42);
}

/// How long the paused region is stopped.
const PAUSE: Duration = Duration::from_secs(20);
/// Requests queued on the paused region's socket.
const QUEUED: usize = 600;

/// Sends SIGCONT to a node on drop, so that a failing test never leaves it stopped (its own
/// drop then kills it by its PID). Declared after the node, so dropped before it.
struct Resume<'a>(&'a Sluice);

impl Drop for Resume<'_> {
    fn drop(&mut self) {
        self.0.signal(libc::SIGCONT);
    }
}

/// A region paused past its share's deadline comes back at the minimum, not at its old share.
///
/// Two single-node regions on a real etcd, `--rebalance-interval 1s` (a lease of 3 s), one
/// GLOBAL rule of 1,000 per minute. Mumbai takes most of the traffic and so most of the
/// share; both regions' buckets are spent; then Mumbai is stopped (SIGSTOP) for 20 s. Its
/// lease ends, Hyderabad grows into all but Mumbai's reserved minimum, and 600 requests queue
/// on Mumbai's socket. On SIGCONT those 600 are the first thing Mumbai runs: each must see its
/// share lapsed (the deadline the share carries) and be checked at the minimum, before the
/// region thread has said a word to etcd. The total allowed from the moment both were spent
/// is held to the exact global refill plus the bound docs/regions.md states.
#[test]
fn a_region_paused_past_its_deadline_comes_back_at_the_minimum() {
    let dir = TempDir::new("region-pause");
    let etcd = Etcd::start();
    let url = etcd.url();
    let rules = rules_file(&dir);
    let mumbai = Sluice::start_with(&region_flags("mumbai", &url, &rules));
    let hyderabad = Sluice::start_with(&region_flags("hyderabad", &url, &rules));
    share_reaches(mumbai.port, 0.49..=0.51, LEASE * 4);
    share_reaches(hyderabad.port, 0.49..=0.51, LEASE * 4);

    // 400:100 a second: Mumbai grows to 0.75 (Hyderabad keeps its minimum, 0.25), and both
    // spend their buckets.
    let lm = Load::start(mumbai.port, 40);
    let lh = Load::start(hyderabad.port, 10);
    share_reaches(mumbai.port, 0.70..=0.76, INTERVAL * 8);
    share_reaches(hyderabad.port, 0.24..=0.26, INTERVAL * 4);
    let (m_denied, h_denied) = (lm.denied_rounds(), lh.denied_rounds());
    wait_until(INTERVAL * 10, || {
        (lm.denied_rounds() >= m_denied + 2 && lh.denied_rounds() >= h_denied + 2).then_some(())
    })
    .expect("both regions spent their buckets");
    let old_share = share(mumbai.port).unwrap();

    // Both spent: from here the exact global limit allows its refill, 1,000 a minute.
    let spent = Instant::now();
    let (m0, h0) = (lm.allowed(), lh.allowed());
    // Connected now: a client's handshake would wait for the end of the pause.
    let mut queued_conn = try_connect(mumbai.port).expect("connect");
    queued_conn
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let resume = Resume(&mumbai);
    mumbai.signal(libc::SIGSTOP);
    let stopped = Instant::now();
    // Hyderabad sees Mumbai's lease end and grows into all but Mumbai's reserved minimum.
    share_reaches(hyderabad.port, 0.74..=0.76, LEASE + INTERVAL * 6);
    let grown = stopped.elapsed();
    // 600 requests wait on Mumbai's socket for the end of the pause.
    let queued = std::thread::spawn(move || {
        let mut pipe = redis::pipe();
        for _ in 0..QUEUED {
            pipe.cmd("RL.HIT").arg("g").arg("u");
        }
        let replies: Vec<Vec<i64>> = pipe.query(&mut queued_conn).expect("queued pipeline");
        replies.iter().filter(|r| r[0] == 1).count() as u64
    });
    std::thread::sleep(PAUSE.saturating_sub(stopped.elapsed()));
    drop(resume);
    let paused = stopped.elapsed();
    let burst = queued.join().expect("queued client");
    // A little more traffic on both after the pause, then stop counting.
    std::thread::sleep(INTERVAL * 2);
    let (m1, h1) = (lm.allowed(), lh.allowed());
    let elapsed = spent.elapsed();
    drop(lm);
    drop(lh);

    let allowed = (m1 - m0) + (h1 - h0) + burst;
    let exact = LIMIT * elapsed.as_secs_f64() / PERIOD_SECS;
    // docs/regions.md: one rebalance interval's worth of the limit per region.
    let bound = 2.0 * LIMIT * INTERVAL.as_secs_f64() / PERIOD_SECS;
    // Mumbai, spent, then paused past its deadline, then learning: at most its minimum's
    // refill over the whole time (its share before the pause lasted the few ms to SIGSTOP).
    let mumbai_allowed = (m1 - m0) + burst;
    let at_minimum = 0.25 * LIMIT * elapsed.as_secs_f64() / PERIOD_SECS;
    eprintln!(
        "mumbai at {old_share} paused {paused:?} (hyderabad at 0.75 after {grown:?}); \
         allowed {allowed} over {elapsed:?} (mumbai {} + {burst} of {QUEUED} queued, hyderabad {}); \
         exact {exact:.0}, bound +{bound:.0}, over {:+.0}; mumbai {mumbai_allowed} against \
         its minimum's refill {at_minimum:.0}",
        m1 - m0,
        h1 - h0,
        allowed as f64 - exact,
    );
    assert!(
        allowed as f64 <= exact + bound,
        "{allowed} allowed > exact {exact:.0} + {bound:.0}"
    );
    assert!(
        mumbai_allowed as f64 <= at_minimum + 3.0,
        "mumbai came back above its minimum share: {mumbai_allowed} allowed, its minimum refills {at_minimum:.0}"
    );
}
