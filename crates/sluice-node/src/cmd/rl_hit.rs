//! `RL.HIT name subject [COST n]` and `RL.HITS` — checks under named rules.
//!
//! # Format
//! - `RL.HIT name subject [COST n]` checks the bucket `name:subject` under rule `name` and
//!   replies as RL.CHECK: `*5 :allowed :limit :remaining :retry_after_ms :reset_after_ms`. A
//!   shadow rule decides and counts, and always replies allowed.
//! - `RL.HITS subject rule [rule ...] [COST n]` checks `subject` under every rule at once;
//!   `RL.HITS KEYS key limit period [key limit period ...] [COST n]` does the same for plain
//!   RL.CHECK buckets (ALGO TOKEN). All or nothing: if every (enforced) check allows, every
//!   bucket consumes; if any denies, none does. Reply: `*6` — the five RL.CHECK fields of the
//!   most restrictive decision (the denial with the longest retry_after; when allowed, the
//!   fewest remaining), then the rule name (or key) that gave it.
//!
//! In cluster mode every bucket must be in this node's slots and all in one slot: give the
//! subject a hash tag (`{user42}`) so `rule:{user42}` keys share it; otherwise CROSSSLOT.

use sluice_core::{Algo, Decision};
use sluice_resp::reply;
use sluice_store::Check;

use super::args::parse_u64;
use sluice_core::spec::{SpecError, count, parse_period, validate};

use super::rl_check::clamp;
use super::{Args, CmdError, Command, Ctx};
use crate::rules::{Live, RuleSpec};
use crate::stats::RuleId;

pub(super) fn parse_cost(args: &mut Args<'_>) -> Result<u64, CmdError> {
    let v = args
        .next()
        .ok_or_else(|| CmdError::msg("ERR COST needs a value"))?;
    parse_u64(v).ok_or_else(|| CmdError::msg("ERR COST must be a non-negative integer"))
}

/// `name:subject`.
pub(super) fn bucket_key(name: &[u8], subject: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(name.len() + 1 + subject.len());
    key.extend_from_slice(name);
    key.push(b':');
    key.extend_from_slice(subject);
    key
}

/// `name:subject` on the stack when it is short (it nearly always is): RL.HIT is the hot path
/// of named rules.
struct BucketKey {
    inline: [u8; 128],
    len: usize,
    long: Vec<u8>,
}

impl BucketKey {
    fn new(name: &[u8], subject: &[u8]) -> BucketKey {
        let len = name.len() + 1 + subject.len();
        let mut key = BucketKey {
            inline: [0; 128],
            len,
            long: Vec::new(),
        };
        if len > key.inline.len() {
            key.long = bucket_key(name, subject);
        } else {
            key.inline[..name.len()].copy_from_slice(name);
            key.inline[name.len()] = b':';
            key.inline[name.len() + 1..len].copy_from_slice(subject);
        }
        key
    }

    fn as_bytes(&self) -> &[u8] {
        if self.long.is_empty() {
            &self.inline[..self.len]
        } else {
            &self.long
        }
    }
}

impl std::fmt::Debug for BucketKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.as_bytes()))
    }
}

pub(super) fn reply_decision(ctx: &mut Ctx<'_>, d: &Decision, allowed: bool, len: usize) {
    reply::array(ctx.out, len);
    reply::integer(ctx.out, i64::from(allowed));
    reply::integer(ctx.out, clamp(d.limit));
    reply::integer(ctx.out, clamp(d.remaining));
    reply::integer(
        ctx.out,
        if allowed && !d.allowed {
            -1
        } else {
            d.retry_after_ms()
        },
    );
    reply::integer(ctx.out, d.reset_after_ms());
}

fn no_rule(name: &[u8]) -> CmdError {
    CmdError::msg(format!(
        "ERR no such rule '{}'",
        String::from_utf8_lossy(name)
    ))
}

