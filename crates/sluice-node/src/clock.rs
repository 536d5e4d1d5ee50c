//! One monotonic clock per process, anchored to Unix time at start.
//!
//! Readings are integer nanoseconds since the Unix epoch that never go backwards, even when the
//! wall clock is stepped: limiter state stores absolute instants (replication carries them), so
//! they must be comparable across the life of the process. The algorithms never read a clock;
//! the connection loop reads this one once per batch of requests.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use sluice_core::Nanos;

/// The process clock. Cheap to read (one `clock_gettime` through the vDSO).
#[derive(Debug)]
pub struct Clock {
    anchor: Nanos,
    start: Instant,
}

impl Clock {
    pub fn new() -> Clock {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Clock {
            anchor: Nanos(since_epoch.as_nanos().min(u64::MAX as u128) as u64),
            start: Instant::now(),
        }
    }

    /// Now, in nanoseconds since the Unix epoch.
    pub fn now(&self) -> Nanos {
        self.at(Instant::now())
    }

    /// The reading for `instant`, for a caller that has already read the monotonic clock.
    pub fn at(&self, instant: Instant) -> Nanos {
        let elapsed = instant.saturating_duration_since(self.start).as_nanos();
        self.anchor
            .saturating_add(Nanos(elapsed.min(u64::MAX as u128) as u64))
    }

    /// Seconds since the process started (INFO `uptime_in_seconds`).
    pub fn uptime_secs(&self) -> u64 {
        self.start.elapsed().as_secs()
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}
