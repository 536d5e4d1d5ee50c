//! LEASES: how many requests of one key are in flight at once (`RL.ACQUIRE`, `RL.RELEASE`,
//! `RL.RENEW`).
//!
//! # Model
//! A key holds up to `max` leases, each an id and the instant it expires. An acquire first drops
//! the expired leases, then takes a new one if fewer than `max` are left. A lease nobody
//! releases ends by itself at its expiry, so a crashed gateway holds its slots for one `ttl` at
//! most. The key is fresh (not stored) when it holds no live lease; its deadline is the latest
//! expiry.
//!
//! # Lease ids
//! An id is `max(now, newest id + 1)` in nanoseconds: ids of one key only grow while it holds
//! a lease, and a key that emptied starts again from the clock, which has moved past every id
//! it gave before (the server reads the clock once per read batch, so a batch that empties a key
//! and acquires on it again may give an id out twice: a release of the first lease after that
//! point then ends the second). After a failover the new primary's clock keeps to the same
//! scale, so an id given by the old primary and lost with the replication lag is not handed out
//! again except by the same nanosecond.
//!
//! # Storage
//! A [`LeaseSet`]: one boxed slice of `u64`, element 0 the number of leases, then (id, expiry)
//! pairs in id order. It grows by doubling up to the key's `max` and shrinks when a quarter
//! full, so a key costs 16 bytes a lease plus the header. `max` is capped at [`LEASE_MAX`]:
//! every operation scans the set under the shard lock.

use crate::{CheckError, Nanos};

/// The longest `ttl` a lease may have: a lease outliving its gateway by more is a leak, and
/// work that runs longer renews.
pub const LEASE_TTL_MAX: Nanos = Nanos::from_secs(86_400);

/// `max` as `RL.ACQUIRE` takes it: an integer from 1 to [`LEASE_MAX`]; the error names both.
pub fn parse_max(arg: &[u8]) -> Result<u64, String> {
    crate::spec::positive(arg)
        .filter(|&m| m <= LEASE_MAX)
        .ok_or_else(|| format!("ERR max must be an integer from 1 to {LEASE_MAX}"))
}

/// `ttl` as `RL.ACQUIRE` and `RL.RENEW` take it: a duration as `period` is, at most a day.
pub fn parse_ttl(arg: &[u8]) -> Result<Nanos, &'static str> {
    match crate::spec::parse_period(arg) {
        Ok(t) if t <= LEASE_TTL_MAX => Ok(t),
        Ok(_) | Err(crate::spec::PeriodError::Overflow) => {
            Err("ERR ttl must be at most 1 day (86400s); renew for longer work")
        }
        Err(crate::spec::PeriodError::Format) => Err(
            "ERR ttl must be a positive number of seconds or a duration such as 500ms, 10s, 1m, 1h or 1d",
        ),
    }
}

/// The largest `max` an acquire accepts: each lease is 16 bytes of state and every operation
/// scans the key's leases (160 KB and some microseconds at this bound).
pub const LEASE_MAX: u64 = 10_000;

/// The leases of one key. See the module docs. Two sets are equal when they hold the same
/// leases, whatever room either has to grow.
#[derive(Clone, Debug)]
pub struct LeaseSet {
    buf: Box<[u64]>,
}

impl PartialEq for LeaseSet {
    fn eq(&self, other: &LeaseSet) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for LeaseSet {}

/// The answer to one acquire: `[allowed, max, in_flight, retry_after_ms, lease_id | nil]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Acquire {
    pub allowed: bool,
    pub max: u64,
    /// Live leases after this acquire.
    pub in_flight: u64,
    /// When denied: the time until the earliest lease expires.
    pub retry_after: Option<Nanos>,
    /// The new lease, when allowed.
    pub lease_id: Option<u64>,
}

