//! Snapshots on disk: `--dir`, `--save-interval`, `SAVE`, `BGSAVE`, `LASTSAVE`, the save at a
//! graceful shutdown and the load at start.
//!
//! A snapshot is the replication snapshot encoding (`sluice_repl::snapshot`: magic, format
//! version, every live entry with its absolute deadline, a CRC-32 trailer), written to
//! `DIR/sluice.snap`. Deadlines are Unix-epoch nanoseconds (see `clock`), so after a restart
//! a bucket is exactly as spent as it was, less the time that passed.
//!
//! # Invariants
//! - A save writes a temporary file in the same directory, fsyncs it, renames it over
//!   `sluice.snap` and fsyncs the directory: a crash at any point leaves the previous snapshot
//!   whole (or the new one whole).
//! - One save at a time (`saving`): BGSAVE during a save is refused, SAVE waits for it.
//! - A snapshot that is not whole, not ours, or from a version this build does not read stops
//!   the start with a message naming the file and the problem, as Redis does with a bad RDB:
//!   serving fresh quotas in its place would silently undo every limit.
//! - Without `--dir` nothing is read or written; SAVE and BGSAVE say so.

pub mod saver;

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sluice_core::Nanos;
use sluice_repl::{SnapshotReader, SnapshotWriter};
use sluice_store::Store;

/// The snapshot's file name inside `--dir`.
pub const FILE_NAME: &str = "sluice.snap";

/// Snapshot state shared by every thread.
#[derive(Debug)]
pub struct Persist {
    /// `--dir`; `None`: snapshots are off.
    dir: Option<PathBuf>,
    /// Held for the whole of a save.
    saving: Mutex<()>,
    /// A BGSAVE is running.
    bg: AtomicBool,
    /// Unix seconds of the last successful save (or of the start, as Redis's LASTSAVE).
    last_save: AtomicU64,
    /// Whether the last save succeeded (`INFO persistence` style status).
    last_ok: AtomicBool,
    /// SHUTDOWN NOSAVE: skip the save at exit.
    pub skip_shutdown_save: AtomicBool,
}

/// Where a snapshot stands in a replication stream (Redis's `repl-id` and `repl-offset`): a
/// primary's own, or a replica's primary's, and the position when the snapshot was begun,
/// which every entry is at least as new as. A primary restarted from the snapshot knows that
/// stream up to there, so it can tell a replica that holds more of it (which may hold newer
/// buckets, and must not be wiped by a full sync) from one that holds less; a replica
/// restarted from it asks its primary to continue from there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    pub replid: String,
    pub offset: u64,
}

/// What a load found: entries loaded, and the origin the snapshot recorded (none from a
/// replica that had not synced yet).
#[derive(Clone, Debug, Default)]
pub struct Loaded {
    pub entries: u64,
    pub origin: Option<Origin>,
}

/// What one save wrote.
#[derive(Clone, Copy, Debug)]
pub struct Saved {
    pub entries: u64,
    pub bytes: u64,
    pub took: Duration,
}

fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

impl Persist {
    pub fn new(dir: Option<PathBuf>) -> Persist {
        Persist {
            dir,
            saving: Mutex::new(()),
            bg: AtomicBool::new(false),
            last_save: AtomicU64::new(unix_secs()),
            last_ok: AtomicBool::new(true),
            skip_shutdown_save: AtomicBool::new(false),
        }
    }

