//! Approximate mode on one gateway: per key, a lease of tokens taken from the node before they
//! are admitted (`RL.LEASE`), the syncs that return what was not used and take the next lease
//! in one round trip, and the waits of requests that found the lease empty.
//! [`Limit::lease_cap`], [`Limit::overshoot_bound`] and [`Limit::undershoot_bound`] state the
//! rules and what they guarantee.
//!
//! Also the first step of a check taken without waiting ([`Client::check_now`]), which the
//! sidecar uses so that most approximate checks need no task.
//!
//! # The protocol with the node
//! Every sync is one `RL.LEASE key limit period HOLDER h WANT n [USED id count] TTL t ...`:
//! `count` is cumulative over the lease `id`, so a retried or duplicated call changes nothing,
//! and `WANT` is what this gateway wants to hold after the call (less than it holds gives the
//! rest back). The node keeps the lease `t` (two intervals) without a renewal, then returns its
//! unused tokens itself: a gateway that dies gives its lease back within two intervals. This
//! gateway admits from a lease only until the sync that took it was sent plus its validity, so
//! it never admits a token the node has already taken back.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use sluice_core::Algo;
use sluice_resp::value::{self, Value};
use tokio::time::{Instant, timeout_at};

use super::{Client, Inner, ReplyError};
use crate::limit::{Approximate, Decision, Limit, Source};
use crate::node::CallError;

/// Approximate-mode state of one key on this gateway.
#[derive(Debug)]
pub(super) struct Approx {
    /// Names this entry: a sync's reply is taken only by the entry that sent it (the key's
    /// entry may have been dropped and made again meanwhile).
    epoch: u64,
    /// The limit the key was last checked with: a lease given back when the entry is dropped
    /// is given back by it.
    limit: Limit,
    /// The node's name for this gateway's lease on the key; 0 when none is known.
    lease_id: u64,
    /// Tokens admitted here from `lease_id` since the node made it (sent as `USED id used`).
    used: u64,
    /// Tokens held: what may be admitted here before the next sync.
    held: u64,
    /// Until when `held` may be admitted: the send time of the sync that gave it, plus the
    /// lease's life on the node (two intervals, or less where the key's window ends first).
    valid_until: Instant,
    /// The node's last answer for the bucket itself: what it had left beyond the leases, its
    /// retry and reset times.
    remaining: u64,
    retry_after_ms: i64,
    reset_after_ms: i64,
    /// Units asked for here since the last sync was sent, admitted or waiting: the rate the
    /// next lease is sized to.
    demand: u64,
    /// The largest cost that found no token since the last sync was sent: the next lease holds
    /// at least that (within [`Limit::lease_cap`]), so a costly request is not left behind by
    /// leases sized to the rate.
    need: u64,
    /// While a sync is in flight: what may still be admitted from `held` (the least the sync
    /// can leave this gateway), and what was admitted meanwhile.
    flight_left: u64,
    flight_used: u64,
    syncing: bool,
    scheduled: bool,
    /// The last sync could not reach the node: once the lease is used, callers get the fail
    /// mode until the next sync.
    unreachable: bool,
    /// The node refused the lease (an error reply): requests go to the node one by one until
    /// the next sync.
    refused: bool,
    /// When the last sync was sent.
    last_sync: Instant,
    /// Bumped when a sync ends; callers waiting for tokens watch it.
    synced: tokio::sync::watch::Sender<u64>,
}

impl Approx {
    /// A key not seen before: the node is taken to have its whole capacity, so the first lease
    /// is sized by the demand alone (and the gateway's fair share of a full bucket).
    fn new(now: Instant, limit: &Limit, epoch: u64) -> Approx {
        Approx {
            epoch,
            limit: *limit,
            lease_id: 0,
            used: 0,
            held: 0,
            valid_until: now,
            remaining: limit.capacity(),
            retry_after_ms: -1,
            reset_after_ms: 0,
            demand: 0,
            need: 0,
            flight_left: 0,
            flight_used: 0,
            syncing: false,
            scheduled: false,
            unreachable: false,
            refused: false,
            last_sync: now,
            synced: tokio::sync::watch::Sender::new(0),
        }
    }

    /// Whether the node had, at its last answer, less beyond the leases than this gateway's
    /// share of one interval's refill (`least`, at least 1): then the sync at the interval's
    /// end takes it with the refill, rather than a sync per trickle of tokens.
    fn drained(&self, least: u64) -> bool {
        self.remaining < least.max(1) && !self.unreachable && !self.refused
    }
}

