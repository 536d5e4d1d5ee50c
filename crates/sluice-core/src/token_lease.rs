//! LEASES OF TOKENS (`RL.LEASE`): a gateway takes tokens from a key before it admits the
//! requests they pay for, and gives back what it did not use.
//!
//! # Model
//! A holder (one gateway) keeps a [`Record`] per key: its `id` and four cumulative counts:
//! `granted` (tokens given to it), `used` (the holder's last reported count of tokens it
//! admitted), `returned` (given back to the key) and `expired` (ended with their window). The
//! holder holds `granted − used − returned − expired`. One call ([`lease`]) reports the
//! holder's count and says how many tokens it wants to hold after the call (`want`):
//! 1. A call naming the record's id reports its count (above `granted`: an error that changes
//!    nothing; below the last one: a late duplicate, ignored). A report beyond what the record
//!    still had given (the node wrote tokens off while the report was on its way: an expiry
//!    read late, a window that ended) was admitted in time: an ended window's tokens are free,
//!    and tokens given back are charged again, past empty if need be (a debt). A named record
//!    goes on under its id whether it expired or not. A call that does not name it comes from a
//!    holder that never learned of it (a lost reply): its unused tokens go back and a new
//!    record starts. No record (never made, or forgotten by a restart or a failover): a new
//!    one, whatever the call names.
//! 2. FIXED and SLIDING: tokens taken in a window that is no longer the current one expired with
//!    it: nothing goes back, nothing is held.
//! 3. Held less than wanted: take `min(want − held, what the key has now)`, the same state
//!    change as a check of that cost. Held more: give the difference back.
//! 4. TOKEN and GCRA, before the take or the return: the tokens every holder holds are still
//!    the bucket's as far as its capacity goes, so the bucket is lowered to at most the
//!    capacity less what the holders hold (a refill the exact limiter would have lost to the
//!    capacity while a token waited in a lease is lost here too).
//! 5. Every return is [`settle`](crate::settle())'s refund, which never goes past a fresh key.
//!    For FIXED and SLIDING only while the tokens' window is still the current one: after it, a
//!    refund would credit the new window, which the tokens were never taken from.
//! 6. `expiry = now + ttl`; `want == 0` ends the record.
//!
//! A retry of the same call (the same cumulative count, the same `want`) finds the holder
//! already holding `want` (or takes more only if the key refilled in between): it is harmless.
//! An expired record ([`end`]) gives its unused tokens back under the window rule of step 5,
//! and is kept, ended, for [`ENDED_KEPT`], for a late report.
//!
//! The key's state is that of a check with the same arguments: the tokens taken are admitted
//! as far as the key can tell, so the fleet admits at most what the exact limiter would.
//!
//! LEAKY and LOG are refused ([`LeaseError::NotApplicable`]): LEAKY's queued answers were
//! already given, and LOG's tokens taken early would expire early.

use crate::state::{State, check};
use crate::{Algo, CheckError, Decision, Nanos, Params, fixed, settle, sliding};

/// The longest holder name a node keeps.
pub const HOLDER_LEN_MAX: usize = 64;
/// The most holders one key has records for.
pub const HOLDERS_PER_KEY_MAX: usize = 256;
/// The most records one node keeps.
pub const RECORDS_MAX: usize = 100_000;
/// `TTL` bounds and default.
pub const TTL_MIN: Nanos = Nanos::from_millis(1);
pub const TTL_MAX: Nanos = Nanos::from_secs(3600);
pub const TTL_DEFAULT: Nanos = Nanos::from_secs(1);

/// One holder's lease of one key. 96 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// Names the record to its holder; new whenever a record is created.
    pub id: u64,
    /// Tokens given to the record, cumulative.
    pub granted: u64,
    /// The holder's last reported cumulative count of tokens it admitted from the record.
    pub used: u64,
    /// Tokens of the record given back to the key, cumulative: by a lower `want`, a lost
    /// reply, an expiry.
    pub returned: u64,
    /// Tokens of the record that expired with their window (FIXED, SLIDING) or under another
    /// algorithm, cumulative: not given back, not held.
    pub expired: u64,
    /// The instant the record is returned unless renewed.
    pub expiry: Nanos,
    /// FIXED and SLIDING: the start of the window the held tokens were taken in.
    pub window: Nanos,
    /// The algorithm and parameters of the last call, which an expiry returns the tokens by.
    pub algo: Algo,
    pub params: Params,
    /// The record expired and gave its unused tokens back ([`end`]); it is kept until its new
    /// `expiry` so that a report the holder sent before the expiry, and the node read after it
    /// (a stalled node, a slow link), still charges what the holder admitted.
    pub ended: bool,
}

