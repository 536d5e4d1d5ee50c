//! The replication thread: the primary's flusher and its streams to replicas (on worker 0's
//! runtime, see [`Repl`](super::Repl)'s `stream_runtime`), and a replica's link to its
//! primary; it runs the replication [`Job`]s until shutdown.

use std::sync::Arc;

use super::{Job, primary, replica};
use crate::shared::Shared;

/// Starts the replication thread: the flusher, the streams to replicas, the link to a primary.
pub fn start(shared: Arc<Shared>) -> std::io::Result<std::thread::JoinHandle<()>> {
    crate::thread::runtime_thread("sluice-repl", move || run(shared))
}

async fn run(shared: Arc<Shared>) {
    let Some(mut jobs) = shared.repl.jobs.take_receiver() else {
        return;
    };
    let mut shutdown = shared.shutdown_signal();
    // The primary's side runs on worker 0 (see `stream_runtime`), which registers its runtime
    // as it starts.
    for _ in 0..500 {
        if shared.repl.stream_runtime.get().is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    let streams = shared
        .repl
        .stream_runtime
        .get()
        .cloned()
        .unwrap_or_else(tokio::runtime::Handle::current);
    let flusher = streams.spawn(primary::flusher(shared.clone()));
    let mut feeds = Vec::new();
    let link = tokio::spawn(replica::link(shared.clone()));
    let mut refresh = tokio::time::interval(super::min_replicas::REFRESH_EVERY);
    refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => break,
            _ = refresh.tick() => shared.repl.refresh_good_replicas(),
            job = jobs.recv() => match job {
                Some(Job::Feed(h)) => {
                    feeds.retain(|f: &tokio::task::JoinHandle<()>| !f.is_finished());
                    feeds.push(streams.spawn(primary::feed(shared.clone(), h)));
                }
                None => break,
            },
        }
    }
    flusher.abort();
    for f in feeds {
        f.abort();
    }
    link.abort();
}
