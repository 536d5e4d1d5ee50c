//! Settings that `CONFIG SET` changes at run time and that no feature's state holds already:
//! read where they are used, so a change takes effect at its next use (the next save, the next
//! connection, the next link to the primary, the next INFO).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use parking_lot::RwLock;

use crate::config::Config;

#[derive(Debug)]
pub struct Live {
    /// The password this replica AUTHs with at its primary (`masterauth`).
    pub masterauth: RwLock<Option<String>>,
    /// Sentinel's promotion order (`replica-priority`), reported by INFO.
    pub replica_priority: AtomicU64,
    /// Seconds between periodic snapshots (`save-interval`; 0: none).
    pub save_interval: AtomicU64,
    /// Keepalive seconds for new client sockets (`tcp-keepalive`; 0: off).
    pub tcp_keepalive: AtomicU64,
    /// Seconds of silence before a replica drops its link (`repl-timeout`).
    pub repl_timeout: AtomicU64,
}

impl Live {
    pub fn new(config: &Config) -> Live {
        Live {
            masterauth: RwLock::new(config.masterauth.clone()),
            replica_priority: AtomicU64::new(config.replica_priority),
            save_interval: AtomicU64::new(config.save_interval),
            tcp_keepalive: AtomicU64::new(config.tcp_keepalive),
            repl_timeout: AtomicU64::new(config.repl_timeout),
        }
    }

    pub fn masterauth(&self) -> Option<String> {
        self.masterauth.read().clone()
    }

    pub fn get(n: &AtomicU64) -> u64 {
        n.load(Relaxed)
    }
}
