//! Reply encoders: each function appends one RESP2 or RESP3 value to the output buffer.
//!
//! # Format
//!
//! | function | RESP2 | RESP3 |
//! | --- | --- | --- |
//! | [`simple`] | `+OK\r\n` | same |
//! | [`error`] | `-ERR msg\r\n` | same |
//! | [`integer`] | `:42\r\n` | same |
//! | [`bulk`] | `$3\r\nabc\r\n` | same |
//! | [`null`] | `$-1\r\n` | `_\r\n` |
//! | [`null_array`] | `*-1\r\n` | `_\r\n` |
//! | [`array()`] | `*2\r\n` + 2 values | same |
//! | [`push`] | `*3\r\n` + 3 values | `>3\r\n` + 3 values |
//! | [`map`] | `*4\r\n` + 4 values | `%2\r\n` + 2 key/value pairs |
//! | [`set`] | `*2\r\n` + 2 values | `~2\r\n` + 2 values |
//! | [`double`] | `$3\r\n1.5\r\n` | `,1.5\r\n` |
//! | [`boolean`] | `:1\r\n` / `:0\r\n` | `#t\r\n` / `#f\r\n` |
//! | [`verbatim`] | `$5\r\nhello\r\n` | `=9\r\ntxt:hello\r\n` |
//! | [`int_array`] | `*2\r\n:1\r\n:-1\r\n` | same |
//! | [`check`] | `*5\r\n` + 5 integers (`RL.CHECK`) | same |
//!
//! Aggregates ([`array()`], [`map`], [`set`]) write only their header; the caller writes the
//! elements right after, which keeps every reply a sequence of flat appends with no builder.
//!
//! # Invariants
//!
//! - Nothing allocates but the output buffer's own growth: numbers are formatted on the stack.
//! - A simple string or an error never carries a bare CR or LF: they become spaces, as Redis's
//!   `addReplyErrorFormat` does, because one would end the line early and desynchronise the client.
//! - Doubles are formatted as Redis 7.2+ does (`d2string`): `nan`, `inf`, `-inf`, `0`, `-0`,
//!   integral values in ±2^62 as integers, everything else as the shortest text that reads back
//!   to the same double, with `fpconv`'s choice between plain and `e` notation.

use std::fmt::Write as _;

use bytes::{BufMut, BytesMut};

/// The protocol a connection speaks, chosen with `HELLO 2|3` (RESP2 until then).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Proto {
    /// RESP2: the default of every connection.
    #[default]
    Resp2,
    /// RESP3: after `HELLO 3`.
    Resp3,
}

/// `<prefix><n>\r\n`: integers and every length header, written by the same digit writer as
/// [`int_array`], straight into the buffer.
fn header(out: &mut BytesMut, prefix: u8, n: i64) {
    out.reserve(24);
    let dst = out.spare_capacity_mut().as_mut_ptr().cast::<u8>();
    // SAFETY: 24 bytes of spare capacity were just reserved and `put_line` writes at most 24;
    // `set_len` exposes exactly the bytes it wrote.
    unsafe {
        let len = put_line(dst, prefix, n);
        out.set_len(out.len() + len);
    }
}

/// A length as a header number (lengths never reach `i64::MAX`; saturate rather than wrap).
fn count(len: usize) -> i64 {
    i64::try_from(len).unwrap_or(i64::MAX)
}

/// `<prefix><text>\r\n` with CR and LF in `text` turned into spaces.
fn one_line(out: &mut BytesMut, prefix: u8, text: &[u8]) {
    out.reserve(text.len() + 3);
    out.put_u8(prefix);
    if text.iter().any(|&b| b == b'\r' || b == b'\n') {
        out.extend(
            text.iter()
                .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
        );
    } else {
        out.extend_from_slice(text);
    }
    out.extend_from_slice(b"\r\n");
}

/// A push header (pub/sub messages): `*len` in RESP2, `>len` in RESP3.
pub fn push(out: &mut BytesMut, p: Proto, len: usize) {
    let prefix = if p == Proto::Resp3 { b'>' } else { b'*' };
    header(out, prefix, count(len));
}

/// A simple string: `+s\r\n`.
pub fn simple(out: &mut BytesMut, s: &str) {
    one_line(out, b'+', s.as_bytes());
}

