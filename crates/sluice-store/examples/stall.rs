//! The slowest single checks while new keys are created, in process (no network): a probe
//! for housekeeping that stalls a request (table growth, wheel growth).
//!
//! `cargo run --release -p sluice-store --example stall [KEYS] [REQUESTS]` prints the
//! slowest checks and their count above 100 µs and 1 ms.

use std::time::Instant;

use sluice_core::{Algo, Nanos, Params};
use sluice_store::{Store, StoreConfig};

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u64>().expect("a number"));
    let keys = args.next().unwrap_or(100_000);
    let requests = args.next().unwrap_or(200_000);
    let store = Store::new(StoreConfig::default());
    let p = Params {
        limit: 1_000_000,
        period: Nanos::from_secs(100_000_000),
        burst: 1_000_000,
        cost: 1,
    };
    let t0 = 1_700_000_000_000_000_000u64;
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut times = Vec::with_capacity(requests as usize);
    for n in 0..requests {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let key = format!("rl:{:012}", rng % keys);
        let now = Nanos(t0 + n * 10_000);
        let start = Instant::now();
        store
            .check(key.as_bytes(), Algo::Token, &p, now, false)
            .expect("allowed");
        if n % 100 == 0 {
            // The server's housekeeping: every shard's wheel, about once a millisecond.
            for shard in 0..store.shard_count() {
                let t = Instant::now();
                let d = store.expire_due(shard, now);
                let e = t.elapsed().as_nanos();
                if e > 200_000 {
                    eprintln!("request {n} shard {shard}: expire_due {e} ns, dropped {d}");
                }
            }
        }
        times.push((start.elapsed().as_nanos() as u64, n));
    }
    // What a client at -c 50 waits behind: the 50 requests served before its own.
    let window = 50;
    let (mut sum, mut worst) = (0u64, (0u64, 0u64));
    for (n, t) in times.iter().enumerate() {
        sum += t.0;
        if n >= window {
            sum -= times[n - window].0;
        }
        worst = worst.max((sum, n as u64));
    }
    println!("slowest {window} consecutive checks: {} ns, ending at request {}", worst.0, worst.1);
    times.sort_unstable();
    let over = |ns: u64| times.iter().filter(|t| t.0 > ns).count();
    let p99 = times[times.len() * 99 / 100].0;
    println!(
        "{requests} checks over {keys} keys: p99 {p99} ns, >100 µs {}, >1 ms {}",
        over(100_000),
        over(1_000_000)
    );
    for (ns, n) in times.iter().rev().take(8) {
        println!("  request {n}: {ns} ns");
    }
}
