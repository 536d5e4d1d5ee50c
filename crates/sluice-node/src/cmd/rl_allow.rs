//! `RL.ALLOW` — the seed's `isRequestAllowed`: a request's attributes in, every rule that
//! applies to it checked at once.
//!
//! # Format
//! `RL.ALLOW [USER id] [IP addr] [KEY apikey] [TIER name] [ENDPOINT path] [COST n]
//! [RULES count name...] [DRY]`
//!
//! Every live rule with a `SCOPE` whose `TIER` (if any) equals the request's and whose `ROUTE`
//! (if any) prefixes its endpoint is checked on the attribute its scope names, in the bucket
//! `rule:subject` (the one `RL.HIT rule subject` uses). A rule whose attribute the request lacks
//! is skipped. All or nothing, as `RL.HITS`: every enforced check allows and every bucket
//! consumes, or none does.
//!
//! Reply: `*6` — `allowed limit remaining retry_after_ms reset_after_ms rule`, the most
//! restrictive decision as `RL.HITS` picks it. No rule applies: `*6 :1 :0 :0 :-1 :0` and a nil
//! rule (allowed, nothing counted).
//!
//! `RULES count name...` checks only those of the applying rules; `DRY` answers as if the
//! request were made and changes nothing (each bucket read on its own: a dry answer is not
//! atomic across buckets, the consuming one is).
//!
//! In cluster mode every bucket must be in one slot of this node: `-CROSSSLOT` otherwise. The
//! gateway library (`sluice_client::Client::allow`, which the sidecar uses) then splits the call
//! by slot with `RULES`: a `DRY` call per slot first, then, if all allow, the consuming call
//! per slot (see `sluice_client::allow` for the race that leaves).

use sluice_core::scope::{MAX_ATTR_LEN, Request};
use sluice_core::spec::SpecError;
use sluice_core::{Decision, Nanos};
use sluice_resp::reply;
use sluice_store::Check;

use super::rl_hit::{
    bucket_key, count_denial, count_metric, most_restrictive, parse_cost, reply_decision,
};
use super::route::check_serve;
use super::{Args, CmdError, Command, Ctx};
use crate::rules::Live;

#[derive(Debug)]
pub struct RlAllow<'a> {
    request: Request<'a>,
    cost: u64,
    /// `RULES`: only these rules (of those that apply).
    only: Option<Vec<&'a [u8]>>,
    dry: bool,
}

/// One rule that applies, resolved against its version for the subject.
struct Applies {
    name: Box<str>,
    subject: Vec<u8>,
    key: Vec<u8>,
    algo: sluice_core::Algo,
    params: sluice_core::Params,
    enforced: bool,
}

fn attribute<'a>(args: &mut Args<'a>, name: &str) -> Result<&'a [u8], CmdError> {
    let v = args
        .next()
        .ok_or_else(|| CmdError::msg(format!("ERR {name} needs a value")))?;
    if v.len() > MAX_ATTR_LEN {
        return Err(CmdError::msg(format!(
            "ERR {name} is longer than {MAX_ATTR_LEN} bytes"
        )));
    }
    Ok(v)
}

