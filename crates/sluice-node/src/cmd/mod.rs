//! Commands: one file per command, one static table.
//!
//! Every command is a type with `parse(&mut Args) -> Result<Self, CmdError>` (validation only, no
//! state touched) and `apply(self, &mut Ctx)` (the state change and the reply). The table
//! [`COMMANDS`] names each one with its arity (the Redis convention: positive = exact count,
//! negative = at least, both counting the command name), flags and key positions; dispatch, arity
//! errors, unknown-command errors and the `COMMAND` replies all come from it. Errors are values
//! ([`CmdError`]) mapped to their wire text in one place, so a bad argument is an `-ERR` reply and
//! the connection goes on.

mod args;
mod error;

pub use args::{Args, parse_u64};
pub use error::CmdError;

mod auth;
mod cl_throttle;
mod client;
mod cluster;
mod command;
mod config;
mod dbsize;
mod del;
mod echo;
mod exists;
mod expire;
mod flushall;
mod gcra;
mod get;
mod hello;
mod incr;
mod info;
mod multi;
mod ping;
mod psync;
pub mod pubsub;
mod quit;
mod replconf;
mod replicaof;
mod reset;
pub(crate) mod rl_check;
mod rl_hit;
mod rl_rule;
mod role;
mod save;
mod select;
mod set;
mod shutdown;
mod time;
mod ttl;
pub mod wait;

use std::sync::Arc;

use bytes::BytesMut;
use sluice_core::Nanos;
use sluice_resp::Request;
use sluice_resp::reply::{self, Proto};

use crate::clients::ClientHandle;
use crate::pubsub::Subscriptions;
use crate::repl::PsyncRequest;
use crate::shared::Shared;

/// What one connection carries between its commands.
#[derive(Debug)]
pub struct Session {
    pub client: Arc<ClientHandle>,
    pub proto: Proto,
    pub authenticated: bool,
    /// Set by QUIT and SHUTDOWN: close once this batch's replies are written.
    pub close: bool,
    /// Commands queued since MULTI.
    pub transaction: Option<multi::Transaction>,
    /// The last command name this connection sent, as sent, and its table row: clients repeat
    /// one command, so most lookups are one short compare.
    pub last_command: Option<LastCommand>,
    /// EXEC is running the queued commands (blocking commands answer at once).
    pub in_exec: bool,
    /// Channels and patterns, once the connection has subscribed.
    pub subs: Option<Subscriptions>,
    /// Set by WAIT: the connection loop answers when enough replicas ack or time runs out.
    pub blocked: Option<wait::Blocked>,
    /// Set by PSYNC: the connection loop hands the socket to the replication thread.
    pub handoff: Option<PsyncRequest>,
    /// REPLCONF listening-port and capa, remembered for PSYNC.
    pub replica_port: u16,
    pub replica_capa: bool,
    /// Cluster mode: the table this connection last checked keys against.
    pub cluster_view: Option<Arc<crate::cluster::View>>,
    /// READONLY: read keys of this replica's shard here instead of following MOVED.
    pub readonly: bool,
    /// The worker thread this connection lives on.
    pub thread: usize,
    /// The commands of the current read batch, charged its time when it ends.
    pub batch: crate::stats::Batch,
}

impl Session {
    pub fn new(client: Arc<ClientHandle>, authenticated: bool) -> Session {
        Session {
            client,
            proto: Proto::default(),
            authenticated,
            close: false,
            transaction: None,
            last_command: None,
            in_exec: false,
            subs: None,
            blocked: None,
            handoff: None,
            replica_port: 0,
            replica_capa: false,
            cluster_view: None,
            readonly: false,
            thread: 0,
            batch: crate::stats::Batch::default(),
        }
    }

    /// True while subscribed to any channel or pattern.
    pub fn subscribed(&self) -> bool {
        self.subs.as_ref().is_some_and(|s| s.count() > 0)
    }
}

/// A command name exactly as a client spelled it, with the row it resolved to.
#[derive(Debug, Clone, Copy)]
pub struct LastCommand {
    name: [u8; 16],
    len: u8,
    spec: &'static CommandSpec,
}

