//! One route answered straight off the socket, before hyper sees the connection: a keep-alive
//! HTTP/1.1 request with exactly the route's method and path, a `Content-Length` body that
//! came whole with it, and none of the headers that change how a connection goes on. Every
//! other request, and the rest of its connection, goes to hyper with the bytes read so far
//! ([`Prefixed`]), so hyper parses them as if it had read them itself.
//!
//! # What is served here
//! A head that `httparse` (hyper's parser, with hyper's configuration) reads whole, of at most
//! [`MAX_HEAD`] bytes and [`HEADERS`] lines, with method `POST`, target exactly the route's path
//! (no query), version 1.1, one `Content-Length` of digits only and at most [`MAX_BODY`], and
//! no `Transfer-Encoding`, `Expect` or `Upgrade`, and no `Connection` but `keep-alive`; and its
//! whole body already read. Hyper keeps such a connection alive and reads such a body to its
//! end, and so does this loop.
//!
//! As hyper, the loop parses a head only once its end (a blank line) has arrived, looking for
//! it in the bytes each read adds: a head that trickles in costs a scan of each byte once, not
//! a parse of the whole buffer per read.
//!
//! # What stays as hyper has it
//! - The head timeout: the next head must arrive whole within [`HEAD_TIMEOUT`] of the
//!   connection's start or of the previous response, else the connection is closed without a
//!   reply, as hyper's header-read timeout does.
//! - A head that is incomplete when [`MAX_HEAD`] bytes are read, that hyper's parser refuses,
//!   or that is not served here, and a connection that ends in the middle of a head, are handed
//!   to hyper: it answers `431` or `400`, or serves the request, or ends the connection.
//! - The response is written as hyper writes it: the status line, the headers in order with
//!   their lowercase names, `content-length` and `date` after them when the response does not
//!   set them (the test in `tests/direct.rs` compares the bytes of both paths).

use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::SystemTime;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::time::Instant;

use crate::reply::Refusal;
use crate::verdict::Part;
use crate::{HEAD_TIMEOUT, MAX_BODY, MAX_HEAD, Verdict};

/// The most header lines of a head served here: hyper's own bound, so a head with more is one
/// hyper refuses too (`431`), and one with fewer is never handed to it part-read.
pub const HEADERS: usize = 100;

/// The most bytes of answers the output keeps room for between writes: a longer pipeline's
/// answers are written from room that is given back once they are out.
const OUT_KEPT: usize = 64 << 10;

/// What a request served here carries to its handler: the first `Authorization` and
/// `Content-Type` values (as a header map's `get` gives them) and the whole body.
#[derive(Debug)]
pub struct Request {
    pub authorization: Option<Bytes>,
    pub content_type: Option<Bytes>,
    pub body: Bytes,
}

/// A handler's answer: a verdict, written as [`crate::reply::respond`] with no deny status
/// answers it, or a refusal's response.
pub type Answer = Pin<Box<dyn Future<Output = Result<Verdict, Refusal>> + Send>>;

/// The handler of the route served here.
pub type Handler = Arc<dyn Fn(Request) -> Answer + Send + Sync>;

/// How a connection left this loop.
#[derive(Debug)]
pub enum Ended<IO> {
    /// Closed: the peer went away, a read failed, or the head timeout passed.
    Closed,
    /// The rest of the connection, for hyper, with the bytes read and not served.
    Handover(Prefixed<IO>),
}