/// Counts a denial by `spec`, a version of `live`: would-be for a shadow version.
/// Counts one decision under the rule in the metrics (`sluice_checks_total{rule=...}`): the
/// rule's metrics id is interned once and kept with its counters.
#[inline]
pub(super) fn count_metric(ctx: &Ctx<'_>, live: &Live, spec: &RuleSpec, d: &Decision, key: &[u8]) {
    use std::sync::atomic::Ordering::Relaxed;
    let stats = &ctx.shared.stats;
    let id = match live.counters.metric.load(Relaxed) {
        0 => {
            let id = stats.rule_id(&live.name);
            live.counters.metric.store(id.0, Relaxed);
            id
        }
        n => RuleId(n),
    };
    stats
        .slot(ctx.session.thread)
        .check(id, spec.algo, d, spec.shadow, key, ctx.now);
}

pub(super) fn count_denial(live: &Live, spec: &RuleSpec) {
    use std::sync::atomic::Ordering::Relaxed;
    if spec.shadow {
        live.counters.shadow_denied.fetch_add(1, Relaxed);
    } else {
        live.counters.denied.fetch_add(1, Relaxed);
    }
}

#[derive(Debug)]
pub struct RlHit<'a> {
    name: &'a [u8],
    subject: &'a [u8],
    /// The bucket, `name:subject`.
    bucket: BucketKey,
    cost: u64,
}

impl<'a> Command<'a> for RlHit<'a> {
    const ROUTED_AFTER_PARSE: bool = true;

    fn keys(&self) -> impl Iterator<Item = &[u8]> {
        std::iter::once(self.bucket.as_bytes())
    }

    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let name = args.key()?;
        let subject = args.key()?;
        let mut cost = 1;
        while let Some(opt) = args.next() {
            if opt.eq_ignore_ascii_case(b"COST") {
                cost = parse_cost(args)?;
            } else {
                return Err(CmdError::msg(format!(
                    "ERR unknown option '{}' for 'rl.hit'",
                    String::from_utf8_lossy(opt)
                )));
            }
        }
        Ok(RlHit {
            name,
            subject,
            bucket: BucketKey::new(name, subject),
            cost,
        })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let shared = ctx.shared;
        // One lookup; the bucket key was built on the stack at parse.
        shared.rules.with(self.name, |live| {
            let live = live.ok_or_else(|| no_rule(self.name))?;
            let spec = live.spec_for(self.subject, ctx.now);
            let params = spec.params(self.cost);
            if params.cost > params.burst {
                return Err(SpecError::CostExceedsCapacity {
                    cost: params.cost,
                    capacity: params.burst,
                }
                .into());
            }
            let (bucket, ahead) = (self.bucket.as_bytes(), sluice_store::Ahead::NONE);
            let d = super::rl_check::check_key(
                shared, bucket, ahead, spec.algo, &params, ctx.now, false,
            )?;
            if !d.allowed {
                count_denial(live, spec);
            }
            count_metric(ctx, live, spec, &d, self.bucket.as_bytes());
            reply_decision(ctx, &d, d.allowed || spec.shadow, 5);
            Ok(())
        })
    }
}

/// One bucket of an RL.HITS call, resolved.
struct Pending<'a> {
    /// The bucket: `rule:subject` (built once, at parse) or the key given.
    key: &'a [u8],
    algo: Algo,
    params: sluice_core::Params,
    /// False for a shadow rule.
    enforced: bool,
    /// The rule name (or key) the reply names.
    label: &'a [u8],
}

/// The most rules (or keys) one RL.HITS checks. The call holds the lock of every shard its
/// keys fall in while it runs, so its size is bounded; real multi-rule checks name a handful.
pub const MAX_CHECKS: usize = 64;

#[derive(Debug)]
pub struct RlHits<'a> {
    /// `subject rule...` or `KEYS key limit period ...`.
    form: Form<'a>,
    cost: u64,
}

