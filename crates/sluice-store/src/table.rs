//! `Table`: one shard's keys, in a bucketized cuckoo hash table of 24-byte slots.
//!
//! # Layout
//! A slot is 16 key bytes and one 8-byte word; beside it, 2 bytes of metadata. That is all a
//! TOKEN, GCRA or LEAKY bucket with a key of up to 16 bytes needs (26 bytes per slot):
//! - the key, inline (see `key`);
//! - the word: the bucket's `tat`;
//! - the metadata: the key form (2 bits, 0 = empty slot), the value kind (2 bits: TOKEN, GCRA,
//!   LEAKY, or BOXED), `δ = tat − deadline` (4 bits) and the wheel slot `filed` (8 bits).
//!
//! A limiter's deadline is the instant its bucket is fresh again, which for the GCRA family is
//! its `tat` up to rounding (`sluice_core::token` reports `reset_after` on the exact rational
//! scale, a few ns before the integer `tat`), so `δ` is tiny and the deadline costs 4 bits.
//! Everything else is BOXED: the word points to a heap [`Boxed`] `{deadline, value}` (32 bytes)
//! and the metadata holds a 12-bit `filed`. That covers counters, SLIDING/FIXED/LOG, a GCRA
//! state whose deadline is not within 15 ns below its `tat` (an `EXPIRE` on a bucket, a generic
//! [`crate::Store::limiter`] caller) and one whose wheel item waits in the overflow list. A key
//! longer than 16 bytes is a leaked `Box<[u8]>` (pointer and length in the key bytes).
//!
//! # Hashing
//! Only the low 32 bits of the key's hash are used (the shard took bits 40.., the wheel files
//! these 32 bits): a key may live in two buckets of [`BUCKET`] slots, `fastrange(h)` and
//! `fastrange(fmix32(h))`, so capacity need not be a power of two. An insert into two full buckets
//! moves keys to their other bucket along a random walk. The table grows by a fifth when it is
//! [`MAX_LOAD_PCT`] full, so it stays between ~77 % and 93 % full (a power-of-two table that
//! doubles is 44–88 % full); below [`DOUBLING_SLOTS`] slots it doubles instead, so a burst of new
//! keys into small shards moves each key about twice, not six times. Keys that find no place even so (only when very many keys share
//! their 32 hash bits, which a hasher with fixed seeds makes possible on purpose) go to a stash
//! after the buckets that every lookup also scans while it is not empty.
//!
//! # Invariants
//! - A slot owns its box and its heap key; a slot is moved by copying its bytes and metadata
//!   and clearing the source's metadata, so ownership moves with it. `Drop` frees what the
//!   occupied slots own.
//! - `heap` is the sum over entries of their heap key's length and, for BOXED entries,
//!   `size_of::<Boxed>()` plus the value's heap bytes, except the value of an entry between
//!   [`Table::take_value`] and [`Table::put`]. `expires` counts entries whose deadline is
//!   not `Nanos::MAX`.
//! - A packed entry is always filed in the wheel at a slot, never in the overflow list:
//!   `filed < OVERFLOW`, which fits its 8 bits.

use std::ptr;

use sluice_core::{Nanos, State};

use crate::entry::{Counter, Value};
use crate::key::{HEAP, INLINE_CAP, Probe, inline_bytes};
use crate::wheel::{OVERFLOW, SlotId};

/// Slots per bucket.
pub const BUCKET: usize = 4;
/// The table grows (by a fifth) before an insert would make it fuller than this.
pub const MAX_LOAD_PCT: usize = 93;
/// Longest random walk an insert tries before it grows the table.
const MAX_PATH: usize = 48;
/// Largest `tat − deadline` a packed entry holds.
const MAX_DELTA: u64 = 15;
/// Tables at most this many slots are never shrunk: not worth a reallocation.
const MIN_SHRINK_SLOTS: usize = 64;
/// A table's first allocation, in slots.
const MIN_SLOTS: usize = 64;
/// Below this many slots the table doubles when it grows; from it on, it grows by a fifth.
const DOUBLING_SLOTS: usize = 256;

