//! One monotonic clock per process, anchored to Unix time at start.
//!
//! Readings are integer nanoseconds since the Unix epoch that never go backwards, even when the
//! wall clock is stepped: limiter state stores absolute instants (replication carries them), so
//! they must be comparable across the life of the process. The algorithms never read a clock;
//! the connection loop reads this one once per batch of requests.
//!
//! A wall-clock step after start changes nothing here, so it can neither refill a bucket nor
//! freeze one. Two processes' clocks can still disagree (their anchors were taken at
//! different times of a wall clock that moved); what one node sends another is moved onto the
//! receiver's clock (`repl::skew`), and a snapshot saved under a clock ahead of this one counts
//! as saved now (`persist::load`).

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
        let anchor = Nanos(since_epoch.as_nanos().min(u64::MAX as u128) as u64);
        Clock {
            anchor: anchor.shifted(test_offset_ns()),
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

/// For tests of nodes whose clocks disagree: `SLUICE_CLOCK_OFFSET_MS` moves this process's
/// clock by that many milliseconds (either way), as a wall clock set wrong would at start.
fn test_offset_ns() -> i64 {
    std::env::var("SLUICE_CLOCK_OFFSET_MS")
        .ok()
        .and_then(|v| v.trim().parse::<i64>().ok())
        .map_or(0, |ms| ms.saturating_mul(1_000_000))
}
