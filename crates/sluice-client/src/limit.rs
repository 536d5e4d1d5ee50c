//! What a gateway asks ([`Limit`] with its per-limit options) and what it gets ([`Decision`]).

use std::sync::Arc;
use std::time::Duration;

use sluice_core::Algo;

pub use sluice_core::spec::FailMode;

/// Approximate mode: admit locally from a lease of tokens taken from the node, renewed (what
/// was not used given back, the next lease taken) in one `RL.LEASE` per interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Approximate {
    /// Sync at least this often while a key holds a lease: one interval. The node keeps a
    /// lease two intervals without a renewal.
    pub sync_every: Duration,
    /// The most one lease holds, so a sync comes at least every `n` units; 0: no cap beyond the
    /// gateway's fair share. A smaller `n` gives a smaller undershoot bound and more syncs.
    pub sync_every_n: u64,
}

/// One limit and its gateway options. `Limit::new(100, Duration::from_secs(60))` is RL.CHECK's
/// `key 100 60s`, exact, fail-open, with the blocked cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    pub limit: u64,
    /// Whole milliseconds (the node's finest period unit); at least 1 ms.
    pub period: Duration,
    pub burst: Option<u64>,
    pub algo: Algo,
    pub fail_mode: FailMode,
    /// After a denial, answer the same key locally until its `retry_after` passes.
    pub blocked_cache: bool,
    /// Spread the key over `split` sub-keys `key#0..key#{split-1}`, one picked at random per
    /// request. Their limits (and bursts) sum exactly to `limit` (and `burst`): sub-key `i`
    /// gets `limit ÷ split`, plus one for the first `limit mod split`. 1: no split.
    ///
    /// A sub-key needs a limit of at least 1, so no more sub-keys are used than `limit` (and
    /// `burst`); the sidecar and RL.CHECK refuse a larger `SPLIT` (`sluice_core::spec::check_split`).
    ///
    /// The cost: `remaining` is one sub-key's, so approximate, and a caller can be denied by one
    /// sub-key while another has room: the total admitted is under `limit` when traffic is
    /// uneven, and never over it.
    pub split: u32,
    pub approximate: Option<Approximate>,
}

impl Limit {
    pub fn new(limit: u64, period: Duration) -> Limit {
        Limit {
            limit,
            period,
            burst: None,
            algo: Algo::Token,
            fail_mode: FailMode::Open,
            blocked_cache: true,
            split: 1,
            approximate: None,
        }
    }

    pub fn burst(mut self, burst: u64) -> Limit {
        self.burst = Some(burst);
        self
    }

    pub fn algo(mut self, algo: Algo) -> Limit {
        self.algo = algo;
        self
    }

    pub fn fail_mode(mut self, mode: FailMode) -> Limit {
        self.fail_mode = mode;
        self
    }

    pub fn blocked_cache(mut self, on: bool) -> Limit {
        self.blocked_cache = on;
        self
    }

    pub fn split(mut self, k: u32) -> Limit {
        self.split = k.max(1);
        self
    }

    /// How many sub-keys a split uses: `split`, but no more than the limit or the burst.
    pub fn sub_keys(&self) -> u64 {
        u64::from(self.split)
            .min(self.limit)
            .min(self.burst.unwrap_or(u64::MAX))
            .max(1)
    }

    /// Sub-key `i`'s limit (of [`Limit::sub_keys`]): the shares sum exactly to the whole.
    pub fn sub_limit(&self, i: u64) -> Limit {
        let k = self.sub_keys();
        let share = |whole: u64| whole / k + u64::from(i < whole % k);
        Limit {
            limit: share(self.limit),
            burst: self.burst.map(share),
            split: 1,
            ..*self
        }
    }

    pub fn approximate(mut self, sync_every: Duration, sync_every_n: u64) -> Limit {
        self.approximate = Some(Approximate {
            sync_every,
            sync_every_n,
        });
        self
    }

    /// The capacity used (BURST if given, else the limit).
    pub fn capacity(&self) -> u64 {
        self.burst.unwrap_or(self.limit)
    }

    pub(crate) fn period_ms(&self) -> u64 {
        (self.period.as_millis() as u64).max(1)
    }

    /// In approximate mode, one interval's worth of the steady rate:
    /// `Q = ⌈limit × sync_every ÷ period⌉`, at least 1. `None` when exact.
    pub fn approx_quota(&self) -> Option<u64> {
        let a = self.approximate?;
        let per_interval = (u128::from(self.limit) * a.sync_every.as_nanos())
            .div_ceil(self.period.as_nanos().max(1));
        Some(u64::try_from(per_interval).unwrap_or(u64::MAX).max(1))
    }

