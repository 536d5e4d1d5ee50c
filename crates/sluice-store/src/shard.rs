//! `Shard`: one lock's worth of the store: a table of keys, its timing wheel, its accounting and
//! its share of the memory limit. Every operation is a plain function on `&mut Shard` (the
//! store takes the lock).
//!
//! The caller hashes the key once; the low 32 bits of that hash pick the key's table buckets
//! and are what the wheel files. The table stores no hash: moving a key between buckets and
//! verifying a wheel item rehash the key (cheap, and 4–8 bytes per entry saved).
//!
//! Invariants:
//! - An entry whose deadline is `<= now` is dead: every lookup treats it as missing (and drops
//!   it), before or after the wheel gets to it.
//! - A limiter entry holds its state whenever the lock is free (`Table::take_limiter`).
//! - With a memory budget, a new key is inserted only if the shard's bytes after the insert
//!   (table growth, box, heap key) stay within it, after evicting the soonest-to-expire
//!   entries if the policy allows ([`Shard::make_room`]).

use bytes::Bytes;
use sluice_core::{CheckError, Nanos, State};

use sluice_repl::record;

use crate::entry::{Counter, Value};
use crate::journal::Journal;
use crate::key::Probe;
use crate::table::{Growth, Table};
use crate::wheel::{NOT_FILED, SlotId, Wheel, tick_floor};
use crate::{Collection, EvictionPolicy, Kind, SetCond, SetTtl, StoreError, StrWrite, Ttl};

/// Hashes a key. The store uses one fixed-seed foldhash; tests inject colliding hashers.
pub trait KeyHash {
    fn hash_key(&self, key: &[u8]) -> u64;

    /// The 32 bits the table and the wheel use.
    #[inline]
    fn hash32(&self, key: &[u8]) -> u32 {
        self.hash_key(key) as u32
    }
}

/// The memory limit as one shard sees it: its budget in bytes (`usize::MAX` = none) and what
/// to do when a new key does not fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub budget: usize,
    pub policy: EvictionPolicy,
}

impl Limits {
    pub const NONE: Limits = Limits {
        budget: usize::MAX,
        policy: EvictionPolicy::EvictSoonest,
    };
}

#[derive(Debug, Default)]
struct Stats {
    /// Entries dropped because their deadline passed (by the wheel or on read).
    expired: u64,
    /// Live entries dropped to make room for a new key.
    evicted: u64,
    /// New keys refused for lack of memory.
    rejected: u64,
}

/// One shard. See the module docs.
#[derive(Debug)]
pub struct Shard<H> {
    table: Table,
    wheel: Wheel,
    stats: Stats,
    hasher: H,
    /// Replication records of this shard's changes, while replication is on.
    pub(crate) journal: Journal,
    /// Scans begun, the last one's id.
    scans: u64,
    /// Big values this shard's changes removed, freed later with no lock held
    /// ([`Shard::take_lazy`]), as Redis's lazyfree frees them: dropping a million-member set
    /// under the lock would stall every other request of the shard.
    lazy: Vec<Value>,
}

/// Values whose freeing takes more allocations than this are freed lazily (Redis's
/// `LAZYFREE_THRESHOLD`).
pub const LAZYFREE_EFFORT: usize = 64;

/// Removes entry `i`, setting a big value aside in `lazy` instead of freeing it here.
fn unlink(table: &mut Table, lazy: &mut Vec<Value>, i: usize) {
    if table.frees_slowly(i, LAZYFREE_EFFORT) {
        lazy.push(table.take_value(i));
    }
    table.remove(i);
}

impl<H: KeyHash> Shard<H> {
    /// Where a lookup in this shard reads (see [`crate::table::Layout`]).
    pub fn layout(&self) -> crate::table::Layout {
        self.table.layout()
    }

    pub fn new(hasher: H) -> Shard<H> {
        Shard {
            table: Table::default(),
            wheel: Wheel::default(),
            stats: Stats::default(),
            hasher,
            journal: Journal::default(),
            scans: 0,
            lazy: Vec::new(),
        }
    }

