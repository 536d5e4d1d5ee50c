//! The `sluice` binary: parse flags, run the server until SIGTERM, SIGINT or `SHUTDOWN`.

use clap::Parser;
use sluice_server::Config;
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

fn main() {
    let mut args = std::env::args();
    if std::env::args().nth(1).as_deref() == Some("cluster") {
        let program = args.next().unwrap_or_default();
        let rest = args.skip(1);
        std::process::exit(sluice_server::admin::main(
            std::iter::once(format!("{program} cluster")).chain(rest),
        ));
    }
    if std::env::args().nth(1).as_deref() == Some("proxy") {
        let program = args.next().unwrap_or_default();
        let rest = args.skip(1);
        std::process::exit(sluice_server::proxy::main(
            std::iter::once(format!("{program} proxy")).chain(rest),
        ));
    }
    let config = Config::parse();
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
    if let Err(e) = sluice_server::run(config, signals) {
        sluice_log::log(&format!("fatal: {e}"));
        std::process::exit(1);
    }
}
