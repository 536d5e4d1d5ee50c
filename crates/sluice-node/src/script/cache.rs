//! The script cache: SHA1 → body, one for the whole node, so a `SCRIPT LOAD` on one connection
//! serves an `EVALSHA` on any other (each worker thread compiles a body once into its own Lua
//! state; see `engine`).
//!
//! Bounded in bytes ([`MAX_BYTES`]): a body that would pass the bound evicts the oldest bodies
//! that came in by `EVAL` first; bodies loaded with `SCRIPT LOAD` are kept (a client that loaded
//! one calls it by SHA1 only), as Redis 7.4 does. A `SCRIPT LOAD` that finds only loaded bodies
//! in the way is refused.

use std::collections::{HashMap, VecDeque};
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use parking_lot::RwLock;

/// Bytes of script bodies the cache holds at most (Redis has no bound; a million distinct EVALs
/// would otherwise grow it without end).
pub const MAX_BYTES: usize = 64 << 20;

/// Bytes an entry costs beside its body (the map's slot, the SHA1 twice, the body's header):
/// counted with the body, so a million one-line scripts are bounded as well as one big one.
const ENTRY_BYTES: usize = 128;

/// What `body` costs the cache.
fn cost(body: &[u8]) -> usize {
    body.len() + ENTRY_BYTES
}

/// A script's SHA1, as 40 lower-case hex digits.
pub type Sha = [u8; 40];

/// The SHA1 of `body` in lower-case hex, as `redis.sha1hex` and `SCRIPT LOAD` give it.
pub fn sha1hex(body: &[u8]) -> Sha {
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, body);
    let mut hex = [0u8; 40];
    for (i, b) in digest.as_ref().iter().enumerate() {
        hex[2 * i] = HEX[usize::from(b >> 4)];
        hex[2 * i + 1] = HEX[usize::from(b & 15)];
    }
    hex
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// A SHA1 as the client sent it, lower-cased; `None` if it cannot be one (not 40 bytes).
pub fn parse_sha(text: &[u8]) -> Option<Sha> {
    let sha: Sha = text.try_into().ok()?;
    Some(sha.map(|b| b.to_ascii_lowercase()))
}

#[derive(Debug)]
struct Entry {
    body: Bytes,
    /// Came in by `SCRIPT LOAD` (kept under pressure), not only by `EVAL`.
    loaded: bool,
}

#[derive(Debug, Default)]
struct Scripts {
    bodies: HashMap<Sha, Entry, ahash::RandomState>,
    /// SHA1s of bodies that came in by `EVAL` only, oldest first (some may be gone or loaded
    /// since: skipped when met).
    evaled: VecDeque<Sha>,
    bytes: usize,
}

/// The cache refused a `SCRIPT LOAD`: loaded bodies fill it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheFull;

static SCRIPTS: LazyLock<RwLock<Scripts>> = LazyLock::new(RwLock::default);

/// Bumped by every flush: a worker's compiled functions from before it are dropped.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// The body cached under `sha`.
pub fn get(sha: &Sha) -> Option<Bytes> {
    SCRIPTS.read().bodies.get(sha).map(|e| e.body.clone())
}

/// Whether `sha` is cached (`SCRIPT EXISTS`).
pub fn contains(sha: &Sha) -> bool {
    SCRIPTS.read().bodies.contains_key(sha)
}

/// Caches `body` under `sha`; `loaded` for `SCRIPT LOAD`. Evicts `EVAL`'d bodies, oldest first,
/// to stay under [`MAX_BYTES`]; an `EVAL`'d body that still does not fit is simply not kept
/// (it runs all the same), a loaded one is refused.
pub fn insert(sha: Sha, body: &[u8], loaded: bool) -> Result<(), CacheFull> {
    SCRIPTS.write().insert(sha, body, loaded, MAX_BYTES)
}

impl Scripts {
    fn insert(&mut self, sha: Sha, body: &[u8], loaded: bool, max: usize) -> Result<(), CacheFull> {
        if let Some(e) = self.bodies.get_mut(&sha) {
            e.loaded |= loaded;
            return Ok(());
        }
        while self.bytes + cost(body) > max {
            let Some(old) = self.evaled.pop_front() else {
                break;
            };
            if self.bodies.get(&old).is_some_and(|e| !e.loaded)
                && let Some(e) = self.bodies.remove(&old)
            {
                self.bytes -= cost(&e.body);
            }
        }
        if self.bytes + cost(body) > max {
            return if loaded { Err(CacheFull) } else { Ok(()) };
        }
        self.bytes += cost(body);
        if !loaded {
            self.evaled.push_back(sha);
        }
        self.bodies.insert(
            sha,
            Entry {
                body: Bytes::copy_from_slice(body),
                loaded,
            },
        );
        Ok(())
    }
}

/// `SCRIPT FLUSH`: forgets every body; workers drop their compiled functions on their next
/// script.
pub fn flush() {
    let old = std::mem::take(&mut *SCRIPTS.write());
    GENERATION.fetch_add(1, Ordering::Relaxed);
    drop(old);
}

/// The flush generation (see [`flush`]).
pub fn generation() -> u64 {
    GENERATION.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha1hex_is_redis_s() {
        // redis-cli SCRIPT LOAD "return 1"
        assert_eq!(
            &sha1hex(b"return 1"),
            b"e0e1f9fabfc9d4800c877a703b823ac0578ff8db"
        );
        assert_eq!(
            parse_sha(b"E0E1F9FABFC9D4800C877A703B823AC0578FF8DB"),
            Some(sha1hex(b"return 1"))
        );
        assert_eq!(parse_sha(b"abc"), None);
    }

    /// Under pressure the EVAL'd bodies go first, oldest first; loaded ones stay, and a load
    /// that only loaded ones are in the way of is refused.
    #[test]
    fn eval_bodies_are_evicted_before_loaded_ones() {
        let mut s = Scripts::default();
        let max = 4 * cost(b"return 1");
        let body = |i: u8| format!("return {i}").into_bytes();
        let sha = |i: u8| sha1hex(&body(i));
        s.insert(sha(1), &body(1), true, max).unwrap();
        s.insert(sha(2), &body(2), false, max).unwrap();
        s.insert(sha(3), &body(3), false, max).unwrap();
        s.insert(sha(4), &body(4), true, max).unwrap();
        // Full: an EVAL'd body evicts the oldest EVAL'd one.
        s.insert(sha(5), &body(5), false, max).unwrap();
        assert!(!s.bodies.contains_key(&sha(2)));
        assert!(s.bodies.contains_key(&sha(1)) && s.bodies.contains_key(&sha(3)));
        // Loads evict the remaining EVAL'd bodies, then are refused.
        s.insert(sha(6), &body(6), true, max).unwrap();
        s.insert(sha(7), &body(7), true, max).unwrap();
        assert_eq!(s.insert(sha(8), &body(8), true, max), Err(CacheFull));
        // An EVAL'd body that cannot fit is not kept, and is no error.
        assert_eq!(s.insert(sha(9), &body(9), false, max), Ok(()));
        assert!(!s.bodies.contains_key(&sha(9)));
        assert_eq!(s.bytes, 4 * cost(b"return 1"));
    }
}
