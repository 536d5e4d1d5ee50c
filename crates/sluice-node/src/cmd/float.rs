//! Numbers as Redis 7.0 reads and writes them: scores and increments parsed as `strtod` takes
//! them (no spaces, no NaN), doubles replied in `%.17g` (`addReplyDouble`), and the sums of
//! INCRBYFLOAT/HINCRBYFLOAT in the human form of `ld2string`.

use bytes::{BufMut, BytesMut};
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

/// The human form of a long double sum (`ld2string` with `LD_STR_HUMAN`): fixed notation,
/// trailing zeros cut. Sluice sums in f64, so it prints 15 significant digits, which gives
/// Redis's text for sums of short decimals (`0.1 + 0.2` is `0.3`).
pub fn human(v: f64) -> String {
    if v.is_infinite() {
        return if v > 0.0 { "inf" } else { "-inf" }.into();
    }
    let int_digits = if v.abs() < 1.0 {
        1
    } else {
        v.abs().log10().floor() as i32 + 1
    };
    let decimals = (15 - int_digits).clamp(0, 17) as usize;
    let s = format!("{v:.decimals$}");
    let s = trim(&s);
    if s == "-0" { "0".into() } else { s.into() }
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

    #[test]
    fn human_sums() {
        assert_eq!(human(0.1 + 0.2), "0.3");
        assert_eq!(human(10.5), "10.5");
        assert_eq!(human(3.0), "3");
        assert_eq!(human(-0.0), "0");
        assert_eq!(human(5e20), "500000000000000000000");
    }

    #[test]
    fn strtod_forms() {
        assert_eq!(parse(b"1e3"), Some(1000.0));
        assert_eq!(parse(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse(b"+inf"), Some(f64::INFINITY));
        assert_eq!(parse(b"nan"), None);
        assert_eq!(parse(b" 1"), None);
        assert_eq!(parse(b""), None);
        assert_eq!(parse(b"abc"), None);
    }
}
