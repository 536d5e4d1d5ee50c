//! The share arithmetic, pure: no I/O, no clock. Shares are parts per million of the whole
//! ([`SHARE_WHOLE`]).
//!
//! # The rule of safety
//! A region's next share is the least of:
//! - its target: demand-following with a minimum (water-filling: a region whose
//!   demand-proportional part is below the minimum gets the minimum, the rest split what is
//!   left in proportion to their demands), out of the whole less the minimum reserved for
//!   every registered region that publishes nothing now (partitioned or dead);
//! - what is free: the whole less every other region's *claim* and those reserves. A claim
//!   is the region's published share, or, in a region of several nodes, more for one interval
//!   after a shrink: the larger of its last two publications, so that its other nodes, which
//!   read the record a quarter interval apart, have all stopped enforcing the larger share
//!   before anyone grows into it;
//! - the minimum, while the region is learning (its first lease length as coordinator).
//!
//! A smaller share is enforced at once and then published; a larger one is published first
//! (a compare-and-swap on one revision key that every publication bumps, so two regions
//! never grow from the same reading) and enforced after. See the README's "Regions".

use crate::rules::SHARE_WHOLE;

/// How much of a new rate sample a smoothed demand takes (an exponential moving average per
/// interval): after 3 intervals a step change is 97% followed.
const SMOOTHING: f64 = 0.7;

/// Another region's published view of one rule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Published {
    /// Its share, parts per million.
    pub share: u32,
    /// Its smoothed demand, requests per second.
    pub demand: f64,
    /// What others must leave it: at least `share` (see the module docs).
    pub claim: u32,
}

impl Published {
    /// A publication whose claim is its share.
    pub fn new(share: u32, demand: f64) -> Published {
        Published {
            share,
            demand,
            claim: share,
        }
    }
}

/// What a coordinator knows of one GLOBAL rule when it rebalances.
#[derive(Debug, Clone, Copy)]
pub struct Situation<'a> {
    /// This region's smoothed demand, requests per second.
    pub own_demand: f64,
    /// The other regions that publish the rule (their claims count against what is free).
    pub others: &'a [Published],
    /// Registered regions that publish nothing now: each keeps its minimum reserved.
    pub silent: usize,
    /// Each region's minimum share.
    pub min_share: u32,
    /// Whether this region is still learning (it enforces at most its minimum).
    pub learning: bool,
}

/// The share this region takes next.
pub fn next_share(s: &Situation<'_>) -> u32 {
    let reserved = u64::from(s.min_share) * s.silent as u64;
    let published: u64 = s.others.iter().map(|p| u64::from(p.claim)).sum();
    let free = u64::from(SHARE_WHOLE).saturating_sub(published + reserved);
    let mut share = target(s).min(free);
    if s.learning {
        share = share.min(u64::from(s.min_share));
    }
    u32::try_from(share).unwrap_or(SHARE_WHOLE)
}