    /// Moves this shard's journal to the end of `out`: its records, with each collection written
    /// since the last drain encoded in place of its last write, as it is now (a DATA record; a
    /// DEL if it is gone by now, as by an expiry, which writes nothing).
    pub fn drain_journal(&mut self, out: &mut Vec<u8>) {
        if !self.journal.has_pending() {
            self.journal.drain_into(out);
            return;
        }
        let (buf, pending) = self.journal.take();
        let mut last = std::collections::HashMap::with_capacity(pending.len());
        for (n, (_, key)) in pending.iter().enumerate() {
            last.insert(&key[..], n);
        }
        let mut copied = 0;
        for (n, (at, key)) in pending.iter().enumerate() {
            if last[&key[..]] != n {
                continue;
            }
            out.extend_from_slice(&buf[copied..*at]);
            copied = *at;
            let h = self.hasher.hash32(key);
            let probe = Probe::new(key);
            let hasher = &self.hasher;
            let found = match self.table.find(h, &probe) {
                Some(i) => Some(i),
                None => self.table.pull(h, &probe, &|k| hasher.hash32(k)),
            };
            match found {
                Some(i) => {
                    let deadline = self.table.deadline(i);
                    self.table.with_value(i, |v| {
                        if let Some(kind) = v.kind().code() {
                            record::encode_data(out, key, deadline, kind, |body| {
                                v.encode_collection(body);
                            });
                        }
                        // Another type now: the record of the write that made it follows.
                    });
                }
                None => record::encode_del(out, key),
            }
        }
        out.extend_from_slice(&buf[copied..]);
        self.journal.reuse(buf);
    }

    /// The big values removed since the last call, for the caller to free with no lock held.
    pub fn take_lazy(&mut self) -> Vec<Value> {
        std::mem::take(&mut self.lazy)
    }

    /// A value replaced or taken out of its entry: a big one is freed later (see `lazy`).
    fn discard(&mut self, value: Value) {
        if value.free_effort() > LAZYFREE_EFFORT {
            self.lazy.push(value);
        }
    }

    /// Finds `key`, dropping it first if its deadline has passed. While the table moves, a key
    /// still in the old arrays moves in first.
    #[inline]
    fn find_live(&mut self, h: u32, probe: &Probe<'_>, now: Nanos) -> Option<usize> {
        let i = match self.table.find(h, probe) {
            Some(i) => i,
            None => {
                let hasher = &self.hasher;
                self.table.pull(h, probe, &|k| hasher.hash32(k))?
            }
        };
        if self.table.deadline(i) <= now {
            self.expire_found(i);
            return None;
        }
        Some(i)
    }

    /// Entry `i`, found past its deadline, goes (out of line: the lookup stays small enough to
    /// inline into every command's path).
    #[cold]
    #[inline(never)]
    fn expire_found(&mut self, i: usize) {
        self.journal.touched(self.table.key(i));
        unlink(&mut self.table, &mut self.lazy, i);
        self.stats.expired += 1;
    }

    /// Inserts a key known to be absent and files it in the wheel, if memory allows.
    fn insert(
        &mut self,
        h: u32,
        probe: &Probe<'_>,
        value: Value,
        deadline: Nanos,
        now: Nanos,
        limits: Limits,
    ) -> Result<(), StoreError> {
        self.wheel.idle_to(now);
        let growth = self.growth(probe, &value, deadline, limits);
        self.make_room(probe, &value, deadline, limits, growth)?;
        let mut filed = NOT_FILED;
        self.wheel.reschedule(h, &mut filed, deadline);
        let hasher = &self.hasher;
        let i = self.table.insert(
            h,
            probe,
            value,
            deadline,
            filed,
            &|k| hasher.hash32(k),
            growth,
        );
        self.note_value(h, i);
        Ok(())
    }

    /// Journals entry `i`, whose key hashes to `h`, as it now is.
    #[inline]
    fn note_value(&mut self, h: u32, i: usize) {
        if self.journal.listening() {
            let Shard { table, journal, .. } = self;
            table.with_value(i, |v| journal.value(h, table.key(i), table.deadline(i), v));
        }
    }

    /// Removes entry `i` as a change (journaled), not as an expiry.
    fn remove_noted(&mut self, i: usize) {
        self.journal.del(self.table.key(i));
        unlink(&mut self.table, &mut self.lazy, i);
    }

    /// How the table grows if this insert needs it to: `Incremental`, unless the shard has a
    /// memory budget that the old and new arrays together would not fit (then the insert pays
    /// for the move, as a shard at its budget grows rarely and holds what its budget says).
    /// A growth may also come from a cuckoo walk that found no room, which no cost foresees,
    /// so the new arrays must fit whether or not this insert is due to grow.
    fn growth(&self, probe: &Probe<'_>, value: &Value, deadline: Nanos, limits: Limits) -> Growth {
        if limits.budget == usize::MAX {
            return Growth::Incremental;
        }
        let cost = self
            .table
            .insert_cost(probe, value, deadline, Growth::AtOnce)
            + self.table.move_cost()
            + self.wheel.file_cost(deadline);
        if self.bytes() + cost <= limits.budget {
            Growth::Incremental
        } else {
            Growth::AtOnce
        }
    }