    /// In approximate mode, the most one of `gateways` gateways holds in a lease: its fair share
    /// of `capacity`, `⌈capacity ÷ gateways⌉`, at most `sync_every_n` when that is set, at least
    /// 1. `0` when exact. A request costing more than this goes to the node on its own.
    pub fn lease_cap(&self, capacity: u64, gateways: u32) -> u64 {
        let Some(a) = self.approximate else {
            return 0;
        };
        let mut cap = capacity.div_ceil(u64::from(gateways.max(1))).max(1);
        if a.sync_every_n > 0 {
            cap = cap.min(a.sync_every_n);
        }
        cap
    }

    /// In approximate mode, one of `gateways` gateways' share of one interval's refill:
    /// `⌈Q ÷ gateways⌉`, at least 1 (`Q`: [`Limit::approx_quota`]). A gateway whose lease is used
    /// when the node had less than this left waits for the interval's sync (denying meanwhile)
    /// instead of a sync per trickle of refill. 1 when exact.
    pub fn refill_share(&self, gateways: u32) -> u64 {
        self.approx_quota()
            .unwrap_or(1)
            .div_ceil(u64::from(gateways.max(1)))
            .max(1)
    }

    /// The lease a gateway asks for at a sync: what it was asked for since the last sync
    /// (`demand` over `elapsed`), scaled to one interval (`elapsed` counted as at least half an
    /// interval, so an early sync at most doubles it), at most its fair share of what the node
    /// and this gateway had left at the last answer or of one interval's refill, whichever is
    /// more (`⌈max(left, Q) ÷ gateways⌉`), and at most [`Limit::lease_cap`]. `0` (give the whole
    /// lease back) when nothing was asked for.
    pub fn lease_size(&self, demand: u64, elapsed: Duration, left: u64, gateways: u32) -> u64 {
        let Some(a) = self.approximate else {
            return 0;
        };
        let interval = a.sync_every.as_nanos().max(1);
        let over = elapsed.as_nanos().max(interval / 2).max(1);
        let rate = (u128::from(demand) * interval).div_ceil(over);
        let q = self.approx_quota().unwrap_or(1);
        let fair = left.max(q).div_ceil(u64::from(gateways.max(1)));
        u64::try_from(rate)
            .unwrap_or(u64::MAX)
            .min(fair)
            .min(self.lease_cap(self.capacity(), gateways))
    }

    /// The overshoot bound of approximate mode: `0`. A gateway admits only tokens it took from
    /// the node before admitting them, and only until the lease that holds them could have
    /// ended on the node; the node counts a token held by a gateway as still in the bucket
    /// (it refills no further than the capacity less what the gateways hold) and takes a token
    /// back only when the gateway said it did not use it or its lease expired. So the fleet
    /// admits what one bucket would, where each request takes its token a little early.
    ///
    /// Two faults add to it, and nothing else: a failover loses what replication loses (as for
    /// exact checks), and a gateway that dies returns its lease when it expires, including the
    /// tokens it admitted after its last sync: at most one lease, [`Limit::lease_cap`], per
    /// gateway that dies.
    pub fn overshoot_bound(&self, _gateways: u32) -> u64 {
        0
    }

    /// The undershoot bound of approximate mode with `gateways` gateways on one key: the exact
    /// limiter admits at most this many more than approximate mode over any span:
    /// `2 × Q + gateways × lease_cap(capacity)`, `Q = ⌈limit × sync_every ÷ period⌉` being one
    /// interval's refill.
    ///
    /// Why: the tokens the gateways hold and have not used are out of the bucket (at most one
    /// lease each, given back at the next sync or by the node two intervals after the gateway
    /// stopped renewing); and a gateway whose lease is used waits for the interval's sync only
    /// when the node had less than its share of one interval's refill left
    /// ([`Limit::refill_share`]), so what sits in the node untaken meanwhile is at most that
    /// plus the interval's refill: `2 × Q`. A lease is sized to the gateway's traffic over the
    /// last interval, so what is held unused is one interval of traffic, far below the bound's
    /// `lease_cap` unless the traffic is a whole bucket per interval. `0` when exact.
    pub fn undershoot_bound(&self, gateways: u32) -> u64 {
        let Some(q) = self.approx_quota() else {
            return 0;
        };
        q.saturating_mul(2).saturating_add(
            self.lease_cap(self.capacity(), gateways)
                .saturating_mul(u64::from(gateways.max(1))),
        )
    }
}

/// Where a decision came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// The node at this address answered.
    Node(Arc<str>),
    /// A denial cached from the node's last answer for this key.
    BlockedCache,
    /// The in-process bucket of fail mode `local`.
    LocalBucket,
    /// Fail mode `open`.
    FailOpen,
    /// Fail mode `closed`.
    FailClosed,
    /// Approximate mode: admitted from a lease of tokens the node handed out before, or denied
    /// while the node said it had none.
    Approximate,
}

