//! The client's side of RESP: encoding a command, decoding one reply. Used by every program
//! that talks to a node: the sidecar's gateway client, the admin tool and a node's calls to its
//! peers (replica handshake, slot-table fetch and push, slot import).
//!
//! # Format
//! Commands go out as multibulk frames (`*N\r\n$len\r\narg\r\n...`). Replies are RESP2 or RESP3
//! values, decoded incrementally: [`decode`] returns `Ok(None)` until a whole value is buffered,
//! so a reply split over reads is never misread, and removes exactly that value's bytes (what
//! follows, such as a snapshot after `+FULLRESYNC`, stays in the buffer). Anything that is not
//! RESP is [`Garbage`]: the connection that sent it cannot be trusted any more and is closed.
//!
//! RESP3 attributes (`|`) are read and dropped: they annotate the value that follows and no
//! caller of ours uses them. Streamed strings and aggregates (`$?`, `*?`) are garbage: no node
//! sends them.
//!
//! # Invariants
//! - A declared length never drives an allocation: a bulk is copied only once all its bytes
//!   are buffered, an aggregate reserves at most 64 items up front and grows only as its items
//!   arrive, and lengths over 64 MiB are garbage.
//! - Nesting is bounded ([`MAX_DEPTH`]), and attributes are read in a loop, not by recursion,
//!   so no input can exhaust the stack.
//! - No input makes [`decode`] panic.

use bytes::{BufMut, Bytes, BytesMut};

/// One decoded reply.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `+text`
    Simple(String),
    /// `-text`, or a RESP3 blob error `!len`.
    Error(String),
    /// `:n`
    Int(i64),
    /// `$len`
    Bulk(Bytes),
    /// `$-1`, `*-1`, or RESP3's `_`.
    Nil,
    /// `*len`
    Array(Vec<Value>),
    /// RESP3 `,1.5` (also `,inf`, `,-inf`, `,nan`).
    Double(f64),
    /// RESP3 `#t` / `#f`.
    Boolean(bool),
    /// RESP3 `(` with its digits as sent.
    BigNumber(String),
    /// RESP3 `=len\r\nfmt:text`: the three-letter format (`txt`, `mkd`) and the text.
    Verbatim { format: String, text: Bytes },
    /// RESP3 `%len`: key/value pairs in the order sent (a repeated key is kept).
    Map(Vec<(Value, Value)>),
    /// RESP3 `~len`
    Set(Vec<Value>),
    /// RESP3 `>len`: an out-of-band message.
    Push(Vec<Value>),
}

/// The peer sent bytes that are not a RESP reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Garbage;

impl std::fmt::Display for Garbage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("not a RESP reply")
    }
}

impl std::error::Error for Garbage {}

/// Nesting deeper than this is refused: no real reply of ours comes close.
pub const MAX_DEPTH: usize = 8;
/// Longest bulk or aggregate accepted (a node's longest reply is INFO, a few KB).
const MAX_LEN: i64 = 64 << 20;
/// Longest line (simple string, error, number) accepted before its `\r\n` arrives.
const MAX_LINE: usize = 64 << 10;
/// Items reserved up front for an aggregate, whatever length it declares.
const RESERVE: usize = 64;

