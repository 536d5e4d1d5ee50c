//! Key → slot, exactly as Redis Cluster computes it.
//!
//! A key's slot is CRC16/XMODEM (polynomial 0x1021, initial value 0, no reflection, no final
//! xor — Redis's `crc16.c`) of the key, or of its hash tag, modulo [`SLOTS`]. The hash tag is the
//! bytes between the first `{` and the first `}` after it, when there is at least one byte between
//! them; otherwise the whole key is hashed. Every Redis Cluster client computes the same function,
//! so a client and a node always agree on where a key lives.
//!
//! [`key_slot`] runs on every command in cluster mode. The portable code, [`hash_tag`] and
//! [`crc16`], scans for `{` (and `}` after it) eight bytes per step and computes the CRC from
//! tables eight bytes per step (slicing-by-8): about 115 instructions for a 16-byte key. On
//! x86_64 CPUs with `pclmulqdq` (chosen at the first call), [`key_slot`] instead tests a whole
//! key of up to 16 bytes for `{` with one SSE comparison and computes its CRC with three
//! carry-less multiplications (the `clmul` module): 26 instructions per call for 9- to 16-byte
//! keys, the call included (callgrind), 72 for 64 bytes instead of 325.

use crate::SLOTS;

/// Slicing-by-8 tables: `CRC16_TABLES[k][v]` is the CRC of byte `v` followed by `k` zero bytes.
///
/// The CRC is linear (initial value 0, no final xor), so the CRC after eight more bytes is the
/// xor of eight independent lookups: the two bytes the old 16-bit CRC overlaps (each xored with
/// it) through tables 7 and 6, the other six through tables 5 to 0. Byte-at-a-time needs one
/// dependent load per byte; this needs one per eight bytes. Measured with callgrind against
/// slicing-by-4: 9-15% fewer instructions for 9- to 64-byte keys, for 4 KiB of tables instead of
/// 2. Computed at compile time.
const CRC16_TABLES: [[u16; 256]; 8] = {
    let mut tables = [[0u16; 256]; 8];
    let mut byte = 0;
    while byte < 256 {
        let mut crc = (byte as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
            bit += 1;
        }
        tables[0][byte] = crc;
        byte += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut byte = 0;
        while byte < 256 {
            // One more zero byte: shift the previous CRC through the one-byte table.
            let previous = tables[k - 1][byte];
            tables[k][byte] = (previous << 8) ^ tables[0][(previous >> 8) as usize];
            byte += 1;
        }
        k += 1;
    }
    tables
};

/// CRC16/XMODEM of `bytes`, as Redis's `crc16.c` (`crc16("123456789") == 0x31C3`).
#[inline]
pub fn crc16(bytes: &[u8]) -> u16 {
    let [t0, t1, t2, t3, t4, t5, t6, t7] = &CRC16_TABLES;
    let (words, tail) = bytes.as_chunks::<8>();
    let mut crc = 0u16;
    for &[b0, b1, b2, b3, b4, b5, b6, b7] in words {
        crc = t7[usize::from((crc >> 8) as u8 ^ b0)]
            ^ t6[usize::from(crc as u8 ^ b1)]
            ^ t5[usize::from(b2)]
            ^ t4[usize::from(b3)]
            ^ t3[usize::from(b4)]
            ^ t2[usize::from(b5)]
            ^ t1[usize::from(b6)]
            ^ t0[usize::from(b7)];
    }
    for &b in tail {
        crc = (crc << 8) ^ t0[usize::from((crc >> 8) as u8 ^ b)];
    }
    crc
}