impl Source {
    pub const NAMES: [&'static str; 6] = [
        "node",
        "blocked_cache",
        "local_bucket",
        "fail_open",
        "fail_closed",
        "approximate",
    ];

    /// Index into [`Source::NAMES`].
    pub fn index(&self) -> usize {
        match self {
            Source::Node(_) => 0,
            Source::BlockedCache => 1,
            Source::LocalBucket => 2,
            Source::FailOpen => 3,
            Source::FailClosed => 4,
            Source::Approximate => 5,
        }
    }
}

/// RL.CHECK's five fields, and where they came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    pub limit: u64,
    pub remaining: u64,
    /// -1 when allowed; else milliseconds until this request would be allowed.
    pub retry_after_ms: i64,
    pub reset_after_ms: i64,
    pub source: Source,
}

impl Decision {
    /// The five integers of an `RL.CHECK` reply.
    pub fn fields(&self) -> [i64; 5] {
        let clamp = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        [
            i64::from(self.allowed),
            clamp(self.limit),
            clamp(self.remaining),
            self.retry_after_ms,
            self.reset_after_ms,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_and_both_bounds() {
        // 1000/min synced every 50 ms: Q = ⌈1000 × 0.05 ÷ 60⌉ = 1.
        let min =
            Limit::new(1000, Duration::from_secs(60)).approximate(Duration::from_millis(50), 0);
        assert_eq!(min.approx_quota(), Some(1));
        assert_eq!(min.lease_cap(1000, 4), 250);
        assert_eq!(min.refill_share(4), 1);
        let interval = Duration::from_millis(50);
        // 100 asked for over an interval: a lease of 100; over half an interval: 200, at most.
        assert_eq!(min.lease_size(100, interval, 1000, 1), 100);
        assert_eq!(min.lease_size(100, interval / 10, 1000, 1), 200);
        // Never more than the fair share of what is left (or of one interval's refill).
        assert_eq!(min.lease_size(100, interval, 1000, 4), 100);
        assert_eq!(min.lease_size(100, interval, 40, 4), 10);
        assert_eq!(min.lease_size(100, interval, 0, 4), 1);
        assert_eq!(
            min.lease_size(0, interval, 1000, 4),
            0,
            "nothing asked: give back"
        );
        assert_eq!(min.overshoot_bound(4), 0);
        assert_eq!(min.undershoot_bound(4), 2 + 4 * 250);
        // 1000/s every 50 ms: Q = 50.
        let sec = Limit::new(1000, Duration::from_secs(1)).approximate(interval, 0);
        assert_eq!(sec.refill_share(4), 13);
        assert_eq!(
            sec.lease_size(500, interval, 20, 1),
            50,
            "one interval's refill"
        );
        assert_eq!(sec.undershoot_bound(1), 100 + 1000);
        // sync_every_n caps the lease, and so the undershoot.
        let capped = sec.approximate(interval, 20);
        assert_eq!(capped.lease_cap(1000, 4), 20);
        assert_eq!(capped.lease_size(500, interval, 1000, 1), 20);
        assert_eq!(capped.undershoot_bound(4), 100 + 80);
        // Exact: no lease, no bounds to speak of.
        let exact = Limit::new(10, Duration::from_secs(1));
        assert_eq!(exact.lease_cap(10, 8), 0);
        assert_eq!(
            (exact.overshoot_bound(8), exact.undershoot_bound(8)),
            (0, 0)
        );
    }

    #[test]
    fn split_shares_sum_to_the_whole() {
        let l = Limit::new(10, Duration::from_secs(1)).split(3);
        assert_eq!(l.sub_keys(), 3);
        let shares: Vec<u64> = (0..3).map(|i| l.sub_limit(i).limit).collect();
        assert_eq!(shares, [4, 3, 3]);
        // More sub-keys than the limit: one per unit, never a share of 0 rounded up to 1.
        let l = Limit::new(10, Duration::from_secs(1)).split(1000);
        assert_eq!(l.sub_keys(), 10);
        assert_eq!((0..10).map(|i| l.sub_limit(i).limit).sum::<u64>(), 10);
        // The burst splits the same way, and bounds the sub-keys too.
        let l = Limit::new(100, Duration::from_secs(1)).burst(5).split(8);
        assert_eq!(l.sub_keys(), 5);
        assert_eq!(
            (0..5).map(|i| l.sub_limit(i).burst.unwrap()).sum::<u64>(),
            5
        );
        assert_eq!((0..5).map(|i| l.sub_limit(i).limit).sum::<u64>(), 100);
    }
}
