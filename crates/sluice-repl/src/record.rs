//! Replication records.
//!
//! # Format (version 1, little-endian)
//!
//! ```text
//! frame   := len:u32 op:u8 body            len counts op and body
//! LIMITER := op=1 deadline:u64 keylen:u32 key state
//! COUNTER := op=2 deadline:u64 keylen:u32 key value       value: the rest of the body
//! DEL     := op=3 key                                     key: the rest of the body
//! FLUSH   := op=4
//! PING    := op=5                                         keeps an idle link's clock fresh
//! GETACK  := op=6                                         asks the replica to ack at once
//! OFFSET  := op=7 offset:u64                              a slot migration feed's position in
//!                                                         its source's stream (see below)
//! state   := tag:u8 payload
//!   TOKEN=1, GCRA=2, LEAKY=6: tat:u64
//!   SLIDING=3: start:u64 prev:u32 curr:u32
//!   FIXED=4:   start:u64 count:u64
//!   LOG=5:     capacity:u32 n:u32 n×timestamp:u64
//! ```
//!
//! A slot migration feed carries only the records of the moving slots, so its own byte count
//! means nothing to the source; after each chunk it says with OFFSET where in the source's
//! stream it is, and the importing node acks that.
//!
//! Deadlines and times are absolute Unix nanoseconds (`u64::MAX`: no deadline), so a record
//! means the same whenever it is applied, and expiry needs no record of its own.

use sluice_core::fixed::Fixed;
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
/// Used only by snapshots: the trailer (see `snapshot`).
pub(crate) const OP_END: u8 = 0x7f;

const TAG_TOKEN: u8 = 1;
const TAG_GCRA: u8 = 2;
const TAG_SLIDING: u8 = 3;
const TAG_FIXED: u8 = 4;
const TAG_LOG: u8 = 5;
const TAG_LEAKY: u8 = 6;

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

/// Starts a frame: reserves its length field and writes `op`; returns where the length goes.
#[inline]
fn begin(out: &mut Vec<u8>, op: u8) -> usize {
    let at = out.len();
    out.extend_from_slice(&[0, 0, 0, 0, op]);
    at
}

/// Ends the frame begun at `at` by writing its length.
#[inline]
fn end(out: &mut [u8], at: usize) {
    let len = (out.len() - at - 4) as u32;
    out[at..at + 4].copy_from_slice(&len.to_le_bytes());
}

#[inline]
fn put_key(out: &mut Vec<u8>, deadline: Nanos, key: &[u8]) {
    out.extend_from_slice(&deadline.0.to_le_bytes());
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key);
}

/// Appends a LIMITER frame. This runs under a shard lock on every journaled check, so the
/// common frame (a one-`tat` state, a key of up to 40 bytes) is built on the stack and
/// appended with one copy.
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
        let mut frame = [0u8; 4 + 1 + 8 + 4 + SMALL_KEY + 1 + 8];
        let n = 4 + 1 + 8 + 4 + key.len() + 1 + 8;
        frame[..4].copy_from_slice(&((n - 4) as u32).to_le_bytes());
        frame[4] = OP_LIMITER;
        frame[5..13].copy_from_slice(&deadline.0.to_le_bytes());
        frame[13..17].copy_from_slice(&(key.len() as u32).to_le_bytes());
        frame[17..17 + key.len()].copy_from_slice(key);
        frame[17 + key.len()] = tag;
        frame[18 + key.len()..n].copy_from_slice(&tat.0.to_le_bytes());
        out.extend_from_slice(&frame[..n]);
        return;
    }
    let at = begin(out, OP_LIMITER);
    put_key(out, deadline, key);
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
    }
    end(out, at);
}

/// Longest key `encode_limiter` frames on the stack.
const SMALL_KEY: usize = 40;

#[inline]
fn put_tat(out: &mut Vec<u8>, tag: u8, tat: Nanos) {
    out.push(tag);
    out.extend_from_slice(&tat.0.to_le_bytes());
}

/// Appends a COUNTER frame.
pub fn encode_counter(out: &mut Vec<u8>, key: &[u8], deadline: Nanos, value: &[u8]) {
    let at = begin(out, OP_COUNTER);
    put_key(out, deadline, key);
    out.extend_from_slice(value);
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
            Record::Del { key } => encode_del(out, key),
            Record::Flush => encode_bare(out, OP_FLUSH),
            Record::Ping => encode_bare(out, OP_PING),
            Record::GetAck => encode_bare(out, OP_GETACK),
            Record::Offset(n) => {
                let at = begin(out, OP_OFFSET);
                out.extend_from_slice(&n.to_le_bytes());
                end(out, at);
            }
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
    let Some(len) = buf.get(..4) else {
        return Ok(None);
    };
    let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
    if len == 0 || len > MAX_FRAME {
        return Err(DecodeError::BadLength);
    }
    let Some(frame) = buf.get(4..4 + len) else {
        return Ok(None);
    };
    Ok(Some((decode_body(frame[0], &frame[1..])?, 4 + len)))
}

fn decode_body(op: u8, body: &[u8]) -> Result<Record<'_>, DecodeError> {
    let mut r = Reader(body);
    let record = match op {
        OP_LIMITER => {
            let (deadline, key) = r.key()?;
            let state = r.state()?;
            Record::Limiter {
                key,
                deadline,
                state,
            }
        }
        OP_COUNTER => {
            let (deadline, key) = r.key()?;
            let value = r.rest();
            Record::Counter {
                key,
                deadline,
                value,
            }
        }
        OP_DEL => Record::Del { key: r.rest() },
        OP_FLUSH => Record::Flush,
        OP_PING => Record::Ping,
        OP_GETACK => Record::GetAck,
        OP_OFFSET => Record::Offset(r.u64()?),
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

    fn key(&mut self) -> Result<(Nanos, &'a [u8]), DecodeError> {
        let deadline = Nanos(self.u64()?);
        let len = self.u32()? as usize;
        Ok((deadline, self.take(len)?))
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
        ]
    }

    proptest! {
        #[test]
        fn limiter_records_round_trip(key in proptest::collection::vec(any::<u8>(), 0..40), d in any::<u64>(), state in states()) {
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
        assert_eq!(decode(&[0, 0, 0, 0]), Err(DecodeError::BadLength));
        assert_eq!(decode(&[1, 0, 0, 0, 99]), Err(DecodeError::UnknownOp(99)));
        assert_eq!(
            decode(&[0xff, 0xff, 0xff, 0xff]),
            Err(DecodeError::BadLength)
        );
        // A DEL with trailing bytes is fine (the key is the rest); a FLUSH with a body is not.
        assert_eq!(
            decode(&[2, 0, 0, 0, OP_FLUSH, 1]),
            Err(DecodeError::BadLength)
        );
        // A LOG state claiming more timestamps than its ring holds.
        let mut bad = Vec::new();
        let at = begin(&mut bad, OP_LIMITER);
        put_key(&mut bad, Nanos(1), b"k");
        bad.push(TAG_LOG);
        bad.extend_from_slice(&1u32.to_le_bytes());
        bad.extend_from_slice(&2u32.to_le_bytes());
        bad.extend_from_slice(&[0; 16]);
        end(&mut bad, at);
        assert_eq!(decode(&bad), Err(DecodeError::BadState));
    }
}
