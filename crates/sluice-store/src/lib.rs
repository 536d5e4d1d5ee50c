//! # sluice-store — the buckets of one node
//!
//! A [`Store`] maps binary keys to rate-limiter state ([`sluice_core::State`], which also holds a
//! key's in-flight leases) or to plain-string counters (the Redis `GET`/`SET`/`INCR` subset),
//! shared by every server thread. Leases and LOG rings live in the entry's box, like any state
//! that does not fit a slot, and are counted, replicated and snapshotted as buckets are.
//!
//! # Layout
//! - `key`: how a key sits in a slot: up to 16 bytes inline, longer ones on the heap.
//! - `entry`: `Value` (limiter state or counter) and `Counter`, the values that need a box.
//! - `table`: a shard's keys: a bucketized cuckoo table of 24-byte slots (+2 metadata bytes)
//!   that hold a TOKEN/GCRA/LEAKY bucket entirely (key, `tat`, deadline and wheel slot), and a
//!   SLIDING/FIXED one with a 4-byte extension word beside the slot.
//! - `wheel`: the per-shard hierarchical timing wheel of 32-bit key hashes.
//! - `shard`: one lock's worth: a table, its wheel, its accounting and memory budget.
//! - this file: `Store`, which hashes a key once and routes it to a shard.
//!
//! # Memory
//! A TOKEN bucket with a 16-byte key costs 26 bytes of slot at 77–93 % table load plus a 4-byte
//! wheel item: 30–39 bytes; a SLIDING or FIXED one 30 bytes of slot and extension word: 36–44
//! bytes (the figures and their tests are in `tests/memory.rs`). With
//! [`StoreConfig::maxmemory`], each shard gets `maxmemory / shards` bytes and a new key that
//! does not fit either evicts the entries with the soonest deadlines
//! ([`EvictionPolicy::EvictSoonest`]) or is refused ([`EvictionPolicy::Reject`]); see
//! [`Store::set_maxmemory`] for the bound.
//!
//! # Invariants
//! - A key is hashed once with a fixed-seed foldhash. Bits 40.. of that hash pick the shard; the
//!   table (both bucket choices) and the wheel use the low 32 bits, so neither is skewed by
//!   the shard choice.
//! - A limiter key is dropped exactly when its bucket is fresh again (`now + reset_after`):
//!   from then on a missing key answers the same, so memory follows only the limited clients.
//!   A key past its deadline is treated as missing by every operation, even before the wheel
//!   drops it; `len` and `expires_count` reap first, so they are exact.
//! - A check holds one shard lock for a hash probe and an algorithm step: it allocates only when
//!   it inserts a new key (the table and its extension array, a heap key, a box, the key's
//!   wheel item), or when a packed bucket stops fitting its slot (its deadline more than 15 ns
//!   before its `tat`, or a window count reaching 2^16).
//! - Memory accounting is structural and exact: table arrays, boxes, heap keys and values,
//!   wheel buffers and the shards themselves ([`Store::used_memory`]).

mod entry;
mod held;
mod journal;
mod key;
mod shard;
mod table;
pub mod types;
mod watch;
mod wheel;

use std::fmt;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use bytes::Bytes;
use crossbeam_utils::CachePadded;
use parking_lot::{Mutex, MutexGuard};
use sluice_core::token_lease::check_keeping_held;
use sluice_core::{Algo, CheckError, Decision, Nanos, Params, State};
use sluice_repl::{Record, SnapshotWriter};

pub use crate::entry::{Counter, Value};

pub use crate::shard::LAZYFREE_EFFORT;
use crate::shard::{KeyHash, Limits, Shard};

pub use crate::held::ShardBusy;

/// Store settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreConfig {
    /// Number of shards; rounded up to a power of two, between 1 and [`MAX_SHARDS`]. Several per
    /// thread keep lock contention low.
    pub shards: usize,
    /// Memory limit in bytes for [`Store::used_memory`]; 0 = unlimited. See
    /// [`Store::set_maxmemory`].
    pub maxmemory: usize,
    /// What a new key gets when the limit is reached.
    pub policy: EvictionPolicy,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            shards: 64,
            maxmemory: 0,
            policy: EvictionPolicy::EvictSoonest,
        }
    }
}

/// What a new key gets when memory is at `maxmemory` (`--maxmemory-policy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EvictionPolicy {
    /// `evict-soonest`: drop the buckets with the soonest deadlines (closest to fresh: the
    /// least accuracy lost) until the new key fits. Keys without a deadline are never evicted;
    /// when only they are left, the new key is refused as with `Reject`.
    #[default]
    EvictSoonest,
    /// `reject`: a new key answers [`StoreError::OutOfMemory`]; existing keys keep working.
    Reject,
}

impl EvictionPolicy {
    fn to_u8(self) -> u8 {
        match self {
            EvictionPolicy::EvictSoonest => 0,
            EvictionPolicy::Reject => 1,
        }
    }

    fn from_u8(v: u8) -> EvictionPolicy {
        if v == 1 {
            EvictionPolicy::Reject
        } else {
            EvictionPolicy::EvictSoonest
        }
    }
}

/// Wheel items one [`Store::expire_some`] step looks at, for the server's housekeeping: each
/// is a table probe and a drop or a refile, up to a microsecond with cold caches on a VM (the
/// slowest 2048-item step took 2.2 ms of CPU at a million keys), so a step stays under half a
/// millisecond (`cargo run --release -p sluice-store --example stall`).
pub const EXPIRE_BUDGET: usize = 512;

/// Slots one step of a [`Store::scan`] visits under a shard's lock: a few thousand entries
/// encoded into a snapshot, well under a millisecond.
pub const SCAN_BUDGET: usize = 2048;

/// Bytes a step of a snapshot reserves per slot it visits: a packed bucket's record with a
/// 16-byte key is about 40; longer keys and boxed states may still grow the buffer under a lock.
const SNAPSHOT_RECORD_BYTES: usize = 64;

/// What [`Store::scan_steps`] hands its callback: a live entry (under the shard's lock), or
/// the end of a step (no lock held).
enum Visit<'a> {
    Entry(&'a [u8], Nanos, &'a Value),
    Unlocked,
}

/// Most shards a store has: the shard index uses hash bits 40..56.
pub const MAX_SHARDS: usize = 1 << 16;
const SHARD_SHIFT: u32 = 40;

/// Why a store operation was refused. It changed nothing. The server maps each to its reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreError {
    /// The key holds the other kind of value (a counter for a limiter command, or back).
    WrongType,
    /// The algorithm refused the check.
    Check(CheckError),
    /// `INCR` on a value that is not an integer.
    NotInteger,
    /// `INCR` would leave the `i64` range.
    Overflow,
    /// A new key does not fit under `maxmemory` (policy `reject`, or nothing left to evict).
    OutOfMemory,
}

/// One check of [`Store::check_all`].
#[derive(Clone, Copy, Debug)]
pub struct Check<'a> {
    pub key: &'a [u8],
    pub algo: Algo,
    pub params: Params,
    /// A denial of this check denies the whole call (false: a shadow check, judged and
    /// consumed like the others but never the reason for a denial).
    pub enforced: bool,
    /// Tokens of this key out on lease (`RL.LEASE`): a TOKEN or GCRA bucket is lowered to its
    /// capacity less these before it is checked ([`sluice_core::token_lease::cap_at_held`]).
    /// Zero for the windows and where no lease is held.
    pub held: u64,
}

/// `SET`'s `NX`/`XX` condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetCond {
    Always,
    /// Only if the key does not exist.
    Nx,
    /// Only if the key exists.
    Xx,
}

/// `SET`'s expiry: none (`SET` clears a TTL), `KEEPTTL`, or an absolute instant (`EX`/`PX`/...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetTtl {
    Clear,
    Keep,
    At(Nanos),
}

/// What a string command leaves at its key, decided by [`Store::string`]'s closure from the
/// value it found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StrWrite<'a> {
    /// Nothing changes (and nothing is journaled).
    Keep,
    /// The key becomes this string. A deadline already past deletes the key.
    Put(std::borrow::Cow<'a, [u8]>, SetTtl),
    /// Only the deadline changes (a missing key stays missing). [`SetTtl::Clear`] persists.
    Expire(SetTtl),
    /// The key goes.
    Delete,
}

