//! SLOWLOG's state: the last commands that took longer than `slowlog-log-slower-than`.
//!
//! # Cost on the request path
//! None per command, unless the threshold is 0. The connection loop already reads the clock
//! once at the end of each read batch (for the command statistics); it compares that batch's
//! time per command with the threshold (one relaxed load), and only a slow batch takes this
//! module's lock. So the time of an entry is the time its batch took divided by the commands
//! in it: exact for a client that sends one command at a time, the batch average for a
//! pipeline, whose entry is its last command with its arguments, whatever follows it in the
//! batch (with `pipelined=N` in the client column).
//!
//! At `slowlog-log-slower-than 0` (log everything, a setting for a debugging session) each
//! command is timed on its own and logged as it ends, as Redis logs: one entry per command,
//! and a `SLOWLOG LEN` later in the same pipeline counts the commands before it. That costs a
//! clock read per command, only while the threshold is 0.
//!
//! # What an entry shows
//! A request's arguments as Redis keeps them ([`entry_args`]): credentials replaced by
//! `(redacted)` exactly where Redis's commands redact them, then trimmed to [`MAX_ARGS`]
//! arguments of [`MAX_ARG_LEN`] bytes. Both connection loops log through
//! `conn::Core::run_batch`, so what one shows the other does.

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

    /// `slowlog-log-slower-than 0`: every command is logged, each with its own time.
    #[inline]
    pub fn logs_every_command(&self) -> bool {
        self.slower_than.load(Relaxed) == 0
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

/// What Redis shows in place of a credential.
pub const REDACTED: &[u8] = b"(redacted)";

/// CONFIG parameters whose values are secrets (Redis's `SENSITIVE_CONFIG`).
const SENSITIVE_CONFIG: &[&str] = &[
    "requirepass",
    "masterauth",
    "masteruser",
    "tls-key-file-pass",
    "tls-client-key-file-pass",
];

/// Which of a request's first 64 arguments are credentials, as bits, where Redis's commands
/// call `redactClientCommandArgument`: AUTH's user and password (AUTH with more arguments is
/// refused before, and shown whole), HELLO's two after each AUTH, every argument of ACL SETUSER
/// from the user name on (its rules hold passwords and hashes: `>`, `<`, `#`, `!`), and the
/// value of CONFIG SET's sensitive parameters. Redis's MIGRATE AUTH/AUTH2 has no command here.
///
/// HELLO is redacted whatever its protocol version says (Redis checks that first, and shows the
/// password of a HELLO it refuses for it).
fn credentials(args: &[&[u8]]) -> u64 {
    let is = |i: usize, word: &str| {
        args.get(i)
            .is_some_and(|a| a.eq_ignore_ascii_case(word.as_bytes()))
    };
    let from = |i: usize| if i < 64 { !0u64 << i } else { 0 };
    let bit = |i: usize| if i < 64 { 1u64 << i } else { 0 };
    let argc = args.len();
    if is(0, "auth") && (2..=3).contains(&argc) {
        return from(1);
    }
    if is(0, "acl") && is(1, "setuser") && argc >= 3 {
        return from(2);
    }
    let mut mask = 0;
    if is(0, "hello") {
        let mut j = 2;
        while j < argc {
            if is(j, "auth") && j + 2 < argc {
                mask |= bit(j + 1) | bit(j + 2);
                j += 3;
            } else if is(j, "setname") && j + 1 < argc {
                j += 2;
            } else {
                break;
            }
        }
    } else if is(0, "config") && is(1, "set") {
        for j in (2..argc.saturating_sub(1)).step_by(2) {
            if SENSITIVE_CONFIG.iter().any(|name| is(j, name)) {
                mask |= bit(j + 1);
            }
        }
    }
    mask
}

/// A request's arguments as an entry keeps them: credentials redacted as Redis redacts them,
/// at most [`MAX_ARGS`] arguments (the last one saying how many more there were), each cut at
/// [`MAX_ARG_LEN`] bytes (saying how many more), as Redis.
pub fn entry_args<'a>(args: impl ExactSizeIterator<Item = &'a [u8]>) -> Vec<Vec<u8>> {
    let total = args.len();
    let args: Vec<&[u8]> = args.collect();
    let secret = credentials(&args);
    let mut out = Vec::with_capacity(total.min(MAX_ARGS));
    for (i, a) in args.into_iter().enumerate() {
        if i == MAX_ARGS - 1 && total > MAX_ARGS {
            out.push(format!("... ({} more arguments)", total - i).into_bytes());
            break;
        }
        if secret & (1 << i) != 0 {
            out.push(REDACTED.to_vec());
        } else if a.len() > MAX_ARG_LEN {
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
        let t = entry_args(args.into_iter());
        assert_eq!(t.len(), MAX_ARGS);
        assert!(t[0].ends_with(b"... (72 more bytes)"));
        assert_eq!(t[31], b"... (9 more arguments)");
    }

    fn shown(args: &[&str]) -> Vec<String> {
        let bytes: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        entry_args(bytes.into_iter())
            .into_iter()
            .map(|a| String::from_utf8(a).unwrap())
            .collect()
    }

    /// What redis-server 7.0 shows in SLOWLOG for the same commands.
    #[test]
    fn credentials_are_redacted_as_redis_redacts_them() {
        let r = "(redacted)";
        assert_eq!(shown(&["AUTH", "pw"]), ["AUTH", r]);
        assert_eq!(shown(&["auth", "gw", "pw"]), ["auth", r, r]);
        assert_eq!(shown(&["AUTH", "a", "b", "c"]), ["AUTH", "a", "b", "c"]);
        assert_eq!(
            shown(&["HELLO", "3", "AUTH", "gw", "pw", "SETNAME", "x"]),
            ["HELLO", "3", "AUTH", r, r, "SETNAME", "x"]
        );
        assert_eq!(
            shown(&["HELLO", "3", "SETNAME", "x", "auth", "gw", "pw"]),
            ["HELLO", "3", "SETNAME", "x", "auth", r, r]
        );
        assert_eq!(
            shown(&["HELLO", "3", "AUTH", "gw"]),
            ["HELLO", "3", "AUTH", "gw"]
        );
        assert_eq!(
            shown(&[
                "ACL", "SETUSER", "gw", "on", ">pw", "#ab", "<pw", "!ab", "~*"
            ]),
            ["ACL", "SETUSER", r, r, r, r, r, r, r]
        );
        assert_eq!(shown(&["ACL", "SETUSER"]), ["ACL", "SETUSER"]);
        assert_eq!(shown(&["ACL", "GETUSER", "gw"]), ["ACL", "GETUSER", "gw"]);
        assert_eq!(
            shown(&[
                "CONFIG",
                "SET",
                "maxmemory",
                "0",
                "MASTERAUTH",
                "pw",
                "requirepass",
                "pw"
            ]),
            [
                "CONFIG",
                "SET",
                "maxmemory",
                "0",
                "MASTERAUTH",
                r,
                "requirepass",
                r
            ]
        );
        assert_eq!(
            shown(&["CONFIG", "GET", "requirepass"]),
            ["CONFIG", "GET", "requirepass"]
        );
        assert_eq!(
            shown(&["RL.CHECK", "k", "10", "1m"]),
            ["RL.CHECK", "k", "10", "1m"]
        );
        // Past MAX_ARGS, the redacted ones stay redacted and the count is still said.
        let many: Vec<String> = (0..40).map(|i| format!(">pw{i}")).collect();
        let mut args = vec!["ACL", "SETUSER", "u"];
        args.extend(many.iter().map(String::as_str));
        let t = shown(&args);
        assert_eq!(t.len(), MAX_ARGS);
        assert!(t[2..MAX_ARGS - 1].iter().all(|a| a == r));
        assert_eq!(t[MAX_ARGS - 1], "... (12 more arguments)");
    }
}