impl LastCommand {
    fn matches(&self, name: &[u8]) -> Option<&'static CommandSpec> {
        (name.len() == usize::from(self.len) && self.name[..name.len()] == *name)
            .then_some(self.spec)
    }

    fn new(name: &[u8], spec: &'static CommandSpec) -> Option<LastCommand> {
        let mut buf = [0u8; 16];
        buf.get_mut(..name.len())?.copy_from_slice(name);
        Some(LastCommand {
            name: buf,
            len: name.len() as u8,
            spec,
        })
    }
}

/// Everything a command's `apply` may touch.
#[derive(Debug)]
pub struct Ctx<'a> {
    pub shared: &'a Shared,
    pub session: &'a mut Session,
    pub out: &'a mut BytesMut,
    /// The server clock, read once for the batch this command arrived in.
    pub now: Nanos,
}

impl Ctx<'_> {
    /// Whether the replies owed to this client are past `client-output-buffer-limit`: the
    /// connection closes there, so a command that writes many replies (EXEC, COMMAND INFO)
    /// stops at once instead of building gigabytes no client will read.
    pub fn output_full(&self) -> bool {
        self.out.len() as u64 > self.shared.config.client_output_buffer_limit
    }
}

/// A command type: parse first (no side effects), then apply. A command may borrow its
/// arguments (`'a` is the request's lifetime), so nothing is copied between the two steps.
pub trait Command<'a>: Sized {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError>;
    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError>;
}

/// Flags, as Redis names them in `COMMAND` replies.
pub mod flag {
    pub const WRITE: &str = "write";
    pub const READONLY: &str = "readonly";
    pub const FAST: &str = "fast";
    pub const DENYOOM: &str = "denyoom";
    pub const NOAUTH: &str = "no_auth";
    pub const LOADING: &str = "loading";
    pub const STALE: &str = "stale";
    pub const ADMIN: &str = "admin";
    pub const NOSCRIPT: &str = "noscript";
    pub const PUBSUB: &str = "pubsub";
    /// Refused inside MULTI at queue time (Redis's `no-multi`): EXEC then answers once per
    /// queued command, always.
    pub const NOMULTI: &str = "no_multi";
}

/// One row of the command table.
#[derive(Debug)]
pub struct CommandSpec {
    /// Lower-case, as Redis reports names.
    pub name: &'static str,
    pub arity: i32,
    pub flags: &'static [&'static str],
    pub first_key: i32,
    pub last_key: i32,
    pub step: i32,
    pub group: &'static str,
    pub summary: &'static str,
    pub since: &'static str,
    /// The arguments after the name, in Redis's documentation syntax (`key [NX|XX] [EX seconds]`):
    /// `COMMAND DOCS` derives the argument list redis-cli shows as hints from it.
    pub syntax: &'static str,
    pub run: fn(&mut Ctx<'_>, &mut Args<'_>) -> Result<(), CmdError>,
    /// The `write` flag, looked up once at compile time: the request path asks it of every
    /// keyed command in cluster mode and of every command on a read-only replica.
    pub write: bool,
}

/// Whether `flags` holds `f` (usable in the static table's initialiser).
const fn flags_hold(flags: &[&str], f: &str) -> bool {
    let mut i = 0;
    while i < flags.len() {
        let (a, b) = (flags[i].as_bytes(), f.as_bytes());
        if a.len() == b.len() {
            let mut j = 0;
            while j < a.len() && a[j] == b[j] {
                j += 1;
            }
            if j == a.len() {
                return true;
            }
        }
        i += 1;
    }
    false
}

impl CommandSpec {
    pub fn has_flag(&self, f: &str) -> bool {
        self.flags.contains(&f)
    }

    fn arity_ok(&self, argc: usize) -> bool {
        if self.arity >= 0 {
            argc == self.arity as usize
        } else {
            argc >= self.arity.unsigned_abs() as usize
        }
    }
}

