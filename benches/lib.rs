//! # sluice-benches — criterion benchmarks of the request path, piece by piece
//!
//! The benches live in `benches/`, one file per layer, and report throughput in elements (one
//! element = one check, one frame, one reply), so criterion prints checks/s next to ns/check:
//!
//! - `algorithms`: each algorithm's decision (`sluice_core::check`) on an existing key, in
//!   steady state (time advances so every check is allowed and the key stays live).
//! - `parser`: `sluice_resp::Parser` on an `RL.CHECK` frame, arriving whole, split across two
//!   reads, and as a 16-frame pipeline.
//! - `store`: `sluice_store::Store::check` at 10k and 1M live keys from one thread (random key
//!   order, like `redis-benchmark -r`), and two threads on one hot shard.
//! - `reply`: the 5-integer array `RL.CHECK` answers with.
//! - `cluster`: `sluice_cluster::key_slot`, the slot check of every keyed command in cluster mode,
//!   on 9-, 16-, 22-byte (hash-tagged) and 64-byte keys, against the portable table-driven CRC.
//!
//! Run them with `cargo bench -p sluice-benches` (one file: `cargo bench -p sluice-benches
//! --bench store`). Whole-server figures (throughput against Redis, bytes per bucket,
//! instructions per request) come from `scripts/bench-vs-redis.sh` and `scripts/callgrind.sh`.
//!
//! This library holds only what several benches share: the key names and a cheap random
//! sequence, both matching what the scripts send.

/// A 16-byte key as `scripts/bench-vs-redis.sh` names them: a 4-byte prefix and `i` in 12
/// zero-padded digits (`redis-benchmark -r`'s `__rand_int__`), e.g. `rlt:000000000042`.
pub fn key16(prefix: &[u8; 4], i: u64) -> [u8; 16] {
    let mut key = [b'0'; 16];
    key[..4].copy_from_slice(prefix);
    let mut n = i % 1_000_000_000_000;
    for digit in key[4..].iter_mut().rev() {
        *digit = b'0' + (n % 10) as u8;
        n /= 10;
    }
    key
}

/// A xorshift64 sequence: a random key order that costs a few instructions per step, so a
/// bench's time is the store's, not the generator's.
#[derive(Clone, Debug)]
pub struct XorShift(u64);

impl XorShift {
    /// A sequence from `seed` (0 is lifted to 1: xorshift would stay at 0).
    pub fn new(seed: u64) -> XorShift {
        XorShift(seed.max(1))
    }

    /// The next value, uniform enough in `0..n` for picking keys (`n` ≥ 1).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        // Multiply-shift instead of `%`: no division on the bench's hot path.
        ((u128::from(x) * u128::from(n)) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_16_bytes_with_12_digits() {
        assert_eq!(&key16(b"rlt:", 42), b"rlt:000000000042");
        assert_eq!(&key16(b"rlt:", 999_999_999_999), b"rlt:999999999999");
    }

    #[test]
    fn below_stays_in_range() {
        let mut rng = XorShift::new(0);
        assert!((0..10_000).all(|_| rng.below(7) < 7));
    }
}
