//! Memory per bucket and the `maxmemory` limit, through the public API.
//!
//! `used_memory` is structural (table arrays, boxes, heap keys, wheel buffers), so bytes per
//! bucket here are what the allocator is asked for. The million-bucket figures are
//! `cargo test -p sluice-store --release -- --ignored million`.

use sluice_core::{Algo, Nanos, Params};
use sluice_store::{EvictionPolicy, SetCond, SetTtl, Store, StoreConfig, StoreError};

const T0: Nanos = Nanos(1_700_000_000_123_456_789);

fn params(limit: u64, period_s: u64) -> Params {
    Params {
        limit,
        period: Nanos::from_secs(period_s),
        burst: limit,
        cost: 1,
    }
}

/// A 16-byte key, as in the target (`user:` and 11 digits).
fn key16(i: u64) -> String {
    let k = format!("user:{i:011}");
    assert_eq!(k.len(), 16);
    k
}

/// Bytes per bucket after one check each of `n` keys by `algo`, arriving over one second.
fn bytes_per_bucket(n: u64, algo: Algo, p: &Params) -> f64 {
    let store = Store::new(StoreConfig::default());
    let before = store.used_memory();
    let rss_before = rss();
    for i in 0..n {
        let now = T0.saturating_add(Nanos::from_millis(i % 1000));
        let d = store
            .check(key16(i).as_bytes(), algo, p, now, false)
            .unwrap();
        assert!(d.allowed);
    }
    let now = T0.saturating_add(Nanos::from_millis(999));
    assert_eq!(store.len(now), n as usize);
    // Housekeeping finishes any table move (a moving table holds its old arrays too), as a
    // running server's does within a few steps: the figure is the steady state.
    for shard in 0..store.shard_count() {
        while !store.expire_some(shard, now, 2048).1 {}
    }
    if let (Some(a), Some(b)) = (rss_before, rss()) {
        // Only meaningful when one test runs alone (`--ignored million`).
        let rss = b.saturating_sub(a) as f64 / n as f64;
        println!("  ({algo:?}: process RSS grew by {rss:.1} bytes per bucket)");
    }
    (store.used_memory() - before) as f64 / n as f64
}

/// Resident bytes of this process (Linux), to compare with `used_memory`.
fn rss() -> Option<usize> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: usize = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

fn token_fits(n: u64) {
    let per = bytes_per_bucket(n, Algo::Token, &params(10, 10));
    println!("TOKEN, {n} buckets, 16-byte keys: {per:.1} bytes per bucket");
    assert!(per <= 40.0, "{per:.1} bytes per bucket");
}

#[test]
fn token_buckets_take_at_most_40_bytes() {
    token_fits(100_000);
}

#[test]
#[ignore = "a million buckets: run in release"]
fn token_buckets_take_at_most_40_bytes_at_a_million() {
    token_fits(1_000_000);
}

#[test]
fn day_long_buckets_stay_packed() {
    // 1000 per day after a 900-unit request: full again in about 21.6 hours. The wheel reaches
    // 13 days, so such buckets keep their 26-byte slot instead of moving to a box.
    let p = Params {
        limit: 1000,
        period: Nanos::from_secs(86_400),
        burst: 1000,
        cost: 900,
    };
    let b = bytes_per_bucket(20_000, Algo::Token, &p);
    println!("TOKEN, 1000/day, cost 900: {b:.1} bytes per bucket");
    assert!(b <= 40.0, "{b:.1} bytes per day-long bucket");
}

#[test]
fn gcra_and_leaky_pack_like_token_even_when_the_rate_does_not_divide_the_period() {
    // 3 per second: T = 333_333_334 ns, so deadlines fall a few ns before the tat. Taking the
    // whole burst of 10 keeps each key for 3.3 s.
    let p = Params {
        burst: 10,
        cost: 10,
        ..params(3, 1)
    };
    for algo in [Algo::Gcra, Algo::Leaky] {
        let per = bytes_per_bucket(20_000, algo, &p);
        println!("{algo:?}, 20000 buckets, 16-byte keys: {per:.1} bytes per bucket");
        assert!(per <= 40.0, "{algo:?}: {per:.1} bytes per bucket");
    }
}