impl<'a> Command<'a> for RlAllow<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let mut request = Request::default();
        let mut cost = 1;
        let mut only = None;
        let mut dry = false;
        while let Some(opt) = args.next() {
            let is = |w: &str| opt.eq_ignore_ascii_case(w.as_bytes());
            let slot = match () {
                _ if is("DRY") => {
                    dry = true;
                    continue;
                }
                _ if is("RULES") => {
                    only = Some(parse_rules(args)?);
                    continue;
                }
                _ if is("USER") => &mut request.user,
                _ if is("IP") => &mut request.ip,
                _ if is("KEY") => &mut request.key,
                _ if is("TIER") => &mut request.tier,
                _ if is("ENDPOINT") => &mut request.endpoint,
                _ if is("COST") => {
                    cost = parse_cost(args)?;
                    continue;
                }
                _ => {
                    return Err(CmdError::msg(format!(
                        "ERR unknown option '{}' for 'rl.allow'",
                        String::from_utf8_lossy(opt)
                    )));
                }
            };
            let name = std::str::from_utf8(opt)
                .unwrap_or("option")
                .to_ascii_uppercase();
            *slot = Some(attribute(args, &name)?);
        }
        Ok(RlAllow {
            request,
            cost,
            only,
            dry,
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let shared = ctx.shared;
        let mut applies = shared.rules.with_all(|rules| {
            rules
                .filter(|live| {
                    self.only
                        .as_ref()
                        .is_none_or(|o| o.contains(&live.name.as_bytes()))
                })
                .filter_map(|live| resolve(live, &self.request, self.cost, ctx.now))
                .collect::<Vec<_>>()
        });
        if applies.is_empty() {
            reply::array(ctx.out, 6);
            for n in [1, 0, 0, -1, 0] {
                reply::integer(ctx.out, n);
            }
            reply::null(ctx.out, ctx.session.proto);
            return Ok(());
        }
        applies.sort_by(|a, b| a.name.cmp(&b.name));
        if let Some(a) = applies.iter().find(|a| a.params.cost > a.params.burst) {
            return Err(SpecError::CostExceedsCapacity {
                cost: a.params.cost,
                capacity: a.params.burst,
            }
            .into());
        }
        check_serve(ctx, applies.iter().map(|a| a.key.as_slice()), !self.dry)?;
        let checks: Vec<Check<'_>> = applies
            .iter()
            .map(|a| Check {
                key: &a.key,
                algo: a.algo,
                params: a.params,
                enforced: a.enforced,
                held: (shared.token_leases).held_for(&a.key, a.algo, a.params.cost > 0),
            })
            .collect();
        let mut decisions = Vec::with_capacity(checks.len());
        let pass = if self.dry {
            for c in &checks {
                let ahead = sluice_store::Ahead::NONE;
                let (algo, params, now) = (c.algo, &c.params, ctx.now);
                decisions.push(
                    (shared.store).check_ahead(c.key, ahead, algo, params, c.held, now, true)?,
                );
            }
            checks
                .iter()
                .zip(&decisions)
                .all(|(c, d)| d.allowed || !c.enforced)
        } else {
            let pass = shared.store.check_all(&checks, ctx.now, &mut decisions)?;
            count(ctx, &applies, &decisions);
            pass
        };
        let enforced: Vec<bool> = applies.iter().map(|a| a.enforced).collect();
        let i = most_restrictive(&enforced, &decisions, pass);
        reply_decision(ctx, &decisions[i], pass, 6);
        reply::bulk(ctx.out, applies[i].name.as_bytes());
        Ok(())
    }
}

/// `RULES count name...`.
fn parse_rules<'a>(args: &mut Args<'a>) -> Result<Vec<&'a [u8]>, CmdError> {
    let n = args
        .next()
        .and_then(super::parse_u64)
        .filter(|&n| (1..=super::rl_hit::MAX_CHECKS as u64).contains(&n))
        .ok_or_else(|| {
            CmdError::msg(format!(
                "ERR RULES needs a count from 1 to {} and that many rule names",
                super::rl_hit::MAX_CHECKS
            ))
        })?;
    (0..n)
        .map(|_| {
            args.next()
                .ok_or(CmdError::msg("ERR RULES names fewer rules than its count"))
        })
        .collect()
}

/// The check `live` asks of `request`, if it applies.
fn resolve(live: &Live, request: &Request<'_>, cost: u64, now: Nanos) -> Option<Applies> {
    let subject = live.current.spec.selector.subject(request)?;
    let spec = live.spec_for(subject, now);
    Some(Applies {
        name: live.name.clone(),
        subject: subject.to_vec(),
        key: bucket_key(live.name.as_bytes(), subject),
        algo: spec.algo,
        params: spec.params(cost),
        enforced: !spec.shadow,
    })
}

