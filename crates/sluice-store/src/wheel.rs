//! A hierarchical timing wheel of key hashes: when does each entry's deadline need a look.
//!
//! Time is cut into ticks of 2^20 ns (≈1.05 ms; a power of two so a tick is a shift). Six levels
//! of 32 slots cover 2^30 ticks (≈13 days, so daily limits stay on the wheel and packed, see
//! `table`); later targets wait in an overflow list that is re-examined each time the wheel
//! enters a new 2^30-tick block. Slot ids (`level * 32 + index`, 192 of them, the overflow and
//! `NOT_FILED`) fit the 8 bits every table entry keeps.
//!
//! The wheel stores only the low 32 bits of the key's hash (4 bytes per key: the table finds a
//! key's candidate slots from those bits, see `table`). The entry in the table keeps `filed`, the
//! [`SlotId`] of its one live wheel item (or [`NOT_FILED`]): one byte of its metadata. This
//! gives lazy re-scheduling:
//! - A deadline that moves later changes nothing here: when the item fires, the entry is not due
//!   and is filed again at its current deadline ([`Wheel::refile`]).
//! - A deadline that moves before its slot's range is filed again at once, so an entry is never
//!   looked at more than one tick after its deadline; the old item turns stale.
//!
//! Invariants (`cur` is the next tick still to be processed):
//! - Every item sits in the slot `position(target, cur)`: the level is given by the highest bit
//!   where `target` and `cur` differ, so the occupied slots' tick ranges partition the future,
//!   and an occupied slot's range is a function of its id and `cur` ([`Wheel::start_of`]).
//! - An item matches an entry iff the entry's 32-bit hash equals the item and the entry's
//!   `filed` is the id of the slot being processed. A slot is emptied when it fires, so its items
//!   all belong to its current range; items repeated within one slot are deduplicated when it
//!   fires, and stale items (entry gone, or filed elsewhere) are dropped when met.
//! - `start_of(filed) <= tick_of(deadline)` for every filed entry, so an entry is processed no
//!   later than the tick that holds its deadline.

use sluice_core::Nanos;

/// log2 of the tick length in nanoseconds.
pub const TICK_SHIFT: u32 = 20;
/// One tick in nanoseconds.
pub const TICK_NS: u64 = 1 << TICK_SHIFT;
const SLOT_BITS: u32 = 5;
const SLOTS: usize = 1 << SLOT_BITS;
/// Number of wheel levels.
pub const LEVELS: usize = 6;
const HORIZON_BITS: u32 = SLOT_BITS * LEVELS as u32;
/// Names a slot: `level * SLOTS + index`, or [`OVERFLOW`]. Every id, [`NOT_FILED`] included,
/// fits in 8 bits (the table keeps `filed` in one byte of an entry's metadata).
pub type SlotId = u16;
/// The overflow list's id.
pub const OVERFLOW: SlotId = (LEVELS * SLOTS) as SlotId;
/// `filed` of an entry that has no wheel item (no deadline).
pub const NOT_FILED: SlotId = 0xFF;
const _: () = assert!(OVERFLOW < NOT_FILED && NOT_FILED <= 0xFF);
/// A buffer of a fired slot is given back to its slot if at most this many items long, so steady
/// traffic does not allocate per tick; bigger ones are freed so a burst does not pin memory.
const REUSE_CAP: usize = 64;

/// The tick whose processing must see `deadline` as due: rounded up, so that when tick `t` is
/// processed (`now >= t << TICK_SHIFT`) every deadline filed at `t` is `<= now`.
pub fn tick_of(deadline: Nanos) -> u64 {
    deadline.as_nanos().div_ceil(TICK_NS)
}

