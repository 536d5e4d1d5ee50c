//! A whole store as one byte string: what a full sync sends (and what a snapshot on disk holds).
//!
//! # Format
//!
//! ```text
//! snapshot := "SLUICESNAP" version:u16 frame* trailer
//! frame    := a LIMITER, COUNTER or (version 4) DATA record (see `record`); since version 3 a TIME record first
//!             and, from a primary, an ORIGIN record last
//! trailer  := len=13 op=0x7f count:u64 crc32:u32    count of frames; CRC-32 of every byte before the trailer
//! ```
//!
//! The writer is fed shard by shard, so the primary holds one shard lock at a time while it
//! copies that shard's entries. The reader checks the magic, the version, the trailer and the
//! checksum before it yields a single record: a truncated or corrupted snapshot loads nothing.

use sluice_core::{Nanos, State};

use crate::FORMAT_VERSION;
use crate::record::{self, DecodeError, OP_END, Reader, Record};

const MAGIC: &[u8] = b"SLUICESNAP";
const HEADER: usize = MAGIC.len() + 2;
const TRAILER: usize = 1 + 1 + 8 + 4;

/// Builds a snapshot in a buffer.
#[derive(Debug)]
pub struct SnapshotWriter {
    out: Vec<u8>,
    count: u64,
}

impl Default for SnapshotWriter {
    fn default() -> Self {
        SnapshotWriter::new()
    }
}

impl SnapshotWriter {
    pub fn new() -> SnapshotWriter {
        let mut out = Vec::with_capacity(64 * 1024);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        SnapshotWriter { out, count: 0 }
    }

    /// The writer's clock now (a TIME record): whoever reads the snapshot under another clock
    /// can tell the two apart. Written first.
    pub fn time(&mut self, now: Nanos) {
        Record::Time(now).encode(&mut self.out);
        self.count += 1;
    }

    /// Where the snapshot stands in a replication stream (an ORIGIN record, see
    /// [`Record::Origin`]), after the entries.
    pub fn origin(&mut self, replid: &[u8], offset: u64) {
        Record::Origin { replid, offset }.encode(&mut self.out);
        self.count += 1;
    }

    pub fn limiter(&mut self, key: &[u8], deadline: Nanos, state: &State) {
        record::encode_limiter(&mut self.out, key, deadline, state);
        self.count += 1;
    }

    pub fn counter(&mut self, key: &[u8], deadline: Nanos, value: &[u8]) {
        record::encode_counter(&mut self.out, key, deadline, value);
        self.count += 1;
    }

    /// A collection of `kind` (see `record`'s DATA); `body` writes its entries.
    pub fn data(&mut self, key: &[u8], deadline: Nanos, kind: u8, body: impl FnOnce(&mut Vec<u8>)) {
        record::encode_data(&mut self.out, key, deadline, kind, body);
        self.count += 1;
    }

    /// Makes room for `bytes` more without reallocating (a store's scan calls this between
    /// two steps, so that no step copies the whole buffer while it holds a shard's lock).
    pub fn reserve(&mut self, bytes: usize) {
        self.out.reserve(bytes);
    }

    /// Entries written so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Appends the trailer and returns the snapshot's bytes.
    pub fn finish(mut self) -> Vec<u8> {
        let crc = crc32fast::hash(&self.out);
        self.out.extend_from_slice(&[(TRAILER - 1) as u8, OP_END]);
        self.out.extend_from_slice(&self.count.to_le_bytes());
        self.out.extend_from_slice(&crc.to_le_bytes());
        self.out
    }
}

/// Why a snapshot was refused. Nothing of it was loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotError {
    /// Not a Sluice snapshot.
    BadMagic,
    /// A version this build does not read (a newer Sluice wrote it).
    Version(u16),
    /// Shorter than its header and trailer, or its trailer is not where it should be.
    Truncated,
    /// The bytes do not match the checksum in the trailer.
    Checksum,
    /// The trailer's count does not match the frames.
    Count,
    /// A frame inside is malformed.
    Record(DecodeError),
}

impl std::fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SnapshotError::BadMagic => write!(f, "not a Sluice snapshot (bad magic)"),
            SnapshotError::Version(v) => write!(
                f,
                "snapshot format version {v} is not supported (this build reads version {FORMAT_VERSION})"
            ),
            SnapshotError::Truncated => write!(f, "snapshot is truncated"),
            SnapshotError::Checksum => write!(f, "snapshot checksum mismatch (corrupted)"),
            SnapshotError::Count => write!(f, "snapshot entry count mismatch"),
            SnapshotError::Record(e) => write!(f, "snapshot record is malformed: {e}"),
        }
    }
}

