//! The client's side of RESP2: encoding a command, decoding one reply.
//!
//! # Format
//! Commands go out as multibulk frames (`*N\r\n$len\r\narg\r\n...`). Replies are decoded
//! incrementally: [`parse`] returns `Ok(None)` until a whole value is buffered, so a reply split
//! over reads is never misread. Anything that is not RESP2 is [`Garbage`]: the connection that
//! sent it cannot be trusted any more and is closed.

use bytes::{BufMut, Bytes, BytesMut};

/// One decoded reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Bytes),
    Nil,
    Array(Vec<Value>),
}

/// The upstream sent bytes that are not a RESP2 reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Garbage;

/// Nesting deeper than this is refused: no real reply of ours comes close.
const MAX_DEPTH: usize = 8;
/// Longest bulk or array accepted from an upstream (a node's longest reply is INFO, a few KB).
const MAX_LEN: i64 = 64 << 20;

/// Appends `args` as one multibulk frame.
pub fn encode<A: AsRef<[u8]>>(out: &mut BytesMut, args: &[A]) {
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
pub fn parse(buf: &mut BytesMut) -> Result<Option<Value>, Garbage> {
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

fn value(buf: &[u8], at: usize, depth: usize) -> Result<Option<(Value, usize)>, Garbage> {
    if depth > MAX_DEPTH {
        return Err(Garbage);
    }
    let Some(&kind) = buf.get(at) else {
        return Ok(None);
    };
    let Some((text, next)) = line(buf, at + 1) else {
        // A line without its end yet; but a prefix we do not know is garbage at once.
        return if b"+-:$*".contains(&kind) && buf.len() - at < 1 << 16 {
            Ok(None)
        } else {
            Err(Garbage)
        };
    };
    let utf8 = |t: &[u8]| String::from_utf8_lossy(t).into_owned();
    Ok(Some(match kind {
        b'+' => (Value::Simple(utf8(text)), next),
        b'-' => (Value::Error(utf8(text)), next),
        b':' => (Value::Int(number(text)?), next),
        b'$' => {
            let len = number(text)?;
            if len == -1 {
                return Ok(Some((Value::Nil, next)));
            }
            if !(0..=MAX_LEN).contains(&len) {
                return Err(Garbage);
            }
            let end = next + len as usize;
            if buf.len() < end + 2 {
                return Ok(None);
            }
            if &buf[end..end + 2] != b"\r\n" {
                return Err(Garbage);
            }
            (
                Value::Bulk(Bytes::copy_from_slice(&buf[next..end])),
                end + 2,
            )
        }
        b'*' => {
            let len = number(text)?;
            if len == -1 {
                return Ok(Some((Value::Nil, next)));
            }
            if !(0..=MAX_LEN).contains(&len) {
                return Err(Garbage);
            }
            let mut items = Vec::with_capacity((len as usize).min(64));
            let mut pos = next;
            for _ in 0..len {
                match value(buf, pos, depth + 1)? {
                    None => return Ok(None),
                    Some((v, end)) => {
                        items.push(v);
                        pos = end;
                    }
                }
            }
            (Value::Array(items), pos)
        }
        _ => return Err(Garbage),
    }))
}

impl Value {
    /// Appends this value as RESP2 (what the sidecar forwards to its client).
    pub fn write(&self, out: &mut BytesMut) {
        let one_line = |out: &mut BytesMut, prefix: u8, text: &str| {
            out.put_u8(prefix);
            out.extend(
                text.bytes()
                    .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
            );
            out.extend_from_slice(b"\r\n");
        };
        match self {
            Value::Simple(s) => one_line(out, b'+', s),
            Value::Error(s) => one_line(out, b'-', s),
            Value::Int(n) => one_line(out, b':', &n.to_string()),
            Value::Bulk(b) => {
                one_line(out, b'$', &b.len().to_string());
                out.extend_from_slice(b);
                out.extend_from_slice(b"\r\n");
            }
            Value::Nil => out.extend_from_slice(b"$-1\r\n"),
            Value::Array(items) => {
                one_line(out, b'*', &items.len().to_string());
                for v in items {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(bytes: &[u8]) -> Result<Option<Value>, Garbage> {
        parse(&mut BytesMut::from(bytes))
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
        assert_eq!(parse(&mut two), Ok(Some(Value::Simple("OK".into()))));
        assert_eq!(parse(&mut two), Ok(Some(Value::Int(7))));
        assert!(two.is_empty());
    }

    #[test]
    fn garbage_is_refused() {
        for bad in [
            &b"HTTP/1.1 400\r\n"[..],
            b":12x\r\n",
            b"$5\r\nabcdefg\r\n",
            b"$-7\r\n",
            b"*99999999999\r\n",
        ] {
            assert_eq!(all(bad), Err(Garbage), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn encodes_and_round_trips() {
        let mut out = BytesMut::new();
        encode(&mut out, &["RL.CHECK", "k", "10", "1s"]);
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
            parse(&mut w).unwrap().unwrap(),
            Value::Array(vec![Value::Int(1), Value::Simple("a b".into()), Value::Nil])
        );
    }
}
