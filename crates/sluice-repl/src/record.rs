//! Replication records.
//!
//! # Format (version 3, little-endian)
//!
//! ```text
//! frame   := len:varint op:u8 body        len counts op and body
//! LIMITER := op=1 keylen:varint key state deadline:delta
//! COUNTER := op=2 keylen:varint key deadline:delta value   value: the rest of the body
//! DEL     := op=3 key                                     key: the rest of the body
//! FLUSH   := op=4
//! PING    := op=5                                         keeps an idle link's clock fresh
//! GETACK  := op=6                                         asks the replica to ack at once
//! OFFSET  := op=7 offset:u64                              a slot migration feed's position in
//!                                                         its source's stream (see below)
//! TIME    := op=8 now:u64                                 the writer's clock (version 3): first
//!                                                         in a snapshot saved to disk
//! ORIGIN  := op=9 offset:u64 replid                       a snapshot on disk saved by a primary
//!                                                         (version 3): its stream's id and end,
//!                                                         after the entries; replid: the rest
//! DATA    := op=10 keylen:varint key deadline:delta kind:u8 body
//!                                                         a collection's whole state (version 4):
//!                                                         kind 1 list, 2 hash, 3 set, 4 sorted
//!                                                         set; body (the rest): its entries as
//!                                                         LEB128-length-prefixed strings (a
//!                                                         hash's field, value pairs; a sorted
//!                                                         set's member, score:f64 pairs)
//! state   := tag:u8 payload
//!   TOKEN=1, GCRA=2, LEAKY=6: tat:u64
//!   SLIDING=3: start:u64 prev:u32 curr:u32
//!   FIXED=4:   start:u64 count:u64
//!   LOG=5:     capacity:u32 n:u32 n×timestamp:u64
//!   LEASE=7:   n:u32 n×(id:u64 expiry:u64)                 ids strictly increasing (version 3)
//! varint  := LEB128 (7 bits a byte, low first; a frame length takes at most 5 bytes)
//! delta   := varint of zigzag(deadline − base), wrapping: base is the state's first time
//!            (tat, start, the oldest timestamp of a LOG, the first lease's expiry) or 0
//!            (COUNTER, an empty LOG)
//! ```
//!
//! Version 2 is version 1 made short, because the stream is most of what replication costs a
//! primary: a bucket's deadline is its `tat` (to within nanoseconds), so as a delta from it it
//! takes one byte instead of eight, and lengths below 128 take one byte instead of four. A
//! TOKEN check on a 15-byte key journals 28 bytes instead of 41. Version 3 added the TIME
//! record and the LEASE state; a version 3 node reads version 2 snapshots.
//!
//! A slot migration feed carries only the records of the moving slots, so its own byte count
//! means nothing to the source; after each chunk it says with OFFSET where in the source's
//! stream it is, and the importing node acks that.
//!
//! Deadlines and times are absolute Unix nanoseconds (`u64::MAX`: no deadline), so a record
//! means the same whenever it is applied, and expiry needs no record of its own. They are read
//! on the writer's clock: a reader whose clock differs moves them by the difference
//! ([`Record::shifted`]; a node measures a peer's clock when it links to it).

use sluice_core::fixed::Fixed;
use sluice_core::lease::LeaseSet;
use sluice_core::log::LogRing;
use sluice_core::sliding::Sliding;
use sluice_core::{Nanos, State};

const OP_LIMITER: u8 = 1;
const OP_COUNTER: u8 = 2;
const OP_DEL: u8 = 3;
const OP_FLUSH: u8 = 4;
const OP_PING: u8 = 5;
const OP_GETACK: u8 = 6;
const OP_OFFSET: u8 = 7;
const OP_TIME: u8 = 8;
const OP_ORIGIN: u8 = 9;
const OP_DATA: u8 = 10;
/// Used only by snapshots: the trailer (see `snapshot`).
pub(crate) const OP_END: u8 = 0x7f;

const TAG_TOKEN: u8 = 1;
const TAG_GCRA: u8 = 2;
const TAG_SLIDING: u8 = 3;
const TAG_FIXED: u8 = 4;
const TAG_LOG: u8 = 5;
const TAG_LEAKY: u8 = 6;
const TAG_LEASE: u8 = 7;

