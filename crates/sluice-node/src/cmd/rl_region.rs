//! `RL.REGION INFO` — how this region shares its GLOBAL rules with the others.
//!
//! # Format
//! A map (a flat array in RESP2): `region`, `node`, `coordinator` (0/1), `etcd` (`ok` or
//! `unreachable`), `members` (regions registered), `min_share`, `valid_until_ms` (Unix ms
//! until which the shares hold without etcd), `last_rebalance_ms`, `learning_until_ms` (0
//! when not learning), then `rules`: one map per GLOBAL rule with `rule`, `share` (enforced
//! here now: past `valid_until_ms`, at most `min_share`), `limit` (the regional limit
//! enforced now), `demand` (this region's requests per second, smoothed) and `regions`: one
//! map per region that publishes it, with `region`, `share` and `demand`. Shares and demands
//! are decimal strings. Without `--region`: an error.

use bytes::BytesMut;
use sluice_resp::reply::{self, Proto};

use super::{Args, CmdError, Command, Ctx};
use crate::regions::{RuleStatus, Status, share_text};

#[derive(Debug)]
pub struct RlRegion;

impl Command<'_> for RlRegion {
    fn parse(args: &mut Args<'_>) -> Result<Self, CmdError> {
        let sub = args.next().unwrap_or_default();
        if !sub.eq_ignore_ascii_case(b"INFO") {
            return Err(CmdError::msg(format!(
                "ERR unknown subcommand '{}'. Try RL.REGION INFO.",
                String::from_utf8_lossy(sub)
            )));
        }
        if args.next().is_some() {
            return Err(CmdError::msg(
                "ERR wrong number of arguments for 'rl.region|info' command",
            ));
        }
        Ok(RlRegion)
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let mut status = ctx.shared.regions.status().ok_or_else(|| {
            CmdError::msg(
                "ERR regions are off: start the node with --region NAME --regions-etcd URL",
            )
        })?;
        // What the checks of this moment enforce: a share past its deadline has lapsed here
        // already, whether or not the region thread has run since.
        let rules = &ctx.shared.rules;
        let limits: Vec<u64> = status
            .rules
            .iter_mut()
            .map(|r| {
                if let Some(share) = rules.region_share(&r.name, ctx.now) {
                    r.share = share;
                }
                rules
                    .get(&r.name)
                    .map_or(0, |l| l.current_at(ctx.now).limit)
            })
            .collect();
        write_status(ctx.out, ctx.session.proto, &status, &limits);
        Ok(())
    }
}

fn write_status(out: &mut BytesMut, p: Proto, s: &Status, limits: &[u64]) {
    reply::map(out, p, 10);
    let text = |out: &mut BytesMut, k: &str, v: &str| {
        reply::bulk(out, k.as_bytes());
        reply::bulk(out, v.as_bytes());
    };
    let int = |out: &mut BytesMut, k: &str, v: u64| {
        reply::bulk(out, k.as_bytes());
        reply::integer(out, super::rl_check::clamp(v));
    };
    text(out, "region", &s.region);
    text(out, "node", &s.node);
    int(out, "coordinator", u64::from(s.coordinator));
    text(out, "etcd", if s.etcd_ok { "ok" } else { "unreachable" });
    int(out, "members", s.members as u64);
    text(out, "min_share", &share_text(s.min_share));
    int(out, "valid_until_ms", s.valid_until_ms);
    int(out, "last_rebalance_ms", s.last_rebalance_ms);
    int(out, "learning_until_ms", s.learning_until_ms);
    reply::bulk(out, b"rules");
    reply::array(out, s.rules.len());
    for (rule, limit) in s.rules.iter().zip(limits) {
        write_rule(out, p, rule, *limit);
    }
}

fn write_rule(out: &mut BytesMut, p: Proto, r: &RuleStatus, limit: u64) {
    reply::map(out, p, 5);
    reply::bulk(out, b"rule");
    reply::bulk(out, r.name.as_bytes());
    reply::bulk(out, b"share");
    reply::bulk(out, share_text(r.share).as_bytes());
    reply::bulk(out, b"limit");
    reply::integer(out, super::rl_check::clamp(limit));
    reply::bulk(out, b"demand");
    reply::bulk(out, format!("{:.3}", r.demand).as_bytes());
    reply::bulk(out, b"regions");
    reply::array(out, r.regions.len());
    for (region, published) in &r.regions {
        reply::map(out, p, 3);
        reply::bulk(out, b"region");
        reply::bulk(out, region.as_bytes());
        reply::bulk(out, b"share");
        reply::bulk(out, share_text(published.share).as_bytes());
        reply::bulk(out, b"demand");
        reply::bulk(out, format!("{:.3}", published.demand).as_bytes());
    }
}