/// Counts each decision under its rule, as RL.HITS does.
fn count(ctx: &Ctx<'_>, applies: &[Applies], decisions: &[Decision]) {
    for (a, d) in applies.iter().zip(decisions) {
        ctx.shared.rules.with(a.name.as_bytes(), |live| {
            if let Some(live) = live {
                let spec = live.spec_for(&a.subject, ctx.now);
                if !d.allowed {
                    count_denial(live, spec);
                }
                count_metric(ctx, live, spec, d, &a.key);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use sluice_core::Nanos;

    use crate::{Config, Executor};

    fn run(e: &mut Executor, args: &str) -> String {
        let args: Vec<&[u8]> = args.split_whitespace().map(str::as_bytes).collect();
        String::from_utf8_lossy(&e.exec_at(Nanos::from_millis(1_000_000), &args)).into_owned()
    }

    #[test]
    fn allow_checks_each_matching_rule_on_its_subject() {
        let mut e = Executor::new(Config::default_for_tests());
        run(
            &mut e,
            "RL.RULE SET per-user LIMIT 3 PERIOD 1m SCOPE user TIER free",
        );
        run(
            &mut e,
            "RL.RULE SET per-ip LIMIT 2 PERIOD 1m SCOPE ip ROUTE /api",
        );
        run(&mut e, "RL.RULE SET per-key LIMIT 9 PERIOD 1m SCOPE key");
        run(&mut e, "RL.RULE SET named LIMIT 1 PERIOD 1m");
        let req = "RL.ALLOW USER alice IP 10.0.0.1 TIER free ENDPOINT /api/x";
        // per-ip (2) is the tighter: 1 left after the first call.
        assert_eq!(
            run(&mut e, req),
            "*6\r\n:1\r\n:2\r\n:1\r\n:-1\r\n:30000\r\n$6\r\nper-ip\r\n"
        );
        assert!(run(&mut e, req).starts_with("*6\r\n:1\r\n:2\r\n:0\r\n"));
        let denied = run(&mut e, req);
        assert!(
            denied.starts_with("*6\r\n:0\r\n:2\r\n:0\r\n") && denied.ends_with("$6\r\nper-ip\r\n"),
            "{denied}"
        );
        // All or nothing: the denial took nothing from alice's user bucket (1 left of 3).
        assert!(run(&mut e, "RL.HIT per-user alice").starts_with("*5\r\n:1\r\n:3\r\n:0\r\n"));
        // Another route: per-ip does not apply; the pro tier: per-user does not either.
        assert_eq!(
            run(&mut e, "RL.ALLOW IP 10.0.0.1 TIER pro ENDPOINT /web"),
            "*6\r\n:1\r\n:0\r\n:0\r\n:-1\r\n:0\r\n$-1\r\n"
        );
        assert!(run(&mut e, "RL.ALLOW KEY k1 ENDPOINT /web").ends_with("$7\r\nper-key\r\n"));
        assert!(run(&mut e, "RL.ALLOW KEY k1 COST 10").contains("exceeds the capacity 9"));
        assert!(run(&mut e, "RL.ALLOW COLOR red").contains("unknown option 'COLOR'"));
        assert!(run(&mut e, "RL.ALLOW USER").contains("USER needs a value"));
        // RULES narrows the rules; DRY changes nothing.
        let only_user = "RL.ALLOW USER bob IP 10.0.0.2 TIER free ENDPOINT /api RULES 1 per-user";
        assert!(run(&mut e, &format!("{only_user} DRY")).starts_with("*6\r\n:1\r\n:3\r\n:2\r\n"));
        assert!(run(&mut e, only_user).starts_with("*6\r\n:1\r\n:3\r\n:2\r\n"));
        assert!(run(&mut e, only_user).starts_with("*6\r\n:1\r\n:3\r\n:1\r\n"));
        assert!(
            run(
                &mut e,
                "RL.ALLOW IP 10.0.0.2 ENDPOINT /api RULES 1 per-ip DRY"
            )
            .ends_with("$6\r\nper-ip\r\n")
        );
        assert!(run(&mut e, "RL.ALLOW USER a RULES 0").contains("RULES needs a count"));
        assert!(run(&mut e, "RL.ALLOW USER a RULES 2 per-user").contains("fewer rules"));
        let long = "x".repeat(600);
        assert!(run(&mut e, &format!("RL.ALLOW USER {long}")).contains("longer than 512"));
    }
}
