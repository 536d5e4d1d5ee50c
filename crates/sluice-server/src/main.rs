//! The `sluice` binary: parse flags, run the server until SIGTERM, SIGINT or `SHUTDOWN`.

use clap::Parser;
use sluice_server::Config;
use tokio::signal::unix::{SignalKind, signal};

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    let config = Config::parse();
    let signals = async {
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            sluice_server::log("cannot install signal handlers; stop with SHUTDOWN");
            return std::future::pending::<()>().await;
        };
        tokio::select! {
            _ = term.recv() => sluice_server::log("SIGTERM received, shutting down"),
            _ = int.recv() => sluice_server::log("SIGINT received, shutting down"),
        }
    };
    if let Err(e) = sluice_server::run(config, signals) {
        sluice_server::log(&format!("fatal: {e}"));
        std::process::exit(1);
    }
}
