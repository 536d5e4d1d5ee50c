//! # sluice-repl — what a primary streams to its replicas
//!
//! Replication carries states, not commands: each record says what a key holds now (its
//! limiter state or counter value and its absolute deadline in Unix nanoseconds), or that it
//! is gone. Replaying a record twice leaves the same store, so a replica may apply a snapshot
//! and then a stream that overlaps it; only the order of records for one key matters.
//!
//! # Layout
//! - [`record`]: the record frames (versioned through the snapshot header and the handshake),
//!   their encoders (called on the request path, under a shard lock: appends only) and the
//!   decoder (called by the replica, which must survive any bytes).
//! - [`snapshot`]: a whole store as one checksummed sequence of records, for full syncs (and
//!   for snapshots on disk).
//! - [`backlog`]: the last `repl-backlog-size` bytes of the stream, for partial resyncs.
//!
//! This crate does no I/O and reads no clock: the server's `repl` module moves these bytes
//! over sockets.

pub mod backlog;
pub mod record;
pub mod snapshot;

pub use backlog::Backlog;
pub use record::{DecodeError, Record};
pub use snapshot::{SnapshotReader, SnapshotWriter};

/// The version of the record and snapshot encoding. A replica announces the versions it reads
/// with `REPLCONF capa sluice-v<N>`; a snapshot names its version in its header.
pub const FORMAT_VERSION: u16 = 4;

/// The oldest snapshot version this build reads: version 3 only added the TIME record, version
/// 4 the DATA record.
pub const OLDEST_READ_VERSION: u16 = 2;

/// The `REPLCONF capa` word a replica of this version sends, and a primary of this version
/// requires (its stream may carry what older versions do not read).
pub const CAPA: &str = "sluice-v3";

/// The word of the version before, which a replica of this version also sends: it reads that
/// version's stream, so replicas can be upgraded before their primary.
pub const OLDER_CAPA: &str = "sluice-v2";
