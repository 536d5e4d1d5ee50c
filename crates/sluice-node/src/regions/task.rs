//! The region thread: every node of a region runs it, on a runtime of its own.
//!
//! Every rebalance interval a node renews its etcd lease, publishes its own demand under it
//! and stands for coordinator (the `leaders/REGION` key, created only if absent, under its
//! lease). The coordinator then reads every region's record and its own region's node
//! demands, computes its share of each GLOBAL rule ([`super::share`]) and publishes it. The
//! other nodes of the region read their coordinator's record four times per interval and
//! enforce the shares in it: one design for every node, with etcd as the only channel.
//!
//! Without etcd a node keeps what it enforces until its lease (or, for a node that is not the
//! coordinator, its coordinator's lease) would have expired, then falls to the minimum share.
//! That deadline travels with the shares into the rules table, and every check compares it
//! with its own clock reading: a share lapses on time even when this thread is paused, hung
//! or gone. A node that becomes coordinator learns for one lease length: it publishes at
//! once and enforces at most its minimum.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_core::Nanos;
use sluice_etcd::{Client, Txn};

use super::share::{self, Published, Record, Situation};
use super::{ROOT, RuleStatus, Status};
use crate::rules::SHARE_WHOLE;
use crate::shared::Shared;

/// Starts the region thread when `--region` is given. Until its region is registered in etcd
/// (by its coordinator's first publication), a node enforces a share of 0 of every GLOBAL
/// rule, that is a limit of 1: the other regions reserve nothing for a region they do not
/// know.
pub fn start(shared: Arc<Shared>) -> std::io::Result<Option<std::thread::JoinHandle<()>>> {
    let (Some(region), Some(url)) = (
        shared.config.region.clone(),
        shared.config.regions_etcd.clone(),
    ) else {
        return Ok(None);
    };
    let interval = shared.config.rebalance_interval;
    let lease = shared.config.region_lease.unwrap_or(interval * 3);
    let lease = Duration::from_secs(lease.as_secs_f64().ceil().max(2.0) as u64);
    if lease <= interval {
        return Err(std::io::Error::other(format!(
            "--region-lease ({lease:?}) must be longer than --rebalance-interval ({interval:?})"
        )));
    }
    let min_flag = shared.config.region_min_share.map(to_ppm);
    shared
        .rules
        .set_region_shares(0, HashMap::new(), Nanos::ZERO);
    let node = format!("{}-{}", shared.local_addr, &shared.run_id[..8]);
    let state = Node {
        region,
        node,
        interval,
        lease,
        min_flag,
        lease_id: 0,
        registered: false,
        valid_until: None,
        lease_expires_ms: 0,
        renewed_at: None,
        coordinator_since: None,
        enforced: HashMap::new(),
        published: HashMap::new(),
        counts: HashMap::new(),
        sampled_at: None,
        demand: HashMap::new(),
        status: Status::default(),
    };
    let handle = crate::thread::runtime_thread("sluice-regions", move || run(shared, url, state))?;
    Ok(Some(handle))
}

fn to_ppm(f: f64) -> u32 {
    (f * f64::from(SHARE_WHOLE)).round() as u32
}

/// One node's side of the split.
struct Node {
    region: String,
    node: String,
    interval: Duration,
    lease: Duration,
    min_flag: Option<u32>,
    /// This node's etcd lease (0: none yet, or lost).
    lease_id: i64,
    /// Whether this region is registered (`members/REGION`): until then the others reserve
    /// nothing for it, and it enforces a share of 0.
    registered: bool,
    /// What is enforced now holds until then without etcd; the rules table holds the same
    /// deadline, and the request path enforces it.
    valid_until: Option<Instant>,
    lease_expires_ms: u64,
    /// When the last renewal of the lease was sent.
    renewed_at: Option<Instant>,
    coordinator_since: Option<Instant>,
    /// The share enforced per GLOBAL rule (rules not listed: the minimum).
    enforced: HashMap<String, u32>,
    /// The shares of this coordinator's last publication.
    published: HashMap<String, u32>,
    /// Checks counted per rule at the last sample, and when it was taken.
    counts: HashMap<String, u64>,
    sampled_at: Option<Instant>,
    /// This node's smoothed demand per rule (per second).
    demand: HashMap<String, f64>,
    status: Status,
}

/// Everything under [`ROOT`], read at once.
#[derive(Default)]
struct View {
    members: Vec<String>,
    /// Whether this region was among the members read.
    registered: bool,
    records: HashMap<String, Record>,
    leader: Option<String>,
    /// This region's nodes' demands, summed per rule.
    node_demand: HashMap<String, f64>,
    /// This region's nodes (with a live lease).
    nodes: usize,
    rev: i64,
}

