//! Consistent-hash placement: which shard gets which slots when the cluster is created or grows.
//!
//! The 16384 slots form a circle. Each shard holds a few tokens (virtual nodes) on it, at most
//! [`TOKENS_PER_NODE`]; slot `s` belongs to the shard whose token is the first at or after `s`,
//! wrapping past 16383 to 0. A token therefore owns the arc from just after the previous token up
//! to itself, and each shard owns a few contiguous ranges, which keeps `CLUSTER SLOTS` short
//! (clients such as redis-rs and ioredis re-read it on every `MOVED`).
//!
//! The lookup is the `hashring` crate's, with a hasher that maps a token and a slot to their own
//! position on the circle instead of hashing them: the ring is exactly the tokens, and `get` is
//! "first token at or after".
//!
//! # Choosing tokens
//!
//! Tokens are not hashes of the node's name: with only a few tokens per node, random positions
//! leave shares far from fair (with 8 tokens the spread is about 1/√8, some 35% of the fair
//! share). They are chosen, deterministically
//! from the existing tokens and the shard count alone, so that a table can be recomputed and
//! checked by the golden test:
//! - The first shard's tokens are evenly spaced, the last at 16383.
//! - A new shard (the N-th) should end with `16384 / N` slots, taken from the shards holding more
//!   than that. Its tokens go to the shards with the most to give (D'Hondt over what each holds
//!   above `16384 / N`), one per arc, in each such shard's largest arcs. The slots are then taken
//!   one at a time from whichever of those shards has the most left, so they end level. A new
//!   token is placed inside its arc: it takes the arc's first part and the old token keeps the
//!   rest, so an arc can give all but one slot.
//!
//! Existing tokens never move, so adding a shard moves slots only onto the new shard, and removing
//! one hands each of its arcs to the next token: only its own slots move.
//!
//! These functions compute tables for the admin tool. Nodes never call them to route: they serve
//! the table they were given.

use std::cmp::Reverse;

use crate::SLOTS;
use crate::circle::Circle;
use crate::error::TableError;
use crate::table::{Node, Shard, SlotTable, runs, tokens_of};

/// Tokens a new shard gets (fewer only when the circle is too crowded to split that many arcs).
/// Each is one arc, so a shard owns at most this many ranges plus one (where the circle wraps),
/// and `CLUSTER SLOTS` lists at most `shards × 8 + 1` ranges.
pub const TOKENS_PER_NODE: usize = 8;

/// The table the tokens of `shards` place: every slot to its token's shard.
fn table_of(epoch: u64, shards: Vec<Shard>) -> Result<SlotTable, TableError> {
    if shards.len() > SLOTS {
        return Err(TableError::TooManyShards {
            count: shards.len(),
        });
    }
    let circle = Circle::new(tokens_of(&shards));
    let mut owner = Vec::with_capacity(SLOTS);
    for slot in 0..SLOTS as u16 {
        // An empty circle owns nothing; report it as the gap SlotTable::new would find.
        let shard = circle.owner(slot).ok_or(TableError::Gap { slot })?;
        owner.push(shard as u16);
    }
    SlotTable::new(epoch, shards, runs(&owner))
}

/// The shards of `table` with tokens that reproduce its ranges. A table whose ranges were
/// assigned by hand has no tokens; then each range's last slot becomes a token of its shard,
/// which places exactly those ranges, so placement can extend any valid table.
fn shards_with_tokens(table: &SlotTable) -> Vec<Shard> {
    let mut shards = table.shards.clone();
    if shards.iter().all(|shard| shard.tokens.is_empty()) {
        for range in &table.ranges {
            shards[range.shard].tokens.push(range.end);
        }
    }
    shards
}

/// One token's arc: the slots `start ..= start + len - 1` (wrapping), owned by `shard`.
#[derive(Clone, Copy, Debug)]
struct Arc {
    start: u16,
    len: usize,
    shard: usize,
}

fn arcs(tokens: &[(u16, usize)]) -> Vec<Arc> {
    let mut sorted = tokens.to_vec();
    sorted.sort_unstable();
    (0..sorted.len())
        .map(|i| {
            let (token, shard) = sorted[i];
            let previous = usize::from(sorted[(i + sorted.len() - 1) % sorted.len()].0);
            let token = usize::from(token);
            Arc {
                start: ((previous + 1) % SLOTS) as u16,
                // A lone token is its own predecessor and owns the whole circle.
                len: (token + SLOTS - previous - 1) % SLOTS + 1,
                shard,
            }
        })
        .collect()
}