macro_rules! spec {
    ($name:literal, $arity:expr, [$($flag:expr),*], ($first:expr, $last:expr, $step:expr), $group:literal, $since:literal, $summary:literal, $syntax:literal, $ty:ty) => {
        CommandSpec {
            name: $name,
            arity: $arity,
            flags: &[$($flag),*],
            first_key: $first,
            last_key: $last,
            step: $step,
            group: $group,
            summary: $summary,
            since: $since,
            syntax: $syntax,
            run: |ctx, args| <$ty as Command<'_>>::parse(args)?.apply(ctx),
            write: flags_hold(&[$($flag),*], WRITE),
        }
    };
}

use flag::*;

/// The command table, sorted by name (dispatch binary-searches it).
pub static COMMANDS: &[CommandSpec] = &[
    spec!(
        "auth",
        -2,
        [NOSCRIPT, LOADING, STALE, FAST, NOAUTH],
        (0, 0, 0),
        "connection",
        "1.0.0",
        "Authenticates the connection.",
        "[username] password",
        auth::Auth
    ),
    spec!(
        "bgsave",
        -1,
        [ADMIN, NOSCRIPT],
        (0, 0, 0),
        "server",
        "1.0.0",
        "Asynchronously saves the database(s) to disk.",
        "[SCHEDULE]",
        save::BgSave
    ),
    spec!(
        "cl.throttle",
        -5,
        [WRITE, DENYOOM, FAST],
        (1, 1, 1),
        "ratelimit",
        "0.1.0",
        "redis-cell compatible GCRA rate limit check.",
        "key max_burst count period [quantity]",
        cl_throttle::ClThrottle
    ),
    spec!(
        "client",
        -2,
        [NOSCRIPT, LOADING, STALE],
        (0, 0, 0),
        "connection",
        "2.4.0",
        "A container for client connection commands.",
        "subcommand [argument ...]",
        client::Client
    ),
    spec!(
        "cluster",
        -2,
        [STALE],
        (0, 0, 0),
        "cluster",
        "3.0.0",
        "A container for Redis Cluster commands.",
        "subcommand [argument ...]",
        cluster::ClusterCmd
    ),
    spec!(
        "command",
        -1,
        [LOADING, STALE],
        (0, 0, 0),
        "server",
        "2.8.13",
        "Returns detailed information about all commands.",
        "[subcommand [argument ...]]",
        command::CommandCmd
    ),
    spec!(
        "config",
        -2,
        [ADMIN, NOSCRIPT, LOADING, STALE],
        (0, 0, 0),
        "server",
        "2.0.0",
        "A container for server configuration commands.",
        "subcommand [argument ...]",
        config::ConfigCmd
    ),
    spec!(
        "dbsize",
        1,
        [READONLY, FAST],
        (0, 0, 0),
        "server",
        "1.0.0",
        "Returns the number of keys in the database.",
        "",
        dbsize::DbSize
    ),
    spec!(
        "decr",
        2,
        [WRITE, DENYOOM, FAST],
        (1, 1, 1),
        "string",
        "1.0.0",
        "Decrements the integer value of a key by one.",
        "key",
        incr::Decr
    ),
    spec!(
        "decrby",
        3,
        [WRITE, DENYOOM, FAST],
        (1, 1, 1),
        "string",
        "1.0.0",
        "Decrements a number from the integer value of a key.",
        "key decrement",
        incr::DecrBy
    ),
    spec!(
        "del",
        -2,
        [WRITE],
        (1, -1, 1),
        "keyspace",
        "1.0.0",
        "Deletes one or more keys.",
        "key ...",
        del::Del
    ),
    spec!(
        "discard",
        1,
        [NOSCRIPT, LOADING, STALE, FAST],
        (0, 0, 0),
        "transactions",
        "2.0.0",
        "Discards a transaction.",
        "",
        multi::Discard
    ),
    spec!(
        "echo",
        2,
        [FAST],
        (0, 0, 0),
        "connection",
        "1.0.0",
        "Returns the given string.",
        "message",
        echo::Echo
    ),
    spec!(
        "exec",
        1,
        [NOSCRIPT, LOADING, STALE],
        (0, 0, 0),
        "transactions",
        "1.2.0",
        "Executes all commands in a transaction.",
        "",
        multi::Exec
    ),
    spec!(
        "exists",
        -2,
        [READONLY, FAST],
        (1, -1, 1),
        "keyspace",
        "1.0.0",
        "Determines whether one or more keys exist.",
        "key ...",
        exists::Exists
    ),
    spec!(
        "expire",
        -3,
        [WRITE, FAST],
        (1, 1, 1),
        "keyspace",
        "1.0.0",
        "Sets the expiration time of a key in seconds.",
        "key seconds [NX|XX|GT|LT]",
        expire::Expire
    ),
    spec!(
        "flushall",
        -1,
        [WRITE],
        (0, 0, 0),
        "server",
        "1.0.0",
        "Removes all keys.",
        "[ASYNC|SYNC]",
        flushall::FlushAll
    ),
    spec!(
        "flushdb",
        -1,
        [WRITE],
        (0, 0, 0),
        "server",
        "1.0.0",
        "Removes all keys.",
        "[ASYNC|SYNC]",
        flushall::FlushAll
    ),
    spec!(
        "gcra",
        -5,
        [WRITE, DENYOOM, FAST],
        (1, 1, 1),
        "ratelimit",
        "0.1.0",
        "Redis GCRA rate limit check.",
        "key max_burst requests_per_period period [TOKENS tokens]",
        gcra::Gcra
    ),
    spec!(
        "get",
        2,
        [READONLY, FAST],
        (1, 1, 1),
        "string",
        "1.0.0",
        "Returns the string value of a key.",
        "key",
        get::Get
    ),
    spec!(
        "hello",
        -1,
        [NOSCRIPT, LOADING, STALE, FAST, NOAUTH],
        (0, 0, 0),
        "connection",
        "6.0.0",
        "Handshakes with the server.",
        "[protover [AUTH username password] [SETNAME clientname]]",
        hello::Hello
    ),
    spec!(
        "incr",
        2,
        [WRITE, DENYOOM, FAST],
        (1, 1, 1),
        "string",
        "1.0.0",
        "Increments the integer value of a key by one.",
        "key",
        incr::Incr
    ),
    spec!(
        "incrby",
        3,
        [WRITE, DENYOOM, FAST],
        (1, 1, 1),
        "string",
        "1.0.0",
        "Increments the integer value of a key by a number.",
        "key increment",
        incr::IncrBy
    ),
    spec!(
        "info",
        -1,
        [LOADING, STALE],
        (0, 0, 0),
        "server",
        "1.0.0",
        "Returns information and statistics about the server.",
        "[section ...]",
        info::Info
    ),
    spec!(
        "lastsave",
        1,
        [LOADING, STALE, FAST],
        (0, 0, 0),
        "server",
        "1.0.0",
        "Returns the Unix timestamp of the last successful save to disk.",
        "",
        save::LastSave
    ),
    spec!(
        "multi",
        1,
        [NOSCRIPT, LOADING, STALE, FAST],
        (0, 0, 0),
        "transactions",
        "1.2.0",
        "Starts a transaction.",
        "",
        multi::Multi
    ),
    spec!(
        "pexpire",
        -3,
        [WRITE, FAST],
        (1, 1, 1),
        "keyspace",
        "2.6.0",
        "Sets the expiration time of a key in milliseconds.",
        "key milliseconds [NX|XX|GT|LT]",
        expire::PExpire
    ),
    spec!(
        "ping",
        -1,
        [FAST],
        (0, 0, 0),
        "connection",
        "1.0.0",
        "Returns the server's liveliness response.",
        "[message]",
        ping::Ping
    ),
    spec!(
        "psubscribe",
        -2,
        [PUBSUB, NOSCRIPT, LOADING, STALE, NOMULTI],
        (0, 0, 0),
        "pubsub",
        "2.0.0",
        "Listens for messages published to channels that match one or more patterns.",
        "pattern [pattern ...]",
        pubsub::PSubscribe
    ),
    spec!(
        "psync",
        -3,
        [ADMIN, NOSCRIPT, NOMULTI],
        (0, 0, 0),
        "server",
        "2.8.0",
        "An internal command used in replication.",
        "replicationid offset",
        psync::Psync
    ),
    spec!(
        "pttl",
        2,
        [READONLY, FAST],
        (1, 1, 1),
        "keyspace",
        "2.6.0",
        "Returns the expiration time in milliseconds of a key.",
        "key",
        ttl::PTtl
    ),
    spec!(
        "publish",
        3,
        [PUBSUB, LOADING, STALE, FAST],
        (0, 0, 0),
        "pubsub",
        "2.0.0",
        "Posts a message to a channel.",
        "channel message",
        pubsub::Publish
    ),
    spec!(
        "punsubscribe",
        -1,
        [PUBSUB, NOSCRIPT, LOADING, STALE, NOMULTI],
        (0, 0, 0),
        "pubsub",
        "2.0.0",
        "Stops listening to messages published to channels that match one or more patterns.",
        "[pattern [pattern ...]]",
        pubsub::PUnsubscribe
    ),
    spec!(
        "quit",
        -1,
        [NOSCRIPT, LOADING, STALE, FAST, NOAUTH],
        (0, 0, 0),
        "connection",
        "1.0.0",
        "Closes the connection.",
        "",
        quit::Quit
    ),
    spec!(
        "readonly",
        1,
        [LOADING, STALE, FAST],
        (0, 0, 0),
        "cluster",
        "3.0.0",
        "Enables read-only queries for a connection to a Redis Cluster replica node.",
        "",
        cluster::ReadOnly
    ),
    spec!(
        "readwrite",
        1,
        [LOADING, STALE, FAST],
        (0, 0, 0),
        "cluster",
        "3.0.0",
        "Enables read-write queries for a connection to a Redis Cluster replica node.",
        "",
        cluster::ReadWrite
    ),
    spec!(
        "replconf",
        -1,
        [ADMIN, NOSCRIPT, LOADING, STALE, NOMULTI],
        (0, 0, 0),
        "server",
        "3.0.0",
        "An internal command for configuring the replication stream.",
        "[option value ...]",
        replconf::ReplConf
    ),
    spec!(
        "replicaof",
        3,
        [ADMIN, NOSCRIPT, STALE],
        (0, 0, 0),
        "server",
        "5.0.0",
        "Configures a server as replica of another, or promotes it to a master.",
        "host port",
        replicaof::ReplicaOf
    ),
    spec!(
        "reset",
        1,
        [NOSCRIPT, LOADING, STALE, FAST, NOAUTH],
        (0, 0, 0),
        "connection",
        "6.2.0",
        "Resets the connection.",
        "",
        reset::Reset
    ),
    spec!(
        "rl.check",
        -4,
        [WRITE, DENYOOM, FAST],
        (1, 1, 1),
        "ratelimit",
        "0.1.0",
        "Checks and consumes a rate limit atomically.",
        "key limit period [BURST burst] [COST cost] [ALGO algo] [DRY] [FAILMODE mode] [SPLIT k] [APPROX ms]",
        rl_check::RlCheck
    ),
    spec!(
        "rl.hit",
        -3,
        [WRITE, DENYOOM, FAST],
        (0, 0, 0),
        "ratelimit",
        "0.1.0",
        "Checks a subject under a named rule.",
        "name subject [COST cost]",
        rl_hit::RlHit
    ),
    spec!(
        "rl.hits",
        -3,
        [WRITE, DENYOOM],
        (0, 0, 0),
        "ratelimit",
        "0.1.0",
        "Checks a subject under several rules (or keys) at once, all or nothing.",
        "subject rule [rule ...] [COST cost]",
        rl_hit::RlHits
    ),
    spec!(
        "rl.rule",
        -2,
        [ADMIN, NOSCRIPT, LOADING, STALE],
        (0, 0, 0),
        "ratelimit",
        "0.1.0",
        "Sets, reads, lists, deletes and rolls back named rules.",
        "SET|GET|DEL|LIST|HISTORY|ROLLBACK [name] [argument ...]",
        rl_rule::RlRule
    ),
    spec!(
        "role",
        1,
        [NOSCRIPT, LOADING, STALE, FAST],
        (0, 0, 0),
        "server",
        "2.8.12",
        "Returns the replication role.",
        "",
        role::Role
    ),
    spec!(
        "save",
        1,
        [ADMIN, NOSCRIPT, NOMULTI],
        (0, 0, 0),
        "server",
        "1.0.0",
        "Synchronously saves the database(s) to disk.",
        "",
        save::Save
    ),
    spec!(
        "select",
        2,
        [LOADING, STALE, FAST],
        (0, 0, 0),
        "connection",
        "1.0.0",
        "Changes the selected database (only 0 exists).",
        "index",
        select::Select
    ),
    spec!(
        "set",
        -3,
        [WRITE, DENYOOM],
        (1, 1, 1),
        "string",
        "1.0.0",
        "Sets the string value of a key.",
        "key value [NX|XX] [EX seconds|PX milliseconds|EXAT unix-time-seconds|PXAT unix-time-milliseconds|KEEPTTL]",
        set::Set
    ),
    spec!(
        "shutdown",
        -1,
        [ADMIN, NOSCRIPT, LOADING, STALE, NOMULTI],
        (0, 0, 0),
        "server",
        "1.0.0",
        "Stops the server.",
        "[NOSAVE|SAVE] [NOW] [FORCE]",
        shutdown::Shutdown
    ),
    spec!(
        "slaveof",
        3,
        [ADMIN, NOSCRIPT, STALE],
        (0, 0, 0),
        "server",
        "1.0.0",
        "Sets a server as a replica of another, or promotes it to being a master.",
        "host port",
        replicaof::ReplicaOf
    ),
    spec!(
        "subscribe",
        -2,
        [PUBSUB, NOSCRIPT, LOADING, STALE, NOMULTI],
        (0, 0, 0),
        "pubsub",
        "2.0.0",
        "Listens for messages published to channels.",
        "channel [channel ...]",
        pubsub::Subscribe
    ),
    spec!(
        "sync",
        1,
        [ADMIN, NOSCRIPT, NOMULTI],
        (0, 0, 0),
        "server",
        "1.0.0",
        "An internal command used in replication.",
        "",
        psync::Sync
    ),
    spec!(
        "time",
        1,
        [LOADING, STALE, FAST],
        (0, 0, 0),
        "server",
        "2.6.0",
        "Returns the server time.",
        "",
        time::Time
    ),
    spec!(
        "ttl",
        2,
        [READONLY, FAST],
        (1, 1, 1),
        "keyspace",
        "1.0.0",
        "Returns the expiration time in seconds of a key.",
        "key",
        ttl::Ttl
    ),
    spec!(
        "unsubscribe",
        -1,
        [PUBSUB, NOSCRIPT, LOADING, STALE, NOMULTI],
        (0, 0, 0),
        "pubsub",
        "2.0.0",
        "Stops listening to messages posted to channels.",
        "[channel [channel ...]]",
        pubsub::Unsubscribe
    ),
    spec!(
        "wait",
        3,
        [NOSCRIPT],
        (0, 0, 0),
        "generic",
        "3.0.0",
        "Blocks until the asynchronous replication of all preceding write commands sent by the connection is completed.",
        "numreplicas timeout",
        wait::Wait
    ),
];