impl Acquire {
    /// `retry_after_ms` as replied: -1 when allowed, else milliseconds rounded up.
    pub fn retry_after_ms(&self) -> i64 {
        self.retry_after
            .map_or(-1, |t| t.as_millis_ceil().min(i64::MAX as u64) as i64)
    }
}

impl LeaseSet {
    fn with_capacity(capacity: usize) -> LeaseSet {
        LeaseSet {
            buf: vec![0; 1 + 2 * capacity].into_boxed_slice(),
        }
    }

    /// How many leases the set holds, live or not yet pruned.
    pub fn len(&self) -> usize {
        self.buf[0] as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn capacity(&self) -> usize {
        (self.buf.len() - 1) / 2
    }

    fn id(&self, i: usize) -> u64 {
        self.buf[1 + 2 * i]
    }

    fn expiry(&self, i: usize) -> Nanos {
        Nanos(self.buf[2 + 2 * i])
    }

    /// (id, expiry) pairs in id order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, Nanos)> + '_ {
        (0..self.len()).map(|i| (self.id(i), self.expiry(i)))
    }

    /// A set holding `leases`, as a snapshot or a replication record carries it. `None` unless
    /// the ids are strictly increasing and there are at most [`LEASE_MAX`] of them.
    pub fn from_leases(leases: &[(u64, Nanos)]) -> Option<LeaseSet> {
        if leases.len() as u64 > LEASE_MAX || leases.windows(2).any(|w| w[0].0 >= w[1].0) {
            return None;
        }
        let mut set = LeaseSet::with_capacity(leases.len().max(1));
        for &(id, expiry) in leases {
            set.push(id, expiry);
        }
        Some(set)
    }

    /// Bytes owned on the heap, for memory accounting.
    pub fn heap_bytes(&self) -> usize {
        self.buf.len() * size_of::<u64>()
    }

    /// The instant the last lease expires: the key is fresh from then on.
    pub fn deadline(&self) -> Nanos {
        self.iter().map(|(_, e)| e).max().unwrap_or(Nanos::ZERO)
    }

    fn set_len(&mut self, len: usize) {
        self.buf[0] = len as u64;
    }

    /// Appends a lease; grows the buffer by doubling when full.
    fn push(&mut self, id: u64, expiry: Nanos) {
        let len = self.len();
        if len == self.capacity() {
            let mut grown = LeaseSet::with_capacity((2 * len).max(1));
            grown.buf[..self.buf.len()].copy_from_slice(&self.buf);
            *self = grown;
        }
        self.buf[1 + 2 * len] = id;
        self.buf[2 + 2 * len] = expiry.0;
        self.set_len(len + 1);
    }

    /// Drops every lease expired at `now`, keeping id order; shrinks a set left a quarter full.
    fn prune(&mut self, now: Nanos) {
        let mut kept = 0;
        for i in 0..self.len() {
            let (id, expiry) = (self.id(i), self.expiry(i));
            if expiry > now {
                self.buf[1 + 2 * kept] = id;
                self.buf[2 + 2 * kept] = expiry.0;
                kept += 1;
            }
        }
        self.set_len(kept);
        self.shrink();
    }

    fn shrink(&mut self) {
        let len = self.len();
        if len > 0 && len * 4 <= self.capacity() {
            let mut small = LeaseSet::with_capacity(len * 2);
            small.buf.copy_from_slice(&self.buf[..1 + 4 * len]);
            *self = small;
        }
    }

    fn position(&self, id: u64) -> Option<usize> {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.id(mid).cmp(&id) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(mid),
            }
        }
        None
    }

    fn remove(&mut self, i: usize) {
        let len = self.len();
        self.buf
            .copy_within(1 + 2 * (i + 1)..1 + 2 * len, 1 + 2 * i);
        self.set_len(len - 1);
        self.shrink();
    }
}

/// Leaves `set` `None` when it holds no lease (the key is fresh).
fn settle_empty(set: &mut Option<LeaseSet>) {
    if set.as_ref().is_some_and(LeaseSet::is_empty) {
        *set = None;
    }
}