/// The algorithms a lease applies to: tokens taken early from a bucket or a window count the
/// same as tokens taken at use. A log's entries would expire early, and a leaky bucket's queue
/// was told when to leave: those keys are checked exactly.
fn leasable(algo: Algo) -> bool {
    matches!(algo, Algo::Token | Algo::Gcra | Algo::Fixed | Algo::Sliding)
}

/// What approximate mode does with one request.
pub(super) enum Step {
    Answer(Decision),
    /// Wait for the sync in flight (its generation now), then decide again.
    Wait(tokio::sync::watch::Receiver<u64>),
    /// Ask the node with this request's cost (an algorithm no lease applies to, a cost over
    /// what a lease can hold, a node that refused the lease).
    Exact,
    /// The node could not be reached for the last sync and the lease is used.
    Fail,
}

/// A check's first step, taken without waiting ([`Client::check_now`]).
#[derive(Debug)]
pub enum Quick {
    /// Decided here: the blocked cache, or approximate mode's local answer.
    Now(Decision),
    /// It needs the node, or a sync in flight: finish it with [`Client::check_later`].
    Later(Later),
}

/// Where a check stands that [`Client::check_now`] could not decide.
pub struct Later(Option<Step>);

impl std::fmt::Debug for Later {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Later")
    }
}

impl Client {
    /// [`Client::check`] as far as it goes without waiting: most checks of an approximate key
    /// are decided here, with no task and no await (what the sidecar does per request).
    pub fn check_now(&self, key: &[u8], limit: &Limit, cost: u64) -> Quick {
        if limit.split > 1 && limit.sub_keys() > 1 {
            return Quick::Later(Later(None));
        }
        let now = Instant::now();
        let d = match self.inner.blocked(key, limit, now) {
            Some(d) => d,
            None if limit.approximate.is_some() => match self.approximate(key, limit, cost, now) {
                Step::Answer(d) => d,
                Step::Fail => self.inner.fail(key, limit, cost, false),
                step => return Quick::Later(Later(Some(step))),
            },
            None => return Quick::Later(Later(None)),
        };
        self.count(&d);
        Quick::Now(d)
    }

    /// Finishes a check that [`Client::check_now`] left for later, within the deadline.
    pub async fn check_later(
        &self,
        key: &[u8],
        limit: &Limit,
        cost: u64,
        later: Later,
    ) -> Result<Decision, ReplyError> {
        let Some(step) = later.0 else {
            return self.check(key, limit, cost).await;
        };
        let deadline = Instant::now() + self.inner.config.deadline;
        let d = match self.approx_steps(key, limit, cost, deadline, step).await {
            Some(d) => d,
            None => {
                self.exact(key, limit, cost, deadline, Instant::now())
                    .await?
            }
        };
        self.count(&d);
        Ok(d)
    }
}

impl Client {
    /// Approximate mode from `step` on: `None` when the node is to be asked with this request.
    pub(super) async fn approx_steps(
        &self,
        key: &[u8],
        limit: &Limit,
        cost: u64,
        deadline: Instant,
        mut step: Step,
    ) -> Option<Decision> {
        loop {
            match step {
                Step::Answer(d) => return Some(d),
                Step::Fail => return Some(self.inner.fail(key, limit, cost, false)),
                Step::Exact => return None,
                Step::Wait(mut synced) => {
                    // A sync that ends (or an entry that goes: the sender drops) wakes us. A
                    // sync still in flight at the deadline (a busy gateway, not a dead node:
                    // that ends the sync) is a denial, never the fail mode: no token is held
                    // for this request, and admitting it unseen could admit beyond the limit.
                    if timeout_at(deadline, synced.changed()).await.is_err() {
                        let interval = limit.approximate.map_or(1, |a| a.sync_every.as_millis());
                        return Some(Decision {
                            allowed: false,
                            limit: limit.capacity(),
                            remaining: 0,
                            retry_after_ms: (interval as i64).max(1),
                            reset_after_ms: limit.period_ms() as i64,
                            source: Source::Approximate,
                        });
                    }
                }
            }
            step = self.approximate_again(key, limit, cost, Instant::now());
        }
    }

    /// Approximate mode's step for one request: admit from the lease, wait for the sync in
    /// flight (or start one), deny while the node said it had nothing more less than an
    /// interval ago, or go to the node.
    pub(super) fn approximate(&self, key: &[u8], limit: &Limit, cost: u64, now: Instant) -> Step {
        self.step(key, limit, cost, now, true)
    }

