//! `Shard`: one lock's worth of the store: a hash table of entries, its timing wheel and its
//! accounting. Every operation is a plain function on `&mut Shard` (the store takes the lock).
//!
//! The caller hashes the key once; the same hash probes the table and is what the wheel files.
//! The table stores no hash: growing it and verifying a wheel item rehash the key (cheap, and
//! 8 bytes per entry saved).
//!
//! Invariants:
//! - `stats.heap` is the sum of `Entry::heap_bytes` over the table; `stats.expires` counts the
//!   entries with a deadline.
//! - An entry whose deadline is `<= now` is dead: every lookup treats it as missing (and drops
//!   it), before or after the wheel gets to it.
//! - A limiter entry holds its state whenever the lock is free (`Value::take_limiter`).

use std::ops::Range;

use bytes::Bytes;
use hashbrown::HashTable;
use hashbrown::hash_table::OccupiedEntry;
use sluice_core::{CheckError, Nanos, State};

use crate::entry::{Counter, Entry, Value};
use crate::key::SmallBytes;
use crate::wheel::{NOT_FILED, Wheel, tick_floor};
use crate::{SetCond, SetTtl, StoreError, Ttl};

/// Tables this small are never shrunk: not worth a reallocation.
const MIN_SHRINK_CAPACITY: usize = 64;

/// Hashes a key. The store uses one fixed-seed ahash; tests inject colliding hashers.
pub trait KeyHash {
    fn hash_key(&self, key: &[u8]) -> u64;
}

#[derive(Debug, Default)]
struct Stats {
    /// Heap bytes of keys and values.
    heap: usize,
    /// Entries with a deadline.
    expires: usize,
    /// Entries dropped because their deadline passed (by the wheel or on read).
    expired: u64,
}

impl Stats {
    fn removed(&mut self, e: &Entry) {
        self.heap -= e.heap_bytes();
        if e.has_deadline() {
            self.expires -= 1;
        }
    }

    fn added(&mut self, e: &Entry) {
        self.heap += e.heap_bytes();
        if e.has_deadline() {
            self.expires += 1;
        }
    }
}

/// One shard. See the module docs.
#[derive(Debug)]
pub struct Shard<H> {
    table: HashTable<Entry>,
    wheel: Wheel,
    stats: Stats,
    hasher: H,
}

/// Finds `key`, dropping it first if its deadline has passed.
fn find_live<'a>(
    table: &'a mut HashTable<Entry>,
    stats: &mut Stats,
    h: u64,
    key: &[u8],
    now: Nanos,
) -> Option<OccupiedEntry<'a, Entry>> {
    match table.find_entry(h, |e| e.key == *key) {
        Ok(occ) if occ.get().deadline <= now => {
            let (e, _) = occ.remove();
            stats.removed(&e);
            stats.expired += 1;
            None
        }
        Ok(occ) => Some(occ),
        Err(_) => None,
    }
}

/// Moves an entry's deadline, keeping `expires` and the wheel in step.
fn set_deadline(wheel: &mut Wheel, stats: &mut Stats, h: u64, e: &mut Entry, deadline: Nanos) {
    match (e.has_deadline(), deadline != Nanos::MAX) {
        (false, true) => stats.expires += 1,
        (true, false) => stats.expires -= 1,
        _ => {}
    }
    e.deadline = deadline;
    wheel.reschedule(h, &mut e.filed, deadline);
}

impl<H: KeyHash> Shard<H> {
    pub fn new(hasher: H) -> Shard<H> {
        Shard {
            table: HashTable::new(),
            wheel: Wheel::default(),
            stats: Stats::default(),
            hasher,
        }
    }

    /// Inserts a key known to be absent and files it in the wheel.
    fn insert(&mut self, h: u64, key: &[u8], value: Value, deadline: Nanos, now: Nanos) {
        let Shard {
            table,
            wheel,
            stats,
            hasher,
        } = self;
        let entry = Entry {
            key: SmallBytes::new(key),
            value,
            deadline,
            filed: NOT_FILED,
        };
        stats.added(&entry);
        let mut occ = table.insert_unique(h, entry, |e| hasher.hash_key(e.key.as_slice()));
        let e = occ.get_mut();
        wheel.idle_to(now);
        wheel.reschedule(h, &mut e.filed, deadline);
    }