    /// Makes the shard's bytes after inserting `probe` with `value` fit `limits.budget`: evicts
    /// the entries with the soonest deadlines (`EvictSoonest`) or refuses (`Reject`, or when
    /// nothing is left to evict: keys without a deadline are never evicted).
    fn make_room(
        &mut self,
        probe: &Probe<'_>,
        value: &Value,
        deadline: Nanos,
        limits: Limits,
        growth: Growth,
    ) -> Result<(), StoreError> {
        if limits.budget == usize::MAX {
            return Ok(());
        }
        let cost = |s: &Self| {
            s.table.insert_cost(probe, value, deadline, growth) + s.wheel.file_cost(deadline)
        };
        while self.bytes() + cost(self) > limits.budget {
            if limits.policy == EvictionPolicy::Reject || !self.evict_one() {
                self.stats.rejected += 1;
                return Err(StoreError::OutOfMemory);
            }
        }
        Ok(())
    }

    /// Drops the live entry of the soonest wheel item (skipping stale items); false if the
    /// wheel is empty.
    fn evict_one(&mut self) -> bool {
        while let Some((h, id)) = self.wheel.pop_soonest() {
            let Shard {
                table,
                stats,
                hasher,
                journal,
                lazy,
                ..
            } = self;
            table.pull_hash(h, &|k| hasher.hash32(k));
            let mut evicted = 0;
            for i in table.candidates(h) {
                if table.is_occupied(i) && table.filed(i) == id && hasher.hash32(table.key(i)) == h
                {
                    journal.del(table.key(i));
                    unlink(table, lazy, i);
                    evicted += 1;
                }
            }
            if evicted > 0 {
                stats.evicted += evicted;
                let hasher = &self.hasher;
                self.table
                    .maybe_shrink(&|k| hasher.hash32(k), Growth::AtOnce);
                return true;
            }
        }
        false
    }

    /// Runs `f` on the key's limiter slot (`None` if missing or expired). See `Store::limiter`.
    #[inline]
    pub fn limiter<T>(
        &mut self,
        h: u64,
        key: &[u8],
        now: Nanos,
        limits: Limits,
        f: impl FnOnce(&mut Option<State>) -> Result<(T, Option<Nanos>), CheckError>,
    ) -> Result<T, StoreError> {
        let h = h as u32;
        let probe = Probe::new(key);
        let Some(i) = self.find_live(h, &probe, now) else {
            let mut slot = None;
            let (v, change) = f(&mut slot).map_err(StoreError::Check)?;
            if let (Some(state), Some(reset)) = (slot, change) {
                let deadline = now.saturating_add(reset);
                if deadline > now {
                    self.insert(h, &probe, Value::Limiter(state), deadline, now, limits)?;
                }
            }
            return Ok(v);
        };
        let Some(state) = self.table.take_limiter(i) else {
            return Err(StoreError::WrongType);
        };
        let mut slot = Some(state);
        let result = f(&mut slot);
        // Until the state is back in place or the entry removed, the entry holds a placeholder.
        let change = result.as_ref().ok().and_then(|(_, change)| *change);
        let deadline = change.map(|reset| now.saturating_add(reset));
        match slot {
            Some(state) if deadline.is_none_or(|d| d > now) => {
                // A read keeps the deadline, which taking the state left in the entry (a
                // packed entry's word and a box's deadline stay until `put`); a write, the
                // usual case, never needs to decode it.
                let deadline = deadline.unwrap_or_else(|| self.table.deadline(i));
                let mut filed = self.table.filed(i);
                self.wheel.reschedule(h, &mut filed, deadline);
                self.table.put(i, Value::Limiter(state), deadline, filed);
                if result.is_ok() && change.is_some() {
                    self.note_value(h, i);
                }
            }
            // Back to fresh: a missing key answers the same, so it need not be kept.
            _ => self.remove_noted(i),
        }
        result.map(|(v, _)| v).map_err(StoreError::Check)
    }

    pub fn get(&mut self, h: u64, key: &[u8], now: Nanos) -> Result<Option<Bytes>, StoreError> {
        match self.find_live(h as u32, &Probe::new(key), now) {
            None => Ok(None),
            Some(i) => match self.table.counter(i) {
                Some(c) => Ok(Some(c.to_bytes())),
                None => Err(StoreError::WrongType),
            },
        }
    }