    /// The step of a request that already waited for a sync: its demand was counted then.
    fn approximate_again(&self, key: &[u8], limit: &Limit, cost: u64, now: Instant) -> Step {
        self.step(key, limit, cost, now, false)
    }

    fn step(&self, key: &[u8], limit: &Limit, cost: u64, now: Instant, first: bool) -> Step {
        let Some(a) = limit.approximate else {
            return Step::Exact;
        };
        if !leasable(limit.algo) || cost > limit.lease_cap(limit.capacity(), self.inner.gateways())
        {
            return Step::Exact;
        }
        let life = limit.period.max(a.sync_every * 2);
        let least = limit.refill_share(self.inner.gateways());
        let mut table = self.inner.approx.lock();
        let Some((st, expires)) = table.get_mut(key, now) else {
            // First sight: this request's sync takes the first lease; the others wait for it.
            let mut st = Approx::new(now, limit, self.inner.random());
            st.demand = cost;
            st.need = cost;
            st.syncing = true;
            let synced = st.synced.subscribe();
            let mut dropped = Vec::new();
            table.insert_evicting(Bytes::copy_from_slice(key), st, now + life, now, |k, a| {
                dropped.push((k, a))
            });
            drop(table);
            for (k, a) in dropped {
                self.inner.give_back(k, a);
            }
            self.spawn_sync(key, limit);
            return Step::Wait(synced);
        };
        *expires = (*expires).max(now + life);
        let fresh = now.saturating_duration_since(st.last_sync) < a.sync_every;
        let valid = now < st.valid_until;
        let fits = valid && st.held >= cost && (!st.syncing || st.flight_left >= cost);
        // What is asked for since the last sync was sent: every request once, and a request
        // that waited for a sync and still finds no token once more (the next lease is for it).
        if first || !fits {
            st.demand = st.demand.saturating_add(cost);
        }
        if !fits {
            st.need = st.need.max(cost);
        }
        st.limit = *limit;
        if st.refused && fresh && !fits {
            return Step::Exact;
        }
        let mut sync_now = false;
        let step = if fits {
            st.held -= cost;
            st.used += cost;
            if st.syncing {
                st.flight_left -= cost;
                st.flight_used += cost;
            } else if st.held < cost && !st.drained(least) && !st.unreachable && !st.refused {
                // The lease is used and the node had more: take the next one now, so the
                // requests behind this one wait as little as they can.
                sync_now = true;
            } else if !st.scheduled {
                st.scheduled = true;
                schedule_sync(
                    &self.inner,
                    key,
                    limit,
                    a.sync_every.saturating_sub(now - st.last_sync),
                );
            }
            Step::Answer(Decision {
                allowed: true,
                limit: limit.capacity(),
                remaining: st.remaining.saturating_add(st.held),
                retry_after_ms: -1,
                reset_after_ms: st.reset_after_ms,
                source: Source::Approximate,
            })
        } else if st.syncing {
            Step::Wait(st.synced.subscribe())
        } else if st.unreachable && fresh {
            Step::Fail
        } else if st.drained(least) && fresh {
            // The node had nothing beyond the leases at its last answer, less than an
            // interval ago: since then it gained at most one interval's refill, which the sync
            // at the interval's end (asked for here, if none is due) takes.
            if !st.scheduled {
                st.scheduled = true;
                schedule_sync(
                    &self.inner,
                    key,
                    limit,
                    a.sync_every.saturating_sub(now - st.last_sync),
                );
            }
            let wait = a.sync_every.saturating_sub(now - st.last_sync);
            Step::Answer(Decision {
                allowed: false,
                limit: limit.capacity(),
                remaining: 0,
                retry_after_ms: st.retry_after_ms.max(wait.as_millis() as i64).max(1),
                reset_after_ms: st.reset_after_ms,
                source: Source::Approximate,
            })
        } else {
            // The lease is used (or no longer valid) and the node may have more: sync, and wait.
            sync_now = true;
            Step::Wait(st.synced.subscribe())
        };
        if sync_now {
            st.syncing = true;
            drop(table);
            self.spawn_sync(key, limit);
        }
        step
    }

    fn spawn_sync(&self, key: &[u8], limit: &Limit) {
        let inner = self.inner.clone();
        let (key, limit) = (Bytes::copy_from_slice(key), *limit);
        tokio::spawn(async move { inner.sync(key, limit).await });
    }
}