/// Appends `args` as one multibulk frame.
pub fn encode_command<A: AsRef<[u8]>>(out: &mut BytesMut, args: &[A]) {
    let mut n = itoa::Buffer::new();
    out.put_u8(b'*');
    out.extend_from_slice(n.format(args.len()).as_bytes());
    out.extend_from_slice(b"\r\n");
    for a in args {
        let a = a.as_ref();
        out.put_u8(b'$');
        out.extend_from_slice(n.format(a.len()).as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// Decodes the value at the front of `buf` and removes its bytes; `Ok(None)` if incomplete.
pub fn decode(buf: &mut BytesMut) -> Result<Option<Value>, Garbage> {
    match value(buf, 0, 0)? {
        None => Ok(None),
        Some((v, end)) => {
            let _ = buf.split_to(end);
            Ok(Some(v))
        }
    }
}

fn line(buf: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let rest = buf.get(at..)?;
    let cr = rest.windows(2).position(|w| w == b"\r\n")?;
    Some((&rest[..cr], at + cr + 2))
}

fn number(text: &[u8]) -> Result<i64, Garbage> {
    std::str::from_utf8(text)
        .ok()
        .and_then(|t| t.parse().ok())
        .ok_or(Garbage)
}

fn lossy(text: &[u8]) -> String {
    String::from_utf8_lossy(text).into_owned()
}

/// A declared length, or `None` for RESP2's null (`-1`); anything else out of range is garbage.
fn length(text: &[u8]) -> Result<Option<usize>, Garbage> {
    match number(text)? {
        -1 => Ok(None),
        len if (0..=MAX_LEN).contains(&len) => Ok(Some(len as usize)),
        _ => Err(Garbage),
    }
}

/// The value starting at `at`, and where it ends.
type Decoded = Option<(Value, usize)>;

fn value(buf: &[u8], mut at: usize, depth: usize) -> Result<Decoded, Garbage> {
    if depth > MAX_DEPTH {
        return Err(Garbage);
    }
    loop {
        let Some(&kind) = buf.get(at) else {
            return Ok(None);
        };
        if !b"+-:$*_,#(!=%~>|".contains(&kind) {
            return Err(Garbage);
        }
        let Some((text, next)) = line(buf, at + 1) else {
            // A line without its end yet.
            return if buf.len() - at < MAX_LINE {
                Ok(None)
            } else {
                Err(Garbage)
            };
        };
        let simple = match kind {
            b'+' => Value::Simple(lossy(text)),
            b'-' => Value::Error(lossy(text)),
            b':' => Value::Int(number(text)?),
            b'_' if text.is_empty() => Value::Nil,
            b',' => Value::Double(double(text)?),
            b'#' => match text {
                b"t" => Value::Boolean(true),
                b"f" => Value::Boolean(false),
                _ => return Err(Garbage),
            },
            b'(' => Value::BigNumber(big_number(text)?),
            b'$' | b'!' | b'=' => return blob(buf, kind, text, next),
            b'|' => {
                // An attribute: read its pairs, drop them, and go on to the value it annotates.
                let Some(len) = length(text)? else {
                    return Err(Garbage);
                };
                match items(buf, next, depth, len * 2)? {
                    None => return Ok(None),
                    Some((_, end)) => {
                        at = end;
                        continue;
                    }
                }
            }
            b'*' | b'%' | b'~' | b'>' => return aggregate(buf, kind, text, next, depth),
            _ => return Err(Garbage),
        };
        return Ok(Some((simple, next)));
    }
}

fn double(text: &[u8]) -> Result<f64, Garbage> {
    let text = std::str::from_utf8(text).map_err(|_| Garbage)?;
    // Rust also reads `infinity` and `+1`; RESP3 writes `inf`, `-inf`, `nan` and plain decimals.
    if text.is_empty() || text.starts_with('+') || text.to_ascii_lowercase().contains("infinity") {
        return Err(Garbage);
    }
    text.parse().map_err(|_| Garbage)
}

fn big_number(text: &[u8]) -> Result<String, Garbage> {
    let digits = text.strip_prefix(b"-").unwrap_or(text);
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(Garbage);
    }
    Ok(lossy(text))
}

/// A length-prefixed string: bulk `$`, blob error `!` or verbatim `=`.
fn blob(buf: &[u8], kind: u8, text: &[u8], next: usize) -> Result<Decoded, Garbage> {
    let Some(len) = length(text)? else {
        return if kind == b'$' {
            Ok(Some((Value::Nil, next)))
        } else {
            Err(Garbage)
        };
    };
    let end = next + len;
    if buf.len() < end + 2 {
        return Ok(None);
    }
    if &buf[end..end + 2] != b"\r\n" {
        return Err(Garbage);
    }
    let data = &buf[next..end];
    let v = match kind {
        b'$' => Value::Bulk(Bytes::copy_from_slice(data)),
        b'!' => Value::Error(lossy(data)),
        _ => match data {
            [f0, f1, f2, b':', text @ ..] => Value::Verbatim {
                format: lossy(&[*f0, *f1, *f2]),
                text: Bytes::copy_from_slice(text),
            },
            _ => return Err(Garbage),
        },
    };
    Ok(Some((v, end + 2)))
}

/// `count` values in a row from `at`, one level deeper.
fn items(
    buf: &[u8],
    mut at: usize,
    depth: usize,
    count: usize,
) -> Result<Option<(Vec<Value>, usize)>, Garbage> {
    let mut items = Vec::with_capacity(count.min(RESERVE));
    for _ in 0..count {
        match value(buf, at, depth + 1)? {
            None => return Ok(None),
            Some((v, end)) => {
                items.push(v);
                at = end;
            }
        }
    }
    Ok(Some((items, at)))
}

/// An array `*`, map `%`, set `~` or push `>`.
fn aggregate(
    buf: &[u8],
    kind: u8,
    text: &[u8],
    next: usize,
    depth: usize,
) -> Result<Decoded, Garbage> {
    let Some(len) = length(text)? else {
        return if kind == b'*' {
            Ok(Some((Value::Nil, next)))
        } else {
            Err(Garbage)
        };
    };
    let count = if kind == b'%' { len * 2 } else { len };
    let Some((items, end)) = items(buf, next, depth, count)? else {
        return Ok(None);
    };
    let v = match kind {
        b'*' => Value::Array(items),
        b'~' => Value::Set(items),
        b'>' => Value::Push(items),
        _ => {
            let mut items = items.into_iter();
            let mut pairs = Vec::with_capacity(len);
            while let (Some(k), Some(v)) = (items.next(), items.next()) {
                pairs.push((k, v));
            }
            Value::Map(pairs)
        }
    };
    Ok(Some((v, end)))
}

impl Value {
    /// Appends this value as RESP2 (what the sidecar forwards to its client). RESP3 types
    /// become what Redis sends a RESP2 client: a double or big number a bulk string, a boolean
    /// `:1`/`:0`, a map a flat array of keys and values, a set or push an array.
    pub fn write(&self, out: &mut BytesMut) {
        let one_line = |out: &mut BytesMut, prefix: u8, text: &str| {
            out.put_u8(prefix);
            out.extend(
                text.bytes()
                    .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
            );
            out.extend_from_slice(b"\r\n");
        };
        let bulk = |out: &mut BytesMut, data: &[u8]| {
            one_line(out, b'$', &data.len().to_string());
            out.extend_from_slice(data);
            out.extend_from_slice(b"\r\n");
        };
        let array = |out: &mut BytesMut, items: &[Value]| {
            one_line(out, b'*', &items.len().to_string());
            for v in items {
                v.write(out);
            }
        };
        match self {
            Value::Simple(s) => one_line(out, b'+', s),
            Value::Error(s) => one_line(out, b'-', s),
            Value::Int(n) => one_line(out, b':', &n.to_string()),
            Value::Boolean(b) => one_line(out, b':', if *b { "1" } else { "0" }),
            Value::Bulk(b) | Value::Verbatim { text: b, .. } => bulk(out, b),
            Value::Double(d) => bulk(out, double_text(*d).as_bytes()),
            Value::BigNumber(n) => bulk(out, n.as_bytes()),
            Value::Nil => out.extend_from_slice(b"$-1\r\n"),
            Value::Array(items) | Value::Set(items) | Value::Push(items) => array(out, items),
            Value::Map(pairs) => {
                one_line(out, b'*', &(pairs.len() * 2).to_string());
                for (k, v) in pairs {
                    k.write(out);
                    v.write(out);
                }
            }
        }
    }

    /// The integers of an array of integers (RL.CHECK's reply), else `None`.
    pub fn ints(&self) -> Option<Vec<i64>> {
        match self {
            Value::Array(items) => items
                .iter()
                .map(|v| match v {
                    Value::Int(n) => Some(*n),
                    _ => None,
                })
                .collect(),
            _ => None,
        }
    }

    /// A reply as one line of text (`+OK` → `OK`, `-ERR x` → `ERR x`, a bulk as its text), for
    /// messages and for callers that expect a string.
    pub fn text(&self) -> String {
        match self {
            Value::Simple(s) | Value::Error(s) | Value::BigNumber(s) => s.clone(),
            Value::Bulk(b) | Value::Verbatim { text: b, .. } => lossy(b),
            Value::Int(n) => n.to_string(),
            Value::Double(d) => double_text(*d),
            Value::Boolean(b) => b.to_string(),
            Value::Nil => "(nil)".into(),
            Value::Array(a) | Value::Set(a) | Value::Push(a) => format!("array of {}", a.len()),
            Value::Map(m) => format!("map of {}", m.len()),
        }
    }

    /// True for `+OK...`.
    pub fn is_ok(&self) -> bool {
        matches!(self, Value::Simple(s) if s.starts_with("OK"))
    }
}

/// A double as Redis writes it: `inf`, `-inf`, `nan`, else the shortest exact decimal.
fn double_text(d: f64) -> String {
    if d.is_nan() {
        "nan".into()
    } else if d.is_infinite() {
        if d > 0.0 { "inf" } else { "-inf" }.into()
    } else {
        d.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(bytes: &[u8]) -> Result<Option<Value>, Garbage> {
        decode(&mut BytesMut::from(bytes))
    }

    #[test]
    fn decodes_every_kind_and_waits_for_the_rest() {
        let reply = b"*5\r\n:1\r\n:10\r\n:9\r\n:-1\r\n:100\r\n";
        assert_eq!(
            all(reply).unwrap().unwrap().ints(),
            Some(vec![1, 10, 9, -1, 100])
        );
        for cut in 0..reply.len() {
            assert_eq!(all(&reply[..cut]), Ok(None), "cut at {cut}");
        }
        assert_eq!(
            all(b"$3\r\nab\n\r\n"),
            Ok(Some(Value::Bulk(Bytes::from_static(b"ab\n"))))
        );
        assert_eq!(all(b"-ERR x\r\n"), Ok(Some(Value::Error("ERR x".into()))));
        assert_eq!(all(b"$-1\r\n"), Ok(Some(Value::Nil)));
        let mut two = BytesMut::from(&b"+OK\r\n:7\r\n"[..]);
        assert_eq!(decode(&mut two), Ok(Some(Value::Simple("OK".into()))));
        assert_eq!(decode(&mut two), Ok(Some(Value::Int(7))));
        assert!(two.is_empty());
    }

    #[test]
    fn decodes_resp3() {
        let reply = b"|1\r\n+ttl\r\n:3\r\n%2\r\n+a\r\n,1.5\r\n#t\r\n~2\r\n_\r\n(-12\r\n";
        let want = Value::Map(vec![
            (Value::Simple("a".into()), Value::Double(1.5)),
            (
                Value::Boolean(true),
                Value::Set(vec![Value::Nil, Value::BigNumber("-12".into())]),
            ),
        ]);
        assert_eq!(all(reply), Ok(Some(want)));
        for cut in 0..reply.len() {
            assert_eq!(all(&reply[..cut]), Ok(None), "cut at {cut}");
        }
        assert_eq!(
            all(b"=7\r\ntxt:a b\r\n"),
            Ok(Some(Value::Verbatim {
                format: "txt".into(),
                text: Bytes::from_static(b"a b")
            }))
        );
        assert_eq!(all(b"!3\r\nE x\r\n"), Ok(Some(Value::Error("E x".into()))));
        assert_eq!(
            all(b">2\r\n+a\r\n:1\r\n"),
            Ok(Some(Value::Push(vec![
                Value::Simple("a".into()),
                Value::Int(1)
            ])))
        );
    }

    #[test]
    fn snapshot_bytes_after_a_reply_stay_buffered() {
        let mut buf = BytesMut::from(&b"+FULLRESYNC abc 0\r\n$5\r\nsnap"[..]);
        assert_eq!(
            decode(&mut buf),
            Ok(Some(Value::Simple("FULLRESYNC abc 0".into())))
        );
        assert_eq!(&buf[..], b"$5\r\nsnap");
    }

    #[test]
    fn garbage_is_refused() {
        for bad in [
            &b"HTTP/1.1 400\r\n"[..],
            b":12x\r\n",
            b"$5\r\nabcdefg\r\n",
            b"$-7\r\n",
            b"*99999999999\r\n",
            b"$?\r\n",
            b"%-1\r\n",
            b"#x\r\n",
            b"_x\r\n",
            b",infinity\r\n",
            b"(12a\r\n",
            b"=2\r\nab\r\n",
            b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n",
        ] {
            assert_eq!(all(bad), Err(Garbage), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn declared_lengths_cost_nothing_until_the_bytes_arrive() {
        assert_eq!(all(b"$67108864\r\nab"), Ok(None));
        assert_eq!(all(b"*67108864\r\n:1\r\n"), Ok(None));
        assert_eq!(all(b"%67108864\r\n"), Ok(None));
        // A long run of attributes is a loop, not a recursion.
        let mut attrs = b"|0\r\n".repeat(100_000);
        attrs.extend_from_slice(b":1\r\n");
        assert_eq!(all(&attrs), Ok(Some(Value::Int(1))));
    }

    #[test]
    fn encodes_and_round_trips() {
        let mut out = BytesMut::new();
        encode_command(&mut out, &["RL.CHECK", "k", "10", "1s"]);
        assert_eq!(
            &out[..],
            b"*4\r\n$8\r\nRL.CHECK\r\n$1\r\nk\r\n$2\r\n10\r\n$2\r\n1s\r\n"
        );
        let v = Value::Array(vec![
            Value::Int(1),
            Value::Simple("a\rb".into()),
            Value::Nil,
        ]);
        let mut w = BytesMut::new();
        v.write(&mut w);
        assert_eq!(
            decode(&mut w).unwrap().unwrap(),
            Value::Array(vec![Value::Int(1), Value::Simple("a b".into()), Value::Nil])
        );
    }

    #[test]
    fn resp3_is_written_as_resp2() {
        let v = Value::Map(vec![
            (Value::Simple("a".into()), Value::Double(f64::INFINITY)),
            (
                Value::Boolean(false),
                Value::Set(vec![Value::BigNumber("7".into())]),
            ),
        ]);
        let mut w = BytesMut::new();
        v.write(&mut w);
        assert_eq!(&w[..], b"*4\r\n+a\r\n$3\r\ninf\r\n:0\r\n*1\r\n$1\r\n7\r\n");
    }
}