    /// Writes `value`'s new deadline to entry `i`, keeping the wheel in step.
    fn put(&mut self, h: u32, i: usize, value: Value, deadline: Nanos) {
        if self.table.frees_slowly(i, LAZYFREE_EFFORT) {
            // SET over a big collection: the old value is freed later.
            let old = self.table.take_value(i);
            self.lazy.push(old);
        }
        let mut filed = self.table.filed(i);
        self.wheel.reschedule(h, &mut filed, deadline);
        self.table.put(i, value, deadline, filed);
        self.note_value(h, i);
    }

    #[allow(clippy::too_many_arguments)] // SET's own arguments, plus where and when.
    pub fn set(
        &mut self,
        h: u64,
        key: &[u8],
        value: &[u8],
        cond: SetCond,
        ttl: SetTtl,
        now: Nanos,
        limits: Limits,
    ) -> Result<bool, StoreError> {
        let h = h as u32;
        let probe = Probe::new(key);
        let found = self.find_live(h, &probe, now);
        match (cond, found.is_some()) {
            (SetCond::Nx, true) | (SetCond::Xx, false) => return Ok(false),
            _ => {}
        }
        let deadline = match ttl {
            SetTtl::Clear => Nanos::MAX,
            SetTtl::Keep => found.map_or(Nanos::MAX, |i| self.table.deadline(i)),
            SetTtl::At(at) => at,
        };
        let counter = Value::Counter(Counter::from_bytes(value));
        match found {
            // Set with a deadline already past: the key is written and expires at once.
            Some(i) if deadline <= now => self.remove_noted(i),
            None if deadline <= now => {}
            Some(i) => self.put(h, i, counter, deadline),
            None => self.insert(h, &probe, counter, deadline, now, limits)?,
        }
        Ok(true)
    }

    pub fn incr_by(
        &mut self,
        h: u64,
        key: &[u8],
        delta: i64,
        now: Nanos,
        limits: Limits,
    ) -> Result<i64, StoreError> {
        let h = h as u32;
        let probe = Probe::new(key);
        let Some(i) = self.find_live(h, &probe, now) else {
            let value = Value::Counter(Counter::Int(delta));
            self.insert(h, &probe, value, Nanos::MAX, now, limits)?;
            return Ok(delta);
        };
        match self.table.counter_mut(i) {
            Some(Counter::Int(n)) => {
                *n = n.checked_add(delta).ok_or(StoreError::Overflow)?;
                let n = *n;
                self.note_value(h, i);
                Ok(n)
            }
            Some(_) => Err(StoreError::NotInteger),
            None => Err(StoreError::WrongType),
        }
    }

    /// [`crate::Store::string`] under this shard's lock.
    pub fn string<'a, R>(
        &mut self,
        h: u64,
        key: &[u8],
        now: Nanos,
        limits: Limits,
        f: impl FnOnce(Option<(&[u8], Nanos)>) -> Result<(StrWrite<'a>, R), StoreError>,
    ) -> Result<R, StoreError> {
        let h = h as u32;
        let probe = Probe::new(key);
        let found = self.find_live(h, &probe, now);
        let (write, result) = match found {
            None => f(None)?,
            Some(i) => {
                let mut digits = itoa::Buffer::new();
                let value = self.table.counter(i).ok_or(StoreError::WrongType)?;
                f(Some((value.as_bytes(&mut digits), self.table.deadline(i))))?
            }
        };
        let deadline = |ttl: SetTtl, old: Nanos| match ttl {
            SetTtl::Clear => Nanos::MAX,
            SetTtl::Keep => old,
            SetTtl::At(at) => at,
        };
        match (write, found) {
            (StrWrite::Keep, _) | (StrWrite::Delete | StrWrite::Expire(_), None) => {}
            (StrWrite::Delete, Some(i)) => self.remove_noted(i),
            (StrWrite::Expire(ttl), Some(i)) => {
                let at = deadline(ttl, self.table.deadline(i));
                if at <= now {
                    self.remove_noted(i);
                } else if at != self.table.deadline(i) {
                    let value = self.table.take_value(i);
                    self.put(h, i, value, at);
                }
            }
            (StrWrite::Put(bytes, ttl), Some(i)) => {
                let at = deadline(ttl, self.table.deadline(i));
                if at <= now {
                    self.remove_noted(i);
                } else {
                    self.put(h, i, Value::Counter(Counter::from_bytes(&bytes)), at);
                }
            }
            (StrWrite::Put(bytes, ttl), None) => {
                let at = deadline(ttl, Nanos::MAX);
                if at > now {
                    let value = Value::Counter(Counter::from_bytes(&bytes));
                    self.insert(h, &probe, value, at, now, limits)?;
                }
            }
        }
        Ok(result)
    }

    pub fn kind(&mut self, h: u64, key: &[u8], now: Nanos) -> Option<Kind> {
        let i = self.find_live(h as u32, &Probe::new(key), now)?;
        Some(self.table.with_value(i, Value::kind))
    }

