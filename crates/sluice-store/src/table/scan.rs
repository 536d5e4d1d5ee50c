//! Scans of a table in bounded steps: a snapshot, a slot migration's copy or drop, a
//! `CLUSTER COUNTKEYSINSLOT` visit every entry without holding the shard's lock for all of them.
//!
//! Between two steps the table changes under the scan: keys come and go, inserts move keys
//! between buckets, the table starts or ends a move into new arrays. A scan visits every entry
//! present for its whole length at least once, and exactly once unless an insert moved it
//! meanwhile from a visited slot to one still to visit. Entries inserted during the scan may or
//! may not be visited (they are newer than the scan: a replica gets them from the stream).
//!
//! How: a scan walks the slots of the arrays it is in, in index order. Whenever an entry leaves
//! a slot still to visit for one the scan will not visit (a cuckoo walk moving it below the
//! scan's position; a move into new arrays, which a scan of the old ones never visits), its key
//! is copied into the scan's `passed` list, and the scan visits those keys at its end.
//!
//! A scan is in one of these places ([`At`]):
//! - `Settle`: it began while the table moved; its steps move entries in until the move is over
//!   (visiting the new arrays then sees every entry once), then `Cur(0)`;
//! - `Cur(c)`: in the current arrays, slots below `c` visited;
//! - `Old(c)`: the arrays it was in became the old ones of a move; slots below `c` visited; the
//!   new arrays hold only entries moved in (visited, or in `passed`) and newer ones;
//! - `Done`: every slot visited; what is left is `passed`.

use super::{EMPTY, Table};

/// One scan's progress. See the module docs.
#[derive(Debug)]
pub(super) struct Scan {
    id: u64,
    at: At,
    passed: Vec<Box<[u8]>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum At {
    Settle,
    Cur(usize),
    Old(usize),
    Done,
}

/// Visits slots `c..` of `arrays`, `budget` of them at most, calling `f` with each occupied
/// one. Returns the first slot not visited, or `None` when the walk reached the end.
fn walk(
    arrays: &Table,
    c: usize,
    budget: usize,
    f: &mut impl FnMut(&Table, usize),
) -> Option<usize> {
    let end = c.saturating_add(budget).min(arrays.meta.len());
    for i in c..end {
        if arrays.meta[i] != EMPTY {
            f(arrays, i);
        }
    }
    (end < arrays.meta.len()).then_some(end)
}

impl Table {
    /// Starts scan `id` (a number no other scan of this table uses).
    pub fn scan_begin(&mut self, id: u64) {
        let at = if self.old.is_some() {
            At::Settle
        } else {
            At::Cur(0)
        };
        self.scans.push(Scan {
            id,
            at,
            passed: Vec::new(),
        });
    }

    /// Forgets scan `id` (it ended early).
    pub fn scan_end(&mut self, id: u64) {
        self.scans.retain(|s| s.id != id);
    }

    /// One step of scan `id`: about `budget` slots visited (or entries moved in, while it
    /// settles), `f` called with each occupied one (the arrays it is in, and its slot). Returns true when the scan is over (it is
    /// then forgotten); also for a scan this table does not know (a FLUSHALL replaced it).
    pub fn scan_step(
        &mut self,
        id: u64,
        budget: usize,
        hash: &impl Fn(&[u8]) -> u32,
        mut f: impl FnMut(&Table, usize),
    ) -> bool {
        let Some(n) = self.scans.iter().position(|s| s.id == id) else {
            return true;
        };
        match self.scans[n].at {
            At::Settle => {
                self.migrate_some(budget.saturating_mul(super::MOVE_COST), hash);
            }
            At::Cur(c) => {
                self.scans[n].at = walk(self, c, budget, &mut f).map_or(At::Done, At::Cur);
            }
            At::Old(c) => {
                let old = self
                    .old
                    .as_deref()
                    .expect("a scan in old arrays: they exist");
                self.scans[n].at = walk(old, c, budget, &mut f).map_or(At::Done, At::Old);
            }
            At::Done => {
                let passed = &mut self.scans[n].passed;
                let keys = passed.split_off(passed.len() - budget.min(passed.len()));
                for key in keys {
                    self.visit_key(&key, hash, &mut f);
                }
                if self.scans[n].passed.is_empty() {
                    self.scans.swap_remove(n);
                    return true;
                }
            }
        }
        false
    }

    /// Calls `f` with `key`'s entry, wherever it is now, if it is still there.
    fn visit_key(
        &self,
        key: &[u8],
        hash: &impl Fn(&[u8]) -> u32,
        f: &mut impl FnMut(&Table, usize),
    ) {
        let probe = crate::key::Probe::new(key);
        let h = hash(key);
        for t in self.parts() {
            if let Some(i) = t.find(h, &probe) {
                f(t, i);
                return;
            }
        }
    }

    /// Slot `from`'s entry moves to `to` within these arrays: scans past `to` but not past
    /// `from` would miss it.
    #[inline]
    pub(super) fn note_move(&mut self, from: usize, to: usize) {
        if self.scans.is_empty() {
            return;
        }
        let key: Box<[u8]> = self.key(from).into();
        for s in &mut self.scans {
            if let At::Cur(c) = s.at
                && from >= c
                && to < c
            {
                s.passed.push(key.clone());
            }
        }
    }

    /// Old slot `i`'s entry (key `key`) moves into these arrays: scans of the old arrays not
    /// yet past it would miss it.
    pub(super) fn note_adopt(&mut self, i: usize, key: &[u8]) {
        for s in &mut self.scans {
            if let At::Old(c) = s.at
                && i >= c
            {
                s.passed.push(key.into());
            }
        }
    }

    /// The move into these arrays is over (the old ones are gone).
    pub(super) fn note_moved(&mut self) {
        for s in &mut self.scans {
            s.at = match s.at {
                At::Settle => At::Cur(0),
                At::Old(_) => At::Done,
                at => at,
            };
        }
    }

    /// These arrays become the old ones of a move; returns the scans, for the new arrays.
    pub(super) fn scans_into_old(&mut self) -> Vec<Scan> {
        let mut scans = std::mem::take(&mut self.scans);
        for s in &mut scans {
            if let At::Cur(c) = s.at {
                s.at = At::Old(c);
            }
        }
        scans
    }

    /// Every entry moves now (a rebuild, no move in progress): scans keep the keys they have
    /// not visited; returns the scans, for the new arrays.
    pub(super) fn scans_for_rebuild(&mut self) -> Vec<Scan> {
        let mut scans = std::mem::take(&mut self.scans);
        for s in &mut scans {
            if let At::Cur(c) = s.at {
                for i in c..self.meta.len() {
                    if self.meta[i] != EMPTY {
                        s.passed.push(self.key(i).into());
                    }
                }
                s.at = At::Done;
            }
        }
        scans
    }
}
