//! # sluice — the binary
//!
//! One program, three modes, as clap subcommands:
//! - `sluice [flags]`: a node ([`sluice_node`]), until SIGTERM, SIGINT or `SHUTDOWN`;
//! - `sluice proxy [flags]`: the gateway sidecar ([`sluice_proxy`]);
//! - `sluice cluster <command>`: the cluster admin tool ([`sluice_admin`]).
//!
//! It parses flags and hands them to the crate that runs the mode; nothing else lives here but
//! the allocator.

use clap::{Parser, Subcommand};
use tokio::signal::unix::{SignalKind, signal};

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read before `main`: a background thread hands pages freed by the store
/// (old tables after growth, expired buckets) back to the OS within about 100 ms, so RSS follows
/// the live buckets instead of the high-water mark.
#[unsafe(export_name = "_rjem_malloc_conf")]
#[allow(non_upper_case_globals)]
pub static malloc_conf: Option<&'static std::ffi::c_char> = Some(
    // SAFETY: a NUL-terminated static string, read as a C string by jemalloc.
    unsafe { &*c"background_thread:true,dirty_decay_ms:100,muzzy_decay_ms:0".as_ptr() },
);

/// `sluice [flags]` runs a node; `sluice proxy` and `sluice cluster` run the other two modes.
#[derive(Debug, Parser)]
#[command(
    name = "sluice",
    version,
    about = "A rate-limiter server that speaks the Redis protocol",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    mode: Option<Mode>,
    #[command(flatten)]
    node: sluice_node::Config,
}

#[derive(Debug, Subcommand)]
enum Mode {
    /// The gateway sidecar: a RESP front that routes checks to the nodes and applies fail
    /// modes, the blocked cache, key splitting and approximate counting.
    Proxy(sluice_proxy::ProxyConfig),
    /// Create and change a Sluice cluster: create, add-node, remove-node, show.
    Cluster(sluice_admin::Admin),
}

fn main() {
    let cli = Cli::parse();
    let code = match cli.mode {
        Some(Mode::Proxy(config)) => sluice_proxy::main(config),
        Some(Mode::Cluster(admin)) => sluice_admin::main(admin),
        None => node(cli.node),
    };
    std::process::exit(code);
}

/// Runs a node until a signal or `SHUTDOWN`; the exit code.
fn node(config: sluice_node::Config) -> i32 {
    let signals = async {
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            sluice_log::log("cannot install signal handlers; stop with SHUTDOWN");
            return std::future::pending::<()>().await;
        };
        tokio::select! {
            _ = term.recv() => sluice_log::log("SIGTERM received, shutting down"),
            _ = int.recv() => sluice_log::log("SIGINT received, shutting down"),
        }
    };
    match sluice_node::run(config, signals) {
        Ok(()) => 0,
        Err(e) => {
            sluice_log::log(&format!("fatal: {e}"));
            1
        }
    }
}
