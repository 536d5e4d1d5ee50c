//! The request parser: RESP multibulk frames and inline commands, incremental and zero-copy.
//!
//! # Format
//!
//! A request whose first byte is `*` is a multibulk frame:
//!
//! ```text
//! *<count>\r\n  then <count> times:  $<len>\r\n<len bytes>\r\n
//! ```
//!
//! Anything else is an inline command: one line ending in `\n` (an `\r` before it is dropped),
//! split by Redis's `sdssplitargs` quoting rules (see the private `inline` module). `*0`, `*-1`
//! (any count ≤ 0) and blank inline lines are no request at all: they are consumed and skipped,
//! as Redis does.
//!
//! # How it reads
//!
//! [`Parser::parse`] looks at the front of the connection's `BytesMut`. While a frame is
//! incomplete it removes nothing and returns `Ok(None)`, but remembers how far it got — the
//! offset of the next header, the `(offset, len)` of every argument found so far, and how far it
//! already searched for a line end — so the next call resumes there instead of rescanning. Once
//! the frame is complete it is split off with `split_to(len).freeze()` and the arguments are
//! slices of that one `Bytes`: no argument is copied. This is why the caller must only *append*
//! to the buffer between calls, and must keep using the same buffer with the same parser.
//!
//! # Limits and errors, as Redis has them
//!
//! The checks, their order and their texts follow `processMultibulkBuffer` and
//! `processInlineBuffer` in Redis's `src/networking.c`, with numbers parsed by its `string2ll`
//! (no sign but `-`, no leading zeros, no blanks, at most 20 characters):
//!
//! | condition | reply text |
//! | --- | --- |
//! | no `\r` in the first line of a `*` frame, and more than `max_inline_len` bytes buffered | `Protocol error: too big mbulk count string` |
//! | count is not a number, or above `max_multibulk_len` | `Protocol error: invalid multibulk length` |
//! | no `\r` in a `$` line, and more than `max_inline_len` bytes buffered from it | `Protocol error: too big bulk count string` |
//! | a bulk header does not start with `$` | `Protocol error: expected '$', got 'X'` |
//! | length is not a number, negative, or above `max_bulk_len` | `Protocol error: invalid bulk length` |
//! | no `\n` in an inline line, and more than `max_inline_len` bytes buffered | `Protocol error: too big inline request` |
//! | an inline quote left open | `Protocol error: unbalanced quotes in request` |
//! | before AUTH: count above [`UNAUTHENTICATED_MULTIBULK_LEN`] | `Protocol error: unauthenticated multibulk length` |
//! | before AUTH: length above [`UNAUTHENTICATED_BULK_LEN`] | `Protocol error: unauthenticated bulk length` |
//!
//! The last two are Redis's limits for a client that must authenticate and has not
//! (`authRequired`): a stranger cannot make the server buffer more than ten arguments of 16 KB
//! for one request. The caller says when they apply ([`Parser::set_unauthenticated`]); as in
//! Redis they are checked after the absolute limits, so a count or length past those gets the
//! `invalid` text first.
//!
//! Like Redis, the parser does not check the byte after a header's `\r`, nor the two bytes that
//! end a bulk payload: it skips them. Redis has no error text for those cases, and matching its
//! acceptance exactly is the point. The "too big" checks fire, as in Redis, only while a line's
//! end has not arrived yet, so they bound how much a client can make us buffer for one line.

use std::fmt;

use bytes::{Bytes, BytesMut};

use crate::inline;

/// Most arguments of one request before AUTH, as Redis (`ll > 10 && authRequired(c)`).
pub const UNAUTHENTICATED_MULTIBULK_LEN: usize = 10;
/// Largest bulk argument before AUTH, as Redis (`ll > 16384 && authRequired(c)`).
pub const UNAUTHENTICATED_BULK_LEN: usize = 16 * 1024;
/// Most input (unparsed bytes and a MULTI queue) a client may hold before AUTH, whatever its
/// query-buffer limit says: Redis's 1 MiB.
pub const UNAUTHENTICATED_QUERY_LIMIT: usize = 1024 * 1024;

/// Protocol limits, named as in Redis's configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest accepted bulk argument (`proto-max-bulk-len`).
    pub max_bulk_len: usize,
    /// Largest accepted argument count of one multibulk frame.
    pub max_multibulk_len: usize,
    /// Longest line buffered without its terminator (`PROTO_INLINE_MAX_SIZE`): an inline command,
    /// or a `*`/`$` header line.
    pub max_inline_len: usize,
}

impl Default for Limits {
    /// Redis's defaults: 512 MB bulks, 1 Mi arguments (the classic limit; Redis 7 raised it to
    /// `INT_MAX`, which no rate-limit request needs), 64 KB lines.
    fn default() -> Self {
        Limits {
            max_bulk_len: 512 * 1024 * 1024,
            max_multibulk_len: 1024 * 1024,
            max_inline_len: 64 * 1024,
        }
    }
}

/// What went wrong; [`ProtocolError`]'s `Display` gives Redis's text for each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProtocolErrorKind {
    /// `Protocol error: invalid bulk length`
    InvalidBulkLength,
    /// `Protocol error: invalid multibulk length`
    InvalidMultibulkLength,
    /// `Protocol error: too big inline request`
    TooBigInlineRequest,
    /// `Protocol error: too big mbulk count string`
    TooBigMbulkCount,
    /// `Protocol error: too big bulk count string`
    TooBigBulkCount,
    /// `Protocol error: expected '$', got 'X'`, with the byte found instead of `$`.
    ExpectedDollar(u8),
    /// `Protocol error: unbalanced quotes in request`
    UnbalancedQuotes,
    /// `Protocol error: unauthenticated multibulk length`
    UnauthenticatedMultibulkLength,
    /// `Protocol error: unauthenticated bulk length`
    UnauthenticatedBulkLength,
}

/// A framing error: the connection must reply `-ERR <Display>` and close, since the stream can no
/// longer be split into requests. (A bad *argument* is not this: it is an ordinary error reply.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProtocolError {
    kind: ProtocolErrorKind,
}

impl ProtocolError {
    fn new(kind: ProtocolErrorKind) -> Self {
        ProtocolError { kind }
    }

    /// Which error this is.
    pub fn kind(&self) -> ProtocolErrorKind {
        self.kind
    }

    /// Appends the whole error reply, `-ERR <text>\r\n`, byte for byte as Redis sends it.
    ///
    /// Differs from formatting [`Display`](fmt::Display) only for `expected '$', got 'X'` with a
    /// non-ASCII byte: Redis sends that raw byte, which a Rust `str` cannot hold.
    pub fn write_reply(&self, out: &mut BytesMut) {
        out.extend_from_slice(b"-ERR ");
        match self.kind {
            ProtocolErrorKind::ExpectedDollar(b) => {
                out.extend_from_slice(b"Protocol error: expected '$', got '");
                out.extend_from_slice(&[printable_in_reply(b)]);
                out.extend_from_slice(b"'");
            }
            _ => out.extend_from_slice(self.static_text().as_bytes()),
        }
        out.extend_from_slice(b"\r\n");
    }

    fn static_text(&self) -> &'static str {
        match self.kind {
            ProtocolErrorKind::InvalidBulkLength => "Protocol error: invalid bulk length",
            ProtocolErrorKind::InvalidMultibulkLength => "Protocol error: invalid multibulk length",
            ProtocolErrorKind::TooBigInlineRequest => "Protocol error: too big inline request",
            ProtocolErrorKind::TooBigMbulkCount => "Protocol error: too big mbulk count string",
            ProtocolErrorKind::TooBigBulkCount => "Protocol error: too big bulk count string",
            ProtocolErrorKind::UnbalancedQuotes => "Protocol error: unbalanced quotes in request",
            ProtocolErrorKind::UnauthenticatedMultibulkLength => {
                "Protocol error: unauthenticated multibulk length"
            }
            ProtocolErrorKind::UnauthenticatedBulkLength => {
                "Protocol error: unauthenticated bulk length"
            }
            ProtocolErrorKind::ExpectedDollar(_) => "Protocol error: expected '$', got '?'",
        }
    }
}

