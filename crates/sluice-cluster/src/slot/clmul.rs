//! [`key_slot_sse`] and [`key_slot_avx`]: the slot with carry-less multiplication (x86_64
//! `pclmulqdq`, with `ssse3` and `sse4.1`; the second also with `avx`, whose three-operand forms
//! save the register copies SSE needs).
//!
//! The CRC is the remainder of a polynomial division: CRC16/XMODEM of a message `M` (its bytes
//! read as one big-endian number, a polynomial over GF(2)) is `M·x¹⁶ mod P`, with
//! `P = x¹⁶ + x¹² + x⁵ + 1` (0x11021). Initial value 0 and no final xor make it linear with no
//! offset, so leading zero bytes change nothing: a message right-aligned in a zeroed 128-bit
//! register *is* its polynomial, whatever its length up to 16 bytes. The remainder then costs
//! three dependent carry-less multiplications ([`reduce`]):
//!
//! 1. fold the high 64 bits: with `V = Vh·x⁶⁴ + Vl`, `V·x¹⁶ ≡ Vh·(x⁸⁰ mod P) + Vl·x¹⁶ = B`, a
//!    polynomial of degree < 80;
//! 2. Barrett: with `μ = ⌊x⁸⁰ / P⌋` (degree 64), the quotient of `B` by `P` is exactly
//!    `q = ⌊(B div x¹⁶)·μ / x⁶⁴⌋` (the error of `μ` contributes terms of negative degree only);
//!    `μ`'s top term `x⁶⁴` is one xor, its other 64 bits one multiplication;
//! 3. the remainder `B − q·P` has degree < 16 by definition of `q`: its 16 bits are the low
//!    16 bits of `B` xor those of `q·0x1021`.
//!
//! A key of up to 16 bytes is read with two possibly overlapping loads of 8, 4, 2 or 1 bytes
//! (never past the slice, [`load_short`]); one `pshufb` with a mask per length ([`SHORT`])
//! reverses it into polynomial order, and the same register compared with `{` says whether the
//! key may have a hash tag at all. A longer key folds 16 bytes per step
//! (`A·x¹²⁸ ≡ Ah·(x¹⁹² mod P) + Al·(x¹²⁸ mod P)`, [`fold_long`]) after a first chunk of 1 to 16
//! bytes. A key with a `{` finds its tag with the same registers ([`short_tagged`],
//! [`long_tagged`]) and hashes it with [`crc16`].

use core::arch::x86_64::{
    __m128i, _mm_castpd_si128, _mm_castsi128_pd, _mm_clmulepi64_si128, _mm_cmpeq_epi8,
    _mm_cvtsi32_si128, _mm_cvtsi128_si32, _mm_insert_epi16, _mm_insert_epi32, _mm_load_si128,
    _mm_loadh_pd, _mm_loadl_epi64, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128,
    _mm_set_epi64x, _mm_set1_epi8, _mm_setzero_si128, _mm_shuffle_epi8, _mm_shuffle_epi32,
    _mm_slli_si128, _mm_xor_si128,
};

use super::SLOT_MASK;

/// Whether this CPU runs [`key_slot_sse`].
pub(super) fn sse_supported() -> bool {
    is_x86_feature_detected!("pclmulqdq")
        && is_x86_feature_detected!("ssse3")
        && is_x86_feature_detected!("sse4.1")
}

/// Whether this CPU runs [`key_slot_avx`].
pub(super) fn avx_supported() -> bool {
    sse_supported() && is_x86_feature_detected!("avx")
}

/// `P − x¹⁶`, the low 16 bits of the polynomial.
pub(super) const POLY_LOW: u64 = 0x1021;
/// `x⁸⁰ mod P`: folds the high half of a 128-bit polynomial onto the low half shifted by 16.
pub(super) const X80_MOD_P: u64 = 0xeb23;
/// `⌊x⁸⁰ / P⌋ − x⁶⁴`: Barrett's constant without its top term.
pub(super) const MU: u64 = 0x1130_3471_a041_b343;
/// `x¹²⁸ mod P` and `x¹⁹² mod P`: fold 128 bits onto the next 128.
pub(super) const X128_MOD_P: u64 = 0xaefc;
pub(super) const X192_MOD_P: u64 = 0x650b;

/// Seventeen `pshufb` masks, one per length 0 to 16, 16-byte aligned so each loads with `movdqa`
/// or serves as an instruction's memory operand.
#[derive(Debug)]
#[repr(C, align(16))]
pub(super) struct Masks(pub(super) [[u8; 16]; 17]);