/// Serves `path`'s requests on `io` with `handler` for as long as they come as this module
/// serves them (see the module's doc).
pub async fn serve<IO>(mut io: IO, path: &'static str, handler: &Handler) -> Ended<IO>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let mut buf = BytesMut::with_capacity(4096);
    let mut out = Vec::with_capacity(512);
    let mut body = Vec::with_capacity(256);
    // The head's time starts with the connection and again with each response, as hyper's.
    let head_timeout = tokio::time::sleep(HEAD_TIMEOUT);
    let mut head_timeout = std::pin::pin!(head_timeout);
    // The bytes of `buf` already looked at for the end of a head, none found.
    let mut scanned = 0;
    loop {
        let parsed = if head_ends(&buf, &mut scanned) {
            parse(&buf, path)
        } else {
            Parsed::Partial
        };
        let request = match parsed {
            Parsed::Request(r) => r,
            Parsed::Partial if buf.len() < MAX_HEAD => {
                if !out.is_empty() {
                    if io.write_all(&out).await.is_err() {
                        return Ended::Closed;
                    }
                    out.clear();
                    if out.capacity() > OUT_KEPT {
                        out = Vec::with_capacity(512);
                    }
                }
                if buf.capacity() - buf.len() < 1024 {
                    buf.reserve(4096);
                }
                let read = tokio::select! {
                    biased;
                    read = io.read_buf(&mut buf) => read,
                    () = &mut head_timeout => return Ended::Closed,
                };
                match read {
                    Ok(0) if buf.is_empty() => return Ended::Closed,
                    Ok(0) => return handover(io, buf, &out).await,
                    Ok(_) => continue,
                    Err(_) => return Ended::Closed,
                }
            }
            Parsed::Partial | Parsed::Other => return handover(io, buf, &out).await,
        };
        let whole = buf.split_to(request.body.end).freeze();
        scanned = 0;
        let mut answer = handler(Request {
            authorization: request.authorization.map(|r| whole.slice(r)),
            content_type: request.content_type.map(|r| whole.slice(r)),
            body: whole.slice(request.body),
        });
        drop(whole);
        // Answers to the requests before this one wait in `out` only while this one is
        // answered at once: one that waits (a check forwarded to its owner) sends them first.
        let ready = std::future::poll_fn(|cx| Poll::Ready(answer.as_mut().poll(cx))).await;
        let answer = match ready {
            Poll::Ready(answer) => answer,
            Poll::Pending => {
                if !out.is_empty() {
                    if io.write_all(&out).await.is_err() {
                        return Ended::Closed;
                    }
                    out.clear();
                }
                answer.await
            }
        };
        let keep_alive = match answer {
            Ok(v) => {
                write_verdict(&v, &mut out, &mut body);
                true
            }
            Err(r) => write_response(r.into_response(), &mut out).await,
        };
        if !keep_alive {
            let _ = io.write_all(&out).await;
            let _ = io.shutdown().await;
            return Ended::Closed;
        }
        head_timeout.as_mut().reset(Instant::now() + HEAD_TIMEOUT);
    }
}

/// Appends `v`'s response as hyper writes the one [`crate::reply::respond`] makes of it (no
/// deny status); `body` is scratch space.
fn write_verdict(v: &Verdict, out: &mut Vec<u8>, body: &mut Vec<u8>) {
    body.clear();
    v.write_json(body);
    out.extend_from_slice(if v.allowed {
        b"HTTP/1.1 200 OK\r\n"
    } else {
        b"HTTP/1.1 429 Too Many Requests\r\n"
    });
    out.extend_from_slice(b"content-type: application/json\r\n");
    v.each_header(|name, parts| {
        // As `respond`, which leaves out a value a header cannot carry (numbers always can).
        let carried = |p: &Part<'_>| match p {
            Part::Text(t) => t.bytes().all(|b| b == b'\t' || (b >= 32 && b != 127)),
            Part::Int(_) | Part::Uint(_) => true,
        };
        if !parts.iter().all(carried) {
            return;
        }
        out.extend_from_slice(name.wire().as_bytes());
        out.extend_from_slice(b": ");
        for part in parts {
            part.write(out);
        }
        out.extend_from_slice(b"\r\n");
    });
    push_tail(out, true, Some(body.len()));
    out.extend_from_slice(body);
}

/// Hands the connection to hyper once what was answered is written.
async fn handover<IO>(mut io: IO, buf: BytesMut, out: &[u8]) -> Ended<IO>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    if !out.is_empty() && io.write_all(out).await.is_err() {
        return Ended::Closed;
    }
    // Copied out, so the connection does not keep this loop's buffer for the rest of its life.
    let read = match buf.is_empty() {
        true => Bytes::new(),
        false => Bytes::copy_from_slice(&buf),
    };
    Ended::Handover(Prefixed { read, io })
}

