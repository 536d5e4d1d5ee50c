//! Numbers as Redis 7.0 reads and writes them: scores and increments parsed as `strtod` takes
//! them (no spaces, no NaN), doubles replied in `%.17g` (`addReplyDouble`), and the sums of
//! INCRBYFLOAT/HINCRBYFLOAT in x87 80-bit `long double`, as Redis computes them on x86-64:
//! read as `string2ld` reads (`strtold`), added with the FPU's round-to-nearest-even, and
//! written in the human form of `ld2string` (`%.17Lf`, trailing zeros cut).
//!
//! The sums must be bit-exact, not close: Redis stores the text, reads it back at the next
//! increment and rounds again, so `1000 + 0.1` is `1000.09999999999999998` and stays so. The
//! arithmetic is `rustc_apfloat`'s (LLVM's APFloat, correctly rounded parsing and addition);
//! the `%.17Lf` text is computed here from the bits, exactly, as glibc's `printf` rounds it.

use bytes::{BufMut, BytesMut};
use rustc_apfloat::ieee::X87DoubleExtended;
use rustc_apfloat::{Float, Round, Status};
use sluice_resp::reply::{self, Proto};

/// A double as Redis's `getDoubleFromObject` takes it: decimal or exponent notation, `inf`,
/// `+inf`, `-inf` (any case, and `infinity`); no spaces, no NaN.
pub fn parse(b: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(b).ok()?;
    if s.is_empty() || s.bytes().any(|c| c.is_ascii_whitespace()) {
        return None;
    }
    let v: f64 = s.parse().ok()?;
    (!v.is_nan()).then_some(v)
}

/// A range bound's number as `zslParseRange` reads it (`strtod`, no NaN): unlike a score
/// argument it may start with spaces, and nothing at all is 0 (`(` alone is "above 0").
pub fn parse_range(b: &[u8]) -> Option<f64> {
    let start = b
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(b.len());
    if start == b.len() {
        return (start == 0).then_some(0.0);
    }
    parse(&b[start..])
}

/// `%.17g`: 17 significant digits, trailing zeros cut, in exponent form below 1e-4 or from
/// 1e17.
pub fn text(v: f64) -> String {
    if v.is_infinite() {
        return if v > 0.0 { "inf" } else { "-inf" }.into();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0" } else { "0" }.into();
    }
    let sci = format!("{v:.16e}");
    let (mantissa, exp) = sci.split_once('e').expect("exponent form");
    let exp: i32 = exp.parse().expect("an exponent");
    if !(-4..17).contains(&exp) {
        let mantissa = trim(mantissa);
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    } else {
        let decimals = (16 - exp).max(0) as usize;
        trim(&format!("{v:.decimals$}")).to_owned()
    }
}

/// Redis's `MAX_LONG_DOUBLE_CHARS`: `string2ld` copies the text into a buffer this long and
/// refuses any that does not fit with its terminating NUL.
const MAX_LONG_DOUBLE_CHARS: usize = 5 * 1024;

/// Decimals in `%.17Lf`.
const DECIMALS: usize = 17;

/// An x87 80-bit `long double`: the type Redis 7.0 sums INCRBYFLOAT and HINCRBYFLOAT in.
#[derive(Clone, Copy, Debug)]
pub struct LongDouble(X87DoubleExtended);

impl LongDouble {
    pub const ZERO: LongDouble = LongDouble(X87DoubleExtended::ZERO);

    /// A number as `string2ld` reads one (`strtold` over the whole string, in the C locale:
    /// Redis sets only `LC_COLLATE`): an optional sign, then decimal digits with at most one
    /// point and an optional `e` exponent, or `0x` hexadecimal digits with an optional `p`
    /// exponent, or `inf` / `infinity` in any case. Refused, as Redis refuses them: nothing,
    /// a leading or trailing space, a NUL, a NaN, text of 5 KiB or more, and a number too
    /// large for a `long double` or so small it rounds to zero (`strtold`'s `ERANGE`); a
    /// denormal is kept.
    pub fn parse(b: &[u8]) -> Option<LongDouble> {
        if b.is_empty() || b.len() >= MAX_LONG_DOUBLE_CHARS {
            return None;
        }
        let (negative, body) = match b[0] {
            b'-' => (true, &b[1..]),
            b'+' => (false, &b[1..]),
            _ => (false, b),
        };
        let magnitude =
            if body.eq_ignore_ascii_case(b"inf") || body.eq_ignore_ascii_case(b"infinity") {
                X87DoubleExtended::INFINITY
            } else {
                finite(body)?
            };
        Some(LongDouble(if negative { -magnitude } else { magnitude }))
    }