/// `pshufb`'s "write a zero" index.
const ZERO: u8 = 0x80;

/// The largest of 8, 4, 2 and 1 that is at most `len` (`len` ≥ 1): the size of the two loads
/// [`load_short`] makes.
const fn half(len: usize) -> usize {
    if len >= 8 {
        8
    } else if len >= 4 {
        4
    } else if len >= 2 {
        2
    } else {
        1
    }
}

/// Where [`load_short`] puts byte `i` of a `len`-byte slice: the first `h` bytes at `0..h`, the
/// last `h` at `8..8 + h` (`h = half(len)`); a byte in both is taken from the first.
const fn loaded_at(len: usize, i: usize) -> usize {
    let h = half(len);
    if i < h { i } else { 8 + i - (len - h) }
}

/// Where byte `j` of a polynomial (`j` = 0 the least significant) goes in the register
/// [`reduce`] takes: the high 64 bits in lane 0, the low 64 bits in lane 1, so that step 1's
/// xor and step 2's multiplication use lane 1 with no move between lanes.
const fn swapped_lanes(j: usize) -> usize {
    if j < 8 { j + 8 } else { j - 8 }
}

/// `SHORT.0[len]` turns what [`load_short`] read from a `len`-byte slice into [`reduce`]'s input:
/// message byte `i` is polynomial byte `len − 1 − i`.
pub(super) static SHORT: Masks = {
    let mut masks = [[ZERO; 16]; 17];
    let mut len = 1;
    while len <= 16 {
        let mut i = 0;
        while i < len {
            masks[len][swapped_lanes(len - 1 - i)] = loaded_at(len, i) as u8;
            i += 1;
        }
        len += 1;
    }
    Masks(masks)
};

/// `CONTIGUOUS.0[len]` turns what [`load_short`] read from a `len`-byte slice into the slice
/// itself, byte `i` at position `i`, zeros after it.
pub(super) static CONTIGUOUS: Masks = {
    let mut masks = [[ZERO; 16]; 17];
    let mut len = 1;
    while len <= 16 {
        let mut i = 0;
        while i < len {
            masks[len][i] = loaded_at(len, i) as u8;
            i += 1;
        }
        len += 1;
    }
    Masks(masks)
};

/// `LEAD.0[r]` takes the first `r` bytes of a 16-byte load into polynomial order, lanes in
/// natural order (the fold loop's).
pub(super) static LEAD: Masks = {
    let mut masks = [[ZERO; 16]; 17];
    let mut r = 1;
    while r <= 16 {
        let mut i = 0;
        while i < r {
            masks[r][r - 1 - i] = i as u8;
            i += 1;
        }
        r += 1;
    }
    Masks(masks)
};

/// The mask for `len` (≤ 16) in `masks`.
#[target_feature(enable = "pclmulqdq,ssse3,sse4.1")]
#[inline]
fn mask(masks: &Masks, len: usize) -> __m128i {
    let row = &masks.0[len];
    // SAFETY: `row` is 16 readable bytes, 16-byte aligned: `Masks` is `align(16)` and its rows
    // are 16 bytes long.
    unsafe { _mm_load_si128(row.as_ptr().cast()) }
}

/// `c` in lane 1 (the high 64 bits), for `pclmulqdq` to take from there.
///
/// LLVM keeps only the lane of a constant that `pclmulqdq` uses. A small constant in lane 0 is
/// then built in a general register and moved over (two instructions); one in lane 1 stays in
/// memory, the `pclmulqdq`'s operand (no instruction with AVX).
#[target_feature(enable = "pclmulqdq,ssse3,sse4.1")]
#[inline]
fn in_lane_1(c: u64) -> __m128i {
    _mm_set_epi64x(c as i64, 0)
}

/// `byte` in all 16 bytes.
#[target_feature(enable = "pclmulqdq,ssse3,sse4.1")]
#[inline]
fn splat(byte: u8) -> __m128i {
    _mm_set1_epi8(byte as i8)
}

/// A bit per byte of `v`: whether it is `byte`.
#[target_feature(enable = "pclmulqdq,ssse3,sse4.1")]
#[inline]
fn find(v: __m128i, byte: u8) -> u32 {
    _mm_movemask_epi8(_mm_cmpeq_epi8(v, splat(byte))) as u32
}

