//! A thread with a tokio runtime of its own, for each task and front that is not a worker:
//! replication, cluster control, the rules' etcd watcher, regions, `/metrics`, the HTTP API and
//! gRPC. Here and not in the crate root, so that those modules import a sibling, never the root
//! that composes them.

use std::io;

/// Starts a thread named `name` that runs the future `make` returns on a current-thread tokio
/// runtime of its own, to its end. The runtime is built first, so a runtime that cannot start
/// is the caller's error, not a thread that quietly does nothing.
pub fn runtime_thread<F, Fut>(name: &str, make: F) -> io::Result<std::thread::JoinHandle<()>>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || runtime.block_on(make()))
}