/// `INFO regions`: the same, as `field:value` lines.
pub fn info_section(s: Option<&Status>, t: &mut String) {
    t.push_str("# Regions\r\n");
    let Some(s) = s else {
        t.push_str("region_enabled:0\r\n");
        return;
    };
    t.push_str(&format!(
        "region_enabled:1\r\nregion:{}\r\nregion_node:{}\r\nregion_coordinator:{}\r\nregion_etcd:{}\r\nregion_members:{}\r\nregion_min_share:{}\r\nregion_valid_until_ms:{}\r\nregion_last_rebalance_ms:{}\r\nregion_learning_until_ms:{}\r\n",
        s.region,
        s.node,
        u8::from(s.coordinator),
        if s.etcd_ok { "ok" } else { "unreachable" },
        s.members,
        share_text(s.min_share),
        s.valid_until_ms,
        s.last_rebalance_ms,
        s.learning_until_ms,
    ));
    for r in &s.rules {
        t.push_str(&format!(
            "global_rule_{}:share={},demand={:.3}\r\n",
            r.name,
            share_text(r.share),
            r.demand,
        ));
        for (region, p) in &r.regions {
            t.push_str(&format!(
                "global_rule_{}_region_{region}:share={},demand={:.3}\r\n",
                r.name,
                share_text(p.share),
                p.demand
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use sluice_core::Nanos;

    use crate::regions::{Published, RuleStatus, Status};
    use crate::{Config, Executor};

    fn run(e: &mut Executor, args: &str) -> String {
        let args: Vec<&[u8]> = args.split_whitespace().map(str::as_bytes).collect();
        String::from_utf8_lossy(&e.exec_at(Nanos::from_millis(1_000), &args)).into_owned()
    }

    #[test]
    fn region_info_needs_regions_and_shows_every_region() {
        let mut e = Executor::new(Config::default_for_tests());
        assert!(run(&mut e, "RL.REGION INFO").starts_with("-ERR regions are off"));
        assert!(run(&mut e, "RL.REGION FROB").contains("unknown subcommand 'FROB'"));
        assert!(run(&mut e, "RL.REGION INFO x").contains("wrong number of arguments"));
        assert!(run(&mut e, "INFO regions").contains("region_enabled:0"));
        run(&mut e, "RL.RULE SET g LIMIT 1000 PERIOD 1m GLOBAL");
        e.shared.rules.set_region_shares(
            250_000,
            std::collections::HashMap::from([("g".to_string(), 600_000)]),
            Nanos::from_millis(2_000),
        );
        e.shared.regions.set(Status {
            region: "mumbai".into(),
            coordinator: true,
            etcd_ok: true,
            members: 2,
            min_share: 250_000,
            rules: vec![RuleStatus {
                name: "g".into(),
                share: 600_000,
                demand: 12.5,
                regions: vec![
                    ("hyderabad".into(), Published::new(400_000, 8.0)),
                    ("mumbai".into(), Published::new(600_000, 12.5)),
                ],
            }],
            ..Status::default()
        });
        let info = run(&mut e, "RL.REGION INFO");
        for needle in [
            "mumbai",
            "hyderabad",
            "0.600000",
            "0.400000",
            "12.500",
            ":600\r\n",
        ] {
            assert!(info.contains(needle), "{needle} not in {info}");
        }
        let text = run(&mut e, "INFO regions");
        assert!(
            text.contains("global_rule_g:share=0.600000,demand=12.500"),
            "{text}"
        );
        assert!(
            text.contains("global_rule_g_region_hyderabad:share=0.400000"),
            "{text}"
        );
        // The rule enforces its share; GET shows the regional limit and the declared spec.
        let get = run(&mut e, "RL.RULE GET g");
        assert!(
            get.contains(":600\r\n") && get.contains("LIMIT 1000 PERIOD 1m"),
            "{get}"
        );
        assert!(get.contains("GLOBAL"), "{get}");
        // Past the share's deadline the checks enforce the minimum, and INFO says so before
        // the region thread does.
        let late = e.exec_at(Nanos::from_millis(2_000), &[b"RL.REGION", b"INFO"]);
        let late = String::from_utf8_lossy(&late);
        assert!(
            late.contains("0.250000") && late.contains(":250\r\n") && !late.contains(":600\r\n"),
            "{late}"
        );
        let hit = e.exec_at(Nanos::from_millis(2_000), &[b"RL.HIT", b"g", b"u"]);
        assert!(String::from_utf8_lossy(&hit).starts_with("*5\r\n:1\r\n:250\r\n"));
    }
}
