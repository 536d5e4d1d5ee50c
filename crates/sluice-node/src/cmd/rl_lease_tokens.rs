//! `RL.LEASE key limit period HOLDER h WANT n [USED id count] [TTL ttl] [BURST b] [ALGO a]` —
//! a gateway takes tokens from a key before it admits the requests they pay for, and gives
//! back what it did not use, in one call.
//!
//! # Format
//! Reply (RESP2 and RESP3 alike):
//! `*7 :lease_id :held :limit :remaining :retry_after_ms :reset_after_ms :valid_ms`.
//! - `lease_id`: names the holder's record of the key; the same while the record lives, a new
//!   one whenever a record is made.
//! - `held`: the tokens the holder holds after the call, which it may admit.
//! - `limit`, `remaining`, `retry_after_ms` (-1 while `remaining > 0`, else the time until a
//!   check of cost 1 fits) and `reset_after_ms`: what RL.CHECK would answer now for the key.
//! - `valid_ms`: how long the held tokens stay valid: the TTL, or less where a FIXED or
//!   SLIDING window ends sooner.
//!
//! Arguments, options in any order and case-insensitive:
//! - `limit`, `period`, `BURST`, `ALGO` as RL.CHECK's. `ALGO LEAKY` and `ALGO LOG` are refused.
//! - `HOLDER h` (required): the gateway's id, 1 to 64 bytes.
//! - `WANT n` (required): the tokens the holder wants to hold after the call, from 0 to the
//!   capacity (BURST for TOKEN and GCRA, `limit` for FIXED and SLIDING). `WANT 0` gives every
//!   token back and ends the record.
//! - `USED id count`: the record the holder got `id` from and the cumulative number of tokens
//!   it admitted from it. Absent: the holder knows no record of the key. A count above what
//!   the record was given is an error.
//! - `TTL ttl` (default 1s, from 1ms to 1h, a duration as `period`): the node keeps the record
//!   this long without a call. Then it gives the unused tokens back itself, one housekeeping
//!   tick (10 ms) at most after the TTL.
//!
//! The semantics (the record, what is taken and returned, FIXED and SLIDING windows, a lost
//! reply, a retry) are [`sluice_core::token_lease`]'s; the records' storage, bounds and expiry
//! are [`crate::token_leases`]'s. A key holds at most 256 holders' records and a node 100,000:
//! past either, a new record is refused with an error. Every change to the key replicates as a
//! check does (the key's new state); the records are neither replicated nor saved.
//! Every argument is validated before anything is touched: an error changes nothing.

use sluice_core::Algo;
use sluice_core::spec::{self, SpecError, count, parse_algo, parse_period};
use sluice_core::token_lease::{
    self, Call, HOLDER_LEN_MAX, HOLDERS_PER_KEY_MAX, LeaseError, RECORDS_MAX, TTL_DEFAULT, TTL_MAX,
    TTL_MIN,
};
use sluice_resp::reply;
use sluice_store::StoreError;

use super::rl_check::{check_error, clamp};
use super::{Args, CmdError, Command, Ctx, parse_u64};
use crate::token_leases::Full;

#[derive(Debug)]
pub struct RlLease<'a> {
    key: &'a [u8],
    holder: &'a [u8],
    call: Call,
}

fn option_error(opt: &[u8]) -> CmdError {
    CmdError::msg(format!(
        "ERR unknown option '{}' for 'rl.lease'",
        String::from_utf8_lossy(opt)
    ))
}

fn non_negative(arg: &[u8], name: &str) -> Result<u64, CmdError> {
    parse_u64(arg)
        .filter(|&n| i64::try_from(n).is_ok())
        .ok_or_else(|| CmdError::msg(format!("ERR {name} must be a non-negative integer")))
}

fn ttl(arg: &[u8]) -> Result<sluice_core::Nanos, CmdError> {
    parse_period(arg)
        .ok()
        .filter(|t| (TTL_MIN..=TTL_MAX).contains(t))
        .ok_or_else(|| CmdError::msg("ERR TTL must be a duration from 1ms to 1h"))
}