/// The longest frame a decoder accepts: a key at Redis's 512 MB bulk limit plus its state.
pub const MAX_FRAME: usize = 512 * 1024 * 1024 + 1024;

/// One replicated change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record<'a> {
    /// `key` holds limiter `state` until `deadline`.
    Limiter {
        key: &'a [u8],
        deadline: Nanos,
        state: State,
    },
    /// `key` holds the string `value` until `deadline` (`Nanos::MAX`: no deadline).
    Counter {
        key: &'a [u8],
        deadline: Nanos,
        value: &'a [u8],
    },
    /// `key` holds a collection of `kind` (see the format) with these entries until
    /// `deadline`.
    Data {
        key: &'a [u8],
        deadline: Nanos,
        kind: u8,
        body: &'a [u8],
    },
    /// `key` is gone (DEL, eviction, a check that left it fresh).
    Del { key: &'a [u8] },
    /// Every key is gone (FLUSHALL).
    Flush,
    /// Nothing changed; the link is alive.
    Ping,
    /// The primary asks for a `REPLCONF ACK` now (WAIT).
    GetAck,
    /// A migration feed's position in its source's stream.
    Offset(u64),
    /// The writer's clock when it wrote what follows.
    Time(Nanos),
    /// Where a snapshot stands in a replication stream, whatever role saved it (a primary's
    /// own, a replica's primary's): its id, and the offset when the save began, which every
    /// entry of the snapshot is at least as new as.
    Origin { replid: &'a [u8], offset: u64 },
}

/// Why bytes are not a record. The replica closes the link on any of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// A frame longer than [`MAX_FRAME`] or shorter than its fields.
    BadLength,
    /// An op or state tag this version does not know.
    UnknownOp(u8),
    /// A state whose fields are out of range (a LOG ring that does not fit).
    BadState,
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::BadLength => write!(f, "bad record length"),
            DecodeError::UnknownOp(op) => write!(f, "unknown record op or tag {op}"),
            DecodeError::BadState => write!(f, "bad limiter state"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// Starts a frame: reserves one byte for its length and writes `op`; returns where the
/// length goes.
#[inline]
fn begin(out: &mut Vec<u8>, op: u8) -> usize {
    let at = out.len();
    out.extend_from_slice(&[0, op]);
    at
}

/// Ends the frame begun at `at` by writing its length, moving the frame up if the length
/// needs more than the one byte reserved (a frame of 128 bytes or more: rare, and not on
/// the request path's common frame).
#[inline]
fn end(out: &mut Vec<u8>, at: usize) {
    let len = out.len() - at - 1;
    if len < 0x80 {
        out[at] = len as u8;
        return;
    }
    let mut head = [0u8; 10];
    let n = varint(&mut head, len as u64);
    out.splice(at..at + 1, head[..n].iter().copied());
}

/// Writes `v` as a varint at the start of `buf`; returns its length (1 to 10 bytes).
#[inline]
fn varint(buf: &mut [u8], mut v: u64) -> usize {
    let mut i = 0;
    while v >= 0x80 {
        buf[i] = (v as u8) | 0x80;
        v >>= 7;
        i += 1;
    }
    buf[i] = v as u8;
    i + 1
}

#[inline]
fn put_varint(out: &mut Vec<u8>, v: u64) {
    let mut buf = [0u8; 10];
    let n = varint(&mut buf, v);
    out.extend_from_slice(&buf[..n]);
}

/// `deadline` as a zigzag delta from `base` (see the format).
#[inline]
fn delta(deadline: Nanos, base: Nanos) -> u64 {
    let d = deadline.0.wrapping_sub(base.0) as i64;
    ((d << 1) ^ (d >> 63)) as u64
}

#[inline]
fn undelta(z: u64, base: Nanos) -> Nanos {
    let d = ((z >> 1) as i64) ^ -((z & 1) as i64);
    Nanos(base.0.wrapping_add(d as u64))
}

/// The time a state's deadline is written relative to.
fn base(state: &State) -> Nanos {
    match state {
        State::Token { tat } | State::Gcra { tat } | State::Leaky { tat } => *tat,
        State::Sliding(s) => s.start,
        State::Fixed(s) => s.start,
        State::Log(ring) => ring.iter().next().unwrap_or(Nanos(0)),
        State::Lease(set) => set.iter().next().map_or(Nanos(0), |(_, expiry)| expiry),
    }
}

#[inline]
fn put_key(out: &mut Vec<u8>, key: &[u8]) {
    put_varint(out, key.len() as u64);
    out.extend_from_slice(key);
}

/// Appends a LIMITER frame. This runs under a shard lock on every journaled check, so the
/// common frame (a one-`tat` state, a key of up to 40 bytes) is written in place: the buffer
/// grows by the longest such frame (a fixed-size copy of zeros, no call), the fields go
/// straight into it, and it is cut back to the frame's length.
#[inline]
pub fn encode_limiter(out: &mut Vec<u8>, key: &[u8], deadline: Nanos, state: &State) {
    let tat = match state {
        State::Token { tat } => Some((TAG_TOKEN, tat)),
        State::Gcra { tat } => Some((TAG_GCRA, tat)),
        State::Leaky { tat } => Some((TAG_LEAKY, tat)),
        _ => None,
    };
    if let Some((tag, tat)) = tat
        && key.len() <= SMALL_KEY
    {
        let at = out.len();
        out.extend_from_slice(&[0u8; SMALL_FRAME]);
        let frame: &mut [u8; SMALL_FRAME] = (&mut out[at..])
            .try_into()
            .expect("SMALL_FRAME bytes appended");
        // len, op, keylen: one byte each (the frame is under 128 bytes, the key under 41).
        frame[1] = OP_LIMITER;
        frame[2] = key.len() as u8;
        let mut n = 3 + key.len();
        frame[3..n].copy_from_slice(key);
        frame[n] = tag;
        frame[n + 1..n + 9].copy_from_slice(&tat.0.to_le_bytes());
        n += 9;
        n += varint(&mut frame[n..], delta(deadline, *tat));
        frame[0] = (n - 1) as u8;
        out.truncate(at + n);
        return;
    }
    let at = begin(out, OP_LIMITER);
    put_key(out, key);
    match state {
        State::Token { tat } => put_tat(out, TAG_TOKEN, *tat),
        State::Gcra { tat } => put_tat(out, TAG_GCRA, *tat),
        State::Leaky { tat } => put_tat(out, TAG_LEAKY, *tat),
        State::Sliding(s) => {
            out.push(TAG_SLIDING);
            out.extend_from_slice(&s.start.0.to_le_bytes());
            out.extend_from_slice(&s.prev.to_le_bytes());
            out.extend_from_slice(&s.curr.to_le_bytes());
        }
        State::Fixed(s) => {
            out.push(TAG_FIXED);
            out.extend_from_slice(&s.start.0.to_le_bytes());
            out.extend_from_slice(&s.count.to_le_bytes());
        }
        State::Log(ring) => {
            out.push(TAG_LOG);
            out.extend_from_slice(&(ring.capacity() as u32).to_le_bytes());
            out.extend_from_slice(&(ring.len() as u32).to_le_bytes());
            for t in ring.iter() {
                out.extend_from_slice(&t.0.to_le_bytes());
            }
        }
        State::Lease(set) => {
            out.push(TAG_LEASE);
            out.extend_from_slice(&(set.len() as u32).to_le_bytes());
            for (id, expiry) in set.iter() {
                out.extend_from_slice(&id.to_le_bytes());
                out.extend_from_slice(&expiry.0.to_le_bytes());
            }
        }
    }
    put_varint(out, delta(deadline, base(state)));
    end(out, at);
}

/// Longest key `encode_limiter` writes in place.
const SMALL_KEY: usize = 40;
/// The longest frame it writes in place: len, op, keylen, key, tag, tat, a 10-byte delta.
const SMALL_FRAME: usize = 3 + SMALL_KEY + 1 + 8 + 10;

#[inline]
fn put_tat(out: &mut Vec<u8>, tag: u8, tat: Nanos) {
    out.push(tag);
    out.extend_from_slice(&tat.0.to_le_bytes());
}

/// The key of the LIMITER frame at the start of `frame`, if it is one with one-byte length
/// fields (every frame `encode_limiter` writes in place): what a journal compares to coalesce
/// a key's consecutive records.
///
/// Longer frames (a key's lease set, a LOG ring) are read with their varint lengths, so that a
/// hot key's large state is coalesced too: it is what such a key costs the stream.
#[inline]
pub fn limiter_key(frame: &[u8]) -> Option<&[u8]> {
    match frame {
        [len, OP_LIMITER, keylen, rest @ ..] if *len < 0x80 && *keylen < 0x80 => {
            rest.get(..usize::from(*keylen))
        }
        _ => long_limiter_key(frame),
    }
}

/// [`limiter_key`] for frames whose lengths take more than a byte.
#[cold]
fn long_limiter_key(frame: &[u8]) -> Option<&[u8]> {
    let mut r = Reader(frame);
    r.varint().ok()?;
    if r.u8().ok()? != OP_LIMITER {
        return None;
    }
    r.key().ok()
}

/// Appends a COUNTER frame.
pub fn encode_counter(out: &mut Vec<u8>, key: &[u8], deadline: Nanos, value: &[u8]) {
    let at = begin(out, OP_COUNTER);
    put_key(out, key);
    put_varint(out, delta(deadline, Nanos(0)));
    out.extend_from_slice(value);
    end(out, at);
}

/// Appends a DATA frame; `body` writes the collection's entries.
pub fn encode_data(
    out: &mut Vec<u8>,
    key: &[u8],
    deadline: Nanos,
    kind: u8,
    body: impl FnOnce(&mut Vec<u8>),
) {
    let at = begin(out, OP_DATA);
    put_key(out, key);
    put_varint(out, delta(deadline, Nanos(0)));
    out.push(kind);
    body(out);
    end(out, at);
}

/// Appends a DEL frame.
pub fn encode_del(out: &mut Vec<u8>, key: &[u8]) {
    let at = begin(out, OP_DEL);
    out.extend_from_slice(key);
    end(out, at);
}

fn encode_bare(out: &mut Vec<u8>, op: u8) {
    let at = begin(out, op);
    end(out, at);
}

impl Record<'_> {
    /// Appends this record's frame to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Record::Limiter {
                key,
                deadline,
                state,
            } => encode_limiter(out, key, *deadline, state),
            Record::Counter {
                key,
                deadline,
                value,
            } => encode_counter(out, key, *deadline, value),
            Record::Data {
                key,
                deadline,
                kind,
                body,
            } => encode_data(out, key, *deadline, *kind, |out| {
                out.extend_from_slice(body)
            }),
            Record::Del { key } => encode_del(out, key),
            Record::Flush => encode_bare(out, OP_FLUSH),
            Record::Ping => encode_bare(out, OP_PING),
            Record::GetAck => encode_bare(out, OP_GETACK),
            Record::Offset(n) => {
                let at = begin(out, OP_OFFSET);
                out.extend_from_slice(&n.to_le_bytes());
                end(out, at);
            }
            Record::Time(now) => {
                let at = begin(out, OP_TIME);
                out.extend_from_slice(&now.0.to_le_bytes());
                end(out, at);
            }
            Record::Origin { replid, offset } => {
                let at = begin(out, OP_ORIGIN);
                out.extend_from_slice(&offset.to_le_bytes());
                out.extend_from_slice(replid);
                end(out, at);
            }
        }
    }

    /// This record with every instant in it moved by `by` nanoseconds: read under a clock
    /// that is `by` ahead of the writer's.
    pub fn shifted(self, by: i64) -> Self {
        if by == 0 {
            return self;
        }
        match self {
            Record::Limiter {
                key,
                deadline,
                state,
            } => Record::Limiter {
                key,
                deadline: deadline.shifted(by),
                state: state.shifted(by),
            },
            Record::Counter {
                key,
                deadline,
                value,
            } => Record::Counter {
                key,
                deadline: deadline.shifted(by),
                value,
            },
            Record::Data {
                key,
                deadline,
                kind,
                body,
            } => Record::Data {
                key,
                deadline: deadline.shifted(by),
                kind,
                body,
            },
            other => other,
        }
    }

    /// The key a record writes (LIMITER, COUNTER, DATA, DEL), if it writes one.
    pub fn key(&self) -> Option<&[u8]> {
        match self {
            Record::Limiter { key, .. }
            | Record::Counter { key, .. }
            | Record::Data { key, .. }
            | Record::Del { key } => Some(key),
            _ => None,
        }
    }

    /// The encoded frame, as a new buffer.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }
}