/// The index of the first `needle` in `bytes`, eight bytes per step.
///
/// Most keys have no `{`, so finding that out is most of a hash tag's cost; a byte loop with an
/// early exit is not vectorised, so this tests a whole word at once: xor makes the matching
/// bytes zero, and `(x - 0x01..) & !x & 0x80..` flags zero bytes. A borrow can only flag bytes
/// above a true zero byte, so the lowest flag is always a real match.
#[inline]
fn find_byte(bytes: &[u8], needle: u8) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let pattern = ONES * u64::from(needle);
    let (words, tail) = bytes.as_chunks::<8>();
    for (i, word) in words.iter().enumerate() {
        let x = u64::from_le_bytes(*word) ^ pattern;
        let zeros = x.wrapping_sub(ONES) & !x & HIGHS;
        if zeros != 0 {
            return Some(i * 8 + (zeros.trailing_zeros() / 8) as usize);
        }
    }
    let offset = words.len() * 8;
    tail.iter().position(|&b| b == needle).map(|i| offset + i)
}

/// The part of `key` that is hashed: its hash tag if it has a non-empty one, else the whole key.
#[inline]
pub fn hash_tag(key: &[u8]) -> &[u8] {
    if let Some(open) = find_byte(key, b'{') {
        let rest = &key[open + 1..];
        // An empty tag (`{}`) does not count: Redis then hashes the whole key, and so must we.
        if let Some(len) = find_byte(rest, b'}')
            && len > 0
        {
            return &rest[..len];
        }
    }
    key
}

/// `mod SLOTS`: SLOTS is a power of two, so the modulo is a mask.
const SLOT_MASK: u16 = SLOTS as u16 - 1;

/// The Redis Cluster slot of `key`: `crc16(hash_tag(key)) mod 16384`.
///
/// On x86_64 CPUs with `pclmulqdq`, `ssse3` and `sse4.1` (tested once, on the first call) this
/// computes the CRC with carry-less multiplication, about 25 instructions for a key of up to
/// 16 bytes; elsewhere it is [`crc16`] of [`hash_tag`]. Both give the same slot for every key.
#[inline]
pub fn key_slot(key: &[u8]) -> u16 {
    #[cfg(target_arch = "x86_64")]
    {
        dispatch::key_slot(key)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        portable_key_slot(key)
    }
}

/// [`key_slot`] with the table-driven [`crc16`]: the fallback, and the reference in tests.
#[cfg_attr(
    all(
        target_arch = "x86_64",
        target_feature = "pclmulqdq",
        target_feature = "ssse3",
        target_feature = "sse4.1"
    ),
    allow(dead_code)
)]
#[inline]
fn portable_key_slot(key: &[u8]) -> u16 {
    crc16(hash_tag(key)) & SLOT_MASK
}