/// Redis formats the unexpected byte with `%c` and then turns CR and LF into spaces, so that the
/// error stays on one line (`addReplyErrorFormat`).
fn printable_in_reply(b: u8) -> u8 {
    if b == b'\r' || b == b'\n' { b' ' } else { b }
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            ProtocolErrorKind::ExpectedDollar(b) => {
                // Bytes above 0x7f show as the Latin-1 character of the same value.
                let c = char::from(printable_in_reply(b));
                write!(f, "Protocol error: expected '$', got '{c}'")
            }
            _ => f.write_str(self.static_text()),
        }
    }
}

impl std::error::Error for ProtocolError {}

/// One decoded command: its arguments, the command name first.
///
/// The request holds its frame (a `Bytes` slice of the read buffer) and each argument's
/// `(offset, len)` inside it: one reference count per request instead of one per argument, and a
/// small struct to move. Arguments are read as `&[u8]` borrowed from the frame; `arg_bytes`
/// hands out an owned zero-copy slice when one must outlive the request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Request {
    frame: Bytes,
    /// A `Vec`, not an inline array: the connection reuses one request, so its capacity is
    /// allocated once, and indexing it needs no inline-or-heap branch.
    args: Vec<(usize, usize)>,
    inline: bool,
    /// `frame` is a whole multibulk frame as it arrived (not an inline line, nor arguments
    /// joined by `from_args`).
    wire: bool,
}

impl Request {
    /// A request made from arguments (for executors and tests): they are copied into one frame.
    pub fn from_args<A: AsRef<[u8]>>(args: &[A]) -> Request {
        let mut frame = Vec::with_capacity(args.iter().map(|a| a.as_ref().len()).sum());
        let mut offsets = Vec::with_capacity(args.len());
        for a in args {
            let a = a.as_ref();
            offsets.push((frame.len(), a.len()));
            frame.extend_from_slice(a);
        }
        Request {
            frame: Bytes::from(frame),
            args: offsets,
            inline: false,
            wire: false,
        }
    }

    /// Lets go of the frame (and so of the read buffer it is part of), keeping the argument
    /// list's capacity for the next request (unless a huge frame made it large).
    pub fn clear(&mut self) {
        self.frame = Bytes::new();
        self.args.clear();
        if self.args.capacity() > KEPT_OFFSETS_CAPACITY {
            self.args = Vec::new();
        }
        self.wire = false;
    }

    /// Makes this request the multibulk frame `frame`, as it arrived, with the argument
    /// offsets [`Parser::parse_in_place`] found in it: what a frame read in place becomes when
    /// it must outlive its place in the read buffer.
    pub fn set_frame(&mut self, frame: Bytes, args: &[(usize, usize)]) {
        self.frame = frame;
        self.args.clear();
        self.args.extend_from_slice(args);
        self.inline = false;
        self.wire = true;
    }

    /// This request's arguments, borrowed: what the commands read.
    #[inline]
    pub fn view(&self) -> RequestRef<'_> {
        RequestRef {
            frame: &self.frame,
            args: &self.args,
            inline: self.inline,
            wire: self.wire,
        }
    }

    /// How many arguments, the command name included.
    pub fn len(&self) -> usize {
        self.args.len()
    }

    pub fn is_empty(&self) -> bool {
        self.args.is_empty()
    }

    /// Argument `i` (0 is the command name).
    pub fn arg(&self, i: usize) -> Option<&[u8]> {
        self.view().arg(i)
    }

    /// The arguments from `from` on, in order.
    pub fn args_from(&self, from: usize) -> ArgIter<'_> {
        self.view().args_from(from)
    }

    /// Every argument, the command name first.
    pub fn args(&self) -> ArgIter<'_> {
        self.args_from(0)
    }

    /// Argument `i` as an owned, zero-copy slice of the frame.
    pub fn arg_bytes(&self, i: usize) -> Option<Bytes> {
        let &(offset, len) = self.args.get(i)?;
        Some(self.frame.slice(offset..offset + len))
    }

    /// The whole multibulk frame as it arrived (`*N\r\n$len\r\narg\r\n...`), for a proxy
    /// that forwards the request unchanged; `None` for an inline command or a request made
    /// with [`Request::from_args`].
    pub fn wire_frame(&self) -> Option<&Bytes> {
        self.wire.then_some(&self.frame)
    }

    /// See [`RequestRef::wire_from`].
    pub fn wire_from(&self, from: usize) -> Option<&[u8]> {
        self.view().wire_from(from)
    }

    /// Whether this came as an inline command rather than a multibulk frame.
    pub fn is_inline(&self) -> bool {
        self.view().is_inline()
    }

    /// This request in an allocation of its own: what keeps it (a MULTI queue) then holds its
    /// bytes only, not the read buffer its frame was split from (which a small frame would
    /// otherwise pin whole, however large that buffer grew).
    pub fn detached(&self) -> Request {
        self.view().to_request()
    }

    /// The bytes this request holds: itself, its frame and its argument table (so a queue of
    /// tiny requests is not counted at a fraction of what it takes).
    pub fn footprint(&self) -> usize {
        std::mem::size_of::<Request>()
            + self.frame.len()
            + self.args.len() * std::mem::size_of::<(usize, usize)>()
    }
}

/// A request's arguments, borrowed from its frame wherever that is: a [`Request`]'s
/// ([`Request::view`]), or the read buffer itself for a frame read in place
/// ([`Parser::parse_in_place`]). Each argument is an `(offset, len)` in `frame`.
#[derive(Clone, Copy, Debug)]
pub struct RequestRef<'a> {
    frame: &'a [u8],
    args: &'a [(usize, usize)],
    inline: bool,
    wire: bool,
}

impl<'a> RequestRef<'a> {
    /// A multibulk frame as it arrived, with the argument offsets
    /// [`Parser::parse_in_place`] found in it.
    #[inline]
    pub fn in_place(frame: &'a [u8], args: &'a [(usize, usize)]) -> RequestRef<'a> {
        RequestRef {
            frame,
            args,
            inline: false,
            wire: true,
        }
    }

    /// How many arguments, the command name included.
    #[inline]
    pub fn len(&self) -> usize {
        self.args.len()
    }

    pub fn is_empty(&self) -> bool {
        self.args.is_empty()
    }

    /// Argument `i` (0 is the command name).
    #[inline]
    pub fn arg(&self, i: usize) -> Option<&'a [u8]> {
        let &(offset, len) = self.args.get(i)?;
        self.frame.get(offset..offset + len)
    }

    /// The arguments from `from` on, in order.
    pub fn args_from(&self, from: usize) -> ArgIter<'a> {
        ArgIter {
            request: *self,
            next: from.min(self.len()),
        }
    }

    /// Every argument, the command name first.
    pub fn args(&self) -> ArgIter<'a> {
        self.args_from(0)
    }

    /// The wire bytes of arguments `from..` of a multibulk frame as it arrived, each with its
    /// `$len` header: `$len\r\narg\r\n...` to the end of the frame. The headers make the bytes
    /// an unambiguous encoding of those arguments, so two requests whose tails are equal (and
    /// whose argument counts are equal) have equal arguments from `from` on. `None` for an
    /// inline command, a request made with [`Request::from_args`], or `from` 0 or past the end.
    pub fn wire_from(&self, from: usize) -> Option<&'a [u8]> {
        if !self.wire || from == 0 || from >= self.args.len() {
            return None;
        }
        let (offset, len) = self.args[from - 1];
        self.frame.get(offset + len + 2..)
    }

    /// Whether this came as an inline command rather than a multibulk frame.
    pub fn is_inline(&self) -> bool {
        self.inline
    }

    /// A copy in an allocation of its own: its frame's bytes and argument table.
    pub fn to_request(&self) -> Request {
        Request {
            frame: Bytes::copy_from_slice(self.frame),
            args: self.args.to_vec(),
            inline: self.inline,
            wire: self.wire,
        }
    }
}

