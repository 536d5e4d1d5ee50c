//! `Table`: one shard's keys, in a bucketized cuckoo hash table of 24-byte slots.
//!
//! # Layout
//! A slot is 16 key bytes and one 8-byte word; beside it, 2 bytes of metadata: the key form
//! (2 bits, 0 = empty slot), the kind (2 bits), 4 bits whose meaning depends on the kind, and the
//! wheel slot `filed` (8 bits). With a key of up to 16 bytes (inline, see `key`), a limiter's
//! state and deadline live in the slot itself, in one of two shapes:
//! - *narrow*, kind TOKEN, GCRA or LEAKY (26 bytes per slot): the word is the bucket's `tat` and
//!   the 4 bits are `δ = tat − deadline`;
//! - *wide*, SLIDING or FIXED (30 bytes per slot): the word is the window start and the period,
//!   the 4 bits name the algorithm and how many periods the deadline is after the start (under
//!   kind 0), and a 4-byte *extension word*, in an array beside the slots, holds the counts.
//!
//! A limiter's deadline is the instant its bucket is fresh again, which for the GCRA family is
//! its `tat` up to rounding (`sluice_core::token` reports `reset_after` on the exact rational
//! scale, a few ns before the integer `tat`), so `δ` is tiny and the deadline costs 4 bits.
//!
//! A window state (SLIDING `{start, prev, curr}`, FIXED `{start, count}`) starts at a multiple
//! of its period `P` and is fresh again at the end of its window or of the next one: its deadline
//! is `start + k·P`, `k` 1 or 2. The period comes with each check and the table never sees it,
//! but `(start, deadline)` gives it back: the table looks for `k ∈ {1, 2}` such that
//! `P = (deadline − start) / k` divides `start` and packs `P` and `q = start / P` in the word
//! (`q` in the high [`Q_BITS`] bits; `P` as `m · 10^e` in the low 22: a 5-bit `e`, a 17-bit `m`
//! with no trailing decimal zero), `k` in the aux bits and the counts in the extension word
//! (SLIDING: `prev`, then `curr`, 16 bits each; FIXED: `count`, 32 bits). So a state packs
//! whenever its deadline is where a check puts it, its period is at most 131,071 s in whole
//! seconds (131 s in whole milliseconds; rounder ones, a day, a week, 10^8 s, at any length) and
//! at least 1 ms (`q < 2^42` until 2109), and its counts fit. Anything else (a SLIDING count of
//! 2^16 or more, a FIXED count of 2^32 or more, a period of odd nanoseconds, an `EXPIRE` on the
//! key) is BOXED: every state and deadline reads back exactly; only memory differs.
//! The extension array is allocated by the insert of the table's first wide entry and dropped
//! when the table is rebuilt (grown or shrunk) without one, so a table of TOKEN buckets never
//! pays for it. Only an insert allocates it, because only an insert is checked against the
//! memory budget ([`Table::insert_cost`] counts it): a write to an existing entry while there is
//! no array boxes a window state that would pack.
//!
//! Everything else is BOXED (kind 0, the 4 bits 0): the word points to a heap [`Boxed`]
//! `{deadline, value}` (32 bytes). That covers counters, LOG, every entry whose key is longer
//! than 16 bytes, window states that do not fit, and a narrow state whose deadline is not within
//! 15 ns below its `tat` (an `EXPIRE` on a bucket, a generic [`crate::Store::limiter`] caller) or
//! whose wheel item waits in the overflow list. A key longer than 16 bytes is a leaked
//! `Box<[u8]>` (pointer and length in the key bytes).
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
//! # Moving into new arrays
//! Growing or shrinking does not move every entry in one insert: the table allocates the new
//! arrays, keeps the old ones in `old`, and moves entries in a few at a time, in old slot order
//! ([`Table::migrate_some`]: [`INSERT_MIGRATE`] per insert, and whatever budget housekeeping
//! gives it), plus the key a lookup asks for if it is still there ([`Table::pull`]) and the keys
//! of a hash the wheel visits ([`Table::pull_hash`]). So slot indices handed out always refer to
//! the new arrays. `Growth::AtOnce` (a shard at its memory budget) rebuilds in one go instead.
//!
//! As the move passes them, the old arrays' whole pages go back to the system (on Linux,
//! `madvise(MADV_DONTNEED)`, [`RELEASE_BYTES`] of slots at a time, so no step hands back more):
//! when the move is over and the old arrays are freed, none of their pages is resident, whatever
//! the allocator keeps of the freed block (glibc's malloc keeps it in its heap; jemalloc purges
//! it only after its decay time). `used_memory` still counts the old arrays until they are
//! freed: they are allocated until then.
//!
//! # Invariants
//! - While `old` is `Some`, every entry is in exactly one of the two arrays, and each array's
//!   `len`, `wide`, `heap` and `expires` count its own entries; [`Table::len`] and
//!   [`Table::expires`] add them. The old arrays gain no entry, and none of theirs changes:
//!   every write goes through a lookup that moved the entry in first. Old slots below `moved`
//!   are empty. A table moves into new arrays only when it is not moving already.
//! - Old slots below `released` (at most `moved`) may have lost their pages: such a page reads
//!   as zero bytes (EMPTY metadata, as before) or as it was, so an empty slot stays empty.
//! - A slot owns its box and its heap key; a slot is moved by copying its bytes, its metadata
//!   and (while the extension array exists) its extension word, and clearing the source's
//!   metadata, so ownership moves with it. `Drop` frees what the occupied slots own.
//! - `ext` is empty or exactly as long as `slots` (stash included); `wide` counts the wide
//!   entries, and `ext` is non-empty whenever `wide > 0`. An extension word means something only
//!   for a wide entry; it owns nothing.
//! - `heap` is the sum over entries of their heap key's length and, for BOXED entries,
//!   `size_of::<Boxed>()` plus the value's heap bytes, except the value of an entry between
//!   [`Table::take_value`] and [`Table::put`]. The arrays (extension included) are counted by
//!   capacity in [`Table::bytes`]. `expires` counts entries whose deadline is not `Nanos::MAX`.
//! - A narrow entry is always filed in the wheel at a slot, never in the overflow list:
//!   `filed < OVERFLOW`. Wide and boxed entries may be filed anywhere (a weekly SLIDING window
//!   ends beyond the wheel's 13 days). Every `filed`, `NOT_FILED` included, fits its 8 bits.
//! - A wide entry's word and aux bits give back exactly the start and deadline it was packed
//!   with: `start = q·P`, `deadline = (q + k)·P`, neither overflowing, `P > 0`. Its deadline is
//!   never `Nanos::MAX` (such a state is boxed), so it always counts in `expires`.

#[cfg(test)]
mod moving_tests;
mod scan;

use std::ptr;

use sluice_core::fixed::Fixed;
use sluice_core::sliding::Sliding;
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
/// Slots' worth of old entries an insert moves in while the table moves (see
/// [`Table::migrate_some`]): about 16 entries. Growth by a fifth at 93 % full leaves room for
/// 18 % of the old capacity in new keys before the next growth, and the move is over after
/// about 6 %; a shrink to three quarters full is over well before its fourth quarter fills,
/// unless the shrink follows a mass expiry that left the old arrays nearly empty: then empty
/// slots (1 each) are most of the move.
pub const INSERT_MIGRATE: usize = 16 * MOVE_COST;
/// What moving an entry costs in [`Table::migrate_some`]'s budget; an empty slot costs 1.
pub const MOVE_COST: usize = 8;
/// Bytes of moved-from slots (with their metadata and extension words) handed back to the
/// system at a time while a table moves: one `madvise` per ~2,700 slots moved, a few
/// microseconds, never a whole array under one lock. A page in unit tests, so that the model
/// tests' small tables move across pages already handed back.
const RELEASE_BYTES: usize = if cfg!(test) { 4096 } else { 64 << 10 };
/// Tables at most this many slots are never shrunk: not worth a reallocation.
const MIN_SHRINK_SLOTS: usize = 64;
/// A table's first allocation, in slots (1.7 KB: a shard under a small `maxmemory` budget
/// can still hold its first keys).
const MIN_SLOTS: usize = 64;
/// Below this many slots the table doubles when it grows; from it on, it grows by a fifth.
const DOUBLING_SLOTS: usize = 256;

