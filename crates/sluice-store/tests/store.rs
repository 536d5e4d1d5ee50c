//! Store behaviour through the public API, with time moved by hand.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use sluice_core::{Algo, CheckError, Nanos, Params};
use sluice_store::{SetCond, SetTtl, Store, StoreConfig, StoreError, Ttl};

const T0: Nanos = Nanos(1_700_000_000_123_456_789);
/// Longer than a wheel tick, so "one tick late" is distinguishable from "on time".
const TICK: Nanos = Nanos(1 << 20);

fn at(ms: u64) -> Nanos {
    T0.saturating_add(Nanos::from_millis(ms))
}

fn store() -> Store {
    Store::new(StoreConfig {
        shards: 8,
        ..StoreConfig::default()
    })
}

/// `limit` per `period_s`, capacity `limit`, cost 1.
fn token(limit: u64, period_s: u64) -> Params {
    Params {
        limit,
        period: Nanos::from_secs(period_s),
        burst: limit,
        cost: 1,
    }
}

fn expire_all(s: &Store, now: Nanos) -> usize {
    (0..s.shard_count()).map(|i| s.expire_due(i, now)).sum()
}

#[test]
fn token_bucket_is_dropped_exactly_when_full_again() {
    let s = store();
    let p = token(10, 10); // one token per second
    for _ in 0..3 {
        assert!(
            s.check(b"user:1", Algo::Token, &p, T0, false)
                .unwrap()
                .allowed
        );
    }
    let d = s.check(b"user:1", Algo::Token, &p, T0, true).unwrap();
    // A dry run of a fourth request answers for it but stores nothing.
    assert_eq!((d.remaining, d.reset_after), (6, Nanos::from_secs(4)));
    let full_at = T0.saturating_add(Nanos::from_secs(3));

    assert_eq!(s.ttl(b"user:1", T0), Ttl::Remaining(Nanos::from_secs(3)));
    assert_eq!(expire_all(&s, full_at.saturating_sub(Nanos(1))), 0);
    assert_eq!(s.len(full_at.saturating_sub(Nanos(1))), 1);
    assert!(s.exists(b"user:1", full_at.saturating_sub(Nanos(1))));
    // At the reset instant the bucket is full: counted out at once, dropped within a tick.
    assert_eq!(s.len(full_at), 0);
    assert!(!s.exists(b"user:1", full_at));
    assert_eq!(s.expired_total(), 1);
    assert_eq!(expire_all(&s, full_at.saturating_add(TICK)), 0);
}

#[test]
fn the_wheel_drops_a_bucket_within_one_tick_of_its_reset() {
    let s = store();
    let p = token(5, 1);
    for _ in 0..5 {
        s.check(b"k", Algo::Token, &p, T0, false).unwrap();
    }
    let full_at = T0.saturating_add(Nanos::from_secs(1));
    let mut now = T0;
    while now < full_at {
        assert_eq!(expire_all(&s, now), 0, "dropped early at {now:?}");
        now = now.saturating_add(Nanos::from_millis(7));
    }
    assert_eq!(expire_all(&s, full_at.saturating_add(TICK)), 1);
    assert_eq!(s.expired_total(), 1);
}

#[test]
fn expired_key_answers_fresh_before_the_wheel_runs() {
    let s = store();
    let p = token(3, 3);
    for _ in 0..3 {
        assert!(
            s.check(b"ip:10.0.0.1", Algo::Token, &p, T0, false)
                .unwrap()
                .allowed
        );
    }
    assert!(
        !s.check(b"ip:10.0.0.1", Algo::Token, &p, T0, false)
            .unwrap()
            .allowed
    );
    let fresh_at = at(3000);
    // No expire_due call: the entry is still in the table, but dead.
    let d = s
        .check(b"ip:10.0.0.1", Algo::Token, &p, fresh_at, true)
        .unwrap();
    assert!(d.allowed);
    assert_eq!(d.remaining, 2);
    assert_eq!(s.ttl(b"ip:10.0.0.1", fresh_at), Ttl::Missing);
    // The same answer as a key never seen.
    let never = s.check(b"never", Algo::Token, &p, fresh_at, true).unwrap();
    assert_eq!(d, never);
}