/// The arguments of a request, borrowed from its frame.
#[derive(Clone, Debug)]
pub struct ArgIter<'a> {
    request: RequestRef<'a>,
    next: usize,
}

impl<'a> Iterator for ArgIter<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let arg = self.request.arg(self.next)?;
        self.next += 1;
        Some(arg)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.request.len() - self.next;
        (n, Some(n))
    }
}

impl ExactSizeIterator for ArgIter<'_> {}

/// Where the parser stands in the frame at the front of the buffer. Offsets are from the start
/// of the buffer, which is the start of the frame: nothing is removed until the frame is done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// At a frame boundary.
    Start,
    /// Inside an inline line; `searched` bytes hold no `\n`.
    Inline { searched: usize },
    /// Inside the `*<count>` line; `searched` bytes hold no usable `\r`.
    Count { searched: usize },
    /// Reading the arguments: `pos` is where the next header or payload starts, `remaining` how
    /// many arguments are still to come, `bulk` the length of the payload at `pos` once its
    /// header has been read, and `searched` how far the `\r` of the header at `pos` was sought.
    Args {
        pos: usize,
        remaining: usize,
        bulk: Option<usize>,
        searched: usize,
    },
}

/// How far a line-end search got.
enum Line {
    /// The `\r` at this offset, with at least one byte after it.
    Found(usize),
    /// Not there yet: resume the search at this offset.
    Pending(usize),
}

/// The argument-offset list is kept between frames so that it does not allocate per request;
/// one huge request should not pin its memory forever, though.
const KEPT_OFFSETS_CAPACITY: usize = 1024;

/// An incremental RESP request decoder; one per connection.
#[derive(Debug)]
pub struct Parser {
    limits: Limits,
    /// Redis's limits before AUTH apply ([`Parser::set_unauthenticated`]).
    unauthenticated: bool,
    /// What the fast path accepts: `limits`, or the smaller limits before AUTH. A frame past
    /// them takes the general path, which gives the exact error; so the check before AUTH
    /// costs an authenticated client nothing.
    fast_max_multibulk_len: usize,
    fast_max_bulk_len: usize,
    state: State,
    /// `(offset, len)` of each argument of the current frame found so far.
    offsets: Vec<(usize, usize)>,
}

impl Parser {
    /// A parser at a frame boundary.
    pub fn new(limits: Limits) -> Parser {
        Parser {
            limits,
            unauthenticated: false,
            fast_max_multibulk_len: limits.max_multibulk_len,
            fast_max_bulk_len: limits.max_bulk_len,
            state: State::Start,
            offsets: Vec::new(),
        }
    }

    /// Whether Redis's limits before AUTH apply to the frames parsed from now on: the caller
    /// sets this while its client must authenticate and has not (Redis's `authRequired`), and
    /// clears it once the client has.
    pub fn set_unauthenticated(&mut self, unauthenticated: bool) {
        self.unauthenticated = unauthenticated;
        let (count, bulk) = if unauthenticated {
            (UNAUTHENTICATED_MULTIBULK_LEN, UNAUTHENTICATED_BULK_LEN)
        } else {
            (usize::MAX, usize::MAX)
        };
        self.fast_max_multibulk_len = self.limits.max_multibulk_len.min(count);
        self.fast_max_bulk_len = self.limits.max_bulk_len.min(bulk);
    }

    /// Whether Redis's limits before AUTH apply ([`Parser::set_unauthenticated`]).
    #[inline]
    pub fn unauthenticated(&self) -> bool {
        self.unauthenticated
    }

    /// The input a client may hold now, given its query-buffer limit: at most
    /// [`UNAUTHENTICATED_QUERY_LIMIT`] before AUTH.
    #[inline]
    pub fn query_limit(&self, limit: usize) -> usize {
        if self.unauthenticated {
            limit.min(UNAUTHENTICATED_QUERY_LIMIT)
        } else {
            limit
        }
    }

    /// Decodes the next complete request at the front of `buf`, removing its bytes.
    ///
    /// - `Ok(Some(request))`: one request; call again, more may be buffered (pipelining).
    /// - `Ok(None)`: no complete request yet. What was parsed is remembered; call again with the
    ///   same buffer after appending the next read. Skipped non-requests (`*0`, blank lines) have
    ///   been removed.
    /// - `Err(e)`: a framing error. Reply `-ERR {e}` and close; the parser is reset, but the
    ///   stream cannot be resynchronised, so do not parse more from it.
    pub fn parse(&mut self, buf: &mut BytesMut) -> Result<Option<Request>, ProtocolError> {
        let mut request = Request::default();
        Ok(self.parse_into(buf, &mut request)?.then_some(request))
    }

    /// [`Parser::parse`] into a request the caller reuses (the connection loop's hot path: no
    /// request is built or moved per frame). `Ok(true)` when `request` now holds one.
    pub fn parse_into(
        &mut self,
        buf: &mut BytesMut,
        request: &mut Request,
    ) -> Result<bool, ProtocolError> {
        // The common case first, before any saved progress is looked at: a whole, ordinary
        // multibulk frame at a frame boundary.
        // The offsets go to the parser's own list (empty at a frame boundary) and move to
        // `request` only with a whole frame: until then `request` is untouched, still the last
        // request parsed (whatever follows it: a partial frame, `*0`, a blank line).
        if self.state == State::Start && buf.first() == Some(&b'*') {
            let mut offsets = std::mem::take(&mut self.offsets);
            let whole = self.whole_multibulk(buf, &mut offsets);
            if whole.is_some() {
                std::mem::swap(&mut request.args, &mut offsets);
            }
            offsets.clear();
            if offsets.capacity() <= KEPT_OFFSETS_CAPACITY {
                self.offsets = offsets;
            }
            if let Some(frame_len) = whole {
                request.frame = buf.split_to(frame_len).freeze();
                request.inline = false;
                request.wire = true;
                return Ok(true);
            }
            // From here on this frame takes the general, incremental path, so the fast path
            // reads any frame at most once.
            self.state = State::Count { searched: 1 };
        }
        let result = self.step(buf, request);
        if result.is_err() {
            self.reset();
        }
        result
    }

    /// The frame at the start of `buf`, read where it lies: its length, with each argument's
    /// `(offset, len)` from the frame's start appended to `args` (and perhaps some appended
    /// when the answer is `None`: truncate them), if it is a whole, ordinary multibulk frame at
    /// a frame boundary (what [`Parser::parse_into`] reads on its fast path, by the same code). The
    /// caller executes it from `buf` ([`RequestRef::in_place`]) and then removes those bytes
    /// itself; the parser stays at the frame boundary after them. `None` for anything else:
    /// the caller then calls [`Parser::parse_into`] with the same bytes at the buffer's front.
    ///
    /// No frame is split off the buffer, so no reference count is taken and dropped per
    /// request: a pipelined batch costs its connection loop no atomic operation per request.
    #[inline]
    pub fn parse_in_place(&self, buf: &[u8], args: &mut Vec<(usize, usize)>) -> Option<usize> {
        if self.state != State::Start || buf.first() != Some(&b'*') {
            return None;
        }
        self.whole_multibulk(buf, args)
    }

