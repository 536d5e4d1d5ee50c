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
    /// TCP port to listen on (0 picks a free port and prints it; with `--tls-port`, 0 means no
    /// plain port: TLS only, as Redis's `port 0`).
    #[arg(long, default_value_t = 6379)]
    pub port: u16,

    /// Address to bind. Loopback by default: expose it deliberately.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: IpAddr,

    /// Also listen on this Unix socket, as Redis's `unixsocket`: a client on the same host
    /// skips TCP. A file left there by a crash is replaced; one a live process listens on
    /// refuses the start. Removed at a clean shutdown.
    #[arg(long, value_name = "PATH")]
    pub unixsocket: Option<std::path::PathBuf>,

    /// The permissions of `--unixsocket`'s file, in octal as redis.conf writes them (`770`:
    /// the owner and its group); 0 leaves them as the umask makes them.
    #[arg(long, default_value = "0", value_parser = parse_perm, value_name = "MODE")]
    pub unixsocketperm: u32,

    /// Worker threads, each with its own listener and runtime (default: number of cores;
    /// at most 1024).
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    pub threads: Option<usize>,

    /// Store shards (a power of two; default: 64 per thread, at least 64; at most 65536).
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65536))]
    pub shards: Option<usize>,

    /// Require clients to AUTH with this password (also `CONFIG SET requirepass`).
    #[arg(long)]
    pub requirepass: Option<String>,

    /// Read the password from this file (its first line), so it is not seen in
    /// `/proc/PID/cmdline` nor in the environment. Wins over `--requirepass`.
    #[arg(long = "requirepass-file", value_name = "FILE")]
    pub requirepass_file: Option<std::path::PathBuf>,

    /// Most connected clients; one more is answered `-ERR max number of clients reached`.
    #[arg(long, default_value_t = 10_000)]
    pub maxclients: usize,

    /// Close a client idle for this many seconds (0: never; at most 2147483647, as Redis).
    #[arg(long, default_value_t = 0, value_parser = seconds())]
    pub timeout: u64,

    /// TCP keepalive interval in seconds for client sockets (0: off).
    #[arg(long = "tcp-keepalive", default_value_t = 300, value_parser = seconds())]
    pub tcp_keepalive: u64,

    /// Memory limit for keys (`100mb`, `2gb`, bytes; 0: none). See `--maxmemory-policy`.
    #[arg(long, default_value = "0", value_parser = parse_bytes)]
    pub maxmemory: u64,

    /// What happens at `--maxmemory`: `evict-soonest` drops the buckets closest to full
    /// (the least accuracy lost); `reject` refuses new keys and keeps existing ones working.
    #[arg(long = "maxmemory-policy", default_value = "evict-soonest", value_parser = parse_policy)]
    pub maxmemory_policy: sluice_store::EvictionPolicy,

    /// Largest bulk string a client may send (Redis: proto-max-bulk-len).
    #[arg(long = "proto-max-bulk-len", default_value = "512mb", value_parser = parse_bytes)]
    pub proto_max_bulk_len: u64,

    /// Most elements in one request.
    #[arg(long = "proto-max-multibulk-len", default_value_t = 1024 * 1024)]
    pub proto_max_multibulk_len: usize,

    /// Longest inline command line.
    #[arg(long = "proto-max-inline-len", default_value = "64kb", value_parser = parse_bytes)]
    pub proto_max_inline_len: u64,

    /// Most unparsed input one client may hold; past it the client is closed. 64 MB (Redis
    /// allows 1 GB): no rate-limiter request comes close, and it bounds what one client pins.
    #[arg(long = "client-query-buffer-limit", default_value = "64mb", value_parser = parse_bytes)]
    pub client_query_buffer_limit: u64,

    /// Most unsent reply bytes one client may hold (one that never reads its replies); past it
    /// the client is closed.
    #[arg(long = "client-output-buffer-limit", default_value = "64mb", value_parser = parse_bytes)]
    pub client_output_buffer_limit: u64,

    /// The replica class of the output buffer limit: a replica with more of the stream queued
    /// than this (it stopped reading, or cannot keep up) is cut, and resyncs when it returns.
    #[arg(long = "client-output-buffer-limit-replica", default_value = "256mb", value_parser = parse_bytes)]
    pub client_output_buffer_limit_replica: u64,

    /// Start as a replica of this primary (`HOST:PORT`); REPLICAOF changes it at run time.
    #[arg(long, value_parser = parse_master, value_name = "HOST:PORT")]
    pub replicaof: Option<MasterAddr>,

    /// Password this replica AUTHs with at its primary.
    #[arg(long)]
    pub masterauth: Option<String>,

    /// The ACL user this replica (and a cluster node calling its peers) AUTHs as with
    /// `--masterauth` (default: the `default` user).
    #[arg(long)]
    pub masteruser: Option<String>,

    /// ACL users are loaded from this file at start, and by `ACL LOAD`; `ACL SAVE` writes it.
    #[arg(long)]
    pub aclfile: Option<std::path::PathBuf>,

    /// Also serve RESP over TLS on this port (0 picks a free one).
    #[arg(long = "tls-port")]
    pub tls_port: Option<u16>,

    /// The server's certificate chain (PEM); reloaded when the file changes.
    #[arg(long = "tls-cert-file")]
    pub tls_cert_file: Option<std::path::PathBuf>,

    /// The private key of `--tls-cert-file` (PEM).
    #[arg(long = "tls-key-file")]
    pub tls_key_file: Option<std::path::PathBuf>,

    /// CA certificates (PEM) that sign client certificates, and that a replica with
    /// `--tls-replication` trusts for its primary's.
    #[arg(long = "tls-ca-cert-file")]
    pub tls_ca_cert_file: Option<std::path::PathBuf>,

    /// `yes`: TLS clients must present a certificate signed by `--tls-ca-cert-file`;
    /// `optional`: checked if presented; `no`: not asked for (as Redis's `tls-auth-clients`).
    #[arg(long = "tls-auth-clients", default_value = "yes", value_parser = parse_auth_clients)]
    pub tls_auth_clients: AuthClients,

    /// `yes`: this replica connects to its primary over TLS (`--replicaof` names the
    /// primary's TLS port), presenting `--tls-cert-file`.
    #[arg(long = "tls-replication", default_value = "no", value_parser = parse_yes_no, action = clap::ArgAction::Set)]
    pub tls_replication: bool,

    /// `yes`: this cluster node calls its peers (table fetch and push, slot imports, forwarded
    /// calls) over TLS on their TLS ports, presenting `--tls-cert-file` (as Redis's
    /// `tls-cluster`).
    #[arg(long = "tls-cluster", default_value = "no", value_parser = parse_yes_no, action = clap::ArgAction::Set)]
    pub tls_cluster: bool,

    /// `yes`: `--metrics-port` serves HTTPS with the TLS certificate and client check.
    #[arg(long = "metrics-tls", default_value = "no", value_parser = parse_yes_no, action = clap::ArgAction::Set)]
    pub metrics_tls: bool,

    /// `yes`: `--grpc-port` serves gRPC over TLS with the TLS certificate and client check.
    #[arg(long = "grpc-tls", default_value = "no", value_parser = parse_yes_no, action = clap::ArgAction::Set)]
    pub grpc_tls: bool,

    /// Bytes of recent stream a primary keeps so a replica that reconnects can continue
    /// (`+CONTINUE`) instead of syncing everything again.
    #[arg(long = "repl-backlog-size", default_value = "1mb", value_parser = parse_bytes)]
    pub repl_backlog_size: u64,

    /// How often a primary sends its replicas what changed, in milliseconds. Changes of one
    /// key inside one interval travel together; the interval bounds the replicas' lag.
    #[arg(long = "repl-flush-ms", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=MAX_FLUSH_MS))]
    pub repl_flush_ms: u64,

    /// Seconds of silence after which a replica gives up on its primary's link and reconnects
    /// (an idle primary sends a PING every second, so 2 or more).
    #[arg(long = "repl-timeout", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=MAX_SECONDS))]
    pub repl_timeout: u64,

    /// A primary refuses every write (`-NOREPLICAS`) unless at least this many replicas acked
    /// within `--min-replicas-max-lag` seconds (also `CONFIG SET min-replicas-to-write`).
    /// A primary cut off from its replicas then stops granting quota that a promoted replica
    /// grants again. 0: off.
    #[arg(long = "min-replicas-to-write", default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=MAX_SECONDS))]
    pub min_replicas_to_write: u64,

    /// The seconds within which a replica must have acked to count for
    /// `--min-replicas-to-write` (0: off, as in Redis).
    #[arg(long = "min-replicas-max-lag", default_value_t = 10, value_parser = seconds())]
    pub min_replicas_max_lag: u64,

    /// Sentinels to ask who the primary is before serving (`HOST:PORT`; repeat the flag, or
    /// separate with commas; with `--master-name`). One that names another node makes this one
    /// start as its replica; one that still names this node, while a replica holds more than
    /// this node's snapshot, keeps it unreachable until the Sentinels fail over or the wait
    /// ends (`docs/production.md`). Plain TCP, no AUTH.
    #[arg(long, value_delimiter = ',', value_parser = parse_master, value_name = "HOST:PORT", requires = "master_name", conflicts_with = "cluster")]
    pub sentinel: Vec<MasterAddr>,

    /// The name the Sentinels monitor this node's primary under (`sentinel monitor NAME ...`).
    #[arg(long = "master-name", value_name = "NAME", requires = "sentinel")]
    pub master_name: Option<String>,

    /// Sentinel promotes the replica with the lowest priority first; 0 = never promote.
    #[arg(long = "replica-priority", default_value_t = 100)]
    pub replica_priority: u64,

    /// `yes`: a replica answers writes with -READONLY. `no`: it accepts them locally (they are
    /// not sent anywhere and its primary's stream overwrites them), as Redis does.
    #[arg(long = "replica-read-only", default_value = "yes", value_parser = parse_yes_no, action = clap::ArgAction::Set)]
    pub replica_read_only: bool,

    /// `yes`: run as a Redis Cluster node. It starts with no slots (`-CLUSTERDOWN`) until
    /// `sluice cluster create` pushes a table.
    #[arg(long, default_value = "no", value_parser = parse_yes_no, action = clap::ArgAction::Set)]
    pub cluster: bool,

    /// Where a cluster node keeps its id and its slot table (default: nodes-<port>.conf).
    #[arg(long = "cluster-config-file")]
    pub cluster_config_file: Option<std::path::PathBuf>,

    /// Keep the cluster's slot table in etcd at this URL (`http://HOST:PORT`): read before
    /// serving, watched, written with compare-and-swap. Without it the nodes hold the table.
    #[arg(long)]
    pub etcd: Option<String>,

    /// The etcd key prefix of this cluster.
    #[arg(long = "etcd-prefix", default_value = "/sluice/cluster/")]
    pub etcd_prefix: String,

    /// TLS to every etcd this node uses (`--etcd`, `--rules-etcd`, `--regions-etcd`).
    #[command(flatten)]
    pub etcd_tls: sluice_etcd::TlsArgs,

    /// Keep snapshots in this directory (`DIR/sluice.snap`): loaded at start, written every
    /// `--save-interval`, by SAVE/BGSAVE and at a graceful shutdown. Without it, nothing is
    /// persisted and a restart hands every client a fresh quota.
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,

    /// Seconds between snapshots with `--dir` (0: only SAVE, BGSAVE and shutdown write one).
    /// A kill -9 loses at most this much consumption.
    #[arg(long = "save-interval", default_value_t = 60, value_parser = seconds())]
    pub save_interval: u64,

    /// Named rules from this file (TOML, or YAML for `.yaml`/`.yml`): read at start, reloaded
    /// when it changes; RL.RULE writes are then refused.
    #[arg(long, value_name = "FILE", conflicts_with = "rules_etcd")]
    pub rules: Option<std::path::PathBuf>,

    /// Named rules from etcd at this URL (`http://HOST:PORT`): watched under `--rules-prefix`;
    /// RL.RULE writes go to etcd; versions are etcd revisions.
    #[arg(long = "rules-etcd", value_name = "URL")]
    pub rules_etcd: Option<String>,

    /// The etcd key prefix of the rules (one key per rule: PREFIX + name).
    #[arg(long = "rules-prefix", default_value = "/sluice/rules/")]
    pub rules_prefix: String,

    /// Serve Prometheus metrics (`GET /metrics`) on this port, on the `--bind` address.
    #[arg(long = "metrics-port")]
    pub metrics_port: Option<u16>,

    /// Serve Envoy's rate limit service (gRPC `ShouldRateLimit`) on this port, on the
    /// `--bind` address. Its limits come from `--envoy-config`.
    #[arg(long = "grpc-port")]
    pub grpc_port: Option<u16>,

    /// Serve the HTTP API (`POST /v1/check`, `GET /v1/auth`, `/rules`, `/healthz`,
    /// `/readyz`, `/openapi.json`) on this port, on the `--bind` address.
    #[arg(long = "http-port")]
    pub http_port: Option<u16>,

    #[command(flatten)]
    pub subject_headers: sluice_http::body::SubjectHeaderArgs,

    /// A directory of envoyproxy/ratelimit config files (`*.yaml`, `*.yml`), read at start
    /// and again whenever one changes.
    #[arg(long = "envoy-config", value_name = "DIR")]
    pub envoy_config: Option<std::path::PathBuf>,

    /// Rate limit headers in gRPC answers (envoyproxy/ratelimit's
    /// LIMIT_RESPONSE_HEADERS_ENABLED): `off`, `ratelimit` (`RateLimit-Limit`,
    /// `-Remaining`, `-Reset`) or `x-ratelimit` (`X-RateLimit-...`).
    #[arg(long = "envoy-headers", default_value = "off", value_parser = ["off", "ratelimit", "x-ratelimit"])]
    pub envoy_headers: String,

    #[command(flatten)]
    pub log: sluice_log::LogArgs,

    /// `--supervised` and `--pidfile`.
    #[command(flatten)]
    pub service: sluice_log::service::ServiceArgs,

    /// SLOWLOG keeps commands that took longer than this many microseconds (0: every
    /// command; -1: none). Also `CONFIG SET slowlog-log-slower-than`.
    #[arg(long = "slowlog-log-slower-than", default_value_t = 10_000, allow_negative_numbers = true, value_parser = clap::value_parser!(i64).range(-1..=MAX_SECONDS as i64))]
    pub slowlog_log_slower_than: i64,

    /// The most entries SLOWLOG keeps (the oldest go first).
    #[arg(long = "slowlog-max-len", default_value_t = 128, value_parser = clap::value_parser!(u64).range(0..=MAX_SLOWLOG_LEN))]
    pub slowlog_max_len: u64,

    /// A script running longer than this many milliseconds is busy: other clients of its
    /// shards are answered `-BUSY` and `SCRIPT KILL` may stop it (Redis's
    /// `busy-reply-threshold`; its old name `lua-time-limit` is an alias). Also `CONFIG SET`.
    #[arg(long = "busy-reply-threshold", alias = "lua-time-limit", default_value_t = 5000, value_parser = clap::value_parser!(u64).range(0..=i64::MAX as u64))]
    pub busy_reply_threshold: u64,

    /// This node's region: GLOBAL rules' limits are shared with the other regions registered
    /// in `--regions-etcd` (1-64 of `A-Z a-z 0-9 _ . -`).
    #[arg(long, value_name = "NAME", requires = "regions_etcd", value_parser = parse_region)]
    pub region: Option<String>,

    /// The etcd (`http://HOST:PORT`) where regions publish their demands and shares.
    #[arg(long = "regions-etcd", value_name = "URL", requires = "region")]
    pub regions_etcd: Option<String>,

    /// How often a region's coordinator rebalances its shares (100ms to 1h).
    #[arg(long = "rebalance-interval", default_value = "60s", value_parser = parse_rebalance)]
    pub rebalance_interval: std::time::Duration,

    /// How long a region's published share outlives its last renewal (default: 3 × the
    /// rebalance interval; whole seconds, at least 2 and more than the interval).
    #[arg(long = "region-lease", value_parser = parse_rebalance)]
    pub region_lease: Option<std::time::Duration>,

    /// The share (0 to 1) each region keeps at least, and falls to without etcd (default:
    /// 0.5 ÷ the regions registered).
    #[arg(long = "region-min-share", value_parser = parse_fraction)]
    pub region_min_share: Option<f64>,

    /// The connection loop for clients on the plain port: `uring` (io_uring: one submission
    /// per turn for all of a thread's connections; where io_uring is not permitted the server
    /// says so and uses epoll) or `epoll` (readiness, a task per connection).
    #[arg(long, value_enum, default_value_t = IoLoop::Uring)]
    pub io: IoLoop,

    /// The config file this server was started with (`sluice FILE`), which CONFIG REWRITE
    /// rewrites; not a flag.
    #[arg(skip)]
    pub config_file: Option<std::path::PathBuf>,
}

