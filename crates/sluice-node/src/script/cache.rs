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
    bodies: HashMap<Sha, Entry>,
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
    let mut s = SCRIPTS.write();
    if let Some(e) = s.bodies.get_mut(&sha) {
        e.loaded |= loaded;
        return Ok(());
    }
    while s.bytes + body.len() > MAX_BYTES {
        let Some(old) = s.evaled.pop_front() else {
            break;
        };
        if s.bodies.get(&old).is_some_and(|e| !e.loaded)
            && let Some(e) = s.bodies.remove(&old)
        {
            s.bytes -= e.body.len();
        }
    }
    if s.bytes + body.len() > MAX_BYTES {
        return if loaded { Err(CacheFull) } else { Ok(()) };
    }
    s.bytes += body.len();
    if !loaded {
        s.evaled.push_back(sha);
    }
    s.bodies.insert(
        sha,
        Entry {
            body: Bytes::copy_from_slice(body),
            loaded,
        },
    );
    Ok(())
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

/// Bodies and their bytes (`INFO memory`'s `number_of_cached_scripts`).
pub fn stats() -> (usize, usize) {
    let s = SCRIPTS.read();
    (s.bodies.len(), s.bytes)
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
}