/// A collection type a key may hold, as [`Store::read`] and [`Store::edit`] take it.
pub trait Collection: Default + Sized {
    const KIND: Kind;
    fn of(value: &Value) -> Option<&Self>;
    fn of_mut(value: &mut Value) -> Option<&mut Self>;
    fn into_value(self) -> Value;
    fn is_empty(&self) -> bool;
    /// How many entries (LLEN, HLEN, SCARD, ZCARD).
    fn len(&self) -> usize;
}

macro_rules! collection {
    ($t:ty, $variant:ident) => {
        impl Collection for $t {
            const KIND: Kind = Kind::$variant;
            fn of(value: &Value) -> Option<&Self> {
                match value {
                    Value::$variant(t) => Some(t),
                    _ => None,
                }
            }
            fn of_mut(value: &mut Value) -> Option<&mut Self> {
                match value {
                    Value::$variant(t) => Some(t),
                    _ => None,
                }
            }
            fn into_value(self) -> Value {
                Value::$variant(self)
            }
            fn is_empty(&self) -> bool {
                <$t>::is_empty(self)
            }
            fn len(&self) -> usize {
                <$t>::len(self)
            }
        }
    };
}
collection!(types::List, List);
collection!(types::Hash, Hash);
collection!(types::Set, Set);
collection!(types::ZSet, ZSet);

/// What a key holds, as `TYPE` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A plain string (`GET`/`SET`/`INCR`).
    String,
    /// A rate limiter's state (`RL.CHECK` and the other limiter commands).
    Limiter,
    List,
    Hash,
    Set,
    ZSet,
}

impl Kind {
    /// The name `TYPE` answers (`ratelimit` for a limiter, which Redis has no name for).
    pub fn name(self) -> &'static str {
        match self {
            Kind::String => "string",
            Kind::Limiter => "ratelimit",
            Kind::List => "list",
            Kind::Hash => "hash",
            Kind::Set => "set",
            Kind::ZSet => "zset",
        }
    }

    /// The byte a DATA record carries for this kind (`None` for a limiter or a string).
    pub fn code(self) -> Option<u8> {
        match self {
            Kind::List => Some(1),
            Kind::Hash => Some(2),
            Kind::Set => Some(3),
            Kind::ZSet => Some(4),
            Kind::String | Kind::Limiter => None,
        }
    }

    pub fn from_code(code: u8) -> Option<Kind> {
        Some(match code {
            1 => Kind::List,
            2 => Kind::Hash,
            3 => Kind::Set,
            4 => Kind::ZSet,
            _ => return None,
        })
    }
}

/// What `TTL`/`PTTL` reports (Redis: -2, -1, or the time left).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ttl {
    Missing,
    Persistent,
    Remaining(Nanos),
}

impl Ttl {
    /// A live key's, from its deadline (`Nanos::MAX`: none).
    pub fn of(deadline: Nanos, now: Nanos) -> Ttl {
        match deadline {
            Nanos::MAX => Ttl::Persistent,
            d => Ttl::Remaining(d.saturating_sub(now)),
        }
    }
}

/// The key hasher: foldhash (its fast variant) with a fixed seed, so a key's shard is the same
/// in every run (useful for reproducing a hot shard), and seeds are not secret: shards are
/// chosen by the server. A key of up to 16 bytes costs one folded multiply (about 20
/// instructions, a quarter of ahash's portable path).
#[derive(Clone, Debug)]
struct StoreHasher(foldhash::fast::FixedState);

impl Default for StoreHasher {
    fn default() -> Self {
        StoreHasher(foldhash::fast::FixedState::with_seed(0x243f_6a88_85a3_08d3))
    }
}

impl KeyHash for StoreHasher {
    #[inline]
    fn hash_key(&self, key: &[u8]) -> u64 {
        use std::hash::{BuildHasher, Hasher};
        // The bytes alone, without the length prefix `Hash for [u8]` writes: foldhash mixes
        // the length in itself.
        let mut h = self.0.build_hasher();
        h.write(key);
        h.finish()
    }
}

/// A key's hash, taken by [`Store::prefetch`] ahead of the request that carries the key, and
/// the bytes it was taken of (their address and length: the request's key is those same bytes,
/// parsed from the same buffer, which nothing writes in between).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ahead {
    addr: usize,
    len: usize,
    hash: u64,
}

impl Ahead {
    /// No hash taken ahead.
    pub const NONE: Ahead = Ahead {
        addr: 0,
        len: 0,
        hash: 0,
    };

    /// The hash, if it was taken of `key`'s bytes ([`Ahead::NONE`]'s address 0 matches no
    /// key: a slice's pointer is never null).
    #[inline]
    fn hash_of(&self, key: &[u8]) -> Option<u64> {
        (self.addr == key.as_ptr().addr() && self.len == key.len()).then_some(self.hash)
    }
}

/// Buckets over all tables from which [`Store::prefetching`] says yes: 16k buckets are 64k
/// slots, about 1.7 MB of slots and metadata, the size of the cache a core has to itself
/// (1–4 MB). Below it lookups mostly hit that cache and a prefetch would only cost its
/// instructions; above it, a check's table lines mostly come from the shared cache or memory.
const PREFETCH_BUCKETS: usize = 1 << 14;

/// One shard behind its lock, padded to a cache line.
type ShardCell = CachePadded<Cell>;

/// A shard and, readable without its lock, where its table's arrays were when last looked
/// (for [`Store::prefetch`]).
#[derive(Debug)]
struct Cell {
    shard: Mutex<Shard<StoreHasher>>,
    meta: AtomicUsize,
    slots: AtomicUsize,
    buckets: AtomicUsize,
}

impl Cell {
    fn new(shard: Shard<StoreHasher>) -> Cell {
        let l = shard.layout();
        Cell {
            shard: Mutex::new(shard),
            meta: AtomicUsize::new(l.meta),
            slots: AtomicUsize::new(l.slots),
            buckets: AtomicUsize::new(l.buckets),
        }
    }

    /// Records where the table's arrays are now (the caller holds the lock), and keeps
    /// `total` (the store's buckets over all shards) up to date.
    #[inline]
    fn note_layout(&self, shard: &Shard<StoreHasher>, total: &AtomicUsize) {
        let l = shard.layout();
        if self.slots.load(Ordering::Relaxed) != l.slots
            || self.buckets.load(Ordering::Relaxed) != l.buckets
        {
            self.meta.store(l.meta, Ordering::Relaxed);
            self.slots.store(l.slots, Ordering::Relaxed);
            let was = self.buckets.swap(l.buckets, Ordering::Relaxed);
            if l.buckets >= was {
                total.fetch_add(l.buckets - was, Ordering::Relaxed);
            } else {
                total.fetch_sub(was - l.buckets, Ordering::Relaxed);
            }
        }
    }

    fn layout(&self) -> table::Layout {
        table::Layout {
            meta: self.meta.load(Ordering::Relaxed),
            slots: self.slots.load(Ordering::Relaxed),
            buckets: self.buckets.load(Ordering::Relaxed),
        }
    }

    /// Locks the shard, or, inside a script's hold ([`Store::holding`]), uses it as this
    /// thread already holds it. Every lock of a shard goes through here: outside a hold it
    /// costs one thread-local load more than the mutex.
    #[inline]
    fn lock(&self) -> ShardGuard<'_> {
        if held::active() {
            return self.lock_in_hold();
        }
        ShardGuard::Locked(self.shard.lock())
    }

    /// [`Cell::lock`] inside a hold. A shard the script layer did not hold first (it holds
    /// each call's keys with [`Store::hold`]) is taken here for the rest of the hold: at once
    /// if it comes after every held shard; else after a bounded wait, and past it by a blocking
    /// lock (the one order this cannot keep: only a command that finds its shards by itself,
    /// which the script layer holds all shards for, could come here).
    #[cold]
    fn lock_in_hold(&self) -> ShardGuard<'_> {
        let addr = std::ptr::from_ref(self).addr();
        match held::status(addr) {
            held::Status::Foreign => return ShardGuard::Locked(self.shard.lock()),
            held::Status::Held => {}
            held::Status::Free { after_all } => {
                let token = self.take_raw(after_all).unwrap_or_else(|ShardBusy| {
                    // SAFETY: as in `take_raw`.
                    held::lock_blocking(unsafe { self.shard.raw() })
                });
                held::insert(addr, token);
            }
        }
        // SAFETY: this thread holds the shard's lock for the whole hold (`held`), and a store
        // operation locks a shard at most once at a time, so this is the only live reference.
        ShardGuard::Held(unsafe { &mut *self.shard.data_ptr() })
    }

    /// Locks the raw mutex for a hold: blocking if `after_all` (it comes after every held
    /// shard), else waiting at most [`HOLD_WAIT`].
    fn take_raw(&self, after_all: bool) -> Result<held::Token, ShardBusy> {
        // SAFETY: the raw lock is taken here and released by `Holding`'s drop with its token;
        // no guard of this mutex is made for it.
        let raw = unsafe { self.shard.raw() };
        if after_all {
            Ok(held::lock_blocking(raw))
        } else {
            held::lock_within(raw, HOLD_WAIT)
        }
    }
}

