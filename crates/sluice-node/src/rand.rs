//! One xorshift generator per thread, for random picks that need no cryptographic strength:
//! the members SRANDMEMBER and friends return (the commands' `sample`), and the gaps between
//! the allowed checks RL.TOP samples (`top`). Imports nothing of the node.

use std::cell::Cell;

thread_local! {
    static STATE: Cell<u64> = Cell::new(seed());
}

fn seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let local = 0u8;
    (t ^ (&local as *const u8 as u64)) | 1
}

/// A random 64-bit number from a xorshift generator per thread (seeded from the time and the
/// thread's stack address).
pub fn next() -> u64 {
    STATE.with(|s| {
        let mut x = s.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.set(x);
        x
    })
}
