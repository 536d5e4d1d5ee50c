//! Replies as bytes: where one RESP2 reply ends, and RL.CHECK's five integers read in place.
//!
//! The sidecar forwards a node's replies to its own client byte for byte; it only needs to
//! know where each reply ends (to hand it to the right request) and, for RL.CHECK, the
//! `allowed` and `retry_after_ms` fields (for the blocked cache). Decoding each reply into a
//! [`sluice_resp::value::Value`] and encoding it again would allocate per reply; this does not.
//!
//! # Invariants
//! - [`reply_end`] reads RESP2 (what a node sends a client that did not say `HELLO 3`) plus
//!   RESP3's null; anything else is [`Garbage`], and the connection that sent it is dropped.
//! - Lengths and nesting are bounded as in `sluice_resp::value`: no input allocates or recurses
//!   without bound, and no input panics.

use sluice_resp::value::{Garbage, MAX_DEPTH};

/// Longest bulk or aggregate accepted.
const MAX_LEN: i64 = 64 << 20;
/// Longest line accepted before its `\r\n` arrives.
const MAX_LINE: usize = 64 << 10;

/// The offset just past the reply that starts at `at`; `Ok(None)` until it is all buffered.
pub fn reply_end(buf: &[u8], at: usize) -> Result<Option<usize>, Garbage> {
    match int_array_end(buf, at) {
        Some(e) => Ok(Some(e)),
        None => end(buf, at, 0),
    }
}

fn end(buf: &[u8], at: usize, depth: usize) -> Result<Option<usize>, Garbage> {
    if depth > MAX_DEPTH {
        return Err(Garbage);
    }
    let Some(&kind) = buf.get(at) else {
        return Ok(None);
    };
    let Some((text, next)) = line(buf, at + 1) else {
        return if buf.len() - at < MAX_LINE {
            Ok(None)
        } else {
            Err(Garbage)
        };
    };
    match kind {
        b'+' | b'-' | b':' => Ok(Some(next)),
        b'_' if text.is_empty() => Ok(Some(next)),
        b'$' => match length(text)? {
            None => Ok(Some(next)),
            Some(n) => {
                let stop = next + n + 2;
                if buf.len() < stop {
                    return Ok(None);
                }
                if &buf[stop - 2..stop] != b"\r\n" {
                    return Err(Garbage);
                }
                Ok(Some(stop))
            }
        },
        b'*' => {
            let Some(n) = length(text)? else {
                return Ok(Some(next));
            };
            let mut at = next;
            for _ in 0..n {
                match end(buf, at, depth + 1)? {
                    Some(e) => at = e,
                    None => return Ok(None),
                }
            }
            Ok(Some(at))
        }
        _ => Err(Garbage),
    }
}

fn line(buf: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let rest = buf.get(at..)?;
    let mut from = 0;
    loop {
        let cr = from + rest.get(from..)?.iter().position(|&b| b == b'\r')?;
        if *rest.get(cr + 1)? == b'\n' {
            return Some((&rest[..cr], at + cr + 2));
        }
        from = cr + 1;
    }
}

/// A `$`/`*` length: `None` for -1 (null), an error past the bound.
fn length(text: &[u8]) -> Result<Option<usize>, Garbage> {
    match integer(text) {
        Some(-1) => Ok(None),
        Some(n) if (0..=MAX_LEN).contains(&n) => Ok(Some(n as usize)),
        _ => Err(Garbage),
    }
}

fn integer(text: &[u8]) -> Option<i64> {
    let (neg, digits) = match text.split_first() {
        Some((b'-', d)) => (true, d),
        _ => (false, text),
    };
    if digits.is_empty() || digits.len() > 18 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = digits
        .iter()
        .fold(0i64, |n, d| n * 10 + i64::from(d - b'0'));
    Some(if neg { -n } else { n })
}

/// RL.CHECK's reply (`*5` of integers) read in place; `None` for anything else (an error).
pub fn five_ints(reply: &[u8]) -> Option<[i64; 5]> {
    let mut rest = reply.strip_prefix(b"*5\r\n")?;
    let mut out = [0i64; 5];
    for slot in &mut out {
        let (n, after) = int_line(rest)?;
        *slot = n;
        rest = after;
    }
    rest.is_empty().then_some(out)
}

