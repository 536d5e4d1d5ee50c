//! `RL.CHECK key limit period [BURST n] [COST n] [ALGO name] [DRY]` — check and consume a rate
//! limit atomically.
//!
//! # Format
//! Reply (RESP2 and RESP3 alike): `*5 :allowed :limit :remaining :retry_after_ms :reset_after_ms`.
//! `period` is integer seconds or a duration with a unit (`500ms`, `10s`, `1m`, `1h`, `1d`).
//! Every argument is validated before the store is touched, so a bad one changes nothing and its
//! error names it.
//!
//! `FAILMODE open|closed|local`, `SPLIT k` and `APPROX ms` are gateway options (`sluice proxy`
//! acts on them and strips them): a node validates and ignores them, so a client can move between
//! a node and a sidecar unchanged.

use sluice_core::spec::{CheckArgs, SpecError};
use sluice_core::{Algo, CheckError, Params};
use sluice_resp::reply::{self, IntLine};
use sluice_store::StoreError;

use super::{Args, CmdError, Command, Ctx};

mod memo;

#[derive(Debug)]
pub struct RlCheck<'a> {
    key: &'a [u8],
    algo: Algo,
    params: Params,
    dry: bool,
    /// The reply line of the limit the decision will carry, encoded with the parse (and so
    /// remembered with it).
    limit: IntLine,
}

impl<'a> Command<'a> for RlCheck<'a> {
    const ROUTED_AFTER_PARSE: bool = true;

    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let key = args.key()?;
        let wire = args.wire_rest();
        if let Some(parsed) = wire.and_then(memo::lookup) {
            args.rest();
            return Ok(RlCheck::with(key, parsed));
        }
        // The gateway options (FAILMODE, SPLIT, APPROX) are validated and ignored here.
        let spec = CheckArgs::parse(args.rest())?;
        let params = spec.params()?;
        let parsed = memo::Parsed {
            algo: spec.algo,
            params,
            dry: spec.dry,
            limit: IntLine::new(clamp(reported_limit(spec.algo, &params))),
        };
        if let Some(wire) = wire {
            memo::store(wire, parsed);
        }
        Ok(RlCheck::with(key, parsed))
    }

    fn keys(&self) -> impl Iterator<Item = &[u8]> {
        std::iter::once(self.key)
    }

    /// DRY and COST 0 only read: a replica serves them (to a READONLY connection, in a cluster).
    fn writes(&self) -> bool {
        !self.dry && self.params.cost > 0
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let decision = check_key(
            ctx.shared,
            self.key,
            ctx.ahead,
            self.algo,
            &self.params,
            ctx.now,
            self.dry,
        )
        .map_err(|e| check_error(e, self.algo, &self.params))?;
        if !self.dry {
            let stats = ctx.shared.stats.slot(ctx.session.thread);
            stats.check(
                crate::stats::RuleId::UNNAMED,
                self.algo,
                &decision,
                false,
                self.key,
                ctx.now,
            );
        }
        let limit = clamp(decision.limit);
        let fresh;
        let line = if self.limit.value() == limit {
            &self.limit
        } else {
            fresh = IntLine::new(limit);
            &fresh
        };
        reply::check(
            ctx.out,
            decision.allowed,
            line,
            clamp(decision.remaining),
            decision.retry_after_ms(),
            decision.reset_after_ms(),
        );
        Ok(())
    }
}

/// One key's check as RL.CHECK makes it (RL.HIT's, RL.ALLOW DRY's and gRPC's too): `ahead` is
/// the key's hash if the batch took it (the connection's prefetch). Gateways that hold leases
/// of this key's tokens (RL.LEASE, approximate mode) keep them: the bucket refills no further
/// than its capacity less what they hold, here as there, and a DRY check answers as its real
/// call would.
#[inline]
pub fn check_key(
    shared: &crate::shared::Shared,
    key: &[u8],
    ahead: sluice_store::Ahead,
    algo: Algo,
    params: &Params,
    now: sluice_core::Nanos,
    dry: bool,
) -> Result<sluice_core::Decision, StoreError> {
    let held = (shared.token_leases).held_for(key, algo, params.cost > 0);
    (shared.store).check_ahead(key, ahead, algo, params, held, now, dry)
}

impl<'a> RlCheck<'a> {
    fn with(key: &'a [u8], parsed: memo::Parsed) -> RlCheck<'a> {
        RlCheck {
            key,
            algo: parsed.algo,
            params: parsed.params,
            dry: parsed.dry,
            limit: parsed.limit,
        }
    }
}

/// The limit a decision of `algo` reports: the bucket's capacity for the GCRA family, the
/// window's limit for the others. A guess made at parse time, checked against the decision.
fn reported_limit(algo: Algo, params: &Params) -> u64 {
    match algo {
        Algo::Token | Algo::Gcra | Algo::Leaky => params.burst,
        Algo::Sliding | Algo::Fixed | Algo::Log => params.limit,
    }
}

pub(crate) fn clamp(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A store error of a check, in the words of the spec that would have refused it up front.
pub(super) fn check_error(e: StoreError, algo: Algo, params: &Params) -> CmdError {
    match e {
        StoreError::Check(CheckError::CostExceedsCapacity) => SpecError::CostExceedsCapacity {
            cost: params.cost,
            capacity: params.burst,
        }
        .into(),
        StoreError::Check(CheckError::LimitTooLarge { max }) => {
            SpecError::LimitTooLarge { algo, max }.into()
        }
        other => other.into(),
    }
}
