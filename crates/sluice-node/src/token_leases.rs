//! The records of `RL.LEASE` (leases of tokens, see [`sluice_core::token_lease`]): one per
//! (key, holder), in shards of their own, and their expiry.
//!
//! # Locking
//! A record changes only under its key's store shard lock, with the record's shard lock taken
//! inside it (`RL.LEASE` and the expiry both run in [`Store::limiter`]'s closure): a take or
//! a return and the record that counts it change together. The record lock is always the inner
//! one, so the two orders never cross.
//!
//! # Expiry
//! Each worker thread sweeps its share of the shards on its housekeeping tick ([`sweep`],
//! every 10 ms): a record not renewed by its expiry gives its unused tokens back to the key
//! (the window rule of [`sluice_core::token_lease`]), one tick at most after it expired, and
//! is kept, ended, for [`sluice_core::token_lease::ENDED_KEPT`] (10 s: a report the holder sent
//! in time and the node read late is still charged), then dropped. Ended records count in the
//! bounds below. A shard remembers its earliest expiry, so a tick over a shard with nothing due
//! reads one word. The key's change is journaled as any command's, so it reaches replicas.
//! A replica keeps no records: a primary demoted by a failover drops its records without a
//! return (the new primary's state is the one that counts), on its next tick and when it
//! loads the new primary's snapshot.
//!
//! # Memory
//! Records are neither replicated nor saved: a restart or a failover forgets them (their unused
//! tokens are lost: under-admission only). A record is 96 bytes ([`Record`]) plus its holder's
//! name and a boxed slice's 16 (at most 176 bytes with a 64-byte name), a key's list of holders
//! 24 bytes plus the key and the map's entry (about 40). Both are bounded
//! ([`HOLDERS_PER_KEY_MAX`], [`RECORDS_MAX`]): at most about 20 MB of records and 100,000 keys.
//!
//! [`sweep`]: TokenLeases::sweep

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

use parking_lot::Mutex;
use sluice_core::Nanos;
use sluice_core::token_lease::{self, HOLDERS_PER_KEY_MAX, RECORDS_MAX, Record};
use sluice_store::Store;

/// How many shards the records are spread over.
pub const SHARDS: usize = 64;

/// Why a new record was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Full {
    /// The key has [`HOLDERS_PER_KEY_MAX`] holders.
    Key,
    /// The node has [`RECORDS_MAX`] records.
    Node,
}

/// Every record of the node.
#[derive(Debug)]
pub struct TokenLeases {
    shards: Box<[Mutex<Shard>]>,
    records: AtomicUsize,
    next_id: AtomicU64,
}

#[derive(Debug, Default)]
struct Shard {
    keys: HashMap<Box<[u8]>, Vec<Holder>>,
    /// No record of the shard expires before this instant.
    next_expiry: Nanos,
}

#[derive(Debug)]
struct Holder {
    name: Box<[u8]>,
    record: Record,
}

impl Default for TokenLeases {
    fn default() -> Self {
        TokenLeases {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            records: AtomicUsize::new(0),
            // Ids start at a random point below 2^61, so that a holder's id from before a
            // restart or a failover does not name a record made after it.
            next_id: AtomicU64::new((crate::rand::next() >> 3).max(1)),
        }
    }
}

impl TokenLeases {
    fn shard(&self, key: &[u8]) -> &Mutex<Shard> {
        &self.shards[crc32fast::hash(key) as usize % SHARDS]
    }

