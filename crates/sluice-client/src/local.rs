//! Bounded, expiring per-key maps: the local buckets, the blocked cache, the approximate counters.
//!
//! An entry lives until its own expiry (a bucket until it is full again, as on a node; a blocked
//! key until its `retry_after`), and the map never holds more than its cap: at the cap it first
//! drops every expired entry, then, if that freed less than an eighth of the cap, arbitrary live
//! entries until an eighth is free (a gateway that sees more hot keys than its cap forgets some,
//! which only costs a call to the node). Making room in eighths keeps the sweep, which visits
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
        if !self.map.contains_key(&key) && self.map.len() >= self.cap {
            self.map.retain(|_, (_, exp)| *exp > now);
            let room = self.cap.div_ceil(8);
            let excess = (self.map.len() + room).saturating_sub(self.cap);
            let victims: Vec<Bytes> = self.map.keys().take(excess).cloned().collect();
            for victim in victims {
                self.map.remove(&victim);
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