/// The most SLOWLOG entries a server keeps: each holds up to 32 arguments of 128 bytes.
pub const MAX_SLOWLOG_LEN: u64 = 1_000_000;

/// `cmd` with every long flag also read from the environment variable `PREFIX` + its name in
/// capitals (`--maxmemory-policy` from `SLUICE_MAXMEMORY_POLICY`). Generic over the flags, so
/// a new flag gets its variable with no code.
pub fn with_env(cmd: clap::Command, prefix: &str) -> clap::Command {
    cmd.mut_args(
        |arg| match arg.get_long().filter(|l| !matches!(*l, "help" | "version")) {
            Some(long) => {
                let var = format!("{prefix}{}", long.to_ascii_uppercase().replace('-', "_"));
                arg.env(&*Box::leak(var.into_boxed_str()))
            }
            None => arg,
        },
    )
}

/// Parses a region name: what a rule name may be.
fn parse_region(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"_.-".contains(&c));
    if ok {
        Ok(s.to_string())
    } else {
        Err(format!(
            "'{s}' is not a region name: use 1-64 of A-Z a-z 0-9 _ . -"
        ))
    }
}

/// Parses a rebalance interval or lease: a duration (`500ms`, `1s`, `2m`) from 100 ms to 1 h.
fn parse_rebalance(s: &str) -> Result<std::time::Duration, String> {
    let nanos = sluice_core::spec::parse_period(s.as_bytes())
        .map_err(|_| format!("'{s}' is not a duration such as 500ms, 1s or 1m"))?;
    let d = std::time::Duration::from_nanos(nanos.0);
    if d < std::time::Duration::from_millis(100) || d > std::time::Duration::from_secs(3600) {
        return Err(format!("'{s}' must be from 100ms to 1h"));
    }
    Ok(d)
}

