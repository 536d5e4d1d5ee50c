//! Fail mode `local` across outages: the bucket each outage starts from, and the charge that
//! follows it.
//!
//! Per key, a gateway keeps what the node last said the key had left ([`Left`]) and what its
//! local bucket admitted that no node has been charged for yet ([`Debt`]). An outage's bucket
//! starts from the first, aged by the refill since, less the second ([`local_start`]); the
//! debt is charged with `RL.SETTLE key limit period 0 units` ([`Debt::frame`]) ahead of the
//! key's next check that reaches a node, on the same connection, so the node decides that
//! check with the outage's admissions counted.
//!
//! # Invariants
//! - A local bucket lives only while the node cannot answer: the node's next answer for the
//!   key drops it (`Inner::answered`), so no outage starts from a bucket that kept refilling
//!   while the node answered.
//! - Every unit a local bucket admits for a check the node refused (`NOREPLICAS`, ...) or was
//!   never sent is owed until a node has been charged for it, or until the bucket that admitted
//!   it would be full again (on one gateway the node, which started no lower and refills as
//!   fast, is full by then too, so the charge would change nothing). A unit admitted for a
//!   check whose reply was late is not owed: the node may still apply that check itself.
//! - Nothing here reads a clock or does I/O: the instants come in as arguments.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use sluice_core::{Algo, Nanos, Params, State};
use sluice_resp::value;
use tokio::time::Instant;

use crate::limit::Limit;

/// A key's `remaining` is kept for fail mode `local` once it is spent by at least
/// `capacity ÷ LEFT_WORTH_KEEPING`: a key spent by less starts its local bucket as a full one,
/// at most an eighth of the capacity above what the node had left, across the fleet.
pub(super) const LEFT_WORTH_KEEPING: u64 = 8;

/// What the node last said about a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Left {
    /// Whole units left after that answer.
    pub remaining: u64,
    pub at: Instant,
    /// For an answer with nothing left: how long until a unit fitted (its `retry_after_ms`).
    /// It says how far below empty the key was: a key in debt after a settle starts its next
    /// outage that far down, not at zero.
    pub next_unit: Option<Duration>,
}

impl Left {
    /// What an `RL.CHECK` (or `RL.SETTLE`) reply says, received at `at`.
    pub fn from_reply(remaining: u64, retry_after_ms: i64, at: Instant) -> Left {
        let next_unit = (remaining == 0 && retry_after_ms > 0)
            .then(|| Duration::from_millis(retry_after_ms.unsigned_abs()));
        Left {
            remaining,
            at,
            next_unit,
        }
    }
}

/// What fail mode `local` admitted for one key while the node could not answer, and no node
/// has been charged for yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Debt {
    pub(super) limit: Limit,
    pub(super) units: u64,
    /// When the local bucket that admitted it would be full again: the debt is forgotten then.
    pub(super) until: Instant,
}

impl Debt {
    /// The units owed.
    pub fn units(&self) -> u64 {
        self.units
    }

    /// `RL.SETTLE key limit <period>ms 0 units [BURST b] ALGO a`: a settle of nothing reserved
    /// takes `units` from the key, past empty if need be (up to one capacity of debt, as
    /// RL.SETTLE caps it). Its reply is RL.CHECK's five fields after the charge.
    pub fn frame(&self, key: &[u8]) -> Bytes {
        let (mut l, mut p, mut u, mut b) = (
            itoa::Buffer::new(),
            itoa::Buffer::new(),
            itoa::Buffer::new(),
            itoa::Buffer::new(),
        );
        let mut period = p.format(self.limit.period_ms()).as_bytes().to_vec();
        period.extend_from_slice(b"ms");
        let mut args: Vec<&[u8]> = vec![
            b"RL.SETTLE",
            key,
            l.format(self.limit.limit).as_bytes(),
            &period,
            b"0",
            u.format(self.units).as_bytes(),
        ];
        if let Some(burst) = self.limit.burst {
            args.extend_from_slice(&[b"BURST", b.format(burst).as_bytes()]);
        }
        args.extend_from_slice(&[b"ALGO", self.limit.algo.name().as_bytes()]);
        let mut out = BytesMut::with_capacity(96 + key.len());
        value::encode_command(&mut out, &args);
        out.freeze()
    }