#[test]
fn a_check_that_leaves_the_bucket_full_stores_nothing() {
    let s = store();
    let p = token(10, 10);
    let zero = Params { cost: 0, ..p };
    assert!(
        s.check(b"k", Algo::Token, &zero, T0, false)
            .unwrap()
            .allowed
    );
    assert!(s.check(b"k", Algo::Token, &p, T0, true).unwrap().allowed);
    assert_eq!(s.len(T0), 0);
    assert_eq!(s.used_memory(), store().used_memory());
}

#[test]
fn limiter_errors_change_nothing() {
    let s = store();
    let p = token(2, 1);
    s.check(b"k", Algo::Token, &p, T0, false).unwrap();
    let too_big = Params { cost: 3, ..p };
    assert_eq!(
        s.check(b"k", Algo::Token, &too_big, T0, false),
        Err(StoreError::Check(CheckError::CostExceedsCapacity))
    );
    assert_eq!(
        s.check(b"k", Algo::Gcra, &p, T0, false),
        Err(StoreError::Check(CheckError::WrongType))
    );
    assert_eq!(
        s.check(b"k", Algo::Token, &p, T0, true).unwrap().remaining,
        0
    );
    // An error on a missing key creates nothing.
    assert!(s.check(b"new", Algo::Token, &too_big, T0, false).is_err());
    assert_eq!(s.len(T0), 1);
}

#[test]
fn wrongtype_both_ways() {
    let s = store();
    let p = token(10, 10);
    assert!(s.set(b"c", b"1", SetCond::Always, SetTtl::Clear, T0));
    assert_eq!(
        s.check(b"c", Algo::Token, &p, T0, false),
        Err(StoreError::WrongType)
    );
    assert_eq!(
        s.limiter(b"c", T0, |_| Ok(((), None))),
        Err(StoreError::WrongType)
    );
    s.check(b"l", Algo::Token, &p, T0, false).unwrap();
    assert_eq!(s.get(b"l", T0), Err(StoreError::WrongType));
    assert_eq!(s.incr_by(b"l", 1, T0), Err(StoreError::WrongType));
    // SET overwrites any type, as in Redis; the new counter has no TTL.
    assert!(s.set(b"l", b"x", SetCond::Always, SetTtl::Clear, T0));
    assert_eq!(s.get(b"l", T0).unwrap().as_deref(), Some(&b"x"[..]));
    assert_eq!(s.ttl(b"l", T0), Ttl::Persistent);
    assert_eq!(s.expires_count(T0), 0);
}

#[test]
fn counter_set_get_with_conditions_and_ttls() {
    let s = store();
    assert_eq!(s.get(b"k", T0), Ok(None));
    assert!(!s.set(b"k", b"v", SetCond::Xx, SetTtl::Clear, T0));
    assert!(s.set(b"k", b"v", SetCond::Nx, SetTtl::At(at(5000)), T0));
    assert!(!s.set(b"k", b"w", SetCond::Nx, SetTtl::Clear, T0));
    assert_eq!(s.get(b"k", T0).unwrap().as_deref(), Some(&b"v"[..]));
    assert_eq!(s.ttl(b"k", T0), Ttl::Remaining(Nanos::from_secs(5)));
    // KEEPTTL keeps the deadline; plain SET clears it.
    assert!(s.set(b"k", b"w", SetCond::Xx, SetTtl::Keep, at(1000)));
    assert_eq!(s.ttl(b"k", at(1000)), Ttl::Remaining(Nanos::from_secs(4)));
    assert_eq!(s.expires_count(at(1000)), 1);
    assert!(s.set(b"k", b"x", SetCond::Always, SetTtl::Clear, at(1000)));
    assert_eq!(s.ttl(b"k", at(1000)), Ttl::Persistent);
    assert_eq!(s.expires_count(at(1000)), 0);
    assert_eq!(s.get(b"k", at(9000)).unwrap().as_deref(), Some(&b"x"[..]));
    // KEEPTTL on a missing key: no TTL.
    assert!(s.set(b"n", b"1", SetCond::Always, SetTtl::Keep, T0));
    assert_eq!(s.ttl(b"n", T0), Ttl::Persistent);
    // A deadline already past deletes.
    assert!(s.set(b"n", b"1", SetCond::Always, SetTtl::At(T0), T0));
    assert!(!s.exists(b"n", T0));
    // Binary-safe keys and values, long ones too.
    let key = [
        0u8, 255, 10, 13, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18,
    ];
    let val = vec![0xAB; 1000];
    assert!(s.set(&key, &val, SetCond::Always, SetTtl::Clear, T0));
    assert_eq!(s.get(&key, T0).unwrap().as_deref(), Some(&val[..]));
    assert_eq!(s.get(&key[..22], T0), Ok(None));
}