/// A sync of `key` after `wait`, if there is still a lease to renew or give back then, or the
/// key is being denied because the node had nothing left.
fn schedule_sync(inner: &Arc<Inner>, key: &[u8], limit: &Limit, wait: Duration) {
    let client = Arc::downgrade(inner);
    let (key, limit) = (Bytes::copy_from_slice(key), *limit);
    tokio::spawn(async move {
        tokio::time::sleep(wait).await;
        let Some(inner) = client.upgrade() else {
            return;
        };
        let least = limit.refill_share(inner.gateways());
        let go = match inner.approx.lock().get_mut(&key, Instant::now()) {
            Some((st, _)) => {
                st.scheduled = false;
                let go = !st.syncing && (st.held > 0 || st.demand > 0 || st.drained(least));
                st.syncing |= go;
                go
            }
            None => false,
        };
        if go {
            inner.sync(key, limit).await;
        }
    });
}

/// How a sync ended.
enum Synced {
    /// The node's reply: lease id, held, remaining, retry, reset, validity in ms.
    Lease([i64; 6]),
    /// The node refused the lease (an error reply, or one this client cannot read).
    Refused,
    /// No reply by the deadline, or a broken one: the call may have been applied.
    MaybeApplied,
    /// The call never reached a node.
    NotSent,
    /// The node refused the count this gateway reported for its lease.
    Forgotten,
}

impl Inner {
    /// One approximate-mode sync of `key`: report what was used from the lease, give back
    /// what the next interval will not need, take what it will, in one `RL.LEASE`.
    async fn sync(self: &Arc<Self>, key: Bytes, limit: Limit) {
        let Some(a) = limit.approximate else { return };
        let now = Instant::now();
        let (epoch, id, used, held, want) = {
            let mut t = self.approx.lock();
            let Some((st, _)) = t.get_mut(&key, now) else {
                return;
            };
            let held = if now < st.valid_until { st.held } else { 0 };
            let want = limit
                .lease_size(
                    st.demand,
                    now.saturating_duration_since(st.last_sync),
                    st.remaining.saturating_add(held),
                    self.gateways(),
                )
                .max(
                    st.need
                        .min(limit.lease_cap(limit.capacity(), self.gateways())),
                );
            st.flight_left = held.min(want);
            st.flight_used = 0;
            st.demand = 0;
            st.need = 0;
            st.last_sync = now;
            (st.epoch, st.lease_id, st.used, held, want)
        };
        let ttl = lease_ttl(&a);
        let deadline = now + self.config.deadline.max(Duration::from_millis(100));
        let frame = lease_frame(&key, &limit, &self.holder, want, id, used, ttl);
        let result = self.call_key(&key, frame, deadline).await;
        self.node_calls.fetch_add(1, Ordering::Relaxed);
        let synced = match result {
            Ok((v, _)) => match lease_fields(&v) {
                Some(f) => Synced::Lease(f),
                // The node no longer knows the count this gateway reports (it cannot, by the
                // protocol; a node of another version might): start over with a new lease.
                None if matches!(&v, Value::Error(e) if e.starts_with("ERR USED count")) => {
                    Synced::Forgotten
                }
                None => Synced::Refused,
            },
            Err(CallError::Timeout | CallError::Garbage) => Synced::MaybeApplied,
            Err(_) => Synced::NotSent,
        };
        let mut t = self.approx.lock();
        let Some((st, _)) = t.get_mut(&key, Instant::now()) else {
            return;
        };
        if st.epoch != epoch {
            // The entry that sent this sync was dropped and the key's entry made again: this
            // reply is not its.
            return;
        }
        st.syncing = false;
        match synced {
            Synced::Lease([lease_id, held_now, remaining, retry, reset, valid_ms]) => {
                let lease_id = lease_id.max(0) as u64;
                let held_now = held_now.max(0) as u64;
                if lease_id != 0 && lease_id == id {
                    // The same lease: what was admitted while the call was out comes off it.
                    st.held = held_now.saturating_sub(st.flight_used);
                } else {
                    // A new lease (the old one ended: expired, a failover, a slot move, or
                    // given back whole): what was admitted meanwhile came from the old one.
                    st.held = held_now;
                    st.used = 0;
                }
                st.lease_id = lease_id;
                // Never longer than the lease's TTL, whatever the reply says.
                let valid = Duration::from_millis(valid_ms.max(0) as u64).min(ttl);
                st.valid_until = now + valid;
                st.remaining = remaining.max(0) as u64;
                st.retry_after_ms = retry;
                st.reset_after_ms = reset;
                st.unreachable = false;
                st.refused = false;
                // A lease held is renewed, or given back unused, at the interval's end.
                if st.held > 0 && !st.scheduled {
                    st.scheduled = true;
                    schedule_sync(self, &key, &limit, a.sync_every);
                }
            }
            Synced::Forgotten => {
                st.lease_id = 0;
                st.used = 0;
                st.held = 0;
                st.refused = true;
                st.unreachable = false;
            }
            Synced::Refused | Synced::MaybeApplied | Synced::NotSent => {
                // Keep only what the node is sure to have left this gateway: the least of
                // what it held and what it asked to hold, less what was admitted meanwhile.
                let keep = match synced {
                    Synced::NotSent => held,
                    _ => held.min(want),
                };
                st.held = keep.saturating_sub(st.flight_used);
                st.refused = matches!(synced, Synced::Refused);
                st.unreachable = !st.refused;
            }
        }
        st.synced.send_modify(|g| *g = g.wrapping_add(1));
    }

