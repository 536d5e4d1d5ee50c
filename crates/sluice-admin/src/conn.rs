//! A connection to one node: a tiny synchronous RESP client over `sluice_resp::value` (the codec
//! every Sluice client uses), and the questions the admin tool asks a node.
//!
//! A call writes the command as one multibulk frame and reads until one whole reply decodes.
//! Connecting may take 3 s, a reply 30 s. A connection that failed once (timeout, reset,
//! garbage) is not used again: a late reply would be read as the answer to the next command.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use bytes::BytesMut;
use sluice_cluster::{Node, SlotTable};
use sluice_resp::value::{self, Value};

pub type Fallible<T> = Result<T, String>;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

pub fn split_addr(addr: &str) -> Fallible<(String, u16)> {
    let (h, p) = addr
        .rsplit_once(':')
        .ok_or_else(|| format!("'{addr}' is not HOST:PORT"))?;
    let port = p
        .parse()
        .map_err(|_| format!("'{addr}' has an invalid port"))?;
    Ok((h.to_string(), port))
}

/// A reply as the type a caller expects.
pub trait FromValue: Sized {
    fn from_value(v: Value) -> Fallible<Self>;
}

fn unexpected<T>(v: &Value) -> Fallible<T> {
    Err(format!("unexpected reply: {}", v.text()))
}

impl FromValue for String {
    fn from_value(v: Value) -> Fallible<Self> {
        match v {
            Value::Simple(_) | Value::Bulk(_) | Value::Verbatim { .. } | Value::Int(_) => {
                Ok(v.text())
            }
            other => unexpected(&other),
        }
    }
}

impl FromValue for Option<String> {
    fn from_value(v: Value) -> Fallible<Self> {
        match v {
            Value::Nil => Ok(None),
            other => String::from_value(other).map(Some),
        }
    }
}

impl FromValue for i64 {
    fn from_value(v: Value) -> Fallible<Self> {
        match &v {
            Value::Int(n) => Ok(*n),
            Value::Simple(_) | Value::Bulk(_) => v.text().parse().or_else(|_| unexpected(&v)),
            _ => unexpected(&v),
        }
    }
}

impl FromValue for Vec<String> {
    fn from_value(v: Value) -> Fallible<Self> {
        match v {
            Value::Nil => Ok(Vec::new()),
            Value::Array(items) | Value::Set(items) => {
                items.into_iter().map(String::from_value).collect()
            }
            other => unexpected(&other),
        }
    }
}

impl FromValue for (i64, i64) {
    fn from_value(v: Value) -> Fallible<Self> {
        match v {
            Value::Array(items) => match <[Value; 2]>::try_from(items) {
                Ok([a, b]) => Ok((i64::from_value(a)?, i64::from_value(b)?)),
                Err(items) => unexpected(&Value::Array(items)),
            },
            other => unexpected(&other),
        }
    }
}

/// A connected node.
pub struct Conn {
    pub addr: String,
    pub host: String,
    pub port: u16,
    stream: TcpStream,
    /// Bytes read past the last reply.
    buf: BytesMut,
    /// Set once a call failed: the stream may hold a late reply.
    broken: bool,
}

