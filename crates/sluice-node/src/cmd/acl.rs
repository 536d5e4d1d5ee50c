//! `ACL SETUSER|GETUSER|DELUSER|USERS|LIST|WHOAMI|CAT|LOAD|SAVE` — ACL users (see `acl`), and
//! the command catalog their rules name.
//!
//! # Format
//! - `ACL SETUSER name [rule ...]` → `+OK`. Rules: `on` `off` `>pass` `<pass` `#sha256`
//!   `!sha256` `nopass` `resetpass` `reset` `allcommands` `nocommands` `+@cat` `-@cat` `+cmd`
//!   `-cmd` `+cmd|sub` `-cmd|sub`; keys `~pattern` `%R~pattern` `%W~pattern` `~*` `allkeys`
//!   `resetkeys` (see `acl::keys`); `&*`, `allchannels` are accepted (channels are never
//!   restricted: any other channel pattern is an error).
//! - `ACL GETUSER name` → a map: `flags`, `passwords` (SHA-256 hex), `commands`, `keys`,
//!   `channels`; nil if there is no such user.
//! - `ACL DELUSER name [name ...]` → `:removed`. `ACL USERS` → the names. `ACL LIST` → one
//!   `user ...` line per user. `ACL WHOAMI` → this connection's user.
//! - `ACL CAT` → the categories; `ACL CAT category` → its commands.
//! - `ACL LOAD` / `ACL SAVE` → `+OK`, with `--aclfile`.
//! - `ACL LOG [count]` → the newest refusals first, each a map: `count`, `reason` (`command`,
//!   `key`, `auth`), `context`, `object`, `username`, `age-seconds`, `client-info`,
//!   `entry-id`, `timestamp-created`, `timestamp-last-updated`. `ACL LOG RESET` → `+OK`.
//! - `ACL GENPASS [bits]` → `bits` (default 256, at most 4096) random bits as lower-case hex.
//!
//! # Categories
//! - `@ratelimit`: the checks a gateway makes (RL.CHECK, RL.HIT, RL.HITS, RL.ALLOW,
//!   CL.THROTTLE, GCRA), the leases and settlements a gateway takes and corrects for its own
//!   requests (RL.ACQUIRE, RL.RELEASE, RL.RENEW, RL.SETTLE, RL.LEASE: each touches only the
//!   key it names, as a check does), and the rules read-only (RL.RULE GET, LIST, HISTORY).
//! - `@connection`: what a client sends to connect and stay connected: PING, ECHO, SELECT,
//!   COMMAND, AUTH, HELLO, QUIT, RESET, and CLIENT's own-connection subcommands (SETNAME,
//!   GETNAME, SETINFO, ID, INFO, HELP).
//! - `@admin`: every other command (FLUSHALL, REPLICAOF, ...), and the subcommands Redis 7
//!   marks admin (CONFIG GET and SET, CLIENT LIST and KILL, ACL SETUSER and LOG, SLOWLOG GET
//!   ...), the rule writes (RL.RULE SET, DEL, ROLLBACK) and the cluster's own steps.
//! - `@read`, `@write`, `@fast`: by the commands' flags.
//!
//! A command with subcommands is judged by its subcommand (see `acl`): `+@all -@admin` still
//! runs CLIENT ID, ACL WHOAMI and CONFIG HELP, as in Redis; `-rl.rule|set` refuses RL.RULE SET
//! whatever else grants RL.RULE.
//!
//! AUTH, HELLO, QUIT and RESET (Redis's `no-auth` commands) are allowed to every user.

use sluice_resp::reply;

use super::table::flag::{self, FAST, NOAUTH, READONLY};
use super::table::{COMMANDS, CommandSpec};
use super::{Args, CmdError, Command, Ctx};
use crate::acl::category::{
    ADMIN, BLOCKING, CONNECTION, HASH, KEYSPACE, LIST, RATELIMIT, READ, SCRIPTING, SET, SLOW,
    SORTEDSET, STRING, TRANSACTION, WRITE,
};
use crate::acl::{CATEGORIES, Catalog, Category, category};

