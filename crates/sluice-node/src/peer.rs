//! A small async RESP client for node-to-node calls: a replica's handshake with its primary,
//! a node asking its peers for the newest slot table, a promoted replica pushing its table, a
//! node importing slots. Peers that require a password are sent `AUTH` first.
//! Commands and replies go through `sluice_resp::value`, the codec every Sluice client uses;
//! every call has a deadline.

use std::time::Duration;

use bytes::{Buf, BytesMut};
use sluice_resp::value::{self, Value};
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
    /// The connection runs over TLS (through the relay task).
    pub tls: bool,
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
            tls: false,
        })
    }

    /// Connects over TLS (`--tls-replication`): the session runs in a relay task and this
    /// peer reads and writes its plain end (see [`crate::tls::connect_relay`]).
    pub async fn connect_tls(
        host: &str,
        port: u16,
        config: std::sync::Arc<rustls::ClientConfig>,
    ) -> Result<Peer, String> {
        let stream = tokio::time::timeout(TIMEOUT, crate::tls::connect_relay(host, port, config))
            .await
            .map_err(|_| format!("connecting to {host}:{port} over TLS timed out"))?
            .map_err(|e| format!("cannot connect to {host}:{port} over TLS: {e}"))?;
        Ok(Peer {
            stream,
            buf: BytesMut::with_capacity(64 * 1024),
            tls: true,
        })
    }

    /// `AUTH [user] password`; `Err` with the peer's answer if refused.
    pub async fn login(&mut self, auth: &sluice_client::Credentials) -> Result<(), String> {
        let pass = auth.password.as_bytes();
        let reply = match &auth.user {
            Some(user) => self.call(&[b"AUTH", user.as_bytes(), pass]).await?,
            None => self.call(&[b"AUTH", pass]).await?,
        };
        if !reply.is_ok() {
            return Err(format!("AUTH refused: {}", reply.text()));
        }
        Ok(())
    }

    /// Sends one command.
    pub async fn send(&mut self, args: &[&[u8]]) -> Result<(), String> {
        let mut out = BytesMut::with_capacity(64);
        value::encode_command(&mut out, args);
        self.stream.write_all(&out).await.map_err(|e| e.to_string())
    }

    /// Reads one reply, waiting at most `timeout`. Bytes after it stay in `buf`.
    pub async fn reply_within(&mut self, timeout: Duration) -> Result<Value, String> {
        loop {
            match value::decode(&mut self.buf) {
                Ok(Some(reply)) => return Ok(reply),
                Ok(None) => {}
                Err(e) => return Err(format!("bad reply from peer: {e}")),
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
    pub async fn call(&mut self, args: &[&[u8]]) -> Result<Value, String> {
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
