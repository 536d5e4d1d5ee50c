//! In-flight leases from a gateway: [`Client::acquire`] takes one of a key's `max` slots with
//! `RL.ACQUIRE`, and the [`Lease`] it returns gives the slot back with `RL.RELEASE` when it is
//! dropped (or [`Lease::release`]d), so a request that ends by any path frees its slot.
//!
//! When the node cannot answer (down, timed out, or `NOREPLICAS`/`READONLY`/`LOADING`/...), the
//! rule's fail mode decides: `open` admits (a lease the node does not know; releasing it does
//! nothing), `closed` denies, and `local` takes a slot of an in-process semaphore of
//! `max ÷ gateways` (at least one) per key, held by the lease until it drops. The fleet then
//! holds at most `gateways × max(max ÷ gateways, 1)` slots at once during the outage: `max`
//! when `max` is a multiple of the gateway count, and never fewer than one per gateway.
//!
//! A lease a crashed gateway never releases ends at its `ttl` on the node; a local slot ends
//! with the process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_core::spec::FailMode;
use sluice_resp::value::Value;

use crate::client::{Client, ReplyError, cannot_answer};
use crate::limit::Source;

/// An in-flight limit: at most `max` leases of a key at once, each ending by itself after
/// `ttl` unless released or renewed.
#[derive(Clone, Debug)]
pub struct Concurrency {
    pub max: u64,
    pub ttl: Duration,
    pub fail_mode: FailMode,
    /// Fail mode `local`: each key's in-process slots.
    local: Arc<Mutex<HashMap<Vec<u8>, u64>>>,
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

    /// The slots each gateway holds in fail mode `local`.
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
}

/// A slot held: released when dropped.
#[derive(Debug)]
pub struct Lease {
    client: Client,
    key: Vec<u8>,
    held: Held,
}

#[derive(Debug)]
enum Held {
    /// The node's lease id.
    Node(u64),
    /// A slot of fail mode `local`'s semaphore for the key.
    Local(Arc<Mutex<HashMap<Vec<u8>, u64>>>),
    /// Fail mode `open`: nothing to give back.
    Nothing,
    /// Released already.
    Gone,
}

impl Client {
    /// `RL.ACQUIRE key max ttl`; the lease when allowed. See the module docs for fail modes.
    /// `Err` only for the node's refusal of the request itself (bad arguments, WRONGTYPE).
    pub async fn acquire(
        &self,
        key: &[u8],
        c: &Concurrency,
    ) -> Result<(LeaseDecision, Option<Lease>), ReplyError> {
        let max = c.max.to_string();
        let ttl = format!("{}ms", c.ttl.as_millis().max(1));
        let reply = self
            .command(key, &[b"RL.ACQUIRE", key, max.as_bytes(), ttl.as_bytes()])
            .await;
        match reply {
            Ok(Value::Error(e)) if !cannot_answer(&e) => Err(ReplyError(e)),
            Ok(Value::Array(fields)) => match parse_acquire(&fields) {
                Some((decision, id)) => {
                    let source = self
                        .owner(key)
                        .map_or(Source::FailOpen, Source::Node);
                    let lease = id.map(|id| self.lease(key, Held::Node(id)));
                    Ok((LeaseDecision { source, ..decision }, lease))
                }
                None => Ok(self.acquire_failed(key, c)),
            },
            _ => Ok(self.acquire_failed(key, c)),
        }
    }

    fn lease(&self, key: &[u8], held: Held) -> Lease {
        Lease {
            client: self.clone(),
            key: key.to_vec(),
            held,
        }
    }