#[test]
fn counter_expiry_and_ttl() {
    let s = store();
    assert!(!s.expire_at(b"k", at(10), T0));
    assert_eq!(s.ttl(b"k", T0), Ttl::Missing);
    assert_eq!(s.incr_by(b"k", 1, T0), Ok(1));
    assert_eq!(s.ttl(b"k", T0), Ttl::Persistent);
    assert!(s.expire_at(b"k", at(2000), T0));
    // INCR keeps the TTL.
    assert_eq!(s.incr_by(b"k", 5, at(500)), Ok(6));
    assert_eq!(
        s.ttl(b"k", at(500)),
        Ttl::Remaining(Nanos::from_millis(1500))
    );
    assert_eq!(s.get(b"k", at(1999)).unwrap().as_deref(), Some(&b"6"[..]));
    assert_eq!(s.get(b"k", at(2000)), Ok(None));
    // A fixed-window counter starts over after its window.
    assert_eq!(s.incr_by(b"k", 1, at(2000)), Ok(1));
    assert_eq!(s.ttl(b"k", at(2000)), Ttl::Persistent);
    // Expire in the past deletes, as Redis does.
    assert!(s.expire_at(b"k", at(1000), at(2000)));
    assert!(!s.exists(b"k", at(2000)));
    // EXPIRE works on a limiter key too.
    s.check(b"l", Algo::Token, &token(10, 10), T0, false)
        .unwrap();
    assert!(s.expire_at(b"l", at(100), T0));
    assert_eq!(s.ttl(b"l", T0), Ttl::Remaining(Nanos::from_millis(100)));
    assert_eq!(expire_all(&s, at(100).saturating_add(TICK)), 1);
    assert_eq!(s.len(at(200)), 0);
}

#[test]
fn incr_errors() {
    let s = store();
    s.set(b"word", b"abc", SetCond::Always, SetTtl::Clear, T0);
    s.set(b"padded", b"007", SetCond::Always, SetTtl::Clear, T0);
    s.set(
        b"max",
        b"9223372036854775807",
        SetCond::Always,
        SetTtl::Clear,
        T0,
    );
    s.set(
        b"min",
        b"-9223372036854775808",
        SetCond::Always,
        SetTtl::Clear,
        T0,
    );
    assert_eq!(s.incr_by(b"word", 1, T0), Err(StoreError::NotInteger));
    assert_eq!(s.incr_by(b"padded", 1, T0), Err(StoreError::NotInteger));
    assert_eq!(s.incr_by(b"max", 1, T0), Err(StoreError::Overflow));
    assert_eq!(s.incr_by(b"min", -1, T0), Err(StoreError::Overflow));
    // Errors leave the value alone.
    assert_eq!(
        s.get(b"max", T0).unwrap().as_deref(),
        Some(&b"9223372036854775807"[..])
    );
    assert_eq!(s.incr_by(b"max", -7, T0), Ok(i64::MAX - 7));
    assert_eq!(s.incr_by(b"neg", -3, T0), Ok(-3));
    assert_eq!(s.get(b"neg", T0).unwrap().as_deref(), Some(&b"-3"[..]));
}

#[test]
fn del_and_exists() {
    let s = store();
    assert!(!s.del(b"k", T0));
    s.incr_by(b"k", 1, T0).unwrap();
    s.check(b"l", Algo::Token, &token(10, 10), T0, false)
        .unwrap();
    assert!(s.exists(b"k", T0) && s.exists(b"l", T0));
    assert!(s.del(b"k", T0) && s.del(b"l", T0));
    assert!(!s.exists(b"k", T0) && !s.exists(b"l", T0));
    assert_eq!(s.len(T0), 0);
}

