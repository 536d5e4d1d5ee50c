//! Fuzzes `sluice_resp::Parser`: the bytes a client sends, whole and cut into chunks.
//!
//! # Input
//! `[limits] [n] [n chunk sizes] [stream...]`. The first byte picks the protocol limits (Redis's
//! defaults, or tiny ones so the "too big"/"invalid length" checks fire on short inputs); the
//! second says how many of the following bytes are chunk sizes, used in turn to cut the stream
//! (a size of 0 calls `parse` again with nothing new appended). Missing header bytes mean
//! defaults and a byte-at-a-time split.
//!
//! # Invariants
//! - No input panics the parser.
//! - Whole and chunked agree on the requests, the final error or need-more state and the bytes
//!   left unconsumed. The one allowed difference is Redis's: a "too big" error fires while a
//!   line's end has not arrived, so a chunked stream may stop early with one where the whole
//!   stream read a long (but terminated) line; its requests are then a prefix of the whole's.
//! - A request is never empty, and its arguments are slices of the read buffer (not copies); a
//!   multibulk argument is exactly the input bytes at its offset.
//! - An error reply is one line: `-ERR Protocol error: ...\r\n` with no CR or LF inside.
//! - `Parser::peek_key` (the prefetch's look ahead) never panics, and when it names a key and
//!   the parser then reads a multibulk request from the same buffer, that request's second
//!   argument is those very bytes (same address, same length): the connection loop hands the
//!   key's hash to the check on that match alone.

#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use sluice_resp::{Limits, Parser, ProtocolError, ProtocolErrorKind, Request};

/// Tiny limits make every limit check reachable with inputs of a few dozen bytes.
fn limits(selector: u8) -> Limits {
    match selector % 4 {
        0 => Limits::default(),
        1 => Limits {
            max_bulk_len: 8,
            max_multibulk_len: 4,
            max_inline_len: 16,
        },
        2 => Limits {
            max_bulk_len: 0,
            max_multibulk_len: 1,
            max_inline_len: 1,
        },
        _ => Limits {
            max_bulk_len: 100,
            max_multibulk_len: 32,
            max_inline_len: 64,
        },
    }
}

/// Everything one parse run produced.
#[derive(Debug)]
struct Outcome {
    requests: Vec<Request>,
    end: Result<(), ProtocolError>,
    /// What is still buffered at the end (meaningful when `end` is `Ok`).
    left: Vec<u8>,
}

/// The read buffer's allocation: arguments must point into it. The buffer is created with room
/// for the whole stream and only appended to, so it never moves.
struct Arena {
    base: usize,
    len: usize,
}

impl Arena {
    fn check(&self, input: &[u8], request: &Request) {
        assert!(!request.is_empty(), "empty request");
        for arg in request.args() {
            let start = arg.as_ptr() as usize;
            // An empty argument may be a dangling slice of any buffer; only its length matters.
            if arg.is_empty() {
                continue;
            }
            assert!(
                start >= self.base && start + arg.len() <= self.base + self.len,
                "argument {arg:?} is not a slice of the read buffer"
            );
            if !request.is_inline() {
                let offset = start - self.base;
                assert_eq!(
                    &arg[..],
                    &input[offset..offset + arg.len()],
                    "multibulk argument differs from the input at its offset"
                );
            }
        }
    }
}

fn check_error_reply(e: &ProtocolError) {
    let mut out = BytesMut::new();
    e.write_reply(&mut out);
    assert!(out.starts_with(b"-ERR Protocol error: "), "{out:?}");
    assert!(out.ends_with(b"\r\n"), "{out:?}");
    let body = &out[..out.len() - 2];
    assert!(
        !body.iter().any(|&b| b == b'\r' || b == b'\n'),
        "CR or LF inside an error reply: {out:?}"
    );
    // Display never panics and matches the reply for ASCII bytes.
    let text = e.to_string();
    if body.is_ascii() {
        assert_eq!(&body[5..], text.as_bytes());
    }
}

