//! INFO errorstats: error replies counted by their first word (`ERR`, `NOAUTH`, `WRONGTYPE`),
//! as Redis's `errorstat_<PREFIX>:count=N`.
//!
//! Only error replies pass here, never a check's answer (a denial is a reply, not an error),
//! so one lock taken per error costs nothing the request path pays. Like Redis, at most
//! [`MAX_PREFIXES`] distinct words are kept: past them, errors are counted under `other`, so a
//! client sending made-up error words cannot grow the table.

use std::collections::BTreeMap;

use parking_lot::Mutex;

pub const MAX_PREFIXES: usize = 128;

#[derive(Debug, Default)]
pub struct ErrorStats {
    counts: Mutex<BTreeMap<String, u64>>,
}

impl ErrorStats {
    /// Counts one error reply whose text is `text` (without the leading `-`).
    pub fn note(&self, text: &[u8]) {
        let word = text.split(|&b| b == b' ').next().unwrap_or_default();
        let word = String::from_utf8_lossy(&word[..word.len().min(64)]);
        let mut counts = self.counts.lock();
        if let Some(n) = counts.get_mut(word.as_ref()) {
            *n += 1;
        } else if counts.len() < MAX_PREFIXES {
            counts.insert(word.into_owned(), 1);
        } else {
            *counts.entry("other".into()).or_default() += 1;
        }
    }

    /// Every word and its count, sorted by word.
    pub fn counts(&self) -> Vec<(String, u64)> {
        self.counts
            .lock()
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }

    pub fn total(&self) -> u64 {
        self.counts.lock().values().sum()
    }

    pub fn reset(&self) {
        self.counts.lock().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_first_word() {
        let s = ErrorStats::default();
        s.note(b"ERR bad");
        s.note(b"ERR worse");
        s.note(b"NOAUTH Authentication required.");
        assert_eq!(s.counts(), [("ERR".into(), 2), ("NOAUTH".into(), 1)]);
        for i in 0..200 {
            s.note(format!("X{i} y").as_bytes());
        }
        assert_eq!(s.counts().len(), MAX_PREFIXES + 1);
        assert_eq!(s.total(), 203);
    }
}
