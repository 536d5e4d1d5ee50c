//! `EVAL`, `EVALSHA`, `EVAL_RO`, `EVALSHA_RO` — run a Lua script atomically over its keys.
//!
//! # Format
//! - `EVAL script numkeys [key ...] [arg ...]` → the script's return value (see `script`).
//! - `EVALSHA sha1 numkeys [key ...] [arg ...]` → the same for a cached script, or
//!   `-NOSCRIPT No matching script. Please use EVAL.`
//! - `EVAL_RO`/`EVALSHA_RO`: the same, refusing write commands inside.
//!
//! # Atomicity
//! The shards of the declared keys are held ([`sluice_store::Store::holding`]) from the
//! script's first instruction to its reply, and every command the script calls runs under
//! those same locks, so no other client's command touches its keys in between, with no global
//! lock. A command on a key the script did not declare first takes that key's shard for the
//! rest of the script: at once if it comes after every shard held (the one order every
//! multi-shard locker follows, so no deadlock), otherwise after a bounded wait; past the wait
//! the call fails with an error (declare every key in KEYS, as Redis asks). A command that
//! finds its keys by itself (DBSIZE, INFO, RL.HIT) takes every shard the same way.
//!
//! # Commands refused inside a script
//! The `noscript` ones, with Redis's error; and, with the same error (our difference), the
//! commands that take a lock some other thread holds while it waits on shards, which a
//! script may hold: FLUSHALL/FLUSHDB (the journal's spill lock, held by the replication
//! drain), INFO and CLUSTER (the replication state's lock, held by the replication thread
//! while it drains the shards' journals).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use bytes::BytesMut;
use sluice_resp::Request;
use sluice_resp::reply::{self, Proto};

use super::hold::{Held, SCRIPT_REFUSED, hold_for};
use super::route::may_serve;
use super::table::flag::NOSCRIPT;
use super::{Args, CmdError, Command, Ctx, LastCommand, Session, execute, lookup};
use crate::script::{self, Cmd, Host, Source};
use crate::shared::Shared;

/// One of the four EVAL commands: `SHA` names the script by SHA1, `RO` refuses writes.
#[derive(Debug)]
pub struct Eval<'a, const SHA: bool, const RO: bool> {
    script: &'a [u8],
    keys: Vec<&'a [u8]>,
    argv: Vec<&'a [u8]>,
}

impl<'a, const SHA: bool, const RO: bool> Command<'a> for Eval<'a, SHA, RO> {
    /// Routed by the declared keys: their slots in a cluster. A replica runs scripts (a write
    /// inside is refused there as any write is).
    const ROUTED_AFTER_PARSE: bool = true;

    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let script = args.key()?;
        let numkeys = args.i64()?;
        if numkeys > args.remaining() as i64 {
            return Err(CmdError::msg(
                "ERR Number of keys can't be greater than number of args",
            ));
        }
        let Ok(numkeys) = usize::try_from(numkeys) else {
            return Err(CmdError::msg("ERR Number of keys can't be negative"));
        };
        let keys = (0..numkeys).filter_map(|_| args.next()).collect();
        let argv = args.rest().collect();
        Ok(Eval { script, keys, argv })
    }

    fn keys(&self) -> impl Iterator<Item = &[u8]> {
        self.keys.iter().copied()
    }

    fn writes(&self) -> bool {
        false
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let source = if SHA {
            Source::Sha(self.script)
        } else {
            Source::Body(self.script)
        };
        let shared = ctx.shared;
        // The declared keys' shards, held until the reply: the first hold of this thread
        // takes them in ascending order and cannot fail.
        let hold = shared.store.holding();
        if hold.is_some() {
            shared
                .store
                .hold(self.keys.iter().copied())
                .map_err(|_| CmdError::msg(BUSY_SHARD))?;
        }
        let proto = ctx.session.proto;
        let mut host = ScriptHost {
            shared,
            session: ctx.session,
            now: ctx.now,
            read_only: RO,
            declared_held: hold.is_some(),
            declared: &self.keys,
        };
        // A well-known limiter script runs natively (`script::native`); any other, and any
        // call its native hands over, in Lua.
        if !script::native::run(
            &mut host, source, &self.keys, &self.argv, RO, proto, ctx.out,
        ) {
            script::run(&mut host, source, &self.keys, &self.argv, proto, ctx.out);
        }
        drop(hold);
        Ok(())
    }
}

/// Commands a script called on a key it did not declare (its shard taken for the rest of the
/// run), and commands that took every shard (they find their keys by themselves): INFO
/// scripting's `scripts_undeclared_key_calls` and `scripts_every_shard_calls`.
static UNDECLARED_KEY_CALLS: AtomicU64 = AtomicU64::new(0);
static EVERY_SHARD_CALLS: AtomicU64 = AtomicU64::new(0);

