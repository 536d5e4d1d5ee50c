//! A raw RESP2 client for comparing servers reply for reply: it sends a command as an array of
//! bulk strings and reads one reply back as a [`Reply`] that keeps everything on the wire
//! (an error's whole line, nil bulk versus nil array), which a client library would interpret.

use std::fmt;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// One RESP2 reply, as sent.
#[derive(Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`
    Status(String),
    /// `-ERR ...`: the whole line after the `-`.
    Error(String),
    /// `:1`
    Int(i64),
    /// `$3\r\nabc`
    Bulk(Vec<u8>),
    /// `$-1`
    Nil,
    /// `*2\r\n...`
    Array(Vec<Reply>),
    /// `*-1`
    NilArray,
    /// RESP3 `,1.5`: the text as sent.
    Double(String),
    /// RESP3 `_`
    Null,
    /// RESP3 `#t`/`#f`
    Bool(bool),
    /// RESP3 `%2`: keys and values, in the order sent.
    Map(Vec<(Reply, Reply)>),
    /// RESP3 `~2`
    Set(Vec<Reply>),
}

/// Printed as redis-cli prints it, so a failing sequence's replies read as a session.
impl fmt::Debug for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reply::Status(s) => write!(f, "{s}"),
            Reply::Error(e) => write!(f, "(error) {e}"),
            Reply::Int(n) => write!(f, "(integer) {n}"),
            Reply::Bulk(b) => write!(f, "{:?}", String::from_utf8_lossy(b)),
            Reply::Nil => write!(f, "(nil)"),
            Reply::Array(items) => f.debug_list().entries(items).finish(),
            Reply::NilArray => write!(f, "(nil array)"),
            Reply::Double(d) => write!(f, "(double) {d}"),
            Reply::Null => write!(f, "(null)"),
            Reply::Bool(b) => write!(f, "({b})"),
            Reply::Map(pairs) => f
                .debug_map()
                .entries(pairs.iter().map(|(k, v)| (k, v)))
                .finish(),
            Reply::Set(items) => write!(f, "(set) {items:?}"),
        }
    }
}

/// One connection, one command at a time: RESP2, or RESP3 after a `HELLO 3`.
#[derive(Debug)]
pub struct RespConn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl RespConn {
    /// Connects to 127.0.0.1:`port` with a 10 s read timeout.
    pub fn connect(port: u16) -> RespConn {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.set_nodelay(true).unwrap();
        RespConn {
            reader: BufReader::new(s.try_clone().expect("clone socket")),
            writer: s,
        }
    }

    /// Sends `args` and reads the one reply (panics on a closed connection or a framing error).
    pub fn call<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Reply {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            let a = a.as_ref();
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        self.writer.write_all(&out).expect("send command");
        self.read()
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        let n = self.reader.read_line(&mut line).expect("read reply");
        assert!(n > 0, "connection closed");
        assert!(line.ends_with("\r\n"), "unterminated line {line:?}");
        line.truncate(line.len() - 2);
        line
    }

    fn read(&mut self) -> Reply {
        let line = self.line();
        let (kind, rest) = line.split_at(1);
        let len = || rest.parse::<i64>().expect("length");
        match kind {
            "+" => Reply::Status(rest.to_owned()),
            "-" => Reply::Error(rest.to_owned()),
            ":" => Reply::Int(len()),
            "$" if len() < 0 => Reply::Nil,
            "$" => {
                let mut body = vec![0; len() as usize + 2];
                self.reader.read_exact(&mut body).expect("read bulk");
                body.truncate(body.len() - 2);
                Reply::Bulk(body)
            }
            "*" if len() < 0 => Reply::NilArray,
            "*" => Reply::Array((0..len()).map(|_| self.read()).collect()),
            "," => Reply::Double(rest.to_owned()),
            "_" => Reply::Null,
            "#" => Reply::Bool(rest == "t"),
            "%" => Reply::Map((0..len()).map(|_| (self.read(), self.read())).collect()),
            "~" => Reply::Set((0..len()).map(|_| self.read()).collect()),
            _ => panic!("not a RESP2 or RESP3 reply: {line:?}"),
        }
    }
}