impl Record {
    /// The tokens the holder holds: given, less those it reported used and those given back
    /// or expired.
    pub fn held(&self) -> u64 {
        self.granted
            .saturating_sub(self.used)
            .saturating_sub(self.returned)
            .saturating_sub(self.expired)
    }

    /// Writes `n` held tokens off: given back to the key while their window lasts (`returned`),
    /// else expired with it (`expired`). Whether the key's state changed.
    fn write_off(&mut self, slot: &mut Option<State>, n: u64, now: Nanos) -> bool {
        if n == 0 {
            return false;
        }
        if windowed(self.algo) && current_start(slot, self.algo, &self.params, now) != self.window {
            self.expired += n;
            return false;
        }
        self.returned += n;
        give_back(slot, self, n, now)
    }

    /// Takes in the holder's cumulative `count` (at most `granted`). What it adds that the node
    /// had written off was admitted before the holder's lease ran out (the node read the
    /// report late: a stalled node, a slow link, a window that ended meanwhile): an expired
    /// window's tokens are free (they counted in that window), and tokens given back are
    /// charged again, past empty if need be (a debt), while their window lasts. Whether the
    /// key's state changed.
    fn report(
        &mut self,
        slot: &mut Option<State>,
        count: u64,
        now: Nanos,
    ) -> Result<bool, CheckError> {
        if count <= self.used {
            // A late duplicate: counts only go up.
            return Ok(false);
        }
        let given = self
            .granted
            .saturating_sub(self.returned)
            .saturating_sub(self.expired);
        let beyond = count.saturating_sub(given);
        self.used = count;
        let free = beyond.min(self.expired);
        self.expired -= free;
        let owed = (beyond - free).min(self.returned);
        if owed == 0 {
            return Ok(false);
        }
        self.returned -= owed;
        let same_window = !windowed(self.algo)
            || current_start(slot, self.algo, &self.params, now) == self.window;
        if !same_window || slot.as_ref().is_some_and(|s| s.algo() != Some(self.algo)) {
            return Ok(false);
        }
        settle(slot, self.algo, &self.params, 0, owed, now)?;
        Ok(true)
    }
}

/// How long an ended record is kept for a late report ([`Record::ended`]).
pub const ENDED_KEPT: Nanos = Nanos::from_secs(10);

/// One `RL.LEASE` call, validated by the command's grammar.
#[derive(Clone, Copy, Debug)]
pub struct Call {
    pub algo: Algo,
    /// `cost` is ignored.
    pub params: Params,
    /// The tokens the holder wants to hold after the call, at most the capacity.
    pub want: u64,
    /// `USED id count`: the record the holder knows of and its cumulative count.
    pub used: Option<(u64, u64)>,
    pub ttl: Nanos,
    /// What the key's other holders hold (their `granted − used`): a TOKEN or GCRA bucket
    /// refills no further than its capacity less every holder's tokens.
    pub held_by_others: u64,
}

/// What a call answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    pub lease_id: u64,
    pub held: u64,
    /// The key after the call as a check would answer now: `limit`, `remaining`,
    /// `retry_after` (`None` while `remaining > 0`, else until a check of cost 1 fits),
    /// `reset_after`. `allowed` is true.
    pub decision: Decision,
    /// Whether the key's state changed (a take or a return).
    pub changed: bool,
    /// How long the held tokens stay valid: the TTL, or less where the tokens' window (FIXED,
    /// SLIDING) ends sooner. A holder admits from them only until its call's send time plus
    /// this.
    pub valid: Nanos,
}

/// Why a call changed nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseError {
    Check(CheckError),
    /// `USED id count` with `count` above the tokens the record was given.
    UsedAboveGranted {
        count: u64,
        granted: u64,
    },
    /// LEAKY or LOG (see the module docs).
    NotApplicable(Algo),
}

impl From<CheckError> for LeaseError {
    fn from(e: CheckError) -> LeaseError {
        LeaseError::Check(e)
    }
}

/// The capacity a lease takes its tokens from: BURST for the buckets, `limit` for the windows.
pub fn capacity(algo: Algo, params: &Params) -> u64 {
    match algo {
        Algo::Token | Algo::Gcra | Algo::Leaky => params.burst,
        Algo::Sliding | Algo::Fixed | Algo::Log => params.limit,
    }
}

