//! Long and busy scripts, seen from every thread.
//!
//! A script runs on its connection's worker thread, holding the shards of its keys. A short
//! script (most limiter scripts) is never seen here. One that reaches its thread's first look
//! (the instruction hook, every few thousand instructions) is *listed* ([`Long::enter`]): its
//! declared keys, whether it has written, a kill flag. From then on the dispatcher of every
//! other thread, for a command on one of those keys' shards (`cmd::script::busy_refusal`),
//! waits outside the shard's lock until the script ends or goes busy, instead of waiting on the
//! lock, where nothing could tell it to stop waiting. Past [`threshold`] the script is *busy*
//! ([`Long::set_busy`]): those commands are answered `-BUSY`, `SCRIPT KILL` sets the kill flag
//! of the busy scripts that have not written ([`kill`]), and `SHUTDOWN NOSAVE` stops every
//! script ([`stop_all`]). The hook reads the flags back at each look.
//!
//! # Invariants
//! - Outside a long script, the only cost on the request path is [`any`]: one relaxed load of
//!   a counter no thread writes until a script runs long. While one is listed, every command
//!   of the other threads pays the look (its keys' shards against each listed script's keys):
//!   a workload that keeps long scripts running pays it on every command.
//! - One slot per long script, claimed by its own thread and freed when the script ends
//!   ([`Long`]'s drop); a slot's keys are written before it is counted, so a reader that sees
//!   it listed sees its keys.
//! - A node is one process: the threshold, the slots and the stop flag are the process's, as
//!   the script cache is.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

/// `busy-reply-threshold` (alias `lua-time-limit`) in milliseconds, Redis's default.
static THRESHOLD_MS: AtomicU64 = AtomicU64::new(5000);

/// Slots listed now.
static LISTED: AtomicUsize = AtomicUsize::new(0);

/// `SHUTDOWN NOSAVE` was asked: every script stops at its next look at its flags.
static STOP_ALL: AtomicBool = AtomicBool::new(false);

/// Scripts that can be listed at once: one per worker thread at most.
const SLOTS: usize = 256;

struct Slot {
    /// Taken by a long script (set first, cleared last).
    claimed: AtomicBool,
    /// Counted in [`LISTED`]: its keys are in place.
    listed: AtomicBool,
    /// [`BUSY`], [`WRITTEN`] and [`KILLED`], in one word so that `SCRIPT KILL` and the script's
    /// next write cannot both win: a kill lands only on a busy script that has not written,
    /// and a write runs only if no kill landed first.
    state: AtomicU8,
    /// The script's declared keys.
    keys: Mutex<Vec<Vec<u8>>>,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE: Slot = Slot {
    claimed: AtomicBool::new(false),
    listed: AtomicBool::new(false),
    state: AtomicU8::new(0),
    keys: Mutex::new(Vec::new()),
};

static TABLE: [Slot; SLOTS] = [FREE; SLOTS];

/// A slot's state: past the threshold.
const BUSY: u8 = 1;
/// The script has called a write command (as Redis, before it runs): no kill can stop it.
const WRITTEN: u8 = 2;
/// `SCRIPT KILL` stopped it.
const KILLED: u8 = 4;

impl Slot {
    fn is(&self, bit: u8) -> bool {
        self.state.load(Ordering::Acquire) & bit != 0
    }
}

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

/// Whether any script is listed (long or busy): the request path's only look here.
#[inline(always)]
pub fn any() -> bool {
    LISTED.load(Ordering::Relaxed) != 0
}

/// Whether any script is busy.
pub fn any_busy() -> bool {
    any() && TABLE.iter().any(|s| s.is(BUSY))
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

/// Who holds the shards a caller needs, as far as the listed scripts say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holder {
    /// No listed script.
    Free,
    /// A long script, not yet busy.
    Long,
    /// A busy script.
    Busy,
}

/// Who holds a key `f` says is on a shard the caller needs (a busy script first).
pub fn holder(mut f: impl FnMut(&[u8]) -> bool) -> Holder {
    let mut found = Holder::Free;
    for s in TABLE.iter().filter(|s| s.listed.load(Ordering::Acquire)) {
        if s.keys.lock().iter().any(|k| f(k)) {
            if s.is(BUSY) {
                return Holder::Busy;
            }
            found = Holder::Long;
        }
    }
    found
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
    for slot in TABLE.iter().filter(|s| s.listed.load(Ordering::Acquire)) {
        // Killed only if busy and not written, in one step: a slot that meanwhile ended and
        // was taken by another script is not busy, and a script that wrote first stays.
        let stepped = slot
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |st| {
                (st & BUSY != 0 && st & WRITTEN == 0).then_some(st | KILLED)
            });
        match stepped {
            Ok(_) => outcome = Kill::Killed,
            Err(st) if st & BUSY != 0 && st & KILLED == 0 && outcome == Kill::NotBusy => {
                outcome = Kill::Unkillable;
            }
            Err(_) => {}
        }
    }
    outcome
}