    /// The fail mode's answer when the node cannot answer.
    fn acquire_failed(&self, key: &[u8], c: &Concurrency) -> (LeaseDecision, Option<Lease>) {
        let decision = |allowed, in_flight, source| LeaseDecision {
            allowed,
            max: c.max,
            in_flight,
            retry_after_ms: -1,
            source,
        };
        match c.fail_mode {
            FailMode::Open => (
                decision(true, 0, Source::FailOpen),
                Some(self.lease(key, Held::Nothing)),
            ),
            FailMode::Closed => (decision(false, 0, Source::FailClosed), None),
            FailMode::Local => {
                let share = c.local_share(self.config().gateways);
                let mut held = c.local.lock().unwrap_or_else(|p| p.into_inner());
                let n = held.entry(key.to_vec()).or_insert(0);
                if *n < share {
                    *n += 1;
                    let in_flight = *n;
                    drop(held);
                    (
                        decision(true, in_flight, Source::LocalBucket),
                        Some(self.lease(key, Held::Local(c.local.clone()))),
                    )
                } else {
                    (decision(false, *n, Source::LocalBucket), None)
                }
            }
        }
    }
}

/// `[allowed, max, in_flight, retry_after_ms, lease_id | nil]`.
fn parse_acquire(fields: &[Value]) -> Option<(LeaseDecision, Option<u64>)> {
    let int = |i: usize| match fields.get(i)? {
        Value::Int(n) => Some(*n),
        _ => None,
    };
    let id = match fields.get(4)? {
        Value::Int(n) => Some(u64::try_from(*n).ok()?),
        Value::Nil => None,
        _ => return None,
    };
    let allowed = int(0)? == 1;
    (allowed == id.is_some()).then_some(())?;
    Some((
        LeaseDecision {
            allowed,
            max: u64::try_from(int(1)?).ok()?,
            in_flight: u64::try_from(int(2)?).ok()?,
            retry_after_ms: int(3)?,
            source: Source::FailOpen,
        },
        id,
    ))
}

impl Lease {
    /// The node's lease id (`None` for a lease of a fail mode).
    pub fn id(&self) -> Option<u64> {
        match self.held {
            Held::Node(id) => Some(id),
            _ => None,
        }
    }

    /// `RL.RENEW`: the lease now ends `ttl` from now. False if the node no longer knows it (it
    /// expired) or cannot answer; a fail mode's lease is kept as it is.
    pub async fn renew(&self, ttl: Duration) -> bool {
        let Held::Node(id) = self.held else {
            return !matches!(self.held, Held::Gone);
        };
        let (id, ttl) = (id.to_string(), format!("{}ms", ttl.as_millis().max(1)));
        let args: [&[u8]; 4] = [b"RL.RENEW", &self.key, id.as_bytes(), ttl.as_bytes()];
        matches!(self.client.command(&self.key, &args).await, Ok(Value::Int(1)))
    }

    /// Gives the slot back now: true if the node (or the local semaphore) had it.
    pub async fn release(mut self) -> bool {
        let held = std::mem::replace(&mut self.held, Held::Gone);
        release(&self.client, &self.key, held).await
    }
}

async fn release(client: &Client, key: &[u8], held: Held) -> bool {
    match held {
        Held::Node(id) => {
            let id = id.to_string();
            let args: [&[u8]; 3] = [b"RL.RELEASE", key, id.as_bytes()];
            matches!(client.command(key, &args).await, Ok(Value::Int(1)))
        }
        Held::Local(slots) => release_local(&slots, key),
        Held::Nothing | Held::Gone => false,
    }
}

/// Gives a slot of fail mode `local` back.
fn release_local(slots: &Mutex<HashMap<Vec<u8>, u64>>, key: &[u8]) -> bool {
    let mut slots = slots.lock().unwrap_or_else(|p| p.into_inner());
    match slots.get_mut(key) {
        Some(n) if *n > 1 => *n -= 1,
        Some(_) => {
            slots.remove(key);
        }
        None => return false,
    }
    true
}

impl Drop for Lease {
    /// Releases in the background (on the current tokio runtime); without one, a node lease
    /// ends at its ttl.
    fn drop(&mut self) {
        let held = std::mem::replace(&mut self.held, Held::Gone);
        match held {
            Held::Gone | Held::Nothing => {}
            Held::Local(slots) => {
                release_local(&slots, &self.key);
            }
            Held::Node(_) => {
                if let Ok(rt) = tokio::runtime::Handle::try_current() {
                    let client = self.client.clone();
                    let key = std::mem::take(&mut self.key);
                    rt.spawn(async move { release(&client, &key, held).await });
                }
            }
        }
    }
}