/// The commands of `@ratelimit`, by name (a name not in the table is skipped).
const RATELIMIT_COMMANDS: &[&str] = &[
    "rl.check",
    "rl.hit",
    "rl.hits",
    "rl.allow",
    "cl.throttle",
    "gcra",
    "rl.acquire",
    "rl.release",
    "rl.renew",
    "rl.settle",
    "rl.lease",
];

/// The commands of `@connection`.
const CONNECTION_COMMANDS: &[&str] = &[
    "ping", "echo", "select", "command", "auth", "hello", "quit", "reset",
];

/// Every subcommand a rule may name, with its categories: Redis 7's `@admin` and
/// `@connection` marks (from `COMMAND INFO` of redis-server 7.0), the read-only rule
/// subcommands `@ratelimit` and `@read`, the rule writes `@admin` and `@write`. The cluster's
/// own steps (tables and slot migration, for the admin tool and peers) are `@admin`.
///
/// A call is judged by its subcommand's bit (see `acl`), so this list holds every subcommand
/// the commands' parsers accept: one left out would be judged by its parent's bit, which
/// `-@admin` does not clear.
const SUBCOMMANDS: &[(&str, &str, Category)] = &[
    ("acl", "cat", 0),
    ("acl", "deluser", ADMIN),
    ("acl", "genpass", 0),
    ("acl", "getuser", ADMIN),
    ("acl", "list", ADMIN),
    ("acl", "load", ADMIN),
    ("acl", "log", ADMIN),
    ("acl", "save", ADMIN),
    ("acl", "setuser", ADMIN),
    ("acl", "users", ADMIN),
    ("acl", "whoami", 0),
    ("client", "getname", CONNECTION),
    ("client", "help", CONNECTION),
    ("client", "id", CONNECTION),
    ("client", "info", CONNECTION),
    ("client", "kill", ADMIN | CONNECTION),
    ("client", "list", ADMIN | CONNECTION),
    ("client", "setinfo", CONNECTION),
    ("client", "setname", CONNECTION),
    ("cluster", "countkeysinslot", 0),
    ("cluster", "getkeysinslot", 0),
    ("cluster", "gettable", ADMIN),
    ("cluster", "help", 0),
    ("cluster", "import", ADMIN),
    ("cluster", "import-status", ADMIN),
    ("cluster", "info", 0),
    ("cluster", "keyslot", 0),
    ("cluster", "migrate-cancel", ADMIN),
    ("cluster", "migrate-feed", ADMIN),
    ("cluster", "migrate-status", ADMIN),
    ("cluster", "myid", 0),
    ("cluster", "nodes", 0),
    ("cluster", "pause", ADMIN),
    ("cluster", "settable", ADMIN),
    ("cluster", "shards", 0),
    ("cluster", "slots", 0),
    ("cluster", "unpause", ADMIN),
    ("command", "count", CONNECTION),
    ("command", "docs", CONNECTION),
    ("command", "info", CONNECTION),
    ("command", "list", CONNECTION),
    ("object", "encoding", KEYSPACE | READ | SLOW),
    ("object", "freq", KEYSPACE | READ | SLOW),
    ("object", "help", KEYSPACE | SLOW),
    ("object", "idletime", KEYSPACE | READ | SLOW),
    ("object", "refcount", KEYSPACE | READ | SLOW),
    ("config", "get", ADMIN),
    ("config", "help", 0),
    ("config", "resetstat", ADMIN),
    ("config", "rewrite", ADMIN),
    ("config", "set", ADMIN),
    ("rl.rule", "del", ADMIN | WRITE),
    ("rl.rule", "get", RATELIMIT | READ),
    ("rl.rule", "history", RATELIMIT | READ),
    ("rl.rule", "list", RATELIMIT | READ),
    ("rl.rule", "rollback", ADMIN | WRITE),
    ("rl.rule", "set", ADMIN | WRITE),
    ("script", "exists", SCRIPTING),
    ("script", "flush", SCRIPTING),
    ("script", "help", SCRIPTING),
    ("script", "kill", SCRIPTING),
    ("script", "load", SCRIPTING),
    ("slowlog", "get", ADMIN),
    ("slowlog", "help", 0),
    ("slowlog", "len", ADMIN),
    ("slowlog", "reset", ADMIN),
];