/// The choice between `clmul::key_slot_avx`, `clmul::key_slot_sse` and [`portable_key_slot`],
/// made once.
///
/// The choice is a function pointer, so a call costs one indirect call and no feature test. It
/// starts as `detect`, which tests the CPU, stores its choice and forwards the key; threads racing
/// through `detect` store the same pointer. A build whose target features already include the
/// carry-less variants' (`-C target-cpu=native` on a recent CPU) calls one directly, where it can
/// be inlined.
#[cfg(target_arch = "x86_64")]
mod dispatch {
    #[cfg(not(all(
        target_feature = "pclmulqdq",
        target_feature = "ssse3",
        target_feature = "sse4.1"
    )))]
    mod runtime {
        use core::sync::atomic::{AtomicPtr, Ordering};

        use super::super::{clmul, portable_key_slot};

        /// A slot function that may need target features.
        type SlotFn = unsafe fn(&[u8]) -> u16;

        /// Only ever `detect`, `portable_key_slot`, or a `clmul` function stored by `detect` after
        /// it saw the CPU has that function's target features.
        static CHOICE: AtomicPtr<()> = AtomicPtr::new(detect as SlotFn as *mut ());

        fn detect(key: &[u8]) -> u16 {
            let choice: SlotFn = if clmul::avx_supported() {
                clmul::key_slot_avx
            } else if clmul::sse_supported() {
                clmul::key_slot_sse
            } else {
                portable_key_slot
            };
            CHOICE.store(choice as *mut (), Ordering::Relaxed);
            // SAFETY: a `clmul` function is chosen only if the CPU has its target features.
            unsafe { choice(key) }
        }

        #[inline]
        pub(in super::super) fn key_slot(key: &[u8]) -> u16 {
            // SAFETY: CHOICE only ever holds a `SlotFn`, stored as a data pointer; function and
            // data pointers have the same size and representation on x86_64.
            let choice =
                unsafe { core::mem::transmute::<*mut (), SlotFn>(CHOICE.load(Ordering::Relaxed)) };
            // SAFETY: `choice` is `detect` or `portable_key_slot` (safe functions), or a `clmul`
            // function that `detect` stored after it saw the CPU has its target features.
            unsafe { choice(key) }
        }
    }

    #[cfg(not(all(
        target_feature = "pclmulqdq",
        target_feature = "ssse3",
        target_feature = "sse4.1"
    )))]
    pub(super) use runtime::key_slot;

    #[cfg(all(
        target_feature = "pclmulqdq",
        target_feature = "ssse3",
        target_feature = "sse4.1"
    ))]
    #[inline]
    pub(super) fn key_slot(key: &[u8]) -> u16 {
        // SAFETY: the build's target features include the function's, so every CPU this
        // binary runs on has them.
        #[cfg(target_feature = "avx")]
        unsafe {
            super::clmul::key_slot_avx(key)
        }
        // SAFETY: as above.
        #[cfg(not(target_feature = "avx"))]
        unsafe {
            super::clmul::key_slot_sse(key)
        }
    }
}