/// Past one `:<integer>\r\n` line without reading its value.
fn skip_int(b: &[u8]) -> Option<&[u8]> {
    let b = b.strip_prefix(b":")?;
    let cr = b.iter().position(|&c| c == b'\r')?;
    b[cr..].strip_prefix(b"\r\n")
}

/// The end of `*<n>\r\n` (one digit) followed by `n` integer lines at `at` (RL.CHECK's and
/// CL.THROTTLE's replies): the common case, read without the general scanner's calls. `None`:
/// not that shape, or not all there yet.
fn int_array_end(buf: &[u8], at: usize) -> Option<usize> {
    let b = buf.get(at..)?.strip_prefix(b"*")?;
    let n = usize::from(b.first().filter(|d| d.is_ascii_digit())? - b'0');
    let mut rest = b.get(1..)?.strip_prefix(b"\r\n")?;
    for _ in 0..n {
        rest = skip_int(rest)?;
    }
    Some(buf.len() - rest.len())
}

/// `:<digits>\r\n` at the front of `b`: its value and what follows. One pass, no search.
fn int_line(b: &[u8]) -> Option<(i64, &[u8])> {
    let b = b.strip_prefix(b":")?;
    let (neg, b) = match b.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, b),
    };
    let mut n: i64 = 0;
    let mut i = 0;
    // At most 18 digits: no overflow.
    while let Some(&d) = b.get(i).filter(|d| d.is_ascii_digit() && i < 18) {
        n = n * 10 + i64::from(d - b'0');
        i += 1;
    }
    if i == 0 {
        return None;
    }
    let rest = b[i..].strip_prefix(b"\r\n")?;
    Some((if neg { -n } else { n }, rest))
}

/// The text of an error reply (`-ERR x\r\n` → `ERR x`), else `None`.
pub fn error_text(reply: &[u8]) -> Option<&str> {
    let body = reply.strip_prefix(b"-")?;
    std::str::from_utf8(body.strip_suffix(b"\r\n")?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ends_are_found_and_partial_replies_wait() {
        let replies: &[&[u8]] = &[
            b"+OK\r\n",
            b"-ERR x\r\n",
            b":-12\r\n",
            b"$3\r\nabc\r\n",
            b"$-1\r\n",
            b"*-1\r\n",
            b"_\r\n",
            b"*5\r\n:1\r\n:10\r\n:9\r\n:-1\r\n:100\r\n",
            b"*2\r\n*1\r\n$0\r\n\r\n:3\r\n",
        ];
        for r in replies {
            assert_eq!(reply_end(r, 0), Ok(Some(r.len())), "{r:?}");
            for cut in 0..r.len() {
                assert_eq!(reply_end(&r[..cut], 0), Ok(None), "{r:?} cut at {cut}");
            }
        }
        let two = b"+OK\r\n:1\r\n";
        assert_eq!(reply_end(two, 5), Ok(Some(9)));
        for bad in [
            &b"?x\r\n"[..],
            b"$3\r\nabcd\r\n",
            b"$-2\r\n",
            b"*99999999999\r\n",
        ] {
            assert_eq!(reply_end(bad, 0), Err(Garbage), "{bad:?}");
        }
        let deep = b"*1\r\n".repeat(MAX_DEPTH + 2);
        assert_eq!(reply_end(&deep, 0), Err(Garbage));
    }

    #[test]
    fn rl_check_fields_are_read_in_place() {
        assert_eq!(
            five_ints(b"*5\r\n:0\r\n:10\r\n:0\r\n:250\r\n:1000\r\n"),
            Some([0, 10, 0, 250, 1000])
        );
        assert_eq!(five_ints(b"-ERR no\r\n"), None);
        assert_eq!(five_ints(b"*5\r\n:0\r\n:10\r\n:0\r\n:250\r\n"), None);
        assert_eq!(
            error_text(b"-READONLY You can't\r\n"),
            Some("READONLY You can't")
        );
    }
}