/// Decodes the record at the start of `buf`: `Ok(None)` if the frame is not whole yet,
/// else the record and the bytes it took.
pub fn decode(buf: &[u8]) -> Result<Option<(Record<'_>, usize)>, DecodeError> {
    let mut len = 0usize;
    let mut head = 0;
    loop {
        let Some(&b) = buf.get(head) else {
            return Ok(None);
        };
        len |= usize::from(b & 0x7f) << (7 * head);
        head += 1;
        if b < 0x80 {
            break;
        }
        if head == 5 {
            return Err(DecodeError::BadLength);
        }
    }
    if len == 0 || len > MAX_FRAME {
        return Err(DecodeError::BadLength);
    }
    let Some(frame) = buf.get(head..head + len) else {
        return Ok(None);
    };
    Ok(Some((decode_body(frame[0], &frame[1..])?, head + len)))
}

fn decode_body(op: u8, body: &[u8]) -> Result<Record<'_>, DecodeError> {
    let mut r = Reader(body);
    let record = match op {
        OP_LIMITER => {
            let key = r.key()?;
            let state = r.state()?;
            let deadline = undelta(r.varint()?, base(&state));
            Record::Limiter {
                key,
                deadline,
                state,
            }
        }
        OP_COUNTER => {
            let key = r.key()?;
            let deadline = undelta(r.varint()?, Nanos(0));
            let value = r.rest();
            Record::Counter {
                key,
                deadline,
                value,
            }
        }
        OP_DATA => {
            let key = r.key()?;
            let deadline = undelta(r.varint()?, Nanos(0));
            let kind = r.u8()?;
            Record::Data {
                key,
                deadline,
                kind,
                body: r.rest(),
            }
        }
        OP_DEL => Record::Del { key: r.rest() },
        OP_FLUSH => Record::Flush,
        OP_PING => Record::Ping,
        OP_GETACK => Record::GetAck,
        OP_OFFSET => Record::Offset(r.u64()?),
        OP_TIME => Record::Time(Nanos(r.u64()?)),
        OP_ORIGIN => Record::Origin {
            offset: r.u64()?,
            replid: r.rest(),
        },
        other => return Err(DecodeError::UnknownOp(other)),
    };
    if !r.0.is_empty() {
        return Err(DecodeError::BadLength);
    }
    Ok(record)
}