// With the carry-less features enabled at build time, the run-time choice and the functions only
// it uses are compiled out (tests still use them).
#[cfg(target_arch = "x86_64")]
#[cfg_attr(
    all(
        target_feature = "pclmulqdq",
        target_feature = "ssse3",
        target_feature = "sse4.1"
    ),
    allow(dead_code)
)]
mod clmul;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The textbook bit-at-a-time CRC, the reference for the table-driven one.
    fn crc16_bitwise(bytes: &[u8]) -> u16 {
        let mut crc = 0u16;
        for &b in bytes {
            crc ^= u16::from(b) << 8;
            for _ in 0..8 {
                crc = if crc & 0x8000 != 0 {
                    (crc << 1) ^ 0x1021
                } else {
                    crc << 1
                };
            }
        }
        crc
    }

    #[test]
    fn crc16_known_values() {
        // The check value of CRC16/XMODEM, also the test vector in Redis's crc16.c.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(crc16(b""), 0);
        assert_eq!(crc16_bitwise(b"123456789"), 0x31C3);
    }

    #[test]
    fn key_slot_known_values() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT` on a real Redis.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b"hello"), 866);
        assert_eq!(key_slot(b"somekey"), 11058);
        assert_eq!(key_slot(b"foo{hash_tag}"), 2515);
        assert_eq!(key_slot(b""), 0);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(
            key_slot(b"{user1000}.following"),
            key_slot(b"{user1000}.followers")
        );
    }

    #[test]
    fn hash_tag_rules() {
        // The examples of the Redis Cluster specification.
        assert_eq!(hash_tag(b"{user1000}.following"), b"user1000");
        assert_eq!(hash_tag(b"foo{}{bar}"), b"foo{}{bar}");
        assert_eq!(hash_tag(b"foo{{bar}}zap"), b"{bar");
        assert_eq!(hash_tag(b"foo{bar}{zap}"), b"bar");
        assert_eq!(hash_tag(b"no tag"), b"no tag");
        assert_eq!(hash_tag(b"open{only"), b"open{only");
        assert_eq!(hash_tag(b"close}{"), b"close}{");
        assert_eq!(key_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") & 16383);
        assert_eq!(key_slot(b"foo{{bar}}zap"), crc16(b"{bar") & 16383);
        assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
    }

    #[test]
    fn find_byte_finds_the_first() {
        let text = b"0123456789abcdef{0123456}{";
        assert_eq!(find_byte(text, b'{'), Some(16));
        assert_eq!(find_byte(text, b'}'), Some(24));
        assert_eq!(find_byte(text, b'x'), None);
        assert_eq!(find_byte(b"", b'{'), None);
        // 0x7b + 0x100 borrow: a `z` (0x7a) right below a `{` must not be taken for one.
        assert_eq!(find_byte(b"zzzzzzz{", b'{'), Some(7));
        assert_eq!(find_byte(b"{zzzzzzz", b'{'), Some(0));
    }

    /// The portable slot of `key` next to each carry-less variant this CPU runs, by name.
    #[cfg(target_arch = "x86_64")]
    fn fast_slots(key: &[u8]) -> Vec<(&'static str, u16)> {
        let mut slots = Vec::new();
        if clmul::sse_supported() {
            // SAFETY: the CPU has `pclmulqdq`, `ssse3` and `sse4.1`.
            slots.push(("sse", unsafe { clmul::key_slot_sse(key) }));
        }
        if clmul::avx_supported() {
            // SAFETY: the CPU has `pclmulqdq`, `ssse3`, `sse4.1` and `avx`.
            slots.push(("avx", unsafe { clmul::key_slot_avx(key) }));
        }
        slots
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn fast_slots(_key: &[u8]) -> Vec<(&'static str, u16)> {
        Vec::new()
    }

    /// Every implementation of the slot agrees with the portable one on `key`.
    fn assert_all_agree(key: &[u8]) {
        let expected = portable_key_slot(key);
        assert_eq!(key_slot(key), expected, "key_slot({key:?})");
        for (name, slot) in fast_slots(key) {
            assert_eq!(slot, expected, "{name} key_slot({key:?})");
        }
    }

    /// The carry-less CRC of `bytes`, if this CPU runs it.
    #[cfg(target_arch = "x86_64")]
    fn fast_crc16(bytes: &[u8]) -> Option<u16> {
        // SAFETY: called only if the CPU has the function's target features.
        clmul::sse_supported().then(|| unsafe { clmul::crc16(bytes) })
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn fast_crc16(_bytes: &[u8]) -> Option<u16> {
        None
    }

    /// Deterministic pseudo-random bytes (xorshift64), none of them `{` or `}` unless asked.
    fn noise(len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                match (x >> 56) as u8 {
                    b'{' | b'}' => b'x',
                    b => b,
                }
            })
            .collect()
    }

    #[test]
    fn fast_paths_are_exercised() {
        // On the x86_64 machines this is developed and tested on, the carry-less variants run;
        // if a CPU lacks them, the tests above still compare `key_slot` (then portable) itself.
        #[cfg(target_arch = "x86_64")]
        if !clmul::sse_supported() {
            eprintln!("no pclmulqdq/ssse3/sse4.1: only the portable key_slot is tested");
        }
        assert_all_agree(b"rlt:000000012345");
    }

    #[test]
    fn fast_known_values() {
        for (key, slot) in [
            (&b"foo"[..], 12182),
            (b"bar", 5061),
            (b"hello", 866),
            (b"somekey", 11058),
            (b"foo{hash_tag}", 2515),
            (b"", 0),
            (b"123456789", 0x31C3 & 16383),
        ] {
            assert_eq!(key_slot(key), slot, "{key:?}");
            for (name, fast) in fast_slots(key) {
                assert_eq!(fast, slot, "{name} {key:?}");
            }
        }
        assert_eq!(fast_crc16(b"123456789").unwrap_or(0x31C3), 0x31C3);
        assert_eq!(fast_crc16(b"").unwrap_or(0), 0);
        for key in [
            &b"{user1000}.following"[..],
            b"foo{}{bar}",
            b"foo{{bar}}zap",
            b"foo{bar}{zap}",
            b"open{only",
            b"close}{",
            b"{}",
            b"{",
            b"}",
            b"{a}",
            b"a{b}c{d}e{f}g{h}i{j}k{l}m{n}o{p}q",
            b"0123456789abcdef{0123456789abcdef}0123456789abcdef{",
        ] {
            assert_all_agree(key);
        }
    }

    #[test]
    fn fast_crc_every_length() {
        // Every length through a few fold steps, so each first-chunk size and each load size
        // meets each number of 16-byte blocks.
        for seed in 1..=8 {
            let bytes = noise(300, seed);
            for len in 0..=bytes.len() {
                let bytes = &bytes[..len];
                let expected = crc16(bytes);
                assert_eq!(crc16_bitwise(bytes), expected);
                if let Some(fast) = fast_crc16(bytes) {
                    assert_eq!(fast, expected, "len {len} seed {seed}");
                }
                assert_all_agree(bytes);
            }
        }
    }

    #[test]
    fn fast_crc_extreme_bytes() {
        // All-ones and all-zeros polynomials, where a wrong fold constant or a lost carry-less
        // bit shows most.
        for len in 0..=80 {
            for byte in [0x00, 0xff, 0x80, 0x01] {
                let bytes = vec![byte; len];
                if let Some(fast) = fast_crc16(&bytes) {
                    assert_eq!(fast, crc16(&bytes), "len {len} byte {byte:#x}");
                }
                assert_all_agree(&bytes);
            }
        }
    }

    #[test]
    fn fast_tags_every_placement() {
        // Every key length to 40 with a `{` and a `}` at every pair of positions (or neither),
        // and two of each: first `{`, first `}` after it, and the empty-tag rule.
        for len in 0..=40 {
            let base = noise(len, len as u64 + 1);
            for open in 0..=len {
                for close in 0..=len {
                    let mut key = base.clone();
                    if open < len {
                        key[open] = b'{';
                    }
                    if close < len {
                        key[close] = b'}';
                    }
                    assert_all_agree(&key);
                    if open + 3 < len && close < len {
                        key[open + 3] = b'{';
                        key[len - 1 - close] = b'}';
                        assert_all_agree(&key);
                    }
                }
            }
        }
    }

    #[test]
    fn fast_keys_read_only_their_bytes() {
        // Each key in an allocation of exactly its size, and at the start and at the end of a
        // larger buffer: under valgrind's memcheck, a read past the slice is an invalid read.
        for len in 0..=70 {
            let key: Box<[u8]> = noise(len, 7).into_boxed_slice();
            assert_all_agree(&key);
            let page = vec![b'a'; 4096];
            assert_all_agree(&page[4096 - len..]);
            assert_all_agree(&page[..len]);
        }
    }

    #[cfg(target_arch = "x86_64")]
    mod constants {
        use super::super::clmul::{
            CONTIGUOUS, LEAD, MU, POLY_LOW, SHORT, X80_MOD_P, X128_MOD_P, X192_MOD_P,
        };

        /// The polynomial with its `x¹⁶` term.
        const P: u128 = 0x1_1021;

        /// `x^n mod P`, one shift at a time.
        fn x_pow_mod(n: u32) -> u64 {
            let mut r: u128 = 1;
            for _ in 0..n {
                r <<= 1;
                if r & 0x1_0000 != 0 {
                    r ^= P;
                }
            }
            r as u64
        }

        /// `⌊x^n / P⌋` by long division (`n` < 128).
        fn x_pow_div(n: u32) -> u128 {
            let mut rem: u128 = 1 << n;
            let mut quotient = 0u128;
            for shift in (0..=n - 16).rev() {
                if rem & (1 << (shift + 16)) != 0 {
                    rem ^= P << shift;
                    quotient |= 1 << shift;
                }
            }
            assert!(rem < 1 << 16);
            quotient
        }

        #[test]
        fn fold_and_barrett_constants() {
            assert_eq!(POLY_LOW, 0x1021);
            assert_eq!(X80_MOD_P, x_pow_mod(80));
            assert_eq!(X128_MOD_P, x_pow_mod(128));
            assert_eq!(X192_MOD_P, x_pow_mod(192));
            let mu = x_pow_div(80);
            assert_eq!(mu >> 64, 1, "μ has degree 64");
            assert_eq!(MU, mu as u64);
            // The hex literals, so that a change to the derivation is a visible one.
            assert_eq!(
                (X80_MOD_P, X128_MOD_P, X192_MOD_P, MU),
                (0xeb23, 0xaefc, 0x650b, 0x1130_3471_a041_b343)
            );
        }

        #[test]
        fn masks() {
            // 16 bytes: the first 8 and the last 8 loads, reversed, high half in lane 0.
            assert_eq!(
                SHORT.0[16],
                [7, 6, 5, 4, 3, 2, 1, 0, 15, 14, 13, 12, 11, 10, 9, 8]
            );
            // 9 bytes "abcdefghi", loaded as "abcdefgh" + "bcdefghi": the polynomial's low bytes
            // (lane 1) are i (position 15), then h to b (positions 7 to 1, from the first load);
            // its high byte (lane 0) is a.
            assert_eq!(
                SHORT.0[9],
                [
                    0, 128, 128, 128, 128, 128, 128, 128, 15, 7, 6, 5, 4, 3, 2, 1
                ]
            );
            assert_eq!(SHORT.0[1][8], 0);
            assert_eq!(SHORT.0[0], [128; 16]);
            assert_eq!(
                CONTIGUOUS.0[9],
                [
                    0, 1, 2, 3, 4, 5, 6, 7, 15, 128, 128, 128, 128, 128, 128, 128
                ]
            );
            assert_eq!(
                LEAD.0[3],
                [
                    2, 1, 0, 128, 128, 128, 128, 128, 128, 128, 128, 128, 128, 128, 128, 128
                ]
            );
        }
    }

    proptest! {
        #[test]
        fn fast_matches_portable(
            key in proptest::collection::vec(
                prop_oneof![4 => any::<u8>(), 1 => Just(b'{'), 1 => Just(b'}')],
                0..=100,
            ),
        ) {
            let expected = portable_key_slot(&key);
            prop_assert_eq!(key_slot(&key), expected);
            for (name, slot) in fast_slots(&key) {
                prop_assert_eq!(slot, expected, "{}", name);
            }
        }

        #[test]
        fn fast_crc_matches_table(bytes in proptest::collection::vec(any::<u8>(), 0..=200)) {
            if let Some(fast) = fast_crc16(&bytes) {
                prop_assert_eq!(fast, crc16(&bytes));
            }
        }

        #[test]
        fn find_byte_matches_position(
            bytes in proptest::collection::vec(prop_oneof![Just(b'{'), Just(b'}'), Just(0x7a), Just(0xfb), any::<u8>()], 0..40),
            needle in prop_oneof![Just(b'{'), Just(b'}'), any::<u8>()],
        ) {
            prop_assert_eq!(find_byte(&bytes, needle), bytes.iter().position(|&b| b == needle));
        }

        #[test]
        fn table_crc_matches_bitwise(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            prop_assert_eq!(crc16(&bytes), crc16_bitwise(&bytes));
        }

        #[test]
        fn slot_is_in_range_and_tags_group(tag in "[a-z0-9]{1,12}", a in ".{0,12}", b in ".{0,12}") {
            let one = format!("{{{tag}}}{a}");
            let two = format!("{{{tag}}}{b}");
            prop_assert!(usize::from(key_slot(one.as_bytes())) < SLOTS);
            prop_assert_eq!(key_slot(one.as_bytes()), key_slot(two.as_bytes()));
        }
    }
}