    /// [`crate::Store::read`] under this shard's lock.
    pub fn read<T: Collection, R>(
        &mut self,
        h: u64,
        key: &[u8],
        now: Nanos,
        f: impl FnOnce(Option<&T>) -> R,
    ) -> Result<R, StoreError> {
        match self.find_live(h as u32, &Probe::new(key), now) {
            None => Ok(f(None)),
            Some(i) => self
                .table
                .with_value(i, |v| T::of(v).map(|t| f(Some(t))))
                .ok_or(StoreError::WrongType),
        }
    }

    /// [`crate::Store::watch`] under this shard's lock.
    pub fn watch(
        &mut self,
        h: u64,
        key: &[u8],
        now: Nanos,
        dirty: &std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) {
        // A key past its deadline goes first: its expiry must not touch the new watcher.
        self.find_live(h as u32, &Probe::new(key), now);
        self.journal
            .watchers
            .get_or_insert_default()
            .add(key, dirty);
    }

    /// [`crate::Store::overwrite`] under this shard's lock.
    pub fn overwrite(
        &mut self,
        h: u64,
        key: &[u8],
        value: Option<Value>,
        now: Nanos,
        limits: Limits,
    ) -> Result<(), StoreError> {
        let h = h as u32;
        let probe = Probe::new(key);
        match (self.find_live(h, &probe, now), value) {
            (None, None) => {}
            (Some(i), None) => self.remove_noted(i),
            (Some(i), Some(value)) => {
                let old = self.table.take_value(i);
                self.discard(old);
                self.put(h, i, value, Nanos::MAX);
            }
            (None, Some(value)) => self.insert(h, &probe, value, Nanos::MAX, now, limits)?,
        }
        Ok(())
    }

    /// [`crate::Store::edit`] under this shard's lock.
    #[allow(clippy::too_many_arguments)] // The edit's own arguments, plus where and when.
    pub fn edit<T: Collection, R>(
        &mut self,
        h: u64,
        key: &[u8],
        now: Nanos,
        limits: Limits,
        create: bool,
        f: impl FnOnce(&mut T) -> (R, bool),
    ) -> Result<Option<R>, StoreError> {
        if create && limits.budget != usize::MAX {
            // A command that may grow a collection is refused, as Redis refuses a `denyoom`
            // command, while the shard is past its budget and nothing can be evicted.
            while self.bytes() > limits.budget {
                if limits.policy == EvictionPolicy::Reject || !self.evict_one() {
                    self.stats.rejected += 1;
                    return Err(StoreError::OutOfMemory);
                }
            }
        }
        let h = h as u32;
        let probe = Probe::new(key);
        let Some(i) = self.find_live(h, &probe, now) else {
            if !create {
                return Ok(None);
            }
            let mut fresh = T::default();
            let (result, _) = f(&mut fresh);
            if !fresh.is_empty() {
                self.insert(h, &probe, fresh.into_value(), Nanos::MAX, now, limits)?;
            }
            return Ok(Some(result));
        };
        if self.table.with_value(i, Value::kind) != T::KIND {
            return Err(StoreError::WrongType);
        }
        let deadline = self.table.deadline(i);
        let mut value = self.table.take_value(i);
        let t = T::of_mut(&mut value).expect("the kind was checked");
        let (result, changed) = f(t);
        if t.is_empty() {
            self.remove_noted(i);
        } else if changed {
            self.put(h, i, value, deadline);
        } else {
            let filed = self.table.filed(i);
            self.table.put(i, value, deadline, filed);
        }
        Ok(Some(result))
    }

    pub fn persist(&mut self, h: u64, key: &[u8], now: Nanos) -> bool {
        let h = h as u32;
        match self.find_live(h, &Probe::new(key), now) {
            Some(i) if self.table.deadline(i) != Nanos::MAX => {
                let value = self.table.take_value(i);
                self.put(h, i, value, Nanos::MAX);
                true
            }
            _ => false,
        }
    }

    pub fn expire_at(&mut self, h: u64, key: &[u8], at: Nanos, now: Nanos) -> bool {
        let h = h as u32;
        let Some(i) = self.find_live(h, &Probe::new(key), now) else {
            return false;
        };
        if at <= now {
            self.remove_noted(i);
        } else {
            let value = self.table.take_value(i);
            self.put(h, i, value, at);
        }
        true
    }

    pub fn ttl(&mut self, h: u64, key: &[u8], now: Nanos) -> Ttl {
        match self.find_live(h as u32, &Probe::new(key), now) {
            None => Ttl::Missing,
            Some(i) => Ttl::of(self.table.deadline(i), now),
        }
    }

