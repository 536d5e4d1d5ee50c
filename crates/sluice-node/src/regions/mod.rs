//! Regions: one GLOBAL rule's limit shared by several regions' fleets, split by demand through
//! etcd (`--region NAME --regions-etcd URL`).
//!
//! State only: what this node knows of the split, for `RL.REGION INFO`, `INFO regions` and
//! the metrics. The shares themselves are enforced by the rules table
//! ([`Rules::set_region_shares`](crate::rules::Rules::set_region_shares)), so the check path
//! reads no state of this module and never touches etcd. The thread that talks to etcd is
//! [`task`]; the arithmetic is [`share`].
//!
//! # Keys in etcd (under [`ROOT`])
//! - `members/REGION`: every region ever started (no lease). A registered region that
//!   publishes nothing keeps its minimum share reserved: it may be cut off from etcd and
//!   enforcing its minimum. Delete the key to forget a region for good.
//! - `leaders/REGION`: the node id of the region's coordinator, under its lease (election:
//!   created only if absent).
//! - `nodes/REGION/NODE`: each node's own smoothed demand per GLOBAL rule, under its lease.
//! - `shares/REGION`: the coordinator's [`share::Record`] (share and region demand per rule,
//!   and its lease's expiry), under its lease: a dead region's share goes with its lease.
//! - `rev`: bumped by every publication, which compares it: publications are serialized.

pub mod share;
pub mod task;

use parking_lot::Mutex;

pub use share::Published;

/// The etcd prefix of every region key.
pub const ROOT: &str = "/sluice/regions/";

/// One GLOBAL rule as this node sees it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuleStatus {
    pub name: String,
    /// The share this node enforces (parts per million).
    pub share: u32,
    /// This region's smoothed demand (requests per second).
    pub demand: f64,
    /// Every region's published share and demand, this one's included, by region name.
    pub regions: Vec<(String, Published)>,
}

/// What this node knows of the split.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Status {
    pub region: String,
    pub node: String,
    /// Whether this node is its region's coordinator.
    pub coordinator: bool,
    /// Whether the last exchange with etcd succeeded.
    pub etcd_ok: bool,
    /// Regions registered (this one included).
    pub members: usize,
    /// Each region's minimum share (parts per million).
    pub min_share: u32,
    /// Unix ms until which the shares enforced here hold without etcd (then the minimum).
    pub valid_until_ms: u64,
    /// Unix ms of the coordinator's last rebalance that was published (0: none yet).
    pub last_rebalance_ms: u64,
    /// Unix ms until which this region is learning (enforces at most its minimum).
    pub learning_until_ms: u64,
    pub rules: Vec<RuleStatus>,
}

/// This node's view of the split (empty without `--region`).
#[derive(Debug, Default)]
pub struct Regions {
    status: Mutex<Option<Status>>,
}

impl Regions {
    /// The latest status; `None` when regions are off.
    pub fn status(&self) -> Option<Status> {
        self.status.lock().clone()
    }

    pub fn set(&self, status: Status) {
        *self.status.lock() = Some(status);
    }
}

/// A share as a decimal fraction (`0.600000`).
pub fn share_text(share: u32) -> String {
    format!(
        "{:.6}",
        f64::from(share) / f64::from(crate::rules::SHARE_WHOLE)
    )
}