    /// Runs `f` on the key's limiter slot (`None` if missing or expired). See `Store::limiter`.
    pub fn limiter<T>(
        &mut self,
        h: u64,
        key: &[u8],
        now: Nanos,
        f: impl FnOnce(&mut Option<State>) -> Result<(T, Option<Nanos>), CheckError>,
    ) -> Result<T, StoreError> {
        let Shard {
            table,
            wheel,
            stats,
            ..
        } = self;
        let Some(mut occ) = find_live(table, stats, h, key, now) else {
            let mut slot = None;
            let (v, change) = f(&mut slot).map_err(StoreError::Check)?;
            if let (Some(state), Some(reset)) = (slot, change) {
                let deadline = now.saturating_add(reset);
                if deadline > now {
                    self.insert(h, key, Value::Limiter(state), deadline, now);
                }
            }
            return Ok(v);
        };
        let e = occ.get_mut();
        let Some(state) = e.value.take_limiter() else {
            return Err(StoreError::WrongType);
        };
        let heap_before = state.heap_bytes();
        let mut slot = Some(state);
        let result = f(&mut slot);
        // Until the state is back in place or the entry removed, the entry holds a placeholder.
        let deadline = match &result {
            Ok((_, change)) => change.map(|reset| now.saturating_add(reset)),
            Err(_) => None,
        };
        match slot {
            Some(state) if deadline.is_none_or(|d| d > now) => {
                stats.heap = stats.heap - heap_before + state.heap_bytes();
                e.value = Value::Limiter(state);
                if let Some(deadline) = deadline {
                    set_deadline(wheel, stats, h, e, deadline);
                }
            }
            _ => {
                // Back to fresh: a missing key answers the same, so it need not be kept.
                stats.heap -= heap_before;
                let (e, _) = occ.remove();
                stats.removed(&e);
            }
        }
        result.map(|(v, _)| v).map_err(StoreError::Check)
    }

    pub fn get(&mut self, h: u64, key: &[u8], now: Nanos) -> Result<Option<Bytes>, StoreError> {
        match find_live(&mut self.table, &mut self.stats, h, key, now) {
            None => Ok(None),
            Some(occ) => match &occ.get().value {
                Value::Counter(c) => Ok(Some(c.to_bytes())),
                Value::Limiter(_) => Err(StoreError::WrongType),
            },
        }
    }

    pub fn set(
        &mut self,
        h: u64,
        key: &[u8],
        value: &[u8],
        cond: SetCond,
        ttl: SetTtl,
        now: Nanos,
    ) -> bool {
        let Shard {
            table,
            wheel,
            stats,
            ..
        } = self;
        let found = find_live(table, stats, h, key, now);
        match (cond, found.is_some()) {
            (SetCond::Nx, true) | (SetCond::Xx, false) => return false,
            _ => {}
        }
        let deadline = match ttl {
            SetTtl::Clear => Nanos::MAX,
            SetTtl::Keep => found.as_ref().map_or(Nanos::MAX, |o| o.get().deadline),
            SetTtl::At(at) => at,
        };
        match found {
            // Set with a deadline already past: the key is written and expires at once.
            Some(occ) if deadline <= now => {
                let (e, _) = occ.remove();
                stats.removed(&e);
            }
            None if deadline <= now => {}
            Some(mut occ) => {
                let e = occ.get_mut();
                let counter = Counter::from_bytes(value);
                stats.heap = stats.heap - e.value.heap_bytes() + counter.heap_bytes();
                e.value = Value::Counter(counter);
                set_deadline(wheel, stats, h, e, deadline);
            }
            None => {
                let value = Value::Counter(Counter::from_bytes(value));
                self.insert(h, key, value, deadline, now);
            }
        }
        true
    }

    pub fn incr_by(
        &mut self,
        h: u64,
        key: &[u8],
        delta: i64,
        now: Nanos,
    ) -> Result<i64, StoreError> {
        let Some(mut occ) = find_live(&mut self.table, &mut self.stats, h, key, now) else {
            self.insert(h, key, Value::Counter(Counter::Int(delta)), Nanos::MAX, now);
            return Ok(delta);
        };
        match &mut occ.get_mut().value {
            Value::Counter(Counter::Int(n)) => {
                *n = n.checked_add(delta).ok_or(StoreError::Overflow)?;
                Ok(*n)
            }
            Value::Counter(_) => Err(StoreError::NotInteger),
            Value::Limiter(_) => Err(StoreError::WrongType),
        }
    }

