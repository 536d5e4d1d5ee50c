//! `RL.RULE SET|GET|DEL|LIST|HISTORY|ROLLBACK` — named rules (see `rules`).
//!
//! # Format
//! - `RL.RULE SET name LIMIT n PERIOD p [BURST b] [ALGO a] [FAILMODE open|closed|local]
//!   [SHADOW] [FLOOR n] [ROLLOUT pct]` → `:version` of the new version.
//! - `RL.RULE GET name` → a map (RESP3) or flat array (RESP2): `name`, `version`, `limit`,
//!   `period_ms`, `burst`, `algo`, `failmode`, `shadow`, `floor` (0: none), `rollout`,
//!   `spec` (the spec text), `denied`, `shadow_denied`; nil if there is no such rule.
//! - `RL.RULE DEL name` → `:1`, or `:0` if there was no such rule.
//! - `RL.RULE LIST` → the names, sorted.
//! - `RL.RULE HISTORY name` → one `[version, spec text]` pair per version, oldest first.
//! - `RL.RULE ROLLBACK name [version]` → `:version` of the new version, a copy of `version`
//!   (default: the one before the current) applied to every subject.
//!
//! With `--rules FILE`, SET, DEL and ROLLBACK are refused: the file is the source. With
//! `--rules-etcd` they write to etcd, and answer once etcd has the new revision.

use sluice_resp::reply;

use super::{Args, CmdError, Command, Ctx};
use crate::rules::{self, RuleSpec, Source};

#[derive(Debug)]
pub enum RlRule<'a> {
    Set(&'a str, RuleSpec),
    Get(&'a str),
    Del(&'a str),
    List,
    History(&'a str),
    Rollback(&'a str, Option<u64>),
}

impl<'a> Command<'a> for RlRule<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let sub = args.key()?.to_ascii_uppercase();
        let mut name = || -> Result<&'a str, CmdError> { Ok(rules::check_name(args.key()?)?) };
        let cmd = match sub.as_slice() {
            b"SET" => {
                let n = name()?;
                RlRule::Set(n, rules::parse_spec(args.rest())?)
            }
            b"GET" => RlRule::Get(name()?),
            b"DEL" => RlRule::Del(name()?),
            b"LIST" => RlRule::List,
            b"HISTORY" => RlRule::History(name()?),
            b"ROLLBACK" => {
                let n = name()?;
                let v =
                    match args.next() {
                        None => None,
                        Some(v) => Some(super::parse_u64(v).ok_or_else(|| {
                            CmdError::msg("ERR version must be a positive integer")
                        })?),
                    };
                RlRule::Rollback(n, v)
            }
            _ => {
                return Err(CmdError::msg(format!(
                    "ERR unknown subcommand '{}'. Try RL.RULE SET|GET|DEL|LIST|HISTORY|ROLLBACK.",
                    String::from_utf8_lossy(&sub)
                )));
            }
        };
        args.finish()?;
        Ok(cmd)
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let rules = &ctx.shared.rules;
        let writes = matches!(
            self,
            RlRule::Set(..) | RlRule::Del(_) | RlRule::Rollback(..)
        );
        if writes && let Source::File(path) = &rules.source {
            return Err(CmdError::msg(format!(
                "ERR rules come from {}: edit that file (it is reloaded when it changes)",
                path.display()
            )));
        }
        match self {
            RlRule::Set(name, spec) => {
                let spec = rules.prepare(name, spec)?;
                let v = write(ctx, name, Some(spec))?;
                reply::integer(ctx.out, v as i64);
            }
            RlRule::Rollback(name, to) => {
                let spec = rules.rollback_target(name, to)?;
                let v = write(ctx, name, Some(spec))?;
                reply::integer(ctx.out, v as i64);
            }
            RlRule::Del(name) => {
                let existed = rules.get(name).is_some();
                if existed {
                    write(ctx, name, None)?;
                }
                reply::integer(ctx.out, i64::from(existed));
            }
            RlRule::Get(name) => match rules.get(name) {
                None => reply::null(ctx.out, ctx.session.proto),
                Some(live) => {
                    // `limit` and `burst` are what this node enforces (a GLOBAL rule's regional
                    // share); `spec` is the rule as declared.
                    let s = &live.current.spec;
                    let declared = rules
                        .history(name)
                        .and_then(|h| h.last().map(|v| v.spec.to_text()))
                        .unwrap_or_else(|| s.to_text());
                    let c = &live.counters;
                    let load = |a: &std::sync::atomic::AtomicU64| {
                        a.load(std::sync::atomic::Ordering::Relaxed) as i64
                    };
                    let out = &mut *ctx.out;
                    reply::map(out, ctx.session.proto, 13);
                    let field = |out: &mut bytes::BytesMut, k: &str| reply::bulk(out, k.as_bytes());
                    field(out, "name");
                    reply::bulk(out, live.name.as_bytes());
                    field(out, "version");
                    reply::integer(out, live.current.version as i64);
                    field(out, "limit");
                    reply::integer(out, super::rl_check::clamp(s.limit));
                    field(out, "period_ms");
                    reply::integer(out, super::rl_check::clamp(s.period.as_millis_ceil()));
                    field(out, "burst");
                    reply::integer(out, super::rl_check::clamp(s.burst.unwrap_or(s.limit)));
                    field(out, "algo");
                    reply::bulk(out, s.algo.name().as_bytes());
                    field(out, "failmode");
                    reply::bulk(out, s.failmode.name().as_bytes());
                    field(out, "shadow");
                    reply::integer(out, i64::from(s.shadow));
                    field(out, "floor");
                    reply::integer(out, super::rl_check::clamp(s.floor.unwrap_or(0)));
                    field(out, "rollout");
                    reply::integer(out, i64::from(s.rollout));
                    field(out, "spec");
                    reply::bulk(out, declared.as_bytes());
                    field(out, "denied");
                    reply::integer(out, load(&c.denied));
                    field(out, "shadow_denied");
                    reply::integer(out, load(&c.shadow_denied));
                }
            },
            RlRule::List => {
                let names = rules.names();
                reply::array(ctx.out, names.len());
                for n in names {
                    reply::bulk(ctx.out, n.as_bytes());
                }
            }
            RlRule::History(name) => {
                let versions = rules
                    .history(name)
                    .ok_or_else(|| CmdError::msg(format!("ERR no such rule '{name}'")))?;
                reply::array(ctx.out, versions.len());
                for v in versions {
                    reply::array(ctx.out, 2);
                    reply::integer(ctx.out, v.version as i64);
                    reply::bulk(ctx.out, v.spec.to_text().as_bytes());
                }
            }
        }
        Ok(())
    }
}

/// Makes `spec` (or, with `None`, a deletion) the next version of `name` in this node's
/// source; returns the new version's number.
fn write(ctx: &mut Ctx<'_>, name: &str, spec: Option<RuleSpec>) -> Result<u64, CmdError> {
    let rules = &ctx.shared.rules;
    match (&rules.source, spec) {
        (Source::Etcd, spec) => {
            let etcd =
                ctx.shared.rules_etcd.get().ok_or_else(|| {
                    CmdError::msg("ERR rules etcd is not connected yet; try again")
                })?;
            etcd.write(name, spec.as_ref())
                .map_err(|e| CmdError::msg(format!("ERR rules etcd write failed: {e}")))
        }
        (_, Some(spec)) => Ok(rules.install(name, spec, None)),
        (_, None) => {
            rules.delete(name);
            Ok(0)
        }
    }
}
