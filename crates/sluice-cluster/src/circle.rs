//! The slot circle as a `hashring` ring of tokens: the lookup behind consistent-hash
//! placement (see the `placement` module), also used to check that a table's tokens place its
//! ranges. A token and a slot hash to their own position, so the ring is exactly the tokens and
//! `get` is "first token at or after".

use std::hash::{BuildHasher, Hash, Hasher};

use hashring::HashRing;

/// A token on the ring: its position and the index of the shard it belongs to.
#[derive(Clone, Copy, Debug)]
struct VirtualNode {
    token: u16,
    shard: usize,
}

/// Hashes to the token's position, so the ring is sorted by position.
impl Hash for VirtualNode {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(u64::from(self.token));
    }
}

/// A slot, looked up on the ring at its own position.
#[derive(Clone, Copy, Debug)]
struct SlotPoint(u16);

impl Hash for SlotPoint {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(u64::from(self.0));
    }
}

/// A "hasher" whose result is the position it was given: `VirtualNode` and `SlotPoint` write one
/// `u64`, and `finish` returns it unchanged.
#[derive(Clone, Copy, Debug, Default)]
struct PositionHasher(u64);

impl Hasher for PositionHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write_u64(&mut self, position: u64) {
        self.0 = position;
    }

    /// Not used by our two types; kept order-preserving (big-endian) so the hasher stays total.
    fn write(&mut self, bytes: &[u8]) {
        self.0 = bytes
            .iter()
            .fold(self.0, |acc, &b| (acc << 8) | u64::from(b));
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct PositionBuildHasher;

impl BuildHasher for PositionBuildHasher {
    type Hasher = PositionHasher;

    fn build_hasher(&self) -> PositionHasher {
        PositionHasher(0)
    }
}

/// The tokens of a set of shards, as a `hashring` ring.
#[derive(Debug)]
pub(crate) struct Circle(HashRing<VirtualNode, PositionBuildHasher>);

impl Circle {
    pub(crate) fn new(tokens: impl IntoIterator<Item = (u16, usize)>) -> Circle {
        let mut ring = HashRing::with_hasher(PositionBuildHasher);
        ring.batch_add(
            tokens
                .into_iter()
                .map(|(token, shard)| VirtualNode { token, shard })
                .collect(),
        );
        Circle(ring)
    }

    /// The shard of the first token at or after `slot`, wrapping; `None` on an empty circle.
    pub(crate) fn owner(&self, slot: u16) -> Option<usize> {
        self.0.get(&SlotPoint(slot)).map(|node| node.shard)
    }
}