    /// Gives back the lease of an entry the approximate map dropped (to make room, or
    /// expired): one `RL.LEASE ... WANT 0` reporting what was admitted from it, so that nothing
    /// admitted goes uncharged when the node's expiry would give the lease back. Best effort,
    /// on a task of its own.
    fn give_back(self: &Arc<Self>, key: Bytes, a: Approx) {
        if a.lease_id == 0 {
            return;
        }
        let Some(approx) = a.limit.approximate else {
            return;
        };
        let ttl = lease_ttl(&approx);
        let frame = lease_frame(&key, &a.limit, &self.holder, 0, a.lease_id, a.used, ttl);
        let inner = self.clone();
        tokio::spawn(async move {
            let deadline = Instant::now() + inner.config.deadline.max(Duration::from_millis(100));
            let _ = inner.call_key(&key, frame, deadline).await;
            inner.node_calls.fetch_add(1, Ordering::Relaxed);
        });
    }

    /// The number of gateways that share the limits, as configured (at least 1).
    pub(super) fn gateways(&self) -> u32 {
        self.config.gateways.max(1)
    }
}

/// How long the node keeps a lease without a renewal: two intervals (at least 1 ms).
fn lease_ttl(a: &Approximate) -> Duration {
    (a.sync_every * 2).max(Duration::from_millis(1))
}

/// The six integers of an `RL.LEASE` reply this client uses: lease id, held, remaining,
/// retry_after_ms, reset_after_ms, valid_ms (the 7-field reply's limit dropped).
fn lease_fields(v: &Value) -> Option<[i64; 6]> {
    match v.ints().as_deref() {
        Some(&[id, held, _limit, remaining, retry, reset, valid]) => {
            Some([id, held, remaining, retry, reset, valid])
        }
        _ => None,
    }
}

/// `RL.LEASE key limit <period>ms HOLDER h WANT n [USED id used] TTL <ttl>ms [BURST b] ALGO a`.
fn lease_frame(
    key: &[u8],
    limit: &Limit,
    holder: &[u8],
    want: u64,
    id: u64,
    used: u64,
    ttl: Duration,
) -> Bytes {
    let ms = |n: u64| format!("{n}ms").into_bytes();
    let num = |n: u64| itoa::Buffer::new().format(n).as_bytes().to_vec();
    let mut args: Vec<Vec<u8>> = vec![
        b"RL.LEASE".to_vec(),
        key.to_vec(),
        num(limit.limit),
        ms(limit.period_ms()),
        b"HOLDER".to_vec(),
        holder.to_vec(),
        b"WANT".to_vec(),
        num(want),
    ];
    if id != 0 {
        args.extend([b"USED".to_vec(), num(id), num(used)]);
    }
    args.extend([b"TTL".to_vec(), ms(ttl.as_millis() as u64)]);
    if let Some(b) = limit.burst {
        args.extend([b"BURST".to_vec(), num(b)]);
    }
    args.extend([b"ALGO".to_vec(), limit.algo.name().as_bytes().to_vec()]);
    let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
    let mut out = BytesMut::with_capacity(128 + key.len());
    value::encode_command(&mut out, &refs);
    out.freeze()
}