    /// `self + by` in round-to-nearest-even, or `None` for a NaN or an infinite sum (Redis's
    /// "increment would produce NaN or Infinity").
    pub fn add(self, by: LongDouble) -> Option<LongDouble> {
        let sum = self.0.add_r(by.0, Round::NearestTiesToEven).value;
        sum.is_finite().then_some(LongDouble(sum))
    }

    pub fn is_finite(self) -> bool {
        self.0.is_finite()
    }

    /// `ld2string(..., LD_STR_HUMAN)`: `%.17Lf`, then the trailing zeros after the point cut,
    /// the point too if nothing is left after it, and `-0` written `0`. Every digit of a huge
    /// value is written (at most 4,951 bytes: Redis's 5 KiB buffer always holds them).
    pub fn human(self) -> String {
        if self.0.is_infinite() {
            return if self.0.is_negative() { "-inf" } else { "inf" }.into();
        }
        let fixed = fixed17(self.0.to_bits());
        match trim(&fixed) {
            "-0" => "0".into(),
            s => s.into(),
        }
    }
}

/// The magnitude of a finite number's text (after its sign), if `strtold` would take all of it
/// and neither overflow nor underflow to zero.
fn finite(body: &[u8]) -> Option<X87DoubleExtended> {
    let text = match body {
        [b'0', b'x' | b'X', hex @ ..] => {
            let (digits, exp) = split_exponent(hex, b'p');
            if !mantissa(digits, u8::is_ascii_hexdigit) {
                return None;
            }
            // Hexadecimal without a binary exponent is exact as written; APFloat wants one.
            let exp = match exp {
                Some(e) if exponent(e) => e,
                Some(_) => return None,
                None => b"0",
            };
            format!("0x{}p{}", ascii(digits)?, ascii(exp)?)
        }
        _ => {
            let (digits, exp) = split_exponent(body, b'e');
            if !mantissa(digits, u8::is_ascii_digit) || exp.is_some_and(|e| !exponent(e)) {
                return None;
            }
            ascii(body)?.to_owned()
        }
    };
    let parsed = X87DoubleExtended::from_str_r(&text, Round::NearestTiesToEven).ok()?;
    let range_error = parsed.value.is_infinite()
        || (parsed.value.is_zero() && parsed.status.contains(Status::INEXACT));
    (!range_error).then_some(parsed.value)
}

/// Splits a number's text at its exponent letter (either case).
fn split_exponent(b: &[u8], letter: u8) -> (&[u8], Option<&[u8]>) {
    match b.iter().position(|c| c.eq_ignore_ascii_case(&letter)) {
        Some(i) => (&b[..i], Some(&b[i + 1..])),
        None => (b, None),
    }
}

/// Digits with at most one point among them, at least one digit.
fn mantissa(b: &[u8], digit: fn(&u8) -> bool) -> bool {
    let points = b.iter().filter(|&&c| c == b'.').count();
    points <= 1 && b.len() > points && b.iter().all(|c| *c == b'.' || digit(c))
}

/// An exponent: an optional sign, then at least one decimal digit.
fn exponent(b: &[u8]) -> bool {
    let digits = b
        .strip_prefix(b"+")
        .or_else(|| b.strip_prefix(b"-"))
        .unwrap_or(b);
    !digits.is_empty() && digits.iter().all(u8::is_ascii_digit)
}

fn ascii(b: &[u8]) -> Option<&str> {
    std::str::from_utf8(b).ok()
}

