//! SLIDING and FIXED through the public API. The table keeps a window state in its slot and an
//! extension word when its window start, period and counts fit, and in a box when they do not;
//! whichever it is, every check, TTL, expiry, eviction, snapshot and replica must read back
//! exactly the state and deadline the algorithm wrote.

use std::collections::BTreeMap;

use sluice_core::fixed::Fixed;
use sluice_core::sliding::{SLIDING_LIMIT_MAX, Sliding};
use sluice_core::{Algo, Nanos, Params, State};
use sluice_repl::{Record, SnapshotReader, SnapshotWriter};
use sluice_store::{EvictionPolicy, Store, StoreConfig, Ttl};

const T0: Nanos = Nanos(1_700_000_000_123_456_789);
/// A wheel tick: the wheel drops an entry within one of its deadline.
const TICK: Nanos = Nanos(1 << 20);

type Entries = BTreeMap<Vec<u8>, (Nanos, State)>;

fn store(shards: usize) -> Store {
    Store::new(StoreConfig {
        shards,
        ..StoreConfig::default()
    })
}

/// Every live limiter entry of `store` at `now`, read from a snapshot.
fn snapshot(store: &Store, now: Nanos) -> Entries {
    let mut w = SnapshotWriter::new();
    store.snapshot_into(&mut w, now);
    let bytes = w.finish();
    let reader = SnapshotReader::new(&bytes).unwrap();
    let mut out = Entries::new();
    for rec in reader.iter() {
        match rec.unwrap() {
            Record::Limiter {
                key,
                deadline,
                state,
            } => {
                out.insert(key.to_vec(), (deadline, state));
            }
            other => panic!("unexpected record {other:?}"),
        }
    }
    out
}

/// A store holding `entries`, built from `source`'s snapshot (a replica's full sync).
fn replica_of(source: &Store, now: Nanos) -> Store {
    let mut w = SnapshotWriter::new();
    source.snapshot_into(&mut w, now);
    let bytes = w.finish();
    let replica = store(4);
    for rec in SnapshotReader::new(&bytes).unwrap().iter() {
        replica.apply(rec.unwrap(), now);
    }
    replica
}

/// Writes `state` into `key` with `deadline`, as a generic limiter caller may.
fn write(s: &Store, key: &[u8], state: State, deadline: Nanos, now: Nanos) {
    s.limiter(key, now, |slot| {
        *slot = Some(state);
        Ok(((), Some(deadline.saturating_sub(now))))
    })
    .unwrap();
}

fn aligned(now: Nanos, period: u64) -> Nanos {
    Nanos(now.0 - now.0 % period)
}

/// Window states at the edges of what packs: counts at 0, 1 and the largest that fit and the
/// smallest that do not; spans of round and odd periods; a deadline before the window start;
/// starts at 0.
fn boundary_states() -> Vec<(State, Nanos)> {
    const DAY: u64 = 86_400_000_000_000;
    let periods = [
        1,
        1_000_000,
        1_000_000_000,
        60_000_000_000,
        DAY,
        7 * DAY,
        100_000_000_000_000_000,
        123_456_789,
        ((1 << 17) - 1) * 1_000_000_000,
        (1 << 17) * 1_000_000_000,
        ((1 << 18) - 1) * 1_000_000_000,
    ];
    let sliding_counts = [
        (0, 1),
        (1, 0),
        (1, 1),
        ((1 << 16) - 1, (1 << 16) - 1),
        (1 << 16, 1),
        (1, 1 << 16),
        (u32::MAX, u32::MAX),
    ];
    let fixed_counts = [1, 2, u64::from(u32::MAX), 1 << 32, u64::MAX];
    let mut out = Vec::new();
    for p in periods {
        let start = aligned(T0, p);
        for (prev, curr) in sliding_counts {
            let ends = if curr > 0 { 2 * p } else { p };
            let state = State::Sliding(Sliding { start, prev, curr });
            out.push((state, start.saturating_add(Nanos(ends))));
        }
        for count in fixed_counts {
            let state = State::Fixed(Fixed { start, count });
            out.push((state, start.saturating_add(Nanos(p))));
        }
    }
    // A start after the deadline (a record from another writer) and a start at 0.
    let later = T0.saturating_add(Nanos::from_secs(10));
    let odd = [
        (Nanos(later.0), T0.saturating_add(Nanos::from_secs(5))),
        (Nanos(0), T0.saturating_add(Nanos::from_secs(5))),
        (Nanos(0), Nanos(9_000_000_000_000_000_000)),
    ];
    for (start, deadline) in odd {
        let s = Sliding {
            start,
            prev: 3,
            curr: 4,
        };
        out.push((State::Sliding(s), deadline));
        out.push((State::Fixed(Fixed { start, count: 5 }), deadline));
    }
    out
}