/// The tokens for a new shard joining `shard_count` shards that hold `tokens` (see the module
/// docs). Deterministic: the same inputs give the same tokens, sorted.
fn new_tokens(tokens: &[(u16, usize)], shard_count: usize) -> Vec<u16> {
    if tokens.is_empty() {
        return (1..=TOKENS_PER_NODE)
            .map(|i| (i * SLOTS / TOKENS_PER_NODE - 1) as u16)
            .collect();
    }
    let n = shard_count + 1;
    let target = SLOTS / n;

    let arcs = arcs(tokens);
    let mut owned = vec![0usize; shard_count];
    // The arcs a new token can split (a token needs one slot of its own), largest first.
    let mut splittable: Vec<Vec<Arc>> = vec![Vec::new(); shard_count];
    for arc in &arcs {
        owned[arc.shard] += arc.len;
        if arc.len >= 2 {
            splittable[arc.shard].push(*arc);
        }
    }
    for list in &mut splittable {
        list.sort_by_key(|arc| (Reverse(arc.len), arc.start));
    }
    // What each shard holds above its fair share after the join, times n to stay in integers.
    let excess: Vec<usize> = owned
        .iter()
        .map(|&slots| (slots * n).saturating_sub(SLOTS))
        .collect();

    // D'Hondt: each token goes to the shard with the highest excess per token it already got,
    // so tokens follow the excess, and ties go to the lower index.
    let mut count = vec![0usize; shard_count];
    for _ in 0..TOKENS_PER_NODE {
        let best = (0..shard_count)
            .filter(|&j| excess[j] > 0 && count[j] < splittable[j].len())
            .max_by(|&a, &b| {
                (excess[a] * (count[b] + 1))
                    .cmp(&(excess[b] * (count[a] + 1)))
                    .then(b.cmp(&a))
            });
        match best {
            Some(j) => count[j] += 1,
            None => break,
        }
    }

    // Split the target between the shards that got tokens by water-filling: each slot comes from
    // the shard with the most slots left, so the givers end as even as their arcs allow. An arc
    // can give all but its token's slot.
    let givers: Vec<usize> = (0..shard_count).filter(|&j| count[j] > 0).collect();
    let capacity: Vec<usize> = (0..shard_count)
        .map(|j| {
            splittable[j][..count[j]]
                .iter()
                .map(|arc| arc.len - 1)
                .sum()
        })
        .collect();
    let mut take = vec![0usize; shard_count];
    for _ in 0..target {
        let giver = givers
            .iter()
            .copied()
            .filter(|&j| take[j] < capacity[j])
            .max_by_key(|&j| (owned[j] - take[j], Reverse(j)));
        match giver {
            Some(j) => take[j] += 1,
            None => break,
        }
    }

    let mut placed = Vec::with_capacity(TOKENS_PER_NODE);
    for &j in &givers {
        // Every token takes at least one slot: a small part needs fewer tokens.
        let chosen = &splittable[j][..count[j].min(take[j])];
        let mut remaining = take[j];
        // Smallest chosen arc first, each taking an equal share of what is left, capped by what
        // the arc can give: the larger arcs absorb what a small one could not.
        for (done, arc) in chosen.iter().rev().enumerate() {
            let piece = (remaining / (chosen.len() - done)).min(arc.len - 1);
            remaining -= piece;
            placed.push(((usize::from(arc.start) + piece - 1) % SLOTS) as u16);
        }
    }
    placed.sort_unstable();
    placed
}

/// The table for `shards` given in order, as if added one at a time to an empty cluster (so
/// `create` of N+1 shards places exactly as `add_shard` onto `create` of the first N).
///
/// # Panics
/// When the nodes are invalid (see [`SlotTable::new`]) or `shards` is empty; use [`try_create`]
/// for input that is not known to be good.
pub fn create(epoch: u64, shards: Vec<(Node, Vec<Node>)>) -> SlotTable {
    try_create(epoch, shards).unwrap_or_else(|error| panic!("create: {error}"))
}

/// [`create`], with invalid nodes reported instead of panicking.
pub fn try_create(epoch: u64, shards: Vec<(Node, Vec<Node>)>) -> Result<SlotTable, TableError> {
    if shards.is_empty() {
        return Err(TableError::NoShards);
    }
    if shards.len() > SLOTS {
        return Err(TableError::TooManyShards {
            count: shards.len(),
        });
    }
    let mut placed: Vec<Shard> = Vec::with_capacity(shards.len());
    let mut tokens = Vec::new();
    for (index, (primary, replicas)) in shards.into_iter().enumerate() {
        let chosen = new_tokens(&tokens, index);
        tokens.extend(chosen.iter().map(|&token| (token, index)));
        placed.push(Shard {
            primary,
            replicas,
            tokens: chosen,
        });
    }
    table_of(epoch, placed)
}

/// The table after adding a shard: existing tokens stay, the new primary's tokens are chosen as
/// in [`create`], and the epoch is `old.epoch + 1`. Only slots that move onto the new shard move.
///
/// # Panics
/// When the new nodes are invalid or clash with existing ones; see [`try_add_shard`].
pub fn add_shard(old: &SlotTable, primary: Node, replicas: Vec<Node>) -> SlotTable {
    try_add_shard(old, primary, replicas).unwrap_or_else(|error| panic!("add_shard: {error}"))
}