const FORM: u16 = 0b11;
const EMPTY: u16 = 0;
const KIND_SHIFT: u32 = 2;
const KIND: u16 = 0b11 << KIND_SHIFT;
/// Kind 0: BOXED or wide, told apart by the 4 aux bits.
const OTHER: u16 = 0;
const TOKEN: u16 = 1;
const GCRA: u16 = 2;
const LEAKY: u16 = 3;
/// The 4 bits after the kind: `δ` of a narrow entry, the algorithm of a kind-0 entry.
const AUX_SHIFT: u32 = 4;
const AUX: u16 = 0xF << AUX_SHIFT;
/// Kind and aux bits of a BOXED entry. A wide entry's aux bits are `alg << 1 | (k − 1)`.
const BOXED: u16 = OTHER << KIND_SHIFT;
const SLIDING: u16 = 1;
const FIXED: u16 = 2;
const FILED_SHIFT: u32 = 8;

/// Bits of a wide entry's word that hold `q = start / P`, above the period's code.
pub const Q_BITS: u32 = 64 - PERIOD_BITS;
const PERIOD_BITS: u32 = EXP_BITS + MANTISSA_BITS;
const EXP_BITS: u32 = 5;
const MANTISSA_BITS: u32 = 17;
/// Bits of each SLIDING count in an extension word.
const SLIDING_COUNT_BITS: u32 = 16;
const POW10: [u64; 20] = {
    let mut p = [1u64; 20];
    let mut i = 1;
    while i < 20 {
        p[i] = p[i - 1] * 10;
        i += 1;
    }
    p
};

/// Bytes per slot: the slot and its metadata.
pub const SLOT_BYTES: usize = size_of::<Slot>() + size_of::<u16>();
/// Bytes per slot of the extension array, while a table has one.
pub const EXT_BYTES: usize = size_of::<u32>();

/// `n` empty slots, allocated zeroed: a large table's fresh arrays cost the allocator a
/// mapping, not a pass writing every slot under the shard's lock.
fn zeroed_slots(n: usize) -> Vec<Slot> {
    const { assert!(size_of::<Slot>() == size_of::<[u64; 3]>()) };
    const { assert!(align_of::<Slot>() == align_of::<[u64; 3]>()) };
    let mut words = std::mem::ManuallyDrop::new(vec![[0u64; 3]; n]);
    let (ptr, len, cap) = (words.as_mut_ptr(), words.len(), words.capacity());
    // SAFETY: `Slot` has the size and alignment of `[u64; 3]` (asserted above), so the
    // allocation's layout is the one a `Vec<Slot>` of this capacity frees with; all-zero bytes
    // are a valid `Slot` (an array of bytes and a u64), and the default one.
    unsafe { Vec::from_raw_parts(ptr.cast::<Slot>(), len, cap) }
}

/// Hands the pages that lie wholly within `v[from..to]` back to the system (Linux:
/// `madvise(MADV_DONTNEED)`; elsewhere nothing). Each of those elements then reads as zero
/// bytes (private anonymous memory, what allocators hand out) or as it was: `T` must be plain
/// data for which both are values, and the caller must need neither. The allocation stays the
/// Vec's; a page it shares with another allocation is left alone.
fn release_pages<T: Copy>(v: &mut [T], from: usize, to: usize) {
    assert!(from <= to && to <= v.len());
    #[cfg(target_os = "linux")]
    {
        let Some(page) = page_size() else { return };
        let first = v.as_ptr().addr();
        let start =
            ((first + from * size_of::<T>()) / page * page).max(first.next_multiple_of(page));
        let end = (first + to * size_of::<T>()) / page * page;
        if end > start {
            // SAFETY: `[start, end)` is page-aligned and lies within `v[..to]` (`start` is at or
            // after `v`'s first byte, `end` at or before the end of `v[..to]`, checked above), so
            // the pointer stays in `v`'s allocation and whole pages of it are advised, none
            // shared with another allocation. `&mut v` makes the access unique while the kernel
            // drops the pages; what they read as afterwards, zero bytes or the old bytes, is a
            // valid `T` either way (the caller's contract), and nothing else reads them.
            unsafe {
                let addr = v.as_mut_ptr().cast::<u8>().add(start - first);
                libc::madvise(addr.cast(), end - start, libc::MADV_DONTNEED);
            }
        }
    }
}

/// The system's page size, if it is a power of two (it always is).
#[cfg(target_os = "linux")]
fn page_size() -> Option<usize> {
    static PAGE: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: `sysconf` reads a configuration value; it takes no pointer.
        let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(n).ok().filter(|n| n.is_power_of_two())
    })
}

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
    /// One extension word per slot while the table holds wide entries, else empty.
    ext: Vec<u32>,
    /// Slots in buckets (a multiple of [`BUCKET`]); slots after them are the stash.
    cap: usize,
    len: usize,
    /// Wide entries (SLIDING/FIXED packed with an extension word).
    wide: usize,
    heap: usize,
    expires: usize,
    rng: u32,
    /// While the table grows or shrinks: the previous arrays, whose entries move into these a
    /// few at a time ([`Table::migrate_some`]). Its slots below `moved` are empty.
    old: Option<Box<Table>>,
    moved: usize,
    /// Old slots below this have had their pages handed back ([`release_pages`]).
    released: usize,
    /// Scans in progress (see `scan`).
    scans: Vec<scan::Scan>,
}

/// How an insert that needs a bigger table gets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Growth {
    /// Allocate the bigger arrays now and move the entries into them a few per insert (and per
    /// housekeeping step): no insert pays for all of them, but both arrays are held until the
    /// last entry has moved.
    Incremental,
    /// Move every entry now: the insert pays for all of them, and only the growth is held
    /// beyond the arrays of today (for a shard at its memory budget).
    AtOnce,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("len", &self.len)
            .field("cap", &self.cap)
            .field("stash", &(self.meta.len() - self.cap))
            .field("wide", &self.wide)
            .field("ext", &!self.ext.is_empty())
            .field("old", &self.old)
            .field("moved", &self.moved)
            .field("released", &self.released)
            .finish_non_exhaustive()
    }
}

/// The two buckets (of `nb`) a key of hash `h` may live in.
#[inline]
fn bucket_pair(h: u32, nb: usize) -> (usize, usize) {
    let n = nb as u64;
    let a = ((u64::from(h) * n) >> 32) as usize;
    let mut b = ((u64::from(fmix32(h)) * n) >> 32) as usize;
    if b == a {
        b = if a + 1 == nb { 0 } else { a + 1 };
    }
    (a, b)
}

/// The addresses of a table's arrays as they were when taken: enough to prefetch the lines a
/// lookup will read, never to read them (the arrays may have moved since).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    pub meta: usize,
    pub slots: usize,
    pub buckets: usize,
}

impl Layout {
    /// Asks the CPU to start loading the metadata and slots of both buckets of hash `h`.
    #[inline]
    pub fn prefetch(&self, h: u32) {
        if self.buckets == 0 {
            return;
        }
        let (a, b) = bucket_pair(h, self.buckets);
        for bucket in [a, b] {
            let first = bucket * BUCKET;
            prefetch(self.meta + first * size_of::<u16>());
            let slot = self.slots + first * size_of::<Slot>();
            prefetch(slot);
            prefetch(slot + BUCKET * size_of::<Slot>() - 1);
        }
    }
}