/// Finds a command by name, case-insensitively.
pub fn lookup(name: &[u8]) -> Option<&'static CommandSpec> {
    // Lower-case into a small stack buffer; command names are short.
    let mut buf = [0u8; 32];
    if name.len() > buf.len() {
        return None;
    }
    let lower = &mut buf[..name.len()];
    lower.copy_from_slice(name);
    lower.make_ascii_lowercase();
    COMMANDS
        .binary_search_by(|c| c.name.as_bytes().cmp(lower))
        .ok()
        .map(|i| &COMMANDS[i])
}

/// The row of the command table `spec` is (its counters' index in [`crate::stats`]).
pub fn row(spec: &'static CommandSpec) -> usize {
    let base = COMMANDS.as_ptr() as usize;
    (std::ptr::from_ref(spec) as usize - base) / std::mem::size_of::<CommandSpec>()
}

/// The counters' row of Envoy's `ShouldRateLimit`, after the command table's rows.
pub const SHOULD_RATE_LIMIT_ROW: usize = COMMANDS.len();

/// How many rows of per-command counters the stats keep: the table's and Envoy's.
pub const STATS_ROWS: usize = SHOULD_RATE_LIMIT_ROW + 1;

/// The name INFO commandstats and `/metrics` give counters' row `row`.
pub fn row_name(row: usize) -> &'static str {
    COMMANDS
        .get(row)
        .map_or("envoy.shouldratelimit", |spec| spec.name)
}