    pub fn expire_at(&mut self, h: u64, key: &[u8], at: Nanos, now: Nanos) -> bool {
        let Shard {
            table,
            wheel,
            stats,
            ..
        } = self;
        let Some(mut occ) = find_live(table, stats, h, key, now) else {
            return false;
        };
        if at <= now {
            let (e, _) = occ.remove();
            stats.removed(&e);
        } else {
            set_deadline(wheel, stats, h, occ.get_mut(), at);
        }
        true
    }

    pub fn ttl(&mut self, h: u64, key: &[u8], now: Nanos) -> Ttl {
        match find_live(&mut self.table, &mut self.stats, h, key, now) {
            None => Ttl::Missing,
            Some(occ) if !occ.get().has_deadline() => Ttl::Persistent,
            Some(occ) => Ttl::Remaining(occ.get().deadline.saturating_sub(now)),
        }
    }

    pub fn del(&mut self, h: u64, key: &[u8], now: Nanos) -> bool {
        match find_live(&mut self.table, &mut self.stats, h, key, now) {
            None => false,
            Some(occ) => {
                let (e, _) = occ.remove();
                self.stats.removed(&e);
                true
            }
        }
    }

    pub fn exists(&mut self, h: u64, key: &[u8], now: Nanos) -> bool {
        find_live(&mut self.table, &mut self.stats, h, key, now).is_some()
    }

    /// Runs the wheel up to `now`, dropping entries whose deadline passed; returns how many.
    pub fn expire_due(&mut self, now: Nanos) -> usize {
        let Shard {
            table,
            wheel,
            stats,
            hasher,
        } = self;
        let mut dropped = 0;
        wheel.advance(now, |wheel, h, range| {
            dropped += visit(table, stats, hasher, wheel, h, range, now);
        });
        if dropped > 0 {
            self.maybe_shrink();
        }
        dropped
    }

    /// Gives memory back after a wave of expiries: memory follows the clients that are limited
    /// now, not the peak. Shrinks only below 1/8 full, to half full, so a table that breathes
    /// around one size does not reallocate back and forth.
    fn maybe_shrink(&mut self) {
        let (len, cap) = (self.table.len(), self.table.capacity());
        if cap > MIN_SHRINK_CAPACITY && len < cap / 8 {
            let hasher = &self.hasher;
            self.table
                .shrink_to(len * 2, |e| hasher.hash_key(e.key.as_slice()));
        }
    }

    /// Runs the wheel, then also drops the dead entries that wait for the end of the current
    /// tick, so that the table holds exactly the live keys. Returns keys dropped.
    pub fn reap(&mut self, now: Nanos) -> usize {
        let mut dropped = self.expire_due(now);
        let Shard {
            table,
            stats,
            hasher,
            wheel,
        } = self;
        // Everything due by `now` is filed at or before `tick_floor(now) + 1`, and after the
        // wheel ran only that tick's level-0 slot can still hold such entries.
        for &h in wheel.pending_at(tick_floor(now) + 1) {
            dropped += drop_due(table, stats, hasher, h, now);
        }
        if dropped > 0 {
            self.maybe_shrink();
        }
        dropped
    }

    pub fn key_count(&self) -> usize {
        self.table.len()
    }

    pub fn expires(&self) -> usize {
        self.stats.expires
    }

    pub fn expired_total(&self) -> u64 {
        self.stats.expired
    }

    /// Drops every key and frees the table and the wheel.
    pub fn flush(&mut self) {
        self.table = HashTable::new();
        self.wheel = Wheel::default();
        self.stats.heap = 0;
        self.stats.expires = 0;
    }

    /// Structural bytes owned outside the shard struct: the table's allocation (buckets and
    /// control bytes), heap keys and values, and the wheel's buffers.
    pub fn heap_bytes(&self) -> usize {
        self.table.allocation_size() + self.stats.heap + self.wheel.heap_bytes()
    }