/// Parses a fraction from 0 to 1.
fn parse_fraction(s: &str) -> Result<f64, String> {
    s.parse::<f64>()
        .ok()
        .filter(|f| (0.0..=1.0).contains(f))
        .ok_or_else(|| format!("'{s}' must be a number from 0 to 1"))
}

/// The most seconds any setting takes: Redis's bound for its own (`INT_MAX`). Far past any
/// useful value, and small enough that a deadline computed from it never overflows.
pub const MAX_SECONDS: u64 = i32::MAX as u64;

/// The longest `--repl-flush-ms`: a minute. Longer would let replicas fall that far behind.
pub const MAX_FLUSH_MS: u64 = 60_000;

/// A number of seconds, from 0 to [`MAX_SECONDS`].
fn seconds() -> clap::builder::RangedU64ValueParser<u64> {
    clap::value_parser!(u64).range(0..=MAX_SECONDS)
}

/// Where a replica replicates from (REPLICAOF / `--replicaof`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MasterAddr {
    pub host: String,
    pub port: u16,
}

/// Parses `HOST:PORT` (or `HOST PORT`, Redis's config-file form) for `--replicaof`.
pub fn parse_master(s: &str) -> Result<MasterAddr, String> {
    let s = s.trim();
    let (host, port) = s
        .rsplit_once(':')
        .or_else(|| s.rsplit_once(' '))
        .ok_or_else(|| format!("'{s}' is not HOST:PORT"))?;
    let port: u16 = port
        .trim()
        .parse()
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(|| format!("'{s}' has an invalid port"))?;
    let host = host.trim().trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(format!("'{s}' has no host"));
    }
    Ok(MasterAddr {
        host: host.to_string(),
        port,
    })
}