fn connect(host: &str, port: u16) -> std::io::Result<TcpStream> {
    let mut last = None;
    for sa in (host, port).to_socket_addrs()? {
        match TcpStream::connect_timeout(&sa, CONNECT_TIMEOUT) {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no address")))
}

impl Conn {
    /// Connects, then sends `AUTH [user] password` if there is a password.
    pub fn open(auth: Option<(Option<&str>, &str)>, addr: &str) -> Fallible<Conn> {
        let (host, port) = split_addr(addr)?;
        let stream = connect(&host, port)
            .and_then(|s| {
                s.set_read_timeout(Some(REPLY_TIMEOUT))?;
                s.set_write_timeout(Some(REPLY_TIMEOUT))?;
                let _ = s.set_nodelay(true);
                Ok(s)
            })
            .map_err(|e| format!("cannot reach {addr}: {e}"))?;
        let mut conn = Conn {
            addr: addr.to_string(),
            host,
            port,
            stream,
            buf: BytesMut::with_capacity(4096),
            broken: false,
        };
        let login = match auth {
            Some((Some(user), pass)) => Some(vec!["AUTH", user, pass]),
            Some((None, pass)) => Some(vec!["AUTH", pass]),
            None => None,
        };
        if let Some(args) = login {
            // Not through `query`, whose error repeats its arguments: never the password.
            match conn.call(&args) {
                Ok(Value::Error(e)) | Err(e) => return Err(format!("{addr} AUTH: {e}")),
                Ok(_) => {}
            }
        }
        Ok(conn)
    }

    /// Sends a command and reads its reply; an error reply is an `Err` with its text.
    pub fn query<T: FromValue>(&mut self, args: &[&str]) -> Fallible<T> {
        let reply = self.call(args).and_then(|v| match v {
            Value::Error(e) => Err(e),
            v => T::from_value(v),
        });
        reply.map_err(|e| format!("{} {}: {e}", self.addr, args.join(" ")))
    }

    fn call(&mut self, args: &[&str]) -> Fallible<Value> {
        if self.broken {
            return Err("the connection failed earlier".into());
        }
        self.broken = true;
        let mut out = BytesMut::new();
        value::encode_command(&mut out, args);
        self.stream.write_all(&out).map_err(|e| e.to_string())?;
        let mut chunk = [0u8; 16 * 1024];
        loop {
            if let Some(v) = value::decode(&mut self.buf).map_err(|e| e.to_string())? {
                self.broken = false;
                return Ok(v);
            }
            match self.stream.read(&mut chunk).map_err(|e| e.to_string())? {
                0 => return Err("the node closed the connection".into()),
                n => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    pub fn myid(&mut self) -> Fallible<String> {
        self.query(&["CLUSTER", "MYID"])
    }

    /// The node's `--tls-port` (`CONFIG GET tls-port`); `None` without one, or from a node
    /// that does not know the setting.
    pub fn tls_port(&mut self) -> Fallible<Option<u16>> {
        let port = self.setting("tls-port")?;
        Ok(port.and_then(|p| p.parse().ok()).filter(|&p| p != 0))
    }

    /// `CONFIG GET name`'s value; `None` from a node that does not know the setting.
    pub fn setting(&mut self, name: &str) -> Fallible<Option<String>> {
        let reply: Vec<String> = self.query(&["CONFIG", "GET", name])?;
        Ok(match <[String; 2]>::try_from(reply) {
            Ok([_, value]) => Some(value),
            Err(_) => None,
        })
    }

    /// `name` from `INFO section`.
    pub fn field(&mut self, section: &str, name: &str) -> Fallible<Option<String>> {
        let text: String = self.query(&["INFO", section])?;
        Ok(find_field(&text, name))
    }

    /// `name` from `CLUSTER INFO`.
    pub fn cluster_field(&mut self, name: &str) -> Fallible<Option<String>> {
        let text: String = self.query(&["CLUSTER", "INFO"])?;
        Ok(find_field(&text, name))
    }

    pub fn table(&mut self) -> Fallible<Option<SlotTable>> {
        let text: Option<String> = self.query(&["CLUSTER", "GETTABLE"])?;
        text.map(|t| SlotTable::decode(&t).map_err(|e| format!("{}: bad table: {e}", self.addr)))
            .transpose()
    }

    /// A cluster-mode node, as a table `Node`, with the table it holds (if any).
    pub fn cluster_node(&mut self) -> Fallible<(Node, Option<SlotTable>)> {
        if self.field("cluster", "cluster_enabled")?.as_deref() != Some("1") {
            return Err(format!(
                "{} is not in cluster mode (start it with --cluster yes)",
                self.addr
            ));
        }
        let id = self.myid()?;
        let node = Node {
            id,
            host: self.host.clone(),
            port: self.port,
            tls_port: self.tls_port()?,
        };
        Ok((node, self.table()?))
    }

    /// A cluster-mode node that belongs to no cluster yet, as a table `Node`.
    pub fn empty_node(&mut self) -> Fallible<Node> {
        let (node, table) = self.cluster_node()?;
        // A node that read the table from etcd knows it, but is not in it yet.
        if let Some(t) = table
            && t.shard_of(&node.id).is_some()
        {
            return Err(format!(
                "{} already belongs to a cluster (table epoch {})",
                self.addr, t.epoch
            ));
        }
        Ok(node)
    }

    /// Gives the node `table`. A node that already holds exactly this table took it: nodes
    /// pass new tables to each other, so one may have it from a peer before this push arrives
    /// (it answers "not newer").
    pub fn push(&mut self, table: &SlotTable) -> Fallible<()> {
        let text = table.encode();
        match self.query::<String>(&["CLUSTER", "SETTABLE", &text]) {
            Err(e) if e.contains("not newer") && self.table()?.as_ref() == Some(table) => Ok(()),
            other => other.map(drop),
        }
    }
}

/// The value of `name:value` in an INFO-style text.
fn find_field(text: &str, name: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .map(|v| v.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A node that answers each command with the next of `replies`, written a byte at a time
    /// so that every reply arrives split over reads.
    fn fake_node(replies: &'static [&'static [u8]]) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = BytesMut::new();
            let mut chunk = [0u8; 1024];
            for reply in replies {
                // One whole command in, then its reply out.
                while value::decode(&mut buf).unwrap().is_none() {
                    let n = s.read(&mut chunk).unwrap();
                    buf.extend_from_slice(&chunk[..n]);
                }
                for b in *reply {
                    s.write_all(&[*b]).unwrap();
                }
            }
        });
        addr
    }

    #[test]
    fn replies_convert_to_what_the_caller_expects() {
        let addr = fake_node(&[
            b"+OK\r\n",
            b"$9\r\nepoch 3\r\n\r\n",
            b"$-1\r\n",
            b":42\r\n",
            b"*2\r\n:2\r\n:17\r\n",
            b"*2\r\n$3\r\na b\r\n+c\r\n",
            b"-ERR not newer\r\n",
            b"+still in step\r\n",
        ]);
        let mut c = Conn::open(Some((None, "secret")), &addr).unwrap();
        assert_eq!(c.query::<String>(&["GET", "x"]).unwrap(), "epoch 3\r\n");
        assert_eq!(c.query::<Option<String>>(&["GET", "y"]).unwrap(), None);
        assert_eq!(c.query::<i64>(&["DBSIZE"]).unwrap(), 42);
        assert_eq!(
            c.query::<(i64, i64)>(&["CLUSTER", "MIGRATE-STATUS"])
                .unwrap(),
            (2, 17)
        );
        assert_eq!(
            c.query::<Vec<String>>(&["CLUSTER", "IMPORT-STATUS"])
                .unwrap(),
            vec!["a b".to_string(), "c".to_string()]
        );
        let refused = c
            .query::<String>(&["CLUSTER", "SETTABLE", "t"])
            .unwrap_err();
        assert_eq!(refused, format!("{addr} CLUSTER SETTABLE t: ERR not newer"));
        // An error reply leaves the connection usable.
        assert_eq!(c.query::<String>(&["PING"]).unwrap(), "still in step");
    }

    #[test]
    fn a_failed_connection_is_not_used_again() {
        let addr = fake_node(&[b"+OK\r\n", b"#x\r\n"]);
        let mut c = Conn::open(None, &addr).unwrap();
        assert_eq!(
            c.query::<i64>(&["PING"]).unwrap_err(),
            format!("{addr} PING: unexpected reply: OK")
        );
        assert!(c.query::<String>(&["PING"]).is_err());
        let again = c.query::<String>(&["PING"]).unwrap_err();
        assert!(again.contains("failed earlier"), "{again}");
        let unreachable = Conn::open(None, "127.0.0.1:1").err().unwrap();
        assert!(
            unreachable.starts_with("cannot reach 127.0.0.1:1: "),
            "{unreachable}"
        );
    }
}