    /// The key (second argument) of the frame at the start of `buf` if that frame is the
    /// command `name` (8 bytes, ASCII letters matched in either case) and its header and key
    /// have arrived; `None` otherwise. A look ahead, not a parse: a few word compares, for a
    /// caller that uses the answer only as a hint (a prefetch), so it may answer for a frame
    /// the parser would refuse, or for a name that differs from `name` in bit 5 of a byte
    /// that is not a letter. What it answers is always the bytes where that frame's second
    /// argument is. It answers for frames of 2 to 9 arguments and a key of 1 to 99 bytes.
    #[inline]
    pub fn peek_key<'b>(buf: &'b [u8], name: &[u8; 8]) -> Option<&'b [u8]> {
        const CASE: u64 = 0x2020_2020_2020_2020;
        let head: &[u8; 22] = buf.get(..22)?.try_into().ok()?;
        let word = |at: usize| u64::from_le_bytes(head[at..at + 8].try_into().expect("8 bytes"));
        // `*N\r\n$8\r\n` with N one digit, then the name, then `\r\n$`.
        if word(0) & !0xFF00 != u64::from_le_bytes(*b"*\0\r\n$8\r\n")
            || !(b'2'..=b'9').contains(&head[1])
            || word(8) | CASE != u64::from_le_bytes(*name) | CASE
            || head[16..19] != *b"\r\n$"
        {
            return None;
        }
        let (len, at) = match head[19..22] {
            [d @ b'1'..=b'9', b'\r', _] => (usize::from(d - b'0'), 22),
            [d @ b'1'..=b'9', e @ b'0'..=b'9', b'\r'] => {
                (usize::from(d - b'0') * 10 + usize::from(e - b'0'), 23)
            }
            _ => return None,
        };
        buf.get(at..at + len)
    }

    /// How many more bytes the partial frame needs at least, when a bulk payload's length is
    /// known and its bytes have not all arrived; `buffered` is the buffer's current length.
    ///
    /// A read-buffer sizing hint only: it follows a length the client declared, so the caller
    /// must cap whatever it reserves on its account.
    pub fn bytes_needed(&self, buffered: usize) -> Option<usize> {
        match self.state {
            State::Args {
                pos,
                bulk: Some(len),
                ..
            } => {
                let end = pos.saturating_add(len).saturating_add(2);
                Some(end.saturating_sub(buffered)).filter(|&n| n > 0)
            }
            _ => None,
        }
    }

    fn reset(&mut self) {
        self.state = State::Start;
        self.offsets.clear();
        if self.offsets.capacity() > KEPT_OFFSETS_CAPACITY {
            self.offsets = Vec::new();
        }
    }

    /// The furthest offset the saved progress refers to.
    fn resume_point(&self) -> usize {
        match self.state {
            State::Start => 0,
            State::Inline { searched } | State::Count { searched } => searched,
            State::Args { pos, searched, .. } => pos.max(searched),
        }
    }

    /// The general path: any request, any split across reads. Kept out of line so that the
    /// fast path's loop in `parse_into` has the registers to itself.
    #[inline(never)]
    fn step(&mut self, buf: &mut BytesMut, request: &mut Request) -> Result<bool, ProtocolError> {
        // A buffer that shrank since the last call breaks the append-only contract; restarting
        // the frame from the front keeps that a wrong answer instead of an out-of-bounds panic.
        if self.resume_point() > buf.len() {
            self.reset();
        }
        loop {
            match self.state {
                State::Start => match buf.first() {
                    None => return Ok(false),
                    // Only a frame after a skipped one (`*0`, a blank line) gets here at a
                    // boundary: it takes the general path, which accepts exactly what the fast
                    // one does and more.
                    Some(b'*') => self.state = State::Count { searched: 1 },
                    Some(_) => self.state = State::Inline { searched: 0 },
                },
                State::Inline { searched } => {
                    let Some(i) = buf[searched..].iter().position(|&b| b == b'\n') else {
                        if buf.len() > self.limits.max_inline_len {
                            return Err(ProtocolError::new(ProtocolErrorKind::TooBigInlineRequest));
                        }
                        self.state = State::Inline {
                            searched: buf.len(),
                        };
                        return Ok(false);
                    };
                    let newline = searched + i;
                    // Stricter than Redis, which accepts an over-long line when its newline
                    // arrived in the same read: here the answer must not depend on how the
                    // kernel chunked the bytes.
                    if newline > self.limits.max_inline_len {
                        return Err(ProtocolError::new(ProtocolErrorKind::TooBigInlineRequest));
                    }
                    let line_end = if newline > 0 && buf[newline - 1] == b'\r' {
                        newline - 1
                    } else {
                        newline
                    };
                    self.offsets.clear();
                    inline::split_args(&mut buf[..line_end], &mut self.offsets)
                        .map_err(|_| ProtocolError::new(ProtocolErrorKind::UnbalancedQuotes))?;
                    if self.finish(buf, newline + 1, true, request) {
                        return Ok(true);
                    }
                }
                State::Count { searched } => {
                    let cr = match self.find_cr(
                        buf,
                        0,
                        searched,
                        ProtocolErrorKind::TooBigMbulkCount,
                    )? {
                        Line::Found(cr) => cr,
                        Line::Pending(searched) => {
                            self.state = State::Count { searched };
                            return Ok(false);
                        }
                    };
                    let count = string2ll(&buf[1..cr])
                        .filter(|&n| n <= 0 || n as u64 <= self.limits.max_multibulk_len as u64)
                        .ok_or(ProtocolError::new(
                            ProtocolErrorKind::InvalidMultibulkLength,
                        ))?;
                    let pos = cr + 2;
                    if count <= 0 {
                        let _ = buf.split_to(pos);
                        self.state = State::Start;
                        continue;
                    }
                    // `count` is at most `max_multibulk_len`, a usize.
                    let remaining = count as usize;
                    if self.unauthenticated && remaining > UNAUTHENTICATED_MULTIBULK_LEN {
                        return Err(ProtocolError::new(
                            ProtocolErrorKind::UnauthenticatedMultibulkLength,
                        ));
                    }
                    self.offsets.clear();
                    self.offsets.reserve(remaining.min(KEPT_OFFSETS_CAPACITY));
                    self.state = State::Args {
                        pos,
                        remaining,
                        bulk: None,
                        searched: pos,
                    };
                }
                State::Args {
                    mut pos,
                    mut remaining,
                    mut bulk,
                    mut searched,
                } => {
                    while remaining > 0 {
                        let len = match bulk {
                            Some(len) => len,
                            None => {
                                let cr = match self.find_cr(
                                    buf,
                                    pos,
                                    searched,
                                    ProtocolErrorKind::TooBigBulkCount,
                                )? {
                                    Line::Found(cr) => cr,
                                    Line::Pending(at) => {
                                        searched = at;
                                        break;
                                    }
                                };
                                if buf[pos] != b'$' {
                                    return Err(ProtocolError::new(
                                        ProtocolErrorKind::ExpectedDollar(buf[pos]),
                                    ));
                                }
                                let len = string2ll(&buf[pos + 1..cr])
                                    .filter(|&n| {
                                        n >= 0 && n as u64 <= self.limits.max_bulk_len as u64
                                    })
                                    .ok_or(ProtocolError::new(
                                        ProtocolErrorKind::InvalidBulkLength,
                                    ))? as usize;
                                if self.unauthenticated && len > UNAUTHENTICATED_BULK_LEN {
                                    return Err(ProtocolError::new(
                                        ProtocolErrorKind::UnauthenticatedBulkLength,
                                    ));
                                }
                                pos = cr + 2;
                                bulk = Some(len);
                                len
                            }
                        };
                        // The payload and the two bytes that end it.
                        let Some(end) = pos.checked_add(len).and_then(|e| e.checked_add(2)) else {
                            return Err(ProtocolError::new(ProtocolErrorKind::InvalidBulkLength));
                        };
                        if buf.len() < end {
                            break;
                        }
                        self.offsets.push((pos, len));
                        pos = end;
                        searched = end;
                        bulk = None;
                        remaining -= 1;
                    }
                    if remaining > 0 {
                        self.state = State::Args {
                            pos,
                            remaining,
                            bulk,
                            searched,
                        };
                        return Ok(false);
                    }
                    // At least one argument was read (the count was positive), so this is
                    // always a request; the `if` only keeps the types honest.
                    if self.finish(buf, pos, false, request) {
                        return Ok(true);
                    }
                }
            }
        }
    }

    /// The fast path for the common case: a whole, ordinary multibulk frame at the front of
    /// `buf` (every count and length plain digits, the frame entirely buffered). Reads it in one
    /// pass, appending the argument offsets to `args`, and returns the frame's length. `None`
    /// for anything else (incomplete, empty, unusual or invalid): the general path then parses
    /// the same bytes from the start and gives the exact answer or error, so the two can never
    /// disagree on a frame this one accepts.
    #[inline]
    fn whole_multibulk(&self, buf: &[u8], args: &mut Vec<(usize, usize)>) -> Option<usize> {
        let (count, mut pos) = plain_number(buf, 1)?;
        if count == 0 || count > self.fast_max_multibulk_len {
            return None;
        }
        let max_bulk_len = self.fast_max_bulk_len;
        for _ in 0..count {
            let (len, start) = bulk_header(buf, pos)?;
            // The payload and the two bytes that end it must be buffered. (`start` is within
            // the buffer, so `after` is `Some`; the form avoids an overflow check on `len`.)
            let after = buf.len().checked_sub(start)?;
            if len > max_bulk_len || after < 2 || len > after - 2 {
                return None;
            }
            args.push((start, len));
            pos = start + len + 2;
        }
        Some(pos)
    }

    /// Looks for the `\r` ending the header line that starts at `line_start`, resuming at
    /// `searched`. Like Redis, the line is complete once one more byte follows the `\r`.
    fn find_cr(
        &self,
        buf: &[u8],
        line_start: usize,
        searched: usize,
        too_big: ProtocolErrorKind,
    ) -> Result<Line, ProtocolError> {
        match buf[searched..].iter().position(|&b| b == b'\r') {
            Some(i) if searched + i + 1 < buf.len() => Ok(Line::Found(searched + i)),
            // The `\r` is the last byte: find it again next time.
            Some(i) => Ok(Line::Pending(searched + i)),
            None if buf.len() - line_start > self.limits.max_inline_len => {
                Err(ProtocolError::new(too_big))
            }
            None => Ok(Line::Pending(buf.len())),
        }
    }

    /// Splits the finished frame (`frame_len` bytes) off `buf` into `request`, with the
    /// argument offsets in `self.offsets`. `false` when the frame held no argument (a blank line).
    fn finish(
        &mut self,
        buf: &mut BytesMut,
        frame_len: usize,
        inline: bool,
        request: &mut Request,
    ) -> bool {
        let frame = buf.split_to(frame_len).freeze();
        let has_args = !self.offsets.is_empty();
        if has_args {
            request.frame = frame;
            request.args.clear();
            request.args.extend_from_slice(&self.offsets);
            request.inline = inline;
            request.wire = !inline;
        }
        self.reset();
        has_args
    }
}

