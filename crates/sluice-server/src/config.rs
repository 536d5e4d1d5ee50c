//! The server's configuration: one clap struct, defaults that serve most users.

use std::net::IpAddr;

use clap::Parser;

/// `sluice [--port 6379] [--bind 127.0.0.1] [--threads N] ...`
#[derive(Clone, Debug, Parser)]
#[command(
    name = "sluice",
    version,
    about = "A rate-limiter server that speaks the Redis protocol"
)]
pub struct Config {
    /// TCP port to listen on (0 picks a free port and prints it).
    #[arg(long, default_value_t = 6379)]
    pub port: u16,

    /// Address to bind. Loopback by default: expose it deliberately.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: IpAddr,

    /// Worker threads, each with its own listener and runtime (default: number of cores).
    #[arg(long)]
    pub threads: Option<usize>,

    /// Store shards (a power of two; default: 64 per thread, at least 64).
    #[arg(long)]
    pub shards: Option<usize>,

    /// Require clients to AUTH with this password (also `CONFIG SET requirepass`).
    #[arg(long)]
    pub requirepass: Option<String>,
}

impl Config {
    /// Worker threads actually used.
    pub fn threads(&self) -> usize {
        self.threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
            .max(1)
    }

    /// Store shards actually used: a power of two.
    pub fn shards(&self) -> usize {
        self.shards
            .unwrap_or(64 * self.threads())
            .max(1)
            .next_power_of_two()
    }

    /// The defaults, as if started with no flags (for tests and embedding).
    pub fn default_for_tests() -> Config {
        Config::parse_from(["sluice", "--port", "0"])
    }
}