/// Executes one request, appending its reply to `ctx.out`.
pub fn execute(req: &Request, ctx: &mut Ctx<'_>) {
    let Some(name) = req.arg(0) else {
        return;
    };
    let cached = ctx.session.last_command.and_then(|last| last.matches(name));
    let Some(spec) = cached.or_else(|| lookup(name)) else {
        if sluice_resp::is_http_request(name) {
            return drop_cross_protocol(ctx);
        }
        fail_transaction(ctx);
        return write_raw_error(ctx.out, &unknown_command(name, req.args_from(1)));
    };
    if cached.is_none() {
        ctx.session.last_command = LastCommand::new(name, spec);
    }
    let row = row(spec);
    let shared = ctx.shared;
    // Redis checks arity before authentication.
    if !spec.arity_ok(req.len()) {
        return refuse(ctx, row, &CmdError::Arity.text(spec.name));
    }
    if !ctx.session.authenticated && !spec.has_flag(NOAUTH) {
        return refuse(ctx, row, "NOAUTH Authentication required.");
    }
    if ctx.session.proto == Proto::Resp2
        && ctx.session.subscribed()
        && !allowed_when_subscribed(spec.name)
    {
        return refuse(
            ctx,
            row,
            &format!(
                "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
                spec.name
            ),
        );
    }
    if let Some(cluster) = &ctx.shared.cluster
        && spec.first_key > 0
    {
        let readonly = ctx.session.readonly;
        // RL.CHECK is a read with DRY or COST 0, which a READONLY connection may send to a
        // replica; RL.CHECK itself redirects the writes (see `rl_check`).
        let write = spec.write && !(readonly && spec.name == "rl.check");
        let keys = key_args(spec, req);
        if let Err(redirect) = cluster.check(&mut ctx.session.cluster_view, keys, write, readonly) {
            return refuse(ctx, row, &CmdError::from(redirect).text(spec.name));
        }
    }
    // A write on a read-only replica (RL.CHECK decides for itself: DRY and COST 0 only read).
    if ctx.shared.repl.is_readonly() && spec.write && spec.name != "rl.check" {
        return refuse(ctx, row, &CmdError::ReadOnly.text(spec.name));
    }
    if let Some(tx) = ctx.session.transaction.as_mut()
        && !multi::controls_transaction(spec.name)
    {
        if spec.has_flag(NOMULTI) {
            tx.failed = true;
            return reply::error(ctx.out, "ERR Command not allowed inside a transaction");
        }
        tx.queued.push(req.clone());
        return reply::simple(ctx.out, "QUEUED");
    }
    let mut args = Args::new(req);
    let result = (spec.run)(ctx, &mut args);
    ctx.session.batch.note(row);
    if let Err(e) = result {
        shared.stats.slot(ctx.session.thread).fail(row);
        reply::error(ctx.out, &e.text(spec.name));
    }
}