#[derive(Debug)]
enum Form<'a> {
    Rules {
        subject: &'a [u8],
        rules: Vec<&'a [u8]>,
        /// `rule:subject` for each rule, in order.
        buckets: Vec<Vec<u8>>,
    },
    Keys(Vec<(&'a [u8], u64, sluice_core::Nanos)>),
}

impl<'a> Command<'a> for RlHits<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let first = args.key()?;
        let mut words = Vec::new();
        let mut cost = 1;
        while let Some(w) = args.next() {
            if w.eq_ignore_ascii_case(b"COST") {
                cost = parse_cost(args)?;
                args.finish()?;
                break;
            }
            words.push(w);
        }
        let keys = first.eq_ignore_ascii_case(b"KEYS");
        let checks = if keys { words.len() / 3 } else { words.len() };
        if checks > MAX_CHECKS {
            return Err(CmdError::msg(format!(
                "ERR RL.HITS checks at most {MAX_CHECKS} rules or keys in one call"
            )));
        }
        let form = if keys {
            if words.is_empty() || !words.len().is_multiple_of(3) {
                return Err(CmdError::msg(
                    "ERR RL.HITS KEYS takes key limit period triples",
                ));
            }
            let mut keys = Vec::new();
            for t in words.chunks(3) {
                let limit = count(t[1], "limit")?;
                let period = parse_period(t[2]).map_err(SpecError::from)?;
                validate(Algo::Token, limit, period, None, cost)?;
                keys.push((t[0], limit, period));
            }
            Form::Keys(keys)
        } else {
            if words.is_empty() {
                return Err(CmdError::Arity);
            }
            Form::Rules {
                subject: first,
                buckets: words.iter().map(|r| bucket_key(r, first)).collect(),
                rules: words,
            }
        };
        Ok(RlHits { form, cost })
    }

    const ROUTED_AFTER_PARSE: bool = true;

    fn keys(&self) -> impl Iterator<Item = &[u8]> {
        let (buckets, keys) = match &self.form {
            Form::Rules { buckets, .. } => (&buckets[..], &[][..]),
            Form::Keys(keys) => (&[][..], &keys[..]),
        };
        buckets
            .iter()
            .map(Vec::as_slice)
            .chain(keys.iter().map(|&(key, _, _)| key))
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let shared = ctx.shared;
        let mut checks: Vec<Pending> = Vec::new();
        match &self.form {
            Form::Rules {
                subject,
                rules,
                buckets,
            } => {
                for (name, bucket) in rules.iter().zip(buckets) {
                    let one = shared.rules.with(name, |live| {
                        let live = live?;
                        let spec = live.spec_for(subject, ctx.now);
                        Some(Pending {
                            key: bucket,
                            algo: spec.algo,
                            params: spec.params(self.cost),
                            enforced: !spec.shadow,
                            label: name,
                        })
                    });
                    let one = one.ok_or_else(|| no_rule(name))?;
                    if one.params.cost > one.params.burst {
                        return Err(SpecError::CostExceedsCapacity {
                            cost: one.params.cost,
                            capacity: one.params.burst,
                        }
                        .into());
                    }
                    checks.push(one);
                }
            }
            Form::Keys(keys) => {
                for &(key, limit, period) in keys {
                    let params = validate(Algo::Token, limit, period, None, self.cost)?;
                    checks.push(Pending {
                        key,
                        algo: Algo::Token,
                        params,
                        enforced: true,
                        label: key,
                    });
                }
            }
        }
        let mut seen = ahash::AHashSet::with_capacity(checks.len());
        if let Some(c) = checks.iter().find(|c| !seen.insert(c.key)) {
            return Err(CmdError::msg(format!(
                "ERR '{}' is listed twice",
                String::from_utf8_lossy(c.label)
            )));
        }
        let store_checks: Vec<Check<'_>> = checks
            .iter()
            .map(|c| Check {
                key: c.key,
                algo: c.algo,
                params: c.params,
                enforced: c.enforced,
                held: shared
                    .token_leases
                    .held_for(c.key, c.algo, c.params.cost > 0),
            })
            .collect();
        let mut decisions = Vec::with_capacity(checks.len());
        let pass = shared
            .store
            .check_all(&store_checks, ctx.now, &mut decisions)?;
        if let Form::Rules { subject, rules, .. } = &self.form {
            for ((name, d), c) in rules.iter().zip(&decisions).zip(&checks) {
                shared.rules.with(name, |live| {
                    if let Some(live) = live {
                        let spec = live.spec_for(subject, ctx.now);
                        if !d.allowed {
                            count_denial(live, spec);
                        }
                        count_metric(ctx, live, spec, d, c.key);
                    }
                });
            }
        } else {
            let stats = shared.stats.slot(ctx.session.thread);
            for (d, c) in decisions.iter().zip(&checks) {
                stats.check(RuleId::UNNAMED, Algo::Token, d, false, c.key, ctx.now);
            }
        }
        let enforced: Vec<bool> = checks.iter().map(|c| c.enforced).collect();
        let i = most_restrictive(&enforced, &decisions, pass);
        reply_decision(ctx, &decisions[i], pass, 6);
        reply::bulk(ctx.out, checks[i].label);
        Ok(())
    }
}

