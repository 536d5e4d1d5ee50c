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
mod dispatch;
mod error;
mod route;
mod session;
mod table;

pub use acl::{acl_catalog, noperm};
pub use args::{Args, parse_u64};
pub use config::values as config_values;
pub use dispatch::execute;
pub use error::CmdError;
pub use route::{NOPERM_KEY, Refusal, may_serve};
pub use session::{LastCommand, Session};
pub use table::{
    COMMANDS, CommandSpec, SHOULD_RATE_LIMIT_ROW, STATS_ROWS, flag, lookup, row, row_name,
};

mod acl;
mod acl_log;
mod append;
mod auth;
mod card;
mod cl_throttle;
mod client;
mod cluster;
mod command;
mod config;
mod dbsize;
mod del;
mod echo;
mod eval;
mod exists;
mod expire;
pub(crate) use expire::expire_deadline;
mod float;
mod flushall;
mod gcra;
mod get;
mod getrange;
mod getset;
mod hash;
mod hello;
mod hold;
mod incr;
mod incrbyfloat;
mod info;
mod keys;
mod keytype;
mod list;
mod mget;
mod mset;
mod multi;
mod ping;
mod psync;
pub mod pubsub;
mod quit;
mod replconf;
mod replicaof;
mod reset;
mod rl_allow;
pub(crate) mod rl_check;
mod rl_hit;
mod rl_lease;
mod rl_lease_tokens;
mod rl_region;
mod rl_rule;
mod rl_settle;
mod rl_top;
mod role;
mod sample;
mod save;
mod scan;
mod script;
mod select;
mod set;
pub(crate) use set::set_deadline;
mod setex;
mod sets;
mod shutdown;
mod slowlog;
mod time;
mod ttl;
pub(crate) use ttl::pttl;
pub mod wait;
mod watch;
mod zrange;
mod zset;

use bytes::BytesMut;
use sluice_core::Nanos;

use crate::shared::Shared;

/// Redis-compatible version we report to clients (`redis_version`, HELLO `version`): clients
/// gate features on it, so it names the Redis command surface we follow.
pub const REDIS_COMPAT_VERSION: &str = "7.0.15";

/// Everything a command's `apply` may touch.
#[derive(Debug)]
pub struct Ctx<'a> {
    pub shared: &'a Shared,
    pub session: &'a mut Session,
    pub out: &'a mut BytesMut,
    /// The server clock, read once for the batch this command arrived in.
    pub now: Nanos,
    /// The hash of this request's key, if the connection loop prefetched it.
    pub ahead: sluice_store::Ahead,
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
    /// Whether the command knows its keys and whether it writes only once parsed: RL.CHECK
    /// (DRY and COST 0 only read), RL.HIT and RL.HITS (their buckets are `rule:subject`).
    /// The dispatcher then checks slots and roles after parsing, from [`Command::keys`] and
    /// [`Command::writes`]; every other command is checked before, from the table's key
    /// positions and `write` flag.
    const ROUTED_AFTER_PARSE: bool = false;

    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError>;
    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError>;

    /// The keys this call touches (with [`Command::ROUTED_AFTER_PARSE`]).
    fn keys(&self) -> impl Iterator<Item = &[u8]> {
        std::iter::empty()
    }

    /// Whether this call changes state (with [`Command::ROUTED_AFTER_PARSE`]).
    fn writes(&self) -> bool {
        true
    }
}