/// The command table as ACL rules name it: each row's id is its row, then one id per
/// subcommand. A command with subcommands has no category of its own (its own bit judges only
/// a call without a subcommand), but for COMMAND, `@connection` as in Redis.
pub fn acl_catalog() -> Catalog {
    let mut catalog = Catalog::default();
    for spec in COMMANDS {
        let has_subcommands = SUBCOMMANDS.iter().any(|(c, _, _)| *c == spec.name);
        let kind = if CONNECTION_COMMANDS.contains(&spec.name) {
            CONNECTION
        } else if has_subcommands {
            0
        } else if RATELIMIT_COMMANDS.contains(&spec.name) {
            RATELIMIT
        } else {
            // The data commands are in their type's category, as in Redis; the rest admin.
            match spec.group {
                "string" => STRING,
                "keyspace" => KEYSPACE,
                "list" => LIST,
                "hash" => HASH,
                "set" => SET,
                "sorted-set" => SORTEDSET,
                "transactions" => TRANSACTION,
                "scripting" => SCRIPTING,
                _ => ADMIN,
            }
        };
        catalog.add(
            spec.name,
            kind | flag_categories(spec),
            spec.has_flag(NOAUTH),
        );
    }
    for &(command, sub, categories) in SUBCOMMANDS {
        if let Some(parent) = catalog.id(command) {
            catalog.add_subcommand(parent, sub, categories);
        }
    }
    catalog
}

fn flag_categories(spec: &CommandSpec) -> Category {
    let mut c = 0;
    if spec.write {
        c |= WRITE;
    }
    // As Redis: a read-only script command (EVAL_RO) is not in `@read`.
    if spec.has_flag(READONLY) && spec.group != "scripting" {
        c |= READ;
    }
    if spec.has_flag(flag::BLOCKING) {
        c |= BLOCKING;
    }
    if spec.has_flag(FAST) {
        c |= category::FAST;
    } else {
        // Redis's implicit category: every command not fast is slow.
        c |= SLOW;
    }
    c
}

/// Redis's refusal of a command (or `command|subcommand`) the user may not run.
pub fn noperm(name: &str) -> String {
    format!("NOPERM this user has no permissions to run the '{name}' command")
}

