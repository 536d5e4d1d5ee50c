//! Why a slot table was refused.
//!
//! Every way a table can be wrong has its own variant carrying the offending slot, index, id or
//! line, so that an operator (or the node that refuses a pushed table) can say exactly what to fix.

use std::fmt;

/// A slot table that cannot be used, from [`SlotTable::new`](crate::SlotTable::new),
/// [`SlotTable::decode`](crate::SlotTable::decode) or the `try_` placement functions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TableError {
    /// No range covers this slot (the first such slot).
    Gap { slot: u16 },
    /// Two ranges cover this slot (the first such slot).
    Overlap { slot: u16 },
    /// A range with `start > end` or `end >= 16384`.
    BadRange { start: u16, end: u16 },
    /// A range or replica names a shard index the table does not have.
    UnknownShard { index: usize },
    /// Placement was asked for with an empty list of shards.
    NoShards,
    /// More shards than slots (an owner index must fit the table's `u16` lookup).
    TooManyShards { count: usize },
    /// A node id that is not 40 lowercase hexadecimal characters.
    BadNodeId { id: String },
    /// A host that is empty or contains whitespace or control characters, or port 0.
    BadAddress { host: String, port: u16 },
    /// Two nodes with the same id.
    DuplicateNodeId { id: String },
    /// Two nodes with the same `host:port`.
    DuplicateAddress { host: String, port: u16 },
    /// A token outside the circle `0..16384`.
    BadToken { token: u16 },
    /// Two tokens at the same position on the circle.
    DuplicateToken { token: u16 },
    /// The tokens place this slot on another shard than the ranges do (the first such slot).
    TokensDisagree { slot: u16 },
    /// A line of the text form that cannot be parsed (lines count from 1).
    BadFormat { line: usize, reason: &'static str },
    /// The text form's header names a version this build does not read.
    UnsupportedVersion { version: String },
}

impl fmt::Display for TableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TableError::Gap { slot } => write!(f, "gap at slot {slot}: no range covers it"),
            TableError::Overlap { slot } => {
                write!(f, "overlap at slot {slot}: more than one range covers it")
            }
            TableError::BadRange { start, end } => {
                write!(f, "bad range {start}-{end}: needs start <= end <= 16383")
            }
            TableError::UnknownShard { index } => write!(f, "unknown shard index {index}"),
            TableError::NoShards => f.write_str("no shards: a table needs at least one"),
            TableError::TooManyShards { count } => {
                write!(f, "too many shards ({count}): at most 16384")
            }
            TableError::BadNodeId { id } => {
                write!(f, "bad node id {id:?}: needs 40 lowercase hex characters")
            }
            TableError::BadAddress { host, port } => write!(
                f,
                "bad node address {host:?} port {port}: needs a host without spaces and a port > 0"
            ),
            TableError::DuplicateNodeId { id } => write!(f, "duplicate node id {id}"),
            TableError::DuplicateAddress { host, port } => {
                write!(f, "duplicate node address {host}:{port}")
            }
            TableError::BadToken { token } => {
                write!(f, "bad token {token}: needs 0 <= token <= 16383")
            }
            TableError::DuplicateToken { token } => write!(f, "duplicate token {token}"),
            TableError::TokensDisagree { slot } => write!(
                f,
                "tokens disagree with ranges at slot {slot}: the tokens place it on another shard"
            ),
            TableError::BadFormat { line, reason } => {
                write!(f, "bad format at line {line}: {reason}")
            }
            TableError::UnsupportedVersion { version } => write!(
                f,
                "unsupported slot table version {version:?}: this build reads version {}",
                crate::FORMAT_VERSION
            ),
        }
    }
}

impl std::error::Error for TableError {}
