//! `ACL LOG`: the recent refusals (a command or a key the user may not touch, a failed
//! login), newest first, as Redis keeps them.
//!
//! A refusal like one already logged (same reason, context, object and user) within 60 s
//! counts on that entry instead of adding one. At most [`MAX_ENTRIES`] are kept, the oldest
//! going first, and of each object and user name at most [`MAX_NAME_BYTES`]: a failed login
//! happens before authentication, and the name it tried is a stranger's to choose, so what the
//! log keeps of strangers is bounded (128 × (128 + 128) bytes and a client-info line each).
//! Only refusals write here, so the request path of an allowed command never touches the log.

use std::collections::VecDeque;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

/// Redis's default `acllog-max-len`.
pub const MAX_ENTRIES: usize = 128;
/// The most bytes of an object (key, command) or user name an entry keeps; the rest is cut.
pub const MAX_NAME_BYTES: usize = 128;
/// How long a repeated refusal counts on its entry (Redis's `ACL_LOG_GROUPING_MAX_TIME_DELTA`).
const GROUPING_MS: u64 = 60_000;

/// What was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Command,
    Key,
    Auth,
}

impl Reason {
    pub fn name(self) -> &'static str {
        match self {
            Reason::Command => "command",
            Reason::Key => "key",
            Reason::Auth => "auth",
        }
    }
}

/// One refusal, or several alike.
#[derive(Debug, Clone)]
pub struct Entry {
    pub id: u64,
    pub count: u64,
    pub reason: Reason,
    /// `toplevel`, or `multi` inside a transaction.
    pub context: &'static str,
    /// The command, key or (for `auth`) `AUTH`, cut to [`MAX_NAME_BYTES`].
    pub object: String,
    /// The user refused, or the name a failed login tried, cut to [`MAX_NAME_BYTES`].
    pub username: String,
    pub client_info: String,
    pub created_ms: u64,
    pub updated_ms: u64,
}

/// A refusal to log.
#[derive(Debug)]
pub struct Denial<'a> {
    pub reason: Reason,
    pub context: &'static str,
    pub object: &'a [u8],
    pub username: &'a [u8],
    pub client_info: String,
}

/// The first [`MAX_NAME_BYTES`] of `name` as text (a character cut in two, or any byte that is
/// not UTF-8, shows as U+FFFD).
fn kept(name: &[u8]) -> String {
    String::from_utf8_lossy(&name[..name.len().min(MAX_NAME_BYTES)]).into_owned()
}

#[derive(Debug, Default)]
pub struct AclLog {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    entries: VecDeque<Entry>,
    next_id: u64,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl AclLog {
    /// Logs `denial` at `now_ms` (Unix milliseconds).
    pub fn note_at(&self, denial: Denial<'_>, now_ms: u64) {
        let object = kept(denial.object);
        let username = kept(denial.username);
        let mut inner = self.inner.lock();
        let alike = inner.entries.iter_mut().find(|e| {
            e.reason == denial.reason
                && e.context == denial.context
                && e.object == object
                && e.username == username
                && now_ms.saturating_sub(e.updated_ms) < GROUPING_MS
        });
        if let Some(e) = alike {
            e.count += 1;
            e.updated_ms = now_ms;
            e.client_info = denial.client_info;
            return;
        }
        let id = inner.next_id;
        inner.next_id += 1;
        inner.entries.push_front(Entry {
            id,
            count: 1,
            reason: denial.reason,
            context: denial.context,
            object,
            username,
            client_info: denial.client_info,
            created_ms: now_ms,
            updated_ms: now_ms,
        });
        inner.entries.truncate(MAX_ENTRIES);
    }

    pub fn note(&self, denial: Denial<'_>) {
        self.note_at(denial, now_ms());
    }

    /// The newest `count` entries (all of them: `None`), newest first, and the time now.
    pub fn recent(&self, count: Option<usize>) -> (Vec<Entry>, u64) {
        let inner = self.inner.lock();
        let n = count.unwrap_or(usize::MAX);
        (inner.entries.iter().take(n).cloned().collect(), now_ms())
    }

    /// `ACL LOG RESET`.
    pub fn reset(&self) {
        self.inner.lock().entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn denial(object: &[u8]) -> Denial<'_> {
        Denial {
            reason: Reason::Key,
            context: "toplevel",
            object,
            username: b"gw",
            client_info: "id=1".into(),
        }
    }

    #[test]
    fn alike_refusals_count_on_one_entry_for_a_minute() {
        let log = AclLog::default();
        log.note_at(denial(b"a"), 1_000);
        log.note_at(denial(b"a"), 2_000);
        log.note_at(denial(b"b"), 3_000);
        log.note_at(denial(b"a"), 3_000 + GROUPING_MS);
        let (entries, _) = log.recent(None);
        let shape: Vec<(&str, u64)> = entries.iter().map(|e| (&*e.object, e.count)).collect();
        assert_eq!(shape, [("a", 1), ("b", 1), ("a", 2)]);
        assert_eq!(log.recent(Some(1)).0.len(), 1);
        log.reset();
        assert!(log.recent(None).0.is_empty());
    }

    #[test]
    fn the_log_keeps_its_newest_entries() {
        let log = AclLog::default();
        for i in 0..MAX_ENTRIES + 5 {
            log.note_at(denial(i.to_string().as_bytes()), i as u64);
        }
        let (entries, _) = log.recent(None);
        assert_eq!(entries.len(), MAX_ENTRIES);
        assert_eq!(entries[0].object, (MAX_ENTRIES + 4).to_string());
    }

    #[test]
    fn an_entry_keeps_at_most_128_bytes_of_a_name() {
        let log = AclLog::default();
        let long = vec![b'x'; 1 << 20];
        let mut d = denial(&long);
        d.username = &long;
        log.note_at(d, 0);
        let mut d = denial(b"k");
        let cut = "é".repeat(65);
        d.username = &cut.as_bytes()[1..];
        log.note_at(d, 1);
        let (entries, _) = log.recent(None);
        assert_eq!(entries[1].object.len(), MAX_NAME_BYTES);
        assert_eq!(entries[1].username.len(), MAX_NAME_BYTES);
        let name = &entries[0].username;
        assert!(
            name.starts_with('\u{fffd}') && name.ends_with('\u{fffd}'),
            "{name}"
        );
        assert_eq!(name.chars().filter(|&c| c == 'é').count(), 63);
    }
}