#[derive(Debug)]
pub enum AclCmd<'a> {
    SetUser(&'a str, Vec<&'a [u8]>),
    GetUser(&'a [u8]),
    DelUser(Vec<&'a str>),
    Users,
    List,
    WhoAmI,
    Cat(Option<&'a [u8]>),
    Load,
    Save,
    Log(LogArg),
    GenPass(usize),
}

#[derive(Debug)]
pub enum LogArg {
    Show(Option<usize>),
    Reset,
}

fn text(arg: &[u8]) -> Result<&str, CmdError> {
    std::str::from_utf8(arg)
        .map_err(|_| CmdError::msg("ERR Usernames can't contain spaces or null characters"))
}

impl<'a> Command<'a> for AclCmd<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let sub = args.key()?.to_ascii_uppercase();
        let cmd = match sub.as_slice() {
            b"SETUSER" => AclCmd::SetUser(text(args.key()?)?, args.rest().collect()),
            b"GETUSER" => AclCmd::GetUser(args.key()?),
            b"DELUSER" => {
                let first = text(args.key()?)?;
                let mut names = vec![first];
                for n in args.rest() {
                    names.push(text(n)?);
                }
                AclCmd::DelUser(names)
            }
            b"USERS" => AclCmd::Users,
            b"LIST" => AclCmd::List,
            b"WHOAMI" => AclCmd::WhoAmI,
            b"CAT" => AclCmd::Cat(args.next()),
            b"LOAD" => AclCmd::Load,
            b"SAVE" => AclCmd::Save,
            b"LOG" => AclCmd::Log(log_arg(args.next())?),
            b"GENPASS" => AclCmd::GenPass(genpass_bits(args.next())?),
            _ => {
                return Err(CmdError::msg(format!(
                    "ERR unknown subcommand '{}'. Try ACL SETUSER|GETUSER|DELUSER|USERS|LIST|WHOAMI|CAT|LOAD|SAVE|LOG|GENPASS.",
                    String::from_utf8_lossy(&sub)
                )));
            }
        };
        args.finish()?;
        Ok(cmd)
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let acl = &ctx.shared.acl;
        let out = &mut *ctx.out;
        match self {
            AclCmd::SetUser(name, rules) => {
                acl.set_user(name, &rules)
                    .map_err(|e| CmdError::msg(format!("ERR {e}")))?;
                reply::simple(out, "OK");
            }
            AclCmd::GetUser(name) => get_user(ctx, name),
            AclCmd::DelUser(names) => {
                let n = acl
                    .del_users(&names)
                    .map_err(|e| CmdError::msg(format!("ERR {e}")))?;
                // As Redis: the removed users' connections are closed.
                ctx.shared
                    .clients
                    .kill_where(|c| names.contains(&c.user.lock().as_str()));
                reply::integer(out, n as i64);
            }
            AclCmd::Users => {
                let users = acl.users();
                reply::array(out, users.len());
                for u in users {
                    reply::bulk(out, u.name.as_bytes());
                }
            }
            AclCmd::List => {
                let users = acl.users();
                reply::array(out, users.len());
                for u in users {
                    reply::bulk(out, u.describe().as_bytes());
                }
            }
            AclCmd::WhoAmI => reply::bulk(out, ctx.session.user.name.as_bytes()),
            AclCmd::Cat(category) => cat(ctx, category)?,
            AclCmd::Load => load(ctx)?,
            AclCmd::Save => {
                let path = aclfile(ctx.shared)?;
                crate::acl::save_file(acl, &path).map_err(|e| CmdError::msg(format!("ERR {e}")))?;
                reply::simple(out, "OK");
            }
            AclCmd::Log(LogArg::Reset) => {
                acl.log.reset();
                reply::simple(out, "OK");
            }
            AclCmd::Log(LogArg::Show(count)) => show_log(ctx, count),
            AclCmd::GenPass(bits) => reply::bulk(out, genpass(bits)?.as_bytes()),
        }
        Ok(())
    }
}

fn aclfile(shared: &crate::shared::Shared) -> Result<std::path::PathBuf, CmdError> {
    shared.acl.file.clone().ok_or_else(|| {
        CmdError::msg("ERR This Sluice instance is not configured to use an ACL file (--aclfile).")
    })
}

fn load(ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
    let path = aclfile(ctx.shared)?;
    let requirepass = ctx.shared.requirepass.read().clone();
    crate::acl::load_file(&ctx.shared.acl, &path, requirepass.as_deref())
        .map_err(|e| CmdError::msg(format!("ERR {e}")))?;
    // The connections of users the file no longer has are closed, as by ACL DELUSER.
    let users: Vec<String> = ctx
        .shared
        .acl
        .users()
        .iter()
        .map(|u| u.name.clone())
        .collect();
    ctx.shared
        .clients
        .kill_where(|c| !users.contains(&*c.user.lock()));
    reply::simple(ctx.out, "OK");
    Ok(())
}