/// Parses `stream` appended in chunks of the given sizes (cycled); an empty `sizes` means whole.
fn run(limits: Limits, stream: &[u8], sizes: &[u8]) -> Outcome {
    let mut parser = Parser::new(limits);
    let mut buf = BytesMut::with_capacity(stream.len());
    let arena = Arena {
        base: buf.as_ptr() as usize,
        len: buf.capacity(),
    };
    let mut requests = Vec::new();
    let mut fed = 0;
    let mut turn = 0;
    loop {
        let size = if sizes.is_empty() {
            stream.len()
        } else {
            usize::from(sizes[turn % sizes.len()])
        };
        turn += 1;
        let next = (fed + size).min(stream.len());
        buf.extend_from_slice(&stream[fed..next]);
        fed = next;
        assert_eq!(
            buf.as_ptr() as usize + buf.len(),
            arena.base + fed,
            "buffer moved"
        );
        loop {
            let peeked =
                Parser::peek_key(&buf, b"RL.CHECK").map(|k| (k.as_ptr() as usize, k.len()));
            match parser.parse(&mut buf) {
                Ok(Some(request)) => {
                    arena.check(stream, &request);
                    if let Some((addr, len)) = peeked
                        && !request.is_inline()
                    {
                        let key = request
                            .arg(1)
                            .expect("a peeked frame has a second argument");
                        assert_eq!((key.as_ptr() as usize, key.len()), (addr, len), "peek_key");
                    }
                    requests.push(request);
                }
                Ok(None) => {
                    let _ = parser.bytes_needed(buf.len());
                    break;
                }
                Err(e) => {
                    check_error_reply(&e);
                    return Outcome {
                        requests,
                        end: Err(e),
                        left: buf.to_vec(),
                    };
                }
            }
        }
        // Once everything is fed, zero-sized chunks must not loop forever.
        if fed == stream.len() && (sizes.is_empty() || turn >= sizes.len()) {
            return Outcome {
                requests,
                end: Ok(()),
                left: buf.to_vec(),
            };
        }
    }
}

fn too_big(e: &ProtocolError) -> bool {
    matches!(
        e.kind(),
        ProtocolErrorKind::TooBigInlineRequest
            | ProtocolErrorKind::TooBigMbulkCount
            | ProtocolErrorKind::TooBigBulkCount
    )
}

fn args(requests: &[Request]) -> Vec<(bool, Vec<Bytes>)> {
    requests
        .iter()
        .map(|r| {
            let owned = (0..r.len())
                .map(|i| r.arg_bytes(i).expect("in range"))
                .collect();
            (r.is_inline(), owned)
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let (selector, rest) = data.split_first().map_or((0, data), |(&s, r)| (s, r));
    let (count, rest) = rest.split_first().map_or((0, rest), |(&c, r)| (c, r));
    let count = usize::from(count % 16).min(rest.len());
    let (sizes, stream) = rest.split_at(count);
    // Sizes that never feed a byte would never finish: fall back to a byte at a time.
    let sizes: &[u8] = if sizes.iter().all(|&s| s == 0) {
        &[1]
    } else {
        sizes
    };
    let limits = limits(selector);

    let whole = run(limits, stream, &[]);
    let chunked = run(limits, stream, sizes);

    match &chunked.end {
        // Whole may have read past this point, or stopped at a later "too big" of its own.
        Err(e) if too_big(e) => {
            let (w, c) = (args(&whole.requests), args(&chunked.requests));
            assert!(
                c.len() <= w.len() && w[..c.len()] == c[..],
                "chunked requests before {e} are not a prefix of the whole's:\nwhole {w:?}\nchunked {c:?}"
            );
        }
        _ => {
            assert_eq!(
                args(&whole.requests),
                args(&chunked.requests),
                "whole and chunked decode different requests"
            );
            assert_eq!(whole.end, chunked.end, "whole and chunked end differently");
            // After an error the chunked run has not been fed the rest, so only a clean end
            // has comparable leftovers.
            if whole.end.is_ok() {
                assert_eq!(
                    whole.left, chunked.left,
                    "whole and chunked leave different bytes"
                );
            }
        }
    }
});