/// The key arguments of `req`, from the table's key positions (Redis's first, last, step).
fn key_args<'r>(spec: &CommandSpec, req: &'r Request) -> impl Iterator<Item = &'r [u8]> {
    let first = spec.first_key as usize;
    let last = if spec.last_key < 0 {
        req.len()
            .saturating_sub(spec.last_key.unsigned_abs() as usize)
    } else {
        (spec.last_key as usize).min(req.len().saturating_sub(1))
    };
    let step = spec.step.max(1) as usize;
    (first..=last).step_by(step).filter_map(|i| req.arg(i))
}

/// Closes the connection without a reply and without running anything after this request,
/// with Redis's log line.
fn drop_cross_protocol(ctx: &mut Ctx<'_>) {
    sluice_log::log(&format!(
        "Possible SECURITY ATTACK detected. It looks like somebody is sending POST or Host: commands to Sluice. This is likely due to an attacker attempting to use Cross Protocol Scripting to compromise your Sluice instance. Connection from {} aborted.",
        ctx.session.client.addr
    ));
    ctx.session.close = true;
}

/// What a RESP2 connection may send while subscribed.
fn allowed_when_subscribed(name: &str) -> bool {
    matches!(
        name,
        "subscribe" | "psubscribe" | "unsubscribe" | "punsubscribe" | "ping" | "quit" | "reset"
    )
}