#[test]
fn boundary_window_states_read_back_exactly() {
    let s = store(8);
    let now = T0;
    let mut want = Entries::new();
    for (n, (state, deadline)) in boundary_states().into_iter().enumerate() {
        let key = format!("w:{n:014}").into_bytes();
        assert_eq!(key.len(), 16);
        write(&s, &key, state.clone(), deadline, now);
        want.insert(key, (deadline, state));
    }
    assert_eq!(snapshot(&s, now), want);
    for (key, (deadline, state)) in &want {
        assert_eq!(
            s.ttl(key, now),
            Ttl::Remaining(deadline.saturating_sub(now))
        );
        let seen = s.limiter(key, now, |slot| Ok((slot.clone(), None)));
        assert_eq!(
            seen,
            Ok(Some(state.clone())),
            "{}",
            String::from_utf8_lossy(key)
        );
    }
    // A replica from the snapshot holds the same, and so does one of the replica.
    let replica = replica_of(&s, now);
    assert_eq!(snapshot(&replica, now), want);
    assert_eq!(snapshot(&replica_of(&replica, now), now), want);
    // Each entry lives until exactly its deadline; the wheel drops it within a tick.
    let far = Nanos(9_000_000_000_000_000_000);
    let mut deadlines: Vec<Nanos> = want.values().map(|(d, _)| *d).collect();
    deadlines.sort();
    deadlines.dedup();
    let mut swept = Nanos::ZERO;
    for d in deadlines.iter().copied().filter(|&d| d < far) {
        if d <= swept {
            continue;
        }
        let before = d.saturating_sub(Nanos(1));
        assert_eq!(snapshot(&s, before), want);
        let now = d.saturating_add(TICK);
        let due = want.values().filter(|(dl, _)| *dl <= d).count();
        let dead = want.values().filter(|(dl, _)| *dl <= now).count();
        let dropped: usize = (0..s.shard_count()).map(|i| s.expire_due(i, now)).sum();
        assert!(
            (due..=dead).contains(&dropped),
            "at {d:?}: {dropped} of {due}..={dead}"
        );
        want.retain(|_, (dl, _)| *dl > now);
        swept = now;
    }
    assert_eq!(s.len(far.saturating_sub(Nanos(1))), 2);
    assert_eq!(s.len(far), 0);
}

