//! Busy scripts: the scripts that ran past `busy-reply-threshold`, seen from every thread.
//!
//! A script runs on its connection's worker thread, holding the shards of its keys. Once it has
//! run past [`threshold`] its thread's instruction hook publishes it here ([`Busy::enter`]): its
//! declared keys, whether it has written, and a kill flag. From then on the dispatcher of every
//! other thread answers a command on one of those keys' shards `-BUSY` instead of waiting on the
//! shard's lock (`cmd::script::busy_refusal`), `SCRIPT KILL` sets the kill flag of the ones
//! that have not written ([`kill`]), and `SHUTDOWN NOSAVE` stops every script ([`stop_all`]).
//! The hook reads the flags back every few thousand instructions.
//!
//! # Invariants
//! - Outside a busy script, the only cost on the request path is [`any`]: one relaxed load of
//!   a counter no thread writes until a script goes busy.
//! - One slot per busy script, claimed by its own thread ([`Busy::enter`]) and freed when the
//!   script ends ([`Busy`]'s drop); a slot's keys are written before it is counted busy, so a
//!   reader that sees it busy sees its keys.
//! - A node is one process: the threshold, the slots and the stop flag are the process's, as
//!   the script cache is.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

/// `busy-reply-threshold` (alias `lua-time-limit`) in milliseconds, Redis's default.
static THRESHOLD_MS: AtomicU64 = AtomicU64::new(5000);

/// Slots busy now.
static BUSY: AtomicUsize = AtomicUsize::new(0);

/// `SHUTDOWN NOSAVE` was asked: every script stops at its next look at its flags.
static STOP_ALL: AtomicBool = AtomicBool::new(false);

/// Scripts that can be busy at once: one per worker thread at most.
const SLOTS: usize = 256;

struct Slot {
    /// Taken by a busy script (set first, cleared last).
    claimed: AtomicBool,
    /// Counted busy: its keys are in place.
    busy: AtomicBool,
    /// The script has written (it can no longer be killed).
    written: AtomicBool,
    /// `SCRIPT KILL` asked it to stop.
    kill: AtomicBool,
    /// The script's declared keys.
    keys: Mutex<Vec<Vec<u8>>>,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE: Slot = Slot {
    claimed: AtomicBool::new(false),
    busy: AtomicBool::new(false),
    written: AtomicBool::new(false),
    kill: AtomicBool::new(false),
    keys: Mutex::new(Vec::new()),
};

static TABLE: [Slot; SLOTS] = [FREE; SLOTS];

/// How long a script runs before it is busy.
pub fn threshold() -> Duration {
    Duration::from_millis(THRESHOLD_MS.load(Ordering::Relaxed))
}

/// The threshold in milliseconds (`CONFIG GET busy-reply-threshold`).
pub fn threshold_ms() -> u64 {
    THRESHOLD_MS.load(Ordering::Relaxed)
}

/// `CONFIG SET busy-reply-threshold`: scripts running now go busy by the new value.
pub fn set_threshold_ms(ms: u64) {
    THRESHOLD_MS.store(ms, Ordering::Relaxed);
}

/// Whether any script is busy: the request path's only look here.
#[inline(always)]
pub fn any() -> bool {
    BUSY.load(Ordering::Relaxed) != 0
}

/// Whether `SHUTDOWN NOSAVE` asked every script to stop.
pub fn stopping() -> bool {
    STOP_ALL.load(Ordering::Relaxed)
}

/// `SHUTDOWN NOSAVE`: every script, busy or not, written or not, stops at its thread's next
/// look at its flags, so the worker threads can end.
pub fn stop_all() {
    STOP_ALL.store(true, Ordering::Relaxed);
}

/// Whether a busy script declared a key `f` says is on a shard the caller needs.
pub fn holds_any(mut f: impl FnMut(&[u8]) -> bool) -> bool {
    TABLE
        .iter()
        .filter(|s| s.busy.load(Ordering::Acquire))
        .any(|s| s.keys.lock().iter().any(|k| f(k)))
}

/// What `SCRIPT KILL` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kill {
    /// No script is busy.
    NotBusy,
    /// Every busy script that had not written was told to stop (at least one).
    Killed,
    /// Every busy script has written: none was stopped.
    Unkillable,
}

/// `SCRIPT KILL`: tells every busy script that has not written to stop.
pub fn kill() -> Kill {
    let mut outcome = Kill::NotBusy;
    for slot in TABLE.iter().filter(|s| s.busy.load(Ordering::Acquire)) {
        if slot.written.load(Ordering::Acquire) {
            if outcome == Kill::NotBusy {
                outcome = Kill::Unkillable;
            }
        } else {
            slot.kill.store(true, Ordering::Release);
            outcome = Kill::Killed;
        }
    }
    outcome
}

/// A busy script's slot, held by its thread until the script ends.
#[derive(Debug)]
pub struct Busy {
    slot: usize,
}

impl Busy {
    /// Publishes the running script as busy, with its declared `keys` and whether it has
    /// written. `None` if every slot is taken (more busy scripts than [`SLOTS`]): the script
    /// then runs on unseen, as every script did before it went busy.
    pub fn enter(keys: &[&[u8]], written: bool) -> Option<Busy> {
        let slot = TABLE.iter().position(|s| {
            s.claimed
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        })?;
        let s = &TABLE[slot];
        {
            let mut held = s.keys.lock();
            held.clear();
            held.extend(keys.iter().map(|k| k.to_vec()));
        }
        s.kill.store(false, Ordering::Relaxed);
        s.written.store(written, Ordering::Release);
        s.busy.store(true, Ordering::Release);
        BUSY.fetch_add(1, Ordering::Relaxed);
        Some(Busy { slot })
    }

    /// The script has just written: `SCRIPT KILL` can no longer stop it.
    pub fn wrote(&self) {
        TABLE[self.slot].written.store(true, Ordering::Release);
    }

    /// Whether `SCRIPT KILL` asked this script to stop.
    pub fn killed(&self) -> bool {
        TABLE[self.slot].kill.load(Ordering::Acquire)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let s = &TABLE[self.slot];
        s.busy.store(false, Ordering::Release);
        BUSY.fetch_sub(1, Ordering::Relaxed);
        s.keys.lock().clear();
        s.kill.store(false, Ordering::Relaxed);
        s.written.store(false, Ordering::Relaxed);
        s.claimed.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The slots are the process's: one test walks them all, so no other test sees a busy
    /// script.
    #[test]
    fn a_busy_script_is_seen_killed_or_unkillable_and_freed() {
        assert!(!any());
        assert_eq!(kill(), Kill::NotBusy);
        let a = Busy::enter(&[b"k"], false).unwrap();
        assert!(any());
        assert!(holds_any(|k| k == b"k"));
        assert!(!holds_any(|k| k == b"other"));
        let b = Busy::enter(&[b"w"], true).unwrap();
        assert_eq!(kill(), Kill::Killed);
        assert!(a.killed());
        assert!(!b.killed());
        drop(a);
        assert_eq!(kill(), Kill::Unkillable);
        b.wrote();
        drop(b);
        assert!(!any());
        assert_eq!(kill(), Kill::NotBusy);
        let c = Busy::enter(&[], false).unwrap();
        assert!(!c.killed(), "a slot starts with no kill");
    }
}
