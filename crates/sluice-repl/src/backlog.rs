//! The replication backlog: the newest bytes of the stream, for partial resyncs.
//!
//! The stream is a sequence of chunks (one per flush). Offsets count stream bytes since the
//! replication id was made; a replica that asks to continue from offset `o` can, while
//! `start() <= o <= end()`. Chunks are `Bytes`, so handing a range to a replica copies nothing.

use std::collections::VecDeque;

use bytes::Bytes;

#[derive(Debug)]
pub struct Backlog {
    start: u64,
    chunks: VecDeque<Bytes>,
    len: usize,
    cap: usize,
}

impl Backlog {
    /// An empty backlog whose next byte has offset `offset`, keeping at least `cap` bytes.
    pub fn new(offset: u64, cap: usize) -> Backlog {
        Backlog {
            start: offset,
            chunks: VecDeque::new(),
            len: 0,
            cap: cap.max(1),
        }
    }

    /// Offset of the oldest byte held.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Offset after the newest byte (the master replication offset).
    pub fn end(&self) -> u64 {
        self.start + self.len as u64
    }

    /// Bytes held.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Appends a chunk, dropping the oldest chunks while what is left still holds `cap` bytes.
    pub fn push(&mut self, chunk: Bytes) {
        if chunk.is_empty() {
            return;
        }
        self.len += chunk.len();
        self.chunks.push_back(chunk);
        while let Some(front) = self.chunks.front() {
            if self.len - front.len() < self.cap {
                break;
            }
            self.len -= front.len();
            self.start += front.len() as u64;
            self.chunks.pop_front();
        }
    }

    /// The bytes from `offset` to the end, if the backlog still holds them.
    pub fn since(&self, offset: u64) -> Option<Vec<Bytes>> {
        if offset < self.start || offset > self.end() {
            return None;
        }
        let mut skip = (offset - self.start) as usize;
        let mut out = Vec::new();
        for c in &self.chunks {
            if skip >= c.len() {
                skip -= c.len();
                continue;
            }
            out.push(c.slice(skip..));
            skip = 0;
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn joined(parts: Vec<Bytes>) -> Vec<u8> {
        parts.concat()
    }

    #[test]
    fn ranges_and_overrun() {
        let mut b = Backlog::new(100, 8);
        assert_eq!(b.end(), 100);
        assert_eq!(joined(b.since(100).unwrap()), b"");
        b.push(Bytes::from_static(b"abcd"));
        b.push(Bytes::from_static(b"efgh"));
        assert_eq!((b.start(), b.end()), (100, 108));
        assert_eq!(joined(b.since(102).unwrap()), b"cdefgh");
        assert_eq!(joined(b.since(108).unwrap()), b"");
        assert!(b.since(109).is_none());
        // Overrun: the oldest chunk goes once the rest holds the capacity.
        b.push(Bytes::from_static(b"ijklmnop"));
        assert_eq!((b.start(), b.end()), (108, 116));
        assert!(b.since(107).is_none());
        assert_eq!(joined(b.since(110).unwrap()), b"klmnop");
        // A chunk larger than the capacity is kept whole.
        b.push(Bytes::from(vec![b'x'; 20]));
        assert_eq!((b.start(), b.end(), b.len()), (116, 136, 20));
    }
}