/// `%.17Lf` of a finite x87 value's bits (sign at bit 79, a 15-bit exponent biased by 16383,
/// a 64-bit significand whose top bit is the explicit integer bit): the exact binary value
/// rounded half-to-even at the 17th decimal, as glibc's `printf` rounds it.
fn fixed17(bits: u128) -> String {
    let negative = bits >> 79 & 1 == 1;
    let biased = (bits >> 64) as i32 & 0x7fff;
    let significand = bits as u64;
    // The value is significand × 2^shift; a denormal has the smallest normal's scale.
    let shift = biased.max(1) - 16383 - 63;
    // The value × 10^17, as an integer: the digits to print, the point before the last 17.
    let scaled = if shift >= 0 {
        let mut digits = Big::shifted(significand, shift as u32).decimal();
        digits.push_str(&"0".repeat(DECIMALS));
        digits
    } else {
        // significand × 10^17 < 2^121, so the fraction fits a u128 whatever the shift; past
        // 121 bits of shift every value is below half a unit of the 17th decimal.
        let n = u128::from(significand) * 10u128.pow(DECIMALS as u32);
        let k = shift.unsigned_abs();
        let rounded = if k > 121 {
            0
        } else {
            let (q, r, half) = (n >> k, n & ((1 << k) - 1), 1u128 << (k - 1));
            q + u128::from(r > half || (r == half && q & 1 == 1))
        };
        rounded.to_string()
    };
    let padded = format!("{scaled:0>width$}", width = DECIMALS + 1);
    let (int, frac) = padded.split_at(padded.len() - DECIMALS);
    format!("{}{int}.{frac}", if negative { "-" } else { "" })
}

/// A non-negative integer of up to 16,384 bits, little-endian 32-bit limbs: just enough
/// arithmetic to write a huge `long double` in decimal.
struct Big(Vec<u32>);

impl Big {
    /// `v × 2^shift`.
    fn shifted(v: u64, shift: u32) -> Big {
        let mut limbs = vec![0u32; (shift / 32) as usize];
        let wide = u128::from(v) << (shift % 32);
        limbs.extend([wide as u32, (wide >> 32) as u32, (wide >> 64) as u32]);
        Big(limbs)
    }

    /// Its decimal digits, by repeated division by 10^9.
    fn decimal(mut self) -> String {
        const CHUNK: u64 = 1_000_000_000;
        let mut chunks = Vec::new();
        loop {
            while self.0.last() == Some(&0) {
                self.0.pop();
            }
            if self.0.is_empty() {
                break;
            }
            let mut rem = 0u64;
            for limb in self.0.iter_mut().rev() {
                let cur = rem << 32 | u64::from(*limb);
                *limb = (cur / CHUNK) as u32;
                rem = cur % CHUNK;
            }
            chunks.push(rem as u32);
        }
        let mut out = chunks.pop().map_or_else(|| "0".into(), |c| c.to_string());
        for c in chunks.iter().rev() {
            out.push_str(&format!("{c:09}"));
        }
        out
    }
}

