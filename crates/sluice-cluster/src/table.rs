//! The slot table: which shard owns each slot, under which epoch.
//!
//! A [`SlotTable`] is the truth that nodes and clients route by. It is computed once by the
//! admin tool (the `placement` module) and pushed; nodes never recompute it. A node accepts a table
//! only with a higher epoch than its own, so the epoch orders every change.
//!
//! # Invariants (checked by [`SlotTable::new`], the only way to build a table)
//! - Every slot `0..16384` is covered by exactly one range; ranges are sorted by `start` and
//!   adjacent ranges of the same shard are merged, so two equal tables compare equal.
//! - Every range names an existing shard; at most 16384 shards.
//! - Node ids are 40 lowercase hex characters (the `CLUSTER MYID` form), unique over primaries and
//!   replicas; `host:port` is unique too (over plain and TLS ports), hosts have no whitespace
//!   and ports are not 0.
//! - Tokens are on the circle (`< 16384`) and unique. Either no shard has tokens (the ranges were
//!   assigned by hand), or the tokens place every slot exactly where the ranges do: the tokens
//!   are only what placement needs to compute the next table, and can never contradict this one.
//! - The owner lookup is derived from the ranges inside `new` and never edited after, so the two
//!   cannot drift apart.

use std::collections::HashSet;
use std::fmt;

use crate::SLOTS;
use crate::circle::Circle;
use crate::error::TableError;

/// One server: its `CLUSTER MYID` and the addresses clients connect to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Node {
    /// 40 lowercase hex characters.
    pub id: String,
    pub host: String,
    /// The plain port.
    pub port: u16,
    /// The node's `--tls-port`, if it has one: what TLS clients are sent to (CLUSTER SLOTS,
    /// SHARDS, NODES and MOVED over a TLS connection), and what nodes reach each other on with
    /// `--tls-cluster yes`.
    pub tls_port: Option<u16>,
}

impl Node {
    /// A node without a TLS port.
    pub fn plain(id: impl Into<String>, host: impl Into<String>, port: u16) -> Node {
        Node {
            id: id.into(),
            host: host.into(),
            port,
            tls_port: None,
        }
    }

    /// The port a client reaches this node on: the TLS port for a TLS client when the node
    /// has one, else the plain port.
    pub fn port_for(&self, tls: bool) -> u16 {
        match self.tls_port {
            Some(port) if tls => port,
            _ => self.port,
        }
    }

    /// Whether `port` is one of this node's ports (plain or TLS).
    pub fn listens_on(&self, port: u16) -> bool {
        self.port == port || self.tls_port == Some(port)
    }
}

/// A primary with its replicas; it owns the slots of the ranges that name its index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shard {
    pub primary: Node,
    pub replicas: Vec<Node>,
    /// The shard's virtual-node tokens on the slot circle (see the `placement` module). They belong
    /// to the shard, not to the primary's node: a promoted replica keeps them.
    pub tokens: Vec<u16>,
}

/// The slots `start..=end`, owned by `shards[shard]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotRange {
    pub start: u16,
    /// Inclusive, as in `CLUSTER SLOTS`.
    pub end: u16,
    /// Index into [`SlotTable::shards`].
    pub shard: usize,
}

impl SlotRange {
    /// How many slots the range holds (at least one).
    pub fn count(&self) -> usize {
        usize::from(self.end) - usize::from(self.start) + 1
    }
}

/// A validated slot → shard table with its epoch. See the module docs for the invariants.
#[derive(Clone, PartialEq, Eq)]
pub struct SlotTable {
    pub epoch: u64,
    pub shards: Vec<Shard>,
    /// Sorted by `start`, covering every slot once, adjacent ranges of one shard merged.
    pub ranges: Vec<SlotRange>,
    /// The shard index of each slot, so that routing a command is one load. `u16` is enough
    /// because a table has at most [`SLOTS`] shards, and keeps the lookup at 32 KiB.
    owner: Box<[u16; SLOTS]>,
}

