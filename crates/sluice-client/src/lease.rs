//! In-flight leases from a gateway: [`Client::acquire`] takes one of a key's `max` slots with
//! `RL.ACQUIRE`, and the [`Lease`] it returns gives the slot back with `RL.RELEASE` when it is
//! dropped (or [`Lease::release`]d), so a request that ends by any path frees its slot. The
//! sidecar, which hands lease ids to its own clients, uses the same path without the guard
//! ([`Client::acquire_id`], [`Client::release_id`], [`Client::renew_id`]).
//!
//! When the node cannot answer (down, timed out, or `NOREPLICAS`/`READONLY`/`LOADING`/...), the
//! fail mode decides:
//! - `open` admits with lease id 0, which no node gives (their ids are clock readings); its
//!   release answers 0;
//! - `closed` denies;
//! - `local` takes a slot of an in-process table of `max ÷ gateways` (at least one) leases per
//!   key ([`LocalLeases`]), with the same ttl, release and renew as the node's. Its ids have the
//!   top bit set, so a release or renew finds them here and not on a node. The fleet then holds
//!   at most `gateways × max(max ÷ gateways, 1)` leases of a key during the outage: `max` when
//!   `max` is a multiple of the gateway count, one per gateway when it is smaller.
//!
//! A lease a crashed gateway never releases ends at its `ttl` (on the node, or here).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sluice_core::spec::FailMode;
use sluice_resp::value::Value;

use crate::client::{Client, ReplyError};
use crate::limit::Source;
use crate::node::cannot_answer;

/// The top bit marks a lease of fail mode `local`.
const LOCAL_ID: u64 = 1 << 63;

/// An in-flight limit: at most `max` leases of a key at once, each ending by itself after
/// `ttl` unless released or renewed.
#[derive(Clone, Debug)]
pub struct Concurrency {
    pub max: u64,
    pub ttl: Duration,
    pub fail_mode: FailMode,
    /// Fail mode `local`'s table (shared by every clone, and with whatever else shares it).
    pub local: Arc<LocalLeases>,
}

impl Concurrency {
    /// `max` leases at once, each for `ttl`; fail mode `open`.
    pub fn new(max: u64, ttl: Duration) -> Concurrency {
        Concurrency {
            max,
            ttl,
            fail_mode: FailMode::Open,
            local: Arc::default(),
        }
    }

    pub fn fail_mode(mut self, mode: FailMode) -> Concurrency {
        self.fail_mode = mode;
        self
    }

    /// Fail mode `local` takes its slots from `local` (the sidecar shares one table).
    pub fn local_leases(mut self, local: Arc<LocalLeases>) -> Concurrency {
        self.local = local;
        self
    }

    /// The leases each gateway holds per key in fail mode `local`.
    pub fn local_share(&self, gateways: u32) -> u64 {
        (self.max / u64::from(gateways.max(1))).max(1)
    }
}

/// What an acquire answered: `RL.ACQUIRE`'s fields, and who decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseDecision {
    pub allowed: bool,
    pub max: u64,
    pub in_flight: u64,
    /// When denied: milliseconds until the earliest lease ends (-1 when allowed or unknown).
    pub retry_after_ms: i64,
    pub source: Source,
    /// The lease, when allowed: a node's id, a local one (top bit set), or 0 (fail mode open).
    pub lease_id: Option<u64>,
}

impl LeaseDecision {
    /// The reply `RL.ACQUIRE` gives, for the sidecar: allowed, max, in_flight, retry_after_ms
    /// (the lease id is written apart: an integer or nil).
    pub fn fields(&self) -> [i64; 4] {
        let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        [
            i64::from(self.allowed),
            int(self.max),
            int(self.in_flight),
            self.retry_after_ms,
        ]
    }
}

/// One key's local leases: (id, expiry).
type Leases = Vec<(u64, Instant)>;

/// Fail mode `local`'s leases: per key, (id, expiry) pairs. Bounded by what is held: a key
/// with no live lease is dropped, and expired leases go at the key's next call.
#[derive(Debug, Default)]
pub struct LocalLeases {
    held: Mutex<HashMap<Vec<u8>, Leases>>,
    next: AtomicU64,
}

impl LocalLeases {
    /// One of `share` slots of `key` for `ttl`: the new id, or the time until the earliest
    /// ends; with the live count after.
    pub fn acquire(&self, key: &[u8], share: u64, ttl: Duration) -> (Result<u64, Duration>, u64) {
        let now = Instant::now();
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let leases = held.entry(key.to_vec()).or_default();
        leases.retain(|&(_, end)| end > now);
        if (leases.len() as u64) < share {
            let id = LOCAL_ID | self.next.fetch_add(1, Ordering::Relaxed);
            leases.push((id, now + ttl));
            return (Ok(id), leases.len() as u64);
        }
        let first = leases.iter().map(|&(_, end)| end).min().unwrap_or(now);
        (Err(first - now), leases.len() as u64)
    }

