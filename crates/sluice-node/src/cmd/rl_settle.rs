//! `RL.SETTLE key limit period reserved actual [BURST b] [ALGO a]` — after an
//! `RL.CHECK ... COST reserved`, correct the key by the cost the work really had.
//!
//! # Format
//! Reply: RL.CHECK's `*5 :allowed :limit :remaining :retry_after_ms :reset_after_ms`, after the
//! correction. `allowed` is 0 when the correction left the key past empty (in debt): the next
//! requests wait, and `retry_after_ms` says until when a request of cost 1 fits. `limit`,
//! `period`, `BURST` and `ALGO` must be those of the check. A refund stops at a fresh key; a
//! debt stops at one capacity (see [`sluice_core::settle`]). `ALGO LEAKY` is refused. It
//! replicates as a check does: the key's new state.

use sluice_core::spec::{self, SpecError, count, parse_algo, parse_period};
use sluice_core::{Algo, Params};
use sluice_resp::reply;

use super::rl_check::{check_error, clamp};
use super::{Args, CmdError, Command, Ctx, parse_u64};

#[derive(Debug)]
pub struct RlSettle<'a> {
    key: &'a [u8],
    algo: Algo,
    params: Params,
    reserved: u64,
    actual: u64,
}

/// A cost argument: a non-negative integer.
fn cost(arg: &[u8], name: &str) -> Result<u64, CmdError> {
    parse_u64(arg)
        .ok_or_else(|| CmdError::msg(format!("ERR {name} must be a non-negative integer")))
}

impl<'a> Command<'a> for RlSettle<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let key = args.key()?;
        let limit = count(args.required()?, "limit")?;
        let period = parse_period(args.required()?).map_err(SpecError::from)?;
        let reserved = cost(args.required()?, "reserved")?;
        let actual = cost(args.required()?, "actual")?;
        let (mut burst, mut algo) = (None, Algo::Token);
        while let Some(opt) = args.next() {
            let mut value = |name| args.next().ok_or(SpecError::NeedsValue(name));
            if opt.eq_ignore_ascii_case(b"BURST") {
                burst = Some(count(value("BURST")?, "BURST")?);
            } else if opt.eq_ignore_ascii_case(b"ALGO") {
                algo = parse_algo(value("ALGO")?)?;
            } else {
                return Err(CmdError::msg(format!(
                    "ERR unknown option '{}' for 'rl.settle'",
                    String::from_utf8_lossy(opt)
                )));
            }
        }
        if algo == Algo::Leaky {
            return Err(CmdError::msg(
                "ERR RL.SETTLE does not apply to ALGO LEAKY: the requests queued behind this one were already told when to leave",
            ));
        }
        let params = spec::validate(algo, limit, period, burst, 0)?;
        // Validated, `burst` is the capacity every algorithm takes a cost from.
        if reserved > params.burst {
            return Err(CmdError::msg(format!(
                "ERR reserved {reserved} exceeds the capacity {}: no check of it was allowed",
                params.burst
            )));
        }
        Ok(RlSettle {
            key,
            algo,
            params,
            reserved,
            actual,
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let now = ctx.now;
        let (algo, params) = (self.algo, &self.params);
        let d = ctx
            .shared
            .store
            .limiter(self.key, now, |slot| {
                let d = sluice_core::settle(slot, algo, params, self.reserved, self.actual, now)?;
                Ok((d, Some(d.reset_after)))
            })
            .map_err(|e| check_error(e, algo, params))?;
        reply::int_array(
            ctx.out,
            &[
                i64::from(d.allowed),
                clamp(d.limit),
                clamp(d.remaining),
                d.retry_after_ms(),
                d.reset_after_ms(),
            ],
        );
        Ok(())
    }
}