/// One call against the key's `slot` (`None`: fresh) and the holder's `record`. `new_id` names
/// the record if this call creates one. Returns the reply and the record to keep (`None`:
/// remove it). Errors change nothing.
pub fn lease(
    slot: &mut Option<State>,
    record: Option<Record>,
    call: &Call,
    new_id: u64,
    now: Nanos,
) -> Result<(Grant, Option<Record>), LeaseError> {
    let algo = call.algo;
    let params = Params {
        cost: 0,
        ..call.params
    };
    if matches!(algo, Algo::Leaky | Algo::Log) {
        return Err(LeaseError::NotApplicable(algo));
    }
    if slot.as_ref().is_some_and(|s| s.algo() != Some(algo)) {
        return Err(CheckError::WrongType.into());
    }
    if call.want > capacity(algo, &params) {
        return Err(CheckError::CostExceedsCapacity.into());
    }
    let named = match (record, call.used) {
        (Some(r), Some((id, count))) if r.id == id => {
            if count > r.granted {
                return Err(LeaseError::UsedAboveGranted {
                    count,
                    granted: r.granted,
                });
            }
            Some((r, count))
        }
        _ => None,
    };
    let mut changed = false;
    let mut rec = match (named, record) {
        // The holder names its record, live or expired: the record goes on under the same id
        // (so a reply lost now still leaves the holder naming the right record).
        (Some((mut r, count)), _) => {
            changed |= r.report(slot, count, now)?;
            if r.expiry <= now && !r.ended {
                // Expired and not yet swept: its unused tokens go back now, as at the expiry.
                let h = r.held();
                changed |= r.write_off(slot, h, now);
            }
            r.ended = false;
            r
        }
        (None, old) => {
            // A record the holder never learned of (a lost reply): its unused tokens go back
            // as an expiry would give them.
            if let Some(mut old) = old {
                let h = old.held();
                changed |= old.write_off(slot, h, now);
            }
            Record {
                id: new_id,
                granted: 0,
                used: 0,
                returned: 0,
                expired: 0,
                expiry: now,
                window: current_start(slot, algo, &params, now),
                algo,
                params,
                ended: false,
            }
        }
    };
    // Tokens taken in a window that ended, or under another algorithm (the key was deleted and
    // made again), are not in this state: expired.
    let window = current_start(slot, algo, &params, now);
    if rec.algo != algo || (windowed(algo) && rec.window != window) {
        rec.expired += rec.held();
    }
    rec.algo = algo;
    rec.params = params;
    rec.window = window;
    let held = rec.held();
    changed |= cap_at_held(
        slot,
        algo,
        &params,
        call.held_by_others.saturating_add(held),
        now,
    )?;
    if call.want > held {
        let k = (call.want - held).min(bucket(slot, algo, &params, now)?.remaining);
        if k > 0 {
            let take = Params { cost: k, ..params };
            if check(slot, algo, &take, now, false)?.allowed {
                rec.granted += k;
                changed = true;
            }
        }
    } else if call.want < held {
        changed |= rec.write_off(slot, held - call.want, now);
    }
    rec.expiry = now.saturating_add(call.ttl);
    let valid = match window_end(slot, algo, &params, now) {
        Some(end) => call.ttl.min(Nanos(end.0.saturating_sub(now.0))),
        None => call.ttl,
    };
    let grant = Grant {
        lease_id: rec.id,
        held: rec.held(),
        decision: bucket(slot, algo, &params, now)?,
        changed,
        valid,
    };
    Ok((grant, (call.want > 0).then_some(rec)))
}

/// Ends an expired record: its unused tokens go back to the key under the window rule (see
/// the module docs), and the record is kept, ended, for [`ENDED_KEPT`] (a late report is
/// charged then). Returns the ended record, and the time until the key is fresh again when its
/// state changed (the store's deadline for it). An ended record at its expiry is only dropped:
/// `None` for the record.
pub fn end(
    slot: &mut Option<State>,
    record: &Record,
    held_by_others: u64,
    now: Nanos,
) -> (Option<Record>, Option<Nanos>) {
    if record.ended {
        return (None, None);
    }
    let mut ended = Record {
        ended: true,
        expiry: now.saturating_add(ENDED_KEPT),
        ..*record
    };
    // Given back, then the bucket lowered to the capacity less what the others hold: the same
    // as lowering it to the capacity less every holder's tokens and then giving these back. A
    // key no longer stored (deleted, or its slot moved away) is left alone.
    let h = ended.held();
    let returned = ended.write_off(slot, h, now);
    let capped = slot.is_some()
        && cap_at_held(slot, record.algo, &record.params, held_by_others, now).unwrap_or(false);
    if !returned && !capped {
        return (Some(ended), None);
    }
    let read = Params {
        cost: 0,
        ..record.params
    };
    let reset = check(slot, record.algo, &read, now, true).map_or(Nanos::ZERO, |d| d.reset_after);
    (Some(ended), Some(reset))
}

