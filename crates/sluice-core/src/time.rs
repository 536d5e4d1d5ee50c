//! Integer nanoseconds: both instants (since the Unix epoch, from the server's anchored monotonic
//! clock) and durations. Arithmetic saturates instead of overflowing: 2^64 ns is 584 years.

/// Nanoseconds. An instant (since the Unix epoch) or a duration, by context.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Nanos(pub u64);

impl Nanos {
    pub const ZERO: Nanos = Nanos(0);
    pub const MAX: Nanos = Nanos(u64::MAX);
    pub const PER_MS: u64 = 1_000_000;
    pub const PER_SEC: u64 = 1_000_000_000;

    pub const fn from_millis(ms: u64) -> Nanos {
        Nanos(ms.saturating_mul(Self::PER_MS))
    }
    pub const fn from_secs(s: u64) -> Nanos {
        Nanos(s.saturating_mul(Self::PER_SEC))
    }
    pub const fn as_nanos(self) -> u64 {
        self.0
    }
    pub const fn saturating_add(self, other: Nanos) -> Nanos {
        Nanos(self.0.saturating_add(other.0))
    }
    pub const fn saturating_sub(self, other: Nanos) -> Nanos {
        Nanos(self.0.saturating_sub(other.0))
    }
    /// This instant moved by `by` nanoseconds, saturating; `MAX` (no deadline) stays `MAX`.
    /// For an instant written under another process's clock (see the node's `clock`).
    pub const fn shifted(self, by: i64) -> Nanos {
        if self.0 == u64::MAX {
            self
        } else if by >= 0 {
            self.saturating_add(Nanos(by as u64))
        } else {
            self.saturating_sub(Nanos(by.unsigned_abs()))
        }
    }
    /// Whole milliseconds, rounded up: a client told to wait this long will not be early.
    pub const fn as_millis_ceil(self) -> u64 {
        self.0.div_ceil(Self::PER_MS)
    }
    pub const fn as_millis_floor(self) -> u64 {
        self.0 / Self::PER_MS
    }
    /// Whole seconds, rounded up (redis-cell's and Redis GCRA's reply unit).
    pub const fn as_secs_ceil(self) -> u64 {
        self.0.div_ceil(Self::PER_SEC)
    }
}