    pub fn del(&mut self, h: u64, key: &[u8], now: Nanos) -> bool {
        match self.find_live(h as u32, &Probe::new(key), now) {
            None => false,
            Some(i) => {
                self.remove_noted(i);
                true
            }
        }
    }

    pub fn exists(&mut self, h: u64, key: &[u8], now: Nanos) -> bool {
        self.find_live(h as u32, &Probe::new(key), now).is_some()
    }

    /// Runs the wheel up to `now`, dropping entries whose deadline passed; returns how many.
    pub fn expire_due(&mut self, now: Nanos) -> usize {
        self.expire_some(now, usize::MAX).0
    }

    /// [`Shard::expire_due`] with at most `budget` wheel items looked at (see
    /// [`Wheel::advance_some`]), then, while the table moves, `budget / 4` slots' worth of
    /// entries moved in ([`Table::migrate_some`]);
    /// returns the keys dropped and whether the wheel caught up and the table is done moving.
    pub fn expire_some(&mut self, now: Nanos, budget: usize) -> (usize, bool) {
        let (dropped, done) = self.expire_wheel(now, budget);
        let hasher = &self.hasher;
        let hash = |k: &[u8]| hasher.hash32(k);
        // A few dozen entries' worth: each lands at random in new arrays whose pages its
        // first write faults in, up to 10–20 µs apiece on a VM (the stall probe's slowest
        // steps were those faults, at `budget` slots a step).
        let moved = self.table.migrate_some((budget / 4).max(1), &hash);
        (dropped, done && moved)
    }

    /// The wheel's part of [`Shard::expire_some`]: up to `budget` entries visited, a table
    /// that lost entries shrunk (in steps); no part of a table move. Returns the keys dropped
    /// and whether the wheel caught up with `now`.
    pub fn expire_wheel(&mut self, now: Nanos, budget: usize) -> (usize, bool) {
        let Shard {
            table,
            wheel,
            stats,
            hasher,
            journal,
            lazy,
            ..
        } = self;
        let mut dropped = 0;
        let done = wheel.advance_some(now, budget, |wheel, h, id| {
            dropped += visit(table, journal, lazy, hasher, wheel, h, id, now);
        });
        stats.expired += dropped as u64;
        let hasher = &self.hasher;
        let hash = |k: &[u8]| hasher.hash32(k);
        if dropped > 0 {
            self.table.maybe_shrink(&hash, Growth::Incremental);
        }
        (dropped, done)
    }

    /// Runs the wheel, then also drops the dead entries that wait for the end of the current
    /// tick, so that the table holds exactly the live keys. Returns keys dropped.
    pub fn reap(&mut self, now: Nanos) -> usize {
        let mut dropped = self.expire_wheel(now, usize::MAX).0;
        let Shard {
            table,
            stats,
            hasher,
            wheel,
            journal,
            lazy,
            ..
        } = self;
        // Everything due by `now` is filed at or before `tick_floor(now) + 1`, and after the
        // wheel ran only that tick's level-0 slot can still hold such entries.
        let mut late = 0;
        for &h in wheel.pending_at(tick_floor(now) + 1) {
            late += drop_due(table, journal, lazy, hasher, h, now);
        }
        stats.expired += late as u64;
        dropped += late;
        if late > 0 {
            let hasher = &self.hasher;
            self.table
                .maybe_shrink(&|k| hasher.hash32(k), Growth::Incremental);
        }
        dropped
    }

    /// A replica's write: `key` holds `value` until `deadline`, whatever it held before. A
    /// deadline already past removes the key. Ignores the memory limit, as a Redis replica
    /// ignores maxmemory: what the primary kept, the replica keeps.
    pub fn put_value(&mut self, h: u64, key: &[u8], value: Value, deadline: Nanos, now: Nanos) {
        let _ = self.place(h, key, value, deadline, now, Limits::NONE, true);
    }

    /// [`crate::Store::place`] under this shard's lock.
    #[allow(clippy::too_many_arguments)] // The write's own arguments, plus where and when.
    pub fn place(
        &mut self,
        h: u64,
        key: &[u8],
        value: Value,
        deadline: Nanos,
        now: Nanos,
        limits: Limits,
        replace: bool,
    ) -> Result<bool, StoreError> {
        let h = h as u32;
        let probe = Probe::new(key);
        let found = self.find_live(h, &probe, now);
        if found.is_some() && !replace {
            return Ok(false);
        }
        match found {
            Some(i) if deadline <= now => self.remove_noted(i),
            None if deadline <= now => {}
            Some(i) => {
                let old = self.table.take_value(i);
                self.discard(old);
                self.put(h, i, value, deadline);
            }
            None => self.insert(h, &probe, value, deadline, now, limits)?,
        }
        Ok(true)
    }

