//! A small async RESP2 client for node-to-node calls: a replica's handshake with its primary,
//! a node asking its peers for the newest slot table, a promoted replica pushing its table, a
//! node importing slots. Peers that require a password are sent `AUTH` first.
//! Replies are decoded with `redis-protocol`; every call has a deadline.

use std::time::Duration;

use bytes::{Buf, BytesMut};
use redis_protocol::resp2::decode::decode;
pub use redis_protocol::resp2::types::OwnedFrame as Reply;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long connecting and each reply may take.
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// One connection to a peer.
#[derive(Debug)]
pub struct Peer {
    pub stream: TcpStream,
    /// Bytes read past the last reply (a replica's snapshot may follow PSYNC's line).
    pub buf: BytesMut,
}

impl Peer {
    pub async fn connect(host: &str, port: u16) -> Result<Peer, String> {
        let stream = tokio::time::timeout(TIMEOUT, TcpStream::connect((host, port)))
            .await
            .map_err(|_| format!("connecting to {host}:{port} timed out"))?
            .map_err(|e| format!("cannot connect to {host}:{port}: {e}"))?;
        let _ = stream.set_nodelay(true);
        Ok(Peer {
            stream,
            buf: BytesMut::with_capacity(64 * 1024),
        })
    }

    /// Connects, then sends `AUTH password` if there is one: a peer with `--requirepass`
    /// answers nothing else.
    pub async fn connect_auth(
        host: &str,
        port: u16,
        password: Option<&str>,
    ) -> Result<Peer, String> {
        let mut peer = Peer::connect(host, port).await?;
        if let Some(pass) = password {
            let reply = peer.call(&[b"AUTH", pass.as_bytes()]).await?;
            if !is_ok(&reply) {
                return Err(format!("AUTH refused: {}", text(&reply)));
            }
        }
        Ok(peer)
    }

    /// Sends one command.
    pub async fn send(&mut self, args: &[&[u8]]) -> Result<(), String> {
        let mut out = Vec::with_capacity(64);
        out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        self.stream.write_all(&out).await.map_err(|e| e.to_string())
    }

    /// Reads one reply, waiting at most `timeout`.
    pub async fn reply_within(&mut self, timeout: Duration) -> Result<Reply, String> {
        loop {
            match decode(&self.buf) {
                Ok(Some((frame, used))) => {
                    self.buf.advance(used);
                    return Ok(frame);
                }
                Ok(None) => {}
                Err(e) => return Err(format!("bad reply from peer: {e:?}")),
            }
            let read = tokio::time::timeout(timeout, self.stream.read_buf(&mut self.buf))
                .await
                .map_err(|_| "timed out waiting for the peer".to_string())?
                .map_err(|e| e.to_string())?;
            if read == 0 {
                return Err("peer closed the connection".into());
            }
        }
    }

    /// Sends a command and reads its reply.
    pub async fn call(&mut self, args: &[&[u8]]) -> Result<Reply, String> {
        self.send(args).await?;
        self.reply_within(TIMEOUT).await
    }

    /// Reads one `\r\n`-terminated line (for replies that are not whole RESP values, such as
    /// the `$<len>` header before a snapshot). No deadline: a primary may take a while.
    pub async fn line(&mut self) -> Result<String, String> {
        loop {
            if let Some(pos) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8_lossy(&self.buf[..pos]).into_owned();
                self.buf.advance(pos + 2);
                return Ok(line);
            }
            if self.buf.len() > 64 * 1024 {
                return Err("peer sent an overlong line".into());
            }
            if self
                .stream
                .read_buf(&mut self.buf)
                .await
                .map_err(|e| e.to_string())?
                == 0
            {
                return Err("peer closed the connection".into());
            }
        }
    }
}

/// A status or error reply as one line of text (`+OK` → `OK`, `-ERR x` → `ERR x`).
pub fn text(reply: &Reply) -> String {
    match reply {
        Reply::SimpleString(s) | Reply::BulkString(s) => String::from_utf8_lossy(s).into_owned(),
        Reply::Error(e) => e.clone(),
        Reply::Integer(n) => n.to_string(),
        Reply::Null => "(nil)".into(),
        Reply::Array(a) => format!("array of {}", a.len()),
    }
}

/// True for `+OK...`.
pub fn is_ok(reply: &Reply) -> bool {
    matches!(reply, Reply::SimpleString(s) if s.starts_with(b"OK"))
}