/// The index of the decision an all-or-nothing check answers with: the enforced denial with
/// the longest wait; when all pass, the enforced check with the fewest left (the first check
/// if every one is a shadow). `decisions` is not empty.
pub(super) fn most_restrictive(enforced: &[bool], decisions: &[Decision], pass: bool) -> usize {
    let candidates = || decisions.iter().enumerate().filter(|&(i, _)| enforced[i]);
    let pick = if pass {
        candidates().min_by_key(|(_, d)| d.remaining)
    } else {
        candidates()
            .filter(|(_, d)| !d.allowed)
            .max_by_key(|(_, d)| d.retry_after)
    };
    pick.map_or(0, |(i, _)| i)
}

#[cfg(test)]
mod tests {
    use sluice_core::Nanos;

    use super::MAX_CHECKS;

    use crate::{Config, Executor};

    const T0: u64 = 1_000_000;

    fn run(e: &mut Executor, args: &str) -> String {
        let args: Vec<&[u8]> = args.split_whitespace().map(str::as_bytes).collect();
        String::from_utf8_lossy(&e.exec_at(Nanos::from_millis(T0), &args)).into_owned()
    }

    fn ints(reply: &str) -> Vec<i64> {
        reply
            .split("\r\n")
            .filter_map(|l| l.strip_prefix(':'))
            .map(|n| n.parse().unwrap())
            .collect()
    }

    #[test]
    fn rule_commands_set_get_list_history_rollback_del() {
        let mut e = Executor::new(Config::default_for_tests());
        assert_eq!(run(&mut e, "RL.RULE SET user LIMIT 3 PERIOD 1m"), ":1\r\n");
        assert_eq!(
            run(
                &mut e,
                "RL.RULE SET ip LIMIT 10 PERIOD 1s BURST 20 ALGO GCRA"
            ),
            ":1\r\n"
        );
        let get = run(&mut e, "RL.RULE GET user");
        assert!(get.starts_with("*26\r\n$4\r\nname\r\n$4\r\nuser\r\n$7\r\nversion\r\n:1\r\n$5\r\nlimit\r\n:3\r\n$9\r\nperiod_ms\r\n:60000\r\n"), "{get}");
        assert!(
            get.contains("LIMIT 3 PERIOD 1m ALGO TOKEN FAILMODE open"),
            "{get}"
        );
        assert_eq!(run(&mut e, "RL.RULE GET nope"), "$-1\r\n");
        assert_eq!(
            run(&mut e, "RL.RULE LIST"),
            "*2\r\n$2\r\nip\r\n$4\r\nuser\r\n"
        );
        for _ in 0..3 {
            assert_eq!(ints(&run(&mut e, "RL.HIT user alice"))[0], 1);
        }
        assert_eq!(ints(&run(&mut e, "RL.HIT user alice"))[..3], [0, 3, 0]);
        // A new version with a higher limit grandfathers alice's bucket (as RL.CHECK does).
        assert_eq!(run(&mut e, "RL.RULE SET user LIMIT 5 PERIOD 1m"), ":2\r\n");
        // Still empty: its spent time carries over to the new rate.
        assert_eq!(ints(&run(&mut e, "RL.HIT user alice"))[..3], [0, 5, 0]);
        assert_eq!(
            run(&mut e, "RL.RULE HISTORY user"),
            "*2\r\n*2\r\n:1\r\n$42\r\nLIMIT 3 PERIOD 1m ALGO TOKEN FAILMODE open\r\n*2\r\n:2\r\n$42\r\nLIMIT 5 PERIOD 1m ALGO TOKEN FAILMODE open\r\n"
        );
        // ROLLBACK restores version 1 as version 3.
        assert_eq!(run(&mut e, "RL.RULE ROLLBACK user"), ":3\r\n");
        assert_eq!(ints(&run(&mut e, "RL.HIT user bob"))[1], 3);
        assert_eq!(run(&mut e, "RL.RULE ROLLBACK user 2"), ":4\r\n");
        assert_eq!(ints(&run(&mut e, "RL.HIT user bob"))[1], 5);
        assert!(run(&mut e, "RL.RULE ROLLBACK user 9").contains("has no version 9"));
        assert_eq!(run(&mut e, "RL.RULE DEL user"), ":1\r\n");
        assert_eq!(run(&mut e, "RL.RULE DEL user"), ":0\r\n");
        assert_eq!(
            run(&mut e, "RL.HIT user bob"),
            "-ERR no such rule 'user'\r\n"
        );
        // A deleted rule keeps its history, and ROLLBACK brings back its last version.
        assert_eq!(run(&mut e, "RL.RULE ROLLBACK user"), ":5\r\n");
        assert_eq!(ints(&run(&mut e, "RL.HIT user carol"))[1], 5);
    }

