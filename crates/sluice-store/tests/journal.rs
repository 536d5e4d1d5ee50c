//! The replication journal against its own purpose: a store built only from a primary's
//! snapshot and drained journals holds exactly the primary's live entries, whatever the mix of
//! checks, counters, deletes, expiries, evictions and flushes in between.

use sluice_core::{Algo, Nanos, Params};
use sluice_repl::{Record, SnapshotReader, SnapshotWriter, record};
use sluice_store::{EvictionPolicy, SetCond, SetTtl, Store, StoreConfig};

fn params(limit: u64, period_secs: u64, cost: u64) -> Params {
    Params {
        limit,
        period: Nanos::from_secs(period_secs),
        burst: limit,
        cost,
    }
}

/// Every live entry of `store` at `now`, as sorted encoded records.
fn entries(store: &Store, now: Nanos) -> Vec<Vec<u8>> {
    let mut w = SnapshotWriter::new();
    store.snapshot_into(&mut w, now);
    let bytes = w.finish();
    let reader = SnapshotReader::new(&bytes).unwrap();
    let mut all: Vec<Vec<u8>> = reader.iter().map(|r| r.unwrap().to_bytes()).collect();
    all.sort();
    all
}

/// Applies every record in `stream` to `replica`.
fn apply_all(replica: &Store, stream: &[u8], now: Nanos) -> usize {
    let mut rest = stream;
    let mut n = 0;
    while let Some((rec, used)) = record::decode(rest).unwrap() {
        replica.apply(rec, now);
        rest = &rest[used..];
        n += 1;
    }
    assert!(rest.is_empty(), "a partial frame was drained");
    n
}

#[test]
fn replica_from_snapshot_and_journal_equals_primary() {
    for seed in 1..=4u64 {
        let primary = Store::new(StoreConfig {
            shards: 8,
            // Small enough that inserts evict (their DELs travel too).
            maxmemory: 96 * 1024,
            policy: EvictionPolicy::EvictSoonest,
        });
        let replica = Store::new(StoreConfig {
            shards: 4, // a replica need not share the primary's layout
            ..StoreConfig::default()
        });
        let mut now = Nanos(1_700_000_000_000_000_000);
        let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut next = |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        // Some state before the replica connects: it arrives by snapshot.
        for i in 0..500 {
            let key = format!("before:{i}");
            let p = params(10, 60, 3);
            primary
                .check(key.as_bytes(), Algo::Token, &p, now, false)
                .unwrap();
        }
        primary.set_journaling(true);
        let mut w = SnapshotWriter::new();
        primary.snapshot_into(&mut w, now);
        let snap = w.finish();
        for rec in SnapshotReader::new(&snap).unwrap().iter() {
            replica.apply(rec.unwrap(), now);
        }

        let algos = [
            Algo::Token,
            Algo::Gcra,
            Algo::Sliding,
            Algo::Fixed,
            Algo::Log,
            Algo::Leaky,
        ];
        let mut stream = Vec::new();
        for step in 0..20_000 {
            now = now.saturating_add(Nanos(next(50_000_000)));
            let key = format!("k:{}", next(3000));
            match next(100) {
                0..60 => {
                    let algo = algos[next(6) as usize];
                    let limit = 1 + next(20);
                    let p = params(limit, 1 + next(30), 1);
                    let _ = primary.check(key.as_bytes(), algo, &p, now, false);
                }
                60..70 => {
                    let _ = primary.incr_by(key.as_bytes(), next(5) as i64 - 2, now);
                }
                70..78 => {
                    let ttl = if next(2) == 0 {
                        SetTtl::Clear
                    } else {
                        SetTtl::At(now.saturating_add(Nanos::from_millis(1 + next(5000))))
                    };
                    primary.set(key.as_bytes(), b"value", SetCond::Always, ttl, now);
                }
                78..86 => {
                    primary.del(key.as_bytes(), now);
                }
                86..94 => {
                    let at = now.saturating_add(Nanos::from_millis(next(3000)));
                    primary.expire_at(key.as_bytes(), at, now);
                }
                94..99 => {
                    primary.expire_due(next(8) as usize, now);
                }
                _ if step % 7 == 0 => primary.flush(),
                _ => {}
            }
            if next(50) == 0 {
                primary.drain_journal(&mut stream);
                apply_all(&replica, &stream, now);
                stream.clear();
            }
        }
        primary.drain_journal(&mut stream);
        apply_all(&replica, &stream, now);
        assert!(
            primary.evicted_total() > 0,
            "seed {seed}: no eviction exercised"
        );
        let want = entries(&primary, now);
        assert!(!want.is_empty());
        assert_eq!(entries(&replica, now), want, "seed {seed}");
        // A journal that is off records nothing.
        primary.set_journaling(false);
        primary.del(b"k:1", now);
        let mut none = Vec::new();
        primary.drain_journal(&mut none);
        assert!(none.is_empty());
    }
}