#[test]
fn len_is_exact_through_many_inserts_and_expiries() {
    let s = store();
    let mut deadlines = Vec::new();
    for i in 0..20_000u64 {
        let key = format!("key:{i}");
        // Spread deadlines over 0..20 s, a few of them persistent.
        let ttl = if i % 97 == 0 {
            SetTtl::Clear
        } else {
            let d = at(1 + (i * 7919) % 20_000);
            deadlines.push(d);
            SetTtl::At(d)
        };
        s.set(key.as_bytes(), b"1", SetCond::Always, ttl, T0);
    }
    let persistent = 20_000 - deadlines.len();
    for step in 0..45u64 {
        let now = at(step * 487);
        if step % 3 == 0 {
            expire_all(&s, now);
        }
        let live = deadlines.iter().filter(|d| **d > now).count();
        assert_eq!(s.len(now), persistent + live, "at step {step}");
        assert_eq!(s.expires_count(now), live, "at step {step}");
    }
    assert_eq!(s.expired_total(), deadlines.len() as u64);
}

#[test]
fn used_memory_follows_the_keys() {
    let s = store();
    let empty = s.used_memory();
    let p = token(10, 10);
    for i in 0..5000 {
        s.check(format!("user:{i}").as_bytes(), Algo::Token, &p, T0, false)
            .unwrap();
    }
    let short = s.used_memory();
    // At least a 26-byte slot and a 4-byte wheel item per key.
    assert!(short > empty + 5000 * (26 + 4), "{short} vs {empty}");
    // Heap keys are counted.
    for i in 0..5000 {
        let key = format!("a-key-longer-than-twenty-two-bytes:{i}");
        s.check(key.as_bytes(), Algo::Token, &p, T0, false).unwrap();
    }
    let long = s.used_memory();
    // A long key also takes its heap bytes, and a 32-byte box for the state beside it.
    assert!(
        long > short + 5000 * (26 + 4 + 32 + 34),
        "{long} vs {short}"
    );
    // All buckets are full again after one second: the wheel drops them and memory shrinks.
    assert_eq!(expire_all(&s, at(1000).saturating_add(TICK)), 10_000);
    let after = s.used_memory();
    // What stays is each of the 64 shards' table, shrunk in steps toward its first size, and
    // its wheel: about a quarter of the high-water mark, how close depending on how the hash
    // spread the keys over the shards.
    assert!(after < long / 3, "{after} vs {long}");
    s.set(b"x", b"1", SetCond::Always, SetTtl::Clear, T0);
    assert!(s.used_memory() > after - 1);
    s.flush();
    assert_eq!(s.used_memory(), empty);
    assert_eq!(s.len(T0), 0);
}