    /// The snapshot file, if snapshots are on.
    pub fn path(&self) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| d.join(FILE_NAME))
    }

    pub fn enabled(&self) -> bool {
        self.dir.is_some()
    }

    /// LASTSAVE: Unix seconds of the last successful save.
    pub fn last_save(&self) -> u64 {
        self.last_save.load(Ordering::Relaxed)
    }

    pub fn last_ok(&self) -> bool {
        self.last_ok.load(Ordering::Relaxed)
    }

    pub fn bgsave_in_progress(&self) -> bool {
        self.bg.load(Ordering::Relaxed)
    }

    /// Writes the store to the snapshot file now (one save at a time). `origin` is asked
    /// before the entries are read: the replication id and stream position this node's state
    /// stands at, whatever its role, which every entry is at least as new as (see [`Origin`]).
    pub fn save(
        &self,
        store: &Store,
        now: Nanos,
        origin: impl FnOnce() -> Option<Origin>,
    ) -> io::Result<Saved> {
        let Some(dir) = &self.dir else {
            return Err(io::Error::other("snapshots are off (start with --dir)"));
        };
        let _one = self.saving.lock().unwrap_or_else(|p| p.into_inner());
        let started = Instant::now();
        let mut w = SnapshotWriter::new();
        w.time(now);
        // The stream's position before the scan: every entry is at least that new, so a
        // replica that applied more may hold something newer and refuses to be wiped by it.
        let origin = origin();
        let entries = store.snapshot_into(&mut w, now);
        if let Some(o) = origin {
            w.origin(o.replid.as_bytes(), o.offset);
        }
        let bytes = w.finish();
        let result = write_atomically(dir, &bytes);
        self.last_ok.store(result.is_ok(), Ordering::Relaxed);
        result?;
        self.last_save.store(unix_secs(), Ordering::Relaxed);
        Ok(Saved {
            entries,
            bytes: bytes.len() as u64,
            took: started.elapsed(),
        })
    }

    /// BGSAVE: asks the saver thread for a save; false if one is already asked for or running.
    pub fn request_bgsave(&self) -> bool {
        !self.bg.swap(true, Ordering::AcqRel)
    }
}

/// Logs how a save went.
pub fn log_save(what: &str, result: io::Result<Saved>) {
    match result {
        Ok(s) => sluice_log::log(&format!(
            "{what}: {} entries, {} bytes in {} ms",
            s.entries,
            s.bytes,
            s.took.as_millis()
        )),
        Err(e) => sluice_log::log(&format!("{what} failed: {e}")),
    }
}

/// Writes `bytes` as `dir/sluice.snap`: temporary file, fsync, rename, fsync of the directory.
fn write_atomically(dir: &Path, bytes: &[u8]) -> io::Result<()> {
    fs::create_dir_all(dir)?;
    let tmp = dir.join(format!("temp-{}.snap", std::process::id()));
    let written = (|| {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    if let Err(e) = fs::rename(&tmp, dir.join(FILE_NAME)) {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    File::open(dir)?.sync_all()
}

/// Loads the snapshot into `store` at start. `Ok(None)` if there is none; an error names the
/// file and what is wrong with it, and nothing was loaded.
pub fn load(persist: &Persist, store: &Store, now: Nanos) -> Result<Option<Loaded>, String> {
    let Some(path) = persist.path() else {
        return Ok(None);
    };
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read snapshot {}: {e}", path.display())),
    };
    let reader = SnapshotReader::new(&bytes).map_err(|e| {
        format!(
            "refusing to start: {}: {e}. Move the file away to start with empty buckets (every client then gets a fresh quota).",
            path.display()
        )
    })?;
    let mut loaded = Loaded::default();
    // A snapshot saved "later" than now was saved under a clock ahead of this one (the wall
    // clock stepped back while the node was down): its times are moved back so that it counts
    // as saved now, and no bucket stays spent for the step. One saved earlier is taken as it
    // is: the node cannot tell a forward step from time that passed while it was down, so
    // buckets refill by the gap, as they would have running.
    let mut back = 0i64;
    for rec in reader.iter() {
        let rec = rec.map_err(|e| format!("snapshot {}: {e}", path.display()))?;
        match rec {
            sluice_repl::Record::Time(saved) if saved > now => {
                back = -i64::try_from(saved.0 - now.0).unwrap_or(i64::MAX);
                sluice_log::log(&format!(
                    "Snapshot {} was saved {} ms ahead of this clock: counting it as saved now",
                    path.display(),
                    (saved.0 - now.0) / 1_000_000
                ));
            }
            sluice_repl::Record::Time(_) => {}
            sluice_repl::Record::Origin { replid, offset } => {
                loaded.origin = Some(Origin {
                    replid: String::from_utf8_lossy(replid).into_owned(),
                    offset,
                });
            }
            rec => {
                store.apply(rec.shifted(back), now);
                loaded.entries += 1;
            }
        }
    }
    Ok(Some(loaded))
}