/// Marks a slot no range has claimed yet; never a shard index, as there are at most 16384 shards.
const UNOWNED: u16 = u16::MAX;

impl SlotTable {
    /// Validates and normalises a table (see the module docs for what is checked). `ranges` may
    /// come in any order and split anyhow; the table keeps them sorted and merged.
    pub fn new(
        epoch: u64,
        shards: Vec<Shard>,
        ranges: Vec<SlotRange>,
    ) -> Result<SlotTable, TableError> {
        if shards.len() > SLOTS {
            return Err(TableError::TooManyShards {
                count: shards.len(),
            });
        }
        check_nodes(&shards)?;
        check_tokens(&shards)?;

        let mut ranges = ranges;
        for range in &ranges {
            if range.start > range.end || usize::from(range.end) >= SLOTS {
                return Err(TableError::BadRange {
                    start: range.start,
                    end: range.end,
                });
            }
            if range.shard >= shards.len() {
                return Err(TableError::UnknownShard { index: range.shard });
            }
        }
        ranges.sort_unstable_by_key(|range| range.start);

        let mut owner = vec![UNOWNED; SLOTS];
        for range in &ranges {
            let slots = &mut owner[usize::from(range.start)..=usize::from(range.end)];
            if let Some(taken) = slots.iter().position(|&o| o != UNOWNED) {
                return Err(TableError::Overlap {
                    slot: range.start + taken as u16,
                });
            }
            // Fits: range.shard < shards.len() <= SLOTS < UNOWNED.
            slots.fill(range.shard as u16);
        }
        if let Some(slot) = owner.iter().position(|&o| o == UNOWNED) {
            return Err(TableError::Gap { slot: slot as u16 });
        }

        if shards.iter().any(|shard| !shard.tokens.is_empty()) {
            let circle = Circle::new(tokens_of(&shards));
            for (slot, &index) in owner.iter().enumerate() {
                if circle.owner(slot as u16) != Some(usize::from(index)) {
                    return Err(TableError::TokensDisagree { slot: slot as u16 });
                }
            }
        }

        let owner: Box<[u16; SLOTS]> = owner
            .into_boxed_slice()
            .try_into()
            .expect("the owner lookup has SLOTS entries");
        Ok(SlotTable {
            epoch,
            shards,
            ranges: runs(owner.as_slice()),
            owner,
        })
    }

    /// The index of the shard that owns `slot`. O(1). Only the low 14 bits of `slot` count, as
    /// for [`key_slot`](crate::key_slot); check user-given slots against [`SLOTS`] first.
    #[inline]
    pub fn owner(&self, slot: u16) -> usize {
        usize::from(self.owner[usize::from(slot) & (SLOTS - 1)])
    }

    /// The shard whose primary or one of whose replicas has this id.
    pub fn shard_of(&self, node_id: &str) -> Option<usize> {
        self.shards.iter().position(|shard| {
            shard.primary.id == node_id || shard.replicas.iter().any(|r| r.id == node_id)
        })
    }

    /// Whether this id is a shard's primary in this table.
    pub fn is_primary(&self, node_id: &str) -> bool {
        self.shards.iter().any(|shard| shard.primary.id == node_id)
    }

    /// How many slots `shards[shard]` owns (0 for an unknown index).
    pub fn slots_of(&self, shard: usize) -> usize {
        self.ranges_of(shard).map(|range| range.count()).sum()
    }