/// Parses `--unixsocketperm`: octal, at most 777.
pub fn parse_perm(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s.trim(), 8)
        .ok()
        .filter(|&mode| mode <= 0o777)
        .ok_or_else(|| format!("'{s}' is not a file mode (octal, 0 to 777)"))
}

/// Parses a Redis-style boolean setting.
pub fn parse_yes_no(s: &str) -> Result<bool, String> {
    match s.to_ascii_lowercase().as_str() {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => Err(format!("'{s}' must be yes or no")),
    }
}

/// `--io`: which loop carries plain-TCP client connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum IoLoop {
    Epoll,
    Uring,
}

/// Redis's `tls-auth-clients`: whether TLS clients must present a certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthClients {
    Yes,
    Optional,
    No,
}

pub fn parse_auth_clients(s: &str) -> Result<AuthClients, String> {
    match s.to_ascii_lowercase().as_str() {
        "yes" => Ok(AuthClients::Yes),
        "optional" => Ok(AuthClients::Optional),
        "no" => Ok(AuthClients::No),
        _ => Err(format!("'{s}' must be yes, optional or no")),
    }
}

pub use sluice_core::size::parse_bytes;

/// Parses a `--maxmemory-policy` name.
pub fn parse_policy(s: &str) -> Result<sluice_store::EvictionPolicy, String> {
    match s.to_ascii_lowercase().as_str() {
        "evict-soonest" => Ok(sluice_store::EvictionPolicy::EvictSoonest),
        "reject" => Ok(sluice_store::EvictionPolicy::Reject),
        _ => Err(format!("'{s}' is not a policy (evict-soonest or reject)")),
    }
}