    /// Whether a debt of this limit can be charged: RL.SETTLE refuses LEAKY, whose queued
    /// requests were already told when to leave.
    pub(super) fn chargeable(limit: &Limit) -> bool {
        limit.algo != Algo::Leaky
    }
}

/// How the node took a debt's settle (`Client::settled`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settled<'a> {
    /// Its reply: RL.CHECK's five integers after the charge. Charged.
    Charged([i64; 5]),
    /// An error reply. One that says the node cannot decide now (`NOREPLICAS`, `READONLY`...):
    /// owed again. Any other (`WRONGTYPE`: the key holds another algorithm's state now): the
    /// node never will take it, and the debt is dropped.
    Refused(&'a str),
    /// No reply by the deadline: the node may still apply it, so it is taken as charged (as an
    /// approximate sync is), never sent twice. Settles go only to a node whose last call was
    /// answered, so a node gone silent loses at most the one debt in flight per key.
    Late,
    /// Not sent (the breaker was open), or the connection broke: owed again.
    Lost,
}

/// Fail mode `local`'s token bucket on one gateway of `gateways`, whatever the limit's
/// algorithm: the limit's rate divided exactly (the limit over `gateways` periods, so the
/// fleet's rate is the limit's however small the limit is next to the fleet), and a capacity of
/// `capacity ÷ gateways`, at least one unit.
pub(super) fn local_share(limit: &Limit, gateways: u32, cost: u64) -> Params {
    let g = u64::from(gateways.max(1));
    let period = u64::try_from(limit.period.as_nanos()).unwrap_or(u64::MAX);
    Params {
        limit: limit.limit.max(1),
        period: Nanos(period.saturating_mul(g)),
        burst: (limit.capacity() / g).max(1),
        cost,
    }
}