    /// The ranges `shards[shard]` owns, in slot order.
    pub fn ranges_of(&self, shard: usize) -> impl Iterator<Item = SlotRange> + '_ {
        self.ranges
            .iter()
            .copied()
            .filter(move |r| r.shard == shard)
    }

    /// The node (primary or replica) with this id.
    pub fn node(&self, node_id: &str) -> Option<&Node> {
        self.shards
            .iter()
            .flat_map(|shard| std::iter::once(&shard.primary).chain(&shard.replicas))
            .find(|node| node.id == node_id)
    }

    /// The same table under another epoch.
    pub fn with_epoch(&self, epoch: u64) -> SlotTable {
        SlotTable {
            epoch,
            ..self.clone()
        }
    }

    /// The table after a failover: the replica `replica_id` becomes its shard's primary and the
    /// old primary takes the replica's place in the replica list (when it comes back it is a
    /// replica of the new one). Ranges and tokens stay with the shard, so no slot changes shard.
    /// `epoch` should be higher than `self.epoch`, or nodes refuse the table. `None` when
    /// `replica_id` is not a replica here.
    pub fn promote(&self, replica_id: &str, epoch: u64) -> Option<SlotTable> {
        let (index, position) = self.shards.iter().enumerate().find_map(|(index, shard)| {
            let position = shard.replicas.iter().position(|r| r.id == replica_id)?;
            Some((index, position))
        })?;
        let mut table = self.with_epoch(epoch);
        let shard = &mut table.shards[index];
        std::mem::swap(&mut shard.primary, &mut shard.replicas[position]);
        Some(table)
    }
}

impl fmt::Debug for SlotTable {
    /// Leaves out the owner lookup: 16384 numbers that say nothing the ranges do not.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlotTable")
            .field("epoch", &self.epoch)
            .field("shards", &self.shards)
            .field("ranges", &self.ranges)
            .finish_non_exhaustive()
    }
}

/// The maximal runs of one owner in a full owner lookup.
pub(crate) fn runs(owner: &[u16]) -> Vec<SlotRange> {
    let mut ranges: Vec<SlotRange> = Vec::new();
    for (slot, &index) in owner.iter().enumerate() {
        let slot = slot as u16;
        let shard = usize::from(index);
        match ranges.last_mut() {
            Some(last) if last.shard == shard => last.end = slot,
            _ => ranges.push(SlotRange {
                start: slot,
                end: slot,
                shard,
            }),
        }
    }
    ranges
}

fn check_nodes(shards: &[Shard]) -> Result<(), TableError> {
    let mut ids = HashSet::new();
    let mut addresses = HashSet::new();
    let nodes = shards
        .iter()
        .flat_map(|shard| std::iter::once(&shard.primary).chain(&shard.replicas));
    for node in nodes {
        if !is_node_id(&node.id) {
            return Err(TableError::BadNodeId {
                id: node.id.clone(),
            });
        }
        if !is_host(&node.host) || node.port == 0 || node.tls_port == Some(0) {
            return Err(TableError::BadAddress {
                host: node.host.clone(),
                port: node.port,
            });
        }
        if !ids.insert(node.id.as_str()) {
            return Err(TableError::DuplicateNodeId {
                id: node.id.clone(),
            });
        }
        // Plain and TLS ports alike: one port, one node.
        for port in std::iter::once(node.port).chain(node.tls_port) {
            if !addresses.insert((node.host.as_str(), port)) {
                return Err(TableError::DuplicateAddress {
                    host: node.host.clone(),
                    port,
                });
            }
        }
    }
    Ok(())
}

fn check_tokens(shards: &[Shard]) -> Result<(), TableError> {
    let mut seen = vec![false; SLOTS];
    for &token in shards.iter().flat_map(|shard| &shard.tokens) {
        let Some(seen) = seen.get_mut(usize::from(token)) else {
            return Err(TableError::BadToken { token });
        };
        if *seen {
            return Err(TableError::DuplicateToken { token });
        }
        *seen = true;
    }
    Ok(())
}