/// An error: `-msg\r\n`. `msg` carries its own code (`ERR ...`, `WRONGTYPE ...`).
pub fn error(out: &mut BytesMut, msg: &str) {
    one_line(out, b'-', msg.as_bytes());
}

/// An integer: `:n\r\n`.
pub fn integer(out: &mut BytesMut, n: i64) {
    header(out, b':', n);
}

/// A bulk string: `$len\r\nbytes\r\n`. Binary-safe.
pub fn bulk(out: &mut BytesMut, b: &[u8]) {
    header(out, b'$', count(b.len()));
    out.reserve(b.len() + 2);
    out.extend_from_slice(b);
    out.extend_from_slice(b"\r\n");
}

/// A missing value (`GET` of an absent key): `$-1\r\n`, or `_\r\n` in RESP3.
pub fn null(out: &mut BytesMut, p: Proto) {
    out.extend_from_slice(match p {
        Proto::Resp2 => b"$-1\r\n",
        Proto::Resp3 => b"_\r\n",
    });
}

/// A missing aggregate: `*-1\r\n`, or `_\r\n` in RESP3.
pub fn null_array(out: &mut BytesMut, p: Proto) {
    out.extend_from_slice(match p {
        Proto::Resp2 => b"*-1\r\n",
        Proto::Resp3 => b"_\r\n",
    });
}

/// An array header, `*len\r\n`; the caller then writes `len` values.
pub fn array(out: &mut BytesMut, len: usize) {
    header(out, b'*', count(len));
}

/// A map header, `%pairs\r\n`, or in RESP2 the flat array `*2·pairs\r\n`; the caller then writes
/// `pairs` keys and values, alternating.
pub fn map(out: &mut BytesMut, p: Proto, pairs: usize) {
    match p {
        Proto::Resp2 => header(out, b'*', count(pairs.saturating_mul(2))),
        Proto::Resp3 => header(out, b'%', count(pairs)),
    }
}

/// A set header, `~len\r\n`, or in RESP2 `*len\r\n`; the caller then writes `len` values.
pub fn set(out: &mut BytesMut, p: Proto, len: usize) {
    match p {
        Proto::Resp2 => header(out, b'*', count(len)),
        Proto::Resp3 => header(out, b'~', count(len)),
    }
}