impl std::error::Error for SnapshotError {}

/// Reads a snapshot checked whole: iterate it for its records.
#[derive(Debug)]
pub struct SnapshotReader<'a> {
    frames: &'a [u8],
    count: u64,
}

impl<'a> SnapshotReader<'a> {
    /// Checks the header, the trailer and the checksum, and every frame's shape.
    pub fn new(bytes: &'a [u8]) -> Result<SnapshotReader<'a>, SnapshotError> {
        if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
            return Err(SnapshotError::BadMagic);
        }
        if bytes.len() < HEADER + TRAILER {
            return Err(SnapshotError::Truncated);
        }
        let version = u16::from_le_bytes([bytes[MAGIC.len()], bytes[MAGIC.len() + 1]]);
        if !(crate::OLDEST_READ_VERSION..=FORMAT_VERSION).contains(&version) {
            return Err(SnapshotError::Version(version));
        }
        let (body, trailer) = bytes.split_at(bytes.len() - TRAILER);
        let mut r = Reader(trailer);
        if usize::from(trailer[0]) != TRAILER - 1 || trailer[1] != OP_END {
            return Err(SnapshotError::Truncated);
        }
        r.0 = &trailer[2..];
        let count = r.u64().map_err(|_| SnapshotError::Truncated)?;
        let crc = r.u32().map_err(|_| SnapshotError::Truncated)?;
        if crc32fast::hash(body) != crc {
            return Err(SnapshotError::Checksum);
        }
        let reader = SnapshotReader {
            frames: &body[HEADER..],
            count,
        };
        let mut seen = 0u64;
        for rec in reader.iter() {
            rec?;
            seen += 1;
        }
        if seen != count {
            return Err(SnapshotError::Count);
        }
        Ok(reader)
    }

    /// Entries in the snapshot.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The records, in order (each already checked by `new`).
    pub fn iter(&self) -> impl Iterator<Item = Result<Record<'a>, SnapshotError>> + 'a {
        let mut rest = self.frames;
        std::iter::from_fn(move || {
            if rest.is_empty() {
                return None;
            }
            Some(match record::decode(rest) {
                Ok(Some((
                    rec @ (Record::Limiter { .. }
                    | Record::Counter { .. }
                    | Record::Data { .. }
                    | Record::Time(_)
                    | Record::Origin { .. }),
                    used,
                ))) => {
                    rest = &rest[used..];
                    Ok(rec)
                }
                Ok(Some(_)) => {
                    rest = &[];
                    Err(SnapshotError::Record(DecodeError::BadState))
                }
                Ok(None) => {
                    rest = &[];
                    Err(SnapshotError::Truncated)
                }
                Err(e) => {
                    rest = &[];
                    Err(SnapshotError::Record(e))
                }
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut w = SnapshotWriter::new();
        w.limiter(b"a", Nanos(10), &State::Token { tat: Nanos(20) });
        w.counter(b"n", Nanos::MAX, b"5");
        w.data(b"h", Nanos(30), 2, |out| {
            out.extend_from_slice(b"\x01f\x011")
        });
        assert_eq!(w.count(), 3);
        w.finish()
    }

    #[test]
    fn round_trip() {
        let bytes = sample();
        let r = SnapshotReader::new(&bytes).unwrap();
        assert_eq!(r.count(), 3);
        let recs: Vec<_> = r.iter().collect::<Result<_, _>>().unwrap();
        assert_eq!(
            recs,
            vec![
                Record::Limiter {
                    key: b"a",
                    deadline: Nanos(10),
                    state: State::Token { tat: Nanos(20) }
                },
                Record::Counter {
                    key: b"n",
                    deadline: Nanos::MAX,
                    value: b"5"
                },
                Record::Data {
                    key: b"h",
                    deadline: Nanos(30),
                    kind: 2,
                    body: b"\x01f\x011"
                }
            ]
        );
        let empty = SnapshotWriter::new().finish();
        assert_eq!(SnapshotReader::new(&empty).unwrap().iter().count(), 0);
    }

    #[test]
    fn damage_is_refused() {
        let bytes = sample();
        assert_eq!(
            SnapshotReader::new(b"REDIS0011").unwrap_err(),
            SnapshotError::BadMagic
        );
        for cut in 0..bytes.len() {
            assert!(SnapshotReader::new(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        for i in MAGIC.len() + 2..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x40;
            assert!(SnapshotReader::new(&bad).is_err(), "flip at {i}");
        }
        let mut newer = bytes.clone();
        newer[MAGIC.len()] = 9;
        assert_eq!(
            SnapshotReader::new(&newer).unwrap_err(),
            SnapshotError::Version(9)
        );
    }
}