/// A node id as Redis prints it in `CLUSTER MYID`: 40 lowercase hex characters.
pub fn is_node_id(id: &str) -> bool {
    id.len() == 40 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A host that survives the text form and `CLUSTER NODES`: not empty, one word.
fn is_host(host: &str) -> bool {
    !host.is_empty() && !host.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// Every shard's tokens, as `(token, shard index)`.
pub(crate) fn tokens_of(shards: &[Shard]) -> Vec<(u16, usize)> {
    shards
        .iter()
        .enumerate()
        .flat_map(|(index, shard)| shard.tokens.iter().map(move |&token| (token, index)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(n: u8) -> Node {
        Node::plain(format!("{n:040x}"), "127.0.0.1", 7000 + u16::from(n))
    }

    fn shard(n: u8) -> Shard {
        Shard {
            primary: node(n),
            replicas: vec![],
            tokens: vec![],
        }
    }

    fn range(start: u16, end: u16, shard: usize) -> SlotRange {
        SlotRange { start, end, shard }
    }

    fn two_shards(ranges: Vec<SlotRange>) -> Result<SlotTable, TableError> {
        SlotTable::new(1, vec![shard(1), shard(2)], ranges)
    }

    #[test]
    fn normalises_ranges_and_answers_lookups() {
        let table = two_shards(vec![
            range(9000, 16383, 0),
            range(0, 99, 0),
            range(100, 8999, 1),
        ])
        .unwrap();
        assert_eq!(
            table.ranges,
            vec![range(0, 99, 0), range(100, 8999, 1), range(9000, 16383, 0)]
        );
        assert_eq!(table.owner(0), 0);
        assert_eq!(table.owner(100), 1);
        assert_eq!(table.owner(8999), 1);
        assert_eq!(table.owner(16383), 0);
        assert_eq!(table.slots_of(0), 100 + 7384);
        assert_eq!(table.slots_of(1), 8900);
        assert_eq!(table.slots_of(2), 0);

        let split = two_shards(vec![
            range(0, 50, 0),
            range(51, 99, 0),
            range(100, 8999, 1),
            range(9000, 16383, 0),
        ])
        .unwrap();
        assert_eq!(split, table, "adjacent ranges of one shard merge");
    }

    #[test]
    fn refuses_gaps_overlaps_and_bad_ranges() {
        assert_eq!(
            two_shards(vec![range(0, 99, 0), range(101, 16383, 1)]),
            Err(TableError::Gap { slot: 100 })
        );
        assert_eq!(
            two_shards(vec![range(0, 16382, 0)]),
            Err(TableError::Gap { slot: 16383 })
        );
        assert_eq!(two_shards(vec![]), Err(TableError::Gap { slot: 0 }));
        assert_eq!(
            two_shards(vec![range(0, 100, 0), range(100, 16383, 1)]),
            Err(TableError::Overlap { slot: 100 })
        );
        assert_eq!(
            two_shards(vec![range(0, 16383, 0), range(5, 5, 1)]),
            Err(TableError::Overlap { slot: 5 })
        );
        assert_eq!(
            two_shards(vec![range(10, 5, 0)]),
            Err(TableError::BadRange { start: 10, end: 5 })
        );
        assert_eq!(
            two_shards(vec![range(0, 16384, 0)]),
            Err(TableError::BadRange {
                start: 0,
                end: 16384
            })
        );
        assert_eq!(
            two_shards(vec![range(0, 16383, 2)]),
            Err(TableError::UnknownShard { index: 2 })
        );
    }

    #[test]
    fn refuses_bad_and_duplicate_nodes() {
        let whole = || vec![range(0, 16383, 0)];
        let with = |shards: Vec<Shard>| SlotTable::new(1, shards, whole());

        let mut bad_id = shard(1);
        bad_id.primary.id = "ABCDEF".repeat(7)[..40].to_owned();
        assert!(matches!(
            with(vec![bad_id]),
            Err(TableError::BadNodeId { .. })
        ));
        let mut short_id = shard(1);
        short_id.primary.id.pop();
        assert!(matches!(
            with(vec![short_id]),
            Err(TableError::BadNodeId { .. })
        ));

        let mut no_host = shard(1);
        no_host.primary.host = String::new();
        assert!(matches!(
            with(vec![no_host]),
            Err(TableError::BadAddress { .. })
        ));
        let mut spaced = shard(1);
        spaced.primary.host = "a host".to_owned();
        assert!(matches!(
            with(vec![spaced]),
            Err(TableError::BadAddress { .. })
        ));
        let mut port0 = shard(1);
        port0.primary.port = 0;
        assert!(matches!(
            with(vec![port0]),
            Err(TableError::BadAddress { .. })
        ));
        let mut tls_clash = shard(2);
        tls_clash.primary.tls_port = Some(node(1).port);
        assert_eq!(
            with(vec![shard(1), tls_clash]),
            Err(TableError::DuplicateAddress {
                host: "127.0.0.1".to_owned(),
                port: 7001
            })
        );
        let mut tls0 = shard(1);
        tls0.primary.tls_port = Some(0);
        assert!(matches!(
            with(vec![tls0]),
            Err(TableError::BadAddress { .. })
        ));

        let mut same_id = shard(1);
        same_id.replicas.push(Node {
            port: 9999,
            ..node(1)
        });
        assert_eq!(
            with(vec![same_id]),
            Err(TableError::DuplicateNodeId { id: node(1).id })
        );
        let mut same_addr = shard(2);
        same_addr.primary.port = node(1).port;
        assert_eq!(
            with(vec![shard(1), same_addr]),
            Err(TableError::DuplicateAddress {
                host: "127.0.0.1".to_owned(),
                port: 7001
            })
        );
    }

    #[test]
    fn checks_tokens_against_ranges() {
        let mut a = shard(1);
        let mut b = shard(2);
        a.tokens = vec![16383];
        b.tokens = vec![8191];
        let ranges = vec![range(0, 8191, 1), range(8192, 16383, 0)];
        let table = SlotTable::new(1, vec![a.clone(), b.clone()], ranges.clone()).unwrap();
        assert_eq!(table.owner(8191), 1);

        let swapped = vec![range(0, 8191, 0), range(8192, 16383, 1)];
        assert_eq!(
            SlotTable::new(1, vec![a.clone(), b.clone()], swapped),
            Err(TableError::TokensDisagree { slot: 0 })
        );
        b.tokens = vec![16383];
        assert_eq!(
            SlotTable::new(1, vec![a.clone(), b.clone()], ranges.clone()),
            Err(TableError::DuplicateToken { token: 16383 })
        );
        b.tokens = vec![16384];
        assert_eq!(
            SlotTable::new(1, vec![a, b], ranges),
            Err(TableError::BadToken { token: 16384 })
        );
    }

    #[test]
    fn lookups_by_node_id() {
        let mut first = shard(1);
        first.replicas = vec![node(3), node(4)];
        let table = SlotTable::new(
            5,
            vec![first, shard(2)],
            vec![range(0, 9, 1), range(10, 16383, 0)],
        )
        .unwrap();
        assert_eq!(table.shard_of(&node(1).id), Some(0));
        assert_eq!(table.shard_of(&node(4).id), Some(0));
        assert_eq!(table.shard_of(&node(2).id), Some(1));
        assert_eq!(table.shard_of(&node(9).id), None);
        assert!(table.is_primary(&node(1).id));
        assert!(!table.is_primary(&node(3).id));
        assert_eq!(table.node(&node(4).id), Some(&node(4)));
        assert_eq!(table.ranges_of(1).collect::<Vec<_>>(), vec![range(0, 9, 1)]);

        let promoted = table.promote(&node(4).id, 6).unwrap();
        assert_eq!(promoted.epoch, 6);
        assert_eq!(promoted.ranges, table.ranges);
        assert_eq!(promoted.shards[0].primary, node(4));
        assert_eq!(promoted.shards[0].replicas, vec![node(3), node(1)]);
        assert!(promoted.is_primary(&node(4).id));
        assert!(!promoted.is_primary(&node(1).id));
        assert_eq!(
            table.promote(&node(1).id, 6),
            None,
            "a primary is no replica"
        );
        assert_eq!(table.promote(&node(9).id, 6), None);
        assert_eq!(table.with_epoch(9).epoch, 9);
    }
}
