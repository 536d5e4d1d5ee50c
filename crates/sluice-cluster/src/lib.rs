//! # sluice-cluster — slots and placement
//!
//! Pure logic, no I/O: how a key maps to one of Redis Cluster's 16384 slots, how slots map to
//! shards in a versioned table, how that table is written down, and how the admin tool computes
//! a new table when shards come and go.
//!
//! # Layout
//! - [`slot`]: [`crc16`], [`hash_tag`] and [`key_slot`], Redis's key → slot function, on every
//!   command's path in cluster mode (with carry-less multiplication on x86_64 CPUs that have it).
//! - [`table`]: [`Node`], [`Shard`], [`SlotRange`] and [`SlotTable`], the validated slot → shard
//!   table with its epoch, and failover ([`SlotTable::promote`]).
//! - [`text`]: the versioned text form of a table ([`SlotTable::encode`], [`SlotTable::decode`]),
//!   for the cluster config file and for pushing a table to a node.
//! - [`placement`]: consistent hashing on the slot circle with `hashring` ([`create`],
//!   [`add_shard`], [`remove_shard`]) and the migration plan between two tables ([`moves`]).
//! - [`error`]: [`TableError`], why a table was refused.
//!
//! # Invariants
//! - The table is the truth. Nodes and clients route by the table they were given and never
//!   recompute placement; placement only runs in the admin tool, and a golden test pins its output
//!   for a fixed node list so that a change in placement is a visible, deliberate change.
//! - A [`SlotTable`] exists only if valid: every slot owned by exactly one shard, unique 40-hex
//!   node ids and addresses, and tokens that agree with the ranges.
//! - Epochs order tables: every change ([`add_shard`], [`remove_shard`], [`SlotTable::promote`])
//!   comes with a higher epoch, and a node accepts only a higher one than it has.
//! - Adding a shard moves only slots onto it (about 1/N of them); removing one moves only its
//!   slots. Existing tokens never move.

mod circle;
pub mod error;
pub mod placement;
pub mod slot;
pub mod table;
pub mod text;

pub use error::TableError;
pub use placement::{
    Move, TOKENS_PER_NODE, add_shard, create, moves, remove_shard, try_add_shard, try_create,
};
pub use slot::{crc16, hash_tag, key_slot};
pub use table::{Node, Shard, SlotRange, SlotTable, is_node_id};

/// The version [`SlotTable::encode`] writes and [`SlotTable::decode`] reads.
pub const FORMAT_VERSION: u32 = 1;

/// The number of hash slots, as in Redis Cluster.
pub const SLOTS: usize = 16384;

/// The longest a slot handover may hold writes (`CLUSTER PAUSE ms`), in milliseconds: the
/// admin tool's own pause. A node refuses a longer one, so no client can freeze a slot's
/// writes for longer than a handover takes.
pub const MAX_PAUSE_MS: u64 = 10_000;