/// Cuts the trailing zeros of a decimal fraction, and its point if nothing is left after it.
fn trim(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

/// A double reply as Redis 7.0 writes one: a bulk string in RESP2, `,` in RESP3, `%.17g`.
pub fn reply(out: &mut BytesMut, proto: Proto, v: f64) {
    let t = text(v);
    match proto {
        Proto::Resp2 => reply::bulk(out, t.as_bytes()),
        Proto::Resp3 => {
            out.put_u8(b',');
            out.extend_from_slice(t.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seventeen_significant_digits() {
        for (v, want) in [
            (0.1, "0.10000000000000001"),
            (1.0, "1"),
            (-2.5, "-2.5"),
            (1e300, "1.0000000000000001e+300"),
            (1e17, "1e+17"),
            (1e16, "10000000000000000"),
            (0.0001, "0.0001"),
            (0.00001, "1.0000000000000001e-05"),
            (123.0, "123"),
            (f64::INFINITY, "inf"),
            (-0.0, "-0"),
        ] {
            assert_eq!(text(v), want, "{v}");
        }
    }

    fn ld(s: &str) -> LongDouble {
        LongDouble::parse(s.as_bytes()).unwrap_or_else(|| panic!("{s} parses"))
    }

    fn sum(a: &str, b: &str) -> String {
        ld(a).add(ld(b)).expect("finite").human()
    }

    #[test]
    fn long_double_sums_as_redis_writes_them() {
        // Each answer is redis-server 7.0.15's on x86-64.
        assert_eq!(sum("1000", "0.1"), "1000.09999999999999998");
        assert_eq!(sum("0.1", "0.2"), "0.3");
        assert_eq!(sum("10.5", "0.1"), "10.6");
        assert_eq!(sum("9223372036854775807", "-0.25"), "9223372036854775807");
        assert_eq!(sum("5.0e3", "2.0e2"), "5200");
        assert_eq!(sum("0", "-0"), "0");
        assert_eq!(sum("1e4932", "0"), ld("1e4932").human());
        assert!(ld("1e4932").add(ld("1e4932")).is_none());
        assert!(ld("inf").add(ld("-inf")).is_none());
        assert!(ld("1").add(ld("-inf")).is_none());
    }

    #[test]
    fn human_form_edges() {
        for (text, want) in [
            ("0", "0"),
            ("-0", "0"),
            ("-1e-20", "0"),
            ("1e-20", "0"),
            ("3", "3"),
            ("-2.5", "-2.5"),
            ("0x1p63", "9223372036854775808"),
            ("0x1p64", "18446744073709551616"),
            ("0xffffffffffffffffff", "4722366482869645213696"),
            ("1e20", "100000000000000000000"),
            ("0.1", "0.1"),
            ("1e-17", "0.00000000000000001"),
            ("4e-18", "0"),
            ("6e-18", "0.00000000000000001"),
            // 2^-18 has 18 decimals: a tie at the 17th, rounded to even.
            ("0.000003814697265625", "0.00000381469726562"),
            ("0.000011444091796875", "0.00001144409179688"),
            // The smallest denormal, and a denormal that parses (strtold's ERANGE, kept).
            ("0x1p-16445", "0"),
            ("1e-4940", "0"),
            ("2e-4951", "0"),
        ] {
            assert_eq!(ld(text).human(), want, "{text}");
        }
    }

    #[test]
    fn huge_values_print_every_digit() {
        let max = ld("0x1.fffffffffffffffep16383").human();
        assert_eq!(max.len(), 4933);
        assert!(max.starts_with("118973149535723176502126385303097020516906332229462420044032"));
        assert!(
            ld("-0x1.fffffffffffffffep16383")
                .human()
                .starts_with("-1189731495357231765")
        );
        let e4932 = ld("1e4932").human();
        assert_eq!(e4932.len(), 4933);
        assert!(e4932.starts_with("1000000000000000000006018949387963891323837774254533"));
        assert!(e4932.ends_with("418113791886622720"));
        assert_eq!(ld("1e19").human(), "10000000000000000000");
    }

    #[test]
    fn strtold_forms() {
        for (text, want) in [
            ("0x1p3", "8"),
            ("0X.8P1", "1"),
            ("0x1.8", "1.5"),
            ("0x1e3", "483"),
            ("+5", "5"),
            (".5", "0.5"),
            ("+.5", "0.5"),
            ("5.", "5"),
            ("00012", "12"),
            ("1E2", "100"),
            ("1e+2", "100"),
            ("-1e-2", "-0.01"),
            ("0e99999999999", "0"),
            ("1.9e-4951", "0"),
        ] {
            assert_eq!(ld(text).human(), want, "{text}");
        }
        for text in ["inf", "-inf", "+INF", "Infinity", "-iNfInItY"] {
            assert!(!ld(text).is_finite(), "{text}");
        }
        let long = format!("{}1", "0".repeat(5118));
        assert_eq!(ld(&long).human(), "1");
        for bad in [
            "",
            " 1",
            "1 ",
            "\t1",
            "1\n",
            "1\0",
            "nan",
            "-nan",
            "nan(1)",
            "Infinit",
            "infinityy",
            ".",
            "-",
            "+",
            "e3",
            "1e",
            "1e+",
            "0x",
            "0xp1",
            "0x1p",
            "0x1.8p+",
            "1_0",
            "1.2.3",
            "--1",
            "+-1",
            "0x1.fffffffffffffffffp16383",
            "1e5000",
            "-1e5000",
            "0x1p99999",
            "1e99999999999999999999",
            "1e-4951",
            "1.8e-4951",
            "0x1p-16446",
            "1,5",
            "١",
        ] {
            assert!(LongDouble::parse(bad.as_bytes()).is_none(), "{bad:?}");
        }
        let too_long = format!("{}1", "0".repeat(5119));
        assert!(LongDouble::parse(too_long.as_bytes()).is_none());
    }

    #[test]
    fn strtod_double_forms() {
        assert_eq!(parse(b"1e3"), Some(1000.0));
        assert_eq!(parse(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse(b"+inf"), Some(f64::INFINITY));
        assert_eq!(parse(b"nan"), None);
        assert_eq!(parse(b" 1"), None);
        assert_eq!(parse(b""), None);
        assert_eq!(parse(b"abc"), None);
    }
}