    #[test]
    fn bad_rules_and_bad_calls_are_refused_with_the_reason() {
        let mut e = Executor::new(Config::default_for_tests());
        let cases = [
            (
                "RL.RULE SET r LIMIT 5 PERIOD 0",
                "PERIOD '0' must be a positive duration",
            ),
            ("RL.RULE SET r LIMIT 5 PERIOD 5000d", "absurd"),
            (
                "RL.RULE SET r LIMIT 5 PERIOD 1m ALGO magic",
                "unknown ALGO 'magic'",
            ),
            (
                "RL.RULE SET r LIMIT 0 PERIOD 1m",
                "LIMIT must be a positive integer",
            ),
            ("RL.RULE SET r PERIOD 1m", "a rule needs LIMIT"),
            (
                "RL.RULE SET r LIMIT 5 PERIOD 1m ROLLOUT 0",
                "ROLLOUT must be a percentage",
            ),
            (
                "RL.RULE SET a:b LIMIT 5 PERIOD 1m",
                "invalid rule name 'a:b'",
            ),
            (
                "RL.RULE SET r LIMIT 5 PERIOD 1m FAILMODE sometimes",
                "unknown FAILMODE",
            ),
            ("RL.RULE FROB r", "unknown subcommand 'FROB'"),
            ("RL.RULE HISTORY none", "no such rule 'none'"),
            ("RL.HIT none s", "no such rule 'none'"),
        ];
        for (cmd, want) in cases {
            let got = run(&mut e, cmd);
            assert!(got.starts_with('-') && got.contains(want), "{cmd}: {got}");
        }
        assert_eq!(run(&mut e, "RL.RULE LIST"), "*0\r\n");
        // The floor catches a bad change, stated in the rule's own period.
        assert_eq!(
            run(&mut e, "RL.RULE SET route LIMIT 1000 PERIOD 1s FLOOR 500"),
            ":1\r\n"
        );
        let got = run(&mut e, "RL.RULE SET route LIMIT 10 PERIOD 1s");
        assert!(
            got.contains("LIMIT 10 per 1s is below its FLOOR 500 per 1s"),
            "{got}"
        );
        let got = run(&mut e, "RL.RULE SET route LIMIT 600 PERIOD 1m");
        assert!(got.contains("below its FLOOR 30000 per 1m"), "{got}");
        assert_eq!(ints(&run(&mut e, "RL.HIT route x"))[1], 1000);
        assert!(run(&mut e, "RL.HIT route x COST 1001").contains("exceeds the capacity"));
        assert!(run(&mut e, "RL.HIT route x FAST").contains("unknown option 'FAST'"));
    }

    #[test]
    fn shadow_rules_allow_and_count_would_be_denials() {
        let mut e = Executor::new(Config::default_for_tests());
        run(&mut e, "RL.RULE SET route LIMIT 2 PERIOD 1m SHADOW");
        for _ in 0..5 {
            assert_eq!(ints(&run(&mut e, "RL.HIT route /search"))[0], 1);
        }
        let get = run(&mut e, "RL.RULE GET route");
        assert!(
            get.ends_with("$6\r\ndenied\r\n:0\r\n$13\r\nshadow_denied\r\n:3\r\n"),
            "{get}"
        );
        // Enforcing it (a new version without SHADOW) denies, and counts as denied.
        run(&mut e, "RL.RULE SET route LIMIT 2 PERIOD 1m");
        assert_eq!(ints(&run(&mut e, "RL.HIT route /search"))[0], 0);
        let get = run(&mut e, "RL.RULE GET route");
        assert!(
            get.ends_with("$6\r\ndenied\r\n:1\r\n$13\r\nshadow_denied\r\n:3\r\n"),
            "{get}"
        );
    }

