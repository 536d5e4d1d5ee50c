//! The command table: every command's name, arity (the Redis convention: positive = exact
//! count, negative = at least, both counting the name), flags and key positions, sorted by name.
//! Dispatch, arity errors, unknown-command errors and the `COMMAND` replies all read it.

use std::sync::LazyLock;

use super::*;

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
    /// May block the client (Redis's BLPOP family): Sluice answers those with an error.
    pub const BLOCKING: &str = "blocking";
    pub const SKIP_MONITOR: &str = "skip_monitor";
    pub const NO_MANDATORY_KEYS: &str = "no_mandatory_keys";
    pub const MOVABLEKEYS: &str = "movablekeys";
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
    /// Parses, checks the keys if the command names them only once parsed, and applies.
    pub run: fn(&mut Ctx<'_>, &mut Args<'_>) -> Result<(), CmdError>,
    /// [`Command::ROUTED_AFTER_PARSE`] of the command's type: the dispatcher skips the check
    /// by key positions, and `run` makes it from the parsed command.
    pub routed_after_parse: bool,
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

    /// The key arguments of `req`, from the key positions (Redis's first, last, step). A
    /// command without keys (first key 0) has none.
    pub fn key_args<'r>(&self, req: sluice_resp::RequestRef<'r>) -> impl Iterator<Item = &'r [u8]> {
        let first = self.first_key.max(0) as usize;
        let last = if self.last_key < 0 {
            req.len()
                .saturating_sub(self.last_key.unsigned_abs() as usize)
        } else {
            (self.last_key as usize).min(req.len().saturating_sub(1))
        };
        let step = self.step.max(1) as usize;
        (first..=last)
            .step_by(step)
            .filter(move |_| first > 0)
            .filter_map(move |i| req.arg(i))
    }

    pub(super) fn arity_ok(&self, argc: usize) -> bool {
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
            run: |ctx, args| {
                let cmd = <$ty as Command<'_>>::parse(args)?;
                if <$ty as Command<'_>>::ROUTED_AFTER_PARSE {
                    super::route::check_serve(ctx, cmd.keys(), cmd.writes())?;
                }
                cmd.apply(ctx)
            },
            routed_after_parse: <$ty as Command<'_>>::ROUTED_AFTER_PARSE,
            write: flags_hold(&[$($flag),*], WRITE),
        }
    };
}

use flag::*;

