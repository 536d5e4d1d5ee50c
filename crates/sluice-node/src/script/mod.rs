//! Lua scripting (`EVAL`, `EVALSHA`, `SCRIPT`) as Redis 7.0 embeds it: Lua 5.1, its sandbox,
//! the `redis` library and the conversions between Lua values and RESP.
//!
//! # Layout
//! - `busy`: the long scripts and those past `busy-reply-threshold`, seen from every thread
//!   (other clients wait for the first and get `-BUSY` from the second; `SCRIPT KILL`,
//!   `SHUTDOWN NOSAVE`).
//! - `cache`: the node's script cache (SHA1 → body), shared by every thread, bounded in bytes.
//! - `engine`: one Lua state per worker thread (thread-local), each with the sandbox, the
//!   `redis`, `bit` and `cjson` libraries and the functions it compiled, and the run of one
//!   script: its memory bound, when it goes busy, and the error forms Redis gives.
//! - `convert`: RESP → Lua (a command's reply for `redis.call`) and Lua → RESP (the script's
//!   return value), as Redis documents them.
//! - `bit`, `cjson`: the two bundled libraries scripts use most.
//! - `native`: the well-known limiter scripts, recognized by their SHA1 and run without Lua.
//!
//! # Invariants
//! - This module knows nothing of shards or sessions (of commands, only the table's `write`
//!   flag, to tell when a script has written): a script's commands go out
//!   through [`Host::call`], which the `EVAL` command implements over the dispatcher, and come
//!   back as RESP bytes. So a script's writes are the commands' own writes: their journal
//!   records are what replicates, never the script (a replica never runs Lua), and a script
//!   that fails half way keeps what it wrote. The one exception is a native's direct lane
//!   ([`Host::direct`]): once the host has checked that each of its commands would run for
//!   this client, it changes the store as they would, through the same store operations,
//!   whose journal records are the same resulting key states.
//! - A state holds at most [`engine::MEMORY_LIMIT`] bytes. Time is bounded as Redis bounds it:
//!   a script past `busy-reply-threshold` runs on, the other threads answer commands on its
//!   shards `-BUSY`, `SCRIPT KILL` stops it if it has not written, `SHUTDOWN NOSAVE` in any
//!   case. Our one difference: the clients whose connections live on the script's own worker
//!   thread wait for it (that thread runs the script), where Redis answers them `-BUSY`.
//! - Globals are read-only: every script of a state runs in its one environment, whose reads
//!   fall through to the library and whose writes are Redis's error (KEYS and ARGV are set in
//!   it for each run), so nothing a script does is seen by the next one.

mod bit;
pub mod busy;
pub mod cache;
mod cjson;
mod convert;
mod engine;
pub mod native;

pub use engine::{KILLED, MEMORY_LIMIT, listed_here, load, may_write, run, running};

use bytes::BytesMut;

/// Where a script's commands run.
pub trait Host {
    /// Runs `args` (a command and its arguments) for `redis.call` or `redis.pcall` and appends
    /// its reply to `out`, in RESP3 if `resp3`. A command refused before it runs (unknown, wrong
    /// arity, not allowed from scripts) is an error reply like any other.
    fn call(&mut self, args: &[&[u8]], resp3: bool, out: &mut BytesMut);

    /// [`Host::call`] in RESP2 for a command whose keys are all among the script's declared
    /// `KEYS`, whose shards the run already holds (a native's calls): the host may skip
    /// looking for shards to take.
    fn call_declared(&mut self, args: &[&[u8]], out: &mut BytesMut) {
        self.call(args, false, out);
    }

    /// The script's shebang says `no-writes`: refuse write commands from now on, as `EVAL_RO`.
    fn forbid_writes(&mut self);

    /// A native's direct lane: if each of `cmds` would run on the declared `keys` for this
    /// client (its ACL, the node's role, slots and min-replicas; a script not killed), runs `f`
    /// with the store, whose shards of `keys` the run holds, and the run's clock. `f` changes
    /// the store as those commands would and returns the commands it stood for, which are
    /// counted as called; or `None` having changed nothing. False (nothing ran, or `f` said
    /// `None`): make the calls one by one through [`Host::call_declared`].
    fn direct(
        &mut self,
        cmds: &[Cmd],
        keys: &[&[u8]],
        f: &mut dyn FnMut(&sluice_store::Store, sluice_core::Nanos) -> Option<&'static [Cmd]>,
    ) -> bool;
}

/// The commands a native's direct lane stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmd {
    Get,
    Pttl,
    Exists,
    Set,
    Incr,
    IncrBy,
    Expire,
}

impl Cmd {
    pub const ALL: [Cmd; 7] = [
        Cmd::Get,
        Cmd::Pttl,
        Cmd::Exists,
        Cmd::Set,
        Cmd::Incr,
        Cmd::IncrBy,
        Cmd::Expire,
    ];

    /// The command's name, as the command table has it.
    pub fn name(self) -> &'static str {
        match self {
            Cmd::Get => "get",
            Cmd::Pttl => "pttl",
            Cmd::Exists => "exists",
            Cmd::Set => "set",
            Cmd::Incr => "incr",
            Cmd::IncrBy => "incrby",
            Cmd::Expire => "expire",
        }
    }

    pub fn writes(self) -> bool {
        matches!(self, Cmd::Set | Cmd::Incr | Cmd::IncrBy | Cmd::Expire)
    }
}

#[cfg(test)]
mod tests {
    use super::Cmd;

    /// A host indexes its tables of the commands by `Cmd as usize`.
    #[test]
    fn all_lists_the_commands_in_their_order() {
        for (i, c) in Cmd::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i, "{}", c.name());
        }
    }
}

/// How a script was named.
#[derive(Clone, Copy, Debug)]
pub enum Source<'a> {
    /// `EVAL`: the body itself (cached as it runs).
    Body(&'a [u8]),
    /// `EVALSHA`: a SHA1 the cache must know.
    Sha(&'a [u8]),
}