/// A request served here: where its pieces are (the body ends the request).
struct Served {
    authorization: Option<std::ops::Range<usize>>,
    content_type: Option<std::ops::Range<usize>>,
    body: std::ops::Range<usize>,
}

enum Parsed {
    /// A request served here, whole in the buffer.
    Request(Served),
    /// Not a whole head yet.
    Partial,
    /// Anything else: hyper's.
    Other,
}

/// What the buffer starts with (see the module's doc for what is served here).
fn parse(buf: &[u8], path: &str) -> Parsed {
    // Left uninitialised, as hyper leaves them: httparse writes the ones it fills.
    let mut headers = [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; HEADERS];
    let mut req = httparse::Request::new(&mut []);
    let head_len = match req.parse_with_uninit_headers(buf, &mut headers) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::Other,
    };
    if head_len > MAX_HEAD
        || req.method != Some("POST")
        || req.path != Some(path)
        || req.version != Some(1)
    {
        return Parsed::Other;
    }
    let at = |s: &[u8]| {
        let start = s.as_ptr() as usize - buf.as_ptr() as usize;
        start..start + s.len()
    };
    let mut length = None;
    let mut authorization = None;
    let mut content_type = None;
    for h in req.headers.iter() {
        let name = h.name.as_bytes();
        if name.eq_ignore_ascii_case(b"content-length") {
            if length.is_some() {
                return Parsed::Other;
            }
            length = Some(match digits(h.value) {
                Some(n) if n <= MAX_BODY => n,
                _ => return Parsed::Other,
            });
        } else if name.eq_ignore_ascii_case(b"authorization") {
            authorization.get_or_insert_with(|| at(h.value));
        } else if name.eq_ignore_ascii_case(b"content-type") {
            content_type.get_or_insert_with(|| at(h.value));
        } else if name.eq_ignore_ascii_case(b"connection") {
            // What HTTP/1.1 does anyway; any other word (`close`, `upgrade`) is hyper's.
            if !h.value.eq_ignore_ascii_case(b"keep-alive") {
                return Parsed::Other;
            }
        } else if ["transfer-encoding", "expect", "upgrade"]
            .iter()
            .any(|n| name.eq_ignore_ascii_case(n.as_bytes()))
        {
            return Parsed::Other;
        }
    }
    let Some(length) = length else {
        return Parsed::Other;
    };
    let len = head_len + length;
    if buf.len() < len {
        return Parsed::Other;
    }
    Parsed::Request(Served {
        authorization,
        content_type,
        body: head_len..len,
    })
}

/// Whether `buf` holds the end of a head (`\r\n\r\n`, or `\n\n` as httparse also takes), looking
/// only at the bytes after `scanned` (and the three before them, where one may have begun), as
/// hyper does before it parses; `scanned` moves to the end.
fn head_ends(buf: &[u8], scanned: &mut usize) -> bool {
    let from = scanned.saturating_sub(3);
    *scanned = buf.len();
    let tail = buf.get(from..).unwrap_or_default();
    tail.windows(2).enumerate().any(|(i, w)| match w {
        b"\n\n" => true,
        b"\r\n" => tail.get(i + 2..i + 4) == Some(b"\r\n"),
        _ => false,
    })
}

/// A `Content-Length` value of digits only (hyper reads more forms; they go to it).
fn digits(value: &[u8]) -> Option<usize> {
    if value.is_empty() || value.len() > 9 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(value.iter().fold(0, |n, d| n * 10 + usize::from(d - b'0')))
}

