//! LOG: the exact sliding log. Every admitted unit is one timestamp; an entry made at `t` counts
//! while `t + period > now`. A request of cost `c` is allowed iff `live + c ≤ limit`, and then
//! adds `c` entries at `now`.
//!
//! # Storage
//! A [`LogRing`]: one boxed slice per key, holding `limit` timestamps in a ring, oldest first
//! (timestamps never go backwards: an entry is stamped `max(now, newest)`, so the ring stays
//! sorted and the expired prefix is found by binary search). Memory grows with `limit`, so
//! `limit` is capped at [`LOG_LIMIT_MAX`]. A ring holds between `limit` and `2·limit`
//! timestamps: past `limit` is a debt `RL.SETTLE` charged (see [`settle`]), and a key called
//! with a lowered `limit` keeps its newest `2·limit` entries (grandfathered, capped).
//!
//! # Invariants
//! - No allocation on the check path except creating a key's ring (and rebuilding it when a key
//!   is called with a new `limit`, which keeps the newest `min(live, 2·limit)` entries:
//!   grandfathered and capped).
//! - `dry` and `COST 0` read without touching the ring (not even pruning).
//! - `retry_after` is when the oldest entries that must go have expired; `reset_after` is when
//!   the newest has.

use crate::token::sat;
use crate::{CheckError, Decision, Nanos, Params};

/// The largest `limit` LOG accepts: one 8-byte timestamp is kept per unit (80 KB per key at most).
pub const LOG_LIMIT_MAX: u64 = 10_000;

/// A LOG key's timestamps: a ring in one allocation. Element 0 packs the ring's head (low 32
/// bits) and length (high 32 bits), so that the whole key is one boxed slice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogRing {
    buf: Box<[u64]>,
}

impl LogRing {
    fn with_capacity(capacity: usize) -> LogRing {
        LogRing {
            buf: vec![0; capacity + 1].into_boxed_slice(),
        }
    }

    /// How many timestamps the ring can hold (the `limit` it was made for).
    pub fn capacity(&self) -> usize {
        self.buf.len() - 1
    }