const FORM: u16 = 0b11;
const EMPTY: u16 = 0;
const KIND_SHIFT: u32 = 2;
const KIND: u16 = 0b11 << KIND_SHIFT;
const BOXED: u16 = 0;
const TOKEN: u16 = 1;
const GCRA: u16 = 2;
const LEAKY: u16 = 3;
const DELTA_SHIFT: u32 = 4;
const PACKED_FILED_SHIFT: u32 = 8;
const BOXED_FILED_SHIFT: u32 = 4;

/// Bytes per slot: the slot and its metadata.
pub const SLOT_BYTES: usize = size_of::<Slot>() + size_of::<u16>();

/// One slot: key bytes and a word, read through the metadata.
#[derive(Clone, Copy, Default)]
struct Slot {
    key: [u8; INLINE_CAP],
    word: u64,
}

/// A value that does not fit in a slot.
#[derive(Debug)]
pub struct Boxed {
    deadline: Nanos,
    value: Value,
}

/// One shard's keys. See the module docs.
pub struct Table {
    meta: Vec<u16>,
    slots: Vec<Slot>,
    /// Slots in buckets (a multiple of [`BUCKET`]); slots after them are the stash.
    cap: usize,
    len: usize,
    heap: usize,
    expires: usize,
    rng: u32,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("len", &self.len)
            .field("cap", &self.cap)
            .field("stash", &(self.meta.len() - self.cap))
            .finish_non_exhaustive()
    }
}

/// The murmur3 finalizer: the second bucket's hash, independent of the first's top bits.
#[inline]
fn fmix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// The packed kind of a state, and its `tat`.
#[inline]
fn packable(value: &Value) -> Option<(u16, Nanos)> {
    match value {
        Value::Limiter(State::Token { tat }) => Some((TOKEN, *tat)),
        Value::Limiter(State::Gcra { tat }) => Some((GCRA, *tat)),
        Value::Limiter(State::Leaky { tat }) => Some((LEAKY, *tat)),
        _ => None,
    }
}

impl Default for Table {
    fn default() -> Self {
        Table {
            meta: Vec::new(),
            slots: Vec::new(),
            cap: 0,
            len: 0,
            heap: 0,
            expires: 0,
            rng: 0x9E37_79B9,
        }
    }
}

impl Drop for Table {
    fn drop(&mut self) {
        for i in 0..self.meta.len() {
            if self.meta[i] != EMPTY {
                self.free(i);
            }
        }
    }
}

impl Table {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn expires(&self) -> usize {
        self.expires
    }

    /// Structural bytes: the slot and metadata arrays and everything entries own on the heap.
    pub fn bytes(&self) -> usize {
        self.meta.capacity() * size_of::<u16>()
            + self.slots.capacity() * size_of::<Slot>()
            + self.heap
    }

    /// What inserting `probe` with `value` would add to [`Table::bytes`]: the growth of the
    /// arrays if the insert grows them, the heap key, and the box unless the value packs.
    pub fn insert_cost(&self, probe: &Probe<'_>, value: &Value) -> usize {
        let grow = if self.needs_growth() {
            (self.grown_buckets() * BUCKET - self.cap) * SLOT_BYTES
        } else {
            0
        };
        let key = if probe.form == HEAP {
            probe.key.len()
        } else {
            0
        };
        let boxed = if packable(value).is_some() && probe.form != HEAP {
            0
        } else {
            size_of::<Boxed>() + value.heap_bytes()
        };
        grow + key + boxed
    }

    #[inline]
    fn buckets(&self, h: u32) -> (usize, usize) {
        let nb = (self.cap / BUCKET) as u64;
        let a = ((u64::from(h) * nb) >> 32) as usize;
        let mut b = ((u64::from(fmix32(h)) * nb) >> 32) as usize;
        if b == a {
            b = if a + 1 == nb as usize { 0 } else { a + 1 };
        }
        (a, b)
    }

    pub fn is_occupied(&self, i: usize) -> bool {
        self.meta[i] != EMPTY
    }

    /// The slots a key with hash `h` may occupy (empty ones included): its two buckets and the
    /// stash.
    #[inline]
    pub fn candidates(&self, h: u32) -> impl Iterator<Item = usize> + use<> {
        let (first, second) = if self.cap == 0 {
            (0..0, 0..0)
        } else {
            let (a, b) = self.buckets(h);
            let second = if a == b {
                0..0
            } else {
                b * BUCKET..(b + 1) * BUCKET
            };
            (a * BUCKET..(a + 1) * BUCKET, second)
        };
        first.chain(second).chain(self.cap..self.meta.len())
    }

