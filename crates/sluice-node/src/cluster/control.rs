//! The cluster control loop, on its own thread: it follows the table (etcd's watch, or the
//! peers) and runs the [`Job`]s that commands and new tables submit. The state it acts on is
//! [`Cluster`](super::Cluster), which knows nothing of it.

use std::sync::Arc;

use super::Job;
use super::adopt::hand_over;
use crate::shared::Shared;

/// Starts the control loop on its own thread (cluster mode only).
pub fn start(shared: Arc<Shared>) -> std::io::Result<Option<std::thread::JoinHandle<()>>> {
    if shared.cluster.is_none() {
        return Ok(None);
    }
    crate::thread::runtime_thread("sluice-cluster", move || run(shared)).map(Some)
}

/// Follows the table (etcd's watch, or the peers), then runs jobs until shutdown.
async fn run(shared: Arc<Shared>) {
    let Some(cluster) = shared.cluster.as_ref() else {
        return;
    };
    let Some(mut jobs) = cluster.jobs.take_receiver() else {
        return;
    };
    let mut shutdown = shared.shutdown_signal();
    let follow = match &shared.config.etcd {
        Some(url) => {
            let key = sluice_etcd::table::table_key(&shared.config.etcd_prefix);
            tokio::spawn(super::etcd::follow(shared.clone(), url.clone(), key))
        }
        None => tokio::spawn(super::peers::refresh_from_peers(shared.clone())),
    };
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => break,
            job = jobs.recv() => match job {
                Some(Job::Import { host, port, ranges, asker }) => {
                    tasks.spawn(super::migrate::run(shared.clone(), host, port, ranges, asker));
                }
                Some(Job::PauseAsked { pause, asker }) => {
                    let shared = shared.clone();
                    let epoch = cluster.epoch();
                    tasks.spawn(async move {
                        let _ = asker.await;
                        if let Some(c) = shared.cluster.as_ref()
                            && c.unpause_if(pause, epoch)
                        {
                            sluice_log::log("Pause lifted: the connection that asked for it closed before a new table");
                        }
                    });
                }
                Some(Job::HandOver) => {
                    let shared = shared.clone();
                    tasks.spawn(async move {
                        let _ = tokio::task::spawn_blocking(move || hand_over(&shared)).await;
                    });
                }
                Some(Job::PushTable) => {
                    if let Some(view) = cluster.view() {
                        let table = (*view.table).clone();
                        tasks.spawn(super::etcd::store(shared.clone(), table));
                    }
                    tasks.spawn(super::peers::push_table(shared.clone()));
                }
                None => break,
            },
        }
        while tasks.try_join_next().is_some() {}
    }
    follow.abort();
    tasks.abort_all();
}
