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

use sluice_core::Nanos;
use sluice_repl::record;

use crate::entry::Value;
use crate::watch::Watchers;

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
            collection => {
                let kind = collection
                    .kind()
                    .code()
                    .expect("a collection has a DATA code");
                record::encode_data(&mut self.buf, key, deadline, kind, |out| {
                    collection.encode_collection(out);
                });
                self.last_limiter = None;
            }
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

    /// Moves every pending record to the end of `out`.
    pub fn drain_into(&mut self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.buf);
        self.buf.clear();
        self.last_limiter = None;
    }

    /// Turns journaling on or off; off drops what is pending and the buffer.
    pub fn set_on(&mut self, on: bool) {
        self.on = on;
        if !on {
            self.buf = Vec::new();
            self.last_limiter = None;
        }
    }
}