/// Gives `n` of `record`'s tokens back to the key by the parameters they were taken with: not
/// to a key of another algorithm, not after the tokens' window. Whether the state changed.
fn give_back(slot: &mut Option<State>, record: &Record, n: u64, now: Nanos) -> bool {
    let (algo, params) = (record.algo, &record.params);
    if n == 0 || slot.is_none() || slot.as_ref().is_some_and(|s| s.algo() != Some(algo)) {
        return false;
    }
    if windowed(algo) && current_start(slot, algo, params, now) != record.window {
        return false;
    }
    let n = n.min(capacity(algo, params));
    settle(slot, algo, params, n, 0, now).is_ok()
}

/// TOKEN and GCRA: the tokens the holders hold are still the bucket's as far as its capacity
/// goes, so the bucket itself refills no further than the capacity less `held`. Without this a
/// token taken early would let the bucket refill in its place and admit more than one bucket
/// (the refill the exact limiter loses to the capacity while the token waits). The bucket is
/// read and, when above that ceiling, lowered to it, as a check of the excess would. Whether
/// the state changed. The windows need nothing: their tokens count in the window they were
/// taken in and expire with it.
pub fn cap_at_held(
    slot: &mut Option<State>,
    algo: Algo,
    params: &Params,
    held: u64,
    now: Nanos,
) -> Result<bool, CheckError> {
    if !matches!(algo, Algo::Token | Algo::Gcra) || held == 0 {
        return Ok(false);
    }
    let ceiling = capacity(algo, params).saturating_sub(held);
    let remaining = bucket(slot, algo, params, now)?.remaining;
    if remaining <= ceiling {
        return Ok(false);
    }
    let burn = Params {
        cost: remaining - ceiling,
        ..*params
    };
    Ok(check(slot, algo, &burn, now, false)?.allowed)
}

/// A check of `algo` that leaves the tokens `held` on lease to their holders ([`cap_at_held`]):
/// the bucket is lowered first, for good when the check writes, and on a copy when it is `dry`,
/// so that a dry check answers as its real call would and still changes nothing.
pub fn check_keeping_held(
    slot: &mut Option<State>,
    algo: Algo,
    params: &Params,
    held: u64,
    now: Nanos,
    dry: bool,
) -> Result<Decision, CheckError> {
    if held == 0 {
        return check(slot, algo, params, now, dry);
    }
    if dry {
        let mut copy = slot.clone();
        cap_at_held(&mut copy, algo, params, held, now)?;
        return check(&mut copy, algo, params, now, true);
    }
    cap_at_held(slot, algo, params, held, now)?;
    check(slot, algo, params, now, false)
}

/// The end of the window a check at `now` counts in (FIXED, SLIDING); `None` for the buckets.
fn window_end(slot: &Option<State>, algo: Algo, params: &Params, now: Nanos) -> Option<Nanos> {
    windowed(algo).then(|| current_start(slot, algo, params, now).saturating_add(params.period))
}

fn windowed(algo: Algo) -> bool {
    matches!(algo, Algo::Fixed | Algo::Sliding)
}

/// The start of the window a check at `now` counts in (FIXED, SLIDING); zero for the buckets.
fn current_start(slot: &Option<State>, algo: Algo, params: &Params, now: Nanos) -> Nanos {
    match (algo, slot) {
        (Algo::Fixed, Some(State::Fixed(f))) => fixed::current_start(Some(*f), params, now),
        (Algo::Fixed, _) => fixed::current_start(None, params, now),
        (Algo::Sliding, Some(State::Sliding(s))) => sliding::current_start(Some(*s), params, now),
        (Algo::Sliding, _) => sliding::current_start(None, params, now),
        _ => Nanos::ZERO,
    }
}

