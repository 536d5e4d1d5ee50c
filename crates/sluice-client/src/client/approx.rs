//! Approximate mode on one gateway: per key, a share of the node's last answer admitted
//! locally, the syncs that charge it, and the waits of requests that found the share used.
//! [`Limit::approx_share`], [`Limit::overshoot_bound`] and [`Limit::undershoot_bound`] state
//! the rules and what they guarantee.
//!
//! Also the first step of a check taken without waiting ([`Client::check_now`]), which the
//! sidecar uses so that most approximate checks need no task.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::{Instant, timeout_at};

use super::{Client, Inner, ReplyError, decision_from, rl_check_frame};
use crate::limit::{Decision, Limit, Source};
use crate::node::CallError;

/// Approximate-mode state of one key on this gateway.
#[derive(Debug)]
pub(super) struct Approx {
    /// The node's last answer: remaining after the last sync, its reset and retry times.
    remaining: u64,
    reset_after_ms: i64,
    retry_after_ms: i64,
    /// What this gateway may admit before it syncs again ([`Limit::approx_share`]).
    share: u64,
    /// Units admitted here since the last completed sync (including those being synced).
    count: u64,
    /// Units admitted here that a denied sync could not charge; admit nothing while owed.
    debt: u64,
    syncing: bool,
    scheduled: bool,
    /// The last sync could not reach the node: callers waiting for one get the fail mode.
    unreachable: bool,
    last_sync: Instant,
    /// Bumped when a sync ends; callers waiting for a share watch it.
    synced: tokio::sync::watch::Sender<u64>,
}

impl Approx {
    fn new(d: &Decision, share: u64, now: Instant) -> Approx {
        Approx {
            remaining: if d.allowed { d.remaining } else { 0 },
            reset_after_ms: d.reset_after_ms,
            retry_after_ms: d.retry_after_ms,
            share,
            count: 0,
            debt: 0,
            syncing: false,
            scheduled: false,
            unreachable: false,
            last_sync: now,
            synced: tokio::sync::watch::Sender::new(0),
        }
    }

    /// Takes a node's answer (a sync's or an exact check's) as the new global view.
    fn learn(&mut self, d: &Decision, share: u64, now: Instant) {
        self.remaining = if d.allowed { d.remaining } else { 0 };
        self.retry_after_ms = d.retry_after_ms;
        self.reset_after_ms = d.reset_after_ms;
        self.share = share;
        self.last_sync = now;
        self.unreachable = false;
    }
}

