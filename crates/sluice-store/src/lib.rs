//! # sluice-store — the buckets of one node
//!
//! A [`Store`] maps binary keys to rate-limiter state ([`sluice_core::State`]) or to plain-string
//! counters (the Redis `GET`/`SET`/`INCR` subset), shared by every server thread.
//!
//! # Layout
//! - `key`: `SmallBytes`, keys up to 22 bytes inline.
//! - `entry`: `Entry` = key + value (limiter state or counter) + deadline + wheel tick.
//! - `wheel`: the per-shard hierarchical timing wheel of key hashes.
//! - `shard`: one lock's worth: a `hashbrown::HashTable<Entry>`, its wheel, its accounting.
//! - this file: `Store`, which hashes a key once and routes it to a shard.
//!
//! # Invariants
//! - A key is hashed once with a fixed-seed ahash. Bits 40.. of that hash pick the shard; the
//!   table uses the low bits (bucket index) and the top 7 (control byte), so neither is skewed
//!   by the shard choice. The wheel files the same hash.
//! - A limiter key is dropped exactly when its bucket is fresh again (`now + reset_after`):
//!   from then on a missing key answers the same, so memory follows only the limited clients.
//!   A key past its deadline is treated as missing by every operation, even before the wheel
//!   drops it; `len` and `expires_count` reap first, so they are exact.
//! - A check holds one shard lock for a hash probe and an algorithm step: it allocates only when
//!   it inserts a new key (the table, a heap key, the key's wheel item).
//! - Memory accounting is structural and exact: table allocations, heap keys and values, wheel
//!   buffers and the shards themselves ([`Store::used_memory`]).

mod entry;
mod key;
mod shard;
mod wheel;

use std::fmt;

use bytes::Bytes;
use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use sluice_core::{Algo, CheckError, Decision, Nanos, Params, State};

use crate::shard::{KeyHash, Shard};

/// Store settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreConfig {
    /// Number of shards; rounded up to a power of two, between 1 and [`MAX_SHARDS`]. Several per
    /// thread keep lock contention low.
    pub shards: usize,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig { shards: 64 }
    }
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

/// What `TTL`/`PTTL` reports (Redis: -2, -1, or the time left).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ttl {
    Missing,
    Persistent,
    Remaining(Nanos),
}

/// The key hasher: ahash with fixed seeds, so a key's shard is the same in every run (useful
/// for reproducing a hot shard), and seeds are not secret: shards are chosen by the server.
#[derive(Clone, Debug)]
struct StoreHasher(ahash::RandomState);

impl Default for StoreHasher {
    fn default() -> Self {
        StoreHasher(ahash::RandomState::with_seeds(
            0x243f_6a88_85a3_08d3,
            0x1319_8a2e_0370_7344,
            0xa409_3822_299f_31d0,
            0x082e_fa98_ec4e_6c89,
        ))
    }
}

impl KeyHash for StoreHasher {
    #[inline]
    fn hash_key(&self, key: &[u8]) -> u64 {
        self.0.hash_one(key)
    }
}