    #[test]
    fn rollout_applies_a_version_to_its_share_of_subjects() {
        let mut e = Executor::new(Config::default_for_tests());
        run(&mut e, "RL.RULE SET api LIMIT 100 PERIOD 1m");
        run(&mut e, "RL.RULE SET api LIMIT 7 PERIOD 1m ROLLOUT 30");
        let on_new = (0..1000)
            .filter(|i| ints(&run(&mut e, &format!("RL.HIT api u{i}")))[1] == 7)
            .count();
        assert!(
            (230..370).contains(&on_new),
            "{on_new} of 1000 on the 30% version"
        );
        // Stable: a subject stays on its side.
        for i in 0..50 {
            let cmd = format!("RL.HIT api u{i}");
            let first = ints(&run(&mut e, &cmd))[1];
            assert_eq!(ints(&run(&mut e, &cmd))[1], first);
        }
        run(&mut e, "RL.RULE SET api LIMIT 7 PERIOD 1m");
        assert!((0..100).all(|i| ints(&run(&mut e, &format!("RL.HIT api v{i}")))[1] == 7));
    }

    #[test]
    fn hits_consume_all_or_nothing_and_name_the_decider() {
        let mut e = Executor::new(Config::default_for_tests());
        run(&mut e, "RL.RULE SET user LIMIT 5 PERIOD 1m");
        run(&mut e, "RL.RULE SET ip LIMIT 2 PERIOD 1m");
        run(&mut e, "RL.RULE SET route LIMIT 1 PERIOD 1m SHADOW");
        let r = run(&mut e, "RL.HITS alice user ip route");
        // The most restrictive enforced rule: ip, 1 left (the shadow rule never decides).
        assert!(
            r.starts_with("*6\r\n:1\r\n:2\r\n:1\r\n") && r.ends_with("$2\r\nip\r\n"),
            "{r}"
        );
        let r = run(&mut e, "RL.HITS alice user ip route");
        assert!(
            r.starts_with("*6\r\n:1\r\n:2\r\n:0\r\n") && r.ends_with("$2\r\nip\r\n"),
            "{r}"
        );
        let r = run(&mut e, "RL.HITS alice user ip route");
        assert!(
            r.starts_with("*6\r\n:0\r\n:2\r\n:0\r\n") && r.ends_with("$2\r\nip\r\n"),
            "{r}"
        );
        // The denial consumed nothing: user still has 3.
        assert_eq!(ints(&run(&mut e, "RL.HIT user alice"))[2], 2);
        assert!(run(&mut e, "RL.HITS alice user nope").contains("no such rule 'nope'"));
        assert!(run(&mut e, "RL.HITS alice user user").contains("listed twice"));
        // The key form.
        let many: String = (0..=MAX_CHECKS).map(|i| format!(" k{i} 5 1m")).collect();
        assert!(run(&mut e, &format!("RL.HITS KEYS{many}")).contains("at most 64"));
        let many: String = (0..MAX_CHECKS).map(|i| format!(" k{i} 5 1m")).collect();
        assert!(run(&mut e, &format!("RL.HITS KEYS{many}")).starts_with('*'));
        let r = run(&mut e, "RL.HITS KEYS a 3 1m b 1 1m");
        assert!(
            r.starts_with("*6\r\n:1\r\n:1\r\n:0\r\n") && r.ends_with("$1\r\nb\r\n"),
            "{r}"
        );
        let r = run(&mut e, "RL.HITS KEYS a 3 1m b 1 1m COST 1");
        assert!(
            r.starts_with("*6\r\n:0\r\n") && r.ends_with("$1\r\nb\r\n"),
            "{r}"
        );
        let r = run(&mut e, "RL.CHECK a 3 1m COST 0");
        assert_eq!(ints(&r)[2], 2);
        assert!(run(&mut e, "RL.HITS KEYS a 3").contains("triples"));
        assert!(run(&mut e, "RL.HITS KEYS a 3 1m COST 4").contains("exceeds the capacity"));
    }
}
