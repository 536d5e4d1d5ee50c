//! The listener both HTTP servers accept through: at most [`MAX_CONNECTIONS`] open at once
//! (past that, new ones wait in the kernel's backlog), and a connection that neither sends nor
//! takes a byte for [`IDLE`] is closed — a client that sends half a request and stalls (or
//! holds a keep-alive connection forever) costs a socket for that long, not for good. The head
//! itself has a shorter bound, hyper's header-read timeout, set where connections are served
//! (the `serve` module).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

/// The most connections served at once.
pub const MAX_CONNECTIONS: usize = 8192;

/// How long a connection may stay silent both ways.
pub const IDLE: Duration = Duration::from_secs(30);

/// A TCP listener with a connection cap and an idle deadline per connection.
#[derive(Debug)]
pub struct Guarded {
    inner: TcpListener,
    permits: Arc<Semaphore>,
    idle: Duration,
}

impl Guarded {
    pub fn new(inner: TcpListener, max: usize, idle: Duration) -> Guarded {
        Guarded {
            inner,
            permits: Arc::new(Semaphore::new(max)),
            idle,
        }
    }
}

/// One accepted connection: its stream, its deadline, and its place under the cap.
#[derive(Debug)]
pub struct Conn {
    stream: TcpStream,
    deadline: Pin<Box<Sleep>>,
    idle: Duration,
    _permit: OwnedSemaphorePermit,
}

impl axum::serve::Listener for Guarded {
    type Io = Conn;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Conn, std::net::SocketAddr) {
        loop {
            let Ok(permit) = self.permits.clone().acquire_owned().await else {
                // Never closed; wait out a spurious failure rather than spin.
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            match self.inner.accept().await {
                Ok((stream, addr)) => {
                    let _ = stream.set_nodelay(true);
                    let conn = Conn {
                        stream,
                        deadline: Box::pin(tokio::time::sleep(self.idle)),
                        idle: self.idle,
                        _permit: permit,
                    };
                    return (conn, addr);
                }
                // Out of descriptors and the like: back off instead of spinning.
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    fn local_addr(&self) -> io::Result<std::net::SocketAddr> {
        self.inner.local_addr()
    }
}

impl Conn {
    fn touched(&mut self) {
        self.deadline.as_mut().reset(Instant::now() + self.idle);
    }

    /// `Pending`, or the idle deadline's error once it has passed.
    fn pending_or_idle<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::ErrorKind::TimedOut.into())),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.stream).poll_read(cx, buf) {
            Poll::Ready(r) => {
                if buf.filled().len() > before {
                    this.touched();
                }
                Poll::Ready(r)
            }
            Poll::Pending => this.pending_or_idle(cx),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.stream).poll_write(cx, buf) {
            Poll::Ready(r) => {
                this.touched();
                Poll::Ready(r)
            }
            Poll::Pending => this.pending_or_idle(cx),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::serve::Listener;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_silent_connection_is_closed_and_the_cap_holds_back_the_next() {
        let inner = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = inner.local_addr().unwrap();
        let mut l = Guarded::new(inner, 1, Duration::from_millis(200));
        let mut client = TcpStream::connect(addr).await.unwrap();
        let (mut conn, _) = l.accept().await;
        client.write_all(b"GET / HT").await.unwrap();
        let mut buf = [0u8; 64];
        assert_eq!(conn.read(&mut buf).await.unwrap(), 8);
        // Then silence: the read fails once the idle time passes.
        let started = std::time::Instant::now();
        let err = conn.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= Duration::from_millis(150));
        // At the cap, the next connection waits until this one goes.
        let _second = TcpStream::connect(addr).await.unwrap();
        let waited = tokio::time::timeout(Duration::from_millis(100), l.accept()).await;
        assert!(waited.is_err(), "accepted past the cap");
        drop(conn);
        let next = tokio::time::timeout(Duration::from_secs(5), l.accept()).await;
        assert!(next.is_ok(), "a freed place is taken");
    }
}