impl<'a> Command<'a> for RlLease<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let key = args.key()?;
        let limit = count(args.required()?, "limit")?;
        let period = parse_period(args.required()?).map_err(SpecError::from)?;
        let (mut holder, mut want, mut used, mut ttl_) = (None, None, None, TTL_DEFAULT);
        let (mut burst, mut algo) = (None, Algo::Token);
        while let Some(opt) = args.next() {
            let mut value = |name| args.next().ok_or(SpecError::NeedsValue(name));
            if opt.eq_ignore_ascii_case(b"HOLDER") {
                let h = value("HOLDER")?;
                if h.is_empty() || h.len() > HOLDER_LEN_MAX {
                    return Err(CmdError::msg(format!(
                        "ERR HOLDER must be 1 to {HOLDER_LEN_MAX} bytes"
                    )));
                }
                holder = Some(h);
            } else if opt.eq_ignore_ascii_case(b"WANT") {
                want = Some(non_negative(value("WANT")?, "WANT")?);
            } else if opt.eq_ignore_ascii_case(b"USED") {
                let id = spec::positive(value("USED")?)
                    .ok_or_else(|| CmdError::msg("ERR USED id must be a positive integer"))?;
                let n = non_negative(value("USED")?, "USED count")?;
                used = Some((id, n));
            } else if opt.eq_ignore_ascii_case(b"TTL") {
                ttl_ = ttl(value("TTL")?)?;
            } else if opt.eq_ignore_ascii_case(b"BURST") {
                burst = Some(count(value("BURST")?, "BURST")?);
            } else if opt.eq_ignore_ascii_case(b"ALGO") {
                algo = parse_algo(value("ALGO")?)?;
            } else {
                return Err(option_error(opt));
            }
        }
        match algo {
            Algo::Leaky => {
                return Err(CmdError::msg(
                    "ERR RL.LEASE does not apply to ALGO LEAKY: its queued requests were already told when to leave",
                ));
            }
            Algo::Log => {
                return Err(CmdError::msg(
                    "ERR RL.LEASE does not apply to ALGO LOG: tokens taken ahead of their requests would expire early",
                ));
            }
            _ => {}
        }
        let (Some(holder), Some(want)) = (holder, want) else {
            return Err(CmdError::msg("ERR RL.LEASE needs HOLDER h and WANT n"));
        };
        let params = spec::validate(algo, limit, period, burst, 0)?;
        let capacity = token_lease::capacity(algo, &params);
        if want > capacity {
            return Err(CmdError::msg(format!(
                "ERR WANT {want} exceeds the capacity {capacity}"
            )));
        }
        Ok(RlLease {
            key,
            holder,
            call: Call {
                algo,
                params,
                want,
                used,
                ttl: ttl_,
                held_by_others: 0,
            },
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let now = ctx.now;
        let leases = &ctx.shared.token_leases;
        let call = &self.call;
        // The record before the call, once the call changed it: a key the store then fails
        // to keep (out of memory) must not leave the record counting tokens it never took.
        let mut before = None;
        let outcome = ctx.shared.store.limiter(self.key, now, |slot| {
            let result = leases.update(
                self.key,
                self.holder,
                call.algo,
                |record, room, new_id, others| {
                    if let (None, Err(full), true) = (record, room, call.want > 0) {
                        return Err(Refused::Full(full));
                    }
                    let call = Call {
                        held_by_others: others,
                        ..*call
                    };
                    let (g, new) = token_lease::lease(slot, record, &call, new_id, now)
                        .map_err(Refused::Lease)?;
                    before = Some(record);
                    Ok((g, new))
                },
            );
            match result {
                Ok(g) => Ok((Ok(g), g.changed.then_some(g.decision.reset_after))),
                Err(Refused::Lease(LeaseError::Check(e))) => Err(e),
                Err(e) => Ok((Err(e), None)),
            }
        });
        let outcome = outcome.map_err(|e| {
            if let Some(record) = before {
                let _ = leases.update(self.key, self.holder, call.algo, |_, _, _, _| {
                    Ok::<_, ()>(((), record))
                });
            }
            check_error(e, call.algo, &call.params)
        })?;
        let g = outcome.map_err(|e| refused(e, call))?;
        let d = g.decision;
        reply::int_array(
            ctx.out,
            &[
                clamp(g.lease_id),
                clamp(g.held),
                clamp(d.limit),
                clamp(d.remaining),
                d.retry_after_ms(),
                d.reset_after_ms(),
                clamp(g.valid.0 / 1_000_000),
            ],
        );
        Ok(())
    }
}

/// Why a call changed nothing, besides the key's type.
enum Refused {
    Full(Full),
    Lease(LeaseError),
}

fn refused(e: Refused, call: &Call) -> CmdError {
    match e {
        Refused::Full(Full::Key) => CmdError::msg(format!(
            "ERR the key has leases of {HOLDERS_PER_KEY_MAX} holders, the most a key keeps"
        )),
        Refused::Full(Full::Node) => CmdError::msg(format!(
            "ERR the node keeps {RECORDS_MAX} leases of tokens, the most it keeps"
        )),
        Refused::Lease(LeaseError::UsedAboveGranted { count, granted }) => CmdError::msg(format!(
            "ERR USED count {count} exceeds the {granted} tokens the lease was given"
        )),
        Refused::Lease(LeaseError::NotApplicable(algo)) => CmdError::msg(format!(
            "ERR RL.LEASE does not apply to ALGO {}",
            algo.name()
        )),
        Refused::Lease(LeaseError::Check(e)) => {
            check_error(StoreError::Check(e), call.algo, &call.params)
        }
    }
}