/// `RL.ACQUIRE`: takes a lease of `ttl` if fewer than `max` are live at `now`. Expired leases
/// are dropped first. A key that holds more live leases than a lowered `max` keeps them
/// (grandfathered) and admits nothing until it is under the new `max`.
pub fn acquire(
    set: &mut Option<LeaseSet>,
    max: u64,
    ttl: Nanos,
    now: Nanos,
) -> Result<Acquire, CheckError> {
    if max > LEASE_MAX {
        return Err(CheckError::LimitTooLarge { max: LEASE_MAX });
    }
    if let Some(s) = set.as_mut() {
        s.prune(now);
    }
    let live = set.as_ref().map_or(0, LeaseSet::len) as u64;
    if live >= max {
        let s = set.as_ref().expect("max ≥ 1, so a denial has live leases");
        let earliest = s.iter().map(|(_, e)| e).min().unwrap_or(now);
        return Ok(Acquire {
            allowed: false,
            max,
            in_flight: live,
            retry_after: Some(earliest.saturating_sub(now)),
            lease_id: None,
        });
    }
    let s = set.get_or_insert_with(|| LeaseSet::with_capacity(1));
    let newest = s.len().checked_sub(1).map(|i| s.id(i));
    let id = newest.map_or(now.0, |n| now.0.max(n.saturating_add(1)));
    s.push(id, now.saturating_add(ttl));
    Ok(Acquire {
        allowed: true,
        max,
        in_flight: live + 1,
        retry_after: None,
        lease_id: Some(id),
    })
}

/// `RL.RELEASE`: ends lease `id`; false if the key holds no live lease by that id.
pub fn release(set: &mut Option<LeaseSet>, id: u64, now: Nanos) -> bool {
    let Some(s) = set.as_mut() else {
        return false;
    };
    s.prune(now);
    let found = s.position(id).map(|i| s.remove(i)).is_some();
    settle_empty(set);
    found
}

