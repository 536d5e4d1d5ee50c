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

/// Writes `<prefix><n>\r\n` at `dst` and returns its length (at most 24).
///
/// # Safety
/// `dst` must be valid for 24 bytes of writes.
unsafe fn put_line(dst: *mut u8, prefix: u8, n: i64) -> usize {
    // One digit (a check's `allowed`, a zero wait, an array's length): one 4-byte store.
    if (0..10).contains(&n) {
        let line = u32::from_le_bytes([prefix, b'0' + n as u8, b'\r', b'\n']);
        // SAFETY: 4 <= 24 bytes from `dst`, which the caller guarantees.
        unsafe { dst.cast::<u32>().write_unaligned(line) };
        return 4;
    }
    // The digits are written straight to their place, right to left, two at a time: no
    // intermediate buffer and no copy. 24 bytes: prefix, sign, 19 digits, CR LF.
    let mut v = n.unsigned_abs();
    let sign = usize::from(n < 0);
    let digits = decimal_digits(v);
    let end = 1 + sign + digits;
    // SAFETY (whole block): `end + 2 <= 24` bytes from `dst`, which the caller guarantees.
    unsafe {
        dst.write(prefix);
        if sign == 1 {
            dst.add(1).write(b'-');
        }
        let mut i = end;
        while v >= 100 {
            let pair = (v % 100) as usize * 2;
            v /= 100;
            i -= 2;
            dst.add(i).write(DIGIT_PAIRS[pair]);
            dst.add(i + 1).write(DIGIT_PAIRS[pair + 1]);
        }
        if v >= 10 {
            let pair = v as usize * 2;
            dst.add(i - 2).write(DIGIT_PAIRS[pair]);
            dst.add(i - 1).write(DIGIT_PAIRS[pair + 1]);
        } else {
            dst.add(i - 1).write(b'0' + v as u8);
        }
        dst.add(end).write(b'\r');
        dst.add(end + 1).write(b'\n');
    }
    end + 2
}

/// How many decimal digits `v` has (1 for 0): log2 from one instruction, then one compare.
fn decimal_digits(v: u64) -> usize {
    const POW10: [u64; 20] = {
        let mut p = [1u64; 20];
        let mut i = 1;
        while i < 20 {
            p[i] = p[i - 1] * 10;
            i += 1;
        }
        p
    };
    let log2 = 63 - (v | 1).leading_zeros() as usize;
    // floor(log10 v) is t = ⌊log2 · log10(2)⌋ (1233/4096 ≈ log10 2) or one more.
    let t = (log2 * 1233) >> 12;
    t + 1 + usize::from(v >= POW10[t + 1])
}

/// "00" "01" … "99", for writing two digits at a time.
static DIGIT_PAIRS: [u8; 200] = {
    let mut table = [0u8; 200];
    let mut i = 0;
    while i < 100 {
        table[2 * i] = b'0' + (i / 10) as u8;
        table[2 * i + 1] = b'0' + (i % 10) as u8;
        i += 1;
    }
    table
};

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
    fn decimal_digits_counts_every_power_boundary() {
        assert_eq!(decimal_digits(0), 1);
        assert_eq!(decimal_digits(u64::MAX), 20);
        let mut p: u64 = 1;
        for d in 1..20 {
            assert_eq!(decimal_digits(p), d, "{p}");
            assert_eq!(decimal_digits(p * 10 - 1), d, "{}", p * 10 - 1);
            p *= 10;
        }
    }
}