    #[cfg(test)]
    pub fn wheel_items(&self) -> usize {
        self.wheel.items()
    }
}

/// Drops every entry with hash `h` whose deadline is `<= now`; returns how many.
fn drop_due(
    table: &mut HashTable<Entry>,
    stats: &mut Stats,
    hasher: &impl KeyHash,
    h: u64,
    now: Nanos,
) -> usize {
    let mut dropped = 0;
    // Several keys may share the full 64-bit hash: loop until none of them is due.
    while let Ok(occ) = table.find_entry(h, |e| {
        e.deadline <= now && hasher.hash_key(e.key.as_slice()) == h
    }) {
        let (e, _) = occ.remove();
        stats.removed(&e);
        stats.expired += 1;
        dropped += 1;
    }
    dropped
}

/// One fired wheel item: drops the due entries with hash `h` and re-files the entries this
/// slot holds (`filed` in `range`) whose deadline moved later. Entries filed elsewhere are
/// left alone: this item is stale for them.
fn visit(
    table: &mut HashTable<Entry>,
    stats: &mut Stats,
    hasher: &impl KeyHash,
    wheel: &mut Wheel,
    h: u64,
    range: Range<u64>,
    now: Nanos,
) -> usize {
    let dropped = drop_due(table, stats, hasher, h, now);
    for e in table.iter_hash_mut(h) {
        if range.contains(&e.filed) && hasher.hash_key(e.key.as_slice()) == h {
            wheel.refile(h, &mut e.filed, e.deadline);
        }
    }
    dropped
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wheel::TICK_NS;

    /// Every key gets the same 64-bit hash: the worst collision there is.
    struct SameHash;
    impl KeyHash for SameHash {
        fn hash_key(&self, _: &[u8]) -> u64 {
            0x0123_4567_89ab_cdef
        }
    }

    /// Hashes that differ but share the control byte and most probe positions, so the table's
    /// candidates for a hash include other keys and the full-hash check is what tells them apart.
    struct FirstByte;
    impl KeyHash for FirstByte {
        fn hash_key(&self, key: &[u8]) -> u64 {
            u64::from(key[0]) << 1
        }
    }

    const T0: Nanos = Nanos(1_700_000_000_000_000_000);

    fn secs(s: u64) -> Nanos {
        T0.saturating_add(Nanos::from_secs(s))
    }

    fn set_with<H: KeyHash>(shard: &mut Shard<H>, key: &[u8], v: &[u8], at: Option<Nanos>) {
        let h = shard.hasher.hash_key(key);
        let ttl = at.map_or(SetTtl::Clear, SetTtl::At);
        assert!(shard.set(h, key, v, SetCond::Always, ttl, T0));
    }

    fn get<H: KeyHash>(shard: &mut Shard<H>, key: &[u8], now: Nanos) -> Option<Bytes> {
        let h = shard.hasher.hash_key(key);
        shard.get(h, key, now).unwrap()
    }

    #[test]
    fn keys_with_one_hash_live_independent_lives() {
        let mut s = Shard::new(SameHash);
        let h = SameHash.hash_key(b"");
        set_with(&mut s, b"a", b"1", Some(secs(10)));
        set_with(&mut s, b"b", b"2", Some(secs(20)));
        set_with(&mut s, b"c", b"3", None);
        assert_eq!(s.key_count(), 3);
        assert_eq!(get(&mut s, b"a", T0).as_deref(), Some(&b"1"[..]));
        assert_eq!(get(&mut s, b"b", T0).as_deref(), Some(&b"2"[..]));
        // The wheel holds one item per key even though all items are the same hash.
        assert_eq!(s.wheel_items(), 2);

        assert_eq!(s.expire_due(secs(10).saturating_sub(Nanos(1))), 0);
        assert_eq!(s.expire_due(secs(10).saturating_add(Nanos(TICK_NS))), 1);
        assert_eq!(get(&mut s, b"a", secs(11)), None);
        assert_eq!(get(&mut s, b"b", secs(11)).as_deref(), Some(&b"2"[..]));

        // Moving b later re-files it lazily; c gets a deadline before b's.
        assert!(s.expire_at(h, b"b", secs(40), secs(11)));
        assert!(s.expire_at(h, b"c", secs(30), secs(11)));
        assert_eq!(s.expire_due(secs(29)), 0);
        assert_eq!(s.expire_due(secs(31)), 1);
        assert!(!s.exists(h, b"c", secs(31)));
        assert!(s.exists(h, b"b", secs(31)));
        assert_eq!(s.expire_due(secs(41)), 1);
        assert_eq!(s.key_count(), 0);
        assert_eq!(s.wheel_items(), 0);
        assert_eq!(s.expired_total(), 3);
    }

    #[test]
    fn colliding_limiter_and_counter_keep_their_types() {
        let mut s = Shard::new(SameHash);
        let h = SameHash.hash_key(b"");
        set_with(&mut s, b"counter", b"5", None);
        let tat = secs(5);
        s.limiter(h, b"bucket", T0, |slot| {
            assert!(slot.is_none());
            *slot = Some(State::Token { tat });
            Ok(((), Some(Nanos::from_secs(5))))
        })
        .unwrap();
        assert_eq!(s.incr_by(h, b"counter", 2, T0), Ok(7));
        assert_eq!(s.incr_by(h, b"bucket", 2, T0), Err(StoreError::WrongType));
        assert_eq!(s.get(h, b"bucket", T0), Err(StoreError::WrongType));
        let seen = s.limiter(h, b"bucket", T0, |slot| Ok((slot.clone(), None)));
        assert_eq!(seen, Ok(Some(State::Token { tat })));
        let wrong = s.limiter(h, b"counter", T0, |_| Ok(((), None)));
        assert_eq!(wrong, Err(StoreError::WrongType));
        assert!(s.del(h, b"counter", T0));
        assert_eq!(s.ttl(h, b"bucket", T0), Ttl::Remaining(Nanos::from_secs(5)));
        assert_eq!(s.expire_due(secs(6)), 1);
        assert_eq!(s.key_count(), 0);
    }

    #[test]
    fn probe_neighbours_with_other_hashes_are_not_touched() {
        let mut s = Shard::new(FirstByte);
        for (i, k) in (b'a'..=b'z').enumerate() {
            set_with(&mut s, &[k, b'x'], b"v", Some(secs(1 + i as u64)));
        }
        for (i, k) in (b'a'..=b'z').enumerate() {
            let now = secs(1 + i as u64).saturating_add(Nanos(TICK_NS));
            assert_eq!(s.expire_due(now), 1, "key {}", k as char);
            assert_eq!(s.key_count(), 25 - i);
            assert!(get(&mut s, &[k, b'x'], now).is_none());
            if k < b'z' {
                assert!(get(&mut s, &[k + 1, b'x'], now).is_some());
            }
        }
    }

    #[test]
    fn reap_drops_deadlines_inside_the_current_tick() {
        let mut s = Shard::new(SameHash);
        // Deadlines a few ns apart, both inside one tick.
        let d = secs(3);
        set_with(&mut s, b"a", b"1", Some(d));
        set_with(&mut s, b"b", b"1", Some(d.saturating_add(Nanos(2))));
        s.expire_due(T0);
        s.reap(d.saturating_add(Nanos(1)));
        assert_eq!(s.key_count(), 1);
        assert_eq!(s.expires(), 1);
        s.reap(d.saturating_add(Nanos(2)));
        assert_eq!(s.key_count(), 0);
        assert_eq!(s.expires(), 0);
    }

    #[test]
    fn table_shrinks_after_mass_expiry() {
        let mut s = Shard::new(RealHash);
        for i in 0..4096u32 {
            let key = i.to_le_bytes();
            let h = s.hasher.hash_key(&key);
            s.set(h, &key, b"x", SetCond::Always, SetTtl::At(secs(1)), T0);
        }
        let full = s.heap_bytes();
        assert_eq!(s.expire_due(secs(2)), 4096);
        assert!(s.heap_bytes() < full / 8, "{} vs {full}", s.heap_bytes());
    }

    struct RealHash;
    impl KeyHash for RealHash {
        fn hash_key(&self, key: &[u8]) -> u64 {
            crate::StoreHasher::default().hash_key(key)
        }
    }
}