    /// [`crate::Store::take`] under this shard's lock.
    pub fn take(&mut self, h: u64, key: &[u8], now: Nanos) -> Option<(Value, Nanos)> {
        let i = self.find_live(h as u32, &Probe::new(key), now)?;
        let deadline = self.table.deadline(i);
        let value = self.table.take_value(i);
        self.remove_noted(i);
        Some((value, deadline))
    }

    /// [`crate::Store::value`] under this shard's lock.
    pub fn value(&mut self, h: u64, key: &[u8], now: Nanos) -> Option<(Value, Nanos)> {
        let i = self.find_live(h as u32, &Probe::new(key), now)?;
        Some((
            self.table.with_value(i, Value::clone),
            self.table.deadline(i),
        ))
    }

    /// Starts a scan of every live entry in bounded steps ([`Shard::scan_step`]); returns its
    /// id. See `table::scan` for what a scan sees of the changes between its steps.
    pub fn scan_begin(&mut self) -> u64 {
        self.scans += 1;
        self.table.scan_begin(self.scans);
        self.scans
    }

    /// One step of scan `id`: `f` gets the key, deadline and value of each live entry among
    /// about `budget` slots. Returns true when the scan is over.
    pub fn scan_step(
        &mut self,
        id: u64,
        budget: usize,
        now: Nanos,
        mut f: impl FnMut(&[u8], Nanos, &Value),
    ) -> bool {
        let hasher = &self.hasher;
        self.table
            .scan_step(id, budget, &|k| hasher.hash32(k), |table, i| {
                let deadline = table.deadline(i);
                if deadline > now {
                    table.with_value(i, |v| f(table.key(i), deadline, v));
                }
            })
    }

    /// Forgets scan `id` before its end.
    pub fn scan_end(&mut self, id: u64) {
        self.table.scan_end(id);
    }

    pub fn key_count(&self) -> usize {
        self.table.len()
    }

    pub fn expires(&self) -> usize {
        self.table.expires()
    }

    pub fn expired_total(&self) -> u64 {
        self.stats.expired
    }

    pub fn evicted_total(&self) -> u64 {
        self.stats.evicted
    }

    pub fn rejected_total(&self) -> u64 {
        self.stats.rejected
    }

    /// Drops every key; returns the table and the wheel, for the caller to free after it let
    /// go of the lock (freeing a large table's boxes and keys is O(n)).
    pub fn flush(&mut self) -> (Table, Wheel) {
        (
            std::mem::take(&mut self.table),
            std::mem::take(&mut self.wheel),
        )
    }

    /// Structural bytes owned outside the shard struct: the table's arrays, boxed values and
    /// heap keys, and the wheel's buffers.
    pub fn heap_bytes(&self) -> usize {
        self.table.bytes()
            + self.wheel.heap_bytes()
            + self.journal.watchers.as_ref().map_or(0, |w| w.heap_bytes())
    }

    /// Everything this shard accounts for, its own struct included (what its budget limits).
    fn bytes(&self) -> usize {
        size_of::<crate::ShardCell>() + self.heap_bytes()
    }

    #[cfg(test)]
    pub fn wheel_items(&self) -> usize {
        self.wheel.items()
    }
}

/// Drops every entry with hash `h` whose deadline is `<= now`; returns how many.
fn drop_due(
    table: &mut Table,
    journal: &mut Journal,
    lazy: &mut Vec<Value>,
    hasher: &impl KeyHash,
    h: u32,
    now: Nanos,
) -> usize {
    table.pull_hash(h, &|k| hasher.hash32(k));
    let mut dropped = 0;
    for i in table.candidates(h) {
        if table.is_occupied(i) && table.deadline(i) <= now && hasher.hash32(table.key(i)) == h {
            journal.touched(table.key(i));
            unlink(table, lazy, i);
            dropped += 1;
        }
    }
    dropped
}

