//! Per-key state of every algorithm, and the dispatcher the store calls.
//!
//! CONTRACT (the store codes against exactly this):
//! - `State` is the stored value of one limiter key; `State::algo()` names its algorithm.
//! - `check(slot, algo, params, now, dry)`: `slot` is `None` for a missing (or expired) key.
//!   Returns the decision and, unless `dry` (or `COST 0`, which only reads), updates `slot` in
//!   place: `Some(new)` to store, `None` when the key is back to its fresh state (the store then
//!   drops it). The store keeps the entry until `now + decision.reset_after`, when it is fresh
//!   again; `reset_after == 0` means fresh now.
//! - `Err(WrongType)` when `slot` holds another algorithm's state; errors change nothing.
//!
//! - `settle` (in `settle.rs`), [`acquire`], [`release`] and [`renew`] follow the same shape:
//!   they change `slot` in place and say how long the key now lives.
//!
//! TOKEN and GCRA share their math but are distinct variants, so that a key made by one and
//! called with the other answers `WRONGTYPE` (as a Redis key of another type would).

use crate::fixed::{self, Fixed};
use crate::lease::{self, Acquire, LeaseSet};
use crate::log::{self, LogRing};
use crate::sliding::{self, Sliding};
use crate::{Algo, CheckError, Decision, Nanos, Params, leaky, token};

/// The stored state of one limiter key: 8 bytes of payload for the GCRA family, 16 for the
/// window counters, a boxed ring for LOG.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// TOKEN: the bucket's theoretical arrival time (full again at `tat`).
    Token { tat: Nanos },
    /// GCRA (also `CL.THROTTLE` and Redis `GCRA`): the same `tat`.
    Gcra { tat: Nanos },
    /// SLIDING: window start and the previous and current counts.
    Sliding(Sliding),
    /// FIXED: window start and its count.
    Fixed(Fixed),
    /// LOG: the ring of admitted timestamps.
    Log(LogRing),
    /// LEAKY: the instant the queue is empty.
    Leaky { tat: Nanos },
    /// In-flight leases (`RL.ACQUIRE`): not a rate limit, so no [`Algo`].
    Lease(LeaseSet),
}

impl State {
    /// The rate-limit algorithm this state belongs to; `None` for leases.
    pub fn algo(&self) -> Option<Algo> {
        Some(match self {
            State::Token { .. } => Algo::Token,
            State::Gcra { .. } => Algo::Gcra,
            State::Sliding(_) => Algo::Sliding,
            State::Fixed(_) => Algo::Fixed,
            State::Log(_) => Algo::Log,
            State::Leaky { .. } => Algo::Leaky,
            State::Lease(_) => return None,
        })
    }

    /// This state with every instant in it moved by `by` nanoseconds (see
    /// [`Nanos::shifted`]): a state written under another process's clock, read under this
    /// one's. Durations and counts are kept; a LOG keeps its order.
    ///
    /// A FIXED or SLIDING window keeps its age: its start moves like any instant, so it is no
    /// longer aligned to this clock's multiples of the period, and those algorithms read it as
    /// the window it is (`[start, start + period)`, see [`fixed`] and [`sliding`]) rather than
    /// against this clock's aligned windows. The sender's window then ends here when it ends
    /// there (to within the error of the measured `by`): not early, which would reset a spent
    /// window, and not late.
    pub fn shifted(&self, by: i64) -> State {
        match self {
            State::Token { tat } => State::Token {
                tat: tat.shifted(by),
            },
            State::Gcra { tat } => State::Gcra {
                tat: tat.shifted(by),
            },
            State::Leaky { tat } => State::Leaky {
                tat: tat.shifted(by),
            },
            State::Sliding(s) => State::Sliding(Sliding {
                start: s.start.shifted(by),
                ..*s
            }),
            State::Fixed(f) => State::Fixed(Fixed {
                start: f.start.shifted(by),
                ..*f
            }),
            State::Log(ring) => {
                let times: Vec<Nanos> = ring.iter().map(|t| t.shifted(by)).collect();
                LogRing::from_timestamps(ring.capacity(), &times)
                    .map_or_else(|| self.clone(), State::Log)
            }
            // Ids are names, not times: only the expiries move.
            State::Lease(set) => {
                let leases: Vec<(u64, Nanos)> =
                    set.iter().map(|(id, exp)| (id, exp.shifted(by))).collect();
                LeaseSet::from_leases(&leases).map_or_else(|| self.clone(), State::Lease)
            }
        }
    }

    /// Bytes this state owns on the heap (LOG's ring), for memory accounting.
    pub fn heap_bytes(&self) -> usize {
        match self {
            State::Log(ring) => ring.heap_bytes(),
            State::Lease(set) => set.heap_bytes(),
            _ => 0,
        }
    }
}