/// INFO scripting's counts of the calls that took shards beyond the declared keys'.
pub(super) fn info(t: &mut String) {
    use std::fmt::Write;
    let _ = write!(
        t,
        "scripts_undeclared_key_calls:{}\r\nscripts_every_shard_calls:{}\r\n",
        UNDECLARED_KEY_CALLS.load(Relaxed),
        EVERY_SHARD_CALLS.load(Relaxed)
    );
}

const BUSY_SHARD: &str = "ERR Script touched a key it did not declare, on a shard another client holds; declare every key the script uses in KEYS";

/// A script's commands run on the caller's connection, in the protocol the script chose.
struct ScriptHost<'s> {
    shared: &'s Shared,
    session: &'s mut Session,
    now: sluice_core::Nanos,
    read_only: bool,
    /// This run took the declared keys' shards itself (it is no command of an `EXEC` that
    /// holds shards already), so a call on declared keys needs none taken.
    declared_held: bool,
    /// The script's declared keys.
    declared: &'s [&'s [u8]],
}

impl Host for ScriptHost<'_> {
    fn forbid_writes(&mut self) {
        self.read_only = true;
    }

    fn call(&mut self, args: &[&[u8]], resp3: bool, out: &mut BytesMut) {
        self.run(args, resp3, true, out);
    }

    fn call_declared(&mut self, args: &[&[u8]], out: &mut BytesMut) {
        let take_shards = !self.declared_held;
        self.run(args, false, take_shards, out);
    }

    fn direct(
        &mut self,
        cmds: &[Cmd],
        keys: &[&[u8]],
        f: &mut dyn FnMut(&sluice_store::Store, sluice_core::Nanos) -> Option<&'static [Cmd]>,
    ) -> bool {
        // Only where this run took the declared keys' shards (not inside an EXEC).
        if !self.declared_held {
            return false;
        }
        let rows = direct_rows();
        let writes = cmds.iter().any(|c| c.writes());
        let user = &self.session.user;
        let permitted = cmds.iter().all(|&c| {
            self.shared
                .acl
                .permits(user, rows[c as usize], None)
                .is_ok()
        }) && (user.all_keys() || keys.iter().all(|k| user.may_touch(k, writes)));
        if !permitted || (writes && self.read_only) {
            return false;
        }
        let readonly = self.session.readonly;
        let view = &mut self.session.cluster_view;
        if may_serve(self.shared, view, readonly, keys.iter().copied(), writes).is_err() {
            return false;
        }
        // Marked written before it writes, unless SCRIPT KILL got there first.
        if writes && !script::may_write() {
            return false;
        }
        let Some(made) = f(&self.shared.store, self.now) else {
            return false;
        };
        for &c in made {
            self.session.batch.note(rows[c as usize]);
        }
        true
    }
}

/// The command table's row of each command a native's direct lane stands for (its ACL bit,
/// its `INFO commandstats` row), looked up once.
fn direct_rows() -> &'static [usize; Cmd::ALL.len()] {
    static ROWS: std::sync::OnceLock<[usize; Cmd::ALL.len()]> = std::sync::OnceLock::new();
    ROWS.get_or_init(|| {
        Cmd::ALL.map(|c| {
            let spec = lookup(c.name().as_bytes()).expect("a native's command is in the table");
            super::table::row(spec)
        })
    })
}

impl ScriptHost<'_> {
    /// Runs one command of the script; `take_shards`: take the shards of its keys that the run
    /// does not hold yet.
    fn run(&mut self, args: &[&[u8]], resp3: bool, take_shards: bool, out: &mut BytesMut) {
        let request = Request::from_args(args);
        let Some(spec) = args.first().and_then(|name| lookup(name)) else {
            return reply::error(out, "ERR Unknown Redis command called from script");
        };
        if !spec.arity_ok(args.len()) {
            return reply::error(
                out,
                "ERR Wrong number of args calling Redis command from script",
            );
        }
        if spec.has_flag(NOSCRIPT) || SCRIPT_REFUSED.contains(&spec.name) {
            return reply::error(out, "ERR This Redis command is not allowed from script");
        }
        if self.read_only && spec.write {
            return reply::error(
                out,
                "ERR Write commands are not allowed from read-only scripts.",
            );
        }
        // Marked written before it runs, unless SCRIPT KILL got there first.
        if spec.write && !script::may_write() {
            return reply::error(out, script::KILLED);
        }
        if take_shards {
            match hold_for(&self.shared.store, spec, request.view()) {
                Err(_) => return reply::error(out, BUSY_SHARD),
                Ok(Held::Keys) => {
                    if spec
                        .key_args(request.view())
                        .any(|k| !self.declared.contains(&k))
                    {
                        UNDECLARED_KEY_CALLS.fetch_add(1, Relaxed);
                    }
                }
                Ok(Held::All) => {
                    EVERY_SHARD_CALLS.fetch_add(1, Relaxed);
                }
                Ok(Held::Nothing) => {}
            }
        }
        let proto = self.session.proto;
        self.session.proto = if resp3 { Proto::Resp3 } else { Proto::Resp2 };
        // Dispatch finds the command in the session's one-entry cache instead of looking it
        // up again; the caller's entry (EVALSHA's) is put back after.
        let caller = std::mem::replace(
            &mut self.session.last_command,
            LastCommand::new(args[0], spec),
        );
        let mut ctx = Ctx {
            shared: self.shared,
            session: self.session,
            out,
            now: self.now,
            ahead: sluice_store::Ahead::NONE,
        };
        execute(request.view(), &mut ctx);
        self.session.proto = proto;
        self.session.last_command = caller;
    }
}