fn get_user(ctx: &mut Ctx<'_>, name: &[u8]) {
    let p = ctx.session.proto;
    let out = &mut *ctx.out;
    let Some(user) = std::str::from_utf8(name)
        .ok()
        .and_then(|n| ctx.shared.acl.get(n))
    else {
        return reply::null(out, p);
    };
    let perms = user.perms();
    reply::map(out, p, 5);
    reply::bulk(out, b"flags");
    let flags = perms.flags();
    reply::array(out, flags.len());
    for f in flags {
        reply::bulk(out, f.as_bytes());
    }
    reply::bulk(out, b"passwords");
    let hashes = perms.password_hashes();
    reply::array(out, hashes.len());
    for h in hashes {
        reply::bulk(out, h.as_bytes());
    }
    reply::bulk(out, b"commands");
    reply::bulk(out, perms.command_rules().as_bytes());
    reply::bulk(out, b"keys");
    reply::bulk(out, perms.keys.describe().as_bytes());
    reply::bulk(out, b"channels");
    reply::bulk(out, b"&*");
}

fn cat(ctx: &mut Ctx<'_>, category: Option<&[u8]>) -> Result<(), CmdError> {
    let out = &mut *ctx.out;
    let Some(name) = category else {
        reply::array(out, CATEGORIES.len());
        for (name, _) in CATEGORIES {
            reply::bulk(out, name.as_bytes());
        }
        return Ok(());
    };
    let name = String::from_utf8_lossy(name);
    let bits = Catalog::category(&name)
        .ok_or_else(|| CmdError::msg(format!("ERR Unknown category '{name}'")))?;
    let names: Vec<&str> = ctx.shared.acl.catalog().in_category(bits).collect();
    reply::array(out, names.len());
    for n in names {
        reply::bulk(out, n.as_bytes());
    }
    Ok(())
}

fn log_arg(arg: Option<&[u8]>) -> Result<LogArg, CmdError> {
    let Some(arg) = arg else {
        return Ok(LogArg::Show(None));
    };
    if arg.eq_ignore_ascii_case(b"RESET") {
        return Ok(LogArg::Reset);
    }
    std::str::from_utf8(arg)
        .ok()
        .and_then(|t| t.parse::<usize>().ok())
        .map(|n| LogArg::Show(Some(n)))
        .ok_or_else(|| CmdError::msg("ERR value is out of range, must be positive"))
}

fn show_log(ctx: &mut Ctx<'_>, count: Option<usize>) {
    let p = ctx.session.proto;
    let out = &mut *ctx.out;
    let (entries, now_ms) = ctx.shared.acl.log.recent(count);
    reply::array(out, entries.len());
    for e in entries {
        reply::map(out, p, 10);
        reply::bulk(out, b"count");
        reply::integer(out, i64::try_from(e.count).unwrap_or(i64::MAX));
        reply::bulk(out, b"reason");
        reply::bulk(out, e.reason.name().as_bytes());
        reply::bulk(out, b"context");
        reply::bulk(out, e.context.as_bytes());
        reply::bulk(out, b"object");
        reply::bulk(out, e.object.as_bytes());
        reply::bulk(out, b"username");
        reply::bulk(out, e.username.as_bytes());
        reply::bulk(out, b"age-seconds");
        reply::double(out, p, now_ms.saturating_sub(e.created_ms) as f64 / 1000.0);
        reply::bulk(out, b"client-info");
        reply::bulk(out, e.client_info.as_bytes());
        reply::bulk(out, b"entry-id");
        reply::integer(out, i64::try_from(e.id).unwrap_or(i64::MAX));
        reply::bulk(out, b"timestamp-created");
        reply::integer(out, i64::try_from(e.created_ms).unwrap_or(i64::MAX));
        reply::bulk(out, b"timestamp-last-updated");
        reply::integer(out, i64::try_from(e.updated_ms).unwrap_or(i64::MAX));
    }
}

/// The most bits `ACL GENPASS` gives, as in Redis.
const GENPASS_MAX_BITS: usize = 4096;

