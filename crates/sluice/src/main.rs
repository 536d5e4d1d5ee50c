//! # sluice — the binary
//!
//! One program, four modes, as clap subcommands:
//! - `sluice [CONFIG-FILE] [flags]`: a node ([`sluice_node`]), until SIGTERM, SIGINT or
//!   `SHUTDOWN` (SIGHUP is logged and ignored, as Redis does);
//! - `sluice proxy [flags]`: the gateway sidecar ([`sluice_proxy`]);
//! - `sluice cluster <command>`: the cluster admin tool ([`sluice_admin`]);
//! - `sluice top HOST:PORT`: the live screen of who is being limited ([`sluice_admin::top`]).
//!
//! It parses flags and hands them to the crate that runs the mode; nothing else lives here but
//! the allocator.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{Command, CommandFactory, FromArgMatches, Parser, Subcommand};
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

/// `sluice [CONFIG-FILE] [flags]` runs a node; `sluice proxy`, `sluice cluster` and
/// `sluice top` run the other three modes.
#[derive(Debug, Parser)]
#[command(
    name = "sluice",
    version,
    about = "A rate-limiter server that speaks the Redis protocol",
    long_about = LONG_ABOUT,
    override_usage = USAGE,
    help_template = HELP_TEMPLATE,
    after_help = EXAMPLES_SHORT,
    after_long_help = EXAMPLES,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    mode: Option<Mode>,
    #[command(flatten)]
    node: sluice_node::Config,
}

const USAGE: &str = "sluice [CONFIG-FILE] [OPTIONS]
       sluice proxy [OPTIONS]
       sluice cluster <COMMAND>
       sluice top HOST:PORT [OPTIONS]";

const LONG_ABOUT: &str = "A rate-limiter server that speaks the Redis protocol: any Redis client \
    sends it RL.CHECK (and the Redis commands clients send), and it answers from buckets kept in \
    sharded memory. With no subcommand it runs a node; `proxy` runs the sidecar a gateway talks \
    to on localhost, `cluster` the tool that creates and changes a cluster, `top` a live screen \
    of the keys being limited. Every flag is also \
    read from the environment variable SLUICE_<FLAG> (the sidecar's from SLUICE_PROXY_<FLAG>); \
    a flag on the command line wins.";

/// clap's default template with the one positional argument clap does not parse (the config
/// file is read before clap sees the command line, see [`parse`]). The heading is styled as
/// clap styles its own (bold, underlined); clap's output stream drops the styling when it is
/// not a terminal or `NO_COLOR` is set.
const HELP_TEMPLATE: &str = "\
{before-help}{about-with-newline}
{usage-heading} {usage}

