//! The shards this thread holds for a script's whole run.
//!
//! A script is atomic over its keys: the shards of its declared keys are locked when it starts
//! and stay locked until it ends, and every command the script calls runs under those same
//! locks. parking_lot's mutex is not reentrant, so the record of what this thread holds lives
//! here, thread-local, and a shard lock taken while a hold is active ([`active`]) first looks
//! here: a shard already held is used as it is, without locking again.
//!
//! The record keeps, per held shard, its cell's address and the raw lock's token (the state
//! that unlocks it). Cells sit in one boxed slice, so address order is shard order: the
//! ascending order every multi-shard locker of the store takes its locks in.
//!
//! Invariants:
//! - At most one hold per thread at a time; [`active`] is false outside one, and is the only
//!   thing a lock outside a script reads (one thread-local load).
//! - `shards` is sorted by address and holds each shard once.
//! - Only addresses in `range` (the held store's cells) are held.

use std::cell::{Cell, RefCell};

use parking_lot::lock_api::RawMutex as _;

/// What unlocks a raw parking_lot mutex.
pub(crate) type Token = <parking_lot::RawMutex as parking_lot::lock_api::RawMutex>::Guard;

/// A shard the script needs could not be locked without risking a deadlock: it comes before a
/// shard the script already holds, and another client kept it past the wait. The call that
/// needed it changes nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardBusy;

pub(crate) struct Held {
    /// The held store's cells: `start..end` addresses.
    pub range: (usize, usize),
    /// Held shards by cell address, ascending, each with its lock's token.
    pub shards: Vec<(usize, Token)>,
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held")
            .field("range", &self.range)
            .field("shards", &self.shards.len())
            .finish()
    }
}

thread_local! {
    static ACTIVE: Cell<bool> = const { Cell::new(false) };
    static HELD: RefCell<Held> = const { RefCell::new(Held { range: (0, 0), shards: Vec::new() }) };
}

/// Whether this thread is inside a hold (a script's run).
#[inline(always)]
pub(crate) fn active() -> bool {
    ACTIVE.with(Cell::get)
}

/// Starts a hold over the cells at `range`. False if one is already active on this thread.
pub(crate) fn begin(range: (usize, usize)) -> bool {
    if active() {
        return false;
    }
    HELD.with_borrow_mut(|h| {
        h.range = range;
        h.shards.clear();
    });
    ACTIVE.with(|a| a.set(true));
    true
}

/// Ends the hold, handing back every held shard (address and token) to unlock.
pub(crate) fn end() -> Vec<(usize, Token)> {
    ACTIVE.with(|a| a.set(false));
    HELD.with_borrow_mut(|h| {
        h.range = (0, 0);
        std::mem::take(&mut h.shards)
    })
}

/// What the hold says of the cell at `addr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    /// Not a cell of the held store: lock it as usual.
    Foreign,
    /// Already held by this thread.
    Held,
    /// Not held; `after_all` if it comes after every held shard (then a blocking lock keeps
    /// the ascending order and cannot deadlock).
    Free { after_all: bool },
}

pub(crate) fn status(addr: usize) -> Status {
    HELD.with_borrow(|h| {
        if addr < h.range.0 || addr >= h.range.1 {
            return Status::Foreign;
        }
        match h.shards.binary_search_by_key(&addr, |s| s.0) {
            Ok(_) => Status::Held,
            Err(at) => Status::Free {
                after_all: at == h.shards.len(),
            },
        }
    })
}

/// Records a shard this thread has just locked for the rest of the hold.
pub(crate) fn insert(addr: usize, token: Token) {
    HELD.with_borrow_mut(|h| {
        if let Err(at) = h.shards.binary_search_by_key(&addr, |s| s.0) {
            h.shards.insert(at, (addr, token));
        }
    });
}

/// Locks `raw` for a hold, waiting as long as it takes (for a shard after every held one).
pub(crate) fn lock_blocking(raw: &parking_lot::RawMutex) -> Token {
    raw.lock()
}

/// Locks `raw` for a hold, waiting at most `wait` (for a shard before a held one).
pub(crate) fn lock_within(
    raw: &parking_lot::RawMutex,
    wait: std::time::Duration,
) -> Result<Token, ShardBusy> {
    use parking_lot::lock_api::RawMutexTimed as _;
    raw.try_lock_for(wait).ok_or(ShardBusy)
}
