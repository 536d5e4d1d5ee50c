//! Sluice's wire layer: the Redis protocol (RESP) as a server sees it, and as its clients see it.
//!
//! Requests come in as RESP2 multibulk frames (`*N\r\n$len\r\narg\r\n...`), which every client
//! library sends, or as inline commands (`PING\r\n`, `SET k "a b"\n`), which people type into
//! `telnet`/`nc`. Replies go out in RESP2 or RESP3, as the connection chose with `HELLO`.
//!
//! # Layout
//!
//! - [`parser`]: [`Parser`], the incremental request decoder. One per connection; it keeps its
//!   progress through a partial frame between reads, so no byte is scanned twice.
//! - `inline` (private): Redis's `sdssplitargs` quoting rules, decoding arguments in place.
//! - [`reply`]: free functions that append one RESP2/RESP3 value to an output buffer.
//! - [`value`]: the other side, for every program that calls a node (the sidecar, the admin
//!   tool, a node calling its peers): [`Value`], the incremental RESP2/RESP3 reply decoder, and
//!   the command encoder.
//!
//! # Invariants
//!
//! - Arguments are never copied: a decoded [`Request`] holds `Bytes` slices of the connection's
//!   read buffer, split off once the whole frame has arrived.
//! - A declared length never drives an allocation: the parser only reads what the caller buffered,
//!   so `$2147483647` costs nothing until the bytes actually arrive (and the caller bounds those).
//! - No input makes the parser panic; every framing error carries Redis's exact text, so clients
//!   and tests that match on `Protocol error: ...` see what a Redis server would send.
//! - The encoders never allocate beyond growing the output buffer, and never emit a bare CR or LF
//!   inside a simple string or an error line (which would desynchronise the client).

pub mod parser;
pub mod reply;
pub mod value;

mod inline;

pub use parser::{
    ArgIter, Limits, Parser, ProtocolError, ProtocolErrorKind, Request, RequestRef,
    is_http_request, string2ll,
};
pub use reply::Proto;
pub use value::Value;