    /// How many records the node keeps.
    pub fn len(&self) -> usize {
        self.records.load(Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What a check of `key` by `algo` must leave to the holders: the tokens they hold when
    /// it `spends` from a TOKEN or GCRA bucket (a cost above 0, DRY or not), else 0 (the
    /// windows' leased tokens count in their window; a read of cost 0 reports the bucket as it
    /// is). One load when no lease exists on the node.
    #[inline]
    pub fn held_for(&self, key: &[u8], algo: sluice_core::Algo, spends: bool) -> u64 {
        use sluice_core::Algo;
        match algo {
            Algo::Token | Algo::Gcra if spends && !self.is_empty() => self.held(key, algo),
            _ => 0,
        }
    }

    /// The tokens the holders of `key` hold under `algo` (RL.CHECK lowers a TOKEN or GCRA
    /// bucket to its capacity less these, as RL.LEASE does).
    fn held(&self, key: &[u8], algo: sluice_core::Algo) -> u64 {
        let shard = self.shard(key).lock();
        shard
            .keys
            .get(key)
            .map_or(0, |holders| held_by_others(holders, None, algo))
    }

    /// Runs `f` on `holder`'s record of `key` under the record's lock, and keeps the record
    /// `f` returns (`None`: none). `f` also gets whether a new record has room (`Err` when
    /// the key or the node is full: a new record `f` returns then is not kept), the id a
    /// new record takes, and what the key's other holders hold under `algo`, the call's
    /// algorithm. An error keeps the record as it was.
    pub fn update<T, E>(
        &self,
        key: &[u8],
        holder: &[u8],
        algo: sluice_core::Algo,
        f: impl FnOnce(Option<Record>, Result<(), Full>, u64, u64) -> Result<(T, Option<Record>), E>,
    ) -> Result<T, E> {
        let mut shard = self.shard(key).lock();
        let holders = shard.keys.get(key);
        let at = holders.and_then(|hs| hs.iter().position(|h| &*h.name == holder));
        let others = held_by_others(holders.map_or(&[][..], Vec::as_slice), at, algo);
        let old = at.map(|i| holders.expect("found")[i].record);
        // A new record's place in the node's count is reserved before `f` runs, so that
        // threads making records at once never pass the bound together.
        let room = if at.is_some() {
            Ok(())
        } else if holders.is_some_and(|hs| hs.len() >= HOLDERS_PER_KEY_MAX) {
            Err(Full::Key)
        } else if self
            .records
            .fetch_update(Relaxed, Relaxed, |n| (n < RECORDS_MAX).then_some(n + 1))
            .is_err()
        {
            Err(Full::Node)
        } else {
            Ok(())
        };
        let reserved = at.is_none() && room.is_ok();
        let new_id = self.next_id.fetch_add(1, Relaxed);
        let kept = match f(old, room, new_id, others) {
            Ok((value, new)) => {
                match (at, new) {
                    (Some(i), Some(record)) => {
                        shard.keys.get_mut(key).expect("found")[i].record = record;
                        shard.next_expiry = shard.next_expiry.min(record.expiry);
                    }
                    (Some(i), None) => shard.remove(key, i, &self.records),
                    (None, Some(record)) if reserved => {
                        let name = holder.into();
                        shard
                            .keys
                            .entry(key.into())
                            .or_default()
                            .push(Holder { name, record });
                        shard.next_expiry = shard.next_expiry.min(record.expiry);
                        return Ok(value);
                    }
                    (None, _) => {}
                }
                Ok(value)
            }
            Err(e) => Err(e),
        };
        if reserved {
            self.records.fetch_sub(1, Relaxed);
        }
        kept
    }

    /// Ends every record expired by `now` in shard `index`, each giving its unused tokens back
    /// to its key in `store` first (see the module docs).
    pub fn sweep(&self, index: usize, store: &Store, now: Nanos) {
        let cell = &self.shards[index % SHARDS];
        let due = {
            let mut shard = cell.lock();
            if now < shard.next_expiry {
                return;
            }
            let mut due = Vec::new();
            let mut next = Nanos::MAX;
            for (key, holders) in &shard.keys {
                for h in holders {
                    if h.record.expiry <= now {
                        due.push((key.clone(), h.name.clone()));
                    } else {
                        next = next.min(h.record.expiry);
                    }
                }
            }
            shard.next_expiry = next;
            due
        };
        for (key, holder) in due {
            let ended = store.limiter(&key, now, |slot| {
                let change = self.end_expired(&key, &holder, now, |record, others| {
                    token_lease::end(slot, record, others, now)
                });
                Ok(((), change))
            });
            if ended.is_err() {
                // A key that is no longer a limiter: the record only ends.
                self.end_expired(&key, &holder, now, |record, _| {
                    let kept = (!record.ended).then(|| Record {
                        ended: true,
                        expiry: now.saturating_add(token_lease::ENDED_KEPT),
                        ..*record
                    });
                    (kept, None)
                });
            }
        }
    }

    /// Ends `holder`'s record of `key` if it expired by `now`: `end` gets the record and what
    /// the key's other holders hold, and says what to keep in its place (`None`: drop it) and
    /// the key's change, which this returns.
    fn end_expired(
        &self,
        key: &[u8],
        holder: &[u8],
        now: Nanos,
        end: impl FnOnce(&Record, u64) -> (Option<Record>, Option<Nanos>),
    ) -> Option<Nanos> {
        let mut shard = self.shard(key).lock();
        let holders = shard.keys.get(key)?;
        let i = holders
            .iter()
            .position(|h| &*h.name == holder && h.record.expiry <= now)?;
        let others = held_by_others(holders, Some(i), holders[i].record.algo);
        let (kept, change) = end(&holders[i].record, others);
        match kept {
            Some(record) => {
                shard.keys.get_mut(key).expect("found")[i].record = record;
                shard.next_expiry = shard.next_expiry.min(record.expiry);
            }
            None => shard.remove(key, i, &self.records),
        }
        change
    }

    /// Drops every record (FLUSHALL, a primary demoted).
    pub fn clear(&self) {
        for cell in &self.shards {
            let mut shard = cell.lock();
            let n: usize = shard.keys.values().map(Vec::len).sum();
            shard.keys.clear();
            shard.next_expiry = Nanos::MAX;
            self.records.fetch_sub(n, Relaxed);
        }
    }
}

/// The tokens `holders` hold under `algo`, but for the one at `except`: a bucket refills no
/// further than its capacity less these (see `sluice_core::token_lease`). A record last taken
/// under another algorithm holds nothing of this state: its tokens were taken from a key since
/// deleted (the algorithms do not share a state), and expire as its holder's next call finds.
fn held_by_others(holders: &[Holder], except: Option<usize>, algo: sluice_core::Algo) -> u64 {
    holders
        .iter()
        .enumerate()
        .filter(|&(i, h)| Some(i) != except && h.record.algo == algo)
        .fold(0u64, |sum, (_, h)| sum.saturating_add(h.record.held()))
}

impl Shard {
    fn remove(&mut self, key: &[u8], i: usize, records: &AtomicUsize) {
        if let Some(holders) = self.keys.get_mut(key) {
            holders.swap_remove(i);
            records.fetch_sub(1, Relaxed);
            if holders.is_empty() {
                self.keys.remove(key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use sluice_core::token_lease::{Call, TTL_DEFAULT};
    use sluice_core::{Algo, Params, check};
    use sluice_store::{EvictionPolicy, SetCond, SetTtl, StoreConfig};

    use super::*;

    const SEC: u64 = Nanos::PER_SEC;

    fn store() -> Store {
        Store::new(StoreConfig {
            shards: 4,
            maxmemory: 0,
            policy: EvictionPolicy::Reject,
        })
    }

    fn params() -> Params {
        Params {
            limit: 10,
            period: Nanos::from_secs(86_400),
            burst: 10,
            cost: 0,
        }
    }

    /// `RL.LEASE key 10 1d HOLDER holder WANT want` as the command runs it.
    fn take(leases: &TokenLeases, store: &Store, key: &[u8], holder: &[u8], want: u64, now: Nanos) {
        let call = Call {
            algo: Algo::Token,
            params: params(),
            want,
            used: None,
            ttl: TTL_DEFAULT,
            held_by_others: 0,
        };
        store
            .limiter(key, now, |slot| {
                let g = leases
                    .update(key, holder, call.algo, |record, room, id, _| {
                        room.map_err(|_| ())?;
                        token_lease::lease(slot, record, &call, id, now).map_err(|_| ())
                    })
                    .expect("granted");
                Ok(((), Some(g.decision.reset_after)))
            })
            .unwrap();
    }

    fn remaining(store: &Store, key: &[u8], now: Nanos) -> u64 {
        store
            .limiter(key, now, |slot| {
                let d = check(slot, Algo::Token, &params(), now, true)?;
                Ok((d.remaining, None))
            })
            .unwrap()
    }

    #[test]
    fn a_sweep_returns_expired_records_only() {
        let (leases, store) = (TokenLeases::default(), store());
        let now = Nanos(1000 * SEC);
        take(&leases, &store, b"k", b"a", 4, now);
        take(
            &leases,
            &store,
            b"k",
            b"b",
            3,
            now.saturating_add(Nanos(SEC / 2)),
        );
        assert_eq!((leases.len(), remaining(&store, b"k", now)), (2, 3));
        // Before any expiry: nothing.
        let early = now.saturating_add(Nanos(SEC / 2));
        for shard in 0..SHARDS {
            leases.sweep(shard, &store, early);
        }
        assert_eq!((leases.len(), remaining(&store, b"k", early)), (2, 3));
        // a's expiry: its 4 come back, b's 3 stay taken. a's record is kept, ended, for a
        // late report.
        let later = now.saturating_add(TTL_DEFAULT);
        for shard in 0..SHARDS {
            leases.sweep(shard, &store, later);
        }
        assert_eq!((leases.len(), remaining(&store, b"k", later)), (2, 7));
        // A key that is no longer a limiter: the record only ends.
        store.flush();
        assert!(store.set(b"k", b"1", SetCond::Always, SetTtl::Clear, later));
        let last = later.saturating_add(TTL_DEFAULT);
        for shard in 0..SHARDS {
            leases.sweep(shard, &store, last);
        }
        assert_eq!(leases.len(), 2);
        // Ended records go once they were kept long enough.
        let gone = last.saturating_add(sluice_core::token_lease::ENDED_KEPT);
        for shard in 0..SHARDS {
            leases.sweep(shard, &store, gone);
        }
        assert!(leases.is_empty());
    }

    #[test]
    fn a_key_keeps_at_most_its_holders_and_clear_empties() {
        let leases = TokenLeases::default();
        let keep = |holder: &[u8]| {
            leases.update(b"k", holder, Algo::Token, |_, room, id, _| {
                room.map(|()| ((), Some(record(id))))
            })
        };
        for h in 0..HOLDERS_PER_KEY_MAX {
            keep(format!("h{h}").as_bytes()).unwrap();
        }
        assert_eq!(keep(b"late"), Err(Full::Key));
        // A holder that has a record still has room.
        keep(b"h0").unwrap();
        assert_eq!(leases.len(), HOLDERS_PER_KEY_MAX);
        // A refused new record does not keep its reserved place.
        let refused = leases.update(b"other", b"h", Algo::Token, |_, _, _, _| {
            Err::<((), Option<Record>), _>(())
        });
        assert_eq!((refused, leases.len()), (Err(()), HOLDERS_PER_KEY_MAX));
        leases.clear();
        assert!(leases.is_empty());
        keep(b"late").unwrap();
        assert_eq!(leases.len(), 1);
    }

    fn record(id: u64) -> Record {
        Record {
            id,
            granted: 1,
            used: 0,
            returned: 0,
            expired: 0,
            expiry: Nanos::MAX,
            window: Nanos::ZERO,
            algo: Algo::Token,
            params: params(),
            ended: false,
        }
    }
}