/// The sharded key space of one node. `Send + Sync`: share it behind an `Arc`.
pub struct Store {
    shards: Box<[CachePadded<Mutex<Shard<StoreHasher>>>]>,
    hasher: StoreHasher,
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
        Store {
            shards: (0..n)
                .map(|_| CachePadded::new(Mutex::new(Shard::new(hasher.clone()))))
                .collect(),
            hasher,
        }
    }

    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// The key's hash and its shard.
    #[inline]
    fn route(&self, key: &[u8]) -> (u64, &Mutex<Shard<StoreHasher>>) {
        let h = self.hasher.hash_key(key);
        let i = (h >> SHARD_SHIFT) as usize & (self.shards.len() - 1);
        (h, &self.shards[i])
    }

    /// The shard index `key` lives in (for callers that group work per shard).
    pub fn shard_of(&self, key: &[u8]) -> usize {
        let h = self.hasher.hash_key(key);
        (h >> SHARD_SHIFT) as usize & (self.shards.len() - 1)
    }

    /// `RL.CHECK`: one check of `key` by `algo`. `WrongType` if the key holds a counter; a
    /// refusal by the algorithm is `Check(e)` and changes nothing. With `dry` or `COST 0` the
    /// key is only read.
    pub fn check(
        &self,
        key: &[u8],
        algo: Algo,
        params: &Params,
        now: Nanos,
        dry: bool,
    ) -> Result<Decision, StoreError> {
        let writes = !dry && params.cost > 0;
        self.limiter(key, now, |slot| {
            let d = sluice_core::check(slot, algo, params, now, dry)?;
            Ok((d, writes.then_some(d.reset_after)))
        })
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
        let (h, shard) = self.route(key);
        shard.lock().limiter(h, key, now, f)
    }

    /// `GET`: the counter's value, `None` if missing; `WrongType` on a limiter.
    pub fn get(&self, key: &[u8], now: Nanos) -> Result<Option<Bytes>, StoreError> {
        let (h, shard) = self.route(key);
        shard.lock().get(h, key, now)
    }

    /// `SET`: writes a counter over any key (as Redis `SET` does). Returns false if `NX`/`XX`
    /// prevented it. A deadline already past writes nothing and deletes the key.
    pub fn set(&self, key: &[u8], value: &[u8], cond: SetCond, ttl: SetTtl, now: Nanos) -> bool {
        let (h, shard) = self.route(key);
        shard.lock().set(h, key, value, cond, ttl, now)
    }

    /// `INCRBY` (and `INCR`/`DECR`/`DECRBY`): a missing key counts from 0 and has no TTL; an
    /// existing one keeps its TTL.
    pub fn incr_by(&self, key: &[u8], delta: i64, now: Nanos) -> Result<i64, StoreError> {
        let (h, shard) = self.route(key);
        shard.lock().incr_by(h, key, delta, now)
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
        self.shards
            .iter()
            .map(|s| {
                let mut s = s.lock();
                s.reap(now);
                s.key_count()
            })
            .sum()
    }

    /// True if no key is live at `now`.
    pub fn is_empty(&self, now: Nanos) -> bool {
        self.len(now) == 0
    }

    /// Live keys that have a deadline (`INFO keyspace` `expires=`).
    pub fn expires_count(&self, now: Nanos) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let mut s = s.lock();
                s.reap(now);
                s.expires()
            })
            .sum()
    }

    /// `FLUSHALL`: drops every key and frees the tables.
    pub fn flush(&self) {
        for s in self.shards.iter() {
            s.lock().flush();
        }
    }

    /// Structural bytes: the shard array, each table's allocation, heap keys and state, and the
    /// timing wheels.
    pub fn used_memory(&self) -> usize {
        let shards = self.shards.len() * size_of::<CachePadded<Mutex<Shard<StoreHasher>>>>();
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

    /// Keys dropped because their deadline passed, since start (`INFO stats` `expired_keys`).
    pub fn expired_total(&self) -> u64 {
        self.shards.iter().map(|s| s.lock().expired_total()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Store>();
    }

    #[test]
    fn shard_count_is_a_power_of_two() {
        assert_eq!(Store::new(StoreConfig::default()).shard_count(), 64);
        assert_eq!(Store::new(StoreConfig { shards: 0 }).shard_count(), 1);
        assert_eq!(Store::new(StoreConfig { shards: 5 }).shard_count(), 8);
        assert_eq!(
            Store::new(StoreConfig { shards: usize::MAX }).shard_count(),
            MAX_SHARDS
        );
    }

    #[test]
    fn keys_spread_over_shards() {
        let store = Store::new(StoreConfig { shards: 16 });
        let mut counts = [0usize; 16];
        for i in 0..16_000 {
            counts[store.shard_of(format!("user:{i}").as_bytes())] += 1;
        }
        for c in counts {
            assert!((800..1200).contains(&c), "skewed shards: {counts:?}");
        }
    }
}