/// The key as a check would answer now: `remaining` what it has, `retry_after` the time until
/// a check of cost 1 fits when it has nothing.
fn bucket(
    slot: &mut Option<State>,
    algo: Algo,
    params: &Params,
    now: Nanos,
) -> Result<Decision, CheckError> {
    let read = Params { cost: 0, ..*params };
    let mut d = check(slot, algo, &read, now, true)?;
    d.retry_after = if d.remaining > 0 {
        None
    } else {
        check(slot, algo, &Params { cost: 1, ..read }, now, true)?.retry_after
    };
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = Nanos::PER_SEC;

    fn params(limit: u64, period_s: u64) -> Params {
        Params {
            limit,
            period: Nanos::from_secs(period_s),
            burst: limit,
            cost: 0,
        }
    }

    fn call(algo: Algo, p: Params, want: u64, used: Option<(u64, u64)>) -> Call {
        Call {
            algo,
            params: p,
            want,
            used,
            ttl: TTL_DEFAULT,
            held_by_others: 0,
        }
    }

    /// The remaining tokens of the key at `now`.
    fn remaining(slot: &mut Option<State>, algo: Algo, p: Params, now: Nanos) -> u64 {
        bucket(slot, algo, &p, now).unwrap().remaining
    }

    #[test]
    fn a_record_is_96_bytes() {
        assert_eq!(std::mem::size_of::<Record>(), 96);
    }

    #[test]
    fn grants_up_to_want_then_partial() {
        let (p, now) = (params(10, 60), Nanos(100 * SEC));
        let mut slot = None;
        let (g, rec) = lease(&mut slot, None, &call(Algo::Token, p, 6, None), 7, now).unwrap();
        assert_eq!((g.lease_id, g.held, g.decision.remaining), (7, 6, 4));
        assert!(g.changed);
        let rec = rec.unwrap();
        assert_eq!((rec.granted, rec.used), (6, 0));
        // Another holder wants 6: gets the 4 left, and the key reports none left.
        let (g, _) = lease(&mut slot, None, &call(Algo::Token, p, 6, None), 8, now).unwrap();
        assert_eq!((g.held, g.decision.remaining), (4, 0));
        assert!(g.decision.retry_after.is_some());
    }

    #[test]
    fn lower_want_returns_and_zero_ends() {
        let (p, now) = (params(10, 60), Nanos(100 * SEC));
        let mut slot = None;
        let (g, rec) = lease(&mut slot, None, &call(Algo::Token, p, 8, None), 1, now).unwrap();
        // Admitted 3, wants 2 more: 3 go back.
        let (g2, rec) = lease(
            &mut slot,
            rec,
            &call(Algo::Token, p, 2, Some((1, 3))),
            2,
            now,
        )
        .unwrap();
        assert_eq!((g2.lease_id, g2.held), (g.lease_id, 2));
        assert_eq!(remaining(&mut slot, Algo::Token, p, now), 5);
        let (g3, rec) = lease(
            &mut slot,
            rec,
            &call(Algo::Token, p, 0, Some((1, 4))),
            3,
            now,
        )
        .unwrap();
        assert_eq!(g3.held, 0);
        assert!(rec.is_none());
        assert_eq!(remaining(&mut slot, Algo::Token, p, now), 6);
    }

    #[test]
    fn a_retry_is_harmless() {
        let (p, now) = (params(10, 60), Nanos(100 * SEC));
        let mut slot = None;
        let (_, rec) = lease(&mut slot, None, &call(Algo::Token, p, 5, None), 1, now).unwrap();
        let c = call(Algo::Token, p, 5, Some((1, 2)));
        let (g1, rec) = lease(&mut slot, rec, &c, 2, now).unwrap();
        let (g2, rec) = lease(&mut slot, rec, &c, 3, now).unwrap();
        assert_eq!(
            Grant {
                changed: false,
                ..g1
            },
            g2
        );
        assert_eq!(g2.held, 5);
        assert!(!g2.changed);
        assert_eq!(rec.unwrap().granted, 7);
        assert_eq!(remaining(&mut slot, Algo::Token, p, now), 3);
    }

    #[test]
    fn a_record_the_holder_never_learned_of_is_returned() {
        let (p, now) = (params(10, 60), Nanos(100 * SEC));
        let mut slot = None;
        let (_, rec) = lease(&mut slot, None, &call(Algo::Token, p, 5, None), 1, now).unwrap();
        // The reply was lost: the holder asks again knowing no lease.
        let (g, rec) = lease(&mut slot, rec, &call(Algo::Token, p, 5, None), 2, now).unwrap();
        assert_eq!((g.lease_id, g.held), (2, 5));
        assert_eq!(remaining(&mut slot, Algo::Token, p, now), 5);
        // A stale id is the same case.
        let (g, _) = lease(
            &mut slot,
            rec,
            &call(Algo::Token, p, 5, Some((1, 0))),
            3,
            now,
        )
        .unwrap();
        assert_eq!((g.lease_id, g.held), (3, 5));
        assert_eq!(remaining(&mut slot, Algo::Token, p, now), 5);
    }

    #[test]
    fn a_count_above_granted_changes_nothing() {
        let (p, now) = (params(10, 60), Nanos(100 * SEC));
        let mut slot = None;
        let (_, rec) = lease(&mut slot, None, &call(Algo::Token, p, 5, None), 1, now).unwrap();
        let before = slot.clone();
        let err = lease(
            &mut slot,
            rec,
            &call(Algo::Token, p, 5, Some((1, 6))),
            2,
            now,
        );
        assert_eq!(
            err,
            Err(LeaseError::UsedAboveGranted {
                count: 6,
                granted: 5
            })
        );
        assert_eq!(slot, before);
    }

    #[test]
    fn refused_inputs_change_nothing() {
        let (p, now) = (params(10, 60), Nanos(100 * SEC));
        let mut slot = Some(State::Fixed(crate::fixed::Fixed {
            start: Nanos(60 * SEC),
            count: 1,
        }));
        let before = slot.clone();
        let wrong = lease(&mut slot, None, &call(Algo::Token, p, 1, None), 1, now);
        assert_eq!(wrong, Err(LeaseError::Check(CheckError::WrongType)));
        let big = lease(&mut slot, None, &call(Algo::Fixed, p, 11, None), 1, now);
        assert_eq!(big, Err(LeaseError::Check(CheckError::CostExceedsCapacity)));
        for algo in [Algo::Leaky, Algo::Log] {
            let e = lease(&mut None, None, &call(algo, p, 1, None), 1, now);
            assert_eq!(e, Err(LeaseError::NotApplicable(algo)));
        }
        assert_eq!(slot, before);
    }

    #[test]
    fn fixed_window_change_expires_held_tokens() {
        let p = params(10, 60);
        let now = Nanos(60 * SEC + 1);
        let mut slot = None;
        let long = |want, used| Call {
            ttl: TTL_MAX,
            ..call(Algo::Fixed, p, want, used)
        };
        let (_, rec) = lease(&mut slot, None, &long(6, None), 1, now).unwrap();
        // The next window: the 6 held are gone (the count reset), and returning them would
        // credit the new window.
        let later = Nanos(120 * SEC + 1);
        let (g, rec) = lease(&mut slot, rec, &long(4, Some((1, 2))), 2, later).unwrap();
        assert_eq!((g.held, g.decision.remaining), (4, 6));
        let rec = rec.unwrap();
        assert_eq!((rec.granted, rec.used, rec.expired), (10, 2, 4));
        // The holder admits 1 of the new 4 (cumulative 3) and ends the lease: 3 come back.
        let (g, _) = lease(&mut slot, Some(rec), &long(0, Some((1, 3))), 3, later).unwrap();
        assert_eq!((g.held, g.decision.remaining), (0, 9));
    }

    #[test]
    fn expiry_returns_only_inside_the_window() {
        let p = params(10, 60);
        let now = Nanos(60 * SEC + 1);
        for algo in [Algo::Fixed, Algo::Sliding, Algo::Token, Algo::Gcra] {
            let mut slot = None;
            let (_, rec) = lease(&mut slot, None, &call(algo, p, 6, None), 1, now).unwrap();
            let rec = rec.unwrap();
            let mut inside = slot.clone();
            assert!(end(&mut inside, &rec, 0, Nanos(61 * SEC)).1.is_some());
            assert_eq!(
                remaining(&mut inside, algo, p, Nanos(61 * SEC)),
                10,
                "{algo:?}"
            );
            let mut after = slot.clone();
            let next = Nanos(120 * SEC + 1);
            let before = remaining(&mut after, algo, p, next);
            let returned = end(&mut after, &rec, 0, next).1.is_some();
            assert_eq!(returned, !windowed(algo), "{algo:?}");
            if windowed(algo) {
                assert_eq!(remaining(&mut after, algo, p, next), before, "{algo:?}");
            }
        }
    }

    #[test]
    fn a_bucket_refills_no_further_than_its_capacity_less_what_is_held() {
        // 10 a minute: one token every 6 s.
        let (p, now) = (params(10, 60), Nanos(100 * SEC));
        let later = Nanos(160 * SEC);
        let long = |want, used, others| Call {
            ttl: TTL_MAX,
            held_by_others: others,
            ..call(Algo::Token, p, want, used)
        };
        let mut slot = None;
        let (_, rec) = lease(&mut slot, None, &long(6, None, 0), 1, now).unwrap();
        // A minute later the bucket alone would be full again (10) while 6 wait in the lease:
        // one bucket would have 10 in all, so the bucket keeps 4.
        let (g, rec) = lease(&mut slot, rec, &long(6, Some((1, 0)), 0), 2, later).unwrap();
        assert_eq!((g.held, g.decision.remaining), (6, 4));
        // Another holder's 3 count too; and a lease given back fills the room it took.
        let (g, _) = lease(&mut slot, rec, &long(0, Some((1, 0)), 3), 3, later).unwrap();
        assert_eq!((g.held, g.decision.remaining), (0, 7));
        // An expiry, the same: the bucket ends at the capacity less the others' tokens (here
        // the other holder's next call lowers it: the refilled key is no longer stored).
        let mut slot = None;
        let (_, a) = lease(&mut slot, None, &long(6, None, 0), 1, now).unwrap();
        let (_, b) = lease(&mut slot, None, &long(2, None, 6), 2, now).unwrap();
        let _ = end(&mut slot, &a.unwrap(), 2, later);
        let (g, _) = lease(&mut slot, b, &long(2, Some((2, 0)), 0), 3, later).unwrap();
        assert_eq!((g.held, g.decision.remaining), (2, 8));
    }

    #[test]
    fn a_report_read_after_the_expiry_charges_what_was_admitted() {
        let (p, now) = (params(10, 60), Nanos(100 * SEC));
        let mut slot = None;
        let (_, rec) = lease(&mut slot, None, &call(Algo::Token, p, 6, None), 1, now).unwrap();
        // The node stalls past the lease's TTL: the expiry gives all 6 back.
        let late = now.saturating_add(TTL_DEFAULT);
        let (ended, change) = end(&mut slot, &rec.unwrap(), 0, late);
        assert!(change.is_some());
        let ended = ended.unwrap();
        assert!(ended.ended && ended.held() == 0);
        assert_eq!(remaining(&mut slot, Algo::Token, p, late), 10);
        // The holder's renewal, sent in time, is read now: it had admitted 4 of the 6. They
        // are charged; then the new lease is taken.
        let (g, rec) = lease(
            &mut slot,
            Some(ended),
            &call(Algo::Token, p, 2, Some((1, 4))),
            2,
            late,
        )
        .unwrap();
        // The same id goes on: a reply lost now leaves the holder naming the right record.
        assert_eq!((g.lease_id, g.held, g.decision.remaining), (1, 2, 4));
        assert!(!rec.unwrap().ended);
        // An ended record is dropped at its own expiry, with nothing given back.
        let (gone, change) = end(&mut slot, &ended, 0, late.saturating_add(ENDED_KEPT));
        assert_eq!((gone, change), (None, None));
    }

    #[test]
    fn tokens_admitted_while_a_report_was_late_are_charged_not_refused() {
        // 10 a day: nothing refills while the test runs.
        let (p, now) = (params(10, 86_400), Nanos(100 * SEC));
        let short = |want, used| Call {
            ttl: Nanos::from_millis(50),
            ..call(Algo::Token, p, want, used)
        };
        let mut slot = None;
        let (_, a) = lease(&mut slot, None, &short(10, None), 1, now).unwrap();
        // A's sync is out (it admits 5 meanwhile); the node stalls past the TTL and gives the
        // 10 back; B takes them.
        let late = now.saturating_add(Nanos::from_millis(60));
        let (a, _) = end(&mut slot, &a.unwrap(), 0, late);
        let (_, _b) = lease(&mut slot, None, &short(10, None), 2, late).unwrap();
        // A's sync, read now, reported 0; its next reports the 5: charged, past empty.
        let (g, a) = lease(&mut slot, a, &short(10, Some((1, 0))), 3, late).unwrap();
        assert_eq!((g.lease_id, g.held), (1, 0));
        let (g, _) = lease(&mut slot, a, &short(0, Some((1, 5))), 4, late).unwrap();
        assert_eq!(g.decision.remaining, 0);
        // In debt by 5: the next token is 6 refills away, not 1.
        let one = check(&mut slot, Algo::Token, &Params { cost: 1, ..p }, late, true).unwrap();
        assert!(
            one.retry_after.unwrap() > Nanos::from_secs(5 * 8_640),
            "{one:?}"
        );
    }

    #[test]
    fn window_tokens_are_valid_until_their_window_ends() {
        let p = params(10, 60);
        for algo in [Algo::Fixed, Algo::Sliding] {
            let mut slot = None;
            let long = Call {
                ttl: TTL_MAX,
                ..call(algo, p, 2, None)
            };
            let (g, _) = lease(&mut slot, None, &long, 1, Nanos(100 * SEC)).unwrap();
            assert_eq!(g.valid, Nanos(20 * SEC), "{algo:?}");
        }
        let (g, _) = lease(
            &mut None,
            None,
            &call(Algo::Token, p, 2, None),
            1,
            Nanos(100 * SEC),
        )
        .unwrap();
        assert_eq!(g.valid, TTL_DEFAULT);
    }

    #[test]
    fn a_return_stops_at_a_fresh_key() {
        let (p, now) = (params(10, 60), Nanos(100 * SEC));
        let mut slot = None;
        let (_, rec) = lease(&mut slot, None, &call(Algo::Token, p, 6, None), 1, now).unwrap();
        // The key was deleted: the return finds a fresh key and leaves it fresh.
        let mut gone = None;
        assert_eq!(end(&mut gone, &rec.unwrap(), 0, now).1, None);
        assert_eq!(gone, None);
    }

    #[test]
    fn an_expired_record_is_returned_and_goes_on_under_its_id() {
        let (p, now) = (params(10, 60), Nanos(100 * SEC));
        let mut slot = None;
        let (_, rec) = lease(&mut slot, None, &call(Algo::Token, p, 6, None), 1, now).unwrap();
        let later = now.saturating_add(TTL_DEFAULT);
        let (g, _) = lease(
            &mut slot,
            rec,
            &call(Algo::Token, p, 6, Some((1, 0))),
            2,
            later,
        )
        .unwrap();
        assert_eq!((g.lease_id, g.held, g.decision.remaining), (1, 6, 4));
    }

    /// Holders that admit, report, lose replies and retry at random never hold more, between
    /// them, than the key gave and did not get back: what they admitted, what they still hold
    /// and what the key has left is never above the capacity (no refill while it runs), and
    /// once every holder ends its lease the key has back all that was not admitted.
    #[test]
    fn holders_at_random_never_over_admit() {
        #[derive(Default)]
        struct Holder {
            id: Option<u64>,
            count: u64,
            held: u64,
            record: Option<Record>,
        }
        for seed in 1..300u64 {
            let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let mut rand = move |n: u64| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % n
            };
            let algo = [Algo::Token, Algo::Gcra, Algo::Fixed, Algo::Sliding][(seed % 4) as usize];
            let p = params(20, 86_400);
            let mut now = Nanos(86_400 * SEC + 1);
            let (mut slot, mut admitted, mut next_id) = (None, 0u64, 1u64);
            let mut holders: Vec<Holder> = (0..3).map(|_| Holder::default()).collect();
            let send = |slot: &mut Option<State>, h: &mut Holder, want: u64, id: u64, now| {
                let c = Call {
                    ttl: TTL_MAX,
                    ..call(algo, p, want, h.id.map(|id| (id, h.count)))
                };
                // A holder asking for less holds no more than it asked for from then on.
                h.held = h.held.min(want);
                let (g, rec) = lease(slot, h.record, &c, id, now).unwrap();
                h.record = rec;
                g
            };
            for _ in 0..200 {
                now = now.saturating_add(Nanos(1_000_000));
                let h = &mut holders[rand(3) as usize];
                match rand(4) {
                    0 => {
                        let a = rand(h.held + 1);
                        (h.held, h.count, admitted) = (h.held - a, h.count + a, admitted + a);
                    }
                    r => {
                        let want = rand(21);
                        let g = send(&mut slot, h, want, next_id, now);
                        next_id += 1;
                        // One reply in four is lost: the holder keeps what it believed.
                        if r != 1 {
                            if h.id != Some(g.lease_id) {
                                h.count = 0;
                            }
                            (h.id, h.held) = (Some(g.lease_id), g.held);
                        }
                    }
                }
                let held: u64 = holders.iter().map(|h| h.held).sum();
                let left = bucket(&mut slot, algo, &p, now).unwrap().remaining;
                assert!(admitted + held + left <= 20, "{algo:?} seed {seed}");
            }
            for h in &mut holders {
                let g = send(&mut slot, h, 0, next_id, now);
                next_id += 1;
                assert_eq!(g.held, 0);
            }
            let left = bucket(&mut slot, algo, &p, now).unwrap().remaining;
            assert_eq!(admitted + left, 20, "{algo:?} seed {seed}: tokens lost");
        }
    }
}
