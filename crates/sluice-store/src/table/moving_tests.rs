//! The table while it moves into new arrays, and scans across the moves, against a
//! `HashMap` model: random inserts, writes, removals, lookups, move steps, shrinks and scans.

use std::collections::{HashMap, HashSet};

use proptest::prelude::*;
use sluice_core::{Nanos, State};

use super::{Growth, Slot, Table};
use crate::entry::{Counter, Value};
use crate::key::Probe;
use crate::shard::KeyHash;

#[derive(Clone, Debug)]
enum Op {
    /// Insert the key, or write a new value to it if present.
    Put(u16, u64),
    Remove(u16),
    Get(u16),
    /// A housekeeping step of the move, of this budget.
    Migrate(u16),
    Shrink,
    ScanBegin,
    /// A step of the scan in progress, of this budget.
    ScanStep(u8),
}

fn op(keys: u16) -> impl Strategy<Value = Op> {
    prop_oneof![
        40 => (0..keys, any::<u64>()).prop_map(|(k, v)| Op::Put(k, v)),
        15 => (0..keys).prop_map(Op::Remove),
        20 => (0..keys).prop_map(Op::Get),
        4 => (1..400u16).prop_map(Op::Migrate),
        2 => Just(Op::Shrink),
        2 => Just(Op::ScanBegin),
        10 => (1..64u8).prop_map(Op::ScanStep),
    ]
}

/// Keys of every form: short inline, 16-byte inline, and longer ones on the heap.
fn key(k: u16) -> Vec<u8> {
    match k % 3 {
        0 => format!("k{k}").into_bytes(),
        1 => format!("key:{k:011}").into_bytes(),
        _ => format!("a rather long key, on the heap: {k}").into_bytes(),
    }
}

/// Values of every shape: packed narrow, boxed counters, boxed limiters.
fn value(k: u16, v: u64) -> (Value, Nanos) {
    let v = v % 1_000_000_000 + 1000;
    match (k / 3) % 3 {
        0 => (Value::Limiter(State::Token { tat: Nanos(v) }), Nanos(v)),
        1 => (Value::Counter(Counter::Int(v as i64)), Nanos::MAX),
        _ => (Value::Limiter(State::Gcra { tat: Nanos(v) }), Nanos(v / 2)),
    }
}

/// An entry's value and deadline, to compare with the model's.
fn shown(t: &Table, i: usize) -> (String, Nanos) {
    (t.with_value(i, |v| format!("{v:?}")), t.deadline(i))
}

struct Scan {
    id: u64,
    /// Keys present since the scan began: each must be visited.
    owed: HashSet<Vec<u8>>,
    seen: HashSet<Vec<u8>>,
}

fn run(ops: Vec<Op>, hash: impl Fn(&[u8]) -> u32) -> Result<(), TestCaseError> {
    let mut t = Table::default();
    let mut model: HashMap<Vec<u8>, (String, Nanos)> = HashMap::new();
    let mut scan: Option<Scan> = None;
    let mut ids = 0;
    let find = |t: &mut Table, k: &[u8]| {
        let p = Probe::new(k);
        let h = hash(k);
        t.find(h, &p).or_else(|| t.pull(h, &p, &hash))
    };
    for op in ops {
        match op {
            Op::Put(k, v) => {
                let (k, (value, deadline)) = (key(k), value(k, v));
                let want = (format!("{value:?}"), deadline);
                match find(&mut t, &k) {
                    Some(i) => {
                        let _ = t.take_value(i);
                        t.put(i, value, deadline, 1);
                    }
                    None => {
                        let p = Probe::new(&k);
                        let i =
                            t.insert(hash(&k), &p, value, deadline, 1, &hash, Growth::Incremental);
                        prop_assert_eq!(t.key(i), &k[..]);
                    }
                }
                model.insert(k, want);
            }
            Op::Remove(k) => {
                let k = key(k);
                let i = find(&mut t, &k);
                prop_assert_eq!(i.is_some(), model.remove(&k).is_some());
                if let Some(i) = i {
                    t.remove(i);
                }
                if let Some(s) = &mut scan {
                    s.owed.remove(&k);
                }
            }
            Op::Get(k) => {
                let k = key(k);
                let found = find(&mut t, &k).map(|i| shown(&t, i));
                prop_assert_eq!(found.as_ref(), model.get(&k));
            }
            Op::Migrate(n) => {
                t.migrate_some(usize::from(n), &hash);
            }
            Op::Shrink => t.maybe_shrink(&hash, Growth::Incremental),
            Op::ScanBegin => {
                if scan.is_none() {
                    ids += 1;
                    t.scan_begin(ids);
                    let owed = model.keys().cloned().collect();
                    scan = Some(Scan {
                        id: ids,
                        owed,
                        seen: HashSet::new(),
                    });
                }
            }
            Op::ScanStep(n) => {
                if let Some(s) = &mut scan {
                    let done = t.scan_step(s.id, usize::from(n), &hash, |t, i| {
                        s.seen.insert(t.key(i).to_vec());
                    });
                    if done {
                        let missed: Vec<_> = s.owed.difference(&s.seen).collect();
                        prop_assert!(missed.is_empty(), "the scan missed {:?}", missed);
                        scan = None;
                    }
                }
            }
        }
        prop_assert_eq!(t.len(), model.len());
        let expiring = model.values().filter(|v| v.1 != Nanos::MAX).count();
        prop_assert_eq!(t.expires(), expiring);
    }
    // Every entry, wherever it is, holds what the model says.
    let mut entries = 0;
    for part in t.parts() {
        for i in (0..part.meta.len()).filter(|&i| part.meta[i] != super::EMPTY) {
            entries += 1;
            prop_assert_eq!(Some(&shown(part, i)), model.get(part.key(i)));
        }
    }
    prop_assert_eq!(entries, model.len());
    // Drained: the move ends, nothing owned is left behind.
    while !t.migrate_some(64, &hash) {}
    prop_assert!(!t.is_moving());
    for k in model.keys() {
        let i = t.find(hash(k), &Probe::new(k)).expect("moved in");
        t.remove(i);
    }
    prop_assert_eq!((t.len(), t.heap, t.expires(), t.wide), (0, 0, 0, 0));
    Ok(())
}

