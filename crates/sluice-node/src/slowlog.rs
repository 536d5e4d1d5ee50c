//! SLOWLOG's state: the last commands that took longer than `slowlog-log-slower-than`.
//!
//! # Cost on the request path
//! None per command. The connection loop already reads the clock once at the end of each read
//! batch (for the command statistics); it compares that batch's time per command with the
//! threshold (one relaxed load), and only a slow batch takes this module's lock. So the time
//! of an entry is the time its batch took divided by the commands in it: exact for a client
//! that sends one command at a time, the batch average for a pipeline, whose entry is its last
//! command (with `pipelined=N` in the client column).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering::Relaxed};

use parking_lot::Mutex;

/// The most arguments an entry keeps, and bytes of each, as Redis.
pub const MAX_ARGS: usize = 32;
pub const MAX_ARG_LEN: usize = 128;

/// One slow command.
#[derive(Debug, Clone)]
pub struct Entry {
    pub id: u64,
    /// Unix seconds when it was logged.
    pub at_unix_secs: u64,
    pub micros: u64,
    pub args: Vec<Vec<u8>>,
    pub client_addr: String,
    pub client_name: String,
}

#[derive(Debug)]
pub struct SlowLog {
    /// Microseconds; negative: off.
    slower_than: AtomicI64,
    max_len: AtomicUsize,
    next_id: AtomicU64,
    entries: Mutex<VecDeque<Entry>>,
}

impl SlowLog {
    pub fn new(slower_than_us: i64, max_len: u64) -> SlowLog {
        SlowLog {
            slower_than: AtomicI64::new(slower_than_us),
            max_len: AtomicUsize::new(usize::try_from(max_len).unwrap_or(usize::MAX)),
            next_id: AtomicU64::new(0),
            entries: Mutex::new(VecDeque::new()),
        }
    }

    pub fn slower_than(&self) -> i64 {
        self.slower_than.load(Relaxed)
    }

    pub fn set_slower_than(&self, us: i64) {
        self.slower_than.store(us, Relaxed);
    }

    pub fn max_len(&self) -> usize {
        self.max_len.load(Relaxed)
    }

    pub fn set_max_len(&self, n: usize) {
        self.max_len.store(n, Relaxed);
        self.entries.lock().truncate(n);
    }

    /// Whether a command that took `nanos` belongs in the log.
    #[inline]
    pub fn is_slow(&self, nanos: u64) -> bool {
        let threshold = self.slower_than.load(Relaxed);
        threshold >= 0 && nanos / 1000 >= threshold as u64
    }

    /// Adds an entry (its id is assigned here), dropping the oldest past `slowlog-max-len`.
    pub fn push(&self, mut entry: Entry) {
        let max = self.max_len();
        if max == 0 {
            return;
        }
        entry.id = self.next_id.fetch_add(1, Relaxed);
        let mut entries = self.entries.lock();
        entries.push_front(entry);
        entries.truncate(max);
    }

    /// The newest `count` entries, newest first.
    pub fn newest(&self, count: usize) -> Vec<Entry> {
        self.entries.lock().iter().take(count).cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.entries.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn reset(&self) {
        self.entries.lock().clear();
    }
}

/// A request's arguments as an entry keeps them: at most [`MAX_ARGS`] (the last one saying how
/// many more there were), each cut at [`MAX_ARG_LEN`] bytes (saying how many more), as Redis.
pub fn trimmed_args<'a>(args: impl ExactSizeIterator<Item = &'a [u8]>) -> Vec<Vec<u8>> {
    let total = args.len();
    let mut out = Vec::with_capacity(total.min(MAX_ARGS));
    for (i, a) in args.enumerate() {
        if i == MAX_ARGS - 1 && total > MAX_ARGS {
            out.push(format!("... ({} more arguments)", total - i).into_bytes());
            break;
        }
        if a.len() > MAX_ARG_LEN {
            let mut cut = a[..MAX_ARG_LEN].to_vec();
            cut.extend_from_slice(format!("... ({} more bytes)", a.len() - MAX_ARG_LEN).as_bytes());
            out.push(cut);
        } else {
            out.push(a.to_vec());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Entry {
        Entry {
            id: 0,
            at_unix_secs: 0,
            micros: 1,
            args: vec![],
            client_addr: String::new(),
            client_name: String::new(),
        }
    }

    #[test]
    fn keeps_the_newest_up_to_max_len() {
        let log = SlowLog::new(0, 2);
        for _ in 0..3 {
            log.push(entry());
        }
        let ids: Vec<u64> = log.newest(10).iter().map(|e| e.id).collect();
        assert_eq!(ids, [2, 1]);
        log.set_max_len(1);
        assert_eq!(log.len(), 1);
        assert!(log.is_slow(0));
        log.set_slower_than(-1);
        assert!(!log.is_slow(u64::MAX));
        log.set_slower_than(5);
        assert!(!log.is_slow(4_999) && log.is_slow(5_000));
    }

    #[test]
    fn long_requests_are_trimmed_like_redis() {
        let big = [b'x'; 200];
        let args: Vec<&[u8]> = std::iter::repeat_n(&big[..], 40).collect();
        let t = trimmed_args(args.into_iter());
        assert_eq!(t.len(), MAX_ARGS);
        assert!(t[0].ends_with(b"... (72 more bytes)"));
        assert_eq!(t[31], b"... (9 more arguments)");
    }
}