    /// The slot holding `probe`'s key (live or not: deadlines are the caller's business).
    #[inline]
    pub fn find(&self, h: u32, probe: &Probe<'_>) -> Option<usize> {
        self.candidates(h)
            .find(|&i| self.meta[i] & FORM == probe.form && self.key_eq(i, probe))
    }

    #[inline]
    fn key_eq(&self, i: usize, probe: &Probe<'_>) -> bool {
        if probe.form == HEAP {
            self.heap_key(i) == probe.key
        } else {
            self.slots[i].key == probe.inline
        }
    }

    /// The key of occupied slot `i`.
    pub fn key(&self, i: usize) -> &[u8] {
        match self.meta[i] & FORM {
            HEAP => self.heap_key(i),
            form => inline_bytes(form, &self.slots[i].key),
        }
    }

    fn heap_key_parts(&self, i: usize) -> (usize, usize) {
        let k = &self.slots[i].key;
        let addr = u64::from_ne_bytes(k[..8].try_into().expect("8 bytes"));
        let len = u64::from_ne_bytes(k[8..].try_into().expect("8 bytes"));
        (addr as usize, len as usize)
    }

    fn heap_key(&self, i: usize) -> &[u8] {
        debug_assert_eq!(self.meta[i] & FORM, HEAP);
        let (addr, len) = self.heap_key_parts(i);
        // SAFETY: a HEAP slot's key bytes hold the exposed address and length of a leaked
        // `Box<[u8]>` that the slot owns (module invariants); it lives until `free`.
        unsafe { std::slice::from_raw_parts(ptr::with_exposed_provenance::<u8>(addr), len) }
    }

    #[inline]
    fn kind(&self, i: usize) -> u16 {
        (self.meta[i] & KIND) >> KIND_SHIFT
    }

    #[inline]
    fn is_boxed(&self, i: usize) -> bool {
        self.kind(i) == BOXED
    }

    fn boxed(&self, i: usize) -> &Boxed {
        debug_assert!(self.is_boxed(i));
        // SAFETY: a BOXED slot's word is the exposed address of a leaked `Box<Boxed>` that the
        // slot owns (module invariants).
        unsafe { &*ptr::with_exposed_provenance::<Boxed>(self.slots[i].word as usize) }
    }

    fn boxed_mut(&mut self, i: usize) -> &mut Boxed {
        debug_assert!(self.is_boxed(i));
        // SAFETY: as in `boxed`; `&mut self` makes the access unique.
        unsafe { &mut *ptr::with_exposed_provenance_mut::<Boxed>(self.slots[i].word as usize) }
    }

    /// When entry `i` disappears; `Nanos::MAX` = never.
    #[inline]
    pub fn deadline(&self, i: usize) -> Nanos {
        let m = self.meta[i];
        if self.is_boxed(i) {
            self.boxed(i).deadline
        } else {
            Nanos(self.slots[i].word - u64::from((m >> DELTA_SHIFT) & 0xF))
        }
    }

    /// The wheel slot of entry `i`'s live item, or `NOT_FILED`.
    #[inline]
    pub fn filed(&self, i: usize) -> SlotId {
        let m = self.meta[i];
        if self.is_boxed(i) {
            m >> BOXED_FILED_SHIFT
        } else {
            m >> PACKED_FILED_SHIFT
        }
    }

    /// Records where the wheel filed entry `i` (boxing it if a packed entry went to the
    /// overflow list).
    pub fn set_filed(&mut self, i: usize, filed: SlotId) {
        if self.is_boxed(i) {
            self.meta[i] = (self.meta[i] & (FORM | KIND)) | (filed << BOXED_FILED_SHIFT);
        } else if filed < OVERFLOW {
            self.meta[i] = (self.meta[i] & 0xFF) | (filed << PACKED_FILED_SHIFT);
        } else {
            let deadline = self.deadline(i);
            let value = self.take_value(i);
            self.put(i, value, deadline, filed);
        }
    }