/// A bulk header for the fast path: `$` at `at`, then a [`plain_number`]. Returns the payload's
/// length and where it starts. The one- and two-digit lengths are read from one 5-byte window
/// (the `$`, the digits, the `\r` and the byte after it), as `plain_number` reads them.
#[inline(always)]
fn bulk_header(buf: &[u8], at: usize) -> Option<(usize, usize)> {
    if let Some(&[b'$', a, b, c, _]) = buf.get(at..).and_then(|rest| rest.get(..5)) {
        let (da, db) = (a.wrapping_sub(b'0'), b.wrapping_sub(b'0'));
        if da <= 9 && b == b'\r' {
            return Some((usize::from(da), at + 4));
        }
        if (1..=9).contains(&da) && db <= 9 && c == b'\r' {
            return Some((usize::from(da * 10 + db), at + 5));
        }
    }
    if *buf.get(at)? != b'$' {
        return None;
    }
    plain_number(buf, at + 1)
}

/// A header number for the fast path: 1 to 18 digits at `at`, no leading zero unless it is
/// `0` itself, then `\r` and one more byte (Redis does not check that byte). Returns the number
/// and where the next line starts; `None` for anything else.
#[inline(always)]
fn plain_number(buf: &[u8], at: usize) -> Option<(usize, usize)> {
    // Counts and argument lengths are nearly always one or two digits: read those directly.
    if let Some(&[a, b, c, _]) = buf.get(at..at + 4) {
        let (da, db) = (a.wrapping_sub(b'0'), b.wrapping_sub(b'0'));
        // The line ends at the `\r`; the byte after it is skipped unchecked, as Redis does.
        if da <= 9 && b == b'\r' {
            return Some((usize::from(da), at + 3));
        }
        if (1..=9).contains(&da) && db <= 9 && c == b'\r' {
            return Some((usize::from(da * 10 + db), at + 4));
        }
    }
    let mut n: usize = 0;
    let mut i = at;
    loop {
        let b = *buf.get(i)?;
        match b {
            b'0'..=b'9' => {
                if i - at == 18 || (i > at && n == 0) {
                    return None;
                }
                n = n * 10 + usize::from(b - b'0');
            }
            b'\r' if i > at && i + 1 < buf.len() => return Some((n, i + 2)),
            _ => return None,
        }
        i += 1;
    }
}

/// Whether a request's first word is what an HTTP request starts with: `POST` (its request
/// line, read as an inline command) or a `Host:` header. A web page can make a browser send
/// such a request to a loopback port, and its body would then run as commands (cross-protocol
/// scripting): Redis closes these connections, and every Sluice front does too.
pub fn is_http_request(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"post") || name.eq_ignore_ascii_case(b"host:")
}

/// Redis's `string2ll`: a decimal `long long` with an optional `-`, no leading zeros (but `0`
/// itself), no `+`, no blanks, shorter than 21 characters. `None` when Redis would say "not ok".
pub fn string2ll(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() >= 21 {
        return None;
    }
    if s == b"0" {
        return Some(0);
    }
    let (negative, digits) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, s),
    };
    match digits.first() {
        Some(b'1'..=b'9') => {}
        _ => return None,
    }
    let mut v: u64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    if negative {
        // Up to |i64::MIN|, which is one more than i64::MAX.
        if v > i64::MAX as u64 + 1 {
            return None;
        }
        Some((v as i64).wrapping_neg())
    } else {
        i64::try_from(v).ok()
    }
}

#[cfg(test)]
mod wire_tests {
    use super::*;