/// How long a script waits for a shard that comes before one it holds (a deadlock-safe order
/// cannot be kept for it) before its call fails with [`ShardBusy`].
const HOLD_WAIT: std::time::Duration = std::time::Duration::from_millis(200);

/// A locked shard: by its own lock, or as part of this thread's hold.
enum ShardGuard<'a> {
    Locked(MutexGuard<'a, Shard<StoreHasher>>),
    Held(&'a mut Shard<StoreHasher>),
}

impl ShardGuard<'_> {
    /// Unlocks fairly (a waiting request goes first); a held shard stays held.
    fn unlock_fair(self) {
        if let ShardGuard::Locked(g) = self {
            MutexGuard::unlock_fair(g);
        }
    }
}

impl std::ops::Deref for ShardGuard<'_> {
    type Target = Shard<StoreHasher>;
    #[inline]
    fn deref(&self) -> &Self::Target {
        match self {
            ShardGuard::Locked(g) => g,
            ShardGuard::Held(s) => s,
        }
    }
}

impl std::ops::DerefMut for ShardGuard<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut Self::Target {
        match self {
            ShardGuard::Locked(g) => g,
            ShardGuard::Held(s) => s,
        }
    }
}

/// A script's hold on shards ([`Store::holding`]): every shard held through it is unlocked
/// when it drops.
#[derive(Debug)]
pub struct Holding<'a> {
    store: &'a Store,
}

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        let base = self.store.shards.as_ptr().addr();
        for (addr, token) in held::end() {
            let cell = &self.store.shards[(addr - base) / size_of::<ShardCell>()];
            // SAFETY: `token` is the state of this thread's lock of this cell (only the held
            // store's range is ever recorded), and no guard of it is alive: the hold is over.
            unsafe { cell.shard.force_unlock(token) };
        }
    }
}

impl std::ops::Deref for Cell {
    type Target = Mutex<Shard<StoreHasher>>;
    fn deref(&self) -> &Self::Target {
        &self.shard
    }
}

/// The sharded key space of one node. `Send + Sync`: share it behind an `Arc`.
pub struct Store {
    shards: Box<[ShardCell]>,
    hasher: StoreHasher,
    maxmemory: AtomicUsize,
    policy: AtomicU8,
    /// Serialises journal drains with FLUSHALL, and holds the records FLUSHALL drained out of
    /// order (every shard's journal, then the flush) until the next drain takes them first.
    spill: Mutex<Vec<u8>>,
    /// Buckets over all shards' tables, as the shards last noted them (see [`Cell`]).
    buckets: AtomicUsize,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("shards", &self.shards.len())
            .finish_non_exhaustive()
    }
}

impl Store {
    pub fn new(cfg: StoreConfig) -> Store {
        let n = cfg.shards.clamp(1, MAX_SHARDS).next_power_of_two();
        let hasher = StoreHasher::default();
        let shards: Box<[ShardCell]> = (0..n)
            .map(|_| CachePadded::new(Cell::new(Shard::new(hasher.clone()))))
            .collect();
        let buckets = shards
            .iter()
            .map(|c| c.buckets.load(Ordering::Relaxed))
            .sum();
        Store {
            shards,
            hasher,
            maxmemory: AtomicUsize::new(cfg.maxmemory),
            policy: AtomicU8::new(cfg.policy.to_u8()),
            spill: Mutex::new(Vec::new()),
            buckets: AtomicUsize::new(buckets),
        }
    }

    /// The memory limit (`CONFIG GET maxmemory`); 0 = unlimited.
    pub fn maxmemory(&self) -> usize {
        self.maxmemory.load(Ordering::Relaxed)
    }

    /// Sets the memory limit at run time (`CONFIG SET maxmemory`); 0 = unlimited.
    ///
    /// Each shard gets `maxmemory / shard_count()` bytes, counted as [`Store::used_memory`]
    /// counts them, its own struct included. Before a new key is inserted, the shard's bytes
    /// after the insert (table growth, box, heap key, wheel buffer growth) are checked against
    /// that budget; the policy decides what happens when they do not fit. A lowered limit
    /// takes effect at each shard's next insert (the table shrinks once a quarter full).
    ///
    /// Slack: `used_memory` can exceed the limit only by what existing keys grow by without an
    /// insert: a counter `SET` to a longer value, a packed bucket that moves to a 32-byte box
    /// (an `EXPIRE` on it, more than 15 ns between its deadline and `tat`, a window count that
    /// reaches 2^16), wheel buffers re-filled as time passes (at most a quarter of a
    /// shard's items, 1 byte per key), and a table shrinking after a wave of expiries, which
    /// holds its new arrays (a third of the old ones at most) until its entries moved in.
    ///
    /// A table grows in steps (its old arrays held until their entries moved in, a few per
    /// insert) when the shard's budget has room for both; a shard near its budget grows all at
    /// once instead, in the insert that needs it.
    pub fn set_maxmemory(&self, bytes: usize) {
        self.maxmemory.store(bytes, Ordering::Relaxed);
    }

    /// The eviction policy (`CONFIG GET maxmemory-policy`).
    pub fn policy(&self) -> EvictionPolicy {
        EvictionPolicy::from_u8(self.policy.load(Ordering::Relaxed))
    }

    /// Sets the eviction policy at run time (`CONFIG SET maxmemory-policy`).
    pub fn set_policy(&self, policy: EvictionPolicy) {
        self.policy.store(policy.to_u8(), Ordering::Relaxed);
    }