    /// Runs `f` on entry `i`'s value (a packed state is rebuilt on the stack).
    #[inline]
    pub fn with_value<R>(&self, i: usize, f: impl FnOnce(&Value) -> R) -> R {
        let tat = Nanos(self.slots[i].word);
        match self.kind(i) {
            TOKEN => f(&Value::Limiter(State::Token { tat })),
            GCRA => f(&Value::Limiter(State::Gcra { tat })),
            LEAKY => f(&Value::Limiter(State::Leaky { tat })),
            _ => f(&self.boxed(i).value),
        }
    }

    /// The occupied slots, live or not.
    pub fn occupied(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.meta.len()).filter(|&i| self.meta[i] != EMPTY)
    }

    /// Entry `i`'s counter, `None` for a limiter.
    pub fn counter(&self, i: usize) -> Option<&Counter> {
        match self.is_boxed(i).then(|| &self.boxed(i).value) {
            Some(Value::Counter(c)) => Some(c),
            _ => None,
        }
    }

    /// Entry `i`'s counter, `None` for a limiter. The caller keeps `heap` right: only an
    /// integer (no heap bytes) may be changed through it.
    pub fn counter_mut(&mut self, i: usize) -> Option<&mut Counter> {
        if !self.is_boxed(i) {
            return None;
        }
        match &mut self.boxed_mut(i).value {
            Value::Counter(c) => Some(c),
            Value::Limiter(_) => None,
        }
    }

    /// Moves a limiter's state out for the algorithms (`None` for a counter, left in place).
    /// The caller must [`put`](Table::put) a value back or [`remove`](Table::remove) the entry.
    #[inline]
    pub fn take_limiter(&mut self, i: usize) -> Option<State> {
        let tat = Nanos(self.slots[i].word);
        match self.kind(i) {
            TOKEN => Some(State::Token { tat }),
            GCRA => Some(State::Gcra { tat }),
            LEAKY => Some(State::Leaky { tat }),
            _ => {
                let state = self.boxed_mut(i).value.take_limiter();
                if let Some(s) = &state {
                    self.heap -= s.heap_bytes();
                }
                state
            }
        }
    }

    /// Moves entry `i`'s value out. The caller must [`put`](Table::put) one back or
    /// [`remove`](Table::remove) the entry.
    pub fn take_value(&mut self, i: usize) -> Value {
        if let Some(state) = self.take_limiter(i) {
            return Value::Limiter(state);
        }
        let value = std::mem::replace(
            &mut self.boxed_mut(i).value,
            Value::Counter(Counter::Int(0)),
        );
        self.heap -= value.heap_bytes();
        value
    }

    /// Stores `value` in entry `i` with `deadline`, filed at `filed`: packed if it fits,
    /// else boxed (reusing the entry's box if it has one; allocating only when a packed entry
    /// stops fitting).
    #[inline]
    pub fn put(&mut self, i: usize, value: Value, deadline: Nanos, filed: SlotId) {
        let had_deadline = self.deadline(i) != Nanos::MAX;
        let form = self.meta[i] & FORM;
        let packed = packable(&value).filter(|&(_, tat)| {
            form != HEAP && filed < OVERFLOW && deadline <= tat && tat.0 - deadline.0 <= MAX_DELTA
        });
        if let Some((kind, tat)) = packed {
            if self.is_boxed(i) {
                self.drop_box(i);
            }
            self.slots[i].word = tat.0;
            self.meta[i] = form
                | (kind << KIND_SHIFT)
                | (((tat.0 - deadline.0) as u16) << DELTA_SHIFT)
                | (filed << PACKED_FILED_SHIFT);
        } else {
            self.heap += value.heap_bytes();
            if self.is_boxed(i) {
                let b = self.boxed_mut(i);
                b.deadline = deadline;
                let old = std::mem::replace(&mut b.value, value);
                self.heap -= old.heap_bytes();
            } else {
                self.heap += size_of::<Boxed>();
                let b = Box::into_raw(Box::new(Boxed { deadline, value }));
                self.slots[i].word = b.expose_provenance() as u64;
            }
            self.meta[i] = form | (BOXED << KIND_SHIFT) | (filed << BOXED_FILED_SHIFT);
        }
        match (had_deadline, deadline != Nanos::MAX) {
            (false, true) => self.expires += 1,
            (true, false) => self.expires -= 1,
            _ => {}
        }
    }

    fn drop_box(&mut self, i: usize) {
        // SAFETY: see `boxed`; the slot stops being BOXED right after (callers rewrite or
        // clear its metadata), so the box is freed once.
        let b = unsafe {
            Box::from_raw(ptr::with_exposed_provenance_mut::<Boxed>(
                self.slots[i].word as usize,
            ))
        };
        self.heap -= size_of::<Boxed>() + b.value.heap_bytes();
    }

    /// Frees what occupied slot `i` owns (its metadata is left to the caller).
    fn free(&mut self, i: usize) {
        if self.is_boxed(i) {
            self.drop_box(i);
        }
        if self.meta[i] & FORM == HEAP {
            let (addr, len) = self.heap_key_parts(i);
            // SAFETY: see `heap_key`; the slot's metadata is cleared by the caller.
            drop(unsafe {
                Box::from_raw(ptr::slice_from_raw_parts_mut(
                    ptr::with_exposed_provenance_mut::<u8>(addr),
                    len,
                ))
            });
            self.heap -= len;
        }
    }

    /// Drops entry `i`.
    pub fn remove(&mut self, i: usize) {
        if self.deadline(i) != Nanos::MAX {
            self.expires -= 1;
        }
        self.free(i);
        self.meta[i] = EMPTY;
        self.len -= 1;
        if i >= self.cap {
            while self.meta.len() > self.cap && self.meta.last() == Some(&EMPTY) {
                self.meta.pop();
                self.slots.pop();
            }
        }
    }

    fn needs_growth(&self) -> bool {
        (self.len + 1) * 100 > self.cap * MAX_LOAD_PCT
    }

    /// A small table doubles, a large one grows by a fifth. Growth moves every entry, so
    /// growing by a fifth from empty would move each key about six times before its shard held
    /// a few hundred (a burst of new keys, as in a flood of random client IPs, pays that);
    /// doubling moves it about twice. Past [`DOUBLING_SLOTS`] the fifth keeps the table dense.
    fn grown_buckets(&self) -> usize {
        let nb = self.cap / BUCKET;
        if self.cap < DOUBLING_SLOTS {
            (nb * 2).max(MIN_SLOTS / BUCKET)
        } else {
            nb + nb / 5
        }
    }

    /// Inserts a key known to be absent; returns its slot. `hash` gives the 32 hash bits of a
    /// key (to move keys between buckets).
    pub fn insert(
        &mut self,
        h: u32,
        probe: &Probe<'_>,
        value: Value,
        deadline: Nanos,
        filed: SlotId,
        hash: &impl Fn(&[u8]) -> u32,
    ) -> usize {
        if self.needs_growth() {
            self.rebuild(self.grown_buckets(), hash);
        }
        let i = match self.place(h, hash) {
            Some(i) => i,
            None if (self.len + 1) * 2 > self.cap => {
                self.rebuild(self.grown_buckets(), hash);
                self.place(h, hash).unwrap_or_else(|| self.stash_slot())
            }
            None => self.stash_slot(),
        };
        let key = if probe.form == HEAP {
            let b: Box<[u8]> = probe.key.into();
            self.heap += b.len();
            let len = b.len() as u64;
            let addr = Box::into_raw(b).cast::<u8>().expose_provenance() as u64;
            let mut key = [0u8; INLINE_CAP];
            key[..8].copy_from_slice(&addr.to_ne_bytes());
            key[8..].copy_from_slice(&len.to_ne_bytes());
            key
        } else {
            probe.inline
        };
        // A packed placeholder without a deadline, owning nothing yet, for `put` to fill.
        self.slots[i] = Slot {
            key,
            word: Nanos::MAX.0,
        };
        self.meta[i] = probe.form | (TOKEN << KIND_SHIFT);
        self.len += 1;
        self.put(i, value, deadline, filed);
        i
    }

    fn next_rng(&mut self) -> u32 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.rng = x;
        x
    }

    fn free_in(&self, bucket: usize) -> Option<usize> {
        (bucket * BUCKET..(bucket + 1) * BUCKET).find(|&i| self.meta[i] == EMPTY)
    }

    fn move_slot(&mut self, from: usize, to: usize) {
        debug_assert_eq!(self.meta[to], EMPTY);
        self.slots[to] = self.slots[from];
        self.meta[to] = self.meta[from];
        self.meta[from] = EMPTY;
    }

    /// Frees a slot in one of `h`'s buckets, moving other keys to their other bucket along a
    /// random walk; `None` if the walk found no room (the table is unchanged then).
    fn place(&mut self, h: u32, hash: &impl Fn(&[u8]) -> u32) -> Option<usize> {
        if self.cap == 0 {
            return None;
        }
        let (a, b) = self.buckets(h);
        if let Some(i) = self.free_in(a).or_else(|| self.free_in(b)) {
            return Some(i);
        }
        let mut path = [0usize; MAX_PATH];
        let mut bucket = if self.next_rng() & 1 == 0 { a } else { b };
        for n in 0..MAX_PATH {
            let r = self.next_rng() as usize;
            // A walk never passes a slot twice, so each key on it moves once.
            let i = (0..BUCKET)
                .map(|k| bucket * BUCKET + (r + k) % BUCKET)
                .find(|i| !path[..n].contains(i))?;
            path[n] = i;
            let (c1, c2) = self.buckets(hash(self.key(i)));
            let alt = if c1 == bucket { c2 } else { c1 };
            if let Some(free) = self.free_in(alt) {
                self.move_slot(i, free);
                for k in (0..n).rev() {
                    self.move_slot(path[k], path[k + 1]);
                }
                return Some(path[0]);
            }
            bucket = alt;
        }
        None
    }

    /// An empty stash slot (the stash grows one slot at a time: it is for pathological hashes).
    fn stash_slot(&mut self) -> usize {
        if let Some(i) = (self.cap..self.meta.len()).find(|&i| self.meta[i] == EMPTY) {
            return i;
        }
        self.meta.reserve_exact(1);
        self.slots.reserve_exact(1);
        self.meta.push(EMPTY);
        self.slots.push(Slot::default());
        self.meta.len() - 1
    }

    /// Moves every entry into fresh arrays of `buckets` buckets.
    fn rebuild(&mut self, buckets: usize, hash: &impl Fn(&[u8]) -> u32) {
        let cap = buckets * BUCKET;
        let mut fresh = Table {
            meta: vec![EMPTY; cap],
            slots: vec![Slot::default(); cap],
            cap,
            rng: self.rng,
            ..Table::default()
        };
        for i in 0..self.meta.len() {
            if self.meta[i] == EMPTY {
                continue;
            }
            let j = fresh
                .place(hash(self.key(i)), hash)
                .unwrap_or_else(|| fresh.stash_slot());
            fresh.slots[j] = self.slots[i];
            fresh.meta[j] = self.meta[i];
        }
        (fresh.len, fresh.heap, fresh.expires) = (self.len, self.heap, self.expires);
        let mut old = std::mem::replace(self, fresh);
        // Ownership moved with the bytes: the old arrays must free nothing.
        old.meta.clear();
    }

    /// Gives memory back after a wave of expiries: memory follows the clients that are limited
    /// now, not the peak. Shrinks only below a quarter full, to three quarters, so a table that
    /// breathes around one size does not reallocate back and forth.
    pub fn maybe_shrink(&mut self, hash: &impl Fn(&[u8]) -> u32) {
        if self.cap > MIN_SHRINK_SLOTS && self.len * 4 < self.cap {
            let buckets = (self.len * 4 / 3).div_ceil(BUCKET).max(2);
            self.rebuild(buckets, hash);
        }
    }

    #[cfg(test)]
    pub fn capacity(&self) -> usize {
        self.cap
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::KeyHash;
    use crate::wheel::NOT_FILED;

    fn hash(key: &[u8]) -> u32 {
        crate::StoreHasher::default().hash32(key)
    }

    fn token(tat: u64) -> Value {
        Value::Limiter(State::Token { tat: Nanos(tat) })
    }

    #[test]
    fn layout() {
        assert_eq!(size_of::<Slot>(), 24);
        assert_eq!(SLOT_BYTES, 26);
        assert_eq!(size_of::<Boxed>(), 32);
    }

    #[test]
    fn packed_and_boxed_round_trip() {
        let mut t = Table::default();
        let keys: Vec<Vec<u8>> = (0..2000u32)
            .map(|i| {
                let len = [3usize, 16, 40][i as usize % 3];
                let mut k = format!("k{i}:").into_bytes();
                k.resize(len.max(k.len()), b'.');
                k
            })
            .collect();
        for (n, k) in keys.iter().enumerate() {
            let p = Probe::new(k);
            let h = hash(k);
            assert!(t.find(h, &p).is_none());
            let (value, deadline) = match n % 4 {
                0 => (token(1000 + n as u64), Nanos(1000 + n as u64)),
                1 => (token(1000 + n as u64), Nanos(990 + n as u64)),
                2 => (token(1000), Nanos(5)),
                _ => (
                    Value::Counter(Counter::from_bytes(b"a longish counter value")),
                    Nanos::MAX,
                ),
            };
            t.insert(h, &p, value, deadline, 7, &hash);
        }
        assert_eq!(t.len(), keys.len());
        assert_eq!(t.expires(), keys.len() - keys.len() / 4);
        assert!(t.len() * 100 >= t.capacity() * 70, "{t:?}");
        for (n, k) in keys.iter().enumerate() {
            let i = t.find(hash(k), &Probe::new(k)).expect("present");
            assert_eq!(t.key(i), &k[..]);
            assert_eq!(t.filed(i), 7);
            match n % 4 {
                0 | 1 => {
                    let tat = 1000 + n as u64;
                    assert_eq!(t.deadline(i), Nanos(tat - if n % 4 == 1 { 10 } else { 0 }));
                    assert_eq!(t.is_boxed(i), k.len() > 16, "key {k:?}");
                    assert_eq!(t.take_limiter(i), Some(State::Token { tat: Nanos(tat) }));
                }
                2 => {
                    assert!(t.is_boxed(i));
                    assert_eq!(t.deadline(i), Nanos(5));
                }
                _ => assert!(t.counter(i).is_some()),
            }
        }
        // Everything removed: nothing owned is left behind.
        for k in &keys {
            let i = t.find(hash(k), &Probe::new(k)).unwrap();
            t.remove(i);
        }
        assert_eq!((t.len(), t.heap, t.expires()), (0, 0, 0));
        t.maybe_shrink(&hash);
        assert!(t.capacity() <= MIN_SHRINK_SLOTS.max(8));
    }

    #[test]
    fn one_hash_for_every_key_falls_back_to_the_stash() {
        let same = |_: &[u8]| 42u32;
        let mut t = Table::default();
        for n in 0..40u32 {
            let k = n.to_le_bytes();
            t.insert(42, &Probe::new(&k), token(9), Nanos(9), 1, &same);
        }
        assert_eq!(t.len(), 40);
        for n in 0..40u32 {
            let k = n.to_le_bytes();
            let i = t.find(42, &Probe::new(&k)).expect("found");
            t.remove(i);
        }
        assert_eq!(t.len(), 0);
        assert_eq!(t.meta.len(), t.capacity(), "the stash is trimmed");
    }

    #[test]
    fn representation_follows_the_value() {
        let mut t = Table::default();
        let k = b"0123456789abcdef";
        let p = Probe::new(k);
        let h = hash(k);
        let i = t.insert(h, &p, token(100), Nanos(95), 3, &hash);
        assert!(!t.is_boxed(i));
        assert_eq!(t.bytes(), t.capacity() * SLOT_BYTES);
        // An EXPIRE far from the tat boxes it; a check back in range packs it again.
        let v = t.take_value(i);
        t.put(i, v, Nanos(50), 3);
        assert!(t.is_boxed(i));
        assert_eq!(t.deadline(i), Nanos(50));
        assert_eq!(t.bytes(), t.capacity() * SLOT_BYTES + 32);
        t.put(i, token(200), Nanos(200), 3);
        assert!(!t.is_boxed(i));
        assert_eq!(t.bytes(), t.capacity() * SLOT_BYTES);
        // A packed entry sent to the overflow list is boxed.
        t.set_filed(i, OVERFLOW);
        assert!(t.is_boxed(i));
        assert_eq!(t.filed(i), OVERFLOW);
        assert_eq!(t.take_limiter(i), Some(State::Token { tat: Nanos(200) }));
        t.put(i, token(300), Nanos::MAX, NOT_FILED);
        assert_eq!(t.expires(), 0);
        assert_eq!(t.filed(i), NOT_FILED);
    }
}
