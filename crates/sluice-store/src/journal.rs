//! A shard's journal: the replication records of the changes made under its lock.
//!
//! Off until the server turns it on (when a replica first connects), then every change a
//! command makes to the shard appends one record here, under the lock the change already
//! holds: no other lock, no allocation once the buffer has grown, no I/O. The replication
//! thread drains every shard's journal each flush interval. Expiry writes nothing: deadlines
//! are absolute, so a replica drops a key at the same instant the primary does.

use sluice_core::Nanos;
use sluice_repl::record;

use crate::entry::Value;

#[derive(Debug, Default)]
pub struct Journal {
    pub on: bool,
    pub buf: Vec<u8>,
}

impl Journal {
    /// `key` now holds `value` until `deadline`.
    #[inline]
    pub fn value(&mut self, key: &[u8], deadline: Nanos, value: &Value) {
        if !self.on {
            return;
        }
        match value {
            Value::Limiter(state) => record::encode_limiter(&mut self.buf, key, deadline, state),
            Value::Counter(c) => record::encode_counter(
                &mut self.buf,
                key,
                deadline,
                c.as_bytes(&mut itoa::Buffer::new()),
            ),
        }
    }

    /// `key` is gone.
    #[inline]
    pub fn del(&mut self, key: &[u8]) {
        if self.on {
            record::encode_del(&mut self.buf, key);
        }
    }
}