/// [`add_shard`], with invalid or clashing nodes reported instead of panicking.
pub fn try_add_shard(
    old: &SlotTable,
    primary: Node,
    replicas: Vec<Node>,
) -> Result<SlotTable, TableError> {
    let mut shards = shards_with_tokens(old);
    let tokens = new_tokens(&tokens_of(&shards), shards.len());
    shards.push(Shard {
        primary,
        replicas,
        tokens,
    });
    table_of(old.epoch.saturating_add(1), shards)
}

/// The table after removing the shard whose primary is `primary_id`: its tokens go away, so each
/// of its arcs joins the next token's and only its slots move. Epoch `old.epoch + 1`. `None` when
/// no shard has that primary or it is the only shard that owns slots.
pub fn remove_shard(old: &SlotTable, primary_id: &str) -> Option<SlotTable> {
    let index = old
        .shards
        .iter()
        .position(|shard| shard.primary.id == primary_id)?;
    let mut shards = shards_with_tokens(old);
    shards.remove(index);
    table_of(old.epoch.saturating_add(1), shards).ok()
}

/// A run of slots whose owner changes between two tables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Move {
    pub start: u16,
    /// Inclusive.
    pub end: u16,
    /// The owning primary's id in the old table.
    pub from: String,
    /// The owning primary's id in the new table.
    pub to: String,
}

/// The slots whose owner, by primary id, differs between `old` and `new`, as maximal runs with
/// the same `from` and `to`, in slot order. Owners are compared by id because shard indices are
/// not stable across tables (removing a shard renumbers the ones after it).
pub fn moves(old: &SlotTable, new: &SlotTable) -> Vec<Move> {
    let mut moves: Vec<Move> = Vec::new();
    for slot in 0..SLOTS as u16 {
        let from = &old.shards[old.owner(slot)].primary.id;
        let to = &new.shards[new.owner(slot)].primary.id;
        if from == to {
            continue;
        }
        match moves.last_mut() {
            Some(last) if last.end + 1 == slot && last.from == *from && last.to == *to => {
                last.end = slot;
            }
            _ => moves.push(Move {
                start: slot,
                end: slot,
                from: from.clone(),
                to: to.clone(),
            }),
        }
    }
    moves
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_is_first_token_at_or_after_wrapping() {
        let circle = Circle::new([(100, 0), (200, 1), (5000, 2)]);
        assert_eq!(circle.owner(0), Some(0));
        assert_eq!(circle.owner(100), Some(0));
        assert_eq!(circle.owner(101), Some(1));
        assert_eq!(circle.owner(200), Some(1));
        assert_eq!(circle.owner(201), Some(2));
        assert_eq!(circle.owner(5000), Some(2));
        assert_eq!(circle.owner(5001), Some(0), "wraps to the first token");
        assert_eq!(circle.owner(16383), Some(0));
        assert_eq!(Circle::new([]).owner(7), None);
    }

    #[test]
    fn arcs_cover_the_circle() {
        let arcs = arcs(&[(5000, 2), (100, 0), (200, 1)]);
        let spans: Vec<_> = arcs.iter().map(|a| (a.start, a.len, a.shard)).collect();
        assert_eq!(
            spans,
            vec![(5001, 16384 - 5000 + 100, 0), (101, 100, 1), (201, 4800, 2)]
        );
        let alone = super::arcs(&[(7, 0)]);
        assert_eq!((alone[0].start, alone[0].len), (8, SLOTS));
    }

    #[test]
    fn first_shard_tokens_are_evenly_spaced() {
        assert_eq!(
            new_tokens(&[], 0),
            vec![2047, 4095, 6143, 8191, 10239, 12287, 14335, 16383]
        );
    }

    #[test]
    fn second_shard_takes_the_first_half_of_each_arc() {
        let first: Vec<_> = new_tokens(&[], 0).into_iter().map(|t| (t, 0)).collect();
        assert_eq!(
            new_tokens(&first, 1),
            vec![1023, 3071, 5119, 7167, 9215, 11263, 13311, 15359]
        );
    }

    #[test]
    fn a_crowded_circle_gives_fewer_tokens_and_never_panics() {
        // Every slot is already a token: there is no arc left to split.
        let full: Vec<_> = (0..SLOTS as u16).map(|t| (t, usize::from(t) % 3)).collect();
        assert_eq!(new_tokens(&full, 3), Vec::<u16>::new());
        // Arcs of two slots: each new token can take one.
        let pairs: Vec<_> = (0..SLOTS as u16 / 2).map(|t| (2 * t + 1, 0)).collect();
        assert_eq!(new_tokens(&pairs, 1).len(), TOKENS_PER_NODE);
    }
}
