//! # sluice — the binary
//!
//! One program, three modes, as clap subcommands:
//! - `sluice [CONFIG-FILE] [flags]`: a node ([`sluice_node`]), until SIGTERM, SIGINT or
//!   `SHUTDOWN` (SIGHUP is logged and ignored, as Redis does);
//! - `sluice proxy [flags]`: the gateway sidecar ([`sluice_proxy`]);
//! - `sluice cluster <command>`: the cluster admin tool ([`sluice_admin`]).
//!
//! It parses flags and hands them to the crate that runs the mode; nothing else lives here but
//! the allocator.

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use tokio::signal::unix::{SignalKind, signal};

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read before `main`: a background thread hands pages freed by the store
/// (old tables after growth, expired buckets) back to the OS within about 100 ms, so RSS follows
/// the live buckets instead of the high-water mark.
// SAFETY: `_rjem_malloc_conf` is the `const char *malloc_conf` of tikv-jemalloc-sys's jemalloc
// (its symbols prefixed `_rjem_`), which declares it weak and only reads it, once, at its first
// allocation: this is the one strong definition in the program, and `Option<&c_char>` has the
// ABI of a nullable `const char *` (here never null) to a NUL-terminated string that lives as
// long as the program.
#[unsafe(export_name = "_rjem_malloc_conf")]
#[allow(non_upper_case_globals)]
pub static malloc_conf: Option<&'static std::ffi::c_char> = Some(
    // SAFETY: a C string literal: NUL-terminated, static, its pointer non-null and aligned, so
    // the reference is valid for the whole program; jemalloc reads it as a C string.
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
    // Boxed: the sidecar's flags are many hundred bytes.
    Proxy(Box<sluice_proxy::ProxyConfig>),
    /// Create and change a Sluice cluster: create, add-node, remove-node, show.
    // Boxed too: with its etcd TLS paths it is larger than a box.
    Cluster(Box<sluice_admin::Admin>),
}

fn main() {
    let (cli, config_file) = parse();
    let code = match cli.mode {
        Some(Mode::Proxy(config)) => sluice_proxy::main(*config),
        Some(Mode::Cluster(admin)) => sluice_admin::main(*admin),
        None => {
            let mut config = cli.node;
            config.config_file = config_file;
            node(config)
        }
    };
    std::process::exit(code);
}

/// The command line, with a config file's directives in place of its path (see
/// [`sluice_node::conffile`]) and every flag also read from `SLUICE_<FLAG>` (the sidecar's from
/// `SLUICE_PROXY_<FLAG>`). Exits with clap's message on bad flags, 1 on a bad config file.
fn parse() -> (Cli, Option<std::path::PathBuf>) {
    let (argv, file) =
        sluice_node::conffile::expand(std::env::args_os().collect()).unwrap_or_else(|e| {
            eprintln!("sluice: {e}");
            std::process::exit(1);
        });
    // A node flag given twice takes its last value: a config file's directives come before
    // the command line's flags, which override them.
    let command = sluice_node::config::with_env(Cli::command(), "SLUICE_")
        .args_override_self(true)
        .mut_subcommand("proxy", |p| {
            sluice_node::config::with_env(p, "SLUICE_PROXY_")
        });
    let matches = command.get_matches_from(argv);
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    (cli, file)
}

/// Sets up the log as the flags say; the error as a line for the operator.
fn configure_log(config: &sluice_node::Config) -> Result<(), String> {
    let level = sluice_log::Level::parse(&config.log.loglevel)?;
    sluice_log::configure(
        level,
        config.log.logfile.as_deref(),
        config.log.log_format == "json",
    )
    .map_err(|e| {
        format!(
            "cannot open --logfile {}: {e}",
            config
                .log
                .logfile
                .as_deref()
                .unwrap_or(std::path::Path::new(""))
                .display()
        )
    })?;
    config
        .log
        .configure_syslog()
        .map_err(|e| format!("cannot open a syslog socket: {e}"))
}

/// Runs a node until a signal or `SHUTDOWN`; the exit code.
///
/// SIGHUP is ignored (logged): Redis ignores it too, and a reload would have to say which
/// settings changed and which could not; CONFIG SET changes settings at run time instead.
fn node(mut config: sluice_node::Config) -> i32 {
    if let Err(e) = configure_log(&config).and_then(|()| config.resolve()) {
        sluice_log::log(&format!("fatal: {e}"));
        return 1;
    }
    let signals = async {
        let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
            signal(SignalKind::hangup()),
        ) else {
            sluice_log::log("cannot install signal handlers; stop with SHUTDOWN");
            return std::future::pending::<()>().await;
        };
        loop {
            tokio::select! {
                _ = term.recv() => break sluice_log::log("SIGTERM received, shutting down"),
                _ = int.recv() => break sluice_log::log("SIGINT received, shutting down"),
                _ = hup.recv() => sluice_log::log("SIGHUP received: ignored (CONFIG SET changes settings at run time; restart to apply the config file)"),
            }
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