/// What approximate mode does with one request.
pub(super) enum Step {
    Answer(Decision),
    /// Wait for the sync in flight (its generation now), then decide again.
    Wait(tokio::sync::watch::Receiver<u64>),
    /// Ask the node with this request's cost (first sight, a stale view, a cost over the share).
    Exact,
    /// The node could not be reached for the last sync.
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
                    // that ends the sync) is a denial, never the fail mode: the share is used,
                    // and admitting more unseen would break the overshoot bound.
                    if timeout_at(deadline, synced.changed()).await.is_err() {
                        return Some(Decision {
                            allowed: false,
                            limit: limit.capacity(),
                            remaining: 0,
                            retry_after_ms: 1,
                            reset_after_ms: limit.period_ms() as i64,
                            source: Source::Approximate,
                        });
                    }
                }
            }
            step = self.approximate(key, limit, cost, Instant::now());
        }
    }

    /// Approximate mode's step for one request: a local answer, a wait for the sync in flight,
    /// or the node (first sight of the key, a view older than an interval, a cost over the
    /// share). Never a local denial while the node may have room, except for one interval after
    /// the node itself said it had none (see [`Limit::undershoot_bound`]).
    pub(super) fn approximate(&self, key: &[u8], limit: &Limit, cost: u64, now: Instant) -> Step {
        let Some(a) = limit.approximate else {
            return Step::Exact;
        };
        let mut table = self.inner.approx.lock();
        let Some((st, expires)) = table.get_mut(key, now) else {
            // First sight: this request asks the node; the others wait for its answer.
            let mut st = Approx::new(&Decision::unknown(), 0, now);
            st.syncing = true;
            let ttl = limit.period.max(a.sync_every);
            table.insert(Bytes::copy_from_slice(key), st, now + ttl, now);
            return Step::Exact;
        };
        *expires = (*expires).max(now + limit.period);
        let since = now.saturating_duration_since(st.last_sync);
        let fresh = since < a.sync_every;
        let fits = st.debt == 0 && st.count + cost <= st.share && (fresh || st.count > 0);
        // What the node had at the last answer, less what was admitted here since.
        let known_left = if st.debt > 0 {
            0
        } else {
            st.remaining.saturating_sub(st.count)
        };
        let mut sync_now = false;
        let step = if fits {
            st.count += cost;
            let used = st.count >= st.share || (a.sync_every_n > 0 && st.count >= a.sync_every_n);
            // Share used and the node had more: sync at once. Everything the node had is used:
            // the interval's sync charges it (nothing more can be known earlier).
            if used && st.remaining > st.count && !st.syncing {
                sync_now = true;
            } else if !st.syncing && !st.scheduled {
                st.scheduled = true;
                self.schedule_sync(key, limit, a.sync_every.saturating_sub(since));
            }
            Step::Answer(Decision {
                allowed: true,
                limit: limit.capacity(),
                remaining: st.remaining.saturating_sub(st.count),
                retry_after_ms: -1,
                reset_after_ms: st.reset_after_ms,
                source: Source::Approximate,
            })
        } else if st.syncing {
            Step::Wait(st.synced.subscribe())
        } else if st.unreachable && fresh {
            Step::Fail
        } else if known_left < cost && fresh {
            // The node had nothing more for this request at its last answer, less than an
            // interval ago: since then it gained at most one interval's refill, which a sync at
            // the interval's end (asked for here, if none is due) learns, traffic or not.
            if !st.scheduled {
                st.scheduled = true;
                self.schedule_sync(key, limit, a.sync_every.saturating_sub(since));
            }
            Step::Answer(Decision {
                allowed: false,
                limit: limit.capacity(),
                remaining: 0,
                retry_after_ms: st
                    .retry_after_ms
                    .max(a.sync_every.saturating_sub(since).as_millis() as i64)
                    .max(1),
                reset_after_ms: st.reset_after_ms,
                source: Source::Approximate,
            })
        } else if st.count > 0 || st.debt > 0 {
            // The share is used up and the node had more (or the view is old): sync, and wait.
            sync_now = true;
            Step::Wait(st.synced.subscribe())
        } else {
            // An old view and nothing to charge: this request asks the node; others wait.
            st.syncing = true;
            Step::Exact
        };
        if sync_now {
            st.syncing = true;
            drop(table);
            let inner = self.inner.clone();
            let (key, limit) = (Bytes::copy_from_slice(key), *limit);
            tokio::spawn(async move { inner.sync(key, limit).await });
        }
        step
    }

    /// A sync of `key` after `wait`, if there is still something to charge then, or the key
    /// is being denied because the node had nothing left.
    fn schedule_sync(&self, key: &[u8], limit: &Limit, wait: Duration) {
        let client = Arc::downgrade(&self.inner);
        let (key, limit) = (Bytes::copy_from_slice(key), *limit);
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let Some(inner) = client.upgrade() else {
                return;
            };
            let go = match inner.approx.lock().get_mut(&key, Instant::now()) {
                Some((st, _)) => {
                    st.scheduled = false;
                    // Something to charge, or a key denied for want of news (a `COST 0` read).
                    let go = !st.syncing && (st.count > 0 || st.debt > 0 || st.remaining == 0);
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
}

impl Inner {
    /// One approximate-mode sync of `key`: charge the local count (and any debt) on the node.
    async fn sync(&self, key: Bytes, limit: Limit) {
        let (sent, owed) = {
            let mut t = self.approx.lock();
            match t.get_mut(&key, Instant::now()) {
                Some((st, _)) => (st.count, st.debt),
                None => return,
            }
        };
        let capacity = limit.capacity();
        let charge = (sent + owed).min(capacity);
        let deadline = Instant::now() + self.config.deadline.max(Duration::from_millis(100));
        let first = self
            .call_key(&key, rl_check_frame(&key, &limit, charge), deadline)
            .await;
        self.node_calls.fetch_add(1, Ordering::Relaxed);
        // A call that timed out (or whose reply was garbage) may have been applied: it is
        // taken as charged, never sent again. That can under-charge by one sync, where sending
        // it again could charge it twice.
        let maybe_applied = matches!(first, Err(CallError::Timeout | CallError::Garbage));
        let reply = first
            .ok()
            .and_then(|(v, _)| decision_from(&v, Source::Approximate).ok());
        let (mut charged, mut last) = match reply {
            Some(d) if d.allowed => (charge, Some(d)),
            None if maybe_applied => (charge, None),
            other => (0, other),
        };
        // Denied: take what the node still has, so the debt is as small as it can be.
        if let Some(d) = &last
            && !d.allowed
            && d.remaining > 0
        {
            let drain = d.remaining.min(sent + owed);
            let r = self
                .call_key(&key, rl_check_frame(&key, &limit, drain), deadline)
                .await;
            self.node_calls.fetch_add(1, Ordering::Relaxed);
            if let Some(d2) = r
                .ok()
                .and_then(|(v, _)| decision_from(&v, Source::Approximate).ok())
                && d2.allowed
            {
                charged = drain;
                last = Some(Decision {
                    allowed: false,
                    remaining: 0,
                    ..d2
                });
            }
        }
        let now = Instant::now();
        let mut t = self.approx.lock();
        if let Some((st, _)) = t.get_mut(&key, now) {
            st.syncing = false;
            match last {
                Some(d) => {
                    // Everything sent is now either charged or owed.
                    st.count = st.count.saturating_sub(sent);
                    st.debt = sent + owed - charged;
                    let left = if d.allowed { d.remaining } else { 0 };
                    st.learn(&d, limit.approx_share(left, self.config.gateways), now);
                }
                None => {
                    if charged > 0 {
                        st.count = st.count.saturating_sub(sent);
                        st.debt = sent + owed - charged;
                    }
                    st.unreachable = true;
                    st.last_sync = now;
                }
            }
            st.synced.send_modify(|g| *g = g.wrapping_add(1));
        }
    }

    /// The answer to an approximate key's exact check (first sight, an old view): the new
    /// global view, or (`None`: no answer) the node marked unreachable for an interval. What
    /// was counted here and not yet charged stays counted. Wakes the requests that waited.
    pub(super) fn learn_exact(
        &self,
        key: &[u8],
        limit: &Limit,
        d: Option<&Decision>,
        since: Instant,
    ) {
        let now = Instant::now();
        let mut table = self.approx.lock();
        let st = match table.get_mut(key, now) {
            Some((st, _)) => st,
            None => {
                let Some(d) = d else { return };
                let ttl = Duration::from_millis(d.reset_after_ms.max(0) as u64).max(limit.period);
                table.insert(
                    Bytes::copy_from_slice(key),
                    Approx::new(d, 0, now),
                    now + ttl,
                    since,
                );
                let Some((st, _)) = table.get_mut(key, now) else {
                    return;
                };
                st
            }
        };
        st.syncing = false;
        match d {
            Some(d) => {
                let left = if d.allowed { d.remaining } else { 0 };
                st.learn(d, limit.approx_share(left, self.config.gateways), now);
            }
            None => {
                st.unreachable = true;
                st.last_sync = now;
            }
        }
        st.synced.send_modify(|g| *g = g.wrapping_add(1));
    }
}