#[test]
fn sliding_and_log_bytes_per_bucket() {
    let n = 20_000;
    let sliding = bytes_per_bucket(n, Algo::Sliding, &params(100, 60));
    let log = bytes_per_bucket(n, Algo::Log, &params(5, 3600));
    let fixed = bytes_per_bucket(n, Algo::Fixed, &params(100, 60));
    println!("SLIDING, {n} buckets, 16-byte keys: {sliding:.1} bytes per bucket");
    println!("LOG (limit 5), {n} buckets, 16-byte keys: {log:.1} bytes per bucket");
    println!("FIXED, {n} buckets, 16-byte keys: {fixed:.1} bytes per bucket");
    // A slot, a wheel item and a 32-byte box; LOG adds its ring (6 words).
    assert!(sliding <= 26.0 / 0.75 + 5.0 + 32.0, "{sliding:.1}");
    assert!(log <= 26.0 / 0.75 + 5.0 + 32.0 + 48.0, "{log:.1}");
}

fn windows_fit(n: u64) {
    // 100 per minute: a SLIDING bucket lives until the end of the next window, a FIXED one
    // until the end of its window; both pack into a slot and an extension word.
    for algo in [Algo::Sliding, Algo::Fixed] {
        let per = bytes_per_bucket(n, algo, &params(100, 60));
        println!("{algo:?}, {n} buckets, 16-byte keys: {per:.1} bytes per bucket");
        assert!(per <= 48.0, "{algo:?}: {per:.1} bytes per bucket");
    }
}

#[test]
fn sliding_and_fixed_buckets_take_at_most_48_bytes() {
    windows_fit(100_000);
}

#[test]
#[ignore = "a million buckets: run in release"]
fn sliding_and_fixed_buckets_take_at_most_48_bytes_at_a_million() {
    windows_fit(1_000_000);
}

/// A small xorshift: random keys without a dependency.
fn rng(seed: u64) -> impl FnMut() -> u64 {
    let mut s = seed;
    move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    }
}

const MAXMEMORY: usize = 1 << 20;
/// The documented slack (see `Store::set_maxmemory`): nothing here grows an existing key and no
/// wheel runs, so none is needed; keep a little for wheel buffers.
const SLACK: usize = 16 * 1024;

fn limited(policy: EvictionPolicy) -> Store {
    Store::new(StoreConfig {
        maxmemory: MAXMEMORY,
        policy,
        ..StoreConfig::default()
    })
}

#[test]
fn evict_soonest_keeps_memory_bounded_and_far_deadlines_alive() {
    let store = limited(EvictionPolicy::EvictSoonest);
    let short = params(10, 10); // a fresh key's deadline: 1 s
    let long = params(100, 3600); // 36 s per request
    let now = T0;
    // A long-lived client: 50 requests, fresh again in 30 minutes.
    for _ in 0..50 {
        assert!(
            store
                .check(b"vip", Algo::Token, &long, now, false)
                .unwrap()
                .allowed
        );
    }
    let mut next = rng(0x2545_F491_4F6C_DD1D);
    let mut max_used = 0;
    for i in 0..200_000u64 {
        let now = now.saturating_add(Nanos(i * 5_000));
        let key = format!("f:{:014x}", next() >> 8);
        let d = store.check(key.as_bytes(), Algo::Token, &short, now, false);
        assert!(d.unwrap().allowed);
        if i % 1000 == 0 {
            max_used = max_used.max(store.used_memory());
            // The long-lived key keeps its state: 50 of 100 used.
            let d = store.check(b"vip", Algo::Token, &long, now, true).unwrap();
            assert_eq!(d.remaining, 49, "at {i}");
        }
    }
    max_used = max_used.max(store.used_memory());
    println!(
        "evict-soonest: max used {max_used} of {MAXMEMORY}, {} evicted, {} live",
        store.evicted_total(),
        store.len(now)
    );
    assert!(max_used <= MAXMEMORY + SLACK, "{max_used}");
    assert!(store.evicted_total() > 150_000);
    assert_eq!(store.rejected_total(), 0);
    assert!(store.len(now) > 15_000, "the limit is used, not wasted");
    // One more request a second later: 51 taken, 1/36 of one refilled.
    let later = now.saturating_add(Nanos::from_secs(1));
    let d = store
        .check(b"vip", Algo::Token, &long, later, false)
        .unwrap();
    assert_eq!(d.remaining, 49);
    assert_eq!(
        store
            .check(b"vip", Algo::Token, &long, later, true)
            .unwrap()
            .remaining,
        48
    );
}