    /// One shard's view of the memory limit.
    #[inline]
    fn limits(&self) -> Limits {
        match self.maxmemory.load(Ordering::Relaxed) {
            0 => Limits::NONE,
            max => Limits {
                budget: max / self.shards.len(),
                policy: self.policy(),
            },
        }
    }

    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Starts a script's hold on this thread: from now until the [`Holding`] drops, every
    /// shard this thread locks stays locked, and is used again without locking (see `held`).
    /// `None` if this thread is already in a hold.
    pub fn holding(&self) -> Option<Holding<'_>> {
        let base = self.shards.as_ptr().addr();
        let end = base + self.shards.len() * size_of::<ShardCell>();
        // `then`, not `then_some`: a `Holding` made and dropped would end the active hold.
        held::begin((base, end)).then(|| Holding { store: self })
    }

    /// Inside a hold, locks the shards of `keys` for the rest of it, in ascending order: at
    /// once those after every shard held, after a bounded wait the others (a lock that could
    /// deadlock is never waited for without end). Outside a hold it does nothing.
    pub fn hold<'k>(&self, keys: impl IntoIterator<Item = &'k [u8]>) -> Result<(), ShardBusy> {
        if !held::active() {
            return Ok(());
        }
        let mut order: Vec<usize> = keys.into_iter().map(|k| self.shard_of(k)).collect();
        order.sort_unstable();
        order.dedup();
        self.hold_shards(order)
    }

    /// [`Store::hold`] of every shard: for a command that finds its keys by itself (DBSIZE,
    /// INFO, RL.HITS) inside a script.
    pub fn hold_all(&self) -> Result<(), ShardBusy> {
        if !held::active() {
            return Ok(());
        }
        self.hold_shards(0..self.shards.len())
    }

    fn hold_shards(&self, ascending: impl IntoIterator<Item = usize>) -> Result<(), ShardBusy> {
        for i in ascending {
            let cell: &Cell = &self.shards[i];
            let addr = std::ptr::from_ref(cell).addr();
            if let held::Status::Free { after_all } = held::status(addr) {
                held::insert(addr, cell.take_raw(after_all)?);
            }
        }
        Ok(())
    }

    /// The key's hash and its shard.
    #[inline]
    fn route(&self, key: &[u8]) -> (u64, &Cell) {
        let h = self.hasher.hash_key(key);
        (h, &self.shards[self.shard_index(h)])
    }

    /// The shard of a key whose hash is `h`.
    #[inline]
    fn shard_index(&self, h: u64) -> usize {
        (h >> SHARD_SHIFT) as usize & (self.shards.len() - 1)
    }

    /// The shard index `key` lives in (for callers that group work per shard).
    pub fn shard_of(&self, key: &[u8]) -> usize {
        self.shard_index(self.hasher.hash_key(key))
    }

    /// `RL.CHECK`: one check of `key` by `algo`. `WrongType` if the key holds a counter; a
    /// refusal by the algorithm is `Check(e)` and changes nothing. With `dry` or `COST 0` the
    /// key is only read. `OutOfMemory` if a new key would have to be stored and does not fit.
    pub fn check(
        &self,
        key: &[u8],
        algo: Algo,
        params: &Params,
        now: Nanos,
        dry: bool,
    ) -> Result<Decision, StoreError> {
        self.check_ahead(key, Ahead::NONE, algo, params, 0, now, dry)
    }

    /// [`Store::check`] of a key whose hash [`Store::prefetch`] may have computed already
    /// (`ahead` serves if it was taken of these very bytes: same address, same length), and
    /// whose `held` tokens are out on lease (`RL.LEASE`): a TOKEN or GCRA bucket is lowered to
    /// its capacity less these first ([`check_keeping_held`]; 0 where none is held).
    #[allow(clippy::too_many_arguments)]
    pub fn check_ahead(
        &self,
        key: &[u8],
        ahead: Ahead,
        algo: Algo,
        params: &Params,
        held: u64,
        now: Nanos,
        dry: bool,
    ) -> Result<Decision, StoreError> {
        let writes = !dry && params.cost > 0;
        let h = ahead
            .hash_of(key)
            .unwrap_or_else(|| self.hasher.hash_key(key));
        self.limiter_hashed(h, key, now, |slot| {
            // The plain check inline: it is the hot path, and most keys have no lease.
            let d = match held {
                0 => sluice_core::check(slot, algo, params, now, dry)?,
                _ => check_keeping_held(slot, algo, params, held, now, dry)?,
            };
            Ok((d, writes.then_some(d.reset_after)))
        })
    }

    /// `RL.HITS`: checks every [`Check`] at one instant, all or nothing. Every check's shard is
    /// locked for the whole call, in ascending shard order (the order FLUSHALL takes them in,
    /// so the two never deadlock). First every check runs dry; if any `enforced` one is
    /// denied, nothing is consumed and the dry decisions are returned with `false`. Otherwise
    /// every check consumes and its decision is returned with `true`. The changes are
    /// journaled under the same locks, like any check's.
    ///
    /// Keys must be distinct (the caller refuses repeats: a repeated key would be judged
    /// twice against one state). An error (`WrongType`, a refusal by the algorithm) changes
    /// nothing; `OutOfMemory` while consuming puts back the keys already consumed.
    pub fn check_all(
        &self,
        checks: &[Check<'_>],
        now: Nanos,
        out: &mut Vec<Decision>,
    ) -> Result<bool, StoreError> {
        out.clear();
        let limits = self.limits();
        let hashes: Vec<u64> = checks.iter().map(|c| self.hasher.hash_key(c.key)).collect();
        let mut order: Vec<usize> = hashes.iter().map(|&h| self.shard_index(h)).collect();
        order.sort_unstable();
        order.dedup();
        let mut guards: Vec<_> = order.iter().map(|&i| self.shards[i].lock()).collect();
        // Each check's lock, as an index into `guards`.
        let at: Vec<usize> = hashes
            .iter()
            .map(|&h| {
                order
                    .binary_search(&self.shard_index(h))
                    .unwrap_or_default()
            })
            .collect();
        let mut priors = Vec::with_capacity(checks.len());
        let mut pass = true;
        for (i, (c, &h)) in checks.iter().zip(&hashes).enumerate() {
            let shard = &mut *guards[at[i]];
            let mut prior = None;
            let d = shard.limiter(h, c.key, now, limits, |slot| {
                prior = slot.clone();
                // Dry: the bucket is lowered on a copy, so a denied call changes nothing; the
                // second pass lowers it for good.
                let (algo, params) = (c.algo, &c.params);
                let d = check_keeping_held(slot, algo, params, c.held, now, true)?;
                Ok((d, None))
            })?;
            let deadline = match shard.ttl(h, c.key, now) {
                Ttl::Remaining(left) => now.saturating_add(left),
                Ttl::Persistent => Nanos::MAX,
                Ttl::Missing => now,
            };
            priors.push((prior, deadline));
            pass &= d.allowed || !c.enforced;
            out.push(d);
        }
        if !pass {
            return Ok(false);
        }
        for (i, (c, &h)) in checks.iter().zip(&hashes).enumerate() {
            let writes = c.params.cost > 0;
            let result = guards[at[i]].limiter(h, c.key, now, limits, |slot| {
                let d = check_keeping_held(slot, c.algo, &c.params, c.held, now, false)?;
                Ok((d, writes.then_some(d.reset_after)))
            });
            match result {
                Ok(d) => out[i] = d,
                Err(e) => {
                    // Put back what the earlier checks consumed.
                    for j in 0..i {
                        let (key, h) = (checks[j].key, hashes[j]);
                        let shard = &mut *guards[at[j]];
                        match priors[j].0.clone() {
                            Some(state) => {
                                shard.put_value(h, key, Value::Limiter(state), priors[j].1, now)
                            }
                            None => {
                                shard.del(h, key, now);
                            }
                        }
                    }
                    out.clear();
                    return Err(e);
                }
            }
        }
        Ok(true)
    }

    /// General limiter access for the compat commands (`CL.THROTTLE`, `GCRA`): runs `f` on the
    /// key's slot (`None` if missing or expired) under the shard lock. `f` returns
    /// `Ok((value, Some(reset_after)))` when it changed the slot: the state is kept until
    /// `now + reset_after` (a `None` slot or a zero `reset_after` drops the key);
    /// `Ok((value, None))` when it only read. `WrongType` if the key holds a counter.
    pub fn limiter<T>(
        &self,
        key: &[u8],
        now: Nanos,
        f: impl FnOnce(&mut Option<State>) -> Result<(T, Option<Nanos>), CheckError>,
    ) -> Result<T, StoreError> {
        self.limiter_hashed(self.hasher.hash_key(key), key, now, f)
    }

    /// [`Store::limiter`] of a key whose hash is `h`.
    #[inline]
    fn limiter_hashed<T>(
        &self,
        h: u64,
        key: &[u8],
        now: Nanos,
        f: impl FnOnce(&mut Option<State>) -> Result<(T, Option<Nanos>), CheckError>,
    ) -> Result<T, StoreError> {
        let limits = self.limits();
        let cell = &self.shards[self.shard_index(h)];
        let mut shard = cell.lock();
        let result = shard.limiter(h, key, now, limits, f);
        cell.note_layout(&shard, &self.buckets);
        result
    }

    /// Whether [`Store::prefetch`] is worth its instructions: the tables have outgrown the
    /// caches closest to a core, so a lookup's lines mostly come from far away.
    #[inline]
    pub fn prefetching(&self) -> bool {
        self.buckets.load(Ordering::Relaxed) >= PREFETCH_BUCKETS
    }

    /// Starts loading the memory a lookup of `key` will read, so that it is in cache by the
    /// time the lookup comes (a pipelined request's key, read ahead of the requests before it).
    /// Takes no lock and reads no entry. Returns the key's hash for [`Store::check_ahead`].
    #[inline]
    pub fn prefetch(&self, key: &[u8]) -> Ahead {
        let (h, cell) = self.route(key);
        cell.layout().prefetch(h as u32);
        Ahead {
            addr: key.as_ptr().addr(),
            len: key.len(),
            hash: h,
        }
    }

    /// `GET`: the counter's value, `None` if missing; `WrongType` on a limiter.
    pub fn get(&self, key: &[u8], now: Nanos) -> Result<Option<Bytes>, StoreError> {
        let (h, shard) = self.route(key);
        shard.lock().get(h, key, now)
    }

    /// `SET`: writes a counter over any key (as Redis `SET` does). Returns false if `NX`/`XX`
    /// prevented it, or if a new key does not fit under `maxmemory` (use [`Store::try_set`]
    /// to tell the two apart). A deadline already past writes nothing and deletes the key.
    pub fn set(&self, key: &[u8], value: &[u8], cond: SetCond, ttl: SetTtl, now: Nanos) -> bool {
        self.try_set(key, value, cond, ttl, now).unwrap_or(false)
    }

    /// [`Store::set`] that reports a new key refused for memory as `Err(OutOfMemory)`.
    pub fn try_set(
        &self,
        key: &[u8],
        value: &[u8],
        cond: SetCond,
        ttl: SetTtl,
        now: Nanos,
    ) -> Result<bool, StoreError> {
        let limits = self.limits();
        let (h, shard) = self.route(key);
        shard.lock().set(h, key, value, cond, ttl, now, limits)
    }

    /// `INCRBY` (and `INCR`/`DECR`/`DECRBY`): a missing key counts from 0 and has no TTL; an
    /// existing one keeps its TTL. A missing key may be refused with `OutOfMemory`.
    pub fn incr_by(&self, key: &[u8], delta: i64, now: Nanos) -> Result<i64, StoreError> {
        let limits = self.limits();
        let (h, shard) = self.route(key);
        shard.lock().incr_by(h, key, delta, now, limits)
    }

    /// A string command's read-modify-write, atomic under the key's shard lock: `f` sees the
    /// string and its deadline (`Nanos::MAX`: none), or `None` for a missing key, and says what
    /// the key becomes. `WrongType` if the key holds a limiter (before `f` runs); a new key may
    /// be refused with `OutOfMemory` (after `f` ran, nothing written).
    pub fn string<'a, R>(
        &self,
        key: &[u8],
        now: Nanos,
        f: impl FnOnce(Option<(&[u8], Nanos)>) -> Result<(StrWrite<'a>, R), StoreError>,
    ) -> Result<R, StoreError> {
        let limits = self.limits();
        let (h, shard) = self.route(key);
        shard.lock().string(h, key, now, limits, f)
    }

    /// Reads a collection: `f` sees it, or `None` for a missing key; `WrongType` (before `f`
    /// runs) if the key holds anything else.
    pub fn read<T: Collection, R>(
        &self,
        key: &[u8],
        now: Nanos,
        f: impl FnOnce(Option<&T>) -> R,
    ) -> Result<R, StoreError> {
        let (h, shard) = self.route(key);
        shard.lock().read(h, key, now, f)
    }

    /// Changes a collection under its shard's lock: `f` edits it and says whether it changed
    /// (a change is journaled, so replicas follow). A missing key is `Ok(None)` without `f`
    /// unless `create`, when `f` edits an empty one, stored if it is left non-empty (with no
    /// TTL; it may be refused with `OutOfMemory`). A collection `f` leaves empty is deleted,
    /// as Redis deletes it. `WrongType` (before `f` runs) if the key holds anything else. The
    /// key keeps its TTL.
    pub fn edit<T: Collection, R>(
        &self,
        key: &[u8],
        now: Nanos,
        create: bool,
        f: impl FnOnce(&mut T) -> (R, bool),
    ) -> Result<Option<R>, StoreError> {
        let limits = self.limits();
        let (h, shard) = self.route(key);
        shard.lock().edit(h, key, now, limits, create, f)
    }

    /// Makes `key` hold `value` with no TTL, whatever it held (the STORE commands: ZRANGESTORE,
    /// SINTERSTORE, ...); an empty collection deletes the key. A new key may be refused with
    /// `OutOfMemory`.
    pub fn overwrite<T: Collection>(
        &self,
        key: &[u8],
        now: Nanos,
        value: T,
    ) -> Result<(), StoreError> {
        let limits = self.limits();
        let (h, shard) = self.route(key);
        let value = (!value.is_empty()).then(|| value.into_value());
        shard.lock().overwrite(h, key, value, now, limits)
    }

    /// Makes `key` hold `value` until `deadline` (RENAME, COPY): unless `replace`, only if
    /// the key is missing (false if it was not). A deadline already past deletes the key. A
    /// new key may be refused with `OutOfMemory`.
    pub fn place(
        &self,
        key: &[u8],
        value: Value,
        deadline: Nanos,
        now: Nanos,
        replace: bool,
    ) -> Result<bool, StoreError> {
        let limits = self.limits();
        let (h, shard) = self.route(key);
        shard
            .lock()
            .place(h, key, value, deadline, now, limits, replace)
    }

    /// Removes `key` and hands back what it held and its deadline (RENAME's first half).
    pub fn take(&self, key: &[u8], now: Nanos) -> Option<(Value, Nanos)> {
        let (h, shard) = self.route(key);
        shard.lock().take(h, key, now)
    }

    /// A copy of what `key` holds and its deadline (COPY).
    pub fn value(&self, key: &[u8], now: Nanos) -> Option<(Value, Nanos)> {
        let (h, shard) = self.route(key);
        shard.lock().value(h, key, now)
    }

    /// Calls `f` with each live key of shard `shard` and what it holds, in bounded steps under
    /// its lock (SCAN walks one shard a call, RANDOMKEY one shard).
    pub fn shard_keys(&self, shard: usize, now: Nanos, mut f: impl FnMut(&[u8], Kind)) {
        let Some(cell) = self.shards.get(shard) else {
            return;
        };
        self.scan_shard(cell, now, &mut |visit| {
            if let Visit::Entry(key, _, value) = visit {
                f(key, value.kind());
            }
            true
        });
    }

    /// The big values shard `shard`'s changes removed (a deleted, expired, evicted or
    /// overwritten collection of more than [`LAZYFREE_EFFORT`] entries), taken out
    /// under its lock for the caller to free with none held, as Redis's lazyfree thread does.
    pub fn take_lazy(&self, shard: usize) -> Vec<Value> {
        match self.shards.get(shard) {
            Some(cell) => cell.lock().take_lazy(),
            None => Vec::new(),
        }
    }

    /// WATCH: `dirty` is set when `key` next changes (a write, a delete, an expiry, an
    /// eviction, FLUSHALL), whoever changes it. A connection gives one flag for all its keys
    /// and drops it to stop watching (see `watch`).
    pub fn watch(
        &self,
        key: &[u8],
        now: Nanos,
        dirty: &std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) {
        let (h, shard) = self.route(key);
        shard.lock().watch(h, key, now, dirty);
    }

    /// `TYPE`: what the key holds, `None` if missing.
    pub fn kind(&self, key: &[u8], now: Nanos) -> Option<Kind> {
        let (h, shard) = self.route(key);
        shard.lock().kind(h, key, now)
    }

    /// `PERSIST` on any key type: true if the key had a deadline, now removed.
    pub fn persist(&self, key: &[u8], now: Nanos) -> bool {
        let (h, shard) = self.route(key);
        shard.lock().persist(h, key, now)
    }

    /// `PEXPIREAT` (and `EXPIRE`/`PEXPIRE` with `at = now + ttl`) on any key type. `at <= now`
    /// deletes the key. False if the key is missing.
    pub fn expire_at(&self, key: &[u8], at: Nanos, now: Nanos) -> bool {
        let (h, shard) = self.route(key);
        shard.lock().expire_at(h, key, at, now)
    }

    /// `PTTL`: for a limiter key, the time until it is fresh again.
    pub fn ttl(&self, key: &[u8], now: Nanos) -> Ttl {
        let (h, shard) = self.route(key);
        shard.lock().ttl(h, key, now)
    }

    pub fn del(&self, key: &[u8], now: Nanos) -> bool {
        let (h, shard) = self.route(key);
        shard.lock().del(h, key, now)
    }

    pub fn exists(&self, key: &[u8], now: Nanos) -> bool {
        let (h, shard) = self.route(key);
        shard.lock().exists(h, key, now)
    }

    /// `DBSIZE`: the exact number of live keys (each shard drops its dead ones first).
    pub fn len(&self, now: Nanos) -> usize {
        (0..self.shards.len())
            .map(|i| self.reaped(i, now).key_count())
            .sum()
    }

    /// Shard `i`, locked, after dropping every entry dead at `now`: its wheel caught up in
    /// [`EXPIRE_BUDGET`] steps, the lock let go between them, so the last step,
    /// [`Shard::reap`], is short. A move of its table is left to housekeeping: the counts are
    /// exact in the middle of one.
    fn reaped(&self, i: usize, now: Nanos) -> ShardGuard<'_> {
        while !self.shards[i].lock().expire_wheel(now, EXPIRE_BUDGET).1 {}
        let mut shard = self.shards[i].lock();
        shard.reap(now);
        shard
    }

    /// True if no key is live at `now`.
    pub fn is_empty(&self, now: Nanos) -> bool {
        self.len(now) == 0
    }

    /// Live keys that have a deadline (`INFO keyspace` `expires=`).
    pub fn expires_count(&self, now: Nanos) -> usize {
        (0..self.shards.len())
            .map(|i| self.reaped(i, now).expires())
            .sum()
    }

    /// `FLUSHALL`: drops every key and frees the tables. With the journal on, every shard's
    /// pending records and then one FLUSH record are set aside together, all shards locked,
    /// so a replica sees each change before the flush on the right side of it.
    pub fn flush(&self) {
        let mut spill = self.spill.lock();
        let mut locked: Vec<_> = self.shards.iter().map(|s| s.lock()).collect();
        let journaling = locked.first().is_some_and(|s| s.journal.on);
        let mut dropped = Vec::with_capacity(locked.len());
        for s in locked.iter_mut() {
            if let Some(w) = &mut s.journal.watchers {
                w.touch_all();
            }
            s.journal.watchers = None;
            s.drain_journal(&mut spill);
            dropped.push(s.flush());
        }
        if journaling {
            Record::Flush.encode(&mut spill);
        }
        // Freed with no lock held: requests go on meanwhile.
        drop(locked);
        drop(spill);
        drop(dropped);
    }

    /// Turns the replication journal on or off in every shard. Off drops what is pending.
    pub fn set_journaling(&self, on: bool) {
        let mut spill = self.spill.lock();
        if !on {
            spill.clear();
        }
        for s in self.shards.iter() {
            s.lock().journal.set_on(on);
        }
    }

    /// Moves every journaled record into `out`, shard by shard (one lock at a time). Records
    /// of one key keep their order: a key lives in one shard.
    pub fn drain_journal(&self, out: &mut Vec<u8>) {
        let mut spill = self.spill.lock();
        out.append(&mut spill);
        for s in self.shards.iter() {
            s.lock().drain_journal(out);
        }
    }

    /// Writes every live entry into `w`, shard by shard in bounded steps (see
    /// [`Store::scan`]); returns how many.
    pub fn snapshot_into(&self, w: &mut SnapshotWriter, now: Nanos) -> u64 {
        self.snapshot_where(w, now, |_| true)
    }

    /// [`Store::snapshot_into`] for the keys `keep` selects (a slot migration's keys).
    pub fn snapshot_where(
        &self,
        w: &mut SnapshotWriter,
        now: Nanos,
        keep: impl Fn(&[u8]) -> bool,
    ) -> u64 {
        let before = w.count();
        self.scan_steps(now, |visit| {
            match visit {
                // Room for a step's records, made while no lock is held.
                Visit::Unlocked => w.reserve(SCAN_BUDGET * SNAPSHOT_RECORD_BYTES),
                Visit::Entry(key, ..) if !keep(key) => {}
                Visit::Entry(key, deadline, Value::Limiter(state)) => {
                    w.limiter(key, deadline, state)
                }
                Visit::Entry(key, deadline, Value::Counter(c)) => {
                    w.counter(key, deadline, c.as_bytes(&mut itoa::Buffer::new()))
                }
                Visit::Entry(key, deadline, collection) => {
                    let kind = collection
                        .kind()
                        .code()
                        .expect("a collection has a DATA code");
                    w.data(key, deadline, kind, |out| {
                        collection.encode_collection(out);
                    })
                }
            }
            true
        });
        w.count() - before
    }

    /// Calls `f` with every live entry's key, deadline and value, each shard in steps of at
    /// most [`SCAN_BUDGET`] slots under its lock, which is handed to a waiting request between
    /// steps. The store changes meanwhile: every entry live for the whole scan is seen at least
    /// once, and exactly once unless an insert moved it meanwhile; entries written during the
    /// scan may be seen or not, with their value of the moment (a replica gets their changes
    /// from the stream that follows the snapshot).
    fn scan(&self, now: Nanos, mut f: impl FnMut(&[u8], Nanos, &Value)) {
        self.scan_steps(now, |visit| {
            if let Visit::Entry(key, deadline, value) = visit {
                f(key, deadline, value);
            }
            true
        });
    }

    /// [`Store::scan`], telling `f` also when a step is over (no lock held then, for work
    /// that should not be done under one); stops when `f` returns false.
    fn scan_steps(&self, now: Nanos, mut f: impl FnMut(Visit<'_>) -> bool) {
        for cell in self.shards.iter() {
            if !f(Visit::Unlocked) || !self.scan_shard(cell, now, &mut f) {
                return;
            }
        }
    }

    /// One shard of [`Store::scan_steps`]; false if `f` stopped it.
    fn scan_shard(&self, cell: &Cell, now: Nanos, f: &mut impl FnMut(Visit<'_>) -> bool) -> bool {
        let mut shard = cell.lock();
        let id = shard.scan_begin();
        let mut going = true;
        loop {
            let done = shard.scan_step(id, SCAN_BUDGET, now, |key, deadline, value| {
                going = going && f(Visit::Entry(key, deadline, value));
            });
            if !going {
                shard.scan_end(id);
                return false;
            }
            if done {
                return true;
            }
            shard.unlock_fair();
            going = f(Visit::Unlocked);
            shard = cell.lock();
            if !going {
                shard.scan_end(id);
                return false;
            }
        }
    }

    /// Live keys `select` picks, at most `limit` (CLUSTER GETKEYSINSLOT/COUNTKEYSINSLOT scan
    /// every shard: a slot has no index of its own).
    pub fn keys_where(
        &self,
        now: Nanos,
        limit: usize,
        select: impl Fn(&[u8]) -> bool,
    ) -> Vec<Bytes> {
        let mut out = Vec::new();
        if limit == 0 {
            return out;
        }
        self.scan_steps(now, |visit| match visit {
            Visit::Unlocked => {
                out.reserve(SCAN_BUDGET.min(limit - out.len()));
                true
            }
            Visit::Entry(key, ..) => {
                if select(key) {
                    out.push(Bytes::copy_from_slice(key));
                }
                out.len() < limit
            }
        });
        out
    }

    /// How many live keys `select` picks (CLUSTER COUNTKEYSINSLOT), copying none.
    pub fn count_where(&self, now: Nanos, select: impl Fn(&[u8]) -> bool) -> usize {
        let mut n = 0;
        self.scan(now, |key, _, _| n += usize::from(select(key)));
        n
    }

    /// Deletes every key `select` picks (a node dropping the slots it handed over); each
    /// delete is journaled, so replicas follow. Returns how many. The keys are found by a
    /// [`Store::scan`] and deleted one lock at a time.
    pub fn delete_where(&self, now: Nanos, select: impl Fn(&[u8]) -> bool) -> usize {
        let mut keys = Vec::new();
        self.scan_steps(now, |visit| {
            match visit {
                Visit::Unlocked => keys.reserve(SCAN_BUDGET),
                Visit::Entry(key, ..) if select(key) => keys.push(Bytes::copy_from_slice(key)),
                Visit::Entry(..) => {}
            }
            true
        });
        keys.iter().filter(|key| self.del(key, now)).count()
    }

    /// Applies one replicated record (a replica's only way to write). PING and GETACK are the
    /// link's business and change nothing here.
    pub fn apply(&self, record: Record<'_>, now: Nanos) {
        match record {
            Record::Limiter {
                key,
                deadline,
                state,
            } => {
                let (h, shard) = self.route(key);
                shard
                    .lock()
                    .put_value(h, key, Value::Limiter(state), deadline, now);
            }
            Record::Counter {
                key,
                deadline,
                value,
            } => {
                let (h, shard) = self.route(key);
                let value = Value::Counter(Counter::from_bytes(value));
                shard.lock().put_value(h, key, value, deadline, now);
            }
            Record::Data {
                key,
                deadline,
                kind,
                body,
            } => {
                let (h, shard) = self.route(key);
                match Kind::from_code(kind).and_then(|k| Value::decode_collection(k, body)) {
                    Some(value) => shard.lock().put_value(h, key, value, deadline, now),
                    // Bytes no collection is made of: the key goes rather than keep a state
                    // the primary no longer has.
                    None => {
                        shard.lock().del(h, key, now);
                    }
                }
            }
            Record::Del { key } => {
                self.del(key, now);
            }
            Record::Flush => self.flush(),
            Record::Ping
            | Record::GetAck
            | Record::Offset(_)
            | Record::Time(_)
            | Record::Origin { .. } => {}
        }
    }

    /// Structural bytes: the shard array, each table's arrays, boxes, heap keys and state, and
    /// the timing wheels.
    pub fn used_memory(&self) -> usize {
        let shards = self.shards.len() * size_of::<ShardCell>();
        shards
            + self
                .shards
                .iter()
                .map(|s| s.lock().heap_bytes())
                .sum::<usize>()
    }

    /// Runs shard `shard`'s wheel up to `now`; returns keys dropped. The server calls this
    /// every few ms, each thread for its own subset of shards.
    ///
    /// # Panics
    /// If `shard >= self.shard_count()`.
    pub fn expire_due(&self, shard: usize, now: Nanos) -> usize {
        self.shards[shard].lock().expire_due(now)
    }

    /// [`Store::expire_due`] in a bounded step: at most `budget` wheel items looked at under
    /// the shard's lock ([`EXPIRE_BUDGET`] keeps a step well under a millisecond). Returns the
    /// keys dropped and whether the shard caught up with `now`; if not, the next call goes on.
    /// A wave of expiries, or a wheel cascade that refiles a whole shard's keys, is then many
    /// short steps, between which the caller serves its connections.
    ///
    /// # Panics
    /// If `shard >= self.shard_count()`.
    pub fn expire_some(&self, shard: usize, now: Nanos, budget: usize) -> (usize, bool) {
        self.shards[shard].lock().expire_some(now, budget)
    }

    /// Keys dropped because their deadline passed, since start (`INFO stats` `expired_keys`).
    pub fn expired_total(&self) -> u64 {
        self.shards.iter().map(|s| s.lock().expired_total()).sum()
    }

    /// Live keys dropped to make room under `maxmemory`, since start (`INFO stats`
    /// `evicted_keys`). Each let a client through earlier than its limit said.
    pub fn evicted_total(&self) -> u64 {
        self.shards.iter().map(|s| s.lock().evicted_total()).sum()
    }

    /// New keys refused with `OutOfMemory`, since start.
    pub fn rejected_total(&self) -> u64 {
        self.shards.iter().map(|s| s.lock().rejected_total()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A script's hold: its shards stay locked against other threads for the whole hold,
    /// while this thread's own operations use them without locking again.
    /// With the journal on, a collection written many times between two drains sends its
    /// state once, as it is at the drain, in the place of its last write: after a DEL and a
    /// re-creation the replica ends with the new value, not without the key.
    #[test]
    fn collections_are_encoded_once_per_drain_at_their_last_write() {
        let store = Store::new(StoreConfig::default());
        let now = Nanos(1_000_000_000);
        store.set_journaling(true);
        let add = |m: &[u8]| {
            store
                .edit(b"z", now, true, |z: &mut types::ZSet| {
                    z.insert(m, 1.0);
                    ((), true)
                })
                .unwrap();
        };
        for i in 0..100u32 {
            add(&i.to_le_bytes());
        }
        assert!(store.del(b"z", now));
        add(b"new");
        let mut out = Vec::new();
        store.drain_journal(&mut out);
        let mut records = Vec::new();
        let mut rest = &out[..];
        while let Some((r, used)) = sluice_repl::record::decode(rest).unwrap() {
            records.push(r);
            rest = &rest[used..];
        }
        // One DEL (written by the DEL), then one DATA: the state after the last write.
        assert_eq!(records.len(), 2, "{records:?}");
        assert!(matches!(records[0], Record::Del { key: b"z" }));
        let Record::Data { key, body, .. } = &records[1] else {
            panic!("{records:?}")
        };
        assert_eq!(*key, b"z");
        let replica = Store::new(StoreConfig::default());
        for r in records.iter().cloned() {
            replica.apply(r, now);
        }
        let members = replica
            .read(b"z", now, |z: Option<&types::ZSet>| {
                z.map(|z| z.iter().map(|(_, m)| m.to_vec()).collect::<Vec<_>>())
            })
            .unwrap();
        assert_eq!(members, Some(vec![b"new".to_vec()]));
        assert!(!body.is_empty());
    }

    /// A big collection deleted, expired or overwritten is set aside for a lazy free (and no
    /// longer counted); a small one is freed in place.
    #[test]
    fn big_collections_are_freed_lazily() {
        let store = Store::new(StoreConfig::default());
        let now = Nanos(1_000_000_000);
        let fill = |key: &[u8], n: usize| {
            store
                .edit(key, now, true, |h: &mut types::Hash| {
                    for i in 0..n {
                        h.set(format!("f{i}").as_bytes(), b"v");
                    }
                    ((), true)
                })
                .unwrap();
        };
        let lazy = |key: &[u8]| store.take_lazy(store.shard_of(key)).len();
        let empty = store.used_memory();
        fill(b"big", 10_000);
        fill(b"small", 10);
        assert!(store.used_memory() > empty + 10_000 * 8);
        assert!(store.del(b"small", now));
        assert_eq!(lazy(b"small"), 0, "a small hash is freed in place");
        assert!(store.del(b"big", now));
        assert_eq!(lazy(b"big"), 1);
        assert!(
            store.used_memory() < empty + 10_000,
            "the set-aside value is not counted"
        );
        // Overwritten by SET, and expired.
        fill(b"big", 1000);
        assert!(store.set(b"big", b"1", SetCond::Always, SetTtl::Clear, now));
        assert_eq!(lazy(b"big"), 1);
        fill(b"gone", 1000);
        assert!(store.expire_at(b"gone", Nanos(now.0 + 1), now));
        assert!(!store.exists(b"gone", Nanos(now.0 + 2)));
        assert_eq!(lazy(b"gone"), 1);
    }

    #[test]
    fn a_hold_keeps_its_shards_and_serves_its_own_thread() {
        let store = std::sync::Arc::new(Store::new(StoreConfig::default()));
        let now = Nanos::from_millis(1);
        {
            let hold = store.holding().expect("no hold yet");
            assert!(store.holding().is_none(), "one hold per thread");
            store.hold([&b"a"[..], b"b"]).unwrap();
            assert_eq!(store.incr_by(b"a", 1, now), Ok(1));
            // A shard the hold did not name is taken for the rest of it.
            assert_eq!(store.incr_by(b"z", 5, now), Ok(5));
            assert_eq!(store.len(now), 2);
            let other = std::sync::Arc::clone(&store);
            let reader = std::thread::spawn(move || other.incr_by(b"a", 1, now));
            std::thread::sleep(std::time::Duration::from_millis(50));
            assert!(!reader.is_finished(), "a held shard waits for the hold");
            assert_eq!(store.incr_by(b"a", 1, now), Ok(2));
            drop(hold);
            assert_eq!(reader.join().unwrap(), Ok(3));
        }
        assert_eq!(store.get(b"a", now), Ok(Some(Bytes::from_static(b"3"))));
        assert!(store.hold([&b"a"[..]]).is_ok(), "outside a hold: nothing");
    }

    /// Two holds that want each other's shards: the one that must go back in shard order waits
    /// a bounded time and fails with `ShardBusy`, and the other goes on once it lets go.
    #[test]
    fn crossed_holds_never_deadlock() {
        use std::sync::{Arc, Barrier};
        let store = Arc::new(Store::new(StoreConfig::default()));
        // Two keys on different shards, `lo` on the lower one.
        let mut keys: Vec<String> = (0..100).map(|i| format!("k{i}")).collect();
        keys.sort_by_key(|k| store.shard_of(k.as_bytes()));
        let (lo, hi) = (keys[0].clone(), keys[99].clone());
        assert!(store.shard_of(lo.as_bytes()) < store.shard_of(hi.as_bytes()));
        let both = Arc::new(Barrier::new(2));
        let (s, b, lo2, hi2) = (
            Arc::clone(&store),
            Arc::clone(&both),
            lo.clone(),
            hi.clone(),
        );
        // This thread holds `lo`, then asks for `hi`: after every shard it holds, so it waits.
        let other = std::thread::spawn(move || {
            let _hold = s.holding().unwrap();
            s.hold([lo2.as_bytes()]).unwrap();
            b.wait();
            s.hold([hi2.as_bytes()])
        });
        let hold = store.holding().unwrap();
        store.hold([hi.as_bytes()]).unwrap();
        both.wait();
        std::thread::sleep(std::time::Duration::from_millis(20));
        // Asking for `lo` goes back in shard order: a bounded wait, then ShardBusy.
        let started = std::time::Instant::now();
        assert_eq!(store.hold([lo.as_bytes()]), Err(ShardBusy));
        assert!(started.elapsed() >= HOLD_WAIT);
        drop(hold);
        assert_eq!(other.join().unwrap(), Ok(()));
    }

    #[test]
    fn store_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Store>();
    }

    #[test]
    fn shard_count_is_a_power_of_two() {
        assert_eq!(Store::new(StoreConfig::default()).shard_count(), 64);
        let with = |shards| StoreConfig {
            shards,
            ..StoreConfig::default()
        };
        assert_eq!(Store::new(with(0)).shard_count(), 1);
        assert_eq!(Store::new(with(5)).shard_count(), 8);
        assert_eq!(Store::new(with(usize::MAX)).shard_count(), MAX_SHARDS);
    }

    #[test]
    fn keys_spread_over_shards() {
        let store = Store::new(StoreConfig {
            shards: 16,
            ..StoreConfig::default()
        });
        let mut counts = [0usize; 16];
        for i in 0..16_000 {
            counts[store.shard_of(format!("user:{i}").as_bytes())] += 1;
        }
        for c in counts {
            assert!((800..1200).contains(&c), "skewed shards: {counts:?}");
        }
    }

    fn params(limit: u64) -> Params {
        Params {
            limit,
            period: Nanos::from_secs(3600),
            burst: limit,
            cost: 1,
        }
    }

    fn hit<'a>(key: &'a [u8], limit: u64, enforced: bool) -> Check<'a> {
        Check {
            key,
            algo: Algo::Token,
            params: params(limit),
            enforced,
            held: 0,
        }
    }

    fn left(store: &Store, key: &[u8], limit: u64, now: Nanos) -> u64 {
        let mut p = params(limit);
        p.cost = 0;
        store
            .check(key, Algo::Token, &p, now, false)
            .unwrap()
            .remaining
    }

    #[test]
    fn check_all_is_all_or_nothing() {
        let store = Store::new(StoreConfig::default());
        let now = Nanos::from_secs(1_000);
        let mut out = Vec::new();
        let checks = [
            hit(b"user", 5, true),
            hit(b"ip", 2, true),
            hit(b"route", 1, false),
        ];
        assert!(store.check_all(&checks, now, &mut out).unwrap());
        assert_eq!(
            out.iter().map(|d| d.remaining).collect::<Vec<_>>(),
            [4, 1, 0]
        );
        // The shadow check is now denied, and blocks nothing.
        assert!(store.check_all(&checks, now, &mut out).unwrap());
        assert!(!out[2].allowed);
        // `ip` is spent: nothing is consumed, `user` keeps its 3.
        assert!(!store.check_all(&checks, now, &mut out).unwrap());
        assert!(!out[1].allowed && out[1].retry_after.is_some());
        assert_eq!(left(&store, b"user", 5, now), 3);
        assert_eq!(left(&store, b"ip", 2, now), 0);
    }

    #[test]
    fn check_all_errors_change_nothing() {
        let store = Store::new(StoreConfig::default());
        let now = Nanos::from_secs(1_000);
        store.set(b"counter", b"1", SetCond::Always, SetTtl::Clear, now);
        let mut out = Vec::new();
        let checks = [hit(b"user", 5, true), hit(b"counter", 5, true)];
        assert_eq!(
            store.check_all(&checks, now, &mut out),
            Err(StoreError::WrongType)
        );
        assert_eq!(left(&store, b"user", 5, now), 5);
    }

    #[test]
    fn check_all_never_consumes_partially_under_contention() {
        let store = std::sync::Arc::new(Store::new(StoreConfig {
            shards: 8,
            ..StoreConfig::default()
        }));
        let now = Nanos::from_secs(1_000);
        // Three keys, three limits: only the tightest (40) can ever decide.
        let keys: [&[u8]; 3] = [b"a", b"b", b"c"];
        let limits = [100, 40, 70];
        let threads: Vec<_> = (0..16)
            .map(|_| {
                let store = store.clone();
                std::thread::spawn(move || {
                    let mut out = Vec::new();
                    let checks: Vec<_> = keys
                        .iter()
                        .zip(limits)
                        .map(|(k, l)| hit(k, l, true))
                        .collect();
                    (0..50)
                        .filter(|_| store.check_all(&checks, now, &mut out).unwrap())
                        .count()
                })
            })
            .collect();
        let allowed: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(allowed, 40);
        for (k, l) in keys.iter().zip(limits) {
            assert_eq!(left(&store, k, l, now), l - 40);
        }
    }

    #[test]
    fn check_all_puts_back_what_it_consumed_when_a_new_key_does_not_fit() {
        let store = Store::new(StoreConfig {
            shards: 1,
            maxmemory: 0,
            policy: EvictionPolicy::Reject,
        });
        let now = Nanos::from_secs(1_000);
        let mut out = Vec::new();
        assert!(
            store
                .check_all(&[hit(b"old", 5, true)], now, &mut out)
                .unwrap()
        );
        // From now on no new key fits; `old` exists and is consumed first, then `new` fails.
        store.set_maxmemory(1);
        let checks = [hit(b"old", 5, true), hit(b"new", 5, true)];
        assert_eq!(
            store.check_all(&checks, now, &mut out),
            Err(StoreError::OutOfMemory)
        );
        assert_eq!(left(&store, b"old", 5, now), 4);
        assert!(!store.exists(b"new", now));
    }

    #[test]
    fn leases_are_counted_in_memory_and_refused_past_maxmemory() {
        let store = Store::new(StoreConfig {
            shards: 1,
            maxmemory: 0,
            policy: EvictionPolicy::Reject,
        });
        let now = Nanos::from_secs(1_000);
        let ttl = Nanos::from_secs(60);
        let acquire = |key: &[u8]| {
            store.limiter(key, now, |slot| {
                let (a, left) = sluice_core::acquire(slot, 1000, ttl, now)?;
                Ok((a, Some(left)))
            })
        };
        let empty = store.used_memory();
        for _ in 0..500 {
            assert!(acquire(b"big").unwrap().allowed);
        }
        // 500 leases of 16 bytes are on the books, with the key's box.
        let held = store.used_memory() - empty;
        assert!(held >= 500 * 16, "{held}");
        assert_eq!(
            store.snapshot_into(&mut SnapshotWriter::new(), now),
            1,
            "one key, in the snapshot"
        );
        store.set_maxmemory(store.used_memory());
        assert_eq!(acquire(b"new"), Err(StoreError::OutOfMemory));
        assert!(
            acquire(b"big").unwrap().allowed,
            "existing keys keep working"
        );
        // Every lease expired: the key is fresh and gone.
        assert_eq!(store.len(now.saturating_add(ttl)), 0);
    }
}