/// Up to 16 bytes of `bytes` in a register, never reading outside the slice: the first `h` bytes
/// at positions `0..h` and the last `h` at `8..8 + h`, `h` the largest of 8, 4, 2, 1 that is at
/// most the length (the two overlap unless the length is 16, 8, 4, 2 or 1), zeros elsewhere.
/// Every byte of the slice is in the result, and every non-zero byte of the result is a byte of
/// the slice.
#[target_feature(enable = "pclmulqdq,ssse3,sse4.1")]
#[inline]
fn load_short(bytes: &[u8]) -> __m128i {
    if bytes.len() >= 8 {
        load_8_to_16(bytes)
    } else {
        load_below_8(bytes)
    }
}

/// [`load_short`] for 8 to 16 bytes.
#[target_feature(enable = "pclmulqdq,ssse3,sse4.1")]
#[inline]
fn load_8_to_16(bytes: &[u8]) -> __m128i {
    let len = bytes.len();
    debug_assert!((8..=16).contains(&len));
    let p = bytes.as_ptr();
    // SAFETY: two reads of 8 bytes, at offsets 0 and `len − 8`, with `len` ≥ 8: inside `bytes`.
    // Neither `_mm_loadl_epi64` nor `_mm_loadh_pd` needs alignment. (`movhpd` loads into the
    // high lane in one instruction; an integer insert takes LLVM two.)
    unsafe {
        let first = _mm_castsi128_pd(_mm_loadl_epi64(p.cast()));
        _mm_castpd_si128(_mm_loadh_pd(first, p.add(len - 8).cast()))
    }
}

/// [`load_short`] for 0 to 7 bytes.
#[target_feature(enable = "pclmulqdq,ssse3,sse4.1")]
#[inline]
fn load_below_8(bytes: &[u8]) -> __m128i {
    let len = bytes.len();
    debug_assert!(len < 8);
    let p = bytes.as_ptr();
    // SAFETY: each read is of `w` bytes at offset 0 or `len − w`, with `w` ≤ `len`: inside
    // `bytes`. `read_unaligned` needs no alignment.
    unsafe {
        if len >= 4 {
            let first = p.cast::<i32>().read_unaligned();
            let last = p.add(len - 4).cast::<i32>().read_unaligned();
            _mm_insert_epi32(_mm_cvtsi32_si128(first), last, 2)
        } else if len >= 2 {
            let first = p.cast::<u16>().read_unaligned();
            let last = p.add(len - 2).cast::<u16>().read_unaligned();
            _mm_insert_epi16(_mm_cvtsi32_si128(i32::from(first)), i32::from(last), 4)
        } else if len == 1 {
            _mm_cvtsi32_si128(i32::from(*p))
        } else {
            _mm_setzero_si128()
        }
    }
}

/// The CRC of the polynomial in `v`, lanes swapped (high 64 bits in lane 0), in the low 16 bits
/// of the result (the bits above are garbage).
#[target_feature(enable = "pclmulqdq,ssse3,sse4.1")]
#[inline]
fn reduce(v: __m128i) -> u32 {
    // Vh·(x⁸⁰ mod P), degree < 79; B is this + Vl·x¹⁶.
    let folded = _mm_clmulepi64_si128(v, in_lane_1(X80_MOD_P), 0x10);
    // Lane 1: B div x¹⁶ = (folded div x¹⁶) + Vl.
    let b = _mm_xor_si128(_mm_slli_si128::<6>(folded), v);
    // Lane 1: q = ⌊(B div x¹⁶)·μ / x⁶⁴⌋ = the high half of (B div x¹⁶)·(μ − x⁶⁴), + B div x¹⁶.
    let q = _mm_xor_si128(_mm_clmulepi64_si128(b, in_lane_1(MU), 0x11), b);
    // B mod P = (B − q·P) mod x¹⁶ = (folded + q·0x1021) mod x¹⁶.
    let qp = _mm_clmulepi64_si128(q, in_lane_1(POLY_LOW), 0x11);
    _mm_cvtsi128_si32(_mm_xor_si128(qp, folded)) as u32
}

/// 16 bytes of `bytes` from `at` (`at + 16` ≤ the length).
#[target_feature(enable = "pclmulqdq,ssse3,sse4.1")]
#[inline]
fn load16(bytes: &[u8], at: usize) -> __m128i {
    assert!(at + 16 <= bytes.len());
    // SAFETY: bytes `at..at + 16` are in `bytes`; `_mm_loadu_si128` needs no alignment.
    unsafe { _mm_loadu_si128(bytes.as_ptr().add(at).cast()) }
}