/// Appends `content-length` (when `length` is given) and `date` as hyper appends them, and the
/// end of the head; `with_date` false when the response set its own.
fn push_tail(out: &mut Vec<u8>, with_date: bool, length: Option<usize>) {
    if let Some(n) = length {
        out.extend_from_slice(b"content-length: ");
        crate::digits::push(out, n);
        out.extend_from_slice(b"\r\n");
    }
    if with_date {
        out.extend_from_slice(b"date: ");
        push_date(out);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// Appends a refusal's response as hyper writes it; false when the connection is to close
/// after it (the response says `connection: close`, or its body does not read).
async fn write_response(r: Response, out: &mut Vec<u8>) -> bool {
    let (parts, body) = r.into_parts();
    let Ok(body) = axum::body::to_bytes(body, usize::MAX).await else {
        return false;
    };
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(parts.status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(
        parts
            .status
            .canonical_reason()
            .unwrap_or("<none>")
            .as_bytes(),
    );
    out.extend_from_slice(b"\r\n");
    for (name, value) in &parts.headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    let length = (!parts.headers.contains_key(header::CONTENT_LENGTH)).then_some(body.len());
    push_tail(out, !parts.headers.contains_key(header::DATE), length);
    out.extend_from_slice(&body);
    !parts.headers.contains_key(header::CONNECTION)
}

/// Appends the `date` value of this second, formatted once a second per thread (as hyper's).
fn push_date(out: &mut Vec<u8>) {
    thread_local! {
        static DATE: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
    }
    let now = SystemTime::now();
    let second = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    DATE.with_borrow_mut(|(at, text)| {
        if *at != second {
            *at = second;
            *text = httpdate::fmt_http_date(now);
        }
        out.extend_from_slice(text.as_bytes());
    });
}

/// A connection with bytes already read from it: reads return those first, then the stream's.
#[derive(Debug)]
pub struct Prefixed<IO> {
    read: Bytes,
    io: IO,
}

impl<IO> Prefixed<IO> {
    /// `io` with nothing read ahead.
    pub fn new(io: IO) -> Prefixed<IO> {
        Prefixed {
            read: Bytes::new(),
            io,
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Prefixed<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.read.is_empty() {
            return Pin::new(&mut this.io).poll_read(cx, buf);
        }
        let n = this.read.len().min(buf.remaining());
        buf.put_slice(&this.read[..n]);
        this.read.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Prefixed<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(extra: &str) -> String {
        format!("POST /v1/check HTTP/1.1\r\nHost: x\r\n{extra}Content-Length: 2\r\n\r\n{{}}")
    }

    #[test]
    fn the_end_of_a_head_is_found_in_any_pieces_and_each_byte_scanned_once() {
        for text in [check(""), "GET / HTTP/1.1\n\n".to_string()] {
            let bytes = text.as_bytes();
            let end = bytes.len() - if text.starts_with("POST") { 2 } else { 0 };
            // Every split of the head into two reads: found with the second, not the first.
            for cut in 1..end {
                let mut scanned = 0;
                assert!(
                    !head_ends(&bytes[..cut], &mut scanned) || cut >= end,
                    "{cut}"
                );
                assert_eq!(scanned, cut);
                assert!(head_ends(&bytes[..end], &mut scanned), "{cut}");
            }
        }
        let mut scanned = 0;
        assert!(!head_ends(b"POST / HTTP/1.1\r\nHost: x\r\n", &mut scanned));
        assert!(!head_ends(b"\r\n\r", &mut 0) && head_ends(b"\r\n\r\n", &mut 0));
    }

    #[test]
    fn what_is_served_here_and_what_goes_to_hyper() {
        let served = |text: &str| matches!(parse(text.as_bytes(), "/v1/check"), Parsed::Request(_));
        assert!(served(&check("")));
        assert!(served(&check("Connection: keep-alive\r\n")));
        assert!(served(&check("CONNECTION: Keep-Alive\r\n")));
        let many: String = (0..60).map(|i| format!("X-{i}: v\r\n")).collect();
        assert!(served(&check(&many)), "60 header lines are served here");
        let too_many: String = (0..HEADERS).map(|i| format!("X-{i}: v\r\n")).collect();
        assert!(
            !served(&check(&too_many)),
            "more than hyper's 100 go to hyper"
        );
        for hyper in [
            "Connection: close\r\n",
            "Connection: upgrade\r\n",
            "Transfer-Encoding: chunked\r\n",
            "Expect: 100-continue\r\n",
            "Content-Length: 2\r\n",
        ] {
            assert!(!served(&check(hyper)), "{hyper}");
        }
        assert!(!served(&check("").replace("HTTP/1.1", "HTTP/1.0")));
        assert!(!served(&check("").replace("/v1/check", "/v1/check?x")));
        // The body not all here yet: hyper reads the rest.
        let partial = check("");
        assert!(!served(&partial[..partial.len() - 1]));
    }
}
