//! The saver thread: BGSAVE's saves and the periodic ones, off the workers.

use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::log_save;
use crate::shared::Shared;

/// The saver thread (with `--dir`): runs BGSAVE's saves and, with `--save-interval`, one save
/// every interval, until shutdown. A save on its own thread never stalls a worker's
/// connections; a kill -9 loses at most one interval of consumption.
pub fn start(shared: Arc<Shared>) -> io::Result<Option<std::thread::JoinHandle<()>>> {
    if !shared.persist.enabled() {
        return Ok(None);
    }
    std::thread::Builder::new()
        .name("sluice-save".into())
        .spawn(move || {
            let stop = shared.shutdown_signal();
            // `--save-interval` is bounded (config::MAX_SECONDS); a deadline past what an Instant holds
            // would simply never come. Read at each save, so CONFIG SET save-interval applies
            // from the next one.
            let next_save = || match shared.live.save_interval.load(Ordering::Relaxed) {
                0 => None,
                secs => Instant::now().checked_add(Duration::from_secs(secs)),
            };
            let mut next = next_save();
            while !*stop.borrow() {
                std::thread::sleep(Duration::from_millis(20));
                let persist = &shared.persist;
                if persist.bg.load(Ordering::Acquire) {
                    log_save(
                        "Background saving",
                        persist.save(&shared.store, shared.clock.now(), || {
                            shared.repl.origin(&shared.store)
                        }),
                    );
                    persist.bg.store(false, Ordering::Release);
                } else if next.is_some_and(|n| Instant::now() >= n) {
                    if let Err(e) = persist.save(&shared.store, shared.clock.now(), || {
                        shared.repl.origin(&shared.store)
                    }) {
                        sluice_log::log(&format!("periodic save failed: {e}"));
                    }
                } else {
                    continue;
                }
                next = next_save();
            }
        })
        .map(Some)
}
