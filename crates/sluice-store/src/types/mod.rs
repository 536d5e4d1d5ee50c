//! The Redis collection types a key may hold beside limiters and strings: lists, hashes, sets
//! and sorted sets. Each is a compact [`pack::Pack`] while small and a standard structure past
//! Redis's listpack limits. Their replication and snapshot form is the pack's bytes
//! (`encode`/`decode`), whatever the form in memory.

pub mod hash;
pub mod list;
pub mod pack;
pub mod set;
pub mod zset;

pub use hash::Hash;
pub use list::List;
pub use set::Set;
pub use zset::{Score, ZSet};