#[test]
fn concurrent_checks_on_one_key_allow_exactly_the_limit() {
    const THREADS: usize = 8;
    const PER_THREAD: usize = 2000;
    // 3600 s / 1000 is a whole number of ns: this test is about the lock, not about rounding.
    const LIMIT: u64 = 1000;
    let s = Arc::new(store());
    let allowed = Arc::new(AtomicU64::new(0));
    // An hour-long period: no refill happens between the checks.
    let p = token(LIMIT, 3600);
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (s, allowed) = (Arc::clone(&s), Arc::clone(&allowed));
            std::thread::spawn(move || {
                for i in 0..PER_THREAD {
                    // Other keys on the same and other shards interleave with the hot one.
                    let other = format!("cold:{t}:{}", i % 50);
                    s.check(other.as_bytes(), Algo::Token, &p, T0, false)
                        .unwrap();
                    if s.check(b"hot", Algo::Token, &p, T0, false).unwrap().allowed {
                        allowed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(allowed.load(Ordering::Relaxed), LIMIT);
    assert_eq!(s.len(T0), 1 + THREADS * 50);
}

#[test]
fn many_shards_and_expire_due_per_shard() {
    let s = Store::new(StoreConfig {
        shards: 64,
        ..StoreConfig::default()
    });
    for i in 0..1000 {
        s.set(
            format!("k{i}").as_bytes(),
            b"v",
            SetCond::Always,
            SetTtl::At(at(10)),
            T0,
        );
    }
    // Each shard drops only its own keys.
    let now = at(10).saturating_add(TICK);
    let mut total = 0;
    for i in 0..s.shard_count() {
        total += s.expire_due(i, now);
        assert_eq!(s.len(at(0)) + total, 1000);
    }
    assert_eq!(total, 1000);
}

/// Keys of a scan, read back from a snapshot of the store.
fn snapshot_keys(s: &Store, now: Nanos) -> Vec<Vec<u8>> {
    let mut w = sluice_repl::SnapshotWriter::new();
    s.snapshot_into(&mut w, now);
    let bytes = w.finish();
    let reader = sluice_repl::SnapshotReader::new(&bytes).unwrap();
    reader
        .iter()
        .filter_map(|r| match r.unwrap() {
            sluice_repl::Record::Limiter { key, .. } | sluice_repl::Record::Counter { key, .. } => {
                Some(key.to_vec())
            }
            _ => None,
        })
        .collect()
}

#[test]
fn a_snapshot_sees_every_key_while_inserts_grow_the_tables_under_it() {
    // One shard, so the inserts beside the scan move its keys: cuckoo walks, moves into new
    // arrays, growth begun while the scan is in the old ones.
    let s = Arc::new(Store::new(StoreConfig {
        shards: 1,
        ..StoreConfig::default()
    }));
    let p = token(10, 60);
    for round in 0..4u64 {
        let old: Vec<String> = (0..20_000).map(|n| format!("old:{round}:{n}")).collect();
        for k in &old {
            s.check(k.as_bytes(), Algo::Token, &p, T0, false).unwrap();
        }
        let writer = {
            let s = s.clone();
            std::thread::spawn(move || {
                for n in 0..40_000 {
                    let k = format!("new:{round}:{n}");
                    s.check(k.as_bytes(), Algo::Token, &p, T0, false).unwrap();
                }
            })
        };
        let mut seen = std::collections::HashMap::new();
        for k in snapshot_keys(&s, T0) {
            *seen.entry(k).or_insert(0) += 1;
        }
        writer.join().unwrap();
        let missed: Vec<_> = old
            .iter()
            .filter(|k| !seen.contains_key(k.as_bytes()))
            .collect();
        assert!(
            missed.is_empty(),
            "round {round}: the snapshot missed {} keys",
            missed.len()
        );
    }
    // Without inserts beside it, a scan sees each key once.
    let all = snapshot_keys(&s, T0);
    let distinct: std::collections::HashSet<_> = all.iter().collect();
    assert_eq!((all.len(), distinct.len()), (240_000, 240_000));
    assert_eq!(s.count_where(T0, |k| k.starts_with(b"old:")), 80_000);
    assert_eq!(s.delete_where(T0, |k| k.starts_with(b"new:")), 160_000);
    assert_eq!(s.len(T0), 80_000);
    assert_eq!(s.keys_where(T0, 5, |k| k.starts_with(b"old:3:")).len(), 5);
}

#[test]
fn a_hash_taken_ahead_serves_only_the_bytes_it_was_taken_of() {
    let s = store();
    let p = token(10, 10);
    let buf = b"user:1user:2".to_vec();
    let (k1, k2) = buf.split_at(6);
    let ahead = s.prefetch(k1);
    let d = s
        .check_ahead(k1, ahead, Algo::Token, &p, 0, T0, false)
        .unwrap();
    assert!(d.allowed);
    // Other bytes of the same length: hashed afresh, so they fill their own bucket, where a
    // plain check finds it.
    for _ in 0..10 {
        assert!(
            s.check_ahead(k2, ahead, Algo::Token, &p, 0, T0, false)
                .unwrap()
                .allowed
        );
    }
    assert!(!s.check(k2, Algo::Token, &p, T0, false).unwrap().allowed);
    // And the key the hash was taken of still has the nine tokens its one check left (a dry
    // check tells what one more would leave).
    let left = s.check(k1, Algo::Token, &p, T0, true).unwrap();
    assert_eq!((d.remaining, left.remaining), (9, 8));
    assert_eq!(s.len(T0), 2);
}
