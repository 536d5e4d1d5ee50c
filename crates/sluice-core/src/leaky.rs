//! LEAKY: a leaky bucket as a queue (nginx `limit_req` with `burst`, without `nodelay`).
//!
//! The queue drains at `limit` per `period` (one request every T = P/L) and holds up to `burst`
//! units. The state is the same single `tat` as TOKEN, read as "the instant the queue is empty":
//! a request starts draining at `start = max(tat, now)` and leaves the queue at `start + c·T`.
//! It is accepted iff the queue then holds at most `burst` units, i.e. `(start + c·T − now) ≤ B·T`,
//! which is exactly TOKEN's test, so LEAKY reuses the GCRA core (and its whole-ns emission interval).
//!
//! The difference is the reply: an accepted request is told how long to hold it before
//! forwarding, `retry_after = Some(start − now)` (0 = forward now; the k-th of a simultaneous
//! burst waits (k−1)·T). This is the one algorithm whose allowed replies carry a `retry_after`.
//! A rejected request (queue full) gets the time until it would fit.

use crate::token::bucket_check;
use crate::{CheckError, Decision, Nanos, Params};

/// LEAKY: one check against the stored `tat` (the instant the queue is empty; `None` = empty).
pub fn check(
    tat: Option<Nanos>,
    params: &Params,
    now: Nanos,
) -> Result<(Decision, Option<Nanos>), CheckError> {
    bucket_check(tat, params, now, true)
}