#[test]
fn reject_refuses_new_keys_and_serves_existing_ones() {
    let store = limited(EvictionPolicy::Reject);
    let p = params(1000, 60);
    let mut next = rng(0x9E37_79B9_7F4A_7C15);
    let mut stored = Vec::new();
    let mut refused = 0u64;
    let mut max_used = 0;
    for i in 0..200_000u64 {
        let key = format!("f:{:014x}", next() >> 8);
        match store.check(key.as_bytes(), Algo::Token, &p, T0, false) {
            Ok(d) => {
                assert!(d.allowed);
                stored.push(key);
            }
            Err(StoreError::OutOfMemory) => refused += 1,
            Err(e) => panic!("{e:?}"),
        }
        if i % 1000 == 0 {
            max_used = max_used.max(store.used_memory());
        }
    }
    max_used = max_used.max(store.used_memory());
    println!(
        "reject: max used {max_used} of {MAXMEMORY}, {} stored, {refused} refused",
        stored.len()
    );
    assert!(max_used <= MAXMEMORY + SLACK, "{max_used}");
    assert!(stored.len() > 15_000);
    assert_eq!(store.rejected_total(), refused);
    assert_eq!(store.evicted_total(), 0);
    assert_eq!(store.len(T0), stored.len());
    // Existing keys keep counting: each has used 1 of 1000.
    for key in stored.iter().step_by(97) {
        let d = store
            .check(key.as_bytes(), Algo::Token, &p, T0, false)
            .unwrap();
        assert_eq!(d.remaining, 998, "{key}");
    }
    // New keys of every kind are refused and change nothing; reads and dry runs still answer.
    let new = b"never-stored";
    let e = store.check(new, Algo::Token, &p, T0, false);
    assert_eq!(e, Err(StoreError::OutOfMemory));
    assert!(store.check(new, Algo::Token, &p, T0, true).unwrap().allowed);
    assert_eq!(store.incr_by(new, 1, T0), Err(StoreError::OutOfMemory));
    assert_eq!(
        store.try_set(new, b"1", SetCond::Always, SetTtl::Clear, T0),
        Err(StoreError::OutOfMemory)
    );
    assert!(!store.set(new, b"1", SetCond::Always, SetTtl::Clear, T0));
    assert!(!store.exists(new, T0));
    // Raising the limit at run time lets new keys in again.
    store.set_maxmemory(0);
    assert!(
        store
            .check(new, Algo::Token, &p, T0, false)
            .unwrap()
            .allowed
    );
    assert_eq!(store.maxmemory(), 0);
}

#[test]
fn settings_change_at_run_time() {
    let store = Store::new(StoreConfig::default());
    assert_eq!(store.maxmemory(), 0);
    assert_eq!(store.policy(), EvictionPolicy::EvictSoonest);
    store.set_policy(EvictionPolicy::Reject);
    store.set_maxmemory(1);
    assert_eq!(store.policy(), EvictionPolicy::Reject);
    assert_eq!(
        store.check(b"k", Algo::Token, &params(1, 1), T0, false),
        Err(StoreError::OutOfMemory)
    );
    // With evict-soonest and nothing to evict, a new key is refused all the same.
    store.set_policy(EvictionPolicy::EvictSoonest);
    assert_eq!(store.incr_by(b"k", 1, T0), Err(StoreError::OutOfMemory));
    assert_eq!(store.rejected_total(), 2);
}