/// A command refused inside MULTI makes the EXEC that follows abort, as in Redis.
/// A command refused before it ran (arity, authentication, subscribed mode, a cluster
/// redirect, a replica's read-only state): counted as rejected, and a transaction it was meant
/// for fails at EXEC, as in Redis.
fn refuse(ctx: &mut Ctx<'_>, row: usize, error: &str) {
    ctx.shared.stats.slot(ctx.session.thread).reject(row);
    fail_transaction(ctx);
    reply::error(ctx.out, error);
}

fn fail_transaction(ctx: &mut Ctx<'_>) {
    if let Some(tx) = ctx.session.transaction.as_mut() {
        tx.failed = true;
    }
}

/// Writes an error line from raw bytes (client bytes are echoed as sent, as Redis does), with
/// CR and LF turned into spaces so the line stays one line.
fn write_raw_error(out: &mut BytesMut, text: &[u8]) {
    out.reserve(text.len() + 3);
    out.extend_from_slice(b"-");
    out.extend(
        text.iter()
            .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
    out.extend_from_slice(b"\r\n");
}

/// Redis's text for a command it does not know, quoting the first arguments.
fn unknown_command<'a>(name: &[u8], args: impl Iterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut quoted = Vec::new();
    for a in args {
        if quoted.len() >= 128 {
            break;
        }
        let room = 128 - quoted.len();
        quoted.push(b'\'');
        quoted.extend_from_slice(&a[..a.len().min(room)]);
        quoted.extend_from_slice(b"' ");
    }
    let mut text = b"ERR unknown command '".to_vec();
    text.extend_from_slice(&name[..name.len().min(128)]);
    text.extend_from_slice(b"', with args beginning with: ");
    text.extend_from_slice(&quoted);
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_and_unique() {
        for w in COMMANDS.windows(2) {
            assert!(w[0].name < w[1].name, "{} before {}", w[0].name, w[1].name);
        }
    }

    #[test]
    fn write_flag_is_precomputed() {
        for c in COMMANDS {
            assert_eq!(c.write, c.has_flag(WRITE), "{}", c.name);
        }
        assert!(lookup(b"rl.check").unwrap().write);
        assert!(!lookup(b"get").unwrap().write);
    }

    #[test]
    fn rows_index_the_table() {
        for (i, c) in COMMANDS.iter().enumerate() {
            assert_eq!(row(c), i);
            assert_eq!(row_name(i), c.name);
        }
        assert_eq!(row_name(SHOULD_RATE_LIMIT_ROW), "envoy.shouldratelimit");
    }

    #[test]
    fn lookup_is_case_insensitive() {
        assert_eq!(lookup(b"RL.CHECK").map(|c| c.name), Some("rl.check"));
        assert_eq!(lookup(b"Ping").map(|c| c.name), Some("ping"));
        assert!(lookup(b"nosuch").is_none());
        assert!(lookup(&[b'a'; 100]).is_none());
    }

    #[test]
    fn unknown_command_text_matches_redis() {
        let args = [&b"a"[..], b"b c"];
        assert_eq!(
            unknown_command(b"FOO", args.into_iter()),
            b"ERR unknown command 'FOO', with args beginning with: 'a' 'b c' "
        );
        assert_eq!(
            unknown_command(b"foo", std::iter::empty()),
            b"ERR unknown command 'foo', with args beginning with: "
        );
        let mut out = BytesMut::new();
        write_raw_error(&mut out, b"x\r\ny\xff");
        assert_eq!(&out[..], b"-x  y\xff\r\n");
    }
}
