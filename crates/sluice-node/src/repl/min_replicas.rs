//! `min-replicas-to-write` and `min-replicas-max-lag`, with Redis's meaning: a primary that has
//! not heard an ack from at least N replicas within the last S seconds refuses every write with
//! `-NOREPLICAS`. A primary cut off from its replicas (a partition that leaves it reachable by
//! some clients) thus stops granting quota within S seconds, instead of granting it a second
//! time beside the replica Sentinel promoted. Off while either setting is 0, as in Redis.
//!
//! The write path reads one flag; the replication thread recomputes it every
//! [`REFRESH_EVERY`], and on every ack, attach, detach, role change and CONFIG SET.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// How often the good replicas are counted again: bounds how late a primary notices that its
/// replicas went quiet, on top of the lag itself.
pub const REFRESH_EVERY: Duration = Duration::from_millis(100);

/// The settings and what they decide, shared by the write path and the replication thread.
#[derive(Debug)]
pub struct MinReplicas {
    to_write: AtomicU64,
    max_lag_secs: AtomicU64,
    /// Replicas online that acked within the lag, as of the last refresh.
    good: AtomicU64,
    /// True when writes must answer `-NOREPLICAS`.
    refuse: AtomicBool,
}

impl MinReplicas {
    pub fn new(to_write: u64, max_lag_secs: u64) -> MinReplicas {
        MinReplicas {
            to_write: AtomicU64::new(to_write),
            max_lag_secs: AtomicU64::new(max_lag_secs),
            good: AtomicU64::new(0),
            refuse: AtomicBool::new(false),
        }
    }

    /// True when writes must answer `-NOREPLICAS`: one relaxed load on the write path.
    #[inline]
    pub fn refuses_writes(&self) -> bool {
        self.refuse.load(Relaxed)
    }

    pub fn to_write(&self) -> u64 {
        self.to_write.load(Relaxed)
    }

    pub fn max_lag_secs(&self) -> u64 {
        self.max_lag_secs.load(Relaxed)
    }

    pub fn set_to_write(&self, n: u64) {
        self.to_write.store(n, Relaxed);
    }

    pub fn set_max_lag_secs(&self, secs: u64) {
        self.max_lag_secs.store(secs, Relaxed);
    }

    /// Whether the guard is on (both settings above 0), as Redis decides it.
    pub fn enabled(&self) -> bool {
        self.to_write() > 0 && self.max_lag_secs() > 0
    }

    /// The good replicas as of the last refresh (INFO `min_slaves_good_slaves`).
    pub fn good(&self) -> u64 {
        self.good.load(Relaxed)
    }

    /// Counts the good replicas among `acks` (each replica's online state and last ack) at
    /// `now`, and decides whether writes are refused. A replica never refuses here: its own
    /// role already decides its writes.
    pub fn refresh(
        &self,
        primary: bool,
        acks: impl Iterator<Item = (bool, Instant)>,
        now: Instant,
    ) {
        let lag = Duration::from_secs(self.max_lag_secs());
        let good = acks
            .filter(|&(online, last_ack)| online && now.saturating_duration_since(last_ack) <= lag)
            .count() as u64;
        self.good.store(good, Relaxed);
        self.refuse
            .store(primary && self.enabled() && good < self.to_write(), Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_with_too_few_recent_acks() {
        let m = MinReplicas::new(2, 2);
        let now = Instant::now() + Duration::from_secs(10);
        let fresh = now - Duration::from_millis(500);
        let stale = now - Duration::from_millis(2_100);
        m.refresh(true, [(true, fresh), (true, stale)].into_iter(), now);
        assert_eq!(m.good(), 1);
        assert!(m.refuses_writes());
        m.refresh(true, [(true, fresh), (true, fresh)].into_iter(), now);
        assert!(!m.refuses_writes());
        // Not yet online (still syncing): not good.
        m.refresh(true, [(true, fresh), (false, fresh)].into_iter(), now);
        assert!(m.refuses_writes());
        // A replica decides nothing here.
        m.refresh(false, std::iter::empty(), now);
        assert!(!m.refuses_writes());
    }

    #[test]
    fn off_while_either_setting_is_zero() {
        let now = Instant::now();
        for (n, lag) in [(0, 10), (1, 0), (0, 0)] {
            let m = MinReplicas::new(n, lag);
            m.refresh(true, std::iter::empty(), now);
            assert!(!m.refuses_writes(), "{n} {lag}");
        }
        let m = MinReplicas::new(0, 10);
        m.set_to_write(1);
        m.refresh(true, std::iter::empty(), now);
        assert!(m.refuses_writes());
    }
}
