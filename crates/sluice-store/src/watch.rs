//! WATCH: the keys of a shard some connection watches, each with the dirty flags of the
//! connections watching it. Any change to a watched key (a write, a delete, an expiry, an
//! eviction, FLUSHALL) sets those flags and forgets the key, as Redis's `touchWatchedKey`
//! marks its clients `CLIENT_DIRTY_CAS`; EXEC then refuses to run.
//!
//! A connection's flag is one `Arc<AtomicBool>` for all its keys; the shard keeps `Weak`s, so a
//! connection that goes away without UNWATCH leaves only dead references, which the next
//! growth of the map sweeps (the map is at most twice its live entries after a sweep, so a
//! client that watches many keys and leaves pins nothing for long). A shard nobody watches has
//! no map at all: the write path tests one `Option`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

#[derive(Debug, Default)]
pub struct Watchers {
    keys: HashMap<Box<[u8]>, Vec<Weak<AtomicBool>>>,
    /// The map's size at which the next `add` sweeps dead watchers out.
    sweep_at: usize,
}

impl Watchers {
    /// `dirty` watches `key`.
    pub fn add(&mut self, key: &[u8], dirty: &Arc<AtomicBool>) {
        if self.keys.len() >= self.sweep_at {
            self.keys.retain(|_, ws| {
                ws.retain(|w| w.strong_count() > 0);
                !ws.is_empty()
            });
            self.sweep_at = (2 * self.keys.len()).max(64);
        }
        let watchers = self.keys.entry(key.into()).or_default();
        if !watchers.iter().any(|w| w.as_ptr() == Arc::as_ptr(dirty)) {
            watchers.push(Arc::downgrade(dirty));
        }
    }

    /// `key` changed: its watchers are dirty, and it is watched no more.
    pub fn touch(&mut self, key: &[u8]) {
        if let Some(watchers) = self.keys.remove(key) {
            mark(&watchers);
        }
    }

    /// Every key changed (FLUSHALL).
    pub fn touch_all(&mut self) {
        for (_, watchers) in self.keys.drain() {
            mark(&watchers);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub fn heap_bytes(&self) -> usize {
        self.keys
            .iter()
            .map(|(k, ws)| k.len() + ws.capacity() * size_of::<Weak<AtomicBool>>() + 48)
            .sum()
    }
}

fn mark(watchers: &[Weak<AtomicBool>]) {
    for w in watchers {
        if let Some(flag) = w.upgrade() {
            flag.store(true, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_touch_marks_every_watcher_of_that_key_only() {
        let mut w = Watchers::default();
        let (a, b) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        w.add(b"k", &a);
        w.add(b"k", &b);
        w.add(b"other", &b);
        w.touch(b"nothing");
        assert!(!a.load(Ordering::Acquire));
        w.touch(b"k");
        assert!(a.load(Ordering::Acquire) && b.load(Ordering::Acquire));
        w.touch_all();
        assert!(w.is_empty());
    }

    #[test]
    fn watchers_that_left_are_swept() {
        let mut w = Watchers::default();
        for i in 0..10_000u32 {
            let gone = Arc::new(AtomicBool::new(false));
            w.add(&i.to_le_bytes(), &gone);
        }
        assert!(w.keys.len() <= 128, "{} entries kept", w.keys.len());
    }
}