\x1b[1m\x1b[4mArguments:\x1b[0m
  [CONFIG-FILE]  A Redis-style config file, first if at all: one directive a line, a flag's name
                 without the dashes and its value (`port 7000`); flags after it override it

{all-args}{after-help}";

const EXAMPLES_SHORT: &str = "\
Examples:
  sluice                                  a node on 127.0.0.1:6379 (try: redis-cli RL.CHECK user:42 5 10)
  sluice sluice.conf --port 7000          a node from a config file, its port overridden
  sluice proxy --upstream 10.0.0.1:6379   the sidecar next to a gateway, on 127.0.0.1:6390

The common flags only; every flag: sluice --help (or docs/flags.md).";

const EXAMPLES: &str = "\
Examples:
  sluice                                  a node on 127.0.0.1:6379 (try: redis-cli RL.CHECK user:42 5 10)
  sluice sluice.conf --port 7000          a node from a config file, its port overridden
  sluice proxy --upstream 10.0.0.1:6379   the sidecar next to a gateway, on 127.0.0.1:6390";

/// The node's flags `sluice -h` shows (with -h and -V); `--help` shows them all.
const COMMON_FLAGS: &[&str] = &["port", "bind", "http-port", "rules", "requirepass"];

/// The sidecar's flags `sluice proxy -h` shows; `sluice proxy --help` shows them all.
const PROXY_COMMON_FLAGS: &[&str] = &[
    "port",
    "upstream",
    "sentinel",
    "master-name",
    "fail-mode",
    "timeout-ms",
];

#[derive(Debug, Subcommand)]
enum Mode {
    /// The gateway sidecar: a RESP front that routes checks to the nodes and applies fail
    /// modes, the blocked cache, key splitting and approximate counting.
    // Boxed: the sidecar's flags are many hundred bytes.
    Proxy(Box<sluice_proxy::ProxyConfig>),
    /// Create and change a Sluice cluster: create, add-node, remove-node, show.
    // Boxed too: with its etcd TLS paths it is larger than a box.
    Cluster(Box<sluice_admin::Admin>),
    /// Who is being limited right now: rates per rule, the top denied and allowed keys and
    /// the nodes, merged over a cluster's primaries, redrawn every second (or `--once`).
    Top(sluice_admin::top::Top),
}

fn main() {
    let (cli, config_file) = parse();
    let code = match cli.mode {
        Some(Mode::Proxy(config)) => sluice_proxy::main(*config),
        Some(Mode::Cluster(admin)) => sluice_admin::main(*admin),
        Some(Mode::Top(top)) => sluice_admin::top::main(top),
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
fn parse() -> (Cli, Option<PathBuf>) {
    let mut command = command();
    let argv: Vec<OsString> = std::env::args_os().collect();
    // A first word that names no file, is not shaped like a path and is no subcommand is a
    // mistyped subcommand (`sluice proxi`), not a config file: clap says so, with its
    // suggestion. A subcommand is never a config file, even where a file has its name.
    let first = argv.get(1).and_then(|a| a.to_str());
    let (argv, file) =
        if names_nothing(&command, &argv) || first.is_some_and(|w| is_mode(&command, w)) {
            (argv, None)
        } else {
            sluice_node::conffile::expand(argv).unwrap_or_else(|e| {
                eprintln!("sluice: {e}");
                std::process::exit(1);
            })
        };
    let matches = command
        .try_get_matches_from_mut(argv)
        .unwrap_or_else(|e| explain(&mut command, e).exit());
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    (cli, file)
}

/// The command as the binary parses it: flags from the environment too, a node flag given
/// twice taking its last value (a config file's directives come before the command line's
/// flags, which override them), and `-h` showing only the common flags.
fn command() -> Command {
    let command = sluice_node::config::with_env(Cli::command(), "SLUICE_")
        .args_override_self(true)
        .mut_subcommand("proxy", |p| {
            short_help(
                sluice_node::config::with_env(p, "SLUICE_PROXY_"),
                PROXY_COMMON_FLAGS,
            )
        });
    short_help(command, COMMON_FLAGS)
}

/// `command` with every flag but `common` (and help and version) left out of `-h`.
fn short_help(command: Command, common: &[&str]) -> Command {
    let uncommon: Vec<clap::Id> = command
        .get_arguments()
        .filter(|a| {
            a.get_long()
                .is_some_and(|l| !common.contains(&l) && l != "help" && l != "version")
        })
        .map(|a| a.get_id().clone())
        .collect();
    uncommon
        .into_iter()
        .fold(command, |c, id| c.mut_arg(id, |a| a.hide_short_help(true)))
}

/// Whether the first word is a mistyped subcommand: neither a flag, nor a subcommand, nor an
/// existing file, nor shaped like a path (`sluice.conf`, `conf/node`: a file that is missing
/// is said to be one, "cannot read config file").
fn names_nothing(command: &Command, argv: &[OsString]) -> bool {
    let Some(word) = argv.get(1).and_then(|a| a.to_str()) else {
        return false;
    };
    let path_like = word.contains(['/', '.']);
    !word.starts_with('-')
        && !is_mode(command, word)
        && !path_like
        && !std::path::Path::new(word).exists()
}

/// Whether `word` names a subcommand (`proxy`, `cluster`, `top`, `help`).
fn is_mode(command: &Command, word: &str) -> bool {
    command
        .get_subcommands()
        .any(|m| m.get_name().eq_ignore_ascii_case(word))
        || word.eq_ignore_ascii_case("help")
}

/// clap's error, said in the node's terms where clap's would mislead: a word after the
/// flags is not "a subcommand that cannot be used with --port" but a word too many (or a
/// subcommand in the wrong place), and a mistyped subcommand is named as one, not as a config
/// file that cannot be read.
fn explain(command: &mut Command, e: clap::Error) -> clap::Error {
    let text = |kind| match e.get(kind) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        Some(ContextValue::Strings(v)) => v.first().cloned(),
        _ => None,
    };
    match e.kind() {
        ErrorKind::ArgumentConflict => match text(ContextKind::InvalidSubcommand) {
            Some(mode) if command.find_subcommand(&mode).is_some() => command.error(
                ErrorKind::UnknownArgument,
                format!(
                    "'{mode}' is a subcommand, and a subcommand is the first word: sluice {mode} [OPTIONS]"
                ),
            ),
            Some(word) => command.error(
                ErrorKind::UnknownArgument,
                format!(
                    "unexpected argument '{word}': a node takes one CONFIG-FILE, as its first \
                     word, then flags (a flag's value with spaces needs quotes)"
                ),
            ),
            None => e,
        },
        ErrorKind::InvalidSubcommand => match text(ContextKind::InvalidSubcommand) {
            Some(word) => {
                let mut why = format!(
                    "unrecognized subcommand '{word}' (nor is it a config file: no such file)"
                );
                if let Some(like) = text(ContextKind::SuggestedSubcommand) {
                    why.push_str(&format!("\n\n  tip: a similar subcommand exists: '{like}'"));
                }
                command.error(ErrorKind::InvalidSubcommand, why)
            }
            None => e,
        },
        _ => e,
    }
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