/// The last tick that has fully begun at `now`.
pub fn tick_floor(now: Nanos) -> u64 {
    now.as_nanos() >> TICK_SHIFT
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pos {
    Slot { level: usize, index: usize },
    Overflow,
}

impl Pos {
    fn id(self) -> SlotId {
        match self {
            Pos::Slot { level, index } => (level * SLOTS + index) as SlotId,
            Pos::Overflow => OVERFLOW,
        }
    }

    fn of(id: SlotId) -> Pos {
        if id >= OVERFLOW {
            Pos::Overflow
        } else {
            let id = usize::from(id);
            Pos::Slot {
                level: id / SLOTS,
                index: id % SLOTS,
            }
        }
    }
}

/// Pushes with growth by a quarter: a slot buffer can hold most of a shard's keys, and doubling
/// would leave up to half of it unused.
fn push(items: &mut Vec<u32>, hash: u32) {
    if items.len() == items.capacity() {
        items.reserve_exact((items.len() / 4).max(8));
    }
    items.push(hash);
}

/// One shard's timing wheel. See the module docs.
#[derive(Debug)]
pub struct Wheel {
    /// The next tick to process; ticks before it are done. Starts at 1 so that no target is
    /// ever `NOT_FILED`.
    cur: u64,
    levels: Box<[[Vec<u32>; SLOTS]; LEVELS]>,
    /// Bit `i` of `occupied[l]` is set iff `levels[l][i]` is non-empty.
    occupied: [u64; LEVELS],
    overflow: Vec<u32>,
    /// Items in the wheel, stale ones included.
    items: usize,
    /// The items of the fired slot `pending_id` that a bounded
    /// [`advance_some`](Wheel::advance_some) has not visited yet, visited from the end. Its
    /// last `sorted` items are in descending order; the rest are as the slot held them (a
    /// slot that holds a whole shard's keys is sorted [`SORT_CHUNK`] items at a time, never
    /// all at once under the lock). Not counted in `items`.
    pending: Vec<u32>,
    pending_id: SlotId,
    sorted: usize,
    /// The hash visited last in the sorted run: a repeat of it is skipped.
    last: Option<u32>,
}

/// Items of a fired slot one step sorts (and so visits once per distinct hash) at a time.
const SORT_CHUNK: usize = 1024;

impl Default for Wheel {
    fn default() -> Self {
        Wheel {
            cur: 1,
            levels: Box::new(std::array::from_fn(|_| std::array::from_fn(|_| Vec::new()))),
            occupied: [0; LEVELS],
            overflow: Vec::new(),
            items: 0,
            pending: Vec::new(),
            pending_id: NOT_FILED,
            sorted: 0,
            last: None,
        }
    }
}

impl Wheel {
    /// Items currently filed (live and stale).
    #[cfg(test)]
    pub fn items(&self) -> usize {
        self.items
    }

    /// Bytes this wheel owns on the heap: the slot array and every slot's buffer capacity.
    pub fn heap_bytes(&self) -> usize {
        let buffers: usize = self
            .levels
            .iter()
            .flatten()
            .chain([&self.overflow, &self.pending])
            .map(|v| v.capacity() * size_of::<u32>())
            .sum();
        size_of::<[[Vec<u32>; SLOTS]; LEVELS]>() + buffers
    }

    /// Lets an empty wheel skip straight to `now`: with nothing filed there is nothing to
    /// process in between, and later filings then land in low levels instead of the overflow.
    pub fn idle_to(&mut self, now: Nanos) {
        if self.items == 0 && self.pending.is_empty() {
            self.cur = self.cur.max(tick_floor(now));
        }
    }

    fn position(&self, target: u64) -> Pos {
        let target = target.max(self.cur);
        let diff = target ^ self.cur;
        let level = if diff == 0 {
            0
        } else {
            ((63 - diff.leading_zeros()) / SLOT_BITS) as usize
        };
        if level >= LEVELS {
            Pos::Overflow
        } else {
            let index = (target >> (SLOT_BITS * level as u32)) as usize & (SLOTS - 1);
            Pos::Slot { level, index }
        }
    }

    /// The first tick of slot `id`'s range as seen from `cur` (for the overflow: the start of
    /// the next 2^30-tick block, when it is re-examined).
    pub fn start_of(&self, id: SlotId) -> u64 {
        match Pos::of(id) {
            Pos::Slot { level, index } => {
                let shift = SLOT_BITS * level as u32;
                let block = self.cur >> (shift + SLOT_BITS) << (shift + SLOT_BITS);
                (block | ((index as u64) << shift)).max(self.cur)
            }
            Pos::Overflow => ((self.cur >> HORIZON_BITS) + 1) << HORIZON_BITS,
        }
    }

    /// Bytes that filing an item for `deadline` now would allocate (a slot buffer's growth).
    pub fn file_cost(&self, deadline: Nanos) -> usize {
        if deadline == Nanos::MAX {
            return 0;
        }
        let items = match self.position(tick_of(deadline)) {
            Pos::Slot { level, index } => &self.levels[level][index],
            Pos::Overflow => &self.overflow,
        };
        if items.len() == items.capacity() {
            (items.len() / 4).max(8) * size_of::<u32>()
        } else {
            0
        }
    }

    /// The id of the slot an item with target tick `target` would be filed in now.
    #[cfg(test)]
    pub fn slot_of(&self, target: u64) -> SlotId {
        self.position(target).id()
    }

    /// Files `hash` at tick `target` (or at `cur` if that is already past) and returns the
    /// slot used, which the caller stores as the entry's `filed`.
    pub fn file(&mut self, hash: u32, target: u64) -> SlotId {
        let pos = self.position(target);
        match pos {
            Pos::Slot { level, index } => {
                push(&mut self.levels[level][index], hash);
                self.occupied[level] |= 1 << index;
            }
            Pos::Overflow => push(&mut self.overflow, hash),
        }
        self.items += 1;
        pos.id()
    }

    /// Brings an entry's wheel item in line with its (possibly changed) `deadline`; `filed` is
    /// the entry's field. Later deadlines are left to [`Wheel::refile`] (lazy); an earlier one
    /// in another slot is filed again now. `Nanos::MAX` means no deadline.
    #[inline]
    pub fn reschedule(&mut self, hash: u32, filed: &mut SlotId, deadline: Nanos) {
        if deadline == Nanos::MAX {
            // Any live item fires, finds no deadline and unfiles the entry.
            return;
        }
        let target = tick_of(deadline).max(self.cur);
        // A slot whose range starts at or before the target fires in time: keep its item.
        if *filed == NOT_FILED || target < self.start_of(*filed) {
            *filed = self.file(hash, target);
        }
    }

    /// Called for an entry that a fired item matched and that is not due: files it again at
    /// its current deadline, or unfiles it if it has none.
    pub fn refile(&mut self, hash: u32, filed: &mut SlotId, deadline: Nanos) {
        *filed = if deadline == Nanos::MAX {
            NOT_FILED
        } else {
            self.file(hash, tick_of(deadline))
        };
    }

    /// The items filed at exactly `tick` if that is a level-0 slot now (it is for `cur`).
    pub fn pending_at(&self, tick: u64) -> &[u32] {
        match self.position(tick) {
            Pos::Slot { level: 0, index } if tick >= self.cur => &self.levels[0][index],
            _ => &[],
        }
    }

    /// Processes the slots due by `now`, calling `visit(wheel, hash, id)` once per distinct
    /// hash of each fired slot (of each [`SORT_CHUNK`] of its items, for a larger slot), where
    /// `id` is the slot's id (an entry matches iff its `filed` is `id`); `visit` drops due entries and [`refile`](Wheel::refile)s the others. At most
    /// `budget` visits: a slot that fired holding a wave of items (a cascade of a whole
    /// shard's keys, a mass expiry) is worked off over several calls, so no call holds the
    /// shard's lock for long. Returns whether everything due by `now` was processed; if not,
    /// the next call (at any `now`) goes on where this one
    /// stopped, and `cur` stays at the slot being worked off until then. Entries waiting in
    /// that slot are looked at late, never lost: a lookup sees a passed deadline by itself.
    pub fn advance_some(
        &mut self,
        now: Nanos,
        budget: usize,
        mut visit: impl FnMut(&mut Wheel, u32, SlotId),
    ) -> bool {
        let now_tick = tick_floor(now);
        let mut left = budget;
        loop {
            while !self.pending.is_empty() {
                if left == 0 {
                    return false;
                }
                left -= 1;
                if self.sorted == 0 {
                    self.sort_chunk();
                }
                let h = self.pending.pop().expect("not empty");
                self.sorted -= 1;
                // Collisions and stale items may repeat a hash; one visit handles all its
                // entries. A repeat in a later chunk is visited again: by then its entries are
                // dropped or refiled, and refiling one again leaves at most a stale item.
                if self.last.replace(h) != Some(h) {
                    visit(self, h, self.pending_id);
                }
            }
            self.recycle_pending();
            let Some((from, hashes)) = self.take_next(now_tick) else {
                break;
            };
            (self.pending, self.pending_id) = (hashes, from.id());
        }
        self.cur = self.cur.max(now_tick + 1);
        true
    }

    /// Sorts the last [`SORT_CHUNK`] pending items in descending order, so that popping from
    /// the end visits them in ascending order and a repeated hash comes out twice in a row.
    fn sort_chunk(&mut self) {
        let n = self.pending.len();
        let k = n.min(SORT_CHUNK);
        self.pending[n - k..].sort_unstable_by(|a, b| b.cmp(a));
        (self.sorted, self.last) = (k, None);
    }

    /// Gives the worked-off buffer back to its slot if that is still empty and it is small.
    fn recycle_pending(&mut self) {
        if self.pending.capacity() == 0 {
            return;
        }
        let buffer = std::mem::take(&mut self.pending);
        let slot = match Pos::of(self.pending_id) {
            Pos::Slot { level, index } => &mut self.levels[level][index],
            Pos::Overflow => &mut self.overflow,
        };
        if slot.is_empty() && buffer.capacity() <= REUSE_CAP {
            *slot = buffer;
        }
    }

    /// Takes the earliest slot due by `now_tick` out of the wheel and moves `cur` to it.
    /// Level 0 fires at its tick; higher levels and the overflow cascade when `cur` is about to
    /// enter their range (up to `now_tick + 1`), so that when `advance_some` catches up no
    /// occupied slot's range contains `cur` and the positions stay a partition.
    fn take_next(&mut self, now_tick: u64) -> Option<(Pos, Vec<u32>)> {
        let mut best: Option<(u64, Pos, u64)> = None; // (event tick, slot, slot start)
        // Highest level first: on a tie a cascade runs before the lower slot it may feed.
        for level in (0..LEVELS).rev() {
            let occupied = self.occupied[level];
            if occupied == 0 {
                continue;
            }
            let shift = SLOT_BITS * level as u32;
            let cur_index = (self.cur >> shift) & (SLOTS as u64 - 1);
            let ahead = occupied & (u64::MAX << cur_index);
            debug_assert_eq!(ahead, occupied, "slot behind cur at level {level}");
            let index = ahead.trailing_zeros() as u64;
            let block = self.cur >> (shift + SLOT_BITS) << (shift + SLOT_BITS);
            let start = block | (index << shift);
            let event = start.max(self.cur);
            let limit = if level == 0 { now_tick } else { now_tick + 1 };
            if event <= limit && best.is_none_or(|(e, _, _)| event < e) {
                let index = index as usize;
                best = Some((event, Pos::Slot { level, index }, start));
            }
        }
        if !self.overflow.is_empty() {
            let event = ((self.cur >> HORIZON_BITS) + 1) << HORIZON_BITS;
            if event <= now_tick + 1 && best.is_none_or(|(e, _, _)| event < e) {
                best = Some((event, Pos::Overflow, event));
            }
        }
        let (event, pos, start) = best?;
        let hashes = match pos {
            Pos::Slot { level, index } => {
                debug_assert!(start <= event);
                self.cur = event;
                self.occupied[level] &= !(1 << index);
                std::mem::take(&mut self.levels[level][index])
            }
            Pos::Overflow => {
                // Overflow is chosen only when the wheel is empty, so `cur` may jump straight
                // to the block that holds now: nothing is filed in the blocks in between.
                let now_block = (now_tick + 1) >> HORIZON_BITS << HORIZON_BITS;
                self.cur = event.max(now_block);
                std::mem::take(&mut self.overflow)
            }
        };
        self.items -= hashes.len();
        Some((pos, hashes))
    }

    /// Takes one item from the earliest occupied slot (the overflow last), for eviction: its
    /// entry's deadline is among the soonest, within that slot's width (one tick at level 0,
    /// 64^l ticks at level l). Returns the hash and the slot's id.
    pub fn pop_soonest(&mut self) -> Option<(u32, SlotId)> {
        // A slot being worked off fired first: its items are the soonest.
        if let Some(h) = self.pending.pop() {
            self.sorted = self.sorted.saturating_sub(1);
            return Some((h, self.pending_id));
        }
        let mut best: Option<(u64, Pos)> = None;
        for level in 0..LEVELS {
            let occupied = self.occupied[level];
            if occupied == 0 {
                continue;
            }
            let index = occupied.trailing_zeros() as usize;
            let pos = Pos::Slot { level, index };
            let start = self.start_of(pos.id());
            if best.is_none_or(|(s, _)| start < s) {
                best = Some((start, pos));
            }
        }
        let pos = match best {
            Some((_, pos)) => pos,
            None if !self.overflow.is_empty() => Pos::Overflow,
            None => return None,
        };
        let items = match pos {
            Pos::Slot { level, index } => &mut self.levels[level][index],
            Pos::Overflow => &mut self.overflow,
        };
        let hash = items.pop()?;
        if items.is_empty() {
            if items.capacity() > REUSE_CAP {
                *items = Vec::new();
            }
            if let Pos::Slot { level, index } = pos {
                self.occupied[level] &= !(1 << index);
            }
        }
        self.items -= 1;
        Some((hash, pos.id()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A stand-in for the table: hash -> (deadline, filed), visited like the shard does.
    #[derive(Default)]
    struct Harness {
        wheel: Wheel,
        entries: HashMap<u32, (Nanos, SlotId)>,
        dropped: Vec<u32>,
        /// `now` of the previous `run`.
        last_run: Nanos,
    }

    impl Harness {
        fn touch(&mut self, h: u32, deadline: Nanos, now: Nanos) {
            self.wheel.idle_to(now);
            let e = self.entries.entry(h).or_insert((deadline, NOT_FILED));
            e.0 = deadline;
            self.wheel.reschedule(h, &mut e.1, deadline);
        }

        /// One unbounded run: what it dropped.
        fn run(&mut self, now: Nanos) -> Vec<u32> {
            let before = self.dropped.len();
            assert!(self.step(now, usize::MAX), "an unbounded step catches up");
            self.last_run = now;
            self.dropped[before..].to_vec()
        }

        /// One bounded step of `run`: at most `budget` visits; whether it caught up.
        fn step(&mut self, now: Nanos, budget: usize) -> bool {
            let entries = &mut self.entries;
            let dropped = &mut self.dropped;
            self.wheel.advance_some(now, budget, |w, h, id| {
                if let Some(e) = entries.get_mut(&h)
                    && e.1 == id
                {
                    if e.0 <= now {
                        entries.remove(&h);
                        dropped.push(h);
                    } else {
                        w.refile(h, &mut e.1, e.0);
                    }
                }
            })
        }
    }

    /// A 2023 instant aligned to a wheel block, so tick offsets map onto known slots.
    const BASE: Nanos = Nanos(
        (1_690_000_000_000_000_000 >> (TICK_SHIFT + HORIZON_BITS)) << (TICK_SHIFT + HORIZON_BITS),
    );

    fn at(ticks: u64, extra_ns: u64) -> Nanos {
        Nanos(BASE.0 + ticks * TICK_NS + extra_ns)
    }

    #[test]
    fn fires_within_one_tick_at_every_level_and_overflow() {
        let deltas = [
            1,
            2,
            63,
            64,
            65,
            4095,
            4096,
            4097,
            262_143,
            262_144,
            300_000,
            (1 << 24) - 1,
            1 << 24,
            (1 << 24) + 77,
            5 << 24,
            (40 << 24) + 12_345,
            (1 << 30) - 1,
            1 << 30,
            (3 << 30) + 5,
        ];
        for &delta in &deltas {
            for extra in [0, 1, TICK_NS / 2, TICK_NS - 1] {
                let mut h = Harness::default();
                h.run(BASE);
                let deadline = at(delta, extra);
                h.touch(42, deadline, BASE);
                // Walk towards the deadline in uneven steps so cascades happen on the way.
                let mut now = BASE;
                while now < deadline {
                    assert!(
                        h.run(now).is_empty(),
                        "delta {delta}+{extra}: early at {now:?}"
                    );
                    let left = deadline.0 - now.0;
                    now = Nanos(now.0 + (left / 3).max(1));
                }
                let dropped = h.run(Nanos(deadline.0 + TICK_NS - 1));
                assert_eq!(
                    dropped,
                    vec![42],
                    "delta {delta}+{extra}: not dropped within a tick"
                );
                assert_eq!(h.wheel.items(), 0);
            }
        }
    }

    #[test]
    fn single_jump_far_past_the_deadline_drops() {
        for delta in [1, 100, 5000, 1 << 20, 1 << 26] {
            let mut h = Harness::default();
            h.touch(1, at(delta, 0), BASE);
            assert!(h.run(at(delta, 0).saturating_sub(Nanos(1))).is_empty());
            assert_eq!(h.run(at(delta * 3, 5)), vec![1]);
        }
    }

    #[test]
    fn deadline_moved_later_is_refiled_lazily() {
        let mut h = Harness::default();
        h.touch(7, at(10, 0), BASE);
        h.touch(7, at(5000, 0), at(3, 0));
        h.touch(7, at(9000, 0), at(4, 0));
        // Moving later never adds an item.
        assert_eq!(h.wheel.items(), 1);
        assert!(h.run(at(10, 0)).is_empty());
        // The fired item was filed again at the current deadline.
        assert_eq!(h.wheel.items(), 1);
        assert_eq!(h.entries[&7].1, h.wheel.slot_of(tick_of(at(9000, 0))));
        assert!(h.run(at(8999, 0)).is_empty());
        assert_eq!(h.run(at(9000, 0)), vec![7]);
    }

    #[test]
    fn deadline_moved_earlier_is_filed_again_and_fires_on_time() {
        let mut h = Harness::default();
        h.touch(7, at(300_000, 0), BASE); // level 3
        h.touch(7, at(70, 0), at(1, 0)); // level 1
        assert_eq!(h.wheel.items(), 2);
        assert!(h.run(at(69, 1)).is_empty());
        assert_eq!(h.run(at(70, 0)), vec![7]);
        // The stale far item is dropped when its slot comes, touching nothing.
        h.touch(8, at(400_000, 0), at(71, 0));
        assert!(h.run(at(399_999, 0)).is_empty());
        assert_eq!(h.wheel.items(), 1);
        assert_eq!(h.run(at(400_000, 0)), vec![8]);
        assert_eq!(h.dropped, vec![7, 8]);
    }

    #[test]
    fn moved_earlier_within_the_same_slot_adds_no_item() {
        let mut h = Harness::default();
        h.run(at(0, 0));
        // Ticks 8190 and 8000 are both in level-2 slot 1 seen from tick 1.
        assert_eq!(
            h.wheel.position(tick_of(at(8190, 0))),
            h.wheel.position(tick_of(at(8000, 0)))
        );
        h.touch(3, at(8190, 0), at(0, 0));
        h.touch(3, at(8000, 0), at(0, 0));
        assert_eq!(h.wheel.items(), 1);
        assert!(h.run(at(7999, 5)).is_empty());
        assert_eq!(h.run(at(8000, 0)), vec![3]);
    }

    #[test]
    fn persistent_entries_are_unfiled() {
        let mut h = Harness::default();
        h.touch(9, at(100, 0), BASE);
        h.touch(9, Nanos::MAX, BASE);
        assert!(h.run(at(1000, 0)).is_empty());
        assert_eq!(h.entries[&9].1, NOT_FILED);
        assert_eq!(h.wheel.items(), 0);
    }

    #[test]
    fn many_random_deadlines_fire_in_the_run_that_reaches_them() {
        // A small deterministic generator keeps the test free of a rand dependency.
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut h = Harness::default();
        let mut deadlines = HashMap::new();
        let mut now = BASE;
        h.run(now);
        for round in 0..400u64 {
            for k in 0..20 {
                let key = (next() % 500) as u32;
                let span = [70, 5_000, 300_000, 30_000_000][(k % 4) as usize] * TICK_NS;
                let d = Nanos(now.0 + 1 + next() % span);
                h.touch(key, d, now);
                deadlines.insert(key, d);
            }
            let step = [1, 3, 900, 70_000, 5_000_000][(round % 5) as usize] * TICK_NS;
            let prev = now;
            now = Nanos(now.0 + next() % step);
            for key in h.run(now) {
                let d = deadlines.remove(&key).unwrap();
                assert!(d <= now, "dropped before its deadline");
                assert!(
                    prev.0 < tick_of(d) << TICK_SHIFT,
                    "late: an earlier run at {prev:?} should have dropped {d:?}"
                );
            }
            for (k, d) in &deadlines {
                // Deadlines inside the current tick wait for the tick's end.
                assert!(
                    tick_of(*d) > tick_floor(now),
                    "key {k} ({d:?}) survived {now:?}"
                );
            }
        }
        assert!(h.wheel.items() >= deadlines.len());
    }

    #[test]
    fn bounded_steps_drop_what_one_run_drops_and_keep_the_rest() {
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let (mut whole, mut steps) = (Harness::default(), Harness::default());
        let mut now = BASE;
        whole.run(now);
        while !steps.step(now, 1) {}
        let mut stopped_early = 0;
        for round in 0..300u64 {
            // Waves of keys in one far slot (a cascade of all of them), and some near ones.
            let mut touch = |whole: &mut Harness, steps: &mut Harness, k: u64, now: Nanos| {
                let key = (next() % 2000) as u32;
                let span = if k.is_multiple_of(2) { 40_000 } else { 100 } * TICK_NS;
                let d = Nanos(now.0 + 1 + next() % span);
                whole.touch(key, d, now);
                steps.touch(key, d, now);
            };
            for k in 0..40 {
                touch(&mut whole, &mut steps, k, now);
            }
            now = Nanos(now.0 + [2, 700, 50_000][(round % 3) as usize] * TICK_NS);
            whole.run(now);
            // Between two bounded steps more keys are filed (by the checks a server serves
            // there): the steps stay consistent with them.
            let budget = 1 + (round % 7) as usize;
            for k in 0.. {
                if steps.step(now, budget) {
                    break;
                }
                stopped_early += 1;
                touch(&mut whole, &mut steps, k, now);
            }
            whole.run(now);
            // The same keys live with the same deadlines, none past its tick. (Which keys were
            // dropped may differ: a due key that a step had not reached yet and that is then
            // touched again lives on, where the whole run dropped it and the touch made it
            // anew; a lookup treats both alike.)
            let deadlines = |h: &Harness| {
                let mut v: Vec<_> = h.entries.iter().map(|(k, e)| (*k, e.0)).collect();
                v.sort_unstable();
                v
            };
            assert_eq!(deadlines(&whole), deadlines(&steps), "round {round}");
            for (k, e) in &steps.entries {
                assert!(tick_of(e.0) > tick_floor(now), "key {k} survived {now:?}");
            }
        }
        assert!(stopped_early > 100, "{stopped_early}");
        // Eviction takes from a slot being worked off first.
        let h = 0xABCD;
        steps.touch(h, Nanos(now.0 + 40_000 * TICK_NS), now);
        steps.touch(h + 1, Nanos(now.0 + 40_001 * TICK_NS), now);
        assert!(!steps.step(Nanos(now.0 + 40_002 * TICK_NS), 0));
        assert!(steps.wheel.pop_soonest().is_some());
    }
}