/// A new local bucket (the first check of an outage) holds this gateway's share of what the
/// node last said the key had left, plus the refill since, less `owed` (what this gateway
/// admitted locally and has not charged yet), at most its capacity. `known` is the node's last
/// word and `now` the instant it is read at; a key in debt on the node (nothing left, the next
/// unit further away than one unit's refill) starts as far below empty. For a key the node said
/// nothing about lately (so full): `capacity ÷ gateways`, a fraction of a unit when the
/// capacity is smaller than the fleet (the first unit then comes once the rest has refilled).
/// Either way the fleet starts with at most what the node had. `clock` is the local bucket's
/// own time at `now`.
pub(super) fn local_start(
    limit: &Limit,
    params: &Params,
    gateways: u32,
    known: Option<Left>,
    owed: u64,
    now: Instant,
    clock: Nanos,
) -> State {
    // Everything counts in the fleet's units times `period`: a unit is `period`, and one
    // nanosecond of refill is `limit` (so no division happens before the last step).
    let g = i128::from(gateways.max(1));
    let rate = i128::from(limit.limit.max(1));
    let unit = i128::try_from(limit.period.as_nanos()).unwrap_or(i128::MAX);
    let units = |n: u64| i128::from(n).saturating_mul(unit);
    let nanos = |d: Duration| i128::try_from(d.as_nanos()).unwrap_or(i128::MAX);
    let held = match known {
        None => units(limit.capacity()),
        Some(left) => {
            let ago = nanos(now.saturating_duration_since(left.at));
            match left.next_unit {
                // One unit at `at + next_unit`: `next_unit − ago` of refill short of it now.
                Some(next) => {
                    unit.saturating_add(ago.saturating_sub(nanos(next)).saturating_mul(rate))
                }
                None => units(left.remaining).saturating_add(ago.saturating_mul(rate)),
            }
        }
    }
    .saturating_sub(units(owed));
    let full = i128::from(params.burst)
        .saturating_mul(g)
        .saturating_mul(unit);
    // The local bucket, as the node, is never more than one capacity past empty.
    let missing = full.saturating_sub(held).clamp(0, full.saturating_mul(2));
    let missing = u128::try_from(missing)
        .unwrap_or(0)
        .div_ceil(rate.unsigned_abs());
    State::Token {
        tat: clock.saturating_add(Nanos(u64::try_from(missing).unwrap_or(u64::MAX))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    /// Units a fresh local bucket admits at once.
    fn admits(limit: &Limit, gateways: u32, known: Option<Left>, owed: u64, now: Instant) -> u64 {
        let params = local_share(limit, gateways, 1);
        let clock = Nanos::from_secs(1);
        let mut slot = Some(local_start(
            limit, &params, gateways, known, owed, now, clock,
        ));
        let mut n = 0;
        while sluice_core::check(&mut slot, Algo::Token, &params, clock, false)
            .unwrap()
            .allowed
        {
            n += 1;
        }
        n
    }

    #[test]
    fn a_bucket_starts_from_the_share_of_what_was_left_less_what_is_owed() {
        let now = Instant::now();
        let limit = Limit::new(100, HOUR);
        let left = |remaining| Some(Left::from_reply(remaining, -1, now));
        assert_eq!(admits(&limit, 2, left(10), 0, now), 5);
        assert_eq!(admits(&limit, 1, left(10), 0, now), 10);
        assert_eq!(admits(&limit, 1, left(10), 4, now), 6);
        assert_eq!(admits(&limit, 1, left(10), 40, now), 0);
        assert_eq!(admits(&limit, 2, None, 0, now), 50);
        assert_eq!(admits(&limit, 1, None, 30, now), 70);
    }

    #[test]
    fn the_refill_since_the_answer_counts() {
        let now = Instant::now();
        // 100 per 10 s: a unit every 100 ms.
        let limit = Limit::new(100, Duration::from_secs(10));
        let at = now - Duration::from_millis(550);
        assert_eq!(
            admits(&limit, 1, Some(Left::from_reply(3, -1, at)), 0, now),
            8
        );
        // Nothing left and the next unit 100 ms after the answer: 5.5 units 550 ms later.
        let denied = Some(Left::from_reply(0, 100, at));
        assert_eq!(admits(&limit, 1, denied, 0, now), 5);
    }

    /// A key the node has in debt (after a settle) starts the next outage below empty: the
    /// refill pays the debt first.
    #[test]
    fn a_key_in_debt_starts_below_empty() {
        let now = Instant::now();
        let limit = Limit::new(100, Duration::from_secs(10));
        // The next unit 2 s away: 19 units below empty, 4 still 1.5 s later, 6 up 1 s after.
        let debt = Some(Left::from_reply(0, 2000, now - Duration::from_millis(1500)));
        assert_eq!(admits(&limit, 1, debt, 0, now), 0);
        let later = Some(Left::from_reply(0, 2000, now - Duration::from_millis(2500)));
        assert_eq!(admits(&limit, 1, later, 0, now), 6);
    }

    #[test]
    fn a_debt_is_a_settle_of_nothing_reserved() {
        let debt = Debt {
            limit: Limit::new(100, Duration::from_secs(10)).burst(150),
            units: 7,
            until: Instant::now(),
        };
        let mut frame = BytesMut::from(&debt.frame(b"k")[..]);
        let v = value::decode(&mut frame).unwrap().unwrap();
        let words: Vec<String> = match v {
            value::Value::Array(items) => items
                .iter()
                .map(|i| match i {
                    value::Value::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
                    other => panic!("{other:?}"),
                })
                .collect(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            words,
            [
                "RL.SETTLE",
                "k",
                "100",
                "10000ms",
                "0",
                "7",
                "BURST",
                "150",
                "ALGO",
                "TOKEN"
            ]
        );
    }
}
