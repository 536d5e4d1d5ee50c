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
//! boundary, so for a bucket (TOKEN, GCRA, LEAKY, leases) a difference under
//! [`AGREE_NS`] (100 ms) counts as none: clocks that close are taken to agree, and that much
//! disagreement stays uncorrected. Both ways it is bounded by 100 ms of refill: a receiver up
//! to 100 ms ahead refills a bucket up to 100 ms early (allows at most `limit × 0.1 s ÷ period`
//! more, once), one up to 100 ms behind refills it up to 100 ms late (allows that much less,
//! once).
//!
//! A FIXED or SLIDING window, and a LOG's entries, are moved by a difference of
//! [`WINDOW_AGREE_NS`] (1 ms) or more: moving them keeps their counts and ages
//! (`State::shifted`), so a small correction takes nothing, while none would end a spent
//! window early on a receiver ahead, with a whole limit back at once (a LOG's burst of entries
//! admitted together would all expire early). The window then ends on the receiver when it ends on the sender, to within
//! half the measuring round trip (or 1 ms, below which it is not moved). A moved start is no
//! multiple of the period, so the store keeps such a window boxed (a 32-byte allocation
//! besides its slot) rather than packed, for as long as it holds the sender's window; clocks
//! within 1 ms of each other (one host) keep windows packed.

use sluice_core::{Nanos, State};
use sluice_repl::Record;
use sluice_resp::Value;
use sluice_store::Store;

use crate::clock::Clock;
use crate::peer::Peer;

/// A difference beyond this is logged: clocks of one cluster should agree far better.
const WORTH_LOGGING_NS: i64 = 1_000_000_000;

/// Clocks closer than this are taken to agree (see the module docs).
pub const AGREE_NS: i64 = 100_000_000;

/// Clocks closer than this are taken to agree for a FIXED or SLIDING window or a LOG (see the
/// module docs): about what three `TIME` calls can tell apart.
pub const WINDOW_AGREE_NS: i64 = 1_000_000;

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

    /// What a received window (FIXED, SLIDING) is moved by: the difference, once it is
    /// [`WINDOW_AGREE_NS`] or more.
    fn window_correction(self) -> i64 {
        self.ahead
            .filter(|a| a.unsigned_abs() >= WINDOW_AGREE_NS.unsigned_abs())
            .unwrap_or(0)
    }

    /// Applies `rec` to `store`, its times moved onto our clock.
    pub fn apply(self, store: &Store, rec: Record<'_>, now: Nanos) {
        // A LOG's entries are instants each admission is counted until, like a window's start:
        // left 50 ms off, a burst admitted at once would expire 50 ms early on this clock, all
        // of it. Buckets keep the 100 ms threshold (see `correction`).
        let by = match &rec {
            Record::Limiter {
                state: State::Fixed(_) | State::Sliding(_) | State::Log(_),
                ..
            } => self.window_correction(),
            _ => self.correction(),
        };
        store.apply(rec.shifted(by), now);
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

    /// A window is moved by a difference too small to move a bucket by: a FIXED window spent
    /// on a sender 50 ms behind us still holds its count until it ends there, 50 ms after it
    /// ends on our grid.
    #[test]
    fn windows_move_by_a_difference_too_small_for_buckets() {
        let one_host = Skew {
            ahead: Some(-40_000),
        };
        assert_eq!(one_host.window_correction(), 0);
        use sluice_core::fixed::Fixed;
        use sluice_core::{Algo, Params};
        let store = Store::new(sluice_store::StoreConfig::default());
        let hour = Nanos::from_secs(3600);
        let start = Nanos(hour.0 * 493_000);
        let skew = Skew {
            ahead: Some(50_000_000),
        };
        assert_eq!(skew.correction(), 0);
        let end = start.saturating_add(hour);
        let rec = Record::Limiter {
            key: b"w",
            deadline: end,
            state: State::Fixed(Fixed { start, count: 10 }),
        };
        let now = Nanos(end.0 - 10_000_000);
        skew.apply(&store, rec, now);
        let params = Params {
            limit: 10,
            period: hour,
            burst: 10,
            cost: 1,
        };
        let later = Nanos(end.0 + 40_000_000);
        let d = store
            .check(b"w", Algo::Fixed, &params, later, true)
            .unwrap();
        assert!(
            !d.allowed,
            "the window ended on our grid, before the sender's"
        );
    }

    /// A LOG's entries move by the same small difference: a burst spent on a sender 50 ms behind
    /// us is still spent 40 ms after it would have ended on our clock unmoved.
    #[test]
    fn log_entries_move_by_a_difference_too_small_for_buckets() {
        use sluice_core::log::LogRing;
        use sluice_core::{Algo, Params};
        let store = Store::new(sluice_store::StoreConfig::default());
        let period = Nanos::from_secs(2);
        let spent = Nanos::from_secs(1_700_000_000);
        let ring = LogRing::from_timestamps(3, &[spent, spent, spent]).unwrap();
        let skew = Skew {
            ahead: Some(50_000_000),
        };
        let end = spent.saturating_add(period);
        let rec = Record::Limiter {
            key: b"l",
            deadline: end,
            state: State::Log(ring),
        };
        skew.apply(&store, rec, spent);
        let params = Params {
            limit: 3,
            period,
            burst: 3,
            cost: 1,
        };
        let d = store
            .check(b"l", Algo::Log, &params, Nanos(end.0 + 40_000_000), true)
            .unwrap();
        assert!(
            !d.allowed,
            "the burst expired on our clock before the sender's"
        );
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