/// A hint to load the cache line at `addr`; never a read (an address no longer allocated is fine).
#[inline(always)]
fn prefetch(addr: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: a prefetch reads nothing the program can observe and never faults.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(ptr::without_provenance::<i8>(addr)) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
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

/// Period `p` as a code (`m · 10^e`, `e` in the low [`EXP_BITS`]), if its mantissa fits.
#[inline]
fn encode_period(p: u64) -> Option<u64> {
    let (mut m, mut e) = (p, 0);
    if m != 0 {
        // Strips the trailing decimal zeros (at most 19) in five steps, 16 + 2 + 1 at most.
        for (zeros, pow) in [
            (16, POW10[16]),
            (8, POW10[8]),
            (4, 10_000),
            (2, 100),
            (1, 10),
        ] {
            if m.is_multiple_of(pow) {
                m /= pow;
                e += zeros;
            }
        }
    }
    (m < 1 << MANTISSA_BITS).then_some((m << EXP_BITS) | e)
}

#[inline]
fn decode_period(code: u64) -> u64 {
    let e = (code & ((1 << EXP_BITS) - 1)) as usize;
    let m = (code >> EXP_BITS) & ((1 << MANTISSA_BITS) - 1);
    // A code comes from `encode_period` of a u64: `e ≤ 19` and `m · 10^e` does not overflow.
    m * POW10[e]
}

/// The kind and aux bits of a wide entry of algorithm `alg` whose deadline is `k` periods
/// after its start.
#[inline]
fn wide_shape(alg: u16, k: u64) -> u16 {
    (OTHER << KIND_SHIFT) | (((alg << 1) | (k as u16 - 1)) << AUX_SHIFT)
}

/// The window start and deadline of a wide entry of shape `shape` and word `word`.
#[inline]
fn wide_times(shape: u16, word: u64) -> (Nanos, Nanos) {
    let p = decode_period(word & ((1 << PERIOD_BITS) - 1));
    let start = (word >> PERIOD_BITS) * p;
    let k = 1 + u64::from((shape >> AUX_SHIFT) & 1);
    // Packed only if `(q + k)·P`, the deadline, is a u64 (module invariants).
    (Nanos(start), Nanos(start + k * p))
}

/// How a value sits in a slot, when it does not need a box.
#[derive(Clone, Copy)]
enum Packed {
    /// TOKEN/GCRA/LEAKY: the word is `tat`.
    Narrow { kind: u16, tat: u64, delta: u64 },
    /// SLIDING/FIXED: `q` and the period in the word, the counts in the extension word;
    /// `shape` is its kind and aux bits.
    Wide { shape: u16, word: u64, ext: u32 },
}

/// [`pack`] for TOKEN, GCRA and LEAKY (`None` for anything else).
#[inline]
fn pack_narrow(value: &Value, form: u16, deadline: Nanos, filed: SlotId) -> Option<Packed> {
    let (kind, tat) = match value {
        Value::Limiter(State::Token { tat }) => (TOKEN, tat.0),
        Value::Limiter(State::Gcra { tat }) => (GCRA, tat.0),
        Value::Limiter(State::Leaky { tat }) => (LEAKY, tat.0),
        _ => return None,
    };
    let delta = tat.checked_sub(deadline.0)?;
    (form != HEAP && filed < OVERFLOW && delta <= MAX_DELTA).then_some(Packed::Narrow {
        kind,
        tat,
        delta,
    })
}

/// How `value` with `deadline` and wheel slot `filed` packs into a slot of key form `form`
/// (`None`: it needs a box). See the module docs.
#[inline]
fn pack(value: &Value, form: u16, deadline: Nanos, filed: SlotId) -> Option<Packed> {
    let Value::Limiter(state) = value else {
        return None;
    };
    if form == HEAP {
        return None;
    }
    let wide = |alg: u16, start: Nanos, ext: u32| {
        if deadline == Nanos::MAX {
            return None;
        }
        let span = deadline.0.checked_sub(start.0)?;
        // The first k that gives a period dividing the start, whose q and code fit. Any that
        // does gives back (start, deadline) exactly, whatever period the check used.
        [1, 2].into_iter().find_map(|k| {
            let p = span / k;
            let divides = p != 0 && span.is_multiple_of(k) && start.0.is_multiple_of(p);
            if !divides || (start.0 / p) >> Q_BITS != 0 {
                return None;
            }
            Some(Packed::Wide {
                shape: wide_shape(alg, k),
                word: ((start.0 / p) << PERIOD_BITS) | encode_period(p)?,
                ext,
            })
        })
    };
    match state {
        State::Token { .. } | State::Gcra { .. } | State::Leaky { .. } => {
            pack_narrow(value, form, deadline, filed)
        }
        State::Sliding(s) => {
            if (s.prev | s.curr) >> SLIDING_COUNT_BITS != 0 {
                return None;
            }
            wide(SLIDING, s.start, s.prev | (s.curr << SLIDING_COUNT_BITS))
        }
        State::Fixed(f) => wide(FIXED, f.start, u32::try_from(f.count).ok()?),
        State::Log(_) | State::Lease(_) => None,
    }
}

/// The state of a wide entry of shape `shape`, word `word` and extension word `ext`.
#[inline]
fn unpack_wide(shape: u16, word: u64, ext: u32) -> State {
    let (start, _) = wide_times(shape, word);
    if (shape >> AUX_SHIFT) >> 1 == SLIDING {
        State::Sliding(Sliding {
            start,
            prev: ext & ((1 << SLIDING_COUNT_BITS) - 1),
            curr: ext >> SLIDING_COUNT_BITS,
        })
    } else {
        debug_assert_eq!((shape >> AUX_SHIFT) >> 1, FIXED);
        State::Fixed(Fixed {
            start,
            count: u64::from(ext),
        })
    }
}

impl Default for Table {
    fn default() -> Self {
        Table {
            meta: Vec::new(),
            slots: Vec::new(),
            ext: Vec::new(),
            cap: 0,
            len: 0,
            wide: 0,
            heap: 0,
            expires: 0,
            rng: 0x9E37_79B9,
            old: None,
            moved: 0,
            released: 0,
            scans: Vec::new(),
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
    /// Entries, in both arrays while the table moves.
    pub fn len(&self) -> usize {
        self.len + self.old.as_ref().map_or(0, |o| o.len)
    }

    pub fn expires(&self) -> usize {
        self.expires + self.old.as_ref().map_or(0, |o| o.expires)
    }

    /// Structural bytes: the slot, metadata and extension arrays and everything entries own on
    /// the heap.
    pub fn bytes(&self) -> usize {
        self.meta.capacity() * size_of::<u16>()
            + self.slots.capacity() * size_of::<Slot>()
            + self.ext.capacity() * EXT_BYTES
            + self.heap
            + self.old.as_ref().map_or(0, |o| o.bytes())
    }

    /// What inserting `probe` with `value` and `deadline` would add to [`Table::bytes`]: the
    /// growth of the arrays if the insert grows them (and the extension array if it is the
    /// table's first wide entry), the heap key, and the box unless the value packs (assuming a
    /// narrow value's wheel item lands in a wheel slot). Growing `Incremental` costs the whole
    /// new arrays (the old ones are held while their entries move), `AtOnce` only the growth.
    /// While the table moves, an upper bound: the insert may finish the move and free the old
    /// arrays.
    pub fn insert_cost(
        &self,
        probe: &Probe<'_>,
        value: &Value,
        deadline: Nanos,
        growth: Growth,
    ) -> usize {
        let grows = self.needs_growth();
        let kept = match growth {
            Growth::Incremental => 0,
            Growth::AtOnce => self.cap,
        };
        let (grow, slots_after) = if grows {
            let slots = self.grown_buckets() * BUCKET;
            ((slots - kept) * SLOT_BYTES, slots)
        } else {
            (0, self.slots.len())
        };
        let key = if probe.form == HEAP {
            probe.key.len()
        } else {
            0
        };
        let packed = pack(value, probe.form, deadline, 0);
        let boxed = if packed.is_some() {
            0
        } else {
            size_of::<Boxed>() + value.heap_bytes()
        };
        let wide = matches!(packed, Some(Packed::Wide { .. }));
        let ext_after = if wide || self.wide > 0 || (!grows && !self.ext.is_empty()) {
            slots_after * EXT_BYTES
        } else {
            0
        };
        let ext = match growth {
            Growth::Incremental if grows => ext_after,
            _ => ext_after.saturating_sub(self.ext.capacity() * EXT_BYTES),
        };
        grow + key + boxed + ext
    }

    /// What a growth begun now allocates: the new arrays, extension included if these have one
    /// (the old ones are held until the move is over).
    pub fn move_cost(&self) -> usize {
        let ext = if self.ext.is_empty() { 0 } else { EXT_BYTES };
        self.grown_buckets() * BUCKET * (SLOT_BYTES + ext)
    }

    #[inline]
    fn buckets(&self, h: u32) -> (usize, usize) {
        bucket_pair(h, self.cap / BUCKET)
    }

    /// Where a lookup reads, for [`Layout::prefetch`].
    pub fn layout(&self) -> Layout {
        Layout {
            meta: self.meta.as_ptr().addr(),
            slots: self.slots.as_ptr().addr(),
            buckets: self.cap / BUCKET,
        }
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
    ///
    /// The same slots as [`Table::candidates`], in the same order, as plain loops: every check
    /// runs this, and a key that is not there (every new key) looks at all of them.
    #[inline]
    pub fn find(&self, h: u32, probe: &Probe<'_>) -> Option<usize> {
        let hit = |i: usize| self.meta[i] & FORM == probe.form && self.key_eq(i, probe);
        if self.cap > 0 {
            let (a, b) = self.buckets(h);
            let second = if a == b { None } else { Some(b) };
            for bucket in std::iter::once(a).chain(second) {
                let first = bucket * BUCKET;
                let metas = &self.meta[first..first + BUCKET];
                for (j, &m) in metas.iter().enumerate() {
                    if m & FORM == probe.form && self.key_eq(first + j, probe) {
                        return Some(first + j);
                    }
                }
            }
        }
        (self.cap..self.meta.len()).find(|&i| hit(i))
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

    /// Kind and aux bits: [`BOXED`], or a wide entry's shape (see `wide_shape`).
    #[inline]
    fn shape(&self, i: usize) -> u16 {
        self.meta[i] & (KIND | AUX)
    }

    /// Whether occupied slot `i` is BOXED. An EMPTY slot's kind and aux bits are BOXED's too
    /// (all zero), so on an empty slot this says yes: see [`Table::holds_box`].
    #[inline]
    fn is_boxed(&self, i: usize) -> bool {
        self.shape(i) == BOXED
    }

    /// Whether slot `i` owns a box: BOXED and not EMPTY. The debug check of every access
    /// through the word as a pointer (the hot paths ask only [`Table::is_boxed`], of a slot
    /// they know is occupied).
    fn holds_box(&self, i: usize) -> bool {
        self.is_occupied(i) && self.is_boxed(i)
    }

    #[inline]
    fn is_wide(&self, i: usize) -> bool {
        self.kind(i) == OTHER && !self.is_boxed(i)
    }

    fn boxed(&self, i: usize) -> &Boxed {
        debug_assert!(self.holds_box(i), "slot {i} holds no box");
        // SAFETY: callers pass an occupied BOXED slot (checked above in debug builds), whose
        // word is the exposed address of a leaked `Box<Boxed>` that the slot owns (module
        // invariants).
        unsafe { &*ptr::with_exposed_provenance::<Boxed>(self.slots[i].word as usize) }
    }

    fn boxed_mut(&mut self, i: usize) -> &mut Boxed {
        debug_assert!(self.holds_box(i), "slot {i} holds no box");
        // SAFETY: as in `boxed`; `&mut self` makes the access unique.
        unsafe { &mut *ptr::with_exposed_provenance_mut::<Boxed>(self.slots[i].word as usize) }
    }

    /// The state of wide entry `i`.
    #[inline]
    fn wide_state(&self, i: usize) -> State {
        debug_assert!(self.is_wide(i));
        unpack_wide(self.shape(i), self.slots[i].word, self.ext[i])
    }

    /// When entry `i` disappears; `Nanos::MAX` = never. Slot `i` must be occupied (checked in
    /// debug builds): an EMPTY slot reads as BOXED, and its word is no box.
    #[inline]
    pub fn deadline(&self, i: usize) -> Nanos {
        debug_assert!(self.is_occupied(i), "slot {i} is empty");
        let m = self.meta[i];
        if m & KIND != 0 {
            Nanos(self.slots[i].word - u64::from((m & AUX) >> AUX_SHIFT))
        } else {
            self.kind0_deadline(i)
        }
    }

    /// [`Table::deadline`] of a BOXED or wide entry: a wide one's is a few instructions, decoded
    /// in line (SLIDING and FIXED checks read it); a box's is behind a pointer, out of line.
    #[inline]
    fn kind0_deadline(&self, i: usize) -> Nanos {
        if self.is_boxed(i) {
            self.boxed_deadline(i)
        } else {
            wide_times(self.shape(i), self.slots[i].word).1
        }
    }

    #[inline(never)]
    fn boxed_deadline(&self, i: usize) -> Nanos {
        self.boxed(i).deadline
    }

    /// The wheel slot of entry `i`'s live item, or `NOT_FILED`.
    #[inline]
    pub fn filed(&self, i: usize) -> SlotId {
        self.meta[i] >> FILED_SHIFT
    }

    /// Records where the wheel filed entry `i` (boxing it if a narrow entry went to the
    /// overflow list).
    pub fn set_filed(&mut self, i: usize, filed: SlotId) {
        if self.kind(i) == OTHER || filed < OVERFLOW {
            self.meta[i] = (self.meta[i] & (FORM | KIND | AUX)) | (filed << FILED_SHIFT);
        } else {
            let deadline = self.deadline(i);
            let value = self.take_value(i);
            self.put(i, value, deadline, filed);
        }
    }

    /// Runs `f` on entry `i`'s value (a packed state is rebuilt on the stack). Slot `i` must be
    /// occupied (checked in debug builds).
    #[inline]
    pub fn with_value<R>(&self, i: usize, f: impl FnOnce(&Value) -> R) -> R {
        debug_assert!(self.is_occupied(i), "slot {i} is empty");
        let tat = Nanos(self.slots[i].word);
        match self.kind(i) {
            TOKEN => f(&Value::Limiter(State::Token { tat })),
            GCRA => f(&Value::Limiter(State::Gcra { tat })),
            LEAKY => f(&Value::Limiter(State::Leaky { tat })),
            _ if self.is_wide(i) => f(&Value::Limiter(self.wide_state(i))),
            _ => f(&self.boxed(i).value),
        }
    }

    /// These arrays, then the old ones while the table moves: every entry is in one of them.
    pub fn parts(&self) -> impl Iterator<Item = &Table> {
        std::iter::once(self).chain(self.old.as_deref())
    }

    /// Whether freeing entry `i`'s value takes more than `effort` allocations (a big
    /// collection: see `Shard::unlink`).
    pub fn frees_slowly(&self, i: usize, effort: usize) -> bool {
        self.is_boxed(i) && self.boxed(i).value.free_effort() > effort
    }

    /// Entry `i`'s counter, `None` for a limiter. Slot `i` must be occupied (checked in debug
    /// builds).
    pub fn counter(&self, i: usize) -> Option<&Counter> {
        debug_assert!(self.is_occupied(i), "slot {i} is empty");
        match self.is_boxed(i).then(|| &self.boxed(i).value) {
            Some(Value::Counter(c)) => Some(c),
            _ => None,
        }
    }

    /// Entry `i`'s counter, `None` for a limiter. The caller keeps `heap` right: only an
    /// integer (no heap bytes) may be changed through it. Slot `i` must be occupied (checked in
    /// debug builds).
    pub fn counter_mut(&mut self, i: usize) -> Option<&mut Counter> {
        debug_assert!(self.is_occupied(i), "slot {i} is empty");
        if !self.is_boxed(i) {
            return None;
        }
        match &mut self.boxed_mut(i).value {
            Value::Counter(c) => Some(c),
            _ => None,
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
            _ if self.is_wide(i) => Some(self.wide_state(i)),
            _ => self.take_boxed_limiter(i),
        }
    }

    /// [`Table::take_limiter`] of a BOXED entry.
    #[inline(never)]
    fn take_boxed_limiter(&mut self, i: usize) -> Option<State> {
        let state = self.boxed_mut(i).value.take_limiter();
        if let Some(s) = &state {
            self.heap -= s.heap_bytes();
        }
        state
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

    /// Stores `value` in entry `i` with `deadline`, filed at `filed`: packed if it fits (wide
    /// only if the extension array exists), else boxed (reusing the entry's box if it has one;
    /// allocating only when a packed entry stops fitting).
    #[inline]
    pub fn put(&mut self, i: usize, value: Value, deadline: Nanos, filed: SlotId) {
        // The common case inline: a narrow entry that stays narrow.
        let m = self.meta[i];
        if m & KIND != 0
            && let Some(Packed::Narrow { kind, tat, delta }) =
                pack_narrow(&value, m & FORM, deadline, filed)
        {
            let had_deadline = self.deadline(i) != Nanos::MAX;
            self.slots[i].word = tat;
            self.meta[i] = (m & FORM)
                | (kind << KIND_SHIFT)
                | ((delta as u16) << AUX_SHIFT)
                | (filed << FILED_SHIFT);
            match (had_deadline, deadline != Nanos::MAX) {
                (false, true) => self.expires += 1,
                (true, false) => self.expires -= 1,
                _ => {}
            }
            return;
        }
        // The other common case inline: a wide entry that stays wide under the same period (a
        // SLIDING or FIXED check's usual write) keeps its period code, and its deadline (wide
        // entries always have one).
        if self.is_wide(i)
            && let Some((shape, word, ext)) = self.repack_wide(i, &value, deadline)
        {
            self.slots[i].word = word;
            self.ext[i] = ext;
            self.meta[i] = (m & FORM) | shape | (filed << FILED_SHIFT);
            return;
        }
        self.put_any(i, value, deadline, filed);
    }

    /// [`Table::put`] in general: any value into any entry.
    #[inline(never)]
    fn put_any(&mut self, i: usize, value: Value, deadline: Nanos, filed: SlotId) {
        let had_deadline = self.deadline(i) != Nanos::MAX;
        let was_wide = self.is_wide(i);
        let form = self.meta[i] & FORM;
        // Only an insert allocates the extension array (its cost is in `insert_cost`): an
        // existing entry that packs wide while there is none stays boxed.
        let packed = pack(&value, form, deadline, filed)
            .filter(|p| !matches!(p, Packed::Wide { .. }) || !self.ext.is_empty());
        match packed {
            Some(Packed::Narrow { kind, tat, delta }) => {
                if self.is_boxed(i) {
                    self.drop_box(i);
                }
                self.slots[i].word = tat;
                self.meta[i] = form
                    | (kind << KIND_SHIFT)
                    | ((delta as u16) << AUX_SHIFT)
                    | (filed << FILED_SHIFT);
            }
            Some(Packed::Wide { shape, word, ext }) => {
                if self.is_boxed(i) {
                    self.drop_box(i);
                }
                self.ext[i] = ext;
                self.slots[i].word = word;
                self.meta[i] = form | shape | (filed << FILED_SHIFT);
            }
            None => {
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
                self.meta[i] = form | BOXED | (filed << FILED_SHIFT);
            }
        }
        match (was_wide, self.is_wide(i)) {
            (false, true) => self.wide += 1,
            (true, false) => self.wide -= 1,
            _ => {}
        }
        match (had_deadline, deadline != Nanos::MAX) {
            (false, true) => self.expires += 1,
            (true, false) => self.expires -= 1,
            _ => {}
        }
    }

    /// Wide entry `i` packed again with `value` and `deadline` under its own period, if they
    /// fit it: the shape, word and extension word. The same as [`pack`] would give, or another
    /// packing of the same start and deadline.
    #[inline]
    fn repack_wide(&self, i: usize, value: &Value, deadline: Nanos) -> Option<(u16, u64, u32)> {
        let (alg, start, ext) = match value {
            Value::Limiter(State::Sliding(s)) if (s.prev | s.curr) >> SLIDING_COUNT_BITS == 0 => {
                (SLIDING, s.start.0, s.prev | (s.curr << SLIDING_COUNT_BITS))
            }
            Value::Limiter(State::Fixed(f)) => (FIXED, f.start.0, u32::try_from(f.count).ok()?),
            _ => return None,
        };
        if deadline == Nanos::MAX {
            return None;
        }
        let code = self.slots[i].word & ((1 << PERIOD_BITS) - 1);
        // Not 0: a wide entry's period divides its start (`pack`).
        let p = decode_period(code);
        let span = deadline.0.checked_sub(start)?;
        let k = match span / p {
            1 | 2 if span.is_multiple_of(p) => span / p,
            _ => return None,
        };
        if !start.is_multiple_of(p) || (start / p) >> Q_BITS != 0 {
            return None;
        }
        Some((wide_shape(alg, k), ((start / p) << PERIOD_BITS) | code, ext))
    }

    /// Frees BOXED entry `i`'s box and clears the word, so no freed address stays behind.
    fn drop_box(&mut self, i: usize) {
        debug_assert!(self.holds_box(i), "slot {i} holds no box");
        // SAFETY: see `boxed`; the word is cleared here and the slot stops being BOXED right
        // after (callers rewrite or clear its metadata), so the box is freed once.
        let b = unsafe {
            Box::from_raw(ptr::with_exposed_provenance_mut::<Boxed>(
                self.slots[i].word as usize,
            ))
        };
        self.slots[i].word = 0;
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
            self.slots[i].key = [0; INLINE_CAP];
            self.heap -= len;
        }
    }

    /// Drops entry `i`.
    pub fn remove(&mut self, i: usize) {
        if self.deadline(i) != Nanos::MAX {
            self.expires -= 1;
        }
        if self.is_wide(i) {
            self.wide -= 1;
        }
        self.free(i);
        self.meta[i] = EMPTY;
        self.len -= 1;
        if i >= self.cap {
            while self.meta.len() > self.cap && self.meta.last() == Some(&EMPTY) {
                self.meta.pop();
                self.slots.pop();
                self.ext.pop();
            }
        }
    }

    /// Whether one more entry makes the table too full (counting the entries still to move in).
    fn needs_growth(&self) -> bool {
        (self.len() + 1) * 100 > self.cap * MAX_LOAD_PCT
    }

    /// A small table jumps to [`DOUBLING_SLOTS`] (or doubles), a large one grows by a fifth.
    /// Growth moves every entry, so growing by a fifth from empty would move each key about six
    /// times before its shard held a few hundred (a burst of new keys, as in a flood of random
    /// client IPs, pays that); the jump moves it about once. Past [`DOUBLING_SLOTS`] the fifth
    /// keeps the table dense.
    fn grown_buckets(&self) -> usize {
        let nb = self.cap / BUCKET;
        if self.cap == 0 {
            MIN_SLOTS / BUCKET
        } else if self.cap < DOUBLING_SLOTS {
            // A shard that outgrew its first slots is taking a burst of new keys: straight to
            // DOUBLING_SLOTS, so each of them moves once on the way, not twice.
            (nb * 2).max(DOUBLING_SLOTS / BUCKET)
        } else {
            nb + nb / 5
        }
    }

    /// Inserts a key known to be absent (in both arrays while the table moves: see
    /// [`Table::pull`]); returns its slot. `hash` gives the 32 hash bits of a key (to move
    /// keys between buckets). While the table moves, first moves a few more old entries in
    /// ([`INSERT_MIGRATE`] slots' worth).
    #[allow(clippy::too_many_arguments)] // the entry, plus how to hash and grow.
    pub fn insert(
        &mut self,
        h: u32,
        probe: &Probe<'_>,
        value: Value,
        deadline: Nanos,
        filed: SlotId,
        hash: &impl Fn(&[u8]) -> u32,
        growth: Growth,
    ) -> usize {
        if self.old.is_some() {
            self.migrate_some(INSERT_MIGRATE, hash);
        }
        if self.needs_growth() {
            match growth {
                Growth::Incremental => {
                    // Only when inserts outran the move (it is paced to end well before).
                    self.finish_migration(hash);
                    self.start_move(self.grown_buckets());
                }
                Growth::AtOnce => self.rebuild(self.grown_buckets(), hash),
            }
        }
        let i = match self.place(h, hash) {
            Some(i) => i,
            // A walk that found no room in a table that is not moving, past half full (the
            // odd one from about 85 % on): it grows, as when full. While it moves, the
            // stash takes the key until the next move.
            None if (self.len + 1) * 2 > self.cap && self.old.is_none() => {
                match growth {
                    Growth::Incremental => self.start_move(self.grown_buckets()),
                    Growth::AtOnce => self.rebuild(self.grown_buckets(), hash),
                }
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
        // The table's first wide entry brings the extension array (see `put`).
        if self.ext.is_empty()
            && matches!(value, Value::Limiter(State::Sliding(_) | State::Fixed(_)))
            && matches!(
                pack(&value, probe.form, deadline, filed),
                Some(Packed::Wide { .. })
            )
        {
            self.ext = vec![0; self.slots.len()];
        }
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
        self.note_move(from, to);
        self.slots[to] = self.slots[from];
        if !self.ext.is_empty() {
            self.ext[to] = self.ext[from];
        }
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
        if !self.ext.is_empty() {
            self.ext.reserve_exact(1);
            self.ext.push(0);
        }
        self.meta.len() - 1
    }

    /// Empty arrays of `buckets` buckets (with an extension array only if this table's wide
    /// entries need one), for this table's entries to move into.
    fn fresh(&self, buckets: usize) -> Table {
        let cap = buckets * BUCKET;
        Table {
            meta: vec![EMPTY; cap],
            slots: zeroed_slots(cap),
            ext: if self.wide > 0 {
                vec![0; cap]
            } else {
                Vec::new()
            },
            cap,
            rng: self.rng,
            old: None,
            moved: 0,
            released: 0,
            scans: Vec::new(),
            ..Table::default()
        }
    }

    /// Moves every entry into fresh arrays of `buckets` buckets (with an extension array only
    /// if a wide entry needs one), all at once (finishing a move first).
    fn rebuild(&mut self, buckets: usize, hash: &impl Fn(&[u8]) -> u32) {
        self.finish_migration(hash);
        let mut fresh = self.fresh(buckets);
        fresh.scans = self.scans_for_rebuild();
        for i in 0..self.meta.len() {
            if self.meta[i] == EMPTY {
                continue;
            }
            let j = fresh
                .place(hash(self.key(i)), hash)
                .unwrap_or_else(|| fresh.stash_slot());
            fresh.slots[j] = self.slots[i];
            fresh.meta[j] = self.meta[i];
            if !fresh.ext.is_empty() {
                fresh.ext[j] = self.ext[i];
            }
        }
        (fresh.len, fresh.wide, fresh.heap, fresh.expires) =
            (self.len, self.wide, self.heap, self.expires);
        let mut old = std::mem::replace(self, fresh);
        // Every entry moved in one go: the old arrays are dropped now, their pages too.
        old.release(0, old.meta.len());
        // Ownership moved with the bytes: the old arrays must free nothing.
        old.meta.clear();
    }

    /// Gives memory back after a wave of expiries: memory follows the clients that are limited
    /// now, not the peak. Shrinks only below a quarter full, to three quarters, so a table that
    /// breathes around one size does not reallocate back and forth; not while it moves.
    /// `Incremental` starts a move (the arrays held meanwhile grow by a third at most);
    /// `AtOnce` moves every entry now (memory is wanted now: an eviction).
    pub fn maybe_shrink(&mut self, hash: &impl Fn(&[u8]) -> u32, growth: Growth) {
        if self.old.is_none() && self.cap > MIN_SHRINK_SLOTS && self.len * 4 < self.cap {
            let buckets = (self.len * 4 / 3).div_ceil(BUCKET).max(2);
            match growth {
                Growth::Incremental => self.start_move(buckets),
                Growth::AtOnce => self.rebuild(buckets, hash),
            }
        }
    }

    /// Starts moving this table's entries into fresh arrays of `buckets` buckets (none may be
    /// moving already).
    fn start_move(&mut self, buckets: usize) {
        debug_assert!(self.old.is_none());
        let fresh = self.fresh(buckets);
        let scans = self.scans_into_old();
        let old = std::mem::replace(self, fresh);
        self.old = Some(Box::new(old));
        self.moved = 0;
        self.released = 0;
        self.scans = scans;
    }

    /// Whether entries are still to move from old arrays.
    #[cfg(test)]
    pub fn is_moving(&self) -> bool {
        self.old.is_some()
    }

    /// Moves old entries in, in slot order, until `budget` is spent (an entry costs
    /// [`MOVE_COST`], an empty slot 1); returns whether none is left to move (the old arrays
    /// are then freed).
    pub fn migrate_some(&mut self, budget: usize, hash: &impl Fn(&[u8]) -> u32) -> bool {
        let Some(mut old) = self.old.take() else {
            return true;
        };
        let mut spent = 0;
        while self.moved < old.meta.len() && spent < budget {
            if old.meta[self.moved] == EMPTY {
                spent += 1;
            } else {
                self.adopt(&mut old, self.moved, hash);
                spent += MOVE_COST;
            }
            self.moved += 1;
        }
        let done = self.moved == old.meta.len();
        if done || (self.moved - self.released) * size_of::<Slot>() >= RELEASE_BYTES {
            old.release(self.released, self.moved);
            self.released = self.moved;
        }
        if !done {
            self.old = Some(old);
            return false;
        }
        debug_assert_eq!((old.len, old.heap, old.expires, old.wide), (0, 0, 0, 0));
        self.note_moved();
        true
    }

    /// Hands the whole pages of slots `from..to` back to the system: metadata, slots and
    /// extension words. Those slots must hold nothing (they are empty, or their arrays are about
    /// to be freed without reading them): a page handed back reads as zero bytes, or as it was.
    fn release(&mut self, from: usize, to: usize) {
        release_pages(&mut self.meta, from, to);
        release_pages(&mut self.slots, from, to);
        if !self.ext.is_empty() {
            release_pages(&mut self.ext, from, to);
        }
    }

    /// Moves every old entry in now.
    fn finish_migration(&mut self, hash: &impl Fn(&[u8]) -> u32) {
        self.migrate_some(usize::MAX, hash);
    }

    /// Finds `probe`'s key among the entries still to move and moves it in; returns its slot
    /// here. `None` if it is not there (or nothing is moving).
    #[inline]
    pub fn pull(
        &mut self,
        h: u32,
        probe: &Probe<'_>,
        hash: &impl Fn(&[u8]) -> u32,
    ) -> Option<usize> {
        self.old.as_ref()?;
        self.pull_slow(h, probe, hash)
    }

    #[inline(never)]
    fn pull_slow(
        &mut self,
        h: u32,
        probe: &Probe<'_>,
        hash: &impl Fn(&[u8]) -> u32,
    ) -> Option<usize> {
        let mut old = self.old.take()?;
        let found = old.find(h, probe).map(|i| self.adopt(&mut old, i, hash));
        self.old = Some(old);
        found
    }

    /// Moves in every entry still to move whose key hashes to `h`, so that
    /// [`Table::candidates`] covers them.
    pub fn pull_hash(&mut self, h: u32, hash: &impl Fn(&[u8]) -> u32) {
        let Some(mut old) = self.old.take() else {
            return;
        };
        for i in old.candidates(h) {
            if old.is_occupied(i) && hash(old.key(i)) == h {
                self.adopt(&mut old, i, hash);
            }
        }
        self.old = Some(old);
    }

    /// Moves occupied slot `i` of `old` in: the slot's bytes, metadata and extension word, and
    /// its share of the counts; `old` keeps an empty slot. Returns the slot here.
    fn adopt(&mut self, old: &mut Table, i: usize, hash: &impl Fn(&[u8]) -> u32) -> usize {
        let j = self
            .place(hash(old.key(i)), hash)
            .unwrap_or_else(|| self.stash_slot());
        self.note_adopt(i, old.key(i));
        let wide = old.is_wide(i);
        let expires = old.deadline(i) != Nanos::MAX;
        let heap = old.entry_heap(i);
        // A wide entry moves only into arrays with an extension: `fresh` gives one whenever
        // the old arrays held a wide entry, and they gain none while they move out.
        debug_assert!(!wide || !self.ext.is_empty());
        self.slots[j] = old.slots[i];
        self.meta[j] = old.meta[i];
        if wide {
            self.ext[j] = old.ext[i];
        }
        old.meta[i] = EMPTY;
        for (t, sign) in [(&mut *self, 1isize), (old, -1)] {
            t.len = t.len.wrapping_add_signed(sign);
            t.heap = t.heap.wrapping_add_signed(sign * heap as isize);
            if wide {
                t.wide = t.wide.wrapping_add_signed(sign);
            }
            if expires {
                t.expires = t.expires.wrapping_add_signed(sign);
            }
        }
        j
    }

    /// What occupied slot `i` counts in `heap`: its heap key, its box and the box's value.
    fn entry_heap(&self, i: usize) -> usize {
        let key = if self.meta[i] & FORM == HEAP {
            self.heap_key_parts(i).1
        } else {
            0
        };
        let boxed = if self.is_boxed(i) {
            size_of::<Boxed>() + self.boxed(i).value.heap_bytes()
        } else {
            0
        };
        key + boxed
    }

    #[cfg(test)]
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Whether the table has its extension array now.
    #[cfg(test)]
    pub fn has_ext(&self) -> bool {
        !self.ext.is_empty()
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
        assert_eq!(EXT_BYTES, 4);
        assert_eq!((Q_BITS, PERIOD_BITS, 2 * SLIDING_COUNT_BITS), (42, 22, 32));
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
            t.insert(h, &p, value, deadline, 7, &hash, Growth::AtOnce);
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
        t.maybe_shrink(&hash, Growth::AtOnce);
        assert!(t.capacity() <= MIN_SHRINK_SLOTS.max(8));
    }

    /// A BOXED entry (a counter under a heap key) inserted and removed: its slot, now EMPTY,
    /// whose metadata reads as BOXED.
    fn removed_boxed_entry() -> (Table, usize) {
        let mut t = Table::default();
        let k = b"a key longer than sixteen bytes";
        let (p, h) = (Probe::new(k), hash(k));
        let value = Value::Counter(Counter::from_bytes(b"a longish counter value"));
        let i = t.insert(h, &p, value, Nanos(5), 1, &hash, Growth::AtOnce);
        assert!(t.holds_box(i));
        t.remove(i);
        assert!(!t.is_occupied(i) && t.is_boxed(i) && !t.holds_box(i));
        (t, i)
    }

    #[test]
    fn remove_leaves_no_freed_address_behind() {
        let (t, i) = removed_boxed_entry();
        assert_eq!((t.slots[i].word, t.slots[i].key), (0, [0; INLINE_CAP]));
    }

    // The accessors of a removed entry: they used to read the freed box (invalid reads under
    // valgrind, no assertion), issue 43.
    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "is empty")]
    fn deadline_of_a_removed_entry_panics() {
        let (t, i) = removed_boxed_entry();
        t.deadline(i);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "is empty")]
    fn with_value_of_a_removed_entry_panics() {
        let (t, i) = removed_boxed_entry();
        t.with_value(i, |_| ());
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "is empty")]
    fn counter_of_a_removed_entry_panics() {
        let (t, i) = removed_boxed_entry();
        t.counter(i);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "holds no box")]
    fn boxed_of_a_removed_entry_panics() {
        let (t, i) = removed_boxed_entry();
        t.boxed(i);
    }

    #[test]
    fn one_hash_for_every_key_falls_back_to_the_stash() {
        let same = |_: &[u8]| 42u32;
        let mut t = Table::default();
        for n in 0..40u32 {
            let k = n.to_le_bytes();
            t.insert(
                42,
                &Probe::new(&k),
                token(9),
                Nanos(9),
                1,
                &same,
                Growth::AtOnce,
            );
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
        let i = t.insert(h, &p, token(100), Nanos(95), 3, &hash, Growth::AtOnce);
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

    fn sliding(start: u64, prev: u32, curr: u32) -> Value {
        Value::Limiter(State::Sliding(Sliding {
            start: Nanos(start),
            prev,
            curr,
        }))
    }

    fn fixed(start: u64, count: u64) -> Value {
        Value::Limiter(State::Fixed(Fixed {
            start: Nanos(start),
            count,
        }))
    }

    fn state(v: &Value) -> State {
        match v {
            Value::Limiter(s) => s.clone(),
            _ => panic!("not a limiter"),
        }
    }

    /// The packing rule, written out independently of `encode_period`.
    fn packs_wide(v: &Value, deadline: u64) -> bool {
        let (start, counts_fit) = match state(v) {
            State::Sliding(s) => (s.start.0, s.prev < 1 << 16 && s.curr < 1 << 16),
            State::Fixed(f) => (f.start.0, f.count <= u64::from(u32::MAX)),
            _ => return false,
        };
        let Some(span) = deadline.checked_sub(start) else {
            return false;
        };
        let fits = |p: u64| {
            let mut m = p;
            while m != 0 && m.is_multiple_of(10) {
                m /= 10;
            }
            p > 0 && start % p == 0 && start / p < 1 << 42 && m < 1 << 17
        };
        let finite = deadline != u64::MAX;
        counts_fit && finite && (fits(span) || (span.is_multiple_of(2) && fits(span / 2)))
    }

    /// Inserts `k`, checking [`Table::insert_cost`] against what [`Table::bytes`] grew by:
    /// exact, unless a failed walk grew the table when no growth was due (the cost cannot
    /// foresee that; it still counts everything else).
    fn insert_costed(t: &mut Table, k: &[u8], v: Value, deadline: Nanos, filed: SlotId) -> bool {
        let p = Probe::new(k);
        let cost = t.insert_cost(&p, &v, deadline, Growth::AtOnce);
        let before = t.bytes();
        let foreseen = if t.needs_growth() {
            t.grown_buckets() * BUCKET
        } else {
            t.capacity()
        };
        t.insert(hash(k), &p, v, deadline, filed, &hash, Growth::AtOnce);
        let grew = t.bytes() - before;
        if t.capacity() == foreseen {
            assert_eq!(grew, cost, "{}", String::from_utf8_lossy(k));
            true
        } else {
            assert!(grew > cost, "{}", String::from_utf8_lossy(k));
            false
        }
    }

    #[test]
    fn period_codes_round_trip_exactly_or_refuse() {
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        let mut periods = vec![
            0,
            1,
            9,
            10,
            (1 << 17) - 1,
            1 << 17,
            ((1 << 17) - 1) * 10_000_000_000_000,
            (1 << 17) * 10,
            10_000_000_000_000_000_000,
            u64::MAX,
            123_456_789,
            60_000_000_000,
            86_400_000_000_000,
            100_000_000_000_000_000,
        ];
        for _ in 0..100_000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let m = rng % (1 << 19);
            let e = (rng >> 40) as usize % 20;
            periods.push(m.saturating_mul(POW10[e]));
            periods.push(rng);
        }
        for p in periods {
            let mut m = p;
            while m != 0 && m.is_multiple_of(10) {
                m /= 10;
            }
            match encode_period(p) {
                Some(code) => {
                    assert!(code < 1 << PERIOD_BITS, "{p}");
                    assert_eq!(decode_period(code), p);
                }
                None => assert!(m >= 1 << MANTISSA_BITS, "{p} refused"),
            }
            assert_eq!(encode_period(p).is_some(), m < 1 << MANTISSA_BITS, "{p}");
        }
    }

    #[test]
    fn window_states_round_trip_at_the_boundaries() {
        let t0 = 1_700_000_000_123_456_789u64;
        let day = 86_400_000_000_000u64;
        let periods = [
            1,
            1_000_000,
            1_000_000_000,
            day,
            7 * day,
            100_000_000_000_000_000,
            123_456_789,
            ((1 << 17) - 1) * 1_000_000_000,
            (1 << 17) * 1_000_000_000,
            ((1 << 18) - 1) * 1_000_000_000,
        ];
        let max = (1u32 << 16) - 1;
        let mut cases = Vec::new();
        for p in periods {
            let start = t0 - t0 % p;
            for (prev, curr) in [
                (0, 0),
                (0, 1),
                (1, 0),
                (max, max),
                (max + 1, 0),
                (0, max + 1),
            ] {
                for span in [p, 2 * p] {
                    cases.push((sliding(start, prev, curr), start + span));
                }
            }
            for count in [0, 1, u64::from(u32::MAX), 1 << 32, u64::MAX] {
                cases.push((fixed(start, count), start + p));
            }
        }
        let odd = [
            (t0, t0 - 1),
            (t0, t0),
            (0, t0),
            (0, 9 * POW10[18]),
            (1000, 3000),
            (1000, 4000),
            (3000, 4000),
        ];
        for (start, deadline) in odd {
            cases.push((sliding(start, 3, 4), deadline));
            cases.push((fixed(start, 5), deadline));
        }
        cases.push((sliding(t0, 1, 1), u64::MAX));
        cases.push((fixed(0, 1), u64::MAX));

        let mut t = Table::default();
        let mut want = Vec::new();
        for (n, (value, deadline)) in cases.into_iter().enumerate() {
            let k = format!("window:{n:09}");
            assert_eq!(k.len(), 16);
            let p = Probe::new(k.as_bytes());
            let filed = [3, OVERFLOW, NOT_FILED][n % 3];
            let expect_wide = packs_wide(&value, deadline);
            let s = state(&value);
            let i = t.insert(
                hash(k.as_bytes()),
                &p,
                value,
                Nanos(deadline),
                filed,
                &hash,
                Growth::AtOnce,
            );
            assert_eq!(t.is_wide(i), expect_wide, "{k}: {s:?} until {deadline}");
            assert_eq!(t.is_boxed(i), !expect_wide);
            want.push((k, s, deadline, filed, expect_wide));
        }
        let wide = want.iter().filter(|w| w.4).count();
        assert!(
            wide > 40 && wide < want.len() - 40,
            "{wide} of {}",
            want.len()
        );
        assert_eq!(t.wide, wide);
        let boxes = (want.len() - wide) * size_of::<Boxed>();
        assert_eq!(
            t.bytes(),
            t.capacity() * SLOT_BYTES + t.slots.len() * EXT_BYTES + boxes
        );
        for (k, s, deadline, filed, _) in &want {
            let i = t
                .find(hash(k.as_bytes()), &Probe::new(k.as_bytes()))
                .unwrap();
            assert_eq!(t.deadline(i), Nanos(*deadline), "{k}");
            assert_eq!(t.filed(i), *filed, "{k}");
            assert_eq!(t.with_value(i, state), *s, "{k}");
            // Taken out and put back unchanged (a check that changed nothing).
            let taken = t.take_limiter(i).unwrap();
            assert_eq!(taken, *s, "{k}");
            t.put(i, Value::Limiter(taken), Nanos(*deadline), *filed);
            assert_eq!(t.with_value(i, state), *s, "{k}");
            assert!(t.counter(i).is_none());
        }
        let expiring = want.iter().filter(|w| w.2 != u64::MAX).count();
        assert_eq!((t.expires(), t.wide), (expiring, wide));
        for (k, ..) in &want {
            let i = t
                .find(hash(k.as_bytes()), &Probe::new(k.as_bytes()))
                .unwrap();
            t.remove(i);
        }
        assert_eq!((t.len(), t.wide, t.heap, t.expires()), (0, 0, 0, 0));
    }

    #[test]
    fn a_slot_changes_shape_with_its_value() {
        let mut t = Table::default();
        let k = b"0123456789abcdef";
        let i = t.insert(
            hash(k),
            &Probe::new(k),
            token(100),
            Nanos(95),
            3,
            &hash,
            Growth::AtOnce,
        );
        assert!(!t.has_ext());
        let slots = t.capacity() * SLOT_BYTES;
        let ext = t.slots.len() * EXT_BYTES;
        // TOKEN -> SLIDING (a replica's write may change the algorithm): no insert, so no
        // array, so a box.
        t.put(i, sliding(1000, 1, 2), Nanos(3000), 3);
        assert!(t.is_boxed(i) && !t.has_ext());
        assert_eq!((t.wide, t.bytes()), (0, slots + 32));
        // Another key's insert brings the array; from then on the first one packs too.
        let k2 = b"another key";
        let j = t.insert(
            hash(k2),
            &Probe::new(k2),
            fixed(0, 1),
            Nanos(10),
            3,
            &hash,
            Growth::AtOnce,
        );
        assert!(t.is_wide(j) && t.has_ext());
        assert_eq!((t.wide, t.bytes()), (1, slots + ext + 32));
        t.put(i, sliding(1000, 1, 2), Nanos(3000), 3);
        assert!(t.is_wide(i));
        assert_eq!((t.wide, t.bytes()), (2, slots + ext));
        // A new period whose span does not pack: boxed, then packed again.
        t.put(i, sliding(1000, 1, 2), Nanos(1000 + 1_234_567), 4);
        assert!(t.is_boxed(i));
        assert_eq!((t.wide, t.bytes()), (1, slots + ext + 32));
        assert_eq!(t.filed(i), 4);
        t.put(i, sliding(2000, 2, 0), Nanos(3000), OVERFLOW);
        assert!(t.is_wide(i));
        assert_eq!((t.wide, t.bytes()), (2, slots + ext));
        assert_eq!(t.filed(i), OVERFLOW);
        // Wide entries stay packed in the overflow list and keep any `filed`.
        t.set_filed(i, 5);
        t.set_filed(i, OVERFLOW);
        assert!(t.is_wide(i));
        assert_eq!(t.filed(i), OVERFLOW);
        // SLIDING -> FIXED -> TOKEN.
        t.put(i, fixed(2000, 7), Nanos(4000), 6);
        assert_eq!(t.take_limiter(i), Some(state(&fixed(2000, 7))));
        assert_eq!(t.deadline(i), Nanos(4000));
        t.put(i, token(5000), Nanos(5000), 6);
        assert!(!t.is_wide(i) && !t.is_boxed(i));
        assert_eq!((t.wide, t.bytes()), (1, slots + ext));
        // An EXPIRE far from the window boxes it; a check back in shape packs it.
        t.put(i, fixed(2000, 7), Nanos(4000), 6);
        let v = t.take_value(i);
        t.put(i, v, Nanos(2000 + 1_234_567), 6);
        assert!(t.is_boxed(i));
        assert_eq!(t.take_value(i).heap_bytes(), 0);
        t.put(i, fixed(2000, 8), Nanos(4000), 6);
        assert!(t.is_wide(i));
        assert_eq!((t.wide, t.bytes()), (2, slots + ext));
        // The array stays until a rebuild finds no wide entry.
        t.put(i, token(5000), Nanos(5000), 6);
        t.remove(j);
        assert!(t.has_ext());
        t.rebuild(t.capacity() / BUCKET, &hash);
        assert!(!t.has_ext());
        assert_eq!(t.bytes(), slots);
        assert_eq!(t.with_value(i, state), state(&token(5000)));
        // Without the array, a window state that would pack stays boxed.
        t.put(i, fixed(2000, 8), Nanos(4000), 6);
        assert!(t.is_boxed(i) && !t.has_ext());
    }

    #[test]
    fn token_only_tables_allocate_no_extension() {
        let mut t = Table::default();
        for n in 0..5000u32 {
            let k = format!("user:{n}");
            let v = match n % 5 {
                0 => Value::Counter(Counter::Int(1)),
                // Window states that do not pack: a box, not the array.
                1 => sliding(0, 1 << 16, 1),
                2 => fixed(100, 1),
                _ => token(1000),
            };
            let deadline = if n % 5 == 2 {
                Nanos(123_456_789)
            } else {
                Nanos(1000)
            };
            insert_costed(&mut t, k.as_bytes(), v, deadline, 1);
        }
        assert!(!t.has_ext());
        assert_eq!(t.wide, 0);
        assert_eq!(t.bytes(), t.capacity() * SLOT_BYTES + 3000 * 32);
        // The first wide entry brings the array, and its cost says so.
        assert!(insert_costed(
            &mut t,
            b"sliding",
            sliding(0, 1, 1),
            Nanos(2000),
            1
        ));
        assert!(t.has_ext());
        let arrays = t.capacity() * SLOT_BYTES + t.slots.len() * EXT_BYTES;
        assert_eq!(t.bytes(), arrays + 3000 * 32);
    }

    #[test]
    fn wide_entries_move_with_cuckoo_walks_growth_and_shrink() {
        let mut t = Table::default();
        let key = |n: u64| format!("wide:{n:011}");
        let value = |n: u64| match n % 4 {
            0 => sliding(n * 1000, (n % 7) as u32, (n % 5) as u32),
            1 => fixed(n * 1000, n),
            2 => token(n * 1000 + 100),
            _ => sliding(n * 1000, 1, 1),
        };
        // The last kind's span does not pack: boxed.
        let deadline = |n: u64| Nanos(n * 1000 + if n % 4 == 3 { 1_234_567 } else { 100 });
        let n_keys = 20_000u64;
        let exact = (0..n_keys)
            .filter(|&n| insert_costed(&mut t, key(n).as_bytes(), value(n), deadline(n), 9))
            .count();
        assert!(exact as u64 > n_keys * 99 / 100, "{exact}");
        let check = |t: &Table, n: u64| {
            let k = key(n);
            let i = t
                .find(hash(k.as_bytes()), &Probe::new(k.as_bytes()))
                .unwrap();
            assert_eq!(t.deadline(i), deadline(n), "{k}");
            assert_eq!(t.with_value(i, state), state(&value(n)), "{k}");
            assert_eq!(t.is_wide(i), n % 4 < 2, "{k}");
            assert_eq!(t.filed(i), 9);
        };
        // 20,000 inserts grew the table many times and walked keys between buckets.
        for n in 0..n_keys {
            check(&t, n);
        }
        assert_eq!(t.wide, n_keys as usize / 2);
        // Remove nine in ten: the table shrinks, carrying the survivors' extension words.
        for n in (0..n_keys).filter(|n| n % 10 != 0) {
            let k = key(n);
            let i = t
                .find(hash(k.as_bytes()), &Probe::new(k.as_bytes()))
                .unwrap();
            t.remove(i);
        }
        let big = t.capacity();
        t.maybe_shrink(&hash, Growth::AtOnce);
        assert!(t.capacity() < big / 2, "{} vs {big}", t.capacity());
        assert!(t.has_ext());
        for n in (0..n_keys).step_by(10) {
            check(&t, n);
        }
        // Without wide entries, the next rebuild drops the array.
        for n in (0..n_keys).step_by(10).filter(|n| n % 4 < 2) {
            let k = key(n);
            let i = t
                .find(hash(k.as_bytes()), &Probe::new(k.as_bytes()))
                .unwrap();
            t.remove(i);
        }
        assert_eq!(t.wide, 0);
        assert!(t.has_ext());
        t.rebuild(t.grown_buckets(), &hash);
        assert!(!t.has_ext());
        for n in (0..n_keys).step_by(10).filter(|n| n % 4 >= 2) {
            check(&t, n);
        }
    }

    #[test]
    fn wide_entries_in_the_stash() {
        let same = |_: &[u8]| 42u32;
        let mut t = Table::default();
        for n in 0..40u64 {
            let k = n.to_le_bytes();
            t.insert(
                42,
                &Probe::new(&k),
                fixed(n * 1000, n + 1),
                Nanos(n * 1000 + 1000),
                1,
                &same,
                Growth::AtOnce,
            );
        }
        assert!(t.meta.len() > t.capacity(), "the stash is used");
        assert_eq!(t.ext.len(), t.slots.len());
        for n in 0..40u64 {
            let k = n.to_le_bytes();
            let i = t.find(42, &Probe::new(&k)).unwrap();
            assert!(t.is_wide(i));
            assert_eq!(t.with_value(i, state), state(&fixed(n * 1000, n + 1)));
            assert_eq!(t.deadline(i), Nanos(n * 1000 + 1000));
        }
        for n in 0..40u64 {
            let k = n.to_le_bytes();
            let i = t.find(42, &Probe::new(&k)).unwrap();
            t.remove(i);
            assert_eq!(t.ext.len(), t.slots.len());
        }
        assert_eq!((t.len(), t.wide), (0, 0));
        assert_eq!(t.meta.len(), t.capacity(), "the stash is trimmed");
    }
}