/// A polynomial of degree < 128 congruent to `acc·x¹²⁸ + block` modulo P (`acc` in natural lane
/// order, `block` as loaded, in memory order).
#[target_feature(enable = "pclmulqdq,ssse3,sse4.1")]
#[inline]
fn fold_block(acc: __m128i, block: __m128i) -> __m128i {
    let reverse = _mm_set_epi64x(0x0001_0203_0405_0607, 0x0809_0a0b_0c0d_0e0f);
    // A·x¹²⁸ ≡ Ah·(x¹⁹² mod P) + Al·(x¹²⁸ mod P), both of degree < 79.
    let high = _mm_clmulepi64_si128(acc, in_lane_1(X192_MOD_P), 0x11);
    let low = _mm_clmulepi64_si128(acc, in_lane_1(X128_MOD_P), 0x10);
    _mm_xor_si128(_mm_xor_si128(high, low), _mm_shuffle_epi8(block, reverse))
}

/// [`reduce`]'s input for `bytes` of more than 16 bytes; or `None` if `stop_at_brace` and they
/// have a `{`.
///
/// The first chunk of 1 to 16 bytes comes from the first 16 bytes, so that whole blocks of 16 end
/// the slice. Up to 32 bytes, that one block is the last 16 bytes, and the two loads are tested
/// for `{` before any folding; longer slices test the first 16 bytes before folding, the others
/// as they are folded.
#[target_feature(enable = "pclmulqdq,ssse3,sse4.1")]
#[inline]
fn fold_long(bytes: &[u8], stop_at_brace: bool) -> Option<__m128i> {
    let n = bytes.len();
    debug_assert!(n > 16);
    let first = load16(bytes, 0);
    let brace = splat(b'{');
    let acc = if n <= 32 {
        let last = load16(bytes, n - 16);
        let braces = _mm_or_si128(_mm_cmpeq_epi8(first, brace), _mm_cmpeq_epi8(last, brace));
        if stop_at_brace && _mm_movemask_epi8(braces) != 0 {
            return None;
        }
        fold_block(_mm_shuffle_epi8(first, mask(&LEAD, n - 16)), last)
    } else {
        // A tag, if any, is usually at the start: test the first 16 bytes before folding.
        let mut braces = _mm_cmpeq_epi8(first, brace);
        if stop_at_brace && _mm_movemask_epi8(braces) != 0 {
            return None;
        }
        let lead = (n - 1) % 16 + 1;
        let mut acc = _mm_shuffle_epi8(first, mask(&LEAD, lead));
        let mut at = lead;
        // `n − at` is a multiple of 16.
        while at + 16 <= n {
            let block = load16(bytes, at);
            if stop_at_brace {
                braces = _mm_or_si128(braces, _mm_cmpeq_epi8(block, brace));
            }
            acc = fold_block(acc, block);
            at += 16;
        }
        if stop_at_brace && _mm_movemask_epi8(braces) != 0 {
            return None;
        }
        acc
    };
    Some(_mm_shuffle_epi32::<0b01_00_11_10>(acc))
}

/// CRC16/XMODEM of `bytes`, as [`super::crc16`].
#[target_feature(enable = "pclmulqdq,ssse3,sse4.1")]
#[inline]
pub(super) fn crc16(bytes: &[u8]) -> u16 {
    let len = bytes.len();
    let v = if len <= 16 {
        _mm_shuffle_epi8(load_short(bytes), mask(&SHORT, len))
    } else {
        match fold_long(bytes, false) {
            Some(v) => v,
            None => unreachable!("a fold that does not look for `{{` always folds"),
        }
    };
    reduce(v) as u16
}

/// The slot of `key`, hashed whole or by its tag `key[open + 1..close]` if `close` is more than
/// one byte after `open`.
#[target_feature(enable = "pclmulqdq,ssse3,sse4.1")]
#[inline]
fn tag_slot(key: &[u8], open: usize, close: Option<usize>) -> u16 {
    let hashed = match close {
        Some(close) if close > open + 1 => &key[open + 1..close],
        _ => key,
    };
    crc16(hashed) & SLOT_MASK
}

/// The slot of `key` from where its `{` and `}` are: bit `i` of `opens` (not 0) or `closes` is
/// set if byte `i` is one.
#[target_feature(enable = "pclmulqdq,ssse3,sse4.1")]
#[inline]
fn slot_by_masks(key: &[u8], opens: u64, closes: u64) -> u16 {
    let open = opens.trailing_zeros() as usize;
    // Bit `k`: byte `open + 1 + k` is a `}` (two shifts: `open + 1` may be 64).
    let after = closes >> open >> 1;
    let close = (after != 0).then(|| open + 1 + after.trailing_zeros() as usize);
    tag_slot(key, open, close)
}

