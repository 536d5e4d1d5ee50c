//! Bounded, expiring per-key maps: the local buckets, the blocked cache, the approximate leases.
//!
//! An entry lives until its own expiry (a bucket until it is full again, as on a node; a blocked
//! key until its `retry_after`), and the map never holds more than its cap: at the cap it first
//! drops every expired entry, then, if that freed less than an eighth of the cap, the live
//! entries nearest their own expiry until an eighth is free: the local buckets nearest full
//! again, the blocked keys nearest their retry, so forgetting them gives back the least (a
//! gateway that sees more hot keys than its cap forgets some, which costs a call to the node,
//! and at most what those entries still held back). Making room in eighths keeps the sweep, which visits
//! every entry, to one per cap/8 inserts: a stream of new keys costs O(1) per insert.

use std::collections::HashMap;

use bytes::Bytes;
use tokio::time::Instant;

#[derive(Debug)]
pub struct Expiring<V> {
    map: HashMap<Bytes, (V, Instant), ahash::RandomState>,
    cap: usize,
}

impl<V> Expiring<V> {
    pub fn new(cap: usize) -> Self {
        Expiring {
            map: HashMap::default(),
            cap: cap.max(1),
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// The live entry for `key` and its expiry; an expired one is removed.
    pub fn get_mut(&mut self, key: &[u8], now: Instant) -> Option<(&mut V, &mut Instant)> {
        // One lookup for a miss (the common case of the blocked cache), two for a hit.
        if self.map.get(key)?.1 <= now {
            self.map.remove(key);
            return None;
        }
        self.map.get_mut(key).map(|(v, exp)| (v, exp))
    }

    /// Inserts or replaces `key`, making room first if the map is at its cap.
    pub fn insert(&mut self, key: Bytes, value: V, expires: Instant, now: Instant) {
        self.insert_evicting(key, value, expires, now, |_, _| {});
    }

    /// [`Expiring::insert`], handing each entry it drops to make room to `evicted` (an
    /// approximate lease is given back then).
    pub fn insert_evicting(
        &mut self,
        key: Bytes,
        value: V,
        expires: Instant,
        now: Instant,
        mut evicted: impl FnMut(Bytes, V),
    ) {
        if !self.map.contains_key(&key) && self.map.len() >= self.cap {
            for (k, (v, _)) in self.map.extract_if(|_, (_, exp)| *exp <= now) {
                evicted(k, v);
            }
            let room = self.cap.div_ceil(8);
            let excess = (self.map.len() + room).saturating_sub(self.cap);
            if excess > 0 {
                // The live entries nearest their own end go: a local bucket nearest full, a
                // blocked key nearest its retry, a lease nearest its sync's end.
                let mut by_end: Vec<(Instant, Bytes)> = self
                    .map
                    .iter()
                    .map(|(k, (_, exp))| (*exp, k.clone()))
                    .collect();
                by_end.select_nth_unstable_by_key(excess - 1, |(exp, _)| *exp);
                for (_, victim) in &by_end[..excess] {
                    if let Some((k, (v, _))) = self.map.remove_entry(victim) {
                        evicted(k, v);
                    }
                }
            }
        }
        self.map.insert(key, (value, expires));
    }

    pub fn remove(&mut self, key: &[u8]) {
        self.map.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn entries_expire_and_the_cap_holds() {
        let now = Instant::now();
        let mut m = Expiring::new(3);
        m.insert(
            Bytes::from_static(b"a"),
            1,
            now + Duration::from_secs(1),
            now,
        );
        assert!(m.get_mut(b"a", now).is_some());
        assert!(m.get_mut(b"a", now + Duration::from_secs(2)).is_none());
        assert_eq!(m.len(), 0, "an expired entry is dropped when seen");
        for i in 0..10u8 {
            m.insert(Bytes::from(vec![i]), i, now + Duration::from_secs(60), now);
            assert!(m.len() <= 3);
        }
        // Expired entries go first: the live ones survive a full map.
        let mut m = Expiring::new(2);
        m.insert(
            Bytes::from_static(b"old"),
            0,
            now + Duration::from_millis(1),
            now,
        );
        m.insert(
            Bytes::from_static(b"live"),
            1,
            now + Duration::from_secs(60),
            now,
        );
        let later = now + Duration::from_secs(1);
        m.insert(
            Bytes::from_static(b"new"),
            2,
            now + Duration::from_secs(60),
            later,
        );
        assert!(m.get_mut(b"live", later).is_some());
        assert!(m.get_mut(b"new", later).is_some());
        assert_eq!(m.len(), 2);
    }

    /// At the cap, the entries nearest their end go, not arbitrary ones: a bucket spent for
    /// an hour survives a crowd of buckets that are full again in a second.
    #[test]
    fn at_the_cap_the_entries_nearest_their_end_go_first() {
        let now = Instant::now();
        let mut m = Expiring::new(8);
        let long = now + Duration::from_secs(3600);
        m.insert(Bytes::from_static(b"spent"), 0, long, now);
        for i in 0..7u8 {
            let end = now + Duration::from_millis(1000 + u64::from(i));
            m.insert(Bytes::from(vec![i]), 1, end, now);
        }
        let half = now + Duration::from_secs(1800);
        for i in 100..2100u16 {
            m.insert(Bytes::copy_from_slice(&i.to_be_bytes()), 2, half, now);
            assert!(
                m.get_mut(b"spent", now).is_some(),
                "a long-spent bucket was evicted"
            );
        }
    }

    #[test]
    fn a_full_map_of_live_entries_frees_an_eighth_at_once() {
        let now = Instant::now();
        let mut m = Expiring::new(16);
        let live = now + Duration::from_secs(60);
        for i in 0..16u8 {
            m.insert(Bytes::from(vec![i]), i, live, now);
        }
        assert_eq!(m.len(), 16);
        // The 17th key sweeps once and frees two places: the next key needs no sweep.
        m.insert(Bytes::from_static(b"x"), 0, live, now);
        assert_eq!(m.len(), 15);
        m.insert(Bytes::from_static(b"y"), 0, live, now);
        assert_eq!(m.len(), 16);
    }
}
