//! The bytes of one client connection: plain TCP, a Unix stream (`--unixsocket`), or TLS over
//! TCP driven the same way.
//!
//! [`Stream`] is the socket, whichever kind: both loops read and write it without caring which
//! (the io_uring loop only needs its descriptor, [`StdStream`]). A Unix stream is always plain:
//! as Redis, TLS is spoken on the TLS port only.
//!
//! The connection loop waits on the socket's readiness and then reads or writes what the
//! socket takes without blocking. For TLS it keeps that shape: rustls's connection state is
//! fed the ciphertext the socket has ([`Wire::read`]) and hands back plaintext; replies go
//! into rustls and its ciphertext goes out as the socket takes it ([`Wire::send`]). Ciphertext
//! rustls still holds (a handshake message, a reply the socket did not take) is
//! [`Wire::pending`], so the loop waits for the socket to be writable for it as it does for
//! unsent replies. No extra task, no extra copy of the request bytes.

use std::io::{self, ErrorKind::WouldBlock, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

use bytes::BytesMut;
use rustls::ServerConnection;
use tokio::net::{TcpStream, UnixStream};

/// A client's socket, registered with this thread's runtime.
#[derive(Debug)]
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    pub fn try_read_buf(&self, buf: &mut BytesMut) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.try_read_buf(buf),
            Stream::Unix(s) => s.try_read_buf(buf),
        }
    }

    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.try_read(buf),
            Stream::Unix(s) => s.try_read(buf),
        }
    }

    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.try_write(buf),
            Stream::Unix(s) => s.try_write(buf),
        }
    }

    pub async fn readable(&self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.readable().await,
            Stream::Unix(s) => s.readable().await,
        }
    }

    pub async fn writable(&self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.writable().await,
            Stream::Unix(s) => s.writable().await,
        }
    }

    /// Out of the runtime, for the io_uring loop (still non-blocking).
    pub fn into_std(self) -> io::Result<StdStream> {
        Ok(match self {
            Stream::Tcp(s) => StdStream::Tcp(s.into_std()?),
            Stream::Unix(s) => StdStream::Unix(s.into_std()?),
        })
    }

    /// Into this thread's runtime; `stream` must be non-blocking.
    pub fn from_std(stream: StdStream) -> io::Result<Stream> {
        Ok(match stream {
            StdStream::Tcp(s) => Stream::Tcp(TcpStream::from_std(s)?),
            StdStream::Unix(s) => Stream::Unix(UnixStream::from_std(s)?),
        })
    }
}

impl AsFd for Stream {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Stream::Tcp(s) => s.as_fd(),
            Stream::Unix(s) => s.as_fd(),
        }
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        self.as_fd().as_raw_fd()
    }
}

/// A client's socket outside any runtime: what the io_uring loop holds.
#[derive(Debug)]
pub enum StdStream {
    Tcp(std::net::TcpStream),
    Unix(std::os::unix::net::UnixStream),
}

impl StdStream {
    pub fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        match self {
            StdStream::Tcp(s) => s.set_nonblocking(nonblocking),
            StdStream::Unix(s) => s.set_nonblocking(nonblocking),
        }
    }

    pub fn shutdown(&self, how: std::net::Shutdown) -> io::Result<()> {
        match self {
            StdStream::Tcp(s) => s.shutdown(how),
            StdStream::Unix(s) => s.shutdown(how),
        }
    }
}

impl AsRawFd for StdStream {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            StdStream::Tcp(s) => s.as_raw_fd(),
            StdStream::Unix(s) => s.as_raw_fd(),
        }
    }
}

/// How a connection's bytes travel.
#[derive(Debug)]
pub enum Wire {
    Plain,
    Tls(Box<ServerConnection>),
}

/// The socket as `std::io` sees it, non-blocking (`WouldBlock` when it has nothing or takes
/// nothing).
struct Sock<'a>(&'a Stream);

impl Read for Sock<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.try_read(buf)
    }
}

