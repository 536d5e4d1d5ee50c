//! Inline commands: Redis's `sdssplitargs` quoting rules, decoded in place.
//!
//! # Format
//!
//! One line, split on blanks. A token may contain `"double quoted"` parts, where `\n \r \t \b \a`,
//! `\xHH` and `\<any>` (that character itself) are escapes, and `'single quoted'` parts, where only
//! `\'` is an escape. A closing quote must be followed by a blank or the end of the line, and a
//! quote left open is an error ("unbalanced quotes"). Quotes may start mid-token: `a"b c"` is the
//! one argument `ab c` (but `a"b"c` is unbalanced). An empty quoted token (`""`) is an empty
//! argument, as in Redis 7+ (older versions dropped it).
//!
//! # Why in place
//!
//! Every escape or quote makes the decoded token shorter than its source, and each token is
//! decoded into the bytes it came from. So the write position never passes the read position and
//! the line can be rewritten where it lies: the decoded arguments stay slices of the read buffer,
//! quoted or not, and inline commands are as zero-copy as multibulk ones.
//!
//! # Exactness
//!
//! The C original works on a NUL-terminated string, so a NUL byte ends the line for it: whatever
//! follows is ignored, and a quote still open at the NUL is unbalanced. We cut the line at the
//! first NUL to behave the same. Blanks are C's `isspace` (space, `\t \n \v \f \r`), but only
//! space, `\t`, `\n`, `\r` end an unquoted token: `\v` and `\f` inside a token are kept, as in
//! C.

/// C's `isspace` in the "C" locale.
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

fn hex_value(b: Option<&u8>) -> Option<u8> {
    match *b? {
        d @ b'0'..=b'9' => Some(d - b'0'),
        d @ b'a'..=b'f' => Some(d - b'a' + 10),
        d @ b'A'..=b'F' => Some(d - b'A' + 10),
        _ => None,
    }
}

/// The quotes were not closed, or a closing quote was followed by something other than a blank.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Unbalanced;

/// Splits `line` (without its line ending) into arguments, decoding each one in place, and
/// appends `(offset, len)` of every decoded argument to `args`.
///
/// On error `line` may be partly rewritten and `args` partly filled; the request is dropped then.
pub(crate) fn split_args(
    line: &mut [u8],
    args: &mut Vec<(usize, usize)>,
) -> Result<(), Unbalanced> {
    let end = line.iter().position(|&b| b == 0).unwrap_or(line.len());
    let line = &mut line[..end];
    let mut r = 0;
    loop {
        while r < end && is_space(line[r]) {
            r += 1;
        }
        if r == end {
            return Ok(());
        }
        let start = r;
        let mut w = r;
        let mut in_double = false;
        let mut in_single = false;
        loop {
            // `None` plays the C string's terminating NUL.
            let c = line.get(r).copied();
            if in_double {
                match c {
                    None => return Err(Unbalanced),
                    Some(b'\\') if line.get(r + 1) == Some(&b'x') => {
                        if let (Some(hi), Some(lo)) =
                            (hex_value(line.get(r + 2)), hex_value(line.get(r + 3)))
                        {
                            line[w] = hi << 4 | lo;
                            w += 1;
                            r += 4;
                            continue;
                        }
                        // `\x` without two hex digits is the plain escape of `x`.
                        line[w] = b'x';
                        w += 1;
                        r += 2;
                    }
                    Some(b'\\') if r + 1 < end => {
                        line[w] = match line[r + 1] {
                            b'n' => b'\n',
                            b'r' => b'\r',
                            b't' => b'\t',
                            b'b' => 0x08,
                            b'a' => 0x07,
                            other => other,
                        };
                        w += 1;
                        r += 2;
                    }
                    Some(b'"') => {
                        if r + 1 < end && !is_space(line[r + 1]) {
                            return Err(Unbalanced);
                        }
                        r += 1;
                        break;
                    }
                    Some(b) => {
                        line[w] = b;
                        w += 1;
                        r += 1;
                    }
                }
            } else if in_single {
                match c {
                    None => return Err(Unbalanced),
                    Some(b'\\') if line.get(r + 1) == Some(&b'\'') => {
                        line[w] = b'\'';
                        w += 1;
                        r += 2;
                    }
                    Some(b'\'') => {
                        if r + 1 < end && !is_space(line[r + 1]) {
                            return Err(Unbalanced);
                        }
                        r += 1;
                        break;
                    }
                    Some(b) => {
                        line[w] = b;
                        w += 1;
                        r += 1;
                    }
                }
            } else {
                match c {
                    None => break,
                    Some(b' ' | b'\n' | b'\r' | b'\t') => {
                        r += 1;
                        break;
                    }
                    Some(b'"') => {
                        in_double = true;
                        r += 1;
                    }
                    Some(b'\'') => {
                        in_single = true;
                        r += 1;
                    }
                    Some(b) => {
                        line[w] = b;
                        w += 1;
                        r += 1;
                    }
                }
            }
        }
        args.push((start, w - start));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(s: &[u8]) -> Result<Vec<Vec<u8>>, Unbalanced> {
        let mut line = s.to_vec();
        let mut args = Vec::new();
        split_args(&mut line, &mut args)?;
        Ok(args.iter().map(|&(o, l)| line[o..o + l].to_vec()).collect())
    }

    fn ok(s: &str, want: &[&[u8]]) {
        let got = split(s.as_bytes()).unwrap_or_else(|_| panic!("{s:?} should split"));
        let want: Vec<Vec<u8>> = want.iter().map(|a| a.to_vec()).collect();
        assert_eq!(got, want, "splitting {s:?}");
    }

    #[test]
    fn plain_tokens_and_blanks() {
        ok("", &[]);
        ok("   \t ", &[]);
        ok("PING", &[b"PING"]);
        ok("  SET  k\tv  ", &[b"SET", b"k", b"v"]);
        // \v and \f are skipped between tokens but kept inside one, as in C.
        ok("\x0ba\x0bb", &[b"a\x0bb"]);
    }

    #[test]
    fn double_quote_escapes() {
        ok(r#"SET k "a b""#, &[b"SET", b"k", b"a b"]);
        ok(r#""\n\r\t\b\a\\\"\q""#, &[b"\n\r\t\x08\x07\\\"q"]);
        ok(r#""\x41\x7a\xff\x0""#, &[b"Az\xffx0"]);
        ok(r#""\xZZ""#, &[b"xZZ"]);
        ok(r#""""#, &[b""]);
        ok(r#"a"b c" d"#, &[b"ab c", b"d"]);
    }

    #[test]
    fn single_quote_escapes() {
        ok(r"'it\'s' 'a\nb'", &[b"it's", b"a\\nb"]);
        ok("''", &[b""]);
    }

    #[test]
    fn unbalanced_quotes() {
        for bad in [
            r#""abc"#,
            r#"'abc"#,
            r#""abc"x"#,
            r#"'abc'x"#,
            r#""a\"#,
            r#"GET "k"#,
            r#"a"b c"d"#,
        ] {
            assert_eq!(split(bad.as_bytes()), Err(Unbalanced), "{bad:?}");
        }
    }

    #[test]
    fn nul_ends_the_line() {
        ok("GET a\0b c", &[b"GET", b"a"]);
        assert_eq!(split(b"GET \"a\0\""), Err(Unbalanced));
    }
}