    /// Ends lease `id` of `key`; false if it is not held (never, expired, or released).
    pub fn release(&self, key: &[u8], id: u64) -> bool {
        self.change(key, |leases| {
            let before = leases.len();
            leases.retain(|&(i, _)| i != id);
            leases.len() < before
        })
    }

    /// Lease `id` of `key` now ends `ttl` from now; false if it is not held.
    pub fn renew(&self, key: &[u8], id: u64, ttl: Duration) -> bool {
        self.change(key, |leases| {
            match leases.iter_mut().find(|(i, _)| *i == id) {
                Some(lease) => {
                    lease.1 = Instant::now() + ttl;
                    true
                }
                None => false,
            }
        })
    }

    fn change(&self, key: &[u8], f: impl FnOnce(&mut Leases) -> bool) -> bool {
        let now = Instant::now();
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let Some(leases) = held.get_mut(key) else {
            return false;
        };
        leases.retain(|&(_, end)| end > now);
        let changed = f(leases);
        if leases.is_empty() {
            held.remove(key);
        }
        changed
    }

    /// Keys holding a local lease now (for INFO).
    pub fn keys(&self) -> usize {
        self.held.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// A slot held: released when dropped.
#[derive(Debug)]
pub struct Lease {
    client: Client,
    key: Vec<u8>,
    id: u64,
    local: Arc<LocalLeases>,
    released: bool,
}

impl Client {
    /// `RL.ACQUIRE key max ttl`, and the lease when allowed, as a guard that releases it when
    /// dropped. See the module docs for fail modes. `Err` only for the node's refusal of the
    /// request itself (bad arguments, WRONGTYPE).
    pub async fn acquire(
        &self,
        key: &[u8],
        c: &Concurrency,
    ) -> Result<(LeaseDecision, Option<Lease>), ReplyError> {
        let d = self.acquire_id(key, c).await?;
        let lease = d.lease_id.map(|id| Lease {
            client: self.clone(),
            key: key.to_vec(),
            id,
            local: c.local.clone(),
            released: false,
        });
        Ok((d, lease))
    }

    /// [`Client::acquire`] without the guard: whoever holds the id releases it
    /// ([`Client::release_id`]) or lets it expire.
    pub async fn acquire_id(
        &self,
        key: &[u8],
        c: &Concurrency,
    ) -> Result<LeaseDecision, ReplyError> {
        let max = c.max.to_string();
        let ttl = format!("{}ms", c.ttl.as_millis().max(1));
        let args: [&[u8]; 4] = [b"RL.ACQUIRE", key, max.as_bytes(), ttl.as_bytes()];
        match self.command(key, &args).await {
            Ok(Value::Error(e)) if !cannot_answer(&e) => Err(ReplyError(e)),
            Ok(Value::Array(fields)) => match parse_acquire(&fields) {
                Some(d) => Ok(LeaseDecision {
                    source: self.owner(key).map_or(Source::FailOpen, Source::Node),
                    ..d
                }),
                None => Ok(self.acquire_failed(key, c)),
            },
            _ => Ok(self.acquire_failed(key, c)),
        }
    }

    /// The fail mode's answer when the node cannot answer.
    fn acquire_failed(&self, key: &[u8], c: &Concurrency) -> LeaseDecision {
        let decision = |allowed, in_flight, retry_after_ms, source, lease_id| LeaseDecision {
            allowed,
            max: c.max,
            in_flight,
            retry_after_ms,
            source,
            lease_id,
        };
        match c.fail_mode {
            FailMode::Open => decision(true, 0, -1, Source::FailOpen, Some(0)),
            FailMode::Closed => decision(false, 0, -1, Source::FailClosed, None),
            FailMode::Local => {
                let share = c.local_share(self.config().gateways);
                match c.local.acquire(key, share, c.ttl) {
                    (Ok(id), n) => decision(true, n, -1, Source::LocalBucket, Some(id)),
                    (Err(wait), n) => {
                        let ms = i64::try_from(wait.as_millis()).unwrap_or(i64::MAX).max(1);
                        decision(false, n, ms, Source::LocalBucket, None)
                    }
                }
            }
        }
    }

    /// `RL.RELEASE key id`: true if the lease was held. A local id is released in `local`;
    /// id 0 (fail mode open) was never held.
    pub async fn release_id(&self, key: &[u8], id: u64, local: &LocalLeases) -> bool {
        if id & LOCAL_ID != 0 {
            return local.release(key, id);
        }
        if id == 0 {
            return false;
        }
        let id = id.to_string();
        let args: [&[u8]; 3] = [b"RL.RELEASE", key, id.as_bytes()];
        matches!(self.command(key, &args).await, Ok(Value::Int(1)))
    }

    /// `RL.RENEW key id ttl`: true if the lease was held and now ends `ttl` from now.
    pub async fn renew_id(&self, key: &[u8], id: u64, ttl: Duration, local: &LocalLeases) -> bool {
        if id & LOCAL_ID != 0 {
            return local.renew(key, id, ttl);
        }
        if id == 0 {
            return false;
        }
        let (id, ttl) = (id.to_string(), format!("{}ms", ttl.as_millis().max(1)));
        let args: [&[u8]; 4] = [b"RL.RENEW", key, id.as_bytes(), ttl.as_bytes()];
        matches!(self.command(key, &args).await, Ok(Value::Int(1)))
    }
}

/// `[allowed, max, in_flight, retry_after_ms, lease_id | nil]`.
fn parse_acquire(fields: &[Value]) -> Option<LeaseDecision> {
    let int = |i: usize| match fields.get(i)? {
        Value::Int(n) => Some(*n),
        _ => None,
    };
    let lease_id = match fields.get(4)? {
        Value::Int(n) => Some(u64::try_from(*n).ok()?),
        Value::Nil => None,
        _ => return None,
    };
    let allowed = int(0)? == 1;
    (allowed == lease_id.is_some()).then_some(())?;
    Some(LeaseDecision {
        allowed,
        max: u64::try_from(int(1)?).ok()?,
        in_flight: u64::try_from(int(2)?).ok()?,
        retry_after_ms: int(3)?,
        source: Source::FailOpen,
        lease_id,
    })
}

impl Lease {
    /// The lease's id: a node's, a local one (top bit set), or 0 (fail mode open).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// `RL.RENEW`: the lease now ends `ttl` from now. False if it is no longer held (it
    /// expired) or the node cannot answer.
    pub async fn renew(&self, ttl: Duration) -> bool {
        self.client
            .renew_id(&self.key, self.id, ttl, &self.local)
            .await
    }

    /// Gives the slot back now: true if it was held.
    pub async fn release(mut self) -> bool {
        self.released = true;
        self.client
            .release_id(&self.key, self.id, &self.local)
            .await
    }
}

impl Drop for Lease {
    /// Releases: a local lease at once, a node's in the background on the current tokio
    /// runtime (without one, it ends at its ttl).
    fn drop(&mut self) {
        if self.released || self.id == 0 {
            return;
        }
        if self.id & LOCAL_ID != 0 {
            self.local.release(&self.key, self.id);
        } else if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let (client, key, id) = (self.client.clone(), std::mem::take(&mut self.key), self.id);
            let local = self.local.clone();
            rt.spawn(async move { client.release_id(&key, id, &local).await });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_leases_hold_share_and_end_at_ttl() {
        let local = LocalLeases::default();
        let (a, _) = local.acquire(b"k", 2, Duration::from_secs(60));
        let (b, n) = local.acquire(b"k", 2, Duration::from_millis(30));
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!(n, 2);
        assert!(a & LOCAL_ID != 0 && a != b);
        let (denied, n) = local.acquire(b"k", 2, Duration::from_secs(60));
        assert!(denied.unwrap_err() <= Duration::from_millis(30) && n == 2);
        std::thread::sleep(Duration::from_millis(40));
        assert!(!local.renew(b"k", b, Duration::from_secs(1)), "b expired");
        let (c, _) = local.acquire(b"k", 2, Duration::from_secs(60));
        assert!(c.is_ok(), "an expired lease freed its slot");
        assert!(local.release(b"k", a));
        assert!(!local.release(b"k", a), "released twice");
        assert!(local.release(b"k", c.unwrap()));
        assert_eq!(local.keys(), 0, "a key with no lease is dropped");
    }

    #[test]
    fn acquire_replies_parse() {
        let reply = [
            Value::Int(1),
            Value::Int(5),
            Value::Int(2),
            Value::Int(-1),
            Value::Int(77),
        ];
        let d = parse_acquire(&reply).unwrap();
        assert!(d.allowed && d.lease_id == Some(77) && d.in_flight == 2);
        let denied = [
            Value::Int(0),
            Value::Int(5),
            Value::Int(5),
            Value::Int(900),
            Value::Nil,
        ];
        assert_eq!(parse_acquire(&denied).unwrap().lease_id, None);
        let wrong = [
            Value::Int(1),
            Value::Int(5),
            Value::Int(2),
            Value::Int(-1),
            Value::Nil,
        ];
        assert!(parse_acquire(&wrong).is_none(), "allowed without an id");
    }
}
