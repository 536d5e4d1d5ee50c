//! Frees big values off the request path, as Redis's lazyfree thread does: a deleted, expired,
//! evicted or overwritten collection of more than `sluice_store::LAZYFREE_EFFORT` entries is
//! set aside by its shard (`Store::take_lazy`) and dropped here, on a thread of its own, so no
//! worker thread spends the milliseconds a million frees take.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Sender, channel};

use sluice_store::Value;

static FREER: OnceLock<Sender<Vec<Value>>> = OnceLock::new();
static FREED: AtomicU64 = AtomicU64::new(0);

/// Hands `values` to the freeing thread (started on first use).
pub fn free(values: Vec<Value>) {
    if values.is_empty() {
        return;
    }
    let sender = FREER.get_or_init(|| {
        let (tx, rx) = channel::<Vec<Value>>();
        std::thread::Builder::new()
            .name("sluice-lazyfree".into())
            .spawn(move || {
                for batch in rx {
                    let n = batch.len() as u64;
                    drop(batch);
                    FREED.fetch_add(n, Ordering::Relaxed);
                }
            })
            .expect("start the lazyfree thread");
        tx
    });
    if let Err(e) = sender.send(values) {
        // The thread is gone (it never ends on its own): free here rather than lose nothing.
        drop(e.0);
    }
}

/// Values freed so far (INFO memory's `lazyfreed_objects`).
pub fn freed() -> u64 {
    FREED.load(Ordering::Relaxed)
}
