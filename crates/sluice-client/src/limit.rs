//! What a gateway asks ([`Limit`] with its per-limit options) and what it gets ([`Decision`]).

use std::sync::Arc;
use std::time::Duration;

use sluice_core::Algo;

pub use sluice_core::spec::FailMode;

/// Local pre-aggregation: count locally, sync the sum in one `RL.CHECK ... COST n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Approximate {
    /// Sync at least this often while a key is counted (also the local quota's window).
    pub sync_every: Duration,
    /// Sync once this many units were counted locally; 0: only by time. It also caps the local
    /// quota, so a smaller `n` gives a tighter bound.
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
    ///
    /// It is the floor of a gateway's share (so a drained key refills in one sync, not in a
    /// geometric tail of smaller and smaller shares) and the undershoot bound.
    pub fn approx_quota(&self) -> Option<u64> {
        let a = self.approximate?;
        let per_interval = (u128::from(self.limit) * a.sync_every.as_nanos())
            .div_ceil(self.period.as_nanos().max(1));
        Some(u64::try_from(per_interval).unwrap_or(u64::MAX).max(1))
    }

    /// In approximate mode, what one of `gateways` gateways may admit locally after the node
    /// answered `remaining`: its share of it, `⌊remaining ÷ gateways⌋`, but at least
    /// `min(remaining, Q)` ([`Limit::approx_quota`]), and at most `sync_every_n` when that is
    /// set. `0` when exact or when the node had nothing left.
    pub fn approx_share(&self, remaining: u64, gateways: u32) -> u64 {
        let (Some(a), Some(q)) = (self.approximate, self.approx_quota()) else {
            return 0;
        };
        let mut share = (remaining / u64::from(gateways.max(1))).max(remaining.min(q));
        if a.sync_every_n > 0 {
            share = share.min(a.sync_every_n);
        }
        share
    }

    /// The overshoot bound of approximate mode with `gateways` gateways on one key: at most this
    /// many requests are admitted beyond what the exact limiter would have admitted over any
    /// span: `gateways × S`, where `S = approx_share(capacity)` is the largest share a gateway
    /// can hold, `max(⌊capacity ÷ gateways⌋, min(capacity, Q))` (capped by `sync_every_n`).
    ///
    /// Why: the node counts every unit it is sent and admits at most what the exact limiter
    /// would. A gateway admits locally only while its count not yet charged on the node is
    /// within its share, and admits nothing while it owes (a sync the node denied drains what
    /// the node still has and carries the rest as debt, sent again at every sync). So each
    /// gateway holds at most `S` admitted-but-uncharged units at any instant, and the fleet at
    /// most `gateways × S`. The worst case is real: one gateway drains the key through early
    /// syncs while the others still hold shares they were given from the full bucket.
    /// (It assumes the key stays in the gateway's approximate map: a gateway tracking more hot
    /// keys than `Config::max_local_keys` forgets some, with their uncharged count.) `0` when exact.
    pub fn overshoot_bound(&self, gateways: u32) -> u64 {
        self.approx_share(self.capacity(), gateways)
            .saturating_mul(u64::from(gateways.max(1)))
    }

    /// The undershoot bound of approximate mode, for any split of traffic over any number of
    /// gateways: the exact limiter admits at most this many more than approximate mode over any
    /// span: `2 × Q`, `Q = ⌈limit × sync_every ÷ period⌉` being one interval's refill.
    ///
    /// Why: a gateway whose share is used up does not deny: it syncs at once and the request
    /// waits for that sync's answer (within its deadline). A gateway denies locally only when
    /// the node itself answered "nothing left" (or denied a sync) less than one interval ago,
    /// and a key denied so is synced at the interval's end, traffic or not; so the refill a
    /// gateway has not yet learned is at most one interval's, `Q`. The second `Q`: units a
    /// gateway admitted are charged on the node up to one interval later, and while they are
    /// uncharged a bucket the node thinks full loses its refill to the capacity (the exact
    /// limiter would have taken them at once and made room). Shares are not reservations: what
    /// one gateway has not used is still in the node for the others. `0` when exact.
    pub fn undershoot_bound(&self, _gateways: u32) -> u64 {
        self.approx_quota().map_or(0, |q| q.saturating_mul(2))
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
    /// Approximate mode, between syncs: the last global answer plus the local count.
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
    /// No answer yet: denied, nothing known (a placeholder until the node says).
    pub(crate) fn unknown() -> Decision {
        Decision {
            allowed: false,
            limit: 0,
            remaining: 0,
            retry_after_ms: -1,
            reset_after_ms: 0,
            source: Source::Approximate,
        }
    }

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
    fn shares_and_both_bounds() {
        // 1000/min synced every 50 ms: Q = ⌈1000 × 0.05 ÷ 60⌉ = 1.
        let min =
            Limit::new(1000, Duration::from_secs(60)).approximate(Duration::from_millis(50), 0);
        assert_eq!(min.approx_quota(), Some(1));
        assert_eq!(min.approx_share(1000, 4), 250);
        assert_eq!(min.approx_share(3, 4), 1, "at least min(remaining, Q)");
        assert_eq!(min.approx_share(0, 4), 0);
        assert_eq!(min.overshoot_bound(4), 1000);
        assert_eq!(min.overshoot_bound(1), 1000);
        assert_eq!(min.undershoot_bound(4), 2);
        // 1000/s every 50 ms: Q = 50, the floor of every share.
        let sec =
            Limit::new(1000, Duration::from_secs(1)).approximate(Duration::from_millis(50), 0);
        assert_eq!(sec.approx_share(120, 4), 50);
        assert_eq!(sec.approx_share(30, 4), 30);
        assert_eq!(sec.undershoot_bound(4), 100);
        // sync_every_n caps the share, and so the overshoot.
        let capped = sec.approximate(Duration::from_millis(50), 20);
        assert_eq!(capped.approx_share(1000, 4), 20);
        assert_eq!(capped.overshoot_bound(4), 80);
        // Exact: no share, no bounds to speak of.
        let exact = Limit::new(10, Duration::from_secs(1));
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