/// `FUNCTION ...`, `FCALL`, `FCALL_RO`: not offered yet (issue 36 lands EVAL first).
#[derive(Debug)]
pub struct Functions;

impl Command<'_> for Functions {
    fn parse(args: &mut Args<'_>) -> Result<Self, CmdError> {
        let _ = args.rest();
        Ok(Functions)
    }

    fn apply(self, _ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        Err(CmdError::msg(
            "ERR Redis Functions are not supported by Sluice yet: use EVAL, EVALSHA and SCRIPT LOAD",
        ))
    }
}

#[cfg(test)]
mod tests {
    use crate::{Config, Executor};

    fn run(e: &mut Executor, args: &[&str]) -> String {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        String::from_utf8_lossy(&e.exec(&args)).into_owned()
    }

    #[test]
    fn scripts_call_commands_and_convert_replies() {
        let mut e = Executor::new(Config::default_for_tests());
        let r = |e: &mut Executor, script: &str| run(e, &["EVAL", script, "1", "k", "a1"]);
        assert_eq!(r(&mut e, "return redis.call('incr', KEYS[1])"), ":1\r\n");
        assert_eq!(
            r(&mut e, "return {1, 'x', 2.9, nil, 4}"),
            "*3\r\n:1\r\n$1\r\nx\r\n:2\r\n"
        );
        assert_eq!(r(&mut e, "return ARGV[1]"), "$2\r\na1\r\n");
        assert_eq!(r(&mut e, "return redis.call('get', 'nokey')"), "$-1\r\n");
        assert_eq!(r(&mut e, "return redis.status_reply('FINE')"), "+FINE\r\n");
        assert_eq!(
            r(&mut e, "return redis.error_reply('oops')"),
            "-ERR oops\r\n"
        );
        let sha = "e0e1f9fabfc9d4800c877a703b823ac0578ff8db";
        assert_eq!(
            run(&mut e, &["SCRIPT", "LOAD", "return 1"]),
            format!("$40\r\n{sha}\r\n")
        );
        assert_eq!(run(&mut e, &["EVALSHA", sha, "0"]), ":1\r\n");
        assert_eq!(
            run(
                &mut e,
                &["EVALSHA", "0123456789012345678901234567890123456789", "0"]
            ),
            "-NOSCRIPT No matching script. Please use EVAL.\r\n"
        );
        let err = r(&mut e, "x = 1");
        assert_eq!(
            err,
            "-ERR user_script:1: Attempt to modify a readonly table script: 34bce5f775de97f557a34088509c8bfe1ea17e52, on @user_script:1.\r\n"
        );
        let err = r(
            &mut e,
            "return redis.call('set', KEYS[1], 'v') and redis.call('incr', KEYS[1])",
        );
        assert!(
            err.starts_with("-ERR value is not an integer or out of range script: "),
            "{err}"
        );
        assert_eq!(run(&mut e, &["GET", "k"]), "$1\r\nv\r\n");
        assert_eq!(
            r(&mut e, "return redis.pcall('multi')"),
            "-ERR This Redis command is not allowed from script\r\n"
        );
        // Ours to refuse: they take locks that threads waiting on shards hold.
        for cmd in ["flushall", "info", "cluster', 'info"] {
            assert_eq!(
                r(&mut e, &format!("return redis.pcall('{cmd}')")),
                "-ERR This Redis command is not allowed from script\r\n",
                "{cmd}"
            );
        }
        // A limiter command inside a script (it finds its keys once parsed: every shard is
        // held for it).
        assert!(
            run(
                &mut e,
                &[
                    "EVAL",
                    "return redis.call('rl.check', KEYS[1], 5, 10)",
                    "1",
                    "b"
                ]
            )
            .starts_with("*5\r\n:1\r\n:5\r\n:4\r\n")
        );
        // DBSIZE holds every shard for the rest of the script, and counts them.
        assert_eq!(r(&mut e, "return redis.call('dbsize')"), ":2\r\n");
    }
}