/// One fired wheel item: drops the due entries with hash `h` that this slot holds (`filed ==
/// id`) and re-files the others whose deadline moved later. Entries filed elsewhere are left
/// alone: this item is stale for them.
#[allow(clippy::too_many_arguments)] // The item, and the shard's parts it changes.
fn visit(
    table: &mut Table,
    journal: &mut Journal,
    lazy: &mut Vec<Value>,
    hasher: &impl KeyHash,
    wheel: &mut Wheel,
    h: u32,
    id: SlotId,
    now: Nanos,
) -> usize {
    table.pull_hash(h, &|k| hasher.hash32(k));
    let mut dropped = 0;
    for i in table.candidates(h) {
        if !table.is_occupied(i) || table.filed(i) != id || hasher.hash32(table.key(i)) != h {
            continue;
        }
        let deadline = table.deadline(i);
        if deadline <= now {
            journal.touched(table.key(i));
            unlink(table, lazy, i);
            dropped += 1;
        } else {
            let mut filed = id;
            wheel.refile(h, &mut filed, deadline);
            table.set_filed(i, filed);
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

    /// Hashes that differ but share most bucket positions, so a key's candidates include other
    /// keys and the full-hash check is what tells them apart.
    struct FirstByte;
    impl KeyHash for FirstByte {
        fn hash_key(&self, key: &[u8]) -> u64 {
            u64::from(key[0]) << 1
        }
    }

    const T0: Nanos = Nanos(1_700_000_000_000_000_000);
    const NONE: Limits = Limits::NONE;

    fn secs(s: u64) -> Nanos {
        T0.saturating_add(Nanos::from_secs(s))
    }

    fn set_with<H: KeyHash>(shard: &mut Shard<H>, key: &[u8], v: &[u8], at: Option<Nanos>) {
        let h = shard.hasher.hash_key(key);
        let ttl = at.map_or(SetTtl::Clear, SetTtl::At);
        assert_eq!(
            shard.set(h, key, v, SetCond::Always, ttl, T0, NONE),
            Ok(true)
        );
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
        s.limiter(h, b"bucket", T0, NONE, |slot| {
            assert!(slot.is_none());
            *slot = Some(State::Token { tat });
            Ok(((), Some(Nanos::from_secs(5))))
        })
        .unwrap();
        assert_eq!(s.incr_by(h, b"counter", 2, T0, NONE), Ok(7));
        assert_eq!(
            s.incr_by(h, b"bucket", 2, T0, NONE),
            Err(StoreError::WrongType)
        );
        assert_eq!(s.get(h, b"bucket", T0), Err(StoreError::WrongType));
        let seen = s.limiter(h, b"bucket", T0, NONE, |slot| Ok((slot.clone(), None)));
        assert_eq!(seen, Ok(Some(State::Token { tat })));
        let wrong = s.limiter(h, b"counter", T0, NONE, |_| Ok(((), None)));
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
            let ttl = SetTtl::At(secs(1));
            s.set(h, &key, b"x", SetCond::Always, ttl, T0, NONE)
                .unwrap();
        }
        let full = s.heap_bytes();
        assert_eq!(s.expire_due(secs(2)), 4096);
        assert!(s.heap_bytes() < full / 8, "{} vs {full}", s.heap_bytes());
    }

    #[test]
    fn eviction_takes_the_soonest_deadline_first() {
        let mut s = Shard::new(RealHash);
        // Deadlines 1..=200 s, inserted in a scrambled order.
        for n in 0..200u64 {
            let d = 1 + (n * 73) % 200;
            let key = format!("key:{d}");
            set_with(&mut s, key.as_bytes(), b"x", Some(secs(d)));
        }
        let budget = s.bytes();
        let limits = Limits {
            budget,
            policy: EvictionPolicy::EvictSoonest,
        };
        let key = b"newcomer";
        let h = s.hasher.hash_key(key);
        let ttl = SetTtl::At(secs(1000));
        assert_eq!(
            s.set(h, key, b"1", SetCond::Always, ttl, T0, limits),
            Ok(true)
        );
        assert!(s.bytes() <= budget);
        let evicted = s.evicted_total() as usize;
        assert!(evicted >= 1);
        // The victims are the soonest deadlines, within one level-0 wheel slot's order.
        for d in 1..=200u64 {
            let alive = get(&mut s, format!("key:{d}").as_bytes(), T0).is_some();
            assert_eq!(
                alive,
                d as usize > evicted,
                "key:{d} with {evicted} evicted"
            );
        }
        let reject = Limits {
            policy: EvictionPolicy::Reject,
            ..limits
        };
        let key = b"refused";
        let h = s.hasher.hash_key(key);
        assert_eq!(
            s.set(h, key, b"1", SetCond::Always, ttl, T0, reject),
            Err(StoreError::OutOfMemory)
        );
        assert_eq!(s.rejected_total(), 1);
        assert!(get(&mut s, key, T0).is_none());
    }

    struct RealHash;
    impl KeyHash for RealHash {
        fn hash_key(&self, key: &[u8]) -> u64 {
            crate::StoreHasher::default().hash_key(key)
        }
    }
}