    #[test]
    fn a_multibulk_frame_is_kept_whole_and_an_inline_one_is_not() {
        let mut p = Parser::new(Limits::default());
        let mut buf = BytesMut::from(&b"*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\nECHO hi\r\n"[..]);
        let r = p.parse(&mut buf).unwrap().unwrap();
        assert_eq!(
            r.wire_frame().map(|f| &f[..]),
            Some(&b"*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\n"[..])
        );
        let r = p.parse(&mut buf).unwrap().unwrap();
        assert!(r.is_inline() && r.wire_frame().is_none());
        assert!(Request::from_args(&["ECHO", "hi"]).wire_frame().is_none());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parser() -> Parser {
        Parser::new(Limits::default())
    }

    /// Every request in `input` parsed from one buffer, then what is left of it.
    fn parse_all(input: &[u8]) -> (Vec<Request>, Result<(), ProtocolError>, BytesMut) {
        let mut p = parser();
        let mut buf = BytesMut::from(input);
        let mut out = Vec::new();
        loop {
            match p.parse(&mut buf) {
                Ok(Some(r)) => out.push(r),
                Ok(None) => return (out, Ok(()), buf),
                Err(e) => return (out, Err(e), buf),
            }
        }
    }

    fn args(r: &Request) -> Vec<&[u8]> {
        r.args().collect()
    }

    fn error_of(input: &[u8]) -> String {
        let (_, result, _) = parse_all(input);
        result.expect_err("should be a protocol error").to_string()
    }

    #[test]
    fn wire_from_is_the_tail_of_the_frame_with_its_headers() {
        // Whole in one buffer (the fast path), then byte by byte (the incremental path).
        let frame = b"*4\r\n$8\r\nRL.CHECK\r\n$1\r\nk\r\n$2\r\n10\r\n$3\r\n60s\r\n";
        let (reqs, result, _) = parse_all(frame);
        result.unwrap();
        let mut p = parser();
        let mut buf = BytesMut::new();
        let mut split = None;
        for &b in frame.iter() {
            buf.extend_from_slice(&[b]);
            if let Some(r) = p.parse(&mut buf).unwrap() {
                split = Some(r);
            }
        }
        for r in [&reqs[0], &split.unwrap()] {
            assert_eq!(r.wire_from(2), Some(&b"$2\r\n10\r\n$3\r\n60s\r\n"[..]));
            assert_eq!(r.wire_from(3), Some(&b"$3\r\n60s\r\n"[..]));
            assert_eq!(r.wire_from(0), None);
            assert_eq!(r.wire_from(4), None);
        }
        let (inline, _, _) = parse_all(b"RL.CHECK k 10 60s\r\n");
        assert_eq!(inline[0].wire_from(2), None);
        assert_eq!(
            Request::from_args(&["RL.CHECK", "k", "10"]).wire_from(2),
            None
        );
    }

    #[test]
    fn string2ll_matches_redis() {
        assert_eq!(string2ll(b"0"), Some(0));
        assert_eq!(string2ll(b"12"), Some(12));
        assert_eq!(string2ll(b"-1"), Some(-1));
        assert_eq!(string2ll(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(string2ll(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b""[..],
            b"-",
            b"-0",
            b"01",
            b"+1",
            b" 1",
            b"1 ",
            b"1a",
            b"9223372036854775808",
            b"-9223372036854775809",
            b"000000000000000000001",
        ] {
            assert_eq!(string2ll(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn multibulk_and_inline() {
        let (reqs, result, rest) = parse_all(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\nPING\r\n");
        result.unwrap();
        assert!(rest.is_empty());
        assert_eq!(reqs.len(), 2);
        assert_eq!(args(&reqs[0]), [&b"GET"[..], b"k"]);
        assert!(!reqs[0].is_inline());
        assert_eq!(args(&reqs[1]), [&b"PING"[..]]);
        assert!(reqs[1].is_inline());
    }

    #[test]
    fn inline_line_endings_and_quoting() {
        let (reqs, result, _) =
            parse_all(b"SET k \"a b\\x41\"\nGET 'k'\r\n  \r\n\n\r\nECHO \"\"\n");
        result.unwrap();
        let got: Vec<Vec<&[u8]>> = reqs.iter().map(args).collect();
        assert_eq!(
            got,
            vec![
                vec![&b"SET"[..], b"k", b"a bA"],
                vec![&b"GET"[..], b"k"],
                vec![&b"ECHO"[..], b""],
            ]
        );
    }

    #[test]
    fn pipelined_frames_decode_one_by_one() {
        let mut input = Vec::new();
        for i in 0..50 {
            let key = format!("key{i}");
            input.extend_from_slice(
                format!(
                    "*3\r\n$8\r\nRL.CHECK\r\n${}\r\n{key}\r\n$2\r\n10\r\n",
                    key.len()
                )
                .as_bytes(),
            );
            input.extend_from_slice(b"PING\r\n*0\r\n*-1\r\n");
        }
        let mut p = parser();
        let mut buf = BytesMut::from(&input[..]);
        for i in 0..50 {
            let r = p.parse(&mut buf).unwrap().unwrap();
            assert_eq!(
                args(&r),
                [&b"RL.CHECK"[..], format!("key{i}").as_bytes(), b"10"]
            );
            let r = p.parse(&mut buf).unwrap().unwrap();
            assert_eq!(args(&r), [&b"PING"[..]]);
        }
        assert_eq!(p.parse(&mut buf), Ok(None));
        assert!(buf.is_empty());
    }

    #[test]
    fn empty_requests_are_skipped() {
        for input in [
            &b"*0\r\n"[..],
            b"*-1\r\n",
            b"*-100\r\n",
            b"\r\n",
            b"\n",
            b"   \t  \r\n",
        ] {
            let (reqs, result, rest) = parse_all(input);
            result.unwrap();
            assert!(reqs.is_empty(), "{input:?}");
            assert!(rest.is_empty(), "{input:?} should be consumed");
        }
        let (reqs, result, _) = parse_all(b"*0\r\n\r\n*1\r\n$4\r\nPING\r\n");
        result.unwrap();
        assert_eq!(reqs.len(), 1);
    }

    #[test]
    fn binary_safe_payloads() {
        let (reqs, result, _) = parse_all(b"*2\r\n$4\r\nSET\0\r\n$6\r\n\r\n*1\r\n\r\n");
        result.unwrap();
        assert_eq!(args(&reqs[0]), [&b"SET\0"[..], b"\r\n*1\r\n"]);
    }

    #[test]
    fn every_error_text() {
        let cases: [(&[u8], &str); 12] = [
            (b"*abc\r\n", "Protocol error: invalid multibulk length"),
            (b"*1048577\r\n", "Protocol error: invalid multibulk length"),
            (b"*-0\r\n", "Protocol error: invalid multibulk length"),
            (b"*1\r\n$-1\r\n", "Protocol error: invalid bulk length"),
            (b"*1\r\n$x\r\n", "Protocol error: invalid bulk length"),
            (
                b"*1\r\n$536870913\r\n",
                "Protocol error: invalid bulk length",
            ),
            (
                b"*1\r\n$2147483648\r\n",
                "Protocol error: invalid bulk length",
            ),
            (b"*1\r\n+OK\r\n", "Protocol error: expected '$', got '+'"),
            (b"*1\r\n\r\n\r\n", "Protocol error: expected '$', got ' '"),
            (
                b"GET \"k\r\n",
                "Protocol error: unbalanced quotes in request",
            ),
            (
                b"GET 'k'x\r\n",
                "Protocol error: unbalanced quotes in request",
            ),
            (
                b"GET \"k\"x\r\n",
                "Protocol error: unbalanced quotes in request",
            ),
        ];
        for (input, want) in cases {
            assert_eq!(
                error_of(input),
                want,
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }

        let long = vec![b'1'; 64 * 1024];
        let mut inline = b"GET ".to_vec();
        inline.extend_from_slice(&long);
        assert_eq!(error_of(&inline), "Protocol error: too big inline request");
        let mut count = b"*".to_vec();
        count.extend_from_slice(&long);
        assert_eq!(
            error_of(&count),
            "Protocol error: too big mbulk count string"
        );
        let mut bulk = b"*1\r\n$".to_vec();
        bulk.extend_from_slice(&long);
        assert_eq!(error_of(&bulk), "Protocol error: too big bulk count string");
    }

    #[test]
    fn too_big_fires_only_past_the_limit() {
        // Exactly max_inline_len unterminated bytes: still waiting, as in Redis (`>`, not `>=`).
        let limits = Limits {
            max_inline_len: 8,
            ..Limits::default()
        };
        let mut p = Parser::new(limits);
        let mut buf = BytesMut::from(&b"PINGPING"[..]);
        assert_eq!(p.parse(&mut buf), Ok(None));
        buf.extend_from_slice(b"!");
        assert_eq!(
            p.parse(&mut buf).unwrap_err().kind(),
            ProtocolErrorKind::TooBigInlineRequest
        );
        // A long line is refused even when its end arrived with it (Redis would accept it),
        // so the answer does not depend on how reads were chunked.
        let mut p = Parser::new(limits);
        let mut buf = BytesMut::from(&b"ECHO 0123456789abcdef\r\n"[..]);
        assert_eq!(
            p.parse(&mut buf).unwrap_err().kind(),
            ProtocolErrorKind::TooBigInlineRequest
        );
        // Exactly the limit, newline included, is fine.
        let mut p = Parser::new(limits);
        let mut buf = BytesMut::from(&b"ECHO 12\r\n"[..]);
        assert_eq!(p.parse(&mut buf).unwrap().unwrap().len(), 2);
    }

    #[test]
    fn error_reply_bytes() {
        let mut out = BytesMut::new();
        ProtocolError::new(ProtocolErrorKind::ExpectedDollar(0xff)).write_reply(&mut out);
        assert_eq!(
            &out[..],
            b"-ERR Protocol error: expected '$', got '\xff'\r\n"
        );
        let mut out = BytesMut::new();
        ProtocolError::new(ProtocolErrorKind::InvalidBulkLength).write_reply(&mut out);
        assert_eq!(&out[..], b"-ERR Protocol error: invalid bulk length\r\n");
    }

    #[test]
    fn limits_are_configurable() {
        let limits = Limits {
            max_bulk_len: 3,
            max_multibulk_len: 2,
            max_inline_len: 64,
        };
        let mut p = Parser::new(limits);
        let mut buf = BytesMut::from(&b"*2\r\n$3\r\nabc\r\n$3\r\ndef\r\n"[..]);
        assert!(p.parse(&mut buf).unwrap().is_some());
        let mut buf = BytesMut::from(&b"*3\r\n"[..]);
        assert_eq!(
            p.parse(&mut buf).unwrap_err().kind(),
            ProtocolErrorKind::InvalidMultibulkLength
        );
        let mut buf = BytesMut::from(&b"*1\r\n$4\r\n"[..]);
        assert_eq!(
            p.parse(&mut buf).unwrap_err().kind(),
            ProtocolErrorKind::InvalidBulkLength
        );
    }

    #[test]
    fn split_at_every_offset_resumes() {
        let input: &[u8] =
            b"*3\r\n$3\r\nSET\r\n$5\r\nk\r\ney\r\n$0\r\n\r\nECHO \"a\\x42\" 'c d'\r\n*0\r\n\
                             *1\r\n$4\r\nPING\r\n\n*2\r\n$4\r\nECHO\r\n$12\r\n012345678901\r\n";
        let (whole, result, _) = parse_all(input);
        result.unwrap();
        assert_eq!(whole.len(), 4);
        for cut in 0..=input.len() {
            let mut p = parser();
            let mut buf = BytesMut::from(&input[..cut]);
            let mut got = Vec::new();
            while let Some(r) = p.parse(&mut buf).unwrap() {
                got.push(r);
            }
            buf.extend_from_slice(&input[cut..]);
            while let Some(r) = p.parse(&mut buf).unwrap() {
                got.push(r);
            }
            assert_eq!(got, whole, "split at {cut}");
            assert!(buf.is_empty());
        }
    }

    #[test]
    fn byte_by_byte_resumes() {
        let input: &[u8] = b"*2\r\n$4\r\nECHO\r\n$10\r\n0123456789\r\nSET k 'v w'\r\n";
        let mut p = parser();
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for &b in input {
            buf.extend_from_slice(&[b]);
            if let Some(r) = p.parse(&mut buf).unwrap() {
                got.push(r);
            }
        }
        assert_eq!(got.len(), 2);
        assert_eq!(args(&got[0]), [&b"ECHO"[..], b"0123456789"]);
        assert_eq!(args(&got[1]), [&b"SET"[..], b"k", b"v w"]);
    }

    #[test]
    fn resumes_without_rescanning() {
        let mut p = parser();
        let mut buf = BytesMut::from(&b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nab"[..]);
        assert_eq!(p.parse(&mut buf), Ok(None));
        // Two arguments and the third header are already known.
        assert_eq!(p.offsets, [(8, 3), (17, 1)]);
        assert_eq!(
            p.state,
            State::Args {
                pos: 24,
                remaining: 1,
                bulk: Some(5),
                searched: 20
            }
        );
        assert_eq!(p.bytes_needed(buf.len()), Some(5));
        buf.extend_from_slice(b"cde\r\n");
        let r = p.parse(&mut buf).unwrap().unwrap();
        assert_eq!(args(&r), [&b"SET"[..], b"k", b"abcde"]);
        assert_eq!(p.bytes_needed(buf.len()), None);
    }

    #[test]
    fn arguments_are_slices_of_the_read_buffer() {
        let mut buf = BytesMut::with_capacity(256);
        buf.extend_from_slice(
            b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\nSET k \"v\\tw\"\r\n",
        );
        let range = buf.as_ptr() as usize..buf.as_ptr() as usize + buf.len();
        let mut p = parser();
        for _ in 0..2 {
            let r = p.parse(&mut buf).unwrap().unwrap();
            for a in r.args() {
                let start = a.as_ptr() as usize;
                assert!(
                    range.contains(&start) && start + a.len() <= range.end,
                    "{a:?} was copied"
                );
            }
        }
    }

    #[test]
    fn huge_declared_bulk_is_never_allocated() {
        for declared in [&b"2147483648"[..], b"524288000", b"536870912"] {
            let limits = Limits {
                max_bulk_len: usize::MAX,
                ..Limits::default()
            };
            for limits in [limits, Limits::default()] {
                let mut p = Parser::new(limits);
                let mut buf = BytesMut::with_capacity(64);
                buf.extend_from_slice(b"*1\r\n$");
                buf.extend_from_slice(declared);
                buf.extend_from_slice(b"\r\nabc");
                let before = buf.capacity();
                for _ in 0..3 {
                    match p.parse(&mut buf) {
                        Ok(None) => {}
                        Err(e) => assert_eq!(e.kind(), ProtocolErrorKind::InvalidBulkLength),
                        Ok(Some(r)) => panic!("nothing complete, got {r:?}"),
                    }
                    buf.extend_from_slice(b"xyz");
                }
                assert!(
                    buf.capacity() <= before.max(64),
                    "the buffer grew to {}",
                    buf.capacity()
                );
                assert!(p.offsets.capacity() <= 1024);
            }
        }
    }

    #[test]
    fn huge_multibulk_count_reserves_a_bounded_amount() {
        let mut p = parser();
        let mut buf = BytesMut::from(&b"*1048576\r\n$1\r\na\r\n"[..]);
        assert_eq!(p.parse(&mut buf), Ok(None));
        assert!(p.offsets.capacity() <= KEPT_OFFSETS_CAPACITY);
    }

    #[test]
    fn a_buffer_that_shrank_restarts_instead_of_panicking() {
        let mut p = parser();
        let mut buf = BytesMut::from(&b"*2\r\n$4\r\nECHO\r\n$3\r\nab"[..]);
        assert_eq!(p.parse(&mut buf), Ok(None));
        buf.truncate(3);
        assert_eq!(p.parse(&mut buf), Ok(None));
        buf.extend_from_slice(b"\n$4\r\nPING\r\n");
        assert_eq!(p.parse(&mut buf), Ok(None));
        buf.extend_from_slice(b"$1\r\nx\r\n");
        let r = p.parse(&mut buf).unwrap().unwrap();
        assert_eq!(args(&r), [&b"PING"[..], b"x"]);
    }

    #[test]
    fn negative_lengths() {
        assert_eq!(
            error_of(b"*1\r\n$-5\r\nabc\r\n"),
            "Protocol error: invalid bulk length"
        );
        let (reqs, result, rest) = parse_all(b"*-5\r\n*-9223372036854775808\r\n");
        result.unwrap();
        assert!(reqs.is_empty() && rest.is_empty());
    }

    #[test]
    fn fast_and_general_paths_agree_on_unusual_headers() {
        // Leading zeros, 19+ digit lengths and a missing '$' are left to the general path,
        // which answers exactly as Redis does.
        assert_eq!(
            error_of(b"*1\r\n$01\r\nx\r\n"),
            "Protocol error: invalid bulk length"
        );
        assert_eq!(
            error_of(b"*01\r\n$1\r\nx\r\n"),
            "Protocol error: invalid multibulk length"
        );
        assert_eq!(
            error_of(b"*1\r\n$1234567890123456789\r\n"),
            "Protocol error: invalid bulk length"
        );
        assert_eq!(
            error_of(b"*1\r\n:1\r\n"),
            "Protocol error: expected '$', got ':'"
        );
        // Whole, split at every offset, and with an empty argument: the same request.
        let frame = b"*3\r\n$3\r\nSET\r\n$0\r\n\r\n$10\r\n0123456789\r\n";
        let (whole, end, _) = parse_all(frame);
        assert!(end.is_ok());
        assert_eq!(args(&whole[0]), [&b"SET"[..], b"", b"0123456789"]);
        for cut in 1..frame.len() {
            let mut p = parser();
            let mut buf = BytesMut::from(&frame[..cut]);
            assert_eq!(p.parse(&mut buf), Ok(None), "cut at {cut}");
            buf.extend_from_slice(&frame[cut..]);
            let r = p.parse(&mut buf).unwrap().unwrap();
            assert_eq!(args(&r), args(&whole[0]), "cut at {cut}");
        }
    }

    #[test]
    fn the_byte_after_a_header_cr_is_skipped_not_parsed() {
        // Found by fuzzing an early fast path that resumed one byte too soon: here the `$`
        // right after `*1\r` is the skipped byte, so the argument header is `0\r`: not a `$`.
        let input = b"*1\r$0\r\x1a\r\x01*1\r\n$0\r\n\n!";
        assert_eq!(error_of(input), "Protocol error: expected '$', got '0'");
        let (reqs, end, _) =
            parse_all(b"*1\r\n$1\r\nx\r\n*2\r\n$2\r\nab\r\n$12\r\n0123456789ab\r\n");
        assert!(end.is_ok());
        assert_eq!(args(&reqs[0]), [&b"x"[..]]);
        assert_eq!(args(&reqs[1]), [&b"ab"[..], b"0123456789ab"]);
    }

    /// What Redis answers a client that must authenticate and has not, byte for byte; the
    /// limits are there whichever path (fast or incremental) reads the frame, and go when the
    /// caller says the client has authenticated.
    #[test]
    fn before_auth_requests_are_small_as_in_redis() {
        let unauthenticated = || {
            let mut p = parser();
            p.set_unauthenticated(true);
            p
        };
        let error = |input: &[u8]| {
            let mut buf = BytesMut::from(input);
            let e = unauthenticated().parse(&mut buf).unwrap_err();
            let mut out = BytesMut::new();
            e.write_reply(&mut out);
            String::from_utf8(out.to_vec()).unwrap()
        };
        assert_eq!(
            error(b"*11\r\n"),
            "-ERR Protocol error: unauthenticated multibulk length\r\n"
        );
        assert_eq!(
            error(b"*1\r\n$16385\r\n"),
            "-ERR Protocol error: unauthenticated bulk length\r\n"
        );
        // Whole frames (the fast path's) get the same answers.
        let mut eleven = b"*11\r\n".to_vec();
        eleven.extend(b"$1\r\na\r\n".repeat(11));
        assert!(error(&eleven).contains("unauthenticated multibulk length"));
        let mut big = b"*1\r\n$16385\r\n".to_vec();
        big.extend(std::iter::repeat_n(b'x', 16385));
        big.extend(b"\r\n");
        assert!(error(&big).contains("unauthenticated bulk length"));
        // The absolute limits come first, as in Redis.
        assert!(error(b"*2000000\r\n").contains("invalid multibulk length"));

        // At the limits: requests.
        let mut ten = b"*10\r\n".to_vec();
        ten.extend(b"$1\r\na\r\n".repeat(10));
        let mut at = b"*1\r\n$16384\r\n".to_vec();
        at.extend(std::iter::repeat_n(b'x', 16384));
        at.extend(b"\r\n");
        for input in [&ten, &at] {
            let mut p = unauthenticated();
            let mut buf = BytesMut::from(&input[..]);
            assert!(p.parse(&mut buf).unwrap().is_some());
        }

        // Authenticated: the same frames are requests.
        let mut p = unauthenticated();
        p.set_unauthenticated(false);
        assert!(!p.unauthenticated());
        let mut buf = BytesMut::from(&eleven[..]);
        buf.extend_from_slice(&big);
        assert_eq!(p.parse(&mut buf).unwrap().unwrap().len(), 11);
        assert_eq!(p.parse(&mut buf).unwrap().unwrap().len(), 1);
    }

    /// What `parse_in_place` reads is what `parse_into` reads from the same bytes (frame
    /// length, arguments, the wire tail), and it declines whatever `parse_into` would read
    /// another way: an inline command, a partial frame, a frame past the limits before AUTH,
    /// a frame whose header the general path must judge, or any frame while the parser is
    /// inside one.
    #[test]
    fn a_frame_read_in_place_is_the_frame_parse_into_reads() {
        let frames: [&[u8]; 4] = [
            b"*1\r\n$4\r\nPING\r\n",
            b"*4\r\n$8\r\nRL.CHECK\r\n$3\r\nk:1\r\n$3\r\n100\r\n$2\r\n60\r\n",
            b"*3\r\n$3\r\nSET\r\n$0\r\n\r\n$10\r\n0123456789\r\n",
            b"*2\r\n$4\r\nECHO\r\n$3\r\na\r\n\r\n",
        ];
        let pipeline: Vec<u8> = frames.concat();
        let mut at = 0;
        let mut spare = Vec::new();
        let reader = parser();
        let mut general = BytesMut::from(&pipeline[..]);
        let mut request = Request::default();
        let mut theirs = parser();
        for frame in frames {
            spare.clear();
            let len = reader
                .parse_in_place(&pipeline[at..], &mut spare)
                .expect("whole frame");
            assert_eq!(len, frame.len());
            let mine = RequestRef::in_place(&pipeline[at..at + len], &spare);
            assert!(theirs.parse_into(&mut general, &mut request).unwrap());
            assert_eq!(
                mine.args().collect::<Vec<_>>(),
                request.args().collect::<Vec<_>>()
            );
            assert_eq!(mine.wire_from(1), request.wire_from(1));
            assert_eq!(mine.to_request(), request.detached());
            at += len;
        }
        assert_eq!(reader.parse_in_place(&pipeline[at..], &mut spare), None);
        // `parse_into` leaves the request it filled last as it was until it reads a whole
        // frame: past `*0` and into a partial frame, it still names the last request.
        let mut p = parser();
        let mut buf = BytesMut::from(&b"*2\r\n$4\r\nECHO\r\n$1\r\nb\r\n*0\r\n*2\r\n$4\r\nEC"[..]);
        let mut r = Request::default();
        assert_eq!(p.parse_into(&mut buf, &mut r), Ok(true));
        assert_eq!(p.parse_into(&mut buf, &mut r), Ok(false));
        assert_eq!(r.args().collect::<Vec<_>>(), [&b"ECHO"[..], b"b"]);
        // Offsets are appended, each from its own frame's start.
        let mut both = vec![(7, 7)];
        let first = reader.parse_in_place(&pipeline, &mut both).unwrap();
        assert_eq!(
            reader.parse_in_place(&pipeline[first..], &mut both),
            Some(frames[1].len())
        );
        assert_eq!(both[..2], [(7, 7), (8, 4)]);
        assert_eq!(both[2..4], [(8, 8), (22, 3)]);
        // Declined: inline, every cut of a frame, `*0`, a leading zero, past the limits
        // before AUTH.
        assert_eq!(reader.parse_in_place(b"PING\r\n", &mut spare), None);
        for cut in 0..frames[1].len() {
            assert_eq!(
                reader.parse_in_place(&frames[1][..cut], &mut spare),
                None,
                "{cut}"
            );
        }
        assert_eq!(reader.parse_in_place(b"*0\r\n", &mut spare), None);
        assert_eq!(
            reader.parse_in_place(b"*1\r\n$04\r\nPING\r\n", &mut spare),
            None
        );
        let mut strict = parser();
        strict.set_unauthenticated(true);
        let eleven = Request::from_args(&[b"x"; 11]);
        let mut wire = b"*11\r\n".to_vec();
        for arg in eleven.args() {
            wire.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            wire.extend_from_slice(arg);
            wire.extend_from_slice(b"\r\n");
        }
        assert_eq!(strict.parse_in_place(&wire, &mut spare), None);
        assert_eq!(reader.parse_in_place(&wire, &mut spare), Some(wire.len()));
        // Inside a frame (part of one was parsed), nothing is read in place.
        let mut inside = parser();
        let mut partial = BytesMut::from(&frames[0][..5]);
        assert_eq!(inside.parse(&mut partial), Ok(None));
        assert_eq!(inside.parse_in_place(frames[1], &mut spare), None);
    }

    #[test]
    fn a_detached_request_holds_its_own_bytes() {
        let mut buf = BytesMut::from(&b"*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\n*1\r\n$4\r\nPING\r\n"[..]);
        let r = parser().parse(&mut buf).unwrap().unwrap();
        let d = r.detached();
        assert_eq!(d, r);
        assert_eq!(d.footprint(), r.footprint());
        assert!(r.footprint() >= 22);
        assert_ne!(d.frame.as_ptr(), r.frame.as_ptr());
    }
}