fn genpass_bits(arg: Option<&[u8]>) -> Result<usize, CmdError> {
    let Some(arg) = arg else { return Ok(256) };
    std::str::from_utf8(arg)
        .ok()
        .and_then(|t| t.parse::<usize>().ok())
        .filter(|n| (1..=GENPASS_MAX_BITS).contains(n))
        .ok_or_else(|| {
            CmdError::msg(format!(
                "ERR ACL GENPASS argument must be the number of bits for the output password, a positive number up to {GENPASS_MAX_BITS}"
            ))
        })
}

/// `bits` random bits from the system's generator, as hex (rounded up to whole digits).
fn genpass(bits: usize) -> Result<String, CmdError> {
    use ring::rand::SecureRandom;
    let digits = bits.div_ceil(4);
    let mut bytes = vec![0u8; digits.div_ceil(2)];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| CmdError::msg("ERR no random bytes from the system"))?;
    let mut hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    hex.truncate(digits);
    Ok(hex)
}

#[cfg(test)]
mod tests {
    use super::super::table::flag;
    use super::*;

    /// Every data and transaction row (strings, keys, lists, hashes, sets, sorted sets, MULTI
    /// and WATCH) against `COMMAND INFO` of redis-server 7.0.15 (the fixture): arity, key
    /// positions, the flags both know, and the ACL categories both know. ZRANK and ZREVRANK
    /// take WITHSCORE as Redis 7.2 does, so their arity is 7.2's (-3).
    #[test]
    fn data_rows_match_redis() {
        let fixture = include_str!("../../../../tests/fixtures/redis-7.0.15-command-info.tsv");
        let catalog = acl_catalog();
        let known_flags = [flag::WRITE, READONLY, flag::DENYOOM, FAST];
        let mut checked = 0;
        for spec in COMMANDS.iter().filter(|s| {
            matches!(
                s.group,
                "string" | "keyspace" | "list" | "hash" | "set" | "sorted-set" | "transactions"
            )
        }) {
            let line = fixture
                .lines()
                .find(|l| l.split('\t').next() == Some(spec.name))
                .unwrap_or_else(|| panic!("{} is not in the fixture", spec.name));
            let cols: Vec<&str> = line.split('\t').collect();
            let arity = match spec.name {
                "zrank" | "zrevrank" => "3".to_owned(),
                _ => spec.arity.to_string(),
            };
            assert_eq!(cols[1], arity, "{}: arity", spec.name);
            let keys = format!("({},{},{})", spec.first_key, spec.last_key, spec.step);
            assert_eq!(cols[3], keys, "{}: key positions", spec.name);
            let theirs: Vec<&str> = cols[2]
                .split(',')
                .filter(|f| known_flags.contains(f))
                .collect();
            let ours: Vec<&str> = known_flags
                .iter()
                .copied()
                .filter(|f| spec.has_flag(f))
                .collect();
            let mut theirs_sorted = theirs.clone();
            theirs_sorted.sort_unstable();
            let mut ours_sorted = ours.clone();
            ours_sorted.sort_unstable();
            assert_eq!(theirs_sorted, ours_sorted, "{}: flags", spec.name);
            let id = catalog.id(spec.name).expect("in the catalog");
            let mut ours: Vec<&str> = CATEGORIES
                .iter()
                .filter(|(_, bit)| catalog.categories(id) & bit != 0)
                .map(|(name, _)| *name)
                .collect();
            let mut theirs: Vec<&str> = cols[4]
                .split(' ')
                .map(|c| c.trim_start_matches('@'))
                .filter(|c| CATEGORIES.iter().any(|(name, _)| name == c))
                .collect();
            ours.sort_unstable();
            theirs.sort_unstable();
            assert_eq!(ours, theirs, "{}: categories", spec.name);
            checked += 1;
        }
        assert!(checked >= 120, "only {checked} rows checked");
    }
}
