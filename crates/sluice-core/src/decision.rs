//! The answer to one check: the five fields of an `RL.CHECK` reply.

use crate::Nanos;

/// `[allowed, limit, remaining, retry_after_ms, reset_after_ms]` before unit conversion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    /// The capacity this decision used.
    pub limit: u64,
    /// Whole units left after this request.
    pub remaining: u64,
    /// `None` when allowed (LEAKY: `Some(wait)` even when allowed); else the time until this same
    /// request would be allowed.
    pub retry_after: Option<Nanos>,
    /// Time until the key is back to its fresh state. Zero means the key is fresh now and need
    /// not be stored.
    pub reset_after: Nanos,
}

impl Decision {
    /// `retry_after_ms` as replied: -1 for `None`, else milliseconds rounded up.
    pub fn retry_after_ms(&self) -> i64 {
        match self.retry_after {
            None => -1,
            Some(t) => t.as_millis_ceil().min(i64::MAX as u64) as i64,
        }
    }

    /// `reset_after_ms` as replied: milliseconds rounded up.
    pub fn reset_after_ms(&self) -> i64 {
        self.reset_after.as_millis_ceil().min(i64::MAX as u64) as i64
    }
}