async fn run(shared: Arc<Shared>, url: String, mut node: Node) {
    let mut stop = shared.shutdown_signal();
    let mut client: Option<Client> = None;
    let tick = (node.interval / 4).max(Duration::from_millis(50));
    let patience = (node.interval / 2).max(Duration::from_millis(200));
    let mut last_cycle: Option<Instant> = None;
    loop {
        let full = last_cycle.is_none_or(|t| t.elapsed() >= node.interval);
        if full {
            last_cycle = Some(Instant::now());
            node.sample_demand(&shared);
        }
        let step = node.step(&shared, &url, &mut client, full);
        let ok = matches!(tokio::time::timeout(patience, step).await, Ok(Ok(())));
        if !ok {
            client = None;
            if node.valid_until.is_none_or(|t| Instant::now() >= t) {
                node.fall_to_minimum(&shared);
            }
        }
        node.status.etcd_ok = ok;
        node.report(&shared);
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(tick) => {}
        }
    }
}

impl Node {
    /// Each region's minimum share: `--region-min-share`, else half the whole split over the
    /// regions registered.
    fn min_share(&self) -> u32 {
        self.min_flag
            .unwrap_or_else(|| SHARE_WHOLE / 2 / self.status.members.max(1) as u32)
    }

    /// The most a share may be without a published record: the minimum (which the other
    /// regions reserve) once this region is registered, else nothing.
    fn fallback_share(&self) -> u32 {
        if self.registered { self.min_share() } else { 0 }
    }

    fn key(&self, kind: &str) -> Vec<u8> {
        format!("{ROOT}{kind}/{}", self.region).into_bytes()
    }

    /// One exchange with etcd; `full` once per interval (lease, demand, election, rebalance).
    async fn step(
        &mut self,
        shared: &Shared,
        url: &str,
        client: &mut Option<Client>,
        full: bool,
    ) -> Result<(), sluice_etcd::Error> {
        if client.is_none() {
            *client = Some(Client::connect(url).await?);
        }
        let c = client.as_mut().expect("just connected");
        if full || self.lease_id == 0 {
            self.renew(shared, c).await?;
        }
        let view = read(c, &self.region).await?;
        self.status.members = view.members.len().max(1);
        self.status.min_share = self.min_share();
        self.registered = view.registered;
        let leading = view.leader.as_deref() == Some(self.node.as_str());
        if !leading {
            self.coordinator_since = None;
            self.follow(shared, &view);
            return Ok(());
        }
        if self.coordinator_since.is_none() {
            // A new coordinator learns: what it enforced came from another lease (its old
            // one, or its former coordinator's), which this one does not extend.
            self.cap_at_minimum();
        }
        let since = *self.coordinator_since.get_or_insert_with(Instant::now);
        self.valid_until = Some(self.lease_deadline());
        self.apply(shared);
        if full || self.status.last_rebalance_ms == 0 {
            let learning = since.elapsed() < self.lease;
            self.status.learning_until_ms =
                unix_ms(shared) + self.lease.saturating_sub(since.elapsed()).as_millis() as u64;
            self.rebalance(shared, c, view, learning).await?;
        }
        Ok(())
    }

    /// When the shares enforced here stop holding without etcd: the lease's end (counted from
    /// before the renewal was sent), less a quarter interval of margin for the time a call
    /// takes and for clocks.
    fn lease_deadline(&self) -> Instant {
        let renewed = self.renewed_at.unwrap_or_else(Instant::now);
        renewed + self.lease.saturating_sub(self.interval / 4)
    }

    /// Renews (or grants) this node's lease, publishes its demand under it, and stands for
    /// coordinator.
    async fn renew(&mut self, shared: &Shared, c: &mut Client) -> Result<(), sluice_etcd::Error> {
        let sent_ms = unix_ms_now();
        let sent_at = Instant::now();
        if self.lease_id != 0 && c.lease_keep_alive(self.lease_id).await? <= 0 {
            self.lease_id = 0;
        }
        if self.lease_id == 0 {
            self.lease_id = c.lease_grant(self.lease.as_secs() as i64).await?;
            self.coordinator_since = None;
        }
        self.lease_expires_ms = sent_ms + self.lease.as_millis() as u64;
        self.renewed_at = Some(sent_at);
        let demands: Vec<(String, f64)> = shared
            .rules
            .global_names()
            .into_iter()
            .map(|n| {
                let d = self.demand.get(&n).copied().unwrap_or(0.0);
                (n, d)
            })
            .collect();
        let node_key = format!("{ROOT}nodes/{}/{}", self.region, self.node);
        let leader = self.key("leaders");
        c.commit(Txn::new().put(
            node_key.as_bytes(),
            share::encode_demands(&demands).as_bytes(),
            self.lease_id,
        ))
        .await?;
        c.commit(Txn::new().mod_revision_is(&leader, 0).put(
            &leader,
            self.node.as_bytes(),
            self.lease_id,
        ))
        .await?;
        Ok(())
    }

