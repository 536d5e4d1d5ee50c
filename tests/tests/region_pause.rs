//! A region paused past its share's deadline comes back at the minimum, not at its old share.
//!
//! Two single-node regions on a real etcd, `--rebalance-interval 1s` (a lease of 3 s), one
//! GLOBAL rule of 1,000 per minute. Mumbai takes most of the traffic and so most of the
//! share; both regions' buckets are spent; then Mumbai is stopped (SIGSTOP) for 20 s. Its
//! lease ends, Hyderabad grows into all but Mumbai's reserved minimum, and 600 requests queue
//! on Mumbai's socket. On SIGCONT those 600 are the first thing Mumbai runs: each must see its
//! share lapsed (the deadline the share carries) and be checked at the minimum, before the
//! region thread has said a word to etcd. The total allowed from the moment both were spent
//! is held to the exact global refill plus the bound docs/regions.md states.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sluice_tests::{Etcd, Sluice, TempDir, try_connect, wait_until};

const LIMIT: f64 = 1000.0;
const PERIOD_SECS: f64 = 60.0;
const INTERVAL: Duration = Duration::from_secs(1);
const LEASE: Duration = Duration::from_secs(3);
const PAUSE: Duration = Duration::from_secs(20);
/// Requests queued on the paused region's socket.
const QUEUED: usize = 600;

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

fn info(port: u16) -> String {
    let Some(mut c) = try_connect(port) else {
        return String::new();
    };
    redis::cmd("INFO")
        .arg("regions")
        .query::<String>(&mut c)
        .unwrap_or_default()
}

/// The share of `g` the node at `port` reports.
fn share(port: u16) -> Option<f64> {
    let i = info(port);
    let v = i
        .lines()
        .find_map(|l| l.strip_prefix("global_rule_g:"))?
        .trim();
    v.strip_prefix("share=")?.split(',').next()?.parse().ok()
}

fn share_reaches(port: u16, range: std::ops::RangeInclusive<f64>, within: Duration) {
    wait_until(within, || share(port).filter(|s| range.contains(s))).unwrap_or_else(|| {
        panic!(
            "share of :{port} not in {range:?} within {within:?}; INFO:\n{}",
            info(port)
        )
    });
}

/// Counts of one load generator.
#[derive(Default)]
struct Counts {
    allowed: AtomicU64,
    /// Pipelines answered with at least one denial.
    denied_rounds: AtomicU64,
}

/// Every 100 ms, `per_tick` pipelined `RL.HIT g u` on one node. Bounded: it stops on drop or
/// after 120 s.
struct Load {
    counts: Arc<Counts>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Load {
    fn start(port: u16, per_tick: usize) -> Load {
        let counts = Arc::new(Counts::default());
        let stop = Arc::new(AtomicBool::new(false));
        let (k, s) = (counts.clone(), stop.clone());
        let handle = std::thread::spawn(move || {
            let mut c = try_connect(port).expect("connect");
            // A pipeline sent during the pause waits for its end.
            c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
            let deadline = Instant::now() + Duration::from_secs(120);
            while !s.load(Ordering::Relaxed) && Instant::now() < deadline {
                let mut pipe = redis::pipe();
                for _ in 0..per_tick {
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

/// Sends SIGCONT to a node on drop, so that a failing test never leaves it stopped (its own
/// drop then kills it by its PID). Declared after the node, so dropped before it.
struct Resume<'a>(&'a Sluice);

impl Drop for Resume<'_> {
    fn drop(&mut self) {
        self.0.signal(libc::SIGCONT);
    }
}

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