/// The command table, sorted by name (dispatch binary-searches it).
pub static COMMANDS: &[CommandSpec] = &[
    spec!(
        "acl",
        -2,
        [ADMIN, NOSCRIPT, LOADING, STALE],
        (0, 0, 0),
        "server",
        "6.0.0",
        "A container for Access List Control commands.",
        "subcommand [argument ...]",
        acl::AclCmd
    ),
    spec!(
        "append",
        3,
        [WRITE, DENYOOM, FAST],
        (1, 1, 1),
        "string",
        "2.0.0",
        "Appends a string to the value of a key. Creates the key if it doesn't exist.",
        "key value",
        append::Append
    ),
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
        "blmove",
        6,
        [WRITE, DENYOOM, NOSCRIPT, BLOCKING],
        (1, 2, 1),
        "list",
        "6.2.0",
        "Pop an element from a list, push it to another list and return it; or block until one is available.",
        "source destination LEFT|RIGHT LEFT|RIGHT timeout",
        list::Blocking
    ),
    spec!(
        "blpop",
        -3,
        [WRITE, NOSCRIPT, BLOCKING],
        (1, -2, 1),
        "list",
        "2.0.0",
        "Remove and get the first element in a list, or block until one is available.",
        "key [key ...] timeout",
        list::Blocking
    ),
    spec!(
        "brpop",
        -3,
        [WRITE, NOSCRIPT, BLOCKING],
        (1, -2, 1),
        "list",
        "2.0.0",
        "Remove and get the last element in a list, or block until one is available.",
        "key [key ...] timeout",
        list::Blocking
    ),
    spec!(
        "brpoplpush",
        4,
        [WRITE, DENYOOM, NOSCRIPT, BLOCKING],
        (1, 2, 1),
        "list",
        "2.2.0",
        "Pop an element from a list, push it to another list and return it; or block until one is available.",
        "source destination timeout",
        list::Blocking
    ),
    spec!(
        "bzpopmax",
        -3,
        [WRITE, NOSCRIPT, BLOCKING, FAST],
        (1, -2, 1),
        "sorted-set",
        "5.0.0",
        "Remove and return the member with the highest score from one or more sorted sets, or block until one is available.",
        "key [key ...] timeout",
        list::Blocking
    ),
    spec!(
        "bzpopmin",
        -3,
        [WRITE, NOSCRIPT, BLOCKING, FAST],
        (1, -2, 1),
        "sorted-set",
        "5.0.0",
        "Remove and return the member with the lowest score from one or more sorted sets, or block until one is available.",
        "key [key ...] timeout",
        list::Blocking
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
        "copy",
        -3,
        [WRITE, DENYOOM],
        (1, 2, 1),
        "keyspace",
        "6.2.0",
        "Copy a key.",
        "source destination [DB destination-db] [REPLACE]",
        keys::Copy
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
        "eval",
        -3,
        [
            NOSCRIPT,
            STALE,
            SKIP_MONITOR,
            NO_MANDATORY_KEYS,
            MOVABLEKEYS
        ],
        (0, 0, 0),
        "scripting",
        "2.6.0",
        "Executes a server-side Lua script.",
        "script numkeys [key [key ...]] [arg [arg ...]]",
        eval::Eval<'_, false, false>
    ),
    spec!(
        "eval_ro",
        -3,
        [
            READONLY,
            NOSCRIPT,
            STALE,
            SKIP_MONITOR,
            NO_MANDATORY_KEYS,
            MOVABLEKEYS
        ],
        (0, 0, 0),
        "scripting",
        "7.0.0",
        "Executes a read-only server-side Lua script.",
        "script numkeys [key [key ...]] [arg [arg ...]]",
        eval::Eval<'_, false, true>
    ),
    spec!(
        "evalsha",
        -3,
        [
            NOSCRIPT,
            STALE,
            SKIP_MONITOR,
            NO_MANDATORY_KEYS,
            MOVABLEKEYS
        ],
        (0, 0, 0),
        "scripting",
        "2.6.0",
        "Executes a server-side Lua script by SHA1 digest.",
        "sha1 numkeys [key [key ...]] [arg [arg ...]]",
        eval::Eval<'_, true, false>
    ),
    spec!(
        "evalsha_ro",
        -3,
        [
            READONLY,
            NOSCRIPT,
            STALE,
            SKIP_MONITOR,
            NO_MANDATORY_KEYS,
            MOVABLEKEYS
        ],
        (0, 0, 0),
        "scripting",
        "7.0.0",
        "Executes a read-only server-side Lua script by SHA1 digest.",
        "sha1 numkeys [key [key ...]] [arg [arg ...]]",
        eval::Eval<'_, true, true>
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
        "expireat",
        -3,
        [WRITE, FAST],
        (1, 1, 1),
        "keyspace",
        "1.2.0",
        "Sets the expiration time of a key to a Unix timestamp.",
        "key unix-time-seconds [NX|XX|GT|LT]",
        expire::ExpireAt
    ),
    spec!(
        "expiretime",
        2,
        [READONLY, FAST],
        (1, 1, 1),
        "keyspace",
        "7.0.0",
        "Returns the expiration time of a key as a Unix timestamp.",
        "key",
        ttl::ExpireTime
    ),
    spec!(
        "fcall",
        -3,
        [
            NOSCRIPT,
            STALE,
            SKIP_MONITOR,
            NO_MANDATORY_KEYS,
            MOVABLEKEYS
        ],
        (0, 0, 0),
        "scripting",
        "7.0.0",
        "Invokes a function.",
        "function numkeys [key [key ...]] [arg [arg ...]]",
        eval::Functions
    ),
    spec!(
        "fcall_ro",
        -3,
        [
            READONLY,
            NOSCRIPT,
            STALE,
            SKIP_MONITOR,
            NO_MANDATORY_KEYS,
            MOVABLEKEYS
        ],
        (0, 0, 0),
        "scripting",
        "7.0.0",
        "Invokes a read-only function.",
        "function numkeys [key [key ...]] [arg [arg ...]]",
        eval::Functions
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
        "function",
        -2,
        [NOSCRIPT],
        (0, 0, 0),
        "scripting",
        "7.0.0",
        "A container for function commands.",
        "subcommand [argument ...]",
        eval::Functions
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
        "getdel",
        2,
        [WRITE, FAST],
        (1, 1, 1),
        "string",
        "6.2.0",
        "Returns the string value of a key after deleting the key.",
        "key",
        getset::GetDel
    ),
    spec!(
        "getex",
        -2,
        [WRITE, FAST],
        (1, 1, 1),
        "string",
        "6.2.0",
        "Returns the string value of a key after setting its expiration time.",
        "key [EX seconds|PX milliseconds|EXAT unix-time-seconds|PXAT unix-time-milliseconds|PERSIST]",
        getset::GetEx
    ),
    spec!(
        "getrange",
        4,
        [READONLY],
        (1, 1, 1),
        "string",
        "2.4.0",
        "Returns a substring of the string stored at a key.",
        "key start end",
        getrange::GetRange
    ),
    spec!(
        "getset",
        3,
        [WRITE, DENYOOM, FAST],
        (1, 1, 1),
        "string",
        "1.0.0",
        "Returns the previous string value of a key after setting it to a new value.",
        "key value",
        getset::GetSet
    ),
    spec!(
        "hdel",
        -3,
        [WRITE, FAST],
        (1, 1, 1),
        "hash",
        "2.0.0",
        "Delete one or more hash fields.",
        "key field [field ...]",
        hash::HDel
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
        "hexists",
        3,
        [READONLY, FAST],
        (1, 1, 1),
        "hash",
        "2.0.0",
        "Determine if a hash field exists.",
        "key field",
        hash::HExists
    ),
    spec!(
        "hget",
        3,
        [READONLY, FAST],
        (1, 1, 1),
        "hash",
        "2.0.0",
        "Get the value of a hash field.",
        "key field",
        hash::HGet
    ),
    spec!(
        "hgetall",
        2,
        [READONLY],
        (1, 1, 1),
        "hash",
        "2.0.0",
        "Get all the fields and values in a hash.",
        "key",
        hash::HGetAll
    ),
    spec!(
        "hincrby",
        4,
        [WRITE, DENYOOM, FAST],
        (1, 1, 1),
        "hash",
        "2.0.0",
        "Increment the integer value of a hash field by the given number.",
        "key field increment",
        hash::HIncrBy
    ),
    spec!(
        "hincrbyfloat",
        4,
        [WRITE, DENYOOM, FAST],
        (1, 1, 1),
        "hash",
        "2.6.0",
        "Increment the float value of a hash field by the given amount.",
        "key field increment",
        hash::HIncrByFloat
    ),
    spec!(
        "hkeys",
        2,
        [READONLY],
        (1, 1, 1),
        "hash",
        "2.0.0",
        "Get all the fields in a hash.",
        "key",
        hash::HKeys
    ),
    spec!(
        "hlen",
        2,
        [READONLY, FAST],
        (1, 1, 1),
        "hash",
        "2.0.0",
        "Get the number of fields in a hash.",
        "key",
        card::HLen
    ),
    spec!(
        "hmget",
        -3,
        [READONLY, FAST],
        (1, 1, 1),
        "hash",
        "2.0.0",
        "Get the values of all the given hash fields.",
        "key field [field ...]",
        hash::HMGet
    ),
    spec!(
        "hmset",
        -4,
        [WRITE, DENYOOM, FAST],
        (1, 1, 1),
        "hash",
        "2.0.0",
        "Set multiple hash fields to multiple values.",
        "key field value [field value ...]",
        hash::HMSet
    ),
    spec!(
        "hrandfield",
        -2,
        [READONLY],
        (1, 1, 1),
        "hash",
        "6.2.0",
        "Get one or multiple random fields from a hash.",
        "key [count [WITHVALUES]]",
        hash::HRandField
    ),
    spec!(
        "hscan",
        -3,
        [READONLY],
        (1, 1, 1),
        "hash",
        "2.8.0",
        "Incrementally iterate hash fields and associated values.",
        "key cursor [MATCH pattern] [COUNT count]",
        scan::HScan
    ),
    spec!(
        "hset",
        -4,
        [WRITE, DENYOOM, FAST],
        (1, 1, 1),
        "hash",
        "2.0.0",
        "Set the string value of a hash field.",
        "key field value [field value ...]",
        hash::HSetCmd
    ),
    spec!(
        "hsetnx",
        4,
        [WRITE, DENYOOM, FAST],
        (1, 1, 1),
        "hash",
        "2.0.0",
        "Set the value of a hash field, only if the field does not exist.",
        "key field value",
        hash::HSetNx
    ),
    spec!(
        "hstrlen",
        3,
        [READONLY, FAST],
        (1, 1, 1),
        "hash",
        "3.2.0",
        "Get the length of the value of a hash field.",
        "key field",
        hash::HStrLen
    ),
    spec!(
        "hvals",
        2,
        [READONLY],
        (1, 1, 1),
        "hash",
        "2.0.0",
        "Get all the values in a hash.",
        "key",
        hash::HVals
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
        "incrbyfloat",
        3,
        [WRITE, DENYOOM, FAST],
        (1, 1, 1),
        "string",
        "2.6.0",
        "Increment the float value of a key by the given amount",
        "key increment",
        incrbyfloat::IncrByFloat
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
        "keys",
        2,
        [READONLY],
        (0, 0, 0),
        "keyspace",
        "1.0.0",
        "Find all keys matching the given pattern.",
        "pattern",
        keys::Keys
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
        "lindex",
        3,
        [READONLY],
        (1, 1, 1),
        "list",
        "1.0.0",
        "Get an element from a list by its index.",
        "key index",
        list::LIndex
    ),
    spec!(
        "linsert",
        5,
        [WRITE, DENYOOM],
        (1, 1, 1),
        "list",
        "2.2.0",
        "Insert an element before or after another element in a list.",
        "key BEFORE|AFTER pivot element",
        list::LInsert
    ),
    spec!(
        "llen",
        2,
        [READONLY, FAST],
        (1, 1, 1),
        "list",
        "1.0.0",
        "Get the length of a list.",
        "key",
        card::LLen
    ),
    spec!(
        "lmove",
        5,
        [WRITE, DENYOOM],
        (1, 2, 1),
        "list",
        "6.2.0",
        "Pop an element from a list, push it to another list and return it.",
        "source destination LEFT|RIGHT LEFT|RIGHT",
        list::LMove
    ),
    spec!(
        "lpop",
        -2,
        [WRITE, FAST],
        (1, 1, 1),
        "list",
        "1.0.0",
        "Remove and get the first elements in a list.",
        "key [count]",
        list::LPop
    ),
    spec!(
        "lpos",
        -3,
        [READONLY],
        (1, 1, 1),
        "list",
        "6.0.6",
        "Return the index of matching elements on a list.",
        "key element [RANK rank] [COUNT num-matches] [MAXLEN len]",
        list::LPos
    ),
    spec!(
        "lpush",
        -3,
        [WRITE, DENYOOM, FAST],
        (1, 1, 1),
        "list",
        "1.0.0",
        "Prepend one or multiple elements to a list.",
        "key element [element ...]",
        list::LPush
    ),
    spec!(
        "lpushx",
        -3,
        [WRITE, DENYOOM, FAST],
        (1, 1, 1),
        "list",
        "2.2.0",
        "Prepend an element to a list, only if the list exists.",
        "key element [element ...]",
        list::LPushX
    ),
    spec!(
        "lrange",
        4,
        [READONLY],
        (1, 1, 1),
        "list",
        "1.0.0",
        "Get a range of elements from a list.",
        "key start stop",
        list::LRange
    ),
    spec!(
        "lrem",
        4,
        [WRITE],
        (1, 1, 1),
        "list",
        "1.0.0",
        "Remove elements from a list.",
        "key count element",
        list::LRem
    ),
    spec!(
        "lset",
        4,
        [WRITE, DENYOOM],
        (1, 1, 1),
        "list",
        "1.0.0",
        "Set the value of an element in a list by its index.",
        "key index element",
        list::LSet
    ),
    spec!(
        "ltrim",
        4,
        [WRITE],
        (1, 1, 1),
        "list",
        "1.0.0",
        "Trim a list to the specified range.",
        "key start stop",
        list::LTrim
    ),
    spec!(
        "mget",
        -2,
        [READONLY, FAST],
        (1, -1, 1),
        "string",
        "1.0.0",
        "Atomically returns the string values of one or more keys.",
        "key [key ...]",
        mget::MGet
    ),
    spec!(
        "mset",
        -3,
        [WRITE, DENYOOM],
        (1, -1, 2),
        "string",
        "1.0.1",
        "Set multiple keys to multiple values.",
        "key value [key value ...]",
        mset::MSetCmd
    ),
    spec!(
        "msetnx",
        -3,
        [WRITE, DENYOOM],
        (1, -1, 2),
        "string",
        "1.0.1",
        "Set multiple keys to multiple values, only if none of the keys exist.",
        "key value [key value ...]",
        mset::MSetNx
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
        "object",
        -2,
        [],
        (0, 0, 0),
        "keyspace",
        "2.2.3",
        "A container for object introspection commands.",
        "",
        keys::Object
    ),
    spec!(
        "persist",
        2,
        [WRITE, FAST],
        (1, 1, 1),
        "keyspace",
        "2.2.0",
        "Removes the expiration time of a key.",
        "key",
        keytype::Persist
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
        "pexpireat",
        -3,
        [WRITE, FAST],
        (1, 1, 1),
        "keyspace",
        "2.6.0",
        "Sets the expiration time of a key to a Unix milliseconds timestamp.",
        "key unix-time-milliseconds [NX|XX|GT|LT]",
        expire::PExpireAt
    ),
    spec!(
        "pexpiretime",
        2,
        [READONLY, FAST],
        (1, 1, 1),
        "keyspace",
        "7.0.0",
        "Returns the expiration time of a key as a Unix milliseconds timestamp.",
        "key",
        ttl::PExpireTime
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
        "psetex",
        4,
        [WRITE, DENYOOM],
        (1, 1, 1),
        "string",
        "2.6.0",
        "Sets both string value and expiration time in milliseconds of a key. The key is created if it doesn't exist.",
        "key milliseconds value",
        setex::PSetEx
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
        "randomkey",
        1,
        [READONLY],
        (0, 0, 0),
        "keyspace",
        "1.0.0",
        "Return a random key from the keyspace.",
        "",
        keys::RandomKey
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
        "rename",
        3,
        [WRITE],
        (1, 2, 1),
        "keyspace",
        "1.0.0",
        "Rename a key.",
        "key newkey",
        keys::RenameCmd
    ),
    spec!(
        "renamenx",
        3,
        [WRITE, FAST],
        (1, 2, 1),
        "keyspace",
        "1.0.0",
        "Rename a key, only if the new key does not exist.",
        "key newkey",
        keys::RenameNx
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
        "rl.acquire",
        4,
        [WRITE, DENYOOM, FAST],
        (1, 1, 1),
        "ratelimit",
        "0.1.0",
        "Takes an in-flight lease if fewer than max are held.",
        "key max ttl",
        rl_lease::RlAcquire
    ),
    spec!(
        "rl.allow",
        -1,
        [WRITE, DENYOOM],
        (0, 0, 0),
        "ratelimit",
        "0.1.0",
        "Checks a request under every rule whose scope, tier and route apply to it, all or nothing.",
        "[USER id] [IP addr] [KEY apikey] [TIER name] [ENDPOINT path] [COST cost] [RULES count name ...] [DRY]",
        rl_allow::RlAllow
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
        "rl.lease",
        -8,
        [WRITE, DENYOOM, FAST],
        (1, 1, 1),
        "ratelimit",
        "0.1.0",
        "Takes tokens for a gateway to admit, and takes back what it did not use.",
        "key limit period HOLDER holder WANT want [USED lease_id count] [TTL ttl] [BURST burst] [ALGO algo]",
        rl_lease_tokens::RlLease
    ),
    spec!(
        "rl.rates",
        1,
        [ADMIN, NOSCRIPT, LOADING, STALE],
        (0, 0, 0),
        "ratelimit",
        "0.1.0",
        "Returns each rule's allowed, denied and shadow-denied checks in 10 s steps over 15 minutes.",
        "",
        rl_top::RlRates
    ),
    spec!(
        "rl.region",
        -2,
        [NOSCRIPT, LOADING, STALE],
        (0, 0, 0),
        "ratelimit",
        "0.1.0",
        "Shows how this region shares its GLOBAL rules with the other regions.",
        "INFO",
        rl_region::RlRegion
    ),
    spec!(
        "rl.release",
        3,
        [WRITE, FAST],
        (1, 1, 1),
        "ratelimit",
        "0.1.0",
        "Ends an in-flight lease.",
        "key lease_id",
        rl_lease::RlRelease
    ),
    spec!(
        "rl.renew",
        4,
        [WRITE, FAST],
        (1, 1, 1),
        "ratelimit",
        "0.1.0",
        "Extends an in-flight lease to expire ttl from now.",
        "key lease_id ttl",
        rl_lease::RlRenew
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
        "rl.settle",
        -6,
        [WRITE, DENYOOM, FAST],
        (1, 1, 1),
        "ratelimit",
        "0.1.0",
        "Corrects a check of an estimated cost by the actual cost.",
        "key limit period reserved actual [BURST burst] [ALGO algo]",
        rl_settle::RlSettle
    ),
    spec!(
        "rl.top",
        -1,
        [ADMIN, NOSCRIPT, LOADING, STALE],
        (0, 0, 0),
        "ratelimit",
        "0.1.0",
        "Returns the keys denied or allowed most in the last minute or 15 minutes.",
        "[DENIED|ALLOWED] [COUNT count] [RULE name] [WINDOW 1m|15m]",
        rl_top::RlTop
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
        "rpop",
        -2,
        [WRITE, FAST],
        (1, 1, 1),
        "list",
        "1.0.0",
        "Remove and get the last elements in a list.",
        "key [count]",
        list::RPop
    ),
    spec!(
        "rpoplpush",
        3,
        [WRITE, DENYOOM],
        (1, 2, 1),
        "list",
        "1.2.0",
        "Remove the last element in a list, prepend it to another list and return it.",
        "source destination",
        list::RPopLPush
    ),
    spec!(
        "rpush",
        -3,
        [WRITE, DENYOOM, FAST],
        (1, 1, 1),
        "list",
        "1.0.0",
        "Append one or multiple elements to a list.",
        "key element [element ...]",
        list::RPush
    ),
    spec!(
        "rpushx",
        -3,
        [WRITE, DENYOOM, FAST],
        (1, 1, 1),
        "list",
        "2.2.0",
        "Append an element to a list, only if the list exists.",
        "key element [element ...]",
        list::RPushX
    ),
    spec!(
        "sadd",
        -3,
        [WRITE, DENYOOM, FAST],
        (1, 1, 1),
        "set",
        "1.0.0",
        "Add one or more members to a set.",
        "key member [member ...]",
        sets::SAdd
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
        "scan",
        -2,
        [READONLY],
        (0, 0, 0),
        "keyspace",
        "2.8.0",
        "Incrementally iterate the keys space.",
        "cursor [MATCH pattern] [COUNT count] [TYPE type]",
        keys::Scan
    ),
    spec!(
        "scard",
        2,
        [READONLY, FAST],
        (1, 1, 1),
        "set",
        "1.0.0",
        "Get the number of members in a set.",
        "key",
        card::SCard
    ),
    spec!(
        "script",
        -2,
        [NOSCRIPT],
        (0, 0, 0),
        "scripting",
        "2.6.0",
        "A container for Lua scripts management commands.",
        "subcommand [argument ...]",
        script::ScriptCmd
    ),
    spec!(
        "sdiff",
        -2,
        [READONLY],
        (1, -1, 1),
        "set",
        "1.0.0",
        "Subtract multiple sets.",
        "key [key ...]",
        sets::SDiff
    ),
    spec!(
        "sdiffstore",
        -3,
        [WRITE, DENYOOM],
        (1, -1, 1),
        "set",
        "1.0.0",
        "Subtract multiple sets and store the resulting set in a key.",
        "destination key [key ...]",
        sets::SDiffStore
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
        "key value [NX|XX] [GET] [EX seconds|PX milliseconds|EXAT unix-time-seconds|PXAT unix-time-milliseconds|KEEPTTL]",
        set::Set
    ),
    spec!(
        "setex",
        4,
        [WRITE, DENYOOM],
        (1, 1, 1),
        "string",
        "2.0.0",
        "Sets the string value and expiration time of a key. Creates the key if it doesn't exist.",
        "key seconds value",
        setex::SetExSecs
    ),
    spec!(
        "setnx",
        3,
        [WRITE, DENYOOM, FAST],
        (1, 1, 1),
        "string",
        "1.0.0",
        "Set the string value of a key only when the key doesn't exist.",
        "key value",
        setex::SetNx
    ),
    spec!(
        "setrange",
        4,
        [WRITE, DENYOOM],
        (1, 1, 1),
        "string",
        "2.2.0",
        "Overwrites a part of a string value with another by an offset. Creates the key if it doesn't exist.",
        "key offset value",
        getrange::SetRange
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
        "sinter",
        -2,
        [READONLY],
        (1, -1, 1),
        "set",
        "1.0.0",
        "Intersect multiple sets.",
        "key [key ...]",
        sets::SInter
    ),
    spec!(
        "sinterstore",
        -3,
        [WRITE, DENYOOM],
        (1, -1, 1),
        "set",
        "1.0.0",
        "Intersect multiple sets and store the resulting set in a key.",
        "destination key [key ...]",
        sets::SInterStore
    ),
    spec!(
        "sismember",
        3,
        [READONLY, FAST],
        (1, 1, 1),
        "set",
        "1.0.0",
        "Determine if a given value is a member of a set.",
        "key member",
        sets::SIsMemberCmd
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
        "slowlog",
        -2,
        [ADMIN, LOADING, STALE],
        (0, 0, 0),
        "server",
        "2.2.12",
        "A container for slow log commands.",
        "subcommand [argument ...]",
        slowlog::SlowLog
    ),
    spec!(
        "smembers",
        2,
        [READONLY],
        (1, 1, 1),
        "set",
        "1.0.0",
        "Get all the members in a set.",
        "key",
        sets::SMembers
    ),
    spec!(
        "smismember",
        -3,
        [READONLY, FAST],
        (1, 1, 1),
        "set",
        "6.2.0",
        "Returns the membership associated with the given elements for a set.",
        "key member [member ...]",
        sets::SMIsMember
    ),
    spec!(
        "smove",
        4,
        [WRITE, FAST],
        (1, 2, 1),
        "set",
        "1.0.0",
        "Move a member from one set to another.",
        "source destination member",
        sets::SMove
    ),
    spec!(
        "spop",
        -2,
        [WRITE, FAST],
        (1, 1, 1),
        "set",
        "1.0.0",
        "Remove and return one or multiple random members from a set.",
        "key [count]",
        sets::SPop
    ),
    spec!(
        "srandmember",
        -2,
        [READONLY],
        (1, 1, 1),
        "set",
        "1.0.0",
        "Get one or multiple random members from a set.",
        "key [count]",
        sets::SRandMember
    ),
    spec!(
        "srem",
        -3,
        [WRITE, FAST],
        (1, 1, 1),
        "set",
        "1.0.0",
        "Remove one or more members from a set.",
        "key member [member ...]",
        sets::SRem
    ),
    spec!(
        "sscan",
        -3,
        [READONLY],
        (1, 1, 1),
        "set",
        "2.8.0",
        "Incrementally iterate Set elements.",
        "key cursor [MATCH pattern] [COUNT count]",
        scan::SScan
    ),
    spec!(
        "strlen",
        2,
        [READONLY, FAST],
        (1, 1, 1),
        "string",
        "2.2.0",
        "Returns the length of a string value.",
        "key",
        append::StrLen
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
        "sunion",
        -2,
        [READONLY],
        (1, -1, 1),
        "set",
        "1.0.0",
        "Add multiple sets.",
        "key [key ...]",
        sets::SUnion
    ),
    spec!(
        "sunionstore",
        -3,
        [WRITE, DENYOOM],
        (1, -1, 1),
        "set",
        "1.0.0",
        "Add multiple sets and store the resulting set in a key.",
        "destination key [key ...]",
        sets::SUnionStore
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
        "touch",
        -2,
        [READONLY, FAST],
        (1, -1, 1),
        "keyspace",
        "3.2.1",
        "Returns the number of existing keys out of those specified after updating the time they were last accessed.",
        "key [key ...]",
        exists::Exists
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
        "type",
        2,
        [READONLY, FAST],
        (1, 1, 1),
        "keyspace",
        "1.0.0",
        "Determines the type of value stored at a key.",
        "key",
        keytype::Type
    ),
    spec!(
        "unlink",
        -2,
        [WRITE, FAST],
        (1, -1, 1),
        "keyspace",
        "4.0.0",
        "Asynchronously deletes one or more keys.",
        "key [key ...]",
        del::Del
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
        "unwatch",
        1,
        [NOSCRIPT, LOADING, STALE, FAST],
        (0, 0, 0),
        "transactions",
        "2.2.0",
        "Forget about all watched keys.",
        "",
        watch::Unwatch
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
    spec!(
        "watch",
        -2,
        [NOSCRIPT, LOADING, STALE, FAST],
        (1, -1, 1),
        "transactions",
        "2.2.0",
        "Watch the given keys to determine execution of the MULTI/EXEC block.",
        "key [key ...]",
        watch::Watch
    ),
    spec!(
        "zadd",
        -4,
        [WRITE, DENYOOM, FAST],
        (1, 1, 1),
        "sorted-set",
        "1.2.0",
        "Add one or more members to a sorted set, or update its score if it already exists.",
        "key [NX|XX] [GT|LT] [CH] [INCR] score member [score member ...]",
        zset::ZAdd
    ),
    spec!(
        "zcard",
        2,
        [READONLY, FAST],
        (1, 1, 1),
        "sorted-set",
        "1.2.0",
        "Get the number of members in a sorted set.",
        "key",
        card::ZCard
    ),
    spec!(
        "zcount",
        4,
        [READONLY, FAST],
        (1, 1, 1),
        "sorted-set",
        "2.0.0",
        "Count the members in a sorted set with scores within the given values.",
        "key min max",
        zrange::ZCountCmd
    ),
    spec!(
        "zincrby",
        4,
        [WRITE, DENYOOM, FAST],
        (1, 1, 1),
        "sorted-set",
        "1.2.0",
        "Increment the score of a member in a sorted set.",
        "key increment member",
        zset::ZIncrBy
    ),
    spec!(
        "zlexcount",
        4,
        [READONLY, FAST],
        (1, 1, 1),
        "sorted-set",
        "2.8.9",
        "Count the number of members in a sorted set between a given lexicographical range.",
        "key min max",
        zrange::ZLexCount
    ),
    spec!(
        "zmscore",
        -3,
        [READONLY, FAST],
        (1, 1, 1),
        "sorted-set",
        "6.2.0",
        "Get the score associated with the given members in a sorted set.",
        "key member [member ...]",
        zset::ZMScore
    ),
    spec!(
        "zpopmax",
        -2,
        [WRITE, FAST],
        (1, 1, 1),
        "sorted-set",
        "5.0.0",
        "Remove and return members with the highest scores in a sorted set.",
        "key [count]",
        zset::ZPopMax
    ),
    spec!(
        "zpopmin",
        -2,
        [WRITE, FAST],
        (1, 1, 1),
        "sorted-set",
        "5.0.0",
        "Remove and return members with the lowest scores in a sorted set.",
        "key [count]",
        zset::ZPopMin
    ),
    spec!(
        "zrandmember",
        -2,
        [READONLY],
        (1, 1, 1),
        "sorted-set",
        "6.2.0",
        "Get one or multiple random elements from a sorted set.",
        "key [count [WITHSCORES]]",
        zset::ZRandMember
    ),
    spec!(
        "zrange",
        -4,
        [READONLY],
        (1, 1, 1),
        "sorted-set",
        "1.2.0",
        "Return a range of members in a sorted set.",
        "key start stop [BYSCORE|BYLEX] [REV] [LIMIT offset count] [WITHSCORES]",
        zrange::ZRange
    ),
    spec!(
        "zrangebylex",
        -4,
        [READONLY],
        (1, 1, 1),
        "sorted-set",
        "2.8.9",
        "Return a range of members in a sorted set, by lexicographical range.",
        "key min max [LIMIT offset count]",
        zrange::ZRangeByLex
    ),
    spec!(
        "zrangebyscore",
        -4,
        [READONLY],
        (1, 1, 1),
        "sorted-set",
        "1.0.5",
        "Return a range of members in a sorted set, by score.",
        "key min max [WITHSCORES] [LIMIT offset count]",
        zrange::ZRangeByScore
    ),
    spec!(
        "zrangestore",
        -5,
        [WRITE, DENYOOM],
        (1, 2, 1),
        "sorted-set",
        "6.2.0",
        "Store a range of members from sorted set into another key.",
        "dst src min max [BYSCORE|BYLEX] [REV] [LIMIT offset count]",
        zrange::ZRangeStore
    ),
    spec!(
        "zrank",
        -3,
        [READONLY, FAST],
        (1, 1, 1),
        "sorted-set",
        "2.0.0",
        "Determine the index of a member in a sorted set.",
        "key member",
        zset::ZRankCmd
    ),
    spec!(
        "zrem",
        -3,
        [WRITE, FAST],
        (1, 1, 1),
        "sorted-set",
        "1.2.0",
        "Remove one or more members from a sorted set.",
        "key member [member ...]",
        zset::ZRem
    ),
    spec!(
        "zremrangebylex",
        4,
        [WRITE],
        (1, 1, 1),
        "sorted-set",
        "2.8.9",
        "Remove all members in a sorted set between the given lexicographical range.",
        "key min max",
        zrange::ZRemRangeByLex
    ),
    spec!(
        "zremrangebyrank",
        4,
        [WRITE],
        (1, 1, 1),
        "sorted-set",
        "2.0.0",
        "Remove all members in a sorted set within the given indexes.",
        "key start stop",
        zrange::ZRemRangeByRank
    ),
    spec!(
        "zremrangebyscore",
        4,
        [WRITE],
        (1, 1, 1),
        "sorted-set",
        "1.2.0",
        "Remove all members in a sorted set within the given scores.",
        "key min max",
        zrange::ZRemRangeByScore
    ),
    spec!(
        "zrevrange",
        -4,
        [READONLY],
        (1, 1, 1),
        "sorted-set",
        "1.2.0",
        "Return a range of members in a sorted set, by index, with scores ordered from high to low.",
        "key start stop [WITHSCORES]",
        zrange::ZRevRange
    ),
    spec!(
        "zrevrangebylex",
        -4,
        [READONLY],
        (1, 1, 1),
        "sorted-set",
        "2.8.9",
        "Return a range of members in a sorted set, by lexicographical range, ordered from higher to lower strings.",
        "key max min [LIMIT offset count]",
        zrange::ZRevRangeByLex
    ),
    spec!(
        "zrevrangebyscore",
        -4,
        [READONLY],
        (1, 1, 1),
        "sorted-set",
        "2.2.0",
        "Return a range of members in a sorted set, by score, with scores ordered from high to low.",
        "key max min [WITHSCORES] [LIMIT offset count]",
        zrange::ZRevRangeByScore
    ),
    spec!(
        "zrevrank",
        -3,
        [READONLY, FAST],
        (1, 1, 1),
        "sorted-set",
        "2.0.0",
        "Determine the index of a member in a sorted set, with scores ordered from high to low.",
        "key member",
        zset::ZRevRank
    ),
    spec!(
        "zscan",
        -3,
        [READONLY],
        (1, 1, 1),
        "sorted-set",
        "2.8.0",
        "Incrementally iterate sorted sets elements and associated scores.",
        "key cursor [MATCH pattern] [COUNT count]",
        scan::ZScan
    ),
    spec!(
        "zscore",
        3,
        [READONLY, FAST],
        (1, 1, 1),
        "sorted-set",
        "1.2.0",
        "Get the score associated with the given member in a sorted set.",
        "key member",
        zset::ZScoreCmd
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
    let first = *lower.first()?;
    BY_LENGTH_AND_FIRST[bucket(lower.len(), first)]
        .iter()
        .map(|&i| &COMMANDS[usize::from(i)])
        .find(|c| c.name.as_bytes() == lower)
}

/// The table's rows by name length (up to 31) and first byte (its low five bits): a name is
/// compared with the one to three rows of its bucket, not searched for among all (a script's
/// `redis.call` looks each command up by name).
static BY_LENGTH_AND_FIRST: LazyLock<Vec<Vec<u16>>> = LazyLock::new(|| {
    let mut buckets = vec![Vec::new(); 32 * 32];
    for (i, c) in COMMANDS.iter().enumerate() {
        if let Some(&first) = c.name.as_bytes().first() {
            buckets[bucket(c.name.len(), first)].push(i as u16);
        }
    }
    buckets
});

fn bucket(len: usize, first: u8) -> usize {
    len.min(31) * 32 + usize::from(first & 31)
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
}