    /// Samples every GLOBAL rule's check count into this node's smoothed demand.
    fn sample_demand(&mut self, shared: &Shared) {
        // The time since the last sample, which a slow exchange with etcd can stretch past
        // the interval.
        let now = Instant::now();
        let secs = self
            .sampled_at
            .replace(now)
            .map_or(1.0, |t| now.duration_since(t).as_secs_f64().max(1e-3));
        for name in shared.rules.global_names() {
            let count = shared.stats.rule_checks(&name);
            let rate = match self.counts.insert(name.clone(), count) {
                Some(before) => count.saturating_sub(before) as f64 / secs,
                None => 0.0,
            };
            let previous = self.demand.get(&name).copied();
            self.demand.insert(name, share::smooth(previous, rate));
        }
    }

    /// A node that is not the coordinator enforces its coordinator's record, while it holds
    /// (its lease's end, less a quarter interval); without one, at most the minimum.
    fn follow(&mut self, shared: &Shared, view: &View) {
        let own_lease = self.lease_deadline();
        let margin = self.interval.as_millis() as u64 / 4;
        let live = view
            .records
            .get(&self.region)
            .filter(|r| r.expires_ms.saturating_sub(margin) > unix_ms_now());
        match live {
            Some(record) => {
                let left = record.expires_ms.saturating_sub(unix_ms_now());
                let record_end = Instant::now() + Duration::from_millis(left)
                    - (self.interval / 4).min(Duration::from_millis(left));
                // A record read now is at most an interval old, and its coordinator claims
                // its shares for one interval more: past that, a follower cut off from etcd
                // no longer knows what its coordinator claims.
                let read_end = Instant::now() + self.interval * 3 / 4;
                self.valid_until = Some(own_lease.min(record_end).min(read_end));
                self.enforced = record
                    .rules
                    .iter()
                    .map(|(n, p)| (n.clone(), p.share))
                    .collect();
            }
            None => self.cap_at_minimum(),
        }
        self.apply(shared);
        self.fill_rules(shared, view);
    }

    /// The coordinator's rebalance: computes, enforces shrinks at once, publishes, and
    /// enforces growth only once published. Retried on a lost race, at most 3 times.
    async fn rebalance(
        &mut self,
        shared: &Shared,
        c: &mut Client,
        mut view: View,
        learning: bool,
    ) -> Result<(), sluice_etcd::Error> {
        for _ in 0..3 {
            let next = self.compute(shared, &view, learning);
            for (name, share) in &next {
                let now = self
                    .enforced
                    .get(name)
                    .copied()
                    .unwrap_or(self.fallback_share());
                self.enforced.insert(name.clone(), now.min(*share));
            }
            self.apply(shared);
            let record = Record {
                expires_ms: self.lease_expires_ms,
                rules: next
                    .iter()
                    .map(|(n, s)| {
                        let demand = view.node_demand.get(n).copied().unwrap_or(0.0);
                        // With other nodes to tell, claim the larger of this and the last
                        // publication for one interval.
                        let before = match view.nodes {
                            0 | 1 => 0,
                            _ => self.published.get(n).copied().unwrap_or(0),
                        };
                        let published = Published {
                            claim: (*s).max(before),
                            ..Published::new(*s, demand)
                        };
                        (n.clone(), published)
                    })
                    .collect(),
            };
            let rev = format!("{ROOT}rev");
            let txn = Txn::new()
                .mod_revision_is(rev.as_bytes(), view.rev)
                .put(
                    &self.key("shares"),
                    record.encode().as_bytes(),
                    self.lease_id,
                )
                .put(rev.as_bytes(), b"", 0)
                .put(&self.key("members"), b"", 0);
            if c.commit(txn).await? {
                self.published = next.iter().cloned().collect();
                self.registered = true;
                self.enforced = next.into_iter().collect();
                self.apply(shared);
                self.status.last_rebalance_ms = unix_ms(shared);
                view.records.insert(self.region.clone(), record);
                self.fill_rules(shared, &view);
                return Ok(());
            }
            view = read(c, &self.region).await?;
        }
        Ok(())
    }

