//! Clocks that disagree between nodes.
//!
//! A node's clock (`clock`) is Unix-epoch nanoseconds anchored to the wall clock once, at
//! start, and advanced by the monotonic clock: a wall-clock step later (NTP, an operator)
//! moves nothing, so it can neither refill nor freeze a bucket. But two processes' anchors
//! differ by whatever the wall clock did between their starts, or while a VM was suspended,
//! and every absolute time a node sends (the full-sync snapshot, the stream, a migration feed)
//! is on its own clock.
//!
//! So the receiver measures the sender's clock when it connects (three `TIME` calls; the one
//! with the shortest round trip, against the midpoint of our readings around it, so the error
//! is at most half that round trip) and moves every time it receives by the difference before
//! it stores it. A bucket then means the same on both sides however far apart their clocks
//! are: a replica ahead of its primary does not see every bucket as refilled (a full quota for
//! every client after a failover), and one behind does not lock LOG clients out for the skew.
//! Both sides' clocks run on the monotonic clock, so the difference holds for the link's life;
//! a new link measures again.
//!
//! Moving a bucket by even a millisecond takes a whole unit from one spent exactly on a unit's
//! boundary, so a difference under [`AGREE_NS`] (100 ms) counts as none: clocks that close are
//! taken to agree, and that much disagreement stays uncorrected. Both ways it is bounded by
//! 100 ms of refill: a receiver up to 100 ms ahead refills a bucket up to 100 ms early (allows
//! at most `limit × 0.1 s ÷ period` more, once), one up to 100 ms behind refills it up to
//! 100 ms late (allows that much less, once).

use sluice_core::Nanos;
use sluice_repl::Record;
use sluice_resp::Value;
use sluice_store::Store;

use crate::clock::Clock;
use crate::peer::Peer;

/// A difference beyond this is logged: clocks of one cluster should agree far better.
const WORTH_LOGGING_NS: i64 = 1_000_000_000;

/// Clocks closer than this are taken to agree (see the module docs).
pub const AGREE_NS: i64 = 100_000_000;

/// How far this node's clock is ahead of a sender's, once measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Skew {
    ahead: Option<i64>,
}

impl Skew {
    /// Measures `peer`'s clock against ours with `TIME`; unknown if it does not answer. Logs a
    /// difference worth knowing.
    pub async fn measure(peer: &mut Peer, clock: &Clock, sender: &str) -> Skew {
        let mut best: Option<(u64, i64)> = None;
        for _ in 0..3 {
            let before = clock.now();
            let Ok(reply) = peer.call(&[b"TIME"]).await else {
                break;
            };
            let after = clock.now();
            let Some(remote) = time_reply(&reply) else {
                break;
            };
            let rtt = after.0.saturating_sub(before.0);
            let mid = before.0 as i128 + i128::from(rtt / 2);
            let ahead = (mid - remote.0 as i128).clamp(i64::MIN.into(), i64::MAX.into()) as i64;
            if best.is_none_or(|(r, _)| rtt < r) {
                best = Some((rtt, ahead));
            }
        }
        let skew = Skew {
            ahead: best.map(|(_, a)| a),
        };
        if let Some(ahead) = skew.ahead
            && ahead.unsigned_abs() >= WORTH_LOGGING_NS.unsigned_abs()
        {
            sluice_log::log(&format!(
                "Clock of {sender} is {} ms {} ours: times from it are moved by the difference",
                (ahead.unsigned_abs() + 500_000) / 1_000_000,
                if ahead > 0 { "behind" } else { "ahead of" }
            ));
        }
        skew
    }

    /// Nanoseconds this clock is ahead of the sender's (negative: behind), if measured.
    pub fn ahead_ns(self) -> Option<i64> {
        self.ahead
    }

    /// What received times are moved by: the difference, once it is [`AGREE_NS`] or more.
    pub fn correction(self) -> i64 {
        self.ahead
            .filter(|a| a.unsigned_abs() >= AGREE_NS.unsigned_abs())
            .unwrap_or(0)
    }

    /// Applies `rec` to `store`, its times moved onto our clock.
    pub fn apply(self, store: &Store, rec: Record<'_>, now: Nanos) {
        store.apply(rec.shifted(self.correction()), now);
    }
}

/// `TIME`'s `[seconds, microseconds]` as an instant.
fn time_reply(reply: &Value) -> Option<Nanos> {
    let Value::Array(parts) = reply else {
        return None;
    };
    let num = |v: &Value| match v {
        Value::Bulk(b) => std::str::from_utf8(b).ok()?.parse::<u64>().ok(),
        Value::Int(n) => u64::try_from(*n).ok(),
        _ => None,
    };
    let (secs, micros) = (num(parts.first()?)?, num(parts.get(1)?)?);
    Some(Nanos(
        secs.checked_mul(1_000_000_000)?
            .checked_add(micros.checked_mul(1_000)?)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::State;

    #[test]
    fn times_move_onto_our_clock() {
        let store = Store::new(sluice_store::StoreConfig::default());
        let now = Nanos::from_secs(1_000_000);
        // The sender is two minutes behind us.
        let skew = Skew {
            ahead: Some(120_000_000_000),
        };
        let tat = Nanos::from_secs(1_000_000 - 120 + 30);
        let rec = Record::Limiter {
            key: b"k",
            deadline: tat,
            state: State::Token { tat },
        };
        assert_eq!(
            rec.clone().shifted(skew.correction()),
            Record::Limiter {
                key: b"k",
                deadline: Nanos::from_secs(1_000_030),
                state: State::Token {
                    tat: Nanos::from_secs(1_000_030)
                },
            }
        );
        skew.apply(&store, rec, now);
        assert_eq!(
            store.len(now),
            1,
            "a bucket 30 s from full on the sender's clock is kept"
        );
        // Link delay is not a clock difference.
        let close = Skew {
            ahead: Some(3_000_000),
        };
        assert_eq!(close.correction(), 0);
        assert_eq!(Skew::default().correction(), 0);
    }

    #[test]
    fn time_replies_parse() {
        let reply = Value::Array(vec![
            Value::Bulk("1700000000".into()),
            Value::Bulk("250000".into()),
        ]);
        assert_eq!(time_reply(&reply), Some(Nanos(1_700_000_000_250_000_000)));
        assert_eq!(time_reply(&Value::Nil), None);
    }
}
