//! A shard's journal: the replication records of the changes made under its lock.
//!
//! Off until the server turns it on (when a replica first connects), then every change a
//! command makes to the shard appends one record here, under the lock the change already
//! holds: no other lock, no allocation once the buffer has grown, no I/O. The replication
//! thread drains every shard's journal each flush interval. Expiry writes nothing: deadlines
//! are absolute, so a replica drops a key at the same instant the primary does.
//!
//! Records of one key within one flush interval are coalesced where it is free to tell: a
//! limiter record whose key is that of the journal's last record replaces it (a record is the
//! key's whole state, so the newer one says all the older one did). A hot key then sends one
//! record per flush instead of one per check; keys spread over many buckets rarely follow
//! themselves and are not searched for.
//!
//! A collection (list, hash, set, sorted set) is not encoded when it is written: the journal
//! notes its key and the place, and the drain encodes its state as it is then, once, at the
//! place of its last write (`Shard::drain_journal`). Its records keep their order against the
//! key's other records; against other keys' records a collection's state may arrive up to one
//! flush interval early, which a replica applying the drained batch whole never shows.

use sluice_core::Nanos;
use sluice_repl::record;

use crate::entry::Value;
use crate::watch::Watchers;

/// Collections written since the last drain: where in the records each one's state belongs,
/// and its key.
pub type Pending = Vec<(usize, Box<[u8]>)>;

#[derive(Debug, Default)]
pub struct Journal {
    pub on: bool,
    buf: Vec<u8>,
    /// Where the last record in `buf` starts, if it is a LIMITER (a newer state of its key may
    /// replace it), and its key's hash: keys that differ are told apart by one compare.
    last_limiter: Option<(usize, u32)>,
    /// The shard's watched keys (WATCH), if any: every change the journal hears of touches
    /// them, whether or not it is on.
    pub watchers: Option<Box<Watchers>>,
    /// Collections written since the last drain, each with where in `buf` its state belongs:
    /// a collection's whole state is encoded once, when the journal is drained
    /// (`Shard::drain_journal`), at the place of its last write, not once per write (a ZADD
    /// to a million-member set would otherwise copy the million members into the journal).
    pending: Pending,
}

impl Journal {
    /// `key` (whose hash is `h`) now holds `value` until `deadline`.
    #[inline]
    pub fn value(&mut self, h: u32, key: &[u8], deadline: Nanos, value: &Value) {
        self.touched(key);
        if !self.on {
            return;
        }
        match value {
            Value::Limiter(state) => {
                let at = match self.last_limiter {
                    Some((at, last_h))
                        if last_h == h && record::limiter_key(&self.buf[at..]) == Some(key) =>
                    {
                        self.buf.truncate(at);
                        at
                    }
                    _ => self.buf.len(),
                };
                record::encode_limiter(&mut self.buf, key, deadline, state);
                self.last_limiter = Some((at, h));
            }
            Value::Counter(c) => {
                record::encode_counter(
                    &mut self.buf,
                    key,
                    deadline,
                    c.as_bytes(&mut itoa::Buffer::new()),
                );
                self.last_limiter = None;
            }
            _collection => {
                let at = self.buf.len();
                // Written twice in a row: the place it already has says all.
                if self
                    .pending
                    .last()
                    .is_none_or(|(pos, k)| *pos != at || **k != *key)
                {
                    self.pending.push((at, key.into()));
                }
                // No LIMITER record may replace one written before this place.
                self.last_limiter = None;
            }
        }
    }

    /// Takes what is pending: the records, and the collections whose state the drain encodes
    /// (each with its place in the records).
    pub fn take(&mut self) -> (Vec<u8>, Pending) {
        self.last_limiter = None;
        (
            std::mem::take(&mut self.buf),
            std::mem::take(&mut self.pending),
        )
    }

    /// Gives back an emptied buffer, to keep its capacity.
    pub fn reuse(&mut self, mut buf: Vec<u8>) {
        if self.buf.is_empty() {
            buf.clear();
            self.buf = buf;
        }
    }

    /// `key` is gone.
    #[inline]
    pub fn del(&mut self, key: &[u8]) {
        self.touched(key);
        if self.on {
            record::encode_del(&mut self.buf, key);
            self.last_limiter = None;
        }
    }

    /// `key` changed or went (an expiry too, which writes no record): its watchers are dirty.
    #[inline]
    pub fn touched(&mut self, key: &[u8]) {
        if let Some(w) = &mut self.watchers {
            w.touch(key);
            if w.is_empty() {
                self.watchers = None;
            }
        }
    }

    /// Whether a change must be told to this journal even while it is off.
    #[inline]
    pub fn listening(&self) -> bool {
        self.on || self.watchers.is_some()
    }

    /// Whether collections wait for their state to be encoded (`Shard::drain_journal`).
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Moves every pending record to the end of `out` (no collection may be pending).
    pub fn drain_into(&mut self, out: &mut Vec<u8>) {
        debug_assert!(
            self.pending.is_empty(),
            "the shard encodes pending collections"
        );
        out.extend_from_slice(&self.buf);
        self.buf.clear();
        self.last_limiter = None;
    }

    /// Turns journaling on or off; off drops what is pending and the buffer.
    pub fn set_on(&mut self, on: bool) {
        self.on = on;
        if !on {
            self.buf = Vec::new();
            self.pending = Vec::new();
            self.last_limiter = None;
        }
    }
}