/// A double: `,v\r\n` in RESP3, a bulk string of the same text in RESP2 (as Redis replies to
/// `INCRBYFLOAT` or `ZSCORE`). See the module docs for the text.
pub fn double(out: &mut BytesMut, p: Proto, v: f64) {
    let mut text = TextBuf::new();
    format_double(v, &mut text);
    match p {
        Proto::Resp2 => bulk(out, text.as_bytes()),
        Proto::Resp3 => {
            out.reserve(text.len + 3);
            out.put_u8(b',');
            out.extend_from_slice(text.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
}

/// A boolean: `#t\r\n`/`#f\r\n`, or in RESP2 the integers `:1\r\n`/`:0\r\n`.
pub fn boolean(out: &mut BytesMut, p: Proto, v: bool) {
    out.extend_from_slice(match (p, v) {
        (Proto::Resp2, true) => b":1\r\n",
        (Proto::Resp2, false) => b":0\r\n",
        (Proto::Resp3, true) => b"#t\r\n",
        (Proto::Resp3, false) => b"#f\r\n",
    });
}

/// A verbatim string (`INFO`, `CLIENT LIST`): `=len\r\nfmt:text\r\n` in RESP3, where `format` is
/// the three-letter type (`txt`, `mkd`); a plain bulk string of `text` in RESP2.
///
/// A `format` that is not three bytes long cannot be encoded: the text goes out as a bulk string
/// then (and debug builds stop, since it is a bug in the caller).
pub fn verbatim(out: &mut BytesMut, p: Proto, format: &str, text: &[u8]) {
    debug_assert_eq!(format.len(), 3, "a verbatim format is three bytes");
    if p == Proto::Resp2 || format.len() != 3 {
        bulk(out, text);
        return;
    }
    header(out, b'=', count(text.len() + 4));
    out.reserve(text.len() + 6);
    out.extend_from_slice(format.as_bytes());
    out.put_u8(b':');
    out.extend_from_slice(text);
    out.extend_from_slice(b"\r\n");
}

/// An array of integers, `*n\r\n` then `:v\r\n` for each (the shape of `RL.CHECK`'s reply).
pub fn int_array(out: &mut BytesMut, values: &[i64]) {
    // One reservation, then every line is written straight into the buffer's spare capacity:
    // no staging buffer, one capacity check. 24 bytes hold any `:<i64>\r\n` line.
    let room = 24 * (values.len() + 1);
    out.reserve(room);
    let spare = out.spare_capacity_mut();
    assert!(spare.len() >= room);
    let dst = spare.as_mut_ptr().cast::<u8>();
    // SAFETY: each `put_line` writes at most 24 bytes, and `room` bytes of spare capacity are
    // there (asserted above), so every write stays inside it; exactly the first `len` bytes are
    // initialised when `set_len` exposes them.
    unsafe {
        let mut len = put_line(dst, b'*', values.len() as i64);
        for &v in values {
            len += put_line(dst.add(len), b':', v);
        }
        out.set_len(out.len() + len);
    }
}

/// An integer line, `:<n>\r\n`, encoded ahead of time, for a number many replies repeat (every
/// check of a rule replies the rule's limit): [`check`] copies it instead of formatting it again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IntLine {
    value: i64,
    len: u8,
    text: [u8; 24],
}

impl IntLine {
    /// The line of 0 (a placeholder that needs no code to make).
    pub const ZERO: IntLine = IntLine {
        value: 0,
        len: 4,
        text: *b":0\r\n\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0",
    };

    /// The line of `value`.
    pub fn new(value: i64) -> IntLine {
        let mut text = [0u8; 24];
        // SAFETY: `text` is the 24 bytes `put_line` may write.
        let len = unsafe { put_line(text.as_mut_ptr(), b':', value) };
        IntLine {
            value,
            len: len as u8,
            text,
        }
    }

    /// The number this line says.
    pub fn value(&self) -> i64 {
        self.value
    }

    /// The line's bytes, `:<n>\r\n`.
    pub fn as_bytes(&self) -> &[u8] {
        &self.text[..usize::from(self.len)]
    }
}

/// `RL.CHECK`'s reply, `*5\r\n:allowed\r\n:limit\r\n:remaining\r\n:retry_after_ms\r\n:reset_after_ms\r\n`:
/// byte for byte [`int_array`] of the five, written with less work. The header and `allowed`
/// are one 8-byte constant, `limit` is copied from its line (which must say the decision's
/// limit), and the usual `-1` of `retry_after_ms` is a constant too (see `put_line`).
pub fn check(
    out: &mut BytesMut,
    allowed: bool,
    limit: &IntLine,
    remaining: i64,
    retry_after_ms: i64,
    reset_after_ms: i64,
) {
    // The head, the limit's whole 24-byte array, then three lines of at most 24 bytes.
    const ROOM: usize = 8 + 24 * 4;
    out.reserve(ROOM);
    let spare = out.spare_capacity_mut();
    assert!(spare.len() >= ROOM);
    let dst = spare.as_mut_ptr().cast::<u8>();
    let head = if allowed {
        *b"*5\r\n:1\r\n"
    } else {
        *b"*5\r\n:0\r\n"
    };
    // SAFETY: every store stays inside the `ROOM` bytes of spare capacity asserted above (8 for
    // the head, 24 for the limit's array, at most 24 per `put_line`); exactly the first `len`
    // bytes are initialised when `set_len` exposes them.
    unsafe {
        dst.cast::<[u8; 8]>().write_unaligned(head);
        dst.add(8).cast::<[u8; 24]>().write_unaligned(limit.text);
        let mut len = 8 + usize::from(limit.len);
        len += put_line(dst.add(len), b':', remaining);
        len += put_line(dst.add(len), b':', retry_after_ms);
        len += put_line(dst.add(len), b':', reset_after_ms);
        out.set_len(out.len() + len);
    }
}

/// Writes `<prefix><n>\r\n` at `dst` and returns its length (at most 24).
///
/// # Safety
/// `dst` must be valid for 24 bytes of writes.
#[inline(always)]
unsafe fn put_line(dst: *mut u8, prefix: u8, n: i64) -> usize {
    // One digit (a check's `allowed`, a zero wait, an array's length): one 4-byte store.
    if (0..10).contains(&n) {
        let line = [prefix, b'0' + n as u8, b'\r', b'\n'];
        // SAFETY: 4 <= 24 bytes from `dst`, which the caller guarantees.
        unsafe { dst.cast::<[u8; 4]>().write_unaligned(line) };
        return 4;
    }
    // -1: the `retry_after_ms` of every allowed check.
    if n == -1 {
        let line = [prefix, b'-', b'1', b'\r', b'\n', 0, 0, 0];
        // SAFETY: 8 <= 24 bytes from `dst`, which the caller guarantees.
        unsafe { dst.cast::<[u8; 8]>().write_unaligned(line) };
        return 5;
    }
    let sign = usize::from(n < 0);
    // SAFETY: for the whole block: the prefix, a sign, at most 20 digits (`put_digits` stores
    // up to 22 bytes from its start, 2 + 22 <= 24) and CR LF stay within the 24 bytes from
    // `dst`.
    unsafe {
        dst.write(prefix);
        // Overwritten by the first digit when `n` is not negative: no branch.
        dst.add(1).write(b'-');
        let end = 1 + sign + put_digits(dst.add(1 + sign), n.unsigned_abs());
        dst.add(end).cast::<[u8; 2]>().write_unaligned(*b"\r\n");
        end + 2
    }
}

const E8: u64 = 100_000_000;

/// Writes the decimal digits of `v` at `dst` and returns how many (1 to 20). Each group of up to
/// eight digits is one 8-byte store (see [`eight_digits`]), so the stores reach past the
/// digits: up to 22 bytes from `dst` are written, and only the first (returned) count are
/// digits; the caller writes what follows over the rest.
///
/// # Safety
/// `dst` must be valid for 22 bytes of writes.
#[inline(always)]
unsafe fn put_digits(dst: *mut u8, v: u64) -> usize {
    // SAFETY: for the whole body: the highest store starts at most 4 + 8 = 12 bytes from `dst`
    // (in the 17-to-20-digit case) and is 8 bytes long: 20 <= 22.
    unsafe {
        if v < E8 {
            return put_leading(dst, v as u32);
        }
        if v < E8 * E8 {
            let lead = put_leading(dst, (v / E8) as u32);
            store8(dst.add(lead), eight_digits((v % E8) as u32) | ASCII_ZEROS);
            return lead + 8;
        }
        let rest = v % (E8 * E8);
        let lead = put_leading(dst, (v / (E8 * E8)) as u32);
        store8(
            dst.add(lead),
            eight_digits((rest / E8) as u32) | ASCII_ZEROS,
        );
        store8(
            dst.add(lead + 8),
            eight_digits((rest % E8) as u32) | ASCII_ZEROS,
        );
        lead + 16
    }
}

/// Writes `v` (below 10^8) without leading zeros, as one 8-byte store; returns the digit count.
///
/// # Safety
/// `dst` must be valid for 8 bytes of writes.
#[inline(always)]
unsafe fn put_leading(dst: *mut u8, v: u32) -> usize {
    let digits = eight_digits(v);
    // The digits are most significant first, from the lowest byte: the leading zeros are the
    // low zero bytes (before the ASCII offset is added), and shifting them out moves the
    // significant digits to the front. Zero itself keeps one digit.
    let zeros = ((digits.trailing_zeros() / 8) as usize).min(7);
    // SAFETY: the caller guarantees 8 bytes.
    unsafe { store8(dst, (digits | ASCII_ZEROS) >> (8 * zeros)) };
    8 - zeros
}

/// # Safety
/// `dst` must be valid for 8 bytes of writes.
#[inline(always)]
unsafe fn store8(dst: *mut u8, text: u64) {
    // SAFETY: the caller guarantees 8 bytes; the store is unaligned.
    unsafe { dst.cast::<[u8; 8]>().write_unaligned(text.to_le_bytes()) };
}

/// The eight decimal digits of `v` (below 10^8, leading zeros kept), one per byte of a `u64`, the
/// most significant in the lowest byte (the first in memory, stored little-endian); add
/// [`ASCII_ZEROS`] for their text.
///
/// The digits are split in parallel, SWAR style: the two 4-digit halves go to the two 32-bit
/// lanes, each lane splits into two 2-digit 16-bit lanes, each of those into two 8-bit digits.
/// A division by 100 is `x·5243 >> 19` (exact for x < 43,699) and by 10 is `x·103 >> 10`
/// (exact for x < 179); no product reaches the next lane, so one multiplication serves every
/// lane at once.
fn eight_digits(v: u32) -> u64 {
    debug_assert!(u64::from(v) < E8);
    let halves = u64::from(v / 10_000) | (u64::from(v % 10_000) << 32);
    let hundreds = ((halves * 5243) >> 19) & 0x0000_007f_0000_007f;
    let pairs = hundreds | ((halves - hundreds * 100) << 16);
    let tens = ((pairs * 103) >> 10) & 0x000f_000f_000f_000f;
    tens | ((pairs - tens * 10) << 8)
}

/// `'0'` in each byte: added to eight digit values, their ASCII text.
const ASCII_ZEROS: u64 = 0x3030_3030_3030_3030;

/// A small stack buffer for formatting one number.
struct TextBuf {
    bytes: [u8; 48],
    len: usize,
}

impl TextBuf {
    fn new() -> Self {
        TextBuf {
            bytes: [0; 48],
            len: 0,
        }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    fn push(&mut self, b: u8) {
        self.bytes[self.len] = b;
        self.len += 1;
    }

    fn extend(&mut self, bytes: &[u8]) {
        self.bytes[self.len..self.len + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
    }
}

impl std::fmt::Write for TextBuf {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        if self.len + s.len() > self.bytes.len() {
            return Err(std::fmt::Error);
        }
        self.extend(s.as_bytes());
        Ok(())
    }
}

/// Redis's `d2string` (7.2+). Its longest text is 25 bytes (a sign and 17 digits with up to 7
/// trailing zeros, or 17 digits in `e` notation), well within `TextBuf`.
fn format_double(v: f64, text: &mut TextBuf) {
    if v.is_nan() {
        text.extend(b"nan");
    } else if v.is_infinite() {
        text.extend(if v < 0.0 { b"-inf" } else { b"inf" });
    } else if v == 0.0 {
        text.extend(if v.is_sign_negative() { b"-0" } else { b"0" });
    } else if v.fract() == 0.0 && v.abs() <= (i64::MAX / 2) as f64 {
        // Redis's `double2ll` fast path: an integral value prints as an integer.
        let mut digits = itoa::Buffer::new();
        text.extend(digits.format(v as i64).as_bytes());
    } else {
        fpconv_dtoa(v, text);
    }
}

/// `fpconv_dtoa`'s layout of the shortest round-trip digits of a finite, non-zero `v`.
///
/// Rust's `{:e}` yields those digits (`d.ddde±x`); `fpconv` (Grisu2) yields the same shortest
/// digits for all but rare doubles, where its text is longer but reads back to the same value.
fn fpconv_dtoa(v: f64, text: &mut TextBuf) {
    let mut sci = TextBuf::new();
    // 17 digits, a sign, a point and `e-324` fit in 48 bytes: this cannot fail.
    let _ = write!(sci, "{:e}", v.abs());
    let sci = sci.as_bytes();
    let e_at = sci.iter().position(|&b| b == b'e').unwrap_or(sci.len());
    let mut digits = [0u8; 24];
    let mut ndigits = 0;
    for &b in &sci[..e_at] {
        if b.is_ascii_digit() && ndigits < digits.len() {
            digits[ndigits] = b;
            ndigits += 1;
        }
    }
    let digits = &digits[..ndigits];
    let exponent: i32 = std::str::from_utf8(sci.get(e_at + 1..).unwrap_or_default())
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let nd = ndigits as i32;
    // `v = digits × 10^k`, in fpconv's terms.
    let k = exponent - (nd - 1);

    if v < 0.0 {
        text.push(b'-');
    }
    let exp = (k + nd - 1).abs();
    if k >= 0 && exp < nd + 7 {
        // Plain integer.
        text.extend(digits);
        for _ in 0..k {
            text.push(b'0');
        }
    } else if k < 0 && (k > -7 || exp < 4) {
        // Plain decimal.
        let offset = nd - k.abs();
        if offset <= 0 {
            text.extend(b"0.");
            for _ in 0..-offset {
                text.push(b'0');
            }
            text.extend(digits);
        } else {
            let offset = offset as usize;
            text.extend(&digits[..offset]);
            text.push(b'.');
            text.extend(&digits[offset..]);
        }
    } else {
        // Scientific: `d.ddde±x`, the exponent without leading zeros.
        text.push(digits[0]);
        if ndigits > 1 {
            text.push(b'.');
            text.extend(&digits[1..]);
        }
        text.push(b'e');
        text.push(if exponent < 0 { b'-' } else { b'+' });
        let mut exp_digits = itoa::Buffer::new();
        text.extend(exp_digits.format(exponent.unsigned_abs()).as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(f: impl FnOnce(&mut BytesMut)) -> Vec<u8> {
        let mut out = BytesMut::new();
        f(&mut out);
        out.to_vec()
    }

    fn double_text(v: f64) -> String {
        let mut text = TextBuf::new();
        format_double(v, &mut text);
        String::from_utf8(text.as_bytes().to_vec()).unwrap()
    }

    #[test]
    fn scalars() {
        assert_eq!(encoded(|o| simple(o, "OK")), b"+OK\r\n");
        assert_eq!(
            encoded(|o| error(o, "ERR bad\r\nthing\n")),
            b"-ERR bad  thing \r\n"
        );
        assert_eq!(encoded(|o| simple(o, "a\rb")), b"+a b\r\n");
        assert_eq!(encoded(|o| integer(o, -42)), b":-42\r\n");
        assert_eq!(
            encoded(|o| integer(o, i64::MIN)),
            b":-9223372036854775808\r\n"
        );
        assert_eq!(encoded(|o| bulk(o, b"a\r\nb")), b"$4\r\na\r\nb\r\n");
        assert_eq!(encoded(|o| bulk(o, b"")), b"$0\r\n\r\n");
    }

    #[test]
    fn resp2_and_resp3_shapes() {
        use Proto::*;
        assert_eq!(encoded(|o| null(o, Resp2)), b"$-1\r\n");
        assert_eq!(encoded(|o| null(o, Resp3)), b"_\r\n");
        assert_eq!(encoded(|o| null_array(o, Resp2)), b"*-1\r\n");
        assert_eq!(encoded(|o| null_array(o, Resp3)), b"_\r\n");
        assert_eq!(encoded(|o| array(o, 5)), b"*5\r\n");
        assert_eq!(encoded(|o| map(o, Resp2, 3)), b"*6\r\n");
        assert_eq!(encoded(|o| map(o, Resp3, 3)), b"%3\r\n");
        assert_eq!(encoded(|o| set(o, Resp2, 2)), b"*2\r\n");
        assert_eq!(encoded(|o| set(o, Resp3, 2)), b"~2\r\n");
        assert_eq!(encoded(|o| boolean(o, Resp2, true)), b":1\r\n");
        assert_eq!(encoded(|o| boolean(o, Resp3, false)), b"#f\r\n");
        assert_eq!(encoded(|o| double(o, Resp3, 1.5)), b",1.5\r\n");
        assert_eq!(encoded(|o| double(o, Resp2, 1.5)), b"$3\r\n1.5\r\n");
        assert_eq!(
            encoded(|o| double(o, Resp3, f64::NEG_INFINITY)),
            b",-inf\r\n"
        );
        assert_eq!(
            encoded(|o| verbatim(o, Resp3, "txt", b"hi")),
            b"=6\r\ntxt:hi\r\n"
        );
        assert_eq!(
            encoded(|o| verbatim(o, Resp2, "txt", b"hi")),
            b"$2\r\nhi\r\n"
        );
        assert_eq!(
            encoded(|o| int_array(o, &[1, 10, 9, -1, 6000])),
            b"*5\r\n:1\r\n:10\r\n:9\r\n:-1\r\n:6000\r\n"
        );
    }

    #[test]
    fn doubles_as_redis_prints_them() {
        let cases: [(f64, &str); 23] = [
            (1.5, "1.5"),
            (-1.5, "-1.5"),
            (0.1, "0.1"),
            (3.0, "3"),
            (-0.0, "-0"),
            (0.0, "0"),
            (f64::NAN, "nan"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            (1e-6, "0.000001"),
            (1.5e-6, "1.5e-6"),
            (1e-7, "1e-7"),
            (123.456, "123.456"),
            (1e19, "1e+19"),
            (1.5e300, "1.5e+300"),
            (4.611686018427388e18, "4611686018427387904"),
            (9.223372036854776e18, "9223372036854776000"),
            (1e22, "1e+22"),
            (1.2345678e22, "1.2345678e+22"),
            (0.30000000000000004, "0.30000000000000004"),
            (f64::MAX, "1.7976931348623157e+308"),
            (5e-324, "5e-324"),
            (12345678.9, "12345678.9"),
        ];
        for (v, want) in cases {
            assert_eq!(double_text(v), want, "{v:?}");
        }
    }

    #[test]
    fn int_array_handles_extremes_and_long_arrays() {
        let extremes = [i64::MIN, i64::MAX, 0, -1, 1];
        let expected: String = format!(
            "*5\r\n:{}\r\n:{}\r\n:0\r\n:-1\r\n:1\r\n",
            i64::MIN,
            i64::MAX
        );
        assert_eq!(encoded(|o| int_array(o, &extremes)), expected.as_bytes());
        let long: Vec<i64> = (0..20).collect();
        let mut expected = String::from("*20\r\n");
        for v in &long {
            expected += &format!(":{v}\r\n");
        }
        assert_eq!(encoded(|o| int_array(o, &long)), expected.as_bytes());
        let full = [i64::MIN; 8];
        let out = encoded(|o| int_array(o, &full));
        assert_eq!(out.len(), 4 + 8 * (1 + 20 + 2));
    }

    #[test]
    fn int_array_digits_match_the_standard_formatter() {
        let mut values = vec![0i64, i64::MIN, i64::MAX, i64::MIN + 1];
        let mut p: i64 = 1;
        for _ in 0..19 {
            for v in [p - 1, p, p + 1, -p + 1, -p, -p - 1] {
                values.push(v);
            }
            p = p.saturating_mul(10);
        }
        for chunk in values.chunks(7) {
            let mut expected = format!("*{}\r\n", chunk.len());
            for v in chunk {
                expected += &format!(":{v}\r\n");
            }
            assert_eq!(encoded(|o| int_array(o, chunk)), expected.as_bytes());
        }
    }

    #[test]
    fn check_is_the_int_array_of_its_five() {
        let values = [
            0,
            1,
            9,
            10,
            99_999,
            -1,
            -2,
            -10,
            1_000_000,
            i64::MAX,
            i64::MIN,
        ];
        for &limit in &values {
            let line = IntLine::new(limit);
            assert_eq!(line.value(), limit);
            if limit == 0 {
                assert_eq!(line, IntLine::ZERO);
            }
            assert_eq!(line.as_bytes(), format!(":{limit}\r\n").as_bytes());
            for (i, &remaining) in values.iter().enumerate() {
                let retry = values[(i + 3) % values.len()];
                let reset = values[(i + 7) % values.len()];
                for allowed in [true, false] {
                    let want = encoded(|o| {
                        int_array(o, &[i64::from(allowed), limit, remaining, retry, reset])
                    });
                    let got = encoded(|o| check(o, allowed, &line, remaining, retry, reset));
                    assert_eq!(got, want);
                }
            }
        }
    }

    #[test]
    fn every_digit_group_matches_the_standard_formatter() {
        // Every value up to a million, then values spread over every length and both signs:
        // each way `put_digits` splits a number (one group, two, three) and every shift.
        let mut spread: Vec<i64> = Vec::new();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for i in 0..200_000u32 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let v = (x >> (i % 64)) as i64;
            spread.extend([v, v.wrapping_neg()]);
        }
        for v in (0..1_000_000).chain(spread) {
            assert_eq!(
                encoded(|o| integer(o, v)),
                format!(":{v}\r\n").as_bytes(),
                "{v}"
            );
        }
    }
}