/// The name of a policy, as `--maxmemory-policy` and CONFIG take it.
pub fn policy_name(p: sluice_store::EvictionPolicy) -> &'static str {
    match p {
        sluice_store::EvictionPolicy::EvictSoonest => "evict-soonest",
        sluice_store::EvictionPolicy::Reject => "reject",
    }
}

impl Config {
    /// `--port 0 --tls-port N`: no plain listener, TLS only.
    pub fn tls_only(&self) -> bool {
        self.port == 0 && self.tls_port.is_some()
    }

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

    /// The parser limits these settings give.
    pub fn limits(&self) -> sluice_resp::Limits {
        let clamp = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        sluice_resp::Limits {
            max_bulk_len: clamp(self.proto_max_bulk_len),
            max_multibulk_len: self.proto_max_multibulk_len,
            max_inline_len: clamp(self.proto_max_inline_len),
        }
    }

    /// Settles what flags leave open: the password from `--requirepass-file`, and an empty
    /// password as none.
    ///
    /// # Errors
    /// The password file cannot be read or is empty.
    pub fn resolve(&mut self) -> Result<(), String> {
        if let Some(path) = &self.requirepass_file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read --requirepass-file {}: {e}", path.display()))?;
            let pass = text.lines().next().unwrap_or_default();
            if pass.is_empty() {
                return Err(format!("--requirepass-file {} is empty", path.display()));
            }
            self.requirepass = Some(pass.to_string());
        }
        if self.requirepass.as_deref() == Some("") {
            self.requirepass = None;
        }
        if self.masterauth.as_deref() == Some("") {
            self.masterauth = None;
        }
        Ok(())
    }

    /// The defaults, as if started with no flags (for tests and embedding).
    pub fn default_for_tests() -> Config {
        Config::parse_from(["sluice", "--port", "0"])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unixsocket_flags_parse() {
        let c = Config::parse_from([
            "sluice",
            "--unixsocket",
            "/tmp/s.sock",
            "--unixsocketperm",
            "770",
        ]);
        assert_eq!(
            c.unixsocket.as_deref(),
            Some(std::path::Path::new("/tmp/s.sock"))
        );
        assert_eq!(c.unixsocketperm, 0o770);
        assert_eq!(Config::default_for_tests().unixsocketperm, 0);
        for bad in ["778", "1777", "rw", ""] {
            assert!(parse_perm(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn defaults_match_redis_limits() {
        let c = Config::default_for_tests();
        assert_eq!(c.maxclients, 10_000);
        let l = c.limits();
        assert_eq!(l.max_bulk_len, 512 << 20);
        assert_eq!(l.max_inline_len, 64 << 10);
        assert_eq!(c.maxmemory, 0);
        assert_eq!(c.repl_backlog_size, 1 << 20);
        assert_eq!(c.repl_flush_ms, 1);
        assert!(c.replica_read_only);
        assert!(c.replicaof.is_none());
    }

    #[test]
    fn replication_flags_parse() {
        let c = Config::parse_from([
            "sluice",
            "--replicaof",
            "127.0.0.1:7000",
            "--replica-read-only",
            "no",
            "--replica-priority",
            "0",
        ]);
        let m = c.replicaof.unwrap();
        assert_eq!((m.host.as_str(), m.port), ("127.0.0.1", 7000));
        assert!(!c.replica_read_only);
        assert_eq!(c.replica_priority, 0);
        assert!(parse_master("host").is_err());
        assert!(parse_master("host:0").is_err());
        assert_eq!(parse_master("h 6379").unwrap().port, 6379);
    }

    #[test]
    fn sentinel_flags_parse() {
        let c = Config::parse_from([
            "sluice",
            "--sentinel",
            "127.0.0.1:26379,127.0.0.1:26380",
            "--sentinel",
            "10.0.0.5 26381",
            "--master-name",
            "rl",
        ]);
        let ports: Vec<u16> = c.sentinel.iter().map(|s| s.port).collect();
        assert_eq!(ports, [26379, 26380, 26381]);
        assert_eq!(c.master_name.as_deref(), Some("rl"));
        // Each needs the other, and a cluster node follows its table, not Sentinel.
        assert!(Config::try_parse_from(["sluice", "--sentinel", "h:1"]).is_err());
        assert!(Config::try_parse_from(["sluice", "--master-name", "rl"]).is_err());
        assert!(
            Config::try_parse_from([
                "sluice",
                "--sentinel",
                "h:1",
                "--master-name",
                "rl",
                "--cluster",
                "yes"
            ])
            .is_err()
        );
        assert!(
            Config::try_parse_from(["sluice", "--sentinel", "h:0", "--master-name", "rl"]).is_err()
        );
    }

    #[test]
    fn durations_are_bounded() {
        for flag in [
            "--timeout",
            "--tcp-keepalive",
            "--save-interval",
            "--repl-timeout",
        ] {
            let max = MAX_SECONDS.to_string();
            assert!(
                Config::try_parse_from(["sluice", flag, &max]).is_ok(),
                "{flag}"
            );
            for bad in ["2147483648", "9223372036854775807", "-1"] {
                assert!(
                    Config::try_parse_from(["sluice", flag, bad]).is_err(),
                    "{flag} {bad}"
                );
            }
        }
        assert!(Config::try_parse_from(["sluice", "--repl-timeout", "0"]).is_err());
        assert!(Config::try_parse_from(["sluice", "--repl-flush-ms", "0"]).is_err());
        assert!(Config::try_parse_from(["sluice", "--repl-flush-ms", "60001"]).is_err());
        assert!(Config::try_parse_from(["sluice", "--repl-flush-ms", "60000"]).is_ok());
        for (flag, max) in [("--threads", "1024"), ("--shards", "65536")] {
            assert!(
                Config::try_parse_from(["sluice", flag, max]).is_ok(),
                "{flag}"
            );
            for bad in ["0", "18446744073709551615"] {
                assert!(
                    Config::try_parse_from(["sluice", flag, bad]).is_err(),
                    "{flag} {bad}"
                );
            }
        }
    }

    #[test]
    fn region_flags_are_checked() {
        let ok = Config::try_parse_from([
            "sluice",
            "--region",
            "mumbai-1",
            "--regions-etcd",
            "http://127.0.0.1:2379",
            "--rebalance-interval",
            "1s",
            "--region-min-share",
            "0.2",
        ])
        .unwrap();
        assert_eq!(ok.rebalance_interval, std::time::Duration::from_secs(1));
        assert_eq!(ok.region_min_share, Some(0.2));
        let bad = |args: &[&str]| {
            let mut all = vec!["sluice", "--region", "r", "--regions-etcd", "http://e:1"];
            all.extend_from_slice(args);
            Config::try_parse_from(all).is_err()
        };
        assert!(bad(&["--rebalance-interval", "10ms"]));
        assert!(bad(&["--rebalance-interval", "2h"]));
        assert!(bad(&["--region-min-share", "1.5"]));
        assert!(bad(&["--region-min-share", "NaN"]));
        assert!(bad(&["--region", "a/b"]));
        // A region needs its etcd, and the other way round.
        assert!(Config::try_parse_from(["sluice", "--region", "r"]).is_err());
        assert!(Config::try_parse_from(["sluice", "--regions-etcd", "http://e:1"]).is_err());
    }
}