fn real_hash(k: &[u8]) -> u32 {
    crate::StoreHasher::default().hash32(k)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn a_moving_table_matches_the_model(ops in proptest::collection::vec(op(3000), 1..4000)) {
        run(ops, real_hash)?;
    }

    /// Few distinct hashes: long cuckoo walks, full buckets and the stash, during moves.
    #[test]
    fn a_moving_table_with_colliding_hashes_matches_the_model(
        ops in proptest::collection::vec(op(300), 1..1500)
    ) {
        run(ops, |k| real_hash(k) & 0x3f)?;
    }
}

/// Growth by a fifth at a million keys: no insert moves more than [`super::INSERT_MIGRATE`]
/// slots' worth, and each move ends long before the next growth.
#[test]
fn each_insert_moves_a_bounded_share() {
    let mut t = Table::default();
    let (mut moves, mut growths) = (0, 0);
    for n in 0..300_000u32 {
        let k = format!("user:{n:011}");
        let moving = t.is_moving();
        let p = Probe::new(k.as_bytes());
        let before = t.old.as_ref().map_or(0, |o| o.len);
        let cap = t.cap;
        let (v, d) = value(0, u64::from(n));
        t.insert(
            real_hash(k.as_bytes()),
            &p,
            v,
            d,
            1,
            &real_hash,
            Growth::Incremental,
        );
        let after = t.old.as_ref().map_or(0, |o| o.len);
        if moving && t.is_moving() {
            // Only the bounded step moved old entries in.
            assert!(
                before - after <= super::INSERT_MIGRATE / super::MOVE_COST,
                "{before} -> {after}"
            );
            moves += 1;
        }
        if t.cap != cap {
            growths += 1;
            // A growth starts only when the previous move is over: it never has to finish one.
            assert!(
                !moving,
                "a growth at {n} keys found the last move unfinished"
            );
        }
    }
    assert!(
        growths > 10 && moves > 1000,
        "{growths} growths, {moves} inserts while moving"
    );
}

/// While a table moves, the old slots' pages the move has passed are no longer resident (the
/// kernel's view, `mincore`), none is kept longer than [`super::RELEASE_BYTES`], and every key
/// is still found, in the new arrays or still in the old ones.
#[cfg(target_os = "linux")]
#[test]
fn a_move_hands_back_the_pages_it_passed() {
    let page = super::page_size().expect("a page size");
    let key = |n: u32| format!("user:{n:011}");
    let mut t = Table::default();
    let mut checked = 0;
    let n_keys = 100_000u32;
    for n in 0..n_keys {
        let k = key(n);
        let (v, d) = value(0, u64::from(n));
        let h = real_hash(k.as_bytes());
        t.insert(
            h,
            &Probe::new(k.as_bytes()),
            v,
            d,
            1,
            &real_hash,
            Growth::Incremental,
        );
        let Some(old) = &t.old else { continue };
        assert!(t.released <= t.moved);
        assert!((t.moved - t.released) * size_of::<Slot>() < super::RELEASE_BYTES);
        let first = old.slots.as_ptr().addr();
        let start = first.next_multiple_of(page);
        let end = (first + t.released * size_of::<Slot>()) / page * page;
        if end > start {
            let mut resident = vec![0u8; (end - start) / page];
            // SAFETY: `[start, end)` is page-aligned and within the old slots' allocation, which
            // `t` holds (borrowed) meanwhile; `mincore` only writes one byte per page into
            // `resident`, which has room for exactly that many.
            let r = unsafe {
                libc::mincore(
                    old.slots
                        .as_ptr()
                        .cast::<u8>()
                        .add(start - first)
                        .cast_mut()
                        .cast(),
                    end - start,
                    resident.as_mut_ptr(),
                )
            };
            assert_eq!(r, 0, "mincore: {}", std::io::Error::last_os_error());
            let kept = resident.iter().filter(|&&b| b & 1 != 0).count();
            assert_eq!(
                kept,
                0,
                "{kept} of {} passed pages resident",
                resident.len()
            );
            checked += 1;
        }
    }
    assert!(checked > 100, "{checked} checks");
    for n in 0..n_keys {
        let k = key(n);
        let (h, p) = (real_hash(k.as_bytes()), Probe::new(k.as_bytes()));
        let found = t.find(h, &p).or_else(|| t.pull(h, &p, &real_hash));
        assert!(found.is_some(), "{k} lost");
    }
}