#[test]
fn flush_orders_pending_records_around_it() {
    let store = Store::new(StoreConfig::default());
    store.set_journaling(true);
    let now = Nanos(1_700_000_000_000_000_000);
    store.set(b"before", b"1", SetCond::Always, SetTtl::Clear, now);
    store.flush();
    store.set(b"after", b"2", SetCond::Always, SetTtl::Clear, now);
    let mut stream = Vec::new();
    store.drain_journal(&mut stream);
    let mut recs = Vec::new();
    let mut rest = &stream[..];
    while let Some((rec, used)) = record::decode(rest).unwrap() {
        recs.push(rec.to_bytes());
        rest = &rest[used..];
    }
    let counter = |k: &'static [u8], v: &'static [u8]| {
        Record::Counter {
            key: k,
            deadline: Nanos::MAX,
            value: v,
        }
        .to_bytes()
    };
    assert_eq!(
        recs,
        vec![
            counter(b"before", b"1"),
            Record::Flush.to_bytes(),
            counter(b"after", b"2")
        ]
    );
}

/// The records in a drained stream, decoded.
fn records(stream: &[u8]) -> Vec<Record<'_>> {
    let mut out = Vec::new();
    let mut rest = stream;
    while let Some((rec, used)) = record::decode(rest).unwrap() {
        out.push(rec);
        rest = &rest[used..];
    }
    assert!(rest.is_empty());
    out
}

#[test]
fn a_keys_consecutive_checks_coalesce_into_its_last_state() {
    // One shard, so every key shares one journal and its order is the order of the changes.
    let primary = Store::new(StoreConfig {
        shards: 1,
        ..StoreConfig::default()
    });
    let replica = Store::new(StoreConfig::default());
    primary.set_journaling(true);
    let mut now = Nanos(1_700_000_000_000_000_000);
    let p = params(1_000_000, 60, 1);
    // A hot key: a thousand checks (every one allowed: each is a change), one record.
    for _ in 0..1000 {
        primary.check(b"hot", Algo::Token, &p, now, false).unwrap();
        now = Nanos(now.0 + 1_000);
    }
    let mut stream = Vec::new();
    primary.drain_journal(&mut stream);
    let recs = records(&stream);
    assert_eq!(recs.len(), 1, "{recs:?}");
    apply_all(&replica, &stream, now);
    assert_eq!(entries(&replica, now), entries(&primary, now));

    // Another key in between keeps both in order; a delete or a counter is never replaced,
    // and a check after it is a record of its own.
    let keys: [&[u8]; 6] = [b"hot", b"hot", b"cold", b"hot", b"hot", b"hot"];
    for key in keys {
        primary.check(key, Algo::Token, &p, now, false).unwrap();
    }
    primary.del(b"cold", now);
    primary.check(b"hot", Algo::Token, &p, now, false).unwrap();
    primary.set(b"n", b"1", SetCond::Always, SetTtl::Clear, now);
    primary.check(b"hot", Algo::Token, &p, now, false).unwrap();
    let mut stream = Vec::new();
    primary.drain_journal(&mut stream);
    let keys: Vec<&[u8]> = records(&stream)
        .iter()
        .map(|r| match r {
            Record::Limiter { key, .. } | Record::Counter { key, .. } | Record::Del { key } => *key,
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    let want: [&[u8]; 7] = [b"hot", b"cold", b"hot", b"cold", b"hot", b"n", b"hot"];
    assert_eq!(keys, want);
    apply_all(&replica, &stream, now);
    assert_eq!(entries(&replica, now), entries(&primary, now));

    // Nothing is kept across a drain: the next check is a whole record again.
    primary.check(b"hot", Algo::Token, &p, now, false).unwrap();
    let mut stream = Vec::new();
    primary.drain_journal(&mut stream);
    assert_eq!(records(&stream).len(), 1);
}