/// A cursor over a frame's body.
pub(crate) struct Reader<'a>(pub(crate) &'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.0.len() < n {
            return Err(DecodeError::BadLength);
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }

    pub(crate) fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.0)
    }

    /// A varint of at most 10 bytes whose value fits a `u64`.
    pub(crate) fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut v = 0u64;
        for i in 0..10 {
            let b = self.u8()?;
            if i == 9 && b > 1 {
                return Err(DecodeError::BadLength);
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(DecodeError::BadLength)
    }

    fn key(&mut self) -> Result<&'a [u8], DecodeError> {
        let len = usize::try_from(self.varint()?).map_err(|_| DecodeError::BadLength)?;
        self.take(len)
    }

    fn state(&mut self) -> Result<State, DecodeError> {
        Ok(match self.u8()? {
            TAG_TOKEN => State::Token {
                tat: Nanos(self.u64()?),
            },
            TAG_GCRA => State::Gcra {
                tat: Nanos(self.u64()?),
            },
            TAG_LEAKY => State::Leaky {
                tat: Nanos(self.u64()?),
            },
            TAG_SLIDING => State::Sliding(Sliding {
                start: Nanos(self.u64()?),
                prev: self.u32()?,
                curr: self.u32()?,
            }),
            TAG_FIXED => State::Fixed(Fixed {
                start: Nanos(self.u64()?),
                count: self.u64()?,
            }),
            TAG_LOG => {
                let capacity = self.u32()? as usize;
                let n = self.u32()? as usize;
                if n > capacity || self.0.len() < n.saturating_mul(8) {
                    return Err(DecodeError::BadState);
                }
                let ts: Vec<Nanos> = (0..n)
                    .map(|_| self.u64().map(Nanos))
                    .collect::<Result<_, _>>()?;
                State::Log(LogRing::from_timestamps(capacity, &ts).ok_or(DecodeError::BadState)?)
            }
            TAG_LEASE => {
                let n = self.u32()? as usize;
                if self.0.len() < n.saturating_mul(16) {
                    return Err(DecodeError::BadState);
                }
                let leases: Vec<(u64, Nanos)> = (0..n)
                    .map(|_| Ok((self.u64()?, Nanos(self.u64()?))))
                    .collect::<Result<_, _>>()?;
                State::Lease(LeaseSet::from_leases(&leases).ok_or(DecodeError::BadState)?)
            }
            other => return Err(DecodeError::UnknownOp(other)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn states() -> impl Strategy<Value = State> {
        prop_oneof![
            any::<u64>().prop_map(|t| State::Token { tat: Nanos(t) }),
            any::<u64>().prop_map(|t| State::Gcra { tat: Nanos(t) }),
            any::<u64>().prop_map(|t| State::Leaky { tat: Nanos(t) }),
            (any::<u64>(), any::<u32>(), any::<u32>()).prop_map(|(s, prev, curr)| {
                State::Sliding(Sliding {
                    start: Nanos(s),
                    prev,
                    curr,
                })
            }),
            (any::<u64>(), any::<u64>()).prop_map(|(s, count)| State::Fixed(Fixed {
                start: Nanos(s),
                count
            })),
            (1usize..50, proptest::collection::vec(any::<u64>(), 0..50)).prop_map(
                |(cap, mut ts)| {
                    ts.truncate(cap);
                    ts.sort_unstable();
                    let ts: Vec<Nanos> = ts.into_iter().map(Nanos).collect();
                    State::Log(LogRing::from_timestamps(cap, &ts).unwrap())
                }
            ),
            proptest::collection::btree_map(any::<u64>(), any::<u64>(), 0..40).prop_map(|m| {
                let leases: Vec<(u64, Nanos)> =
                    m.into_iter().map(|(id, e)| (id, Nanos(e))).collect();
                State::Lease(LeaseSet::from_leases(&leases).unwrap())
            }),
        ]
    }

    #[test]
    fn long_limiter_frames_name_their_key() {
        let key = vec![b'k'; 300];
        let leases: Vec<(u64, Nanos)> = (1..=40).map(|i| (i, Nanos(i * 1000))).collect();
        let state = State::Lease(LeaseSet::from_leases(&leases).unwrap());
        for key in [&key[..], b"short"] {
            let mut out = Vec::new();
            encode_limiter(&mut out, key, Nanos(5), &state);
            assert!(out.len() > 0x80);
            assert_eq!(limiter_key(&out), Some(key));
        }
        assert_eq!(limiter_key(&Record::Del { key: &key }.to_bytes()), None);
    }

    proptest! {
        #[test]
        fn limiter_records_round_trip(key in proptest::collection::vec(any::<u8>(), 0..200), d in any::<u64>(), state in states()) {
            let rec = Record::Limiter { key: &key, deadline: Nanos(d), state };
            let bytes = rec.to_bytes();
            let (back, used) = decode(&bytes).unwrap().unwrap();
            prop_assert_eq!(used, bytes.len());
            prop_assert_eq!(back, rec);
            // Every strict prefix is "not whole yet", never an error or a wrong record.
            for cut in 0..bytes.len() {
                prop_assert!(!matches!(decode(&bytes[..cut]), Ok(Some(_))));
            }
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode(&bytes);
        }

        #[test]
        fn counter_records_round_trip(key in proptest::collection::vec(any::<u8>(), 0..200), d in any::<u64>(), value in proptest::collection::vec(any::<u8>(), 0..20)) {
            let rec = Record::Counter { key: &key, deadline: Nanos(d), value: &value };
            let bytes = rec.to_bytes();
            prop_assert_eq!(decode(&bytes), Ok(Some((rec, bytes.len()))));
            for cut in 0..bytes.len() {
                prop_assert!(!matches!(decode(&bytes[..cut]), Ok(Some(_))));
            }
        }
    }

    #[test]
    fn other_records_round_trip() {
        for rec in [
            Record::Counter {
                key: b"n",
                deadline: Nanos::MAX,
                value: b"42",
            },
            Record::Counter {
                key: b"",
                deadline: Nanos(7),
                value: b"",
            },
            Record::Del { key: b"gone" },
            Record::Flush,
            Record::Ping,
            Record::GetAck,
            Record::Offset(12345),
        ] {
            let bytes = rec.to_bytes();
            assert_eq!(decode(&bytes), Ok(Some((rec, bytes.len()))));
        }
    }

    #[test]
    fn bad_frames_are_errors() {
        assert_eq!(decode(&[0]), Err(DecodeError::BadLength));
        assert_eq!(decode(&[1, 99]), Err(DecodeError::UnknownOp(99)));
        // A length of more than 5 varint bytes, and one past MAX_FRAME.
        assert_eq!(decode(&[0xff; 5]), Err(DecodeError::BadLength));
        assert_eq!(decode(&[0xff; 4]), Ok(None));
        assert_eq!(
            decode(&[0xff, 0xff, 0xff, 0xff, 0x0f]),
            Err(DecodeError::BadLength)
        );
        // A DEL with trailing bytes is fine (the key is the rest); a FLUSH with a body is not.
        assert_eq!(decode(&[2, OP_FLUSH, 1]), Err(DecodeError::BadLength));
        // A deadline varint running past 10 bytes, or past 64 bits.
        for tail in [
            &[0xff; 11][..],
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02],
        ] {
            let mut bad = Vec::new();
            let at = begin(&mut bad, OP_COUNTER);
            put_key(&mut bad, b"k");
            bad.extend_from_slice(tail);
            end(&mut bad, at);
            assert_eq!(decode(&bad), Err(DecodeError::BadLength));
        }
        // A LOG state claiming more timestamps than its ring holds.
        let mut bad = Vec::new();
        let at = begin(&mut bad, OP_LIMITER);
        put_key(&mut bad, b"k");
        bad.push(TAG_LOG);
        bad.extend_from_slice(&1u32.to_le_bytes());
        bad.extend_from_slice(&2u32.to_le_bytes());
        bad.extend_from_slice(&[0; 16]);
        bad.push(0);
        end(&mut bad, at);
        assert_eq!(decode(&bad), Err(DecodeError::BadState));
    }

    #[test]
    fn a_bucket_check_is_short() {
        let rec = Record::Limiter {
            key: b"rl:000000123456",
            deadline: Nanos(1_700_000_000_000_000_007),
            state: State::Token {
                tat: Nanos(1_700_000_000_000_000_000),
            },
        };
        // len, op, keylen, 15-byte key, tag, tat, one-byte deadline delta.
        assert_eq!(rec.to_bytes().len(), 1 + 1 + 1 + 15 + 1 + 8 + 1);
    }

    #[test]
    fn long_frames_take_a_longer_length() {
        let key = vec![b'k'; 300];
        for rec in [
            Record::Limiter {
                key: &key,
                deadline: Nanos(5),
                state: State::Gcra {
                    tat: Nanos(u64::MAX),
                },
            },
            Record::Counter {
                key: &key,
                deadline: Nanos::MAX,
                value: &key,
            },
            Record::Del { key: &key },
        ] {
            let bytes = rec.to_bytes();
            assert!(bytes[0] >= 0x80, "a two-byte length");
            assert_eq!(decode(&bytes), Ok(Some((rec, bytes.len()))));
        }
    }
}