/// Demand-following with a minimum: this region's part of the whole less the silent
/// regions' reserves.
fn target(s: &Situation<'_>) -> u64 {
    let demands: Vec<f64> = std::iter::once(s.own_demand)
        .chain(s.others.iter().map(|p| p.demand))
        .map(|d| if d.is_finite() { d.max(0.0) } else { 0.0 })
        .collect();
    let min = f64::from(s.min_share);
    let pool = f64::from(SHARE_WHOLE) - min * s.silent as f64;
    let mut floored = vec![false; demands.len()];
    // Each pass floors at least one more region or stops: at most one pass per region.
    for _ in 0..=demands.len() {
        let (open_demand, open_count) = open(&demands, &floored);
        let open_pool = pool - min * (demands.len() - open_count) as f64;
        let mut changed = false;
        for (i, d) in demands.iter().enumerate() {
            if !floored[i] && part(*d, open_demand, open_count, open_pool) < min {
                floored[i] = true;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let own = if floored[0] {
        min
    } else {
        let (open_demand, open_count) = open(&demands, &floored);
        let open_pool = pool - min * (demands.len() - open_count) as f64;
        part(demands[0], open_demand, open_count, open_pool)
    };
    own.clamp(0.0, pool.max(0.0)).floor() as u64
}

/// The total demand and the number of the regions not floored.
fn open(demands: &[f64], floored: &[bool]) -> (f64, usize) {
    demands
        .iter()
        .zip(floored)
        .filter(|(_, f)| !**f)
        .fold((0.0, 0), |(d, n), (x, _)| (d + x, n + 1))
}

/// A region's demand-proportional part of `pool` (an equal part when nobody has demand).
fn part(demand: f64, total: f64, count: usize, pool: f64) -> f64 {
    if total > 0.0 {
        pool * demand / total
    } else {
        pool / count.max(1) as f64
    }
}

/// The smoothed demand after a new sample `rate` (the first sample is taken as it is).
pub fn smooth(previous: Option<f64>, rate: f64) -> f64 {
    match previous {
        Some(p) => SMOOTHING * rate + (1.0 - SMOOTHING) * p,
        None => rate,
    }
}

/// A region's published record: the Unix time (ms) its coordinator's lease runs to at the
/// latest, then one line per GLOBAL rule: name, share (ppm), demand (per second), claim (ppm).
///
/// ```text
/// expires 1764600000000
/// api 600000 10.000 650000
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub expires_ms: u64,
    pub rules: Vec<(String, Published)>,
}

impl Record {
    pub fn encode(&self) -> String {
        let mut t = format!("expires {}\n", self.expires_ms);
        for (name, p) in &self.rules {
            t.push_str(&format!("{name} {} {:.3} {}\n", p.share, p.demand, p.claim));
        }
        t
    }

    /// The record in `text`; `None` if it is not one. A line that is not a rule is skipped.
    pub fn decode(text: &[u8]) -> Option<Record> {
        let text = std::str::from_utf8(text).ok()?;
        let mut lines = text.lines();
        let expires_ms = lines.next()?.strip_prefix("expires ")?.parse().ok()?;
        let rules = lines
            .filter_map(|l| {
                let mut w = l.split(' ');
                let name = w.next()?.to_string();
                let share = w.next()?.parse::<u32>().ok()?.min(SHARE_WHOLE);
                let demand = w.next()?.parse::<f64>().ok().filter(|d| d.is_finite())?;
                let claim = w
                    .next()
                    .and_then(|c| c.parse::<u32>().ok())
                    .map_or(share, |c| c.clamp(share, SHARE_WHOLE));
                Some((
                    name,
                    Published {
                        share,
                        demand,
                        claim,
                    },
                ))
            })
            .collect();
        Some(Record { expires_ms, rules })
    }

    pub fn get(&self, name: &str) -> Option<Published> {
        self.rules.iter().find(|(n, _)| n == name).map(|(_, p)| *p)
    }
}

/// A node's demands, one line per GLOBAL rule: `name demand`.
pub fn encode_demands(demands: &[(String, f64)]) -> String {
    demands
        .iter()
        .map(|(n, d)| format!("{n} {d:.3}\n"))
        .collect()
}

/// The demands in `text`, lines that are not one skipped.
pub fn decode_demands(text: &[u8]) -> Vec<(String, f64)> {
    String::from_utf8_lossy(text)
        .lines()
        .filter_map(|l| {
            let (n, d) = l.split_once(' ')?;
            let d = d
                .parse::<f64>()
                .ok()
                .filter(|d| d.is_finite() && *d >= 0.0)?;
            Some((n.to_string(), d))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(share: u32, demand: f64) -> Published {
        Published::new(share, demand)
    }

    fn next(own: f64, others: &[Published], silent: usize, learning: bool) -> u32 {
        next_share(&Situation {
            own_demand: own,
            others,
            silent,
            min_share: 250_000,
            learning,
        })
    }

    #[test]
    fn shares_follow_demand_with_a_minimum() {
        // 600:400 with room to grow: 60%.
        assert_eq!(next(600.0, &[p(400_000, 400.0)], 0, false), 600_000);
        // 950:50: the small region is floored at 25%, the big one takes 75%.
        assert_eq!(next(950.0, &[p(250_000, 50.0)], 0, false), 750_000);
        assert_eq!(next(50.0, &[p(750_000, 950.0)], 0, false), 250_000);
        // Nobody has demand: equal parts.
        assert_eq!(next(0.0, &[p(500_000, 0.0)], 0, false), 500_000);
    }

    #[test]
    fn a_region_grows_only_into_what_is_free() {
        // Demand says 60%, but the other still publishes 70%: 30% is free.
        assert_eq!(next(600.0, &[p(700_000, 400.0)], 0, false), 300_000);
        // Shrinking is never held back.
        assert_eq!(next(100.0, &[p(100_000, 900.0)], 0, false), 250_000);
        // A silent region keeps its minimum: two live regions split 75%.
        assert_eq!(next(500.0, &[p(375_000, 500.0)], 1, false), 375_000);
        // A region that just shrank from 70% to 40% still claims 70% for an interval.
        let shrunk = Published {
            claim: 700_000,
            ..p(400_000, 400.0)
        };
        assert_eq!(next(600.0, &[shrunk], 0, false), 300_000);
    }

    #[test]
    fn a_learning_region_takes_at_most_its_minimum() {
        assert_eq!(next(900.0, &[], 0, true), 250_000);
        // And not even that when it is not free.
        assert_eq!(next(900.0, &[p(900_000, 900.0)], 0, true), 100_000);
    }

    #[test]
    fn shares_computed_from_one_reading_never_sum_past_the_whole() {
        // Any regions, any demands, any published shares that sum to at most the whole: the
        // share each computes fits beside what the others published.
        let mut seed = 7u64;
        let mut rnd = |m: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % m
        };
        for _ in 0..10_000 {
            let n = 1 + rnd(5) as usize;
            let silent = rnd(2) as usize;
            let min = (500_000 / (n + silent)) as u32;
            let mut shares: Vec<u32> = (0..n).map(|_| min).collect();
            let demands: Vec<f64> = (0..n).map(|_| rnd(1000) as f64).collect();
            for round in 0..6 {
                let i = round % n;
                let others: Vec<Published> = (0..n)
                    .filter(|&j| j != i)
                    .map(|j| p(shares[j], demands[j]))
                    .collect();
                shares[i] = next_share(&Situation {
                    own_demand: demands[i],
                    others: &others,
                    silent,
                    min_share: min,
                    learning: false,
                });
                let sum: u64 = shares.iter().map(|&s| u64::from(s)).sum::<u64>()
                    + u64::from(min) * silent as u64;
                assert!(
                    sum <= u64::from(SHARE_WHOLE),
                    "{shares:?} + {silent} silent"
                );
            }
        }
    }

    #[test]
    fn records_round_trip() {
        let r = Record {
            expires_ms: 1_764_600_000_000,
            rules: vec![
                ("api".into(), p(600_000, 10.0)),
                (
                    "x".into(),
                    Published {
                        claim: 9,
                        ..p(0, 0.5)
                    },
                ),
            ],
        };
        assert_eq!(Record::decode(r.encode().as_bytes()), Some(r));
        assert_eq!(Record::decode(b"garbage"), None);
        // A record without claims claims its shares.
        let old = Record::decode(b"expires 5\napi 100 1.5\n").unwrap();
        assert_eq!(old.get("api"), Some(p(100, 1.5)));
        let d = vec![("api".to_string(), 3.25)];
        assert_eq!(decode_demands(encode_demands(&d).as_bytes()), d);
    }

    #[test]
    fn smoothing_follows_a_step_within_three_intervals() {
        let mut d = smooth(None, 400.0);
        for _ in 0..3 {
            d = smooth(Some(d), 800.0);
        }
        assert!((d - 800.0).abs() < 0.03 * 800.0, "{d}");
    }
}