/// Makes one check against `slot`. See the module docs for the contract.
pub fn check(
    slot: &mut Option<State>,
    algo: Algo,
    params: &Params,
    now: Nanos,
    dry: bool,
) -> Result<Decision, CheckError> {
    if slot.as_ref().is_some_and(|s| s.algo() != Some(algo)) {
        return Err(CheckError::WrongType);
    }
    let commit = !dry && params.cost != 0;
    // For each Copy state: read it, run the pure function, write back only when committing.
    macro_rules! pure {
        ($variant:ident, $field:ident, $f:path) => {{
            let old = match slot {
                Some(State::$variant { $field }) => Some(*$field),
                _ => None,
            };
            let (decision, new) = $f(old, params, now)?;
            if commit {
                *slot = new.map(|$field| State::$variant { $field });
            }
            Ok(decision)
        }};
    }
    match algo {
        Algo::Token => pure!(Token, tat, token::check),
        Algo::Gcra => pure!(Gcra, tat, token::check),
        Algo::Leaky => pure!(Leaky, tat, leaky::check),
        Algo::Sliding => {
            let old = match slot {
                Some(State::Sliding(s)) => Some(*s),
                _ => None,
            };
            let (decision, new) = sliding::check(old, params, now)?;
            if commit {
                *slot = new.map(State::Sliding);
            }
            Ok(decision)
        }
        Algo::Fixed => {
            let old = match slot {
                Some(State::Fixed(s)) => Some(*s),
                _ => None,
            };
            let (decision, new) = fixed::check(old, params, now)?;
            if commit {
                *slot = new.map(State::Fixed);
            }
            Ok(decision)
        }
        Algo::Log => {
            let mut ring = match slot.take() {
                Some(State::Log(r)) => Some(r),
                _ => None,
            };
            // log::check leaves `ring` as it was on error and when not committing.
            let result = log::check(&mut ring, params, now, !commit);
            *slot = ring.map(State::Log);
            result
        }
    }
}

/// The leases `slot` holds, moved out for a lease operation; `WrongType` (changing nothing) if
/// it holds a rate limit.
fn take_leases(slot: &mut Option<State>) -> Result<Option<LeaseSet>, CheckError> {
    match slot.take() {
        None => Ok(None),
        Some(State::Lease(set)) => Ok(Some(set)),
        Some(other) => {
            *slot = Some(other);
            Err(CheckError::WrongType)
        }
    }
}

/// Runs a lease operation on `slot` and returns the time until its last lease expires
/// (zero when it holds none: fresh, not stored), for the store's deadline.
fn with_leases<T>(
    slot: &mut Option<State>,
    now: Nanos,
    f: impl FnOnce(&mut Option<LeaseSet>) -> Result<T, CheckError>,
) -> Result<(T, Nanos), CheckError> {
    let mut set = take_leases(slot)?;
    let result = f(&mut set);
    let left = set
        .as_ref()
        .map_or(Nanos::ZERO, |s| s.deadline().saturating_sub(now));
    *slot = set.map(State::Lease);
    result.map(|r| (r, left))
}

/// `RL.ACQUIRE` on `slot` (see [`lease::acquire`]), with the time until the key is fresh.
pub fn acquire(
    slot: &mut Option<State>,
    max: u64,
    ttl: Nanos,
    now: Nanos,
) -> Result<(Acquire, Nanos), CheckError> {
    with_leases(slot, now, |set| lease::acquire(set, max, ttl, now))
}

/// `RL.RELEASE` on `slot` (see [`lease::release`]), with the time until the key is fresh.
pub fn release(slot: &mut Option<State>, id: u64, now: Nanos) -> Result<(bool, Nanos), CheckError> {
    with_leases(slot, now, |set| Ok(lease::release(set, id, now)))
}

