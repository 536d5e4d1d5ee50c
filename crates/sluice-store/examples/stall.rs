//! The slowest single checks while new keys are created, in process (no network): a probe
//! for housekeeping that stalls a request (table growth, the wheel's cascades and expiries).
//!
//! `cargo run --release -p sluice-store --example stall [KEYS] [REQUESTS] [RUNS] [BUDGET]` runs the same
//! checks (TOKEN, new keys at random, 10 µs of simulated time apart, the server's expiry pass
//! every simulated millisecond) `RUNS` times (default 3) on fresh stores and keeps, for each
//! request, its fastest run: a request that another process preempted in one run is not slow
//! in all of them, while a rebuild is. Then it runs the housekeeping alone for 200 simulated
//! seconds, past every deadline, in [`EXPIRE_BUDGET`] steps, and reports the longest step
//! (each step's fastest run, too). A BUDGET of 18446744073709551615 is the unbounded pass
//! (`Store::expire_due`) for comparison.

use std::time::Instant;

use sluice_core::{Algo, Nanos, Params};
use sluice_store::{EXPIRE_BUDGET, Store, StoreConfig};

const T0: u64 = 1_700_000_000_000_000_000;

fn main() {
    let mut args = std::env::args()
        .skip(1)
        .map(|a| a.parse::<u64>().expect("a number"));
    let keys = args.next().unwrap_or(100_000);
    let requests = args.next().unwrap_or(200_000);
    let runs = args.next().unwrap_or(3);
    let budget = args.next().map_or(EXPIRE_BUDGET, |b| b as usize);
    let mut best = vec![u64::MAX; requests as usize];
    let mut steps: Vec<u64> = Vec::new();
    let mut passes: Vec<u64> = Vec::new();
    for _ in 0..runs {
        let store = Store::new(StoreConfig::default());
        for (b, t) in best.iter_mut().zip(checks(&store, keys, requests, budget)) {
            *b = (*b).min(t);
        }
        let (run, pass) = housekeeping(&store, Nanos(T0 + requests * 10_000), budget);
        fastest(&mut steps, run);
        fastest(&mut passes, pass);
    }
    report(&best, keys);
    let total: u64 = steps.iter().sum();
    println!(
        "housekeeping for 200 s past every deadline: {} steps of at most {budget} items, {total} ns in all; the longest step {} ns, the longest pass over every shard {} ns",
        steps.len(),
        steps.iter().max().unwrap_or(&0),
        passes.iter().max().unwrap_or(&0)
    );
}

/// Keeps in `best` each element's fastest run (the runs do the same work, element by element).
fn fastest(best: &mut Vec<u64>, run: Vec<u64>) {
    if best.is_empty() {
        *best = run;
    } else {
        for (b, t) in best.iter_mut().zip(run) {
            *b = (*b).min(t);
        }
    }
}

/// Each check's wall time in ns, in request order.
fn checks(store: &Store, keys: u64, requests: u64, budget: usize) -> Vec<u64> {
    let p = Params {
        limit: 1_000_000,
        period: Nanos::from_secs(100_000_000),
        burst: 1_000_000,
        cost: 1,
    };
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut times = Vec::with_capacity(requests as usize);
    for n in 0..requests {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let key = format!("rl:{:012}", rng % keys);
        let now = Nanos(T0 + n * 10_000);
        if n % 100 == 0 {
            for shard in 0..store.shard_count() {
                while !store.expire_some(shard, now, budget).1 {}
            }
        }
        let start = Instant::now();
        store
            .check(key.as_bytes(), Algo::Token, &p, now, false)
            .expect("allowed");
        times.push(start.elapsed().as_nanos() as u64);
    }
    times
}

fn report(times: &[u64], keys: u64) {
    // What a client at -c 50 waits behind: the 50 requests served before its own.
    let window = 50;
    let (mut sum, mut worst) = (0u64, (0u64, 0usize));
    for (n, t) in times.iter().enumerate() {
        sum += t;
        if n >= window {
            sum -= times[n - window];
        }
        worst = worst.max((sum, n));
    }
    let mut sorted: Vec<(u64, usize)> = times.iter().copied().zip(0..).collect();
    sorted.sort_unstable();
    let over = |ns: u64| sorted.iter().filter(|t| t.0 > ns).count();
    println!(
        "{} checks over {keys} keys: p99 {} ns, max {} ns, >100 µs {}, >1 ms {}; slowest {window} in a row {} ns (ending at request {})",
        times.len(),
        sorted[sorted.len() * 99 / 100].0,
        sorted[sorted.len() - 1].0,
        over(100_000),
        over(1_000_000),
        worst.0,
        worst.1
    );
    for (ns, n) in sorted.iter().rev().take(5) {
        println!("  request {n}: {ns} ns");
    }
}

/// The server's housekeeping (every shard's wheel, every 10 ms, in bounded steps) for 200
/// simulated seconds from `from`; returns each step's wall time and each pass's (every shard,
/// as the server's housekeeping runs them back to back but for its yields), in ns.
fn housekeeping(store: &Store, from: Nanos, budget: usize) -> (Vec<u64>, Vec<u64>) {
    let (mut steps, mut passes) = (Vec::new(), Vec::new());
    for step in 1..=20_000u64 {
        let now = Nanos(from.0 + step * 10_000_000);
        let pass = Instant::now();
        for shard in 0..store.shard_count() {
            loop {
                let t = Instant::now();
                let (_, done) = store.expire_some(shard, now, budget);
                steps.push(t.elapsed().as_nanos() as u64);
                if done {
                    break;
                }
            }
        }
        passes.push(pass.elapsed().as_nanos() as u64);
    }
    (steps, passes)
}