/// A key's algorithm and its recorded state, checked by hand against `sluice_core::check`.
#[test]
fn window_checks_with_changing_periods_match_the_algorithm() {
    let s = store(8);
    let mut model = Entries::new();
    let mut now = T0;
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    let mut next = |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let periods = [
        1_000_000,
        250_000_000,
        1_000_000_000,
        3_000_000_000,
        60_000_000_000,
        86_400_000_000_000,
        123_456_789,
        999_999_937,
    ];
    let limits = [1, 10, 1000, (1 << 16) - 1, (1 << 16) + 5, SLIDING_LIMIT_MAX];
    for step in 0..40_000u32 {
        now = now.saturating_add(Nanos(next(20_000_000)));
        let k = next(400);
        let key = format!("win:{k:012}").into_bytes();
        let algo = if k.is_multiple_of(2) {
            Algo::Sliding
        } else {
            Algo::Fixed
        };
        model.retain(|_, (d, _)| *d > now);
        match next(20) {
            0 => {
                // EXPIRE to any instant: the span stops being a period, and may stop packing.
                let at = now.saturating_add(Nanos(next(5_000_000_000)));
                let found = s.expire_at(&key, at, now);
                assert_eq!(found, model.contains_key(&key));
                if at <= now {
                    model.remove(&key);
                } else if let Some(e) = model.get_mut(&key) {
                    e.0 = at;
                }
            }
            1 => {
                s.expire_due(next(8) as usize, now);
            }
            _ => {
                let mut limit = limits[next(limits.len() as u64) as usize];
                if algo == Algo::Fixed && next(4) == 0 {
                    limit = (1 << (31 + next(20))) + next(3);
                }
                let period = Nanos(periods[next(periods.len() as u64) as usize]);
                let cost = match next(4) {
                    0 => limit,
                    1 => limit / 2,
                    _ => 1 + next(3).min(limit - 1),
                };
                let p = Params {
                    limit,
                    period,
                    burst: limit,
                    cost,
                };
                let mut slot = model.get(&key).map(|(_, st)| st.clone());
                let want = sluice_core::check(&mut slot, algo, &p, now, false);
                let got = s.check(&key, algo, &p, now, false);
                assert_eq!(got.map_err(|_| ()), want.map_err(|_| ()), "step {step}");
                // COST 0 only reads.
                if let (Ok(d), true) = (want, cost > 0) {
                    match slot {
                        Some(state) if d.reset_after > Nanos::ZERO => {
                            model.insert(key, (now.saturating_add(d.reset_after), state));
                        }
                        _ => {
                            model.remove(&key);
                        }
                    }
                }
            }
        }
        if step % 4096 == 0 {
            assert_eq!(snapshot(&s, now), model, "step {step}");
        }
    }
    assert_eq!(snapshot(&s, now), model);
    assert_eq!(snapshot(&replica_of(&s, now), now), model);
    assert_eq!(s.len(now), model.len());
}

#[test]
fn evicted_and_expired_window_buckets_leave_nothing_behind() {
    let limit = 1 << 20;
    let s = Store::new(StoreConfig {
        shards: 4,
        maxmemory: limit,
        policy: EvictionPolicy::EvictSoonest,
    });
    let empty = s.used_memory();
    let mut peak = 0;
    // Periods of 1..=300 s, one request each: deadlines spread over 5 minutes.
    for i in 0..60_000u64 {
        let algo = if i.is_multiple_of(2) {
            Algo::Sliding
        } else {
            Algo::Fixed
        };
        let p = Params {
            limit: 10,
            period: Nanos::from_secs(1 + i % 300),
            burst: 10,
            cost: 1,
        };
        s.check(format!("ev:{i:013}").as_bytes(), algo, &p, T0, false)
            .unwrap();
        peak = peak.max(s.used_memory());
    }
    assert!(s.evicted_total() > 0);
    // The budget holds but for what no insert foresees: a cuckoo walk that fails below the
    // growth threshold grows the table by a fifth (as it does for TOKEN buckets).
    assert!(peak <= limit + limit / 5, "{peak} > {limit}");
    let kept = snapshot(&s, T0);
    assert_eq!(kept.len(), s.len(T0));
    for (key, (deadline, state)) in &kept {
        let i: u64 = String::from_utf8_lossy(&key[3..]).parse().unwrap();
        let period = Nanos::from_secs(1 + i % 300).0;
        let start = aligned(T0, period);
        let want = if i.is_multiple_of(2) {
            let s = Sliding {
                start,
                prev: 0,
                curr: 1,
            };
            (Nanos(start.0 + 2 * period), State::Sliding(s))
        } else {
            let f = Fixed { start, count: 1 };
            (Nanos(start.0 + period), State::Fixed(f))
        };
        assert_eq!((*deadline, state.clone()), want);
    }
    let end = T0.saturating_add(Nanos::from_secs(601));
    let dropped: usize = (0..s.shard_count()).map(|i| s.expire_due(i, end)).sum();
    assert_eq!(dropped, kept.len());
    assert_eq!(s.len(end), 0);
    assert!(
        s.used_memory() < empty + peak / 8,
        "{} vs {peak}",
        s.used_memory()
    );
    s.flush();
    assert_eq!(s.used_memory(), empty);
}