/// `RL.RENEW` on `slot` (see [`lease::renew`]), with the time until the key is fresh.
pub fn renew(
    slot: &mut Option<State>,
    id: u64,
    ttl: Nanos,
    now: Nanos,
) -> Result<(bool, Nanos), CheckError> {
    with_leases(slot, now, |set| Ok(lease::renew(set, id, ttl, now)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const SEC: u64 = 1_000 * MS;
    const HOUR: u64 = 3_600 * SEC;
    /// An hour boundary (2026) on the sender's clock.
    const HOUR0: u64 = 493_000 * HOUR;

    fn params(algo_period: u64, cost: u64) -> Params {
        Params {
            limit: 10,
            period: Nanos(algo_period),
            burst: 10,
            cost,
        }
    }

    fn dry(state: &Option<State>, algo: Algo, at: u64) -> Decision {
        let mut slot = state.clone();
        check(&mut slot, algo, &params(HOUR, 1), Nanos(at), true).unwrap()
    }

    /// The receiver's clock minus the sender's: behind by 150 ms and by 2 min, and ahead.
    const SKEWS: [i64; 4] = [
        -150 * MS as i64,
        -120 * SEC as i64,
        150 * MS as i64,
        120 * SEC as i64,
    ];

    /// Limit 10 per hour spent on a sender at `phase` into its hour (for SLIDING, after 4 in
    /// the hour before): the state it sends, and the instant it sent it.
    fn spent(algo: Algo, phase: u64) -> (Option<State>, u64) {
        let mut slot = None;
        let now = HOUR0 + phase;
        if algo == Algo::Sliding {
            check(&mut slot, algo, &params(HOUR, 4), Nanos(now - HOUR), false).unwrap();
        }
        while check(&mut slot, algo, &params(HOUR, 1), Nanos(now), false)
            .unwrap()
            .allowed
        {}
        (slot, now)
    }

    /// Moved onto a clock `by` from the sender's, a spent window answers every check as the
    /// sender would at the same moment, for as long as the sender's window (for SLIDING, the
    /// window after it too) lasts: the count is neither reset nor held longer.
    fn same_decisions_across_clocks(algo: Algo, lasts: u64) {
        for by in SKEWS {
            // Early in the hour (within the skew of its start), halfway, and at its very end.
            for phase in [30 * SEC, HOUR / 2, HOUR - MS] {
                let (state, sent) = spent(algo, phase);
                let moved = state.as_ref().map(|s| s.shifted(by));
                let window_end = HOUR0 + HOUR;
                let mut moments: Vec<u64> = [0, MS, 149 * MS, 119 * SEC, HOUR / 3]
                    .iter()
                    .map(|d| sent + d)
                    .chain([window_end - 1, window_end, window_end + HOUR / 2])
                    .filter(|&t| t < HOUR0 + lasts)
                    .collect();
                moments.push(HOUR0 + lasts - 1);
                for t in moments {
                    let there = dry(&state, algo, t);
                    let here = dry(&moved, algo, t.checked_add_signed(by).unwrap());
                    assert_eq!(
                        here,
                        there,
                        "{algo:?} spent {} ms into the hour, receiver {} ms off, {} ms after",
                        phase / MS,
                        by / MS as i64,
                        (t - sent) / MS
                    );
                }
                // At the end the key is fresh on both sides.
                let end = HOUR0 + lasts;
                assert!(dry(&state, algo, end).allowed);
                let here = dry(&moved, algo, end.checked_add_signed(by).unwrap());
                assert_eq!((here.allowed, here.remaining), (true, 9), "{algo:?} {by}");
            }
        }
    }

    #[test]
    fn a_fixed_window_moved_across_clocks_ends_when_the_senders_does() {
        same_decisions_across_clocks(Algo::Fixed, HOUR);
    }

    #[test]
    fn a_sliding_window_moved_across_clocks_weighs_what_it_weighed_on_the_sender() {
        same_decisions_across_clocks(Algo::Sliding, 2 * HOUR);
    }

    /// A window that begins after now (clocks too close to correct, the sender ahead) holds
    /// its count in full until it begins, and then for its whole length.
    #[test]
    fn a_window_not_yet_begun_holds_until_its_end() {
        let now = HOUR0 + HOUR / 2;
        let start = Nanos(now + 50 * MS);
        let fixed = Some(State::Fixed(Fixed { start, count: 10 }));
        let d = dry(&fixed, Algo::Fixed, now);
        assert_eq!(
            (d.allowed, d.retry_after, d.reset_after),
            (false, Some(Nanos(50 * MS + HOUR)), Nanos(50 * MS + HOUR))
        );
        assert!(!dry(&fixed, Algo::Fixed, start.0 + HOUR - 1).allowed);
        assert!(dry(&fixed, Algo::Fixed, start.0 + HOUR).allowed);

        let sliding = Some(State::Sliding(Sliding {
            start,
            prev: 0,
            curr: 10,
        }));
        let d = dry(&sliding, Algo::Sliding, now);
        // The next window weighs the 10 as previous: one fits a tenth of the way into it.
        let fits = 50 * MS + HOUR + HOUR / 10;
        assert_eq!(
            (d.allowed, d.retry_after, d.reset_after),
            (false, Some(Nanos(fits)), Nanos(50 * MS + 2 * HOUR))
        );
        assert!(!dry(&sliding, Algo::Sliding, now + fits - 1).allowed);
        assert!(dry(&sliding, Algo::Sliding, now + fits).allowed);
    }

    /// The stored start keeps the window's age, whatever its alignment here.
    #[test]
    fn a_moved_window_keeps_its_age() {
        let (state, _) = spent(Algo::Fixed, HOUR / 2);
        let by = -120 * SEC as i64;
        assert_eq!(
            state.unwrap().shifted(by),
            State::Fixed(Fixed {
                start: Nanos(HOUR0 - 120 * SEC),
                count: 10
            })
        );
    }
}