/// The slot of a key of at most 16 bytes with a `{`, `raw` its [`load_short`].
#[target_feature(enable = "pclmulqdq,ssse3,sse4.1")]
#[cold]
#[inline(never)]
fn short_tagged(key: &[u8], raw: __m128i) -> u16 {
    // The key in order, zeros after it: neither `{` nor `}`.
    let key_v = _mm_shuffle_epi8(raw, mask(&CONTIGUOUS, key.len()));
    slot_by_masks(key, find(key_v, b'{').into(), find(key_v, b'}').into())
}

/// The first `byte` in `key[from..]` (as an index in `key`), for keys of at least 16 bytes:
/// 16 bytes per step, the last step a load of the key's last 16 bytes.
#[target_feature(enable = "pclmulqdq,ssse3,sse4.1")]
#[inline]
fn find_from(key: &[u8], mut from: usize, byte: u8) -> Option<usize> {
    let n = key.len();
    debug_assert!(n >= 16);
    while from + 16 <= n {
        let found = find(load16(key, from), byte);
        if found != 0 {
            return Some(from + found.trailing_zeros() as usize);
        }
        from += 16;
    }
    if from >= n {
        return None;
    }
    let found = find(load16(key, n - 16), byte);
    // Bit `k` of the load is byte `n − 16 + k`; drop those before `from` (fewer than 16).
    let found = found >> (from + 16 - n);
    (found != 0).then(|| from + found.trailing_zeros() as usize)
}

/// The slot of a key of more than 16 bytes with a `{`.
#[target_feature(enable = "pclmulqdq,ssse3,sse4.1")]
#[cold]
#[inline(never)]
fn long_tagged(key: &[u8]) -> u16 {
    let n = key.len();
    if n <= 32 {
        // Two loads cover the key; bit `i` of a mask is byte `i` (they overlap and agree).
        let (first, last) = (load16(key, 0), load16(key, n - 16));
        let positions =
            |byte| u64::from(find(first, byte)) | u64::from(find(last, byte)) << (n - 16);
        return slot_by_masks(key, positions(b'{'), positions(b'}'));
    }
    match find_from(key, 0, b'{') {
        Some(open) => tag_slot(key, open, find_from(key, open + 1, b'}')),
        None => crc16(key) & SLOT_MASK,
    }
}

/// Defines [`super::key_slot`] for the target features given: [`key_slot_sse`] and
/// [`key_slot_avx`] are the same code, and the helpers (`#[inline]`, for the SSE features) are
/// inlined into each, VEX-encoded in the second. (A shared body would be compiled once, for the
/// SSE features, and `#[inline(always)]` does not go with `#[target_feature]`.)
macro_rules! key_slot {
    ($name:ident, $features:literal, $doc:literal) => {
        #[doc = $doc]
        #[target_feature(enable = $features)]
        pub(super) fn $name(key: &[u8]) -> u16 {
            /// More than 16 bytes: out of line, so that the short keys' path does not share
            /// (and jump to) its end.
            #[target_feature(enable = $features)]
            #[inline(never)]
            fn long(key: &[u8]) -> u16 {
                let Some(v) = fold_long(key, true) else {
                    return long_tagged(key);
                };
                reduce(v) as u16 & SLOT_MASK
            }

            let len = key.len();
            // Keys of 8 to 16 bytes first, with one comparison.
            let raw = if len.wrapping_sub(8) <= 8 {
                load_8_to_16(key)
            } else if len < 8 {
                load_below_8(key)
            } else {
                return long(key);
            };
            // Every byte of the key is in `raw`, and every other byte of `raw` is zero.
            if find(raw, b'{') != 0 {
                return short_tagged(key, raw);
            }
            reduce(_mm_shuffle_epi8(raw, mask(&SHORT, len))) as u16 & SLOT_MASK
        }
    };
}

key_slot!(
    key_slot_sse,
    "pclmulqdq,ssse3,sse4.1",
    "[`super::key_slot`] with `pclmulqdq`, `ssse3` and `sse4.1`."
);

key_slot!(
    key_slot_avx,
    "pclmulqdq,ssse3,sse4.1,avx",
    "[`super::key_slot`] with `pclmulqdq`, `ssse3`, `sse4.1` and `avx`."
);
