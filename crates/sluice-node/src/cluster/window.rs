//! A set of slots held for a while: the write pause of an old owner during a handover, and the
//! hold of a new owner on slots whose buckets are still arriving. The request path reads one
//! flag; the set sits behind a lock only while a window is open.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use parking_lot::Mutex;
use sluice_cluster::SLOTS;

/// Slots held until `until`, or until released.
#[derive(Debug)]
struct Held {
    slots: Box<[bool; SLOTS]>,
    until: Instant,
}

/// Slots held for a while (see the module docs).
#[derive(Debug, Default)]
pub struct SlotWindow {
    open: AtomicBool,
    held: Mutex<Option<Held>>,
}

impl SlotWindow {
    /// Holds `ranges` (inclusive) until `until`, with the slots already held.
    pub fn open(&self, ranges: impl IntoIterator<Item = (u16, u16)>, until: Instant) {
        let mut held = self.held.lock();
        let h = held.get_or_insert_with(|| Held {
            slots: Box::new([false; SLOTS]),
            until,
        });
        h.until = until;
        for (a, b) in ranges {
            h.slots[usize::from(a)..=usize::from(b)].fill(true);
        }
        self.open.store(true, Ordering::SeqCst);
    }

    /// Holds exactly `slots` until `until`, replacing what was held.
    pub fn replace(&self, ranges: &[(u16, u16)], until: Instant) {
        *self.held.lock() = None;
        self.open(ranges.iter().copied(), until);
    }

    /// Whether `slot` is held now. One atomic load while no window is open.
    #[inline]
    pub fn holds(&self, slot: u16) -> bool {
        self.open.load(Ordering::SeqCst) && self.holds_slow(slot)
    }

    #[cold]
    fn holds_slow(&self, slot: u16) -> bool {
        let mut held = self.held.lock();
        match held.as_ref() {
            Some(h) if Instant::now() < h.until => h.slots[usize::from(slot)],
            _ => {
                *held = None;
                self.open.store(false, Ordering::Release);
                false
            }
        }
    }

    /// Whether any slot is held now (an expired window is closed here).
    pub fn is_open(&self) -> bool {
        if !self.open.load(Ordering::SeqCst) {
            return false;
        }
        let mut held = self.held.lock();
        if held.as_ref().is_some_and(|h| Instant::now() < h.until) {
            return true;
        }
        *held = None;
        self.open.store(false, Ordering::Release);
        false
    }

    /// Whether any slot of `ranges` is held now.
    pub fn holds_any(&self, ranges: &[(u16, u16)]) -> bool {
        ranges.iter().any(|&(a, b)| (a..=b).any(|s| self.holds(s)))
    }

    /// Lets `ranges` go; the window closes when nothing is held.
    pub fn release(&self, ranges: &[(u16, u16)]) {
        let mut held = self.held.lock();
        if let Some(h) = held.as_mut() {
            for &(a, b) in ranges {
                h.slots[usize::from(a)..=usize::from(b)].fill(false);
            }
            if h.slots.iter().all(|s| !s) {
                *held = None;
                self.open.store(false, Ordering::Release);
            }
        }
    }

    /// Lets every slot go.
    pub fn close(&self) {
        self.open.store(false, Ordering::Release);
        *self.held.lock() = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn holds_until_released_or_expired() {
        let w = SlotWindow::default();
        assert!(!w.holds(5));
        let later = Instant::now() + Duration::from_secs(60);
        w.open([(0, 9), (100, 100)], later);
        assert!(w.holds(0) && w.holds(9) && w.holds(100));
        assert!(!w.holds(10) && !w.holds(99));
        assert!(w.holds_any(&[(50, 100)]));
        w.release(&[(0, 9)]);
        assert!(!w.holds(3) && w.holds(100));
        w.release(&[(100, 100)]);
        assert!(!w.holds(100));
        w.open([(7, 7)], Instant::now());
        assert!(!w.holds(7), "an expired window holds nothing");
        w.replace(&[(1, 2)], later);
        w.close();
        assert!(!w.holds(1));
    }
}
