//! The store, `sluice_store::Store::check`: hash, shard lock, table probe, decision, deadline.
//!
//! - `store_check/10k` and `store_check/1M`: one thread, TOKEN checks on keys picked at random
//!   over a preloaded key space (as `redis-benchmark -r` does), so every check updates an
//!   existing bucket. The two sizes show the cache effect: 10k buckets fit in cache, 1M do not.
//!   The 1M store is built once for its bench (about a second), not per sample.
//! - `hot_shard`: a one-shard store, so every check takes the same lock: one thread alone, then
//!   two threads at once on disjoint keys (the lock and its cache line bouncing between cores).
//!
//! Buckets are 16-byte keys (`rlt:` + 12 digits) at capacity 1,000,000 refilled 0.01/s, as in
//! `scripts/bench-vs-redis.sh`: every check is allowed and no bucket expires during the bench.

use std::hint::black_box;
use std::thread;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use sluice_benches::{XorShift, key16};
use sluice_core::{Algo, Nanos, Params};
use sluice_store::{Store, StoreConfig};

/// An instant in 2026, as the server's clock would give.
const START: Nanos = Nanos(1_780_000_000 * Nanos::PER_SEC);

/// The clock advances this much per check (100M checks per simulated second).
const TICK: Nanos = Nanos(10);

/// Capacity 1,000,000, refill 0.01/s (1,000,000 per 10^8 s): always allowed, long-lived.
const PARAMS: Params = Params {
    limit: 1_000_000,
    period: Nanos(100_000_000 * Nanos::PER_SEC),
    burst: 1_000_000,
    cost: 1,
};

const PREFIX: &[u8; 4] = b"rlt:";

#[allow(clippy::needless_update)] // StoreConfig may grow fields; take their defaults.
fn store(shards: usize) -> Store {
    Store::new(StoreConfig {
        shards,
        ..Default::default()
    })
}

/// A store with `keys` live TOKEN buckets.
fn loaded(keys: u64) -> Store {
    let store = store(StoreConfig::default().shards);
    for i in 0..keys {
        store
            .check(&key16(PREFIX, i), Algo::Token, &PARAMS, START, false)
            .expect("preload");
    }
    store
}

fn one_thread(c: &mut Criterion) {
    let mut group = c.benchmark_group("store_check");
    group.throughput(Throughput::Elements(1));
    for (name, keys) in [("10k", 10_000u64), ("1M", 1_000_000)] {
        let store = loaded(keys);
        group.bench_function(BenchmarkId::from_parameter(name), |b| {
            let mut rng = XorShift::new(keys);
            let mut now = START;
            b.iter(|| {
                now = now.saturating_add(TICK);
                let key = key16(PREFIX, rng.below(keys));
                black_box(store.check(&key, Algo::Token, &PARAMS, now, false))
            });
        });
    }
    group.finish();
}

/// `iters` checks by each of `threads` threads on their own keys of a one-shard store, all
/// started together; the wall time of the slowest.
fn hammer(store: &Store, keys: &[Vec<[u8; 16]>], iters: u64) -> Duration {
    let started = Instant::now();
    thread::scope(|s| {
        for (t, own) in keys.iter().enumerate() {
            s.spawn(move || {
                let mut now = START;
                let mut rng = XorShift::new(t as u64 + 1);
                for _ in 0..iters {
                    now = now.saturating_add(TICK);
                    let key = &own[rng.below(own.len() as u64) as usize];
                    black_box(store.check(key, Algo::Token, &PARAMS, now, false)).ok();
                }
            });
        }
    });
    started.elapsed()
}

fn hot_shard(c: &mut Criterion) {
    const KEYS_PER_THREAD: u64 = 64;
    let mut group = c.benchmark_group("hot_shard");
    for threads in [1usize, 2] {
        let store = store(1);
        let keys: Vec<Vec<[u8; 16]>> = (0..threads as u64)
            .map(|t| {
                (0..KEYS_PER_THREAD)
                    .map(|i| key16(PREFIX, t * KEYS_PER_THREAD + i))
                    .collect()
            })
            .collect();
        for k in keys.iter().flatten() {
            store
                .check(k, Algo::Token, &PARAMS, START, false)
                .expect("preload");
        }
        // One iteration is one check on every thread.
        group.throughput(Throughput::Elements(threads as u64));
        group.bench_function(BenchmarkId::new("threads", threads), |b| {
            b.iter_custom(|iters| hammer(&store, &keys, iters));
        });
    }
    group.finish();
}

criterion_group!(benches, one_thread, hot_shard);
criterion_main!(benches);