/// A long script's slot, held by its thread until the script ends.
#[derive(Debug)]
pub struct Long {
    slot: usize,
}

impl Long {
    /// Lists the running script, with its declared `keys` and whether it has written. `None`
    /// if every slot is taken (more long scripts than [`SLOTS`]): the script then runs on
    /// unseen, as a short one does.
    pub fn enter(keys: &[&[u8]], written: bool) -> Option<Long> {
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
        s.state
            .store(if written { WRITTEN } else { 0 }, Ordering::Release);
        s.listed.store(true, Ordering::Release);
        LISTED.fetch_add(1, Ordering::Relaxed);
        Some(Long { slot })
    }

    /// The script ran past the threshold: other clients are answered `-BUSY`, and `SCRIPT KILL`
    /// may stop it.
    pub fn set_busy(&self) {
        TABLE[self.slot].state.fetch_or(BUSY, Ordering::AcqRel);
    }

    pub fn is_busy(&self) -> bool {
        TABLE[self.slot].is(BUSY)
    }

    /// The script is about to call a write command: from now on `SCRIPT KILL` cannot stop it.
    /// False if a kill landed first: the write must not run.
    pub fn write(&self) -> bool {
        TABLE[self.slot]
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |st| {
                (st & KILLED == 0).then_some(st | WRITTEN)
            })
            .is_ok()
    }

    /// Whether `SCRIPT KILL` asked this script to stop.
    pub fn killed(&self) -> bool {
        TABLE[self.slot].is(KILLED)
    }
}

impl Drop for Long {
    fn drop(&mut self) {
        let s = &TABLE[self.slot];
        s.listed.store(false, Ordering::Release);
        LISTED.fetch_sub(1, Ordering::Relaxed);
        s.state.store(0, Ordering::Relaxed);
        s.keys.lock().clear();
        s.claimed.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The slots are the process's: one test walks them all, so no other test sees a listed
    /// script.
    #[test]
    fn a_long_script_is_waited_for_then_busy_killed_or_unkillable_and_freed() {
        assert!(!any());
        assert_eq!(kill(), Kill::NotBusy);
        let a = Long::enter(&[b"k"], false).unwrap();
        assert!(any() && !any_busy());
        assert_eq!(holder(|k| k == b"k"), Holder::Long);
        assert_eq!(kill(), Kill::NotBusy, "a long script is not busy yet");
        a.set_busy();
        assert!(any_busy());
        assert_eq!(holder(|k| k == b"k"), Holder::Busy);
        assert_eq!(holder(|k| k == b"other"), Holder::Free);
        let b = Long::enter(&[b"w"], true).unwrap();
        b.set_busy();
        assert_eq!(kill(), Kill::Killed);
        assert!(a.killed());
        assert!(!b.killed());
        drop(a);
        assert_eq!(kill(), Kill::Unkillable);
        assert!(b.write());
        drop(b);
        assert!(!any());
        assert_eq!(kill(), Kill::NotBusy);
        let c = Long::enter(&[], false).unwrap();
        assert!(!c.killed() && !c.is_busy(), "a slot starts afresh");
        drop(c);

        // A kill and the script's next write cannot both win: a killed script's write does
        // not run, a script that wrote first is unkillable, and a kill lands on no script that
        // is not busy (a slot just taken by another script, say). (One test: the table is the
        // process's.)
        let a = Long::enter(&[b"k"], false).unwrap();
        assert_eq!(kill(), Kill::NotBusy);
        assert!(!a.killed(), "not busy: not killed");
        a.set_busy();
        assert_eq!(kill(), Kill::Killed);
        assert!(!a.write(), "killed first: the write must not run");
        drop(a);
        let b = Long::enter(&[b"k"], false).unwrap();
        b.set_busy();
        assert!(b.write());
        assert_eq!(kill(), Kill::Unkillable);
        assert!(!b.killed());
    }
}