impl Write for Sock<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Wire {
    /// Reads what the socket has into `rbuf`: `Ok(0)` at the end of the stream, `WouldBlock`
    /// when nothing (no plaintext yet) is there.
    pub fn read(&mut self, stream: &Stream, rbuf: &mut BytesMut) -> io::Result<usize> {
        let Wire::Tls(tls) = self else {
            return stream.try_read_buf(rbuf);
        };
        if tls.read_tls(&mut Sock(stream))? == 0 {
            return Ok(0);
        }
        let state = match tls.process_new_packets() {
            Ok(state) => state,
            Err(e) => {
                // The alert rustls queued tells the client why; the log tells the operator.
                let _ = tls.write_tls(&mut Sock(stream));
                if tls.is_handshaking() {
                    match stream {
                        Stream::Tcp(s) => match s.peer_addr() {
                            Ok(peer) => crate::tls::refused(&peer, &e),
                            Err(_) => crate::tls::refused(&"an unknown peer", &e),
                        },
                        Stream::Unix(_) => crate::tls::refused(&"a Unix socket client", &e),
                    }
                }
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
        };
        let available = state.plaintext_bytes_to_read();
        let closed = state.peer_has_closed();
        flush_tls(tls, stream)?;
        if available == 0 {
            return if closed {
                Ok(0)
            } else {
                Err(WouldBlock.into())
            };
        }
        let start = rbuf.len();
        rbuf.resize(start + available, 0);
        tls.reader().read_exact(&mut rbuf[start..])?;
        Ok(available)
    }

    /// Sends what the socket (and rustls's buffer) takes of `out`; `WouldBlock` if nothing.
    pub fn send(&mut self, stream: &Stream, out: &[u8]) -> io::Result<usize> {
        let Wire::Tls(tls) = self else {
            return stream.try_write(out);
        };
        flush_tls(tls, stream)?;
        let taken = tls.writer().write(out)?;
        flush_tls(tls, stream)?;
        if taken == 0 && !out.is_empty() {
            return Err(WouldBlock.into());
        }
        Ok(taken)
    }

    /// Sends ciphertext rustls holds, as far as the socket takes it.
    pub fn flush(&mut self, stream: &Stream) -> io::Result<()> {
        match self {
            Wire::Plain => Ok(()),
            Wire::Tls(tls) => flush_tls(tls, stream),
        }
    }

    /// Whether ciphertext waits for the socket to be writable.
    pub fn pending(&self) -> bool {
        matches!(self, Wire::Tls(tls) if tls.wants_write())
    }

    /// Queues TLS's close_notify and sends it if the socket takes it now.
    pub fn close(&mut self, stream: &Stream) {
        if let Wire::Tls(tls) = self {
            tls.send_close_notify();
            let _ = flush_tls(tls, stream);
        }
    }
}

/// Writes rustls's ciphertext until it has none or the socket takes no more.
fn flush_tls(tls: &mut ServerConnection, stream: &Stream) -> io::Result<()> {
    while tls.wants_write() {
        match tls.write_tls(&mut Sock(stream)) {
            Ok(_) => {}
            Err(e) if e.kind() == WouldBlock => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

impl Wire {
    /// Hands a TLS connection (or a Unix stream) over as a plain TCP socket: a loopback
    /// connection whose other end a task on this runtime carries through the TLS session (or
    /// to the Unix stream) both ways (a replica's PSYNC on the TLS port or the Unix socket:
    /// the replication thread feeds a `TcpStream`).
    pub async fn relay(self, stream: Stream) -> io::Result<TcpStream> {
        let (near, far) = crate::tls::loopback_pair().await?;
        tokio::spawn(carry(self, stream, near));
        Ok(far)
    }
}

/// Carries bytes between the TLS client on `stream` and the plain socket `near` until either
/// side closes.
async fn carry(mut wire: Wire, stream: Stream, mut near: TcpStream) {
    use bytes::Buf;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut from_client = BytesMut::with_capacity(16 * 1024);
    let mut to_client = BytesMut::with_capacity(64 * 1024);
    loop {
        tokio::select! {
            ready = stream.readable() => {
                if ready.is_err() {
                    break;
                }
                match wire.read(&stream, &mut from_client) {
                    Ok(0) => break,
                    Ok(_) => {
                        if near.write_all(&from_client).await.is_err() {
                            break;
                        }
                        from_client.clear();
                    }
                    Err(e) if e.kind() == WouldBlock => {}
                    Err(_) => break,
                }
            }
            read = near.read_buf(&mut to_client), if to_client.is_empty() => {
                if !matches!(read, Ok(n) if n > 0) {
                    break;
                }
            }
            ready = stream.writable(), if !to_client.is_empty() || wire.pending() => {
                if ready.is_err() {
                    break;
                }
                let sent = if to_client.is_empty() {
                    wire.flush(&stream).map(|()| 0)
                } else {
                    wire.send(&stream, &to_client)
                };
                match sent {
                    Ok(n) => to_client.advance(n),
                    Err(e) if e.kind() == WouldBlock => {}
                    Err(_) => break,
                }
            }
        }
    }
}