    /// How many timestamps the ring holds, live or not yet pruned.
    pub fn len(&self) -> usize {
        (self.buf[0] >> 32) as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn head(&self) -> usize {
        (self.buf[0] & u64::from(u32::MAX)) as usize
    }

    fn set(&mut self, head: usize, len: usize) {
        self.buf[0] = (head as u64) | ((len as u64) << 32);
    }

    /// The `i`-th oldest timestamp.
    fn get(&self, i: usize) -> Nanos {
        Nanos(self.buf[1 + (self.head() + i) % self.capacity()])
    }

    /// A ring for `limit` units holding `timestamps` (oldest first), as a snapshot or a
    /// replication record carries it. `None` if they do not fit or are not in order, or if the
    /// capacity is outside `1..=LOG_LIMIT_MAX`.
    pub fn from_timestamps(capacity: usize, timestamps: &[Nanos]) -> Option<LogRing> {
        if capacity == 0
            || capacity as u64 > 2 * LOG_LIMIT_MAX
            || timestamps.len() > capacity
            || timestamps.windows(2).any(|w| w[0] > w[1])
        {
            return None;
        }
        let mut ring = LogRing::with_capacity(capacity);
        for &t in timestamps {
            ring.push(t, 1);
        }
        Some(ring)
    }

    /// Timestamps, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = Nanos> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }

    /// Bytes owned on the heap, for memory accounting.
    pub fn heap_bytes(&self) -> usize {
        self.buf.len() * size_of::<u64>()
    }

    fn drop_newest(&mut self, n: usize) {
        let (head, len) = (self.head(), self.len());
        let left = len - n.min(len);
        self.set(if left == 0 { 0 } else { head }, left);
    }

    fn drop_oldest(&mut self, n: usize) {
        let (head, len) = (self.head(), self.len());
        let n = n.min(len);
        if n == len {
            self.set(0, 0);
        } else {
            self.set((head + n) % self.capacity(), len - n);
        }
    }

    /// Appends `n` copies of `t`; the caller has made room.
    fn push(&mut self, t: Nanos, n: usize) {
        let (head, len, cap) = (self.head(), self.len(), self.capacity());
        debug_assert!(len + n <= cap);
        for i in 0..n {
            self.buf[1 + (head + len + i) % cap] = t.0;
        }
        self.set(head, len + n);
    }

    /// Index of the first timestamp still live at `now` (binary search: the ring is sorted).
    fn first_live(&self, period: u128, now: Nanos) -> usize {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if u128::from(self.get(mid).0) + period > u128::from(now.0) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo
    }
}

/// LOG: one check against `ring` (`None` = fresh key), changing it in place unless `dry` (or
/// `COST 0`). Errors change nothing. After a committed check `ring` is `None` iff no entry is
/// live.
pub fn check(
    ring: &mut Option<LogRing>,
    params: &Params,
    now: Nanos,
    dry: bool,
) -> Result<Decision, CheckError> {
    let limit = params.limit;
    if limit > LOG_LIMIT_MAX {
        return Err(CheckError::LimitTooLarge { max: LOG_LIMIT_MAX });
    }
    if params.cost > limit {
        return Err(CheckError::CostExceedsCapacity);
    }
    // Both ≤ LOG_LIMIT_MAX from here on.
    let (limit_n, cost) = (limit as usize, params.cost as usize);
    let p = u128::from(params.period.0.max(1));
    let (len, start) = match ring.as_ref() {
        None => (0, 0),
        // Entries beyond the newest `limit` are dropped: a lowered limit caps the state.
        Some(r) => (
            r.len(),
            r.first_live(p, now)
                .max(r.len().saturating_sub(2 * limit_n)),
        ),
    };
    let live = len - start;
    let newest = ring.as_ref().filter(|_| live > 0).map(|r| r.get(len - 1));
    let expiry = |t: Nanos| sat(u128::from(t.0) + p).saturating_sub(now);
    // COST 0 only reads: allowed even in debt, as for every algorithm.
    let allowed = cost == 0 || live + cost <= limit_n;
    let stamp = newest.map_or(now, |t| t.max(now));
    let decision = if allowed {
        let newest_after = if cost > 0 { Some(stamp) } else { newest };
        Decision {
            allowed,
            limit,
            remaining: limit_n.saturating_sub(live + cost) as u64,
            retry_after: None,
            reset_after: newest_after.map_or(Nanos::ZERO, expiry),
        }
    } else {
        // The oldest `live + cost − limit` entries must expire first (1 ≤ that ≤ live).
        let must_go = live + cost - limit_n;
        let r = ring.as_ref().expect("denied implies live entries");
        Decision {
            allowed,
            limit,
            remaining: limit_n.saturating_sub(live) as u64,
            retry_after: Some(expiry(r.get(start + must_go - 1))),
            reset_after: newest.map_or(Nanos::ZERO, expiry),
        }
    };
    if dry || cost == 0 {
        return Ok(decision);
    }
    let mut r = live_ring(ring.take(), start, limit_n, live);
    if allowed {
        r.push(stamp, cost);
    }
    *ring = (!r.is_empty()).then_some(r);
    Ok(decision)
}

/// `old`'s live entries (from index `start`) in a ring of `capacity` between `limit_n` and
/// `2·limit_n`: the same ring when its capacity is in that range and holds `want` entries,
/// else a new one.
fn live_ring(old: Option<LogRing>, start: usize, limit_n: usize, want: usize) -> LogRing {
    match old {
        Some(mut r) if (limit_n.max(want)..=2 * limit_n).contains(&r.capacity()) => {
            r.drop_oldest(start);
            r
        }
        old => {
            let mut fresh = LogRing::with_capacity(limit_n.max(want));
            if let Some(old) = old {
                for i in start..old.len() {
                    fresh.push(old.get(i), 1);
                }
            }
            fresh
        }
    }
}

/// LOG `RL.SETTLE`: giving back removes the newest entries (never more than are live); an
/// extra charge adds entries stamped as a check's would be, until `2·limit` are live (one limit
/// of debt, paid off as the entries expire).
pub fn settle(
    ring: &mut Option<LogRing>,
    params: &Params,
    reserved: u64,
    actual: u64,
    now: Nanos,
) -> Result<Decision, CheckError> {
    let limit = params.limit;
    if limit > LOG_LIMIT_MAX {
        return Err(CheckError::LimitTooLarge { max: LOG_LIMIT_MAX });
    }
    let limit_n = limit as usize;
    let p = u128::from(params.period.0.max(1));
    let (len, start) = ring.as_ref().map_or((0, 0), |r| {
        (
            r.len(),
            r.first_live(p, now)
                .max(r.len().saturating_sub(2 * limit_n)),
        )
    });
    let live = len - start;
    let live_after = if actual >= reserved {
        // Both sides ≤ 2·LOG_LIMIT_MAX once capped.
        live + (actual - reserved).min((2 * limit_n - live) as u64) as usize
    } else {
        live - (reserved - actual).min(live as u64) as usize
    };
    let mut r = live_ring(ring.take(), start, limit_n, live_after.max(live));
    if live_after > live {
        let newest = r.len().checked_sub(1).map(|i| r.get(i));
        r.push(newest.map_or(now, |t| t.max(now)), live_after - live);
    } else {
        r.drop_newest(live - live_after);
    }
    let expiry = |t: Nanos| sat(u128::from(t.0) + p).saturating_sub(now);
    let allowed = live_after <= limit_n;
    let decision = Decision {
        allowed,
        limit,
        remaining: limit_n.saturating_sub(live_after) as u64,
        // Past the limit: a request of cost 1 fits once the oldest `live_after − limit + 1`
        // entries have expired.
        retry_after: (!allowed).then(|| expiry(r.get(live_after - limit_n))),
        reset_after: r
            .len()
            .checked_sub(1)
            .map_or(Nanos::ZERO, |i| expiry(r.get(i))),
    };
    *ring = (!r.is_empty()).then_some(r);
    Ok(decision)
}