    /// The next share of every GLOBAL rule.
    fn compute(&self, shared: &Shared, view: &View, learning: bool) -> Vec<(String, u32)> {
        let min_share = self.min_share();
        let silent = view
            .members
            .iter()
            .filter(|m| **m != self.region && !view.records.contains_key(*m))
            .count();
        shared
            .rules
            .global_names()
            .into_iter()
            .map(|name| {
                let others: Vec<Published> = view
                    .records
                    .iter()
                    .filter(|(r, _)| **r != self.region)
                    .map(|(_, rec)| rec.get(&name).unwrap_or(Published::new(0, 0.0)))
                    .collect();
                let s = share::next_share(&Situation {
                    own_demand: view.node_demand.get(&name).copied().unwrap_or(0.0),
                    others: &others,
                    silent,
                    min_share,
                    learning,
                });
                (name, s)
            })
            .collect()
    }

    /// Without etcd past the lease: at most the minimum (never more than was enforced: a
    /// region below its minimum, for want of a free share, stays there).
    fn fall_to_minimum(&mut self, shared: &Shared) {
        self.cap_at_minimum();
        self.coordinator_since = None;
        self.apply(shared);
        let min = self.fallback_share();
        for r in &mut self.status.rules {
            r.share = self.enforced.get(&r.name).copied().unwrap_or(min);
        }
    }

    /// Every share enforced capped at the fallback (rules with none enforce the fallback).
    fn cap_at_minimum(&mut self) {
        let min = self.fallback_share();
        for share in self.enforced.values_mut() {
            *share = (*share).min(min);
        }
    }

    /// Hands the enforced shares to the rules table with their deadline (a no-op when
    /// nothing changed): past it, every check enforces at most the fallback.
    fn apply(&self, shared: &Shared) {
        let min = self.fallback_share();
        let shares = self
            .enforced
            .iter()
            .map(|(n, s)| (n.clone(), (*s).min(SHARE_WHOLE)))
            .collect();
        let valid_until = self.valid_until.map_or(Nanos::ZERO, |t| shared.clock.at(t));
        shared.rules.set_region_shares(min, shares, valid_until);
    }

    /// The per-rule part of the status, from `view`.
    fn fill_rules(&mut self, shared: &Shared, view: &View) {
        let min = self.fallback_share();
        let mut regions: Vec<(&String, &Record)> = view.records.iter().collect();
        regions.sort_by(|a, b| a.0.cmp(b.0));
        self.status.rules = shared
            .rules
            .global_names()
            .into_iter()
            .map(|name| RuleStatus {
                share: self.enforced.get(&name).copied().unwrap_or(min),
                demand: view.node_demand.get(&name).copied().unwrap_or_else(|| {
                    view.records
                        .get(&self.region)
                        .and_then(|r| r.get(&name))
                        .map_or(0.0, |p| p.demand)
                }),
                regions: regions
                    .iter()
                    .filter_map(|(r, rec)| Some(((*r).clone(), rec.get(&name)?)))
                    .collect(),
                name,
            })
            .collect();
    }

    fn report(&mut self, shared: &Shared) {
        self.status.region = self.region.clone();
        self.status.node = self.node.clone();
        self.status.coordinator = self.coordinator_since.is_some();
        let now = Instant::now();
        self.status.valid_until_ms = unix_ms(shared)
            + self
                .valid_until
                .map_or(0, |t| t.saturating_duration_since(now).as_millis() as u64);
        if !self.status.coordinator {
            self.status.learning_until_ms = 0;
        }
        shared.regions.set(self.status.clone());
    }
}

/// Reads every region key at once.
async fn read(c: &mut Client, region: &str) -> Result<View, sluice_etcd::Error> {
    let all = c.get_prefix(ROOT.as_bytes()).await?;
    let mut view = View::default();
    let nodes = format!("{ROOT}nodes/{region}/");
    for kv in all.kvs {
        let Ok(key) = std::str::from_utf8(&kv.key) else {
            continue;
        };
        let rest = &key[ROOT.len()..];
        if let Some(name) = rest.strip_prefix("members/") {
            view.members.push(name.to_string());
        } else if let Some(name) = rest.strip_prefix("shares/") {
            if let Some(record) = Record::decode(&kv.value) {
                view.records.insert(name.to_string(), record);
            }
        } else if rest == format!("leaders/{region}") {
            view.leader = Some(String::from_utf8_lossy(&kv.value).into_owned());
        } else if key.starts_with(&nodes) {
            view.nodes += 1;
            for (rule, d) in share::decode_demands(&kv.value) {
                *view.node_demand.entry(rule).or_default() += d;
            }
        } else if rest == "rev" {
            view.rev = kv.mod_revision;
        }
    }
    view.registered = view.members.iter().any(|m| m == region);
    if !view.registered {
        view.members.push(region.to_string());
    }
    Ok(view)
}

fn unix_ms(shared: &Shared) -> u64 {
    shared.clock.now().as_nanos() / 1_000_000
}

fn unix_ms_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
