//! `RL.TOP [DENIED|ALLOWED] [COUNT n] [RULE name] [WINDOW 1m|15m]` and `RL.RATES`: who is
//! being limited, and how fast each rule allows and denies (see [`crate::top`]).
//!
//! # Format
//! `RL.TOP` answers an array, largest count first, of `[key, rule, count, error, last seen
//! (Unix ms)]`. The rule is empty for a check under no rule. `count` is an upper estimate and
//! `error` how much it may exceed the truth: for DENIED the key's denials in the window lie in
//! `[count - error, count]`; ALLOWED is sampled 1 in 16 and scaled, so it carries sampling noise
//! besides. A denial under a shadow rule counts as DENIED. Defaults: DENIED, COUNT 10, every
//! rule, WINDOW 1m (the last 60 to 75 s; 15m, the last 15 minutes to 15 minutes 15 s).
//!
//! `RL.RATES` answers `["step-ms", 10000, "end-ms", end, "rules", [[name, allowed, denied,
//! shadow-denied], ...]]`, each of the three an array of 90 step counts, oldest first, the last
//! the step in progress (it ends at `end`, Unix ms). Rules with no check in the 15 minutes are
//! left out; the rule of plain checks is named "".
//!
//! Both are `@admin`: `RL.TOP` shows other clients' keys, as `SLOWLOG GET` shows their commands.

use sluice_resp::reply;

use super::rl_check::clamp;
use super::{Args, CmdError, Command, Ctx};
use crate::top::{Kind, RATE_STEP_MS, Window};

/// The most keys one `RL.TOP` returns.
const MAX_COUNT: usize = 1000;

#[derive(Debug)]
pub struct RlTop<'a> {
    kind: Kind,
    count: usize,
    rule: Option<&'a [u8]>,
    window: Window,
}

impl<'a> Command<'a> for RlTop<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let mut top = RlTop {
            kind: Kind::Denied,
            count: 10,
            rule: None,
            window: Window::Minute,
        };
        let mut words = args.rest();
        while let Some(word) = words.next() {
            match word.to_ascii_uppercase().as_slice() {
                b"DENIED" => top.kind = Kind::Denied,
                b"ALLOWED" => top.kind = Kind::Allowed,
                b"COUNT" => {
                    let n = words.next().ok_or(CmdError::Syntax)?;
                    top.count = std::str::from_utf8(n)
                        .ok()
                        .and_then(|s| s.parse::<usize>().ok())
                        .filter(|n| (1..=MAX_COUNT).contains(n))
                        .ok_or_else(|| {
                            CmdError::msg(format!("ERR COUNT must be between 1 and {MAX_COUNT}"))
                        })?;
                }
                b"RULE" => top.rule = Some(words.next().ok_or(CmdError::Syntax)?),
                b"WINDOW" => {
                    let w = words.next().ok_or(CmdError::Syntax)?;
                    top.window = match w.to_ascii_lowercase().as_slice() {
                        b"1m" => Window::Minute,
                        b"15m" => Window::Quarter,
                        _ => return Err(CmdError::msg("ERR WINDOW must be 1m or 15m")),
                    };
                }
                _ => return Err(CmdError::Syntax),
            }
        }
        Ok(top)
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let stats = &ctx.shared.stats;
        let rule = match self.rule {
            None => None,
            Some(name) => match std::str::from_utf8(name)
                .ok()
                .and_then(|n| stats.known_rule(n))
            {
                Some(id) => Some(id),
                // A rule that never counted a check has no keys.
                None => {
                    reply::array(ctx.out, 0);
                    return Ok(());
                }
            },
        };
        let top = stats.top(self.kind, self.window, rule, self.count, ctx.now);
        reply::array(ctx.out, top.len());
        for e in &top {
            reply::array(ctx.out, 5);
            reply::bulk(ctx.out, &e.key);
            reply::bulk(ctx.out, stats.rule_name(e.rule).as_bytes());
            reply::integer(ctx.out, clamp(e.count));
            reply::integer(ctx.out, clamp(e.error));
            reply::integer(ctx.out, clamp(e.last_ms));
        }
        Ok(())
    }
}

#[derive(Debug)]
pub struct RlRates;

impl Command<'_> for RlRates {
    fn parse(_: &mut Args<'_>) -> Result<Self, CmdError> {
        Ok(RlRates)
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let (end, rules) = ctx.shared.stats.rates(ctx.now);
        reply::array(ctx.out, 6);
        reply::bulk(ctx.out, b"step-ms");
        reply::integer(ctx.out, RATE_STEP_MS as i64);
        reply::bulk(ctx.out, b"end-ms");
        reply::integer(ctx.out, clamp(end));
        reply::bulk(ctx.out, b"rules");
        reply::array(ctx.out, rules.len());
        for r in &rules {
            reply::array(ctx.out, 4);
            reply::bulk(ctx.out, r.name.as_bytes());
            for steps in [&r.allowed, &r.denied, &r.shadow] {
                reply::array(ctx.out, steps.len());
                for &n in steps {
                    reply::integer(ctx.out, clamp(n));
                }
            }
        }
        Ok(())
    }
}