/// `RL.RENEW`: lease `id` now expires `ttl` after `now` (longer or shorter than before); false
/// if the key holds no live lease by that id.
pub fn renew(set: &mut Option<LeaseSet>, id: u64, ttl: Nanos, now: Nanos) -> bool {
    let Some(s) = set.as_mut() else {
        return false;
    };
    s.prune(now);
    let found = match s.position(id) {
        Some(i) => {
            s.buf[2 + 2 * i] = now.saturating_add(ttl).0;
            true
        }
        None => false,
    };
    settle_empty(set);
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Nanos = Nanos(1_780_000_000_000_000_000);
    const SEC: u64 = 1_000_000_000;

    fn at(s: u64) -> Nanos {
        T0.saturating_add(Nanos(s * SEC))
    }

    #[test]
    fn holds_max_and_says_when_the_first_expires() {
        let mut set = None;
        let ttl = Nanos::from_secs(10);
        let a = acquire(&mut set, 2, ttl, at(0)).unwrap();
        let b = acquire(&mut set, 2, ttl, at(1)).unwrap();
        assert!(a.allowed && b.allowed);
        assert_eq!((a.in_flight, b.in_flight), (1, 2));
        assert!(b.lease_id > a.lease_id);
        let c = acquire(&mut set, 2, ttl, at(3)).unwrap();
        assert!(!c.allowed && c.lease_id.is_none());
        assert_eq!(c.retry_after, Some(Nanos::from_secs(7)));
        assert_eq!(c.retry_after_ms(), 7000);
        // The first lease expires at 10 s, not a nanosecond before.
        assert!(
            !acquire(&mut set, 2, ttl, Nanos(at(10).0 - 1))
                .unwrap()
                .allowed
        );
        assert!(acquire(&mut set, 2, ttl, at(10)).unwrap().allowed);
    }

    #[test]
    fn release_and_renew_by_id() {
        let mut set = None;
        let ttl = Nanos::from_secs(10);
        let a = acquire(&mut set, 3, ttl, at(0)).unwrap().lease_id.unwrap();
        let b = acquire(&mut set, 3, ttl, at(0)).unwrap().lease_id.unwrap();
        assert_eq!(b, a + 1, "ids in one batch still differ");
        assert!(renew(&mut set, a, Nanos::from_secs(100), at(5)));
        assert!(!renew(&mut set, 12345, ttl, at(5)));
        assert!(release(&mut set, b, at(5)));
        assert!(!release(&mut set, b, at(5)), "twice");
        assert_eq!(set.as_ref().unwrap().deadline(), at(105));
        // Past its first ttl, the renewed lease still holds.
        assert!(release(&mut set, a, at(50)));
        assert!(set.is_none(), "an empty key is fresh");
        assert!(!release(&mut set, a, at(50)));
    }

    #[test]
    fn expired_leases_cannot_be_released_or_renewed() {
        let mut set = None;
        let id = acquire(&mut set, 1, Nanos::from_secs(1), at(0))
            .unwrap()
            .lease_id
            .unwrap();
        assert!(!renew(&mut set, id, Nanos::from_secs(1), at(1)));
        assert!(set.is_none());
        let id = acquire(&mut set, 1, Nanos::from_secs(1), at(2))
            .unwrap()
            .lease_id
            .unwrap();
        assert!(!release(&mut set, id, at(3)));
    }

    #[test]
    fn lowered_max_keeps_leases_and_admits_nothing_until_under_it() {
        let mut set = None;
        let ttl = Nanos::from_secs(10);
        let ids: Vec<u64> = (0..4)
            .map(|_| acquire(&mut set, 4, ttl, at(0)).unwrap().lease_id.unwrap())
            .collect();
        let d = acquire(&mut set, 2, ttl, at(1)).unwrap();
        assert!(!d.allowed);
        assert_eq!(d.in_flight, 4);
        release(&mut set, ids[0], at(1));
        release(&mut set, ids[1], at(1));
        assert!(!acquire(&mut set, 2, ttl, at(1)).unwrap().allowed);
        release(&mut set, ids[2], at(1));
        assert!(acquire(&mut set, 2, ttl, at(1)).unwrap().allowed);
    }

    #[test]
    fn max_is_capped() {
        let mut set = None;
        assert_eq!(
            acquire(&mut set, LEASE_MAX + 1, Nanos::from_secs(1), at(0)),
            Err(CheckError::LimitTooLarge { max: LEASE_MAX })
        );
        assert!(set.is_none());
    }

    #[test]
    fn grows_and_shrinks_with_its_leases() {
        let mut set = None;
        let ttl = Nanos::from_secs(10);
        let ids: Vec<u64> = (0..100)
            .map(|_| {
                acquire(&mut set, 100, ttl, at(0))
                    .unwrap()
                    .lease_id
                    .unwrap()
            })
            .collect();
        let big = set.as_ref().unwrap().heap_bytes();
        assert!(big >= 100 * 16);
        for id in &ids[..95] {
            assert!(release(&mut set, *id, at(1)));
        }
        let s = set.as_ref().unwrap();
        assert!(s.heap_bytes() < big / 4);
        let kept: Vec<u64> = s.iter().map(|(id, _)| id).collect();
        assert_eq!(kept, ids[95..]);
        assert_eq!(
            LeaseSet::from_leases(&s.iter().collect::<Vec<_>>()).as_ref(),
            Some(s)
        );
    }

    #[test]
    fn from_leases_refuses_unordered_ids() {
        assert!(LeaseSet::from_leases(&[(2, at(1)), (1, at(1))]).is_none());
        assert!(LeaseSet::from_leases(&[(1, at(1)), (1, at(1))]).is_none());
        assert!(LeaseSet::from_leases(&[]).is_some());
    }
}
