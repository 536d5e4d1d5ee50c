//! One Lua state per worker thread, and the run of one script in it.
//!
//! The state is made on the thread's first script (`Engine::new`): the libraries Redis opens
//! (base, table, string, math, `bit`, `cjson`) without `loadfile`, `dofile`, `require`, `os`,
//! `io`, `getfenv`, `setfenv` or `print`; the `redis` table; and the prelude (Lua, below): the
//! read-only globals and library tables, Redis 7.0's `pcall`, and the run of a script under
//! Redis's error handler, with this run's `redis.call` and `redis.pcall` (Rust functions over
//! the host). A body is compiled once per thread, by SHA1, and dropped when the cache is
//! flushed.
//!
//! Our differences from Redis's sandbox: no `debug` library (it reaches the registry, and with
//! it the host's own values), no `load` (`loadstring` stays, refusing bytecode), no `struct` or
//! `cmsgpack`; `pairs` over a library table sees nothing (each is a read-only proxy).
//!
//! # Error forms (as redis-server 7.0.15 gives them)
//! - A runtime error `e`: `ERR user_script:1: e script: <sha>, on @user_script:1.`
//! - An error table `{err=e}` raised (`redis.call` raises the command's error this way):
//!   `e script: <sha>, on @user_script:<line>.`
//! - A compile error: `ERR Error compiling script (new function): user_script:1: ...`
//!
//! # Bounds
//! - Memory (ours: Redis has no cap): each state holds at most [`MEMORY_LIMIT`] bytes; an
//!   allocation past it fails the script with `ERR Lua memory limit reached ...` and the state
//!   is collected.
//! - Time, as Redis bounds it: nothing stops a script by itself. An instruction-count hook
//!   looks at the clock every [`HOOK_EVERY`] instructions. At its first look the script is
//!   listed as long (`busy`): other threads wait for it outside the locks of its shards; past
//!   `busy-reply-threshold` it is busy: they answer commands on its shards `-BUSY`, and
//!   `SCRIPT KILL` may stop it, if it has not written, with Redis's
//!   `ERR Script killed by user with SCRIPT KILL... script: <sha>, on @user_script:<line>.`
//!   `SHUTDOWN NOSAVE` stops every script, written or not, so the node can exit. A stop is
//!   sticky: once asked, every later look raises again, and `pcall`, `xpcall` and
//!   `coroutine.resume` pass it on instead of catching it.
//!
//!   No hard stop: a script that has written and is stopped half way would break the
//!   atomicity it was promised, which Redis never does; the operator decides (wait, or
//!   `SHUTDOWN NOSAVE`), as with Redis.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::c_int;
use std::ptr::NonNull;
use std::time::Instant;

use bytes::BytesMut;
use mlua::{
    Function, HookTriggers, Lua, LuaOptions, RegistryKey, StdLib, Table, Value as Lua_, VmState,
    ffi,
};
use sluice_resp::reply::{self, Proto};

use super::busy::{self, Long};
use super::cache::{self, Sha};
use super::convert::{self, Out};
use super::{Host, Source};

/// Bytes a thread's Lua state may hold.
pub const MEMORY_LIMIT: usize = 128 << 20;

/// Lua's GC pause, in percent of the heap the last collection kept (Lua's default: 200).
const GC_PAUSE: i32 = 1000;

/// Instructions between two looks at the clock.
const HOOK_EVERY: u32 = 10_000;

/// Compiled bodies a thread keeps; past it they are dropped and compiled again as needed.
const MAX_COMPILED: usize = 10_000;

const NOSCRIPT: &str = "NOSCRIPT No matching script. Please use EVAL.";

thread_local! {
    static ENGINE: RefCell<Option<Engine>> = const { RefCell::new(None) };
    /// When the running script started.
    static STARTED: Cell<Option<Instant>> = const { Cell::new(None) };
    /// Why the running script must stop, once asked (sticky for the run).
    static STOPPED: Cell<Option<Stop>> = const { Cell::new(None) };
    /// The running script has written: called a write command (marked before the command
    /// runs, as Redis marks it, so `SCRIPT KILL` and the write cannot both win).
    static WROTE: Cell<bool> = const { Cell::new(false) };
    /// The running script's slot once it is long (see `busy`).
    static LONG: RefCell<Option<Long>> = const { RefCell::new(None) };
    /// The running script's SHA1 and declared keys (see [`Running`]).
    static SHA: Cell<Sha> = const { Cell::new([0; 40]) };
    static KEYS: Cell<Option<NonNull<[&'static [u8]]>>> = const { Cell::new(None) };
    /// The running script said `redis.setresp(3)`.
    static RESP3: Cell<bool> = const { Cell::new(false) };
    /// The text of the error a Rust function of the `redis` table just raised.
    static STASH: RefCell<Option<String>> = const { RefCell::new(None) };
    /// The running script's host, for `redis.call` and `redis.pcall` (see [`Running`]).
    static HOST: Cell<Option<NonNull<dyn Host>>> = const { Cell::new(None) };
    /// The running script's Lua state, for the C functions `redis.call` and `redis.pcall`
    /// (see [`Running`]).
    static LUA: Cell<Option<NonNull<Lua>>> = const { Cell::new(None) };
    /// Where a command called from a script writes its reply, kept between calls.
    static SCRATCH: RefCell<BytesMut> = RefCell::new(BytesMut::new());
}

/// Why a running script must stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    /// `SCRIPT KILL`.
    Killed,
    /// `SHUTDOWN NOSAVE`.
    Shutdown,
}

impl Stop {
    const fn text(self) -> &'static str {
        match self {
            Stop::Killed => "ERR Script killed by user with SCRIPT KILL...",
            Stop::Shutdown => "ERR Script stopped: the server is shutting down (SHUTDOWN NOSAVE)",
        }
    }
}

/// The script running on this thread, from [`Running::start`] until it drops: its host and
/// Lua state, its SHA1 and keys (listed once it runs long), its clock and flags.
///
/// `redis.call` and `redis.pcall` are made once per state (a function made per run costs more
/// than the commands a limiter script calls); they reach the run's host through [`HOST`] and
/// its state (to lift its memory limit) through [`LUA`].
struct Running;

impl Running {
    fn start(host: &mut dyn Host, lua: &Lua, sha: &Sha, keys: &[&[u8]]) -> Running {
        let ptr = NonNull::from(host);
        // SAFETY: only the lifetime is erased. The pointer is cleared when `Running` drops, at
        // the end of the run that borrows `host` mutably for its whole length, and is used
        // only by `with_host`, during that run.
        let ptr: NonNull<dyn Host> = unsafe { std::mem::transmute(ptr) };
        HOST.set(Some(ptr));
        // The state outlives the run (the engine owns it), and is only read through this.
        LUA.set(Some(NonNull::from(lua)));
        // SAFETY: as for the host: `keys` outlives the run, and `KEYS` is cleared as it ends;
        // it is read only by `look`, on this thread, during the run.
        let keys: NonNull<[&'static [u8]]> = unsafe { std::mem::transmute(NonNull::from(keys)) };
        KEYS.set(Some(keys));
        SHA.set(*sha);
        STOPPED.set(None);
        WROTE.set(false);
        STARTED.set(Some(Instant::now()));
        Running
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        HOST.set(None);
        LUA.set(None);
        KEYS.set(None);
        STARTED.set(None);
        // A long script's slot is freed: the other threads serve its shards again.
        LONG.take();
    }
}

/// The instruction hook's look, every [`HOOK_EVERY`] instructions: whether the script must
/// stop (then it raises, again at every later look); at the first look, the script is listed
/// as long; past the threshold, busy.
fn look() -> mlua::Result<VmState> {
    if STOPPED.get().is_none() {
        if busy::stopping() {
            STOPPED.set(Some(Stop::Shutdown));
        } else {
            LONG.with_borrow_mut(|slot| {
                if slot.is_none() {
                    *slot = list();
                }
                match slot {
                    Some(long) if long.killed() => {
                        sluice_log::warn("Lua script killed by user with SCRIPT KILL.");
                        STOPPED.set(Some(Stop::Killed));
                    }
                    Some(long) if !long.is_busy() => go_busy(long),
                    _ => {}
                }
            });
        }
    }
    match STOPPED.get() {
        Some(stop) => raise(stop.text()),
        None => Ok(VmState::Continue),
    }
}

/// Lists the running script as long, with its declared keys.
#[cold]
fn list() -> Option<Long> {
    // SAFETY: set by `Running` for this run (see there).
    let keys = unsafe { KEYS.get()?.as_ref() };
    Long::enter(keys, WROTE.get())
}

/// Marks the running script busy once it has run past the threshold.
fn go_busy(long: &Long) {
    let Some(started) = STARTED.get() else {
        return;
    };
    let ran = started.elapsed();
    if ran < busy::threshold() {
        return;
    }
    long.set_busy();
    sluice_log::warn(&format!(
        "Slow script detected: still in execution after {} milliseconds. You can try killing the script using the SCRIPT KILL command. Script name is: {}.",
        ran.as_millis(),
        String::from_utf8_lossy(&SHA.get())
    ));
}

/// `check_stop()` for the prelude: raises the stop, if one was asked, where a `pcall` would
/// otherwise have caught it.
fn check_stop() -> mlua::Result<()> {
    match STOPPED.get() {
        Some(stop) => raise(stop.text()),
        None => Ok(()),
    }
}

/// The running script is about to call a write command (Redis marks a script dirty before
/// the command runs, whether it then fails or not): from now on it cannot be killed. False if
/// `SCRIPT KILL` stopped it first: the write must not run, and the script stops ([`KILLED`]
/// is the call's error).
pub fn may_write() -> bool {
    if WROTE.get() {
        return true;
    }
    WROTE.set(true);
    if LONG.with_borrow(|long| long.as_ref().is_none_or(busy::Long::write)) {
        return true;
    }
    sluice_log::warn("Lua script killed by user with SCRIPT KILL.");
    STOPPED.set(Some(Stop::Killed));
    false
}

/// The error a killed script's calls answer.
pub const KILLED: &str = Stop::Killed.text();

/// Whether this thread runs a script now (its commands come through the dispatcher too).
pub fn running() -> bool {
    HOST.get().is_some()
}

/// Whether the script running on this thread is listed as long (see `busy`): its own commands
/// are never made to wait for it, nor refused `-BUSY`.
pub fn listed_here() -> bool {
    LONG.with_borrow(Option::is_some)
}

/// Runs `f` with the running script's host, or `None` outside a run.
fn with_host<R>(f: impl FnOnce(Option<&mut dyn Host>) -> R) -> R {
    match HOST.get() {
        // SAFETY: set by `Running` for the length of a run, which holds the only other
        // reference (`&mut dyn Host`) and does not use it while Lua runs; a command called
        // from a script cannot start another (EVAL is `noscript`), so this is the one live
        // reference.
        Some(mut ptr) => f(Some(unsafe { ptr.as_mut() })),
        None => f(None),
    }
}

/// Sets up the read-only globals, Redis 7.0's `pcall` and its error handler; returns
/// `run(f, keys, argv)`, which runs `f` and returns `ok, value`.
///
/// `redis.call` and `redis.setresp` are Rust functions, as they are C functions in Redis: a
/// `return redis.call(...)` is then no Lua tail call, and the error handler still finds the
/// script's line. A Rust function cannot raise a table, so it leaves the error's text in
/// [`STASH`] and raises; the prelude takes it back (`take_stash`) as Redis's `{err=...}`.
const PRELUDE: &str = r#"
local take_stash, check_stop = ...
local G = _G
local getinfo = debug.getinfo
local error, type, tostring, select, xpcall, pcall, setfenv, getfenv, setmetatable, rawset, loadstring, ipairs =
      error, type, tostring, select, xpcall, pcall, setfenv, getfenv, setmetatable, rawset, loadstring, ipairs
-- `debug` reaches the registry and could break the host's invariants: only the error
-- handler keeps `getinfo`. `load` takes readers that may hand in bytecode; `loadstring`
-- refuses it, and what it compiles runs in its caller's read-only environment. As in Redis
-- 7.0, no `getfenv`, `setfenv`, `newproxy` nor `print`.
for _, name in ipairs({'debug', 'load', 'getfenv', 'setfenv', 'newproxy', 'print'}) do
  G[name] = nil
end
G.loadstring = function(s, name)
  if type(s) == 'string' and s:byte(1) == 27 then return nil, 'binary chunks are not allowed' end
  local f, e = loadstring(s, name)
  if f then setfenv(f, getfenv(2)) end
  return f, e
end
-- An error the host raised (redis.call, redis.setresp) as its `{err=...}` text.
-- (mlua raises it as a string with a traceback: the stash is what counts.)
local function host_error(err)
  local text = take_stash()
  if text then return {err = text} end
  return err
end
-- Redis 7.0's pcall: an error table comes back as its `err` text.
local function caught(ok, ...)
  if ok then return ok, ... end
  check_stop()
  local err = host_error((...))
  if type(err) == 'table' and type(err.err) == 'string' then return false, err.err end
  return false, err
end
G.pcall = function(...) return caught(pcall(...)) end
-- A stop (SCRIPT KILL, SHUTDOWN NOSAVE) is raised again where xpcall or coroutine.resume
-- would have caught it.
local function passed_on(ok, ...)
  if not ok then check_stop() end
  return ok, ...
end
G.xpcall = function(f, h) return passed_on(xpcall(f, h)) end
local resume = coroutine.resume
coroutine.resume = function(...) return passed_on(resume(...)) end
local function handler(err)
  err = host_error(err)
  local level = 2
  local i = getinfo(level, 'nSl')
  while i and i.source ~= '@user_script' do
    level = level + 1
    i = getinfo(level, 'nSl')
  end
  if type(err) ~= 'table' then err = {err = 'ERR ' .. tostring(err)} end
  if i then
    err['source'] = i.source
    err['line'] = i.currentline
  end
  return err
end
local function refuse_write() error('Attempt to modify a readonly table', 2) end
local readonly = {
  __index = function(_, name)
    local v = G[name]
    if v == nil then
      error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
    end
    return v
  end,
  __newindex = refuse_write,
}
-- `getmetatable(_G)` answers a read-only view of it (a table, as in Redis), so no script can
-- undo the protection for the scripts after it, which share the environment.
local readonly_view = setmetatable({}, {__index = readonly, __newindex = refuse_write, __metatable = false})
readonly.__metatable = readonly_view
-- The library tables are read-only as in Redis: each global names a proxy that reads through
-- to the table (our difference: `pairs` over one sees nothing). rawset and setmetatable refuse
-- them, and the globals, as Redis refuses a read-only table.
local protected = setmetatable({[G] = true, [readonly_view] = true}, {__mode = 'k'})
for _, name in ipairs({'string', 'math', 'table', 'coroutine', 'redis', 'bit', 'cjson'}) do
  local proxy = setmetatable({}, {__index = G[name], __newindex = refuse_write, __metatable = false})
  protected[proxy] = true
  G[name] = proxy
end
local rawset_, setmetatable_ = rawset, setmetatable
G.rawset = function(t, ...)
  if protected[t] then error('Attempt to modify a readonly table', 0) end
  return rawset_(t, ...)
end
G.setmetatable = function(t, ...)
  if protected[t] then error('Attempt to modify a readonly table', 0) end
  return setmetatable_(t, ...)
end
setmetatable(G, {__newindex = refuse_write})
-- One environment for every script this state runs: its reads fall through to the globals
-- (Redis's error for a missing one), its writes are refused, so no script leaves anything in
-- it for the next; KEYS and ARGV are set in it for each run.
local env = setmetatable({}, readonly)
rawset(env, '_G', env)
protected[env] = true
return function(f, keys, argv)
  rawset(env, 'KEYS', keys)
  rawset(env, 'ARGV', argv)
  setfenv(f, env)
  return xpcall(f, handler)
end
"#;

struct Engine {
    lua: Lua,
    run: Function,
    fields: convert::Fields,
    /// In the Lua registry, not as `Function`s: mlua keeps each live `Function` in a slot of
    /// an auxiliary Lua stack, which Lua 5.1 caps at 8,000, so a few thousand cached
    /// functions made every later compile fail ("out of Lua stack").
    compiled: HashMap<Sha, RegistryKey>,
    generation: u64,
}

impl Engine {
    fn new() -> mlua::Result<Engine> {
        // SAFETY: `debug` is opened only for the prelude, which keeps `debug.getinfo` for the
        // error handler and removes the library from the scripts' globals before any runs.
        let lua = unsafe {
            Lua::unsafe_new_with(
                StdLib::TABLE | StdLib::STRING | StdLib::MATH | StdLib::DEBUG,
                LuaOptions::default(),
            )
        };
        lua.set_memory_limit(MEMORY_LIMIT)?;
        // A full collection once the heap is GC_PAUSE % of what the last one kept, not twice
        // it: a limiter script leaves a few small tables behind per call, and marking the
        // libraries every few hundred calls was a fifth of an EVALSHA's instructions.
        lua.gc_set_mode(mlua::state::GcMode::Incremental(
            mlua::state::GcIncParams::default().pause(GC_PAUSE),
        ));
        let g = lua.globals();
        for name in [
            "loadfile", "dofile", "require", "module", "package", "os", "io",
        ] {
            g.raw_set(name, Lua_::Nil)?;
        }
        g.raw_set("bit", super::bit::library(&lua)?)?;
        g.raw_set("cjson", super::cjson::library(&lua)?)?;
        g.raw_set("redis", redis_library(&lua)?)?;
        let take_stash = lua.create_function(|_, ()| Ok(STASH.take()))?;
        let check_stop = lua.create_function(|_, ()| check_stop())?;
        let run: Function = lua
            .load(PRELUDE)
            .set_name("=sluice")
            .call((take_stash, check_stop))?;
        lua.set_hook(
            HookTriggers::new().every_nth_instruction(HOOK_EVERY),
            |_, _| look(),
        )?;
        Ok(Engine {
            fields: convert::Fields::new(&lua)?,
            lua,
            run,
            compiled: HashMap::new(),
            generation: cache::generation(),
        })
    }

    /// The compiled function of `body` (whose SHA1 is `sha`), compiling it on first use, and
    /// whether its shebang says `no-writes`.
    fn function(&mut self, sha: &Sha, body: &[u8]) -> Result<(Function, bool), String> {
        let (code, no_writes) = shebang(body)?;
        if let Some(key) = self.compiled.get(sha) {
            let f = self
                .lua
                .registry_value(key)
                .map_err(|e| format!("ERR Lua state: {e}"))?;
            return Ok((f, no_writes));
        }
        let f = self
            .lua
            .load(code)
            .set_name("@user_script")
            .into_function()
            .map_err(|e| {
                let text = match &e {
                    mlua::Error::SyntaxError { message, .. } => message.clone(),
                    mlua::Error::MemoryError(_) => "not enough memory".into(),
                    other => other.to_string(),
                };
                format!("ERR Error compiling script (new function): {text}")
            })?;
        if self.compiled.len() >= MAX_COMPILED {
            self.compiled.clear();
            self.lua.expire_registry_values();
        }
        let key = self
            .lua
            .create_registry_value(&f)
            .map_err(|e| format!("ERR Lua state: {e}"))?;
        self.compiled.insert(*sha, key);
        Ok((f, no_writes))
    }
}

/// Redis 7's shebang: a first line `#!lua [flags=f1,f2]`. Returns the code to compile (the
/// shebang line left out, its newline kept so line numbers stay) and whether the flags say
/// `no-writes`; the other flags Redis knows are accepted and change nothing here.
fn shebang(body: &[u8]) -> Result<(&[u8], bool), String> {
    if !body.starts_with(b"#!") {
        return Ok((body, false));
    }
    let end = body.iter().position(|&b| b == b'\n').unwrap_or(body.len());
    let line = String::from_utf8_lossy(&body[..end]);
    let mut words = line.split(' ').filter(|w| !w.is_empty());
    if words.next() != Some("#!lua") {
        return Err(format!("ERR Unexpected engine in script shebang: {line}"));
    }
    let mut no_writes = false;
    for word in words {
        let Some(flags) = word.strip_prefix("flags=") else {
            return Err(format!("ERR Unknown lua shebang option: {word}"));
        };
        for flag in flags.split(',').filter(|f| !f.is_empty()) {
            match flag {
                "no-writes" => no_writes = true,
                "allow-oom" | "allow-stale" | "no-cluster" | "allow-cross-slot-keys" => {}
                other => return Err(format!("ERR Unexpected flag in script shebang: {other}")),
            }
        }
    }
    Ok((&body[end..], no_writes))
}

/// The `redis` table's functions that need no host: logging, replies, SHA1, replication
/// switches (accepted; effects are always what replicates) and the constants.
fn redis_library(lua: &Lua) -> mlua::Result<Table> {
    let redis = lua.create_table()?;
    redis.raw_set(
        "sha1hex",
        lua.create_function(|lua, s: mlua::LuaString| {
            lua.create_string(cache::sha1hex(&s.as_bytes()))
        })?,
    )?;
    redis.raw_set(
        "error_reply",
        lua.create_function(|lua, e: mlua::LuaString| {
            // Redis prepends the `-` a reply line has, then reads the code after it.
            let e = e.to_string_lossy();
            let line = e.strip_prefix('-').unwrap_or(&e);
            convert::error_table(lua, &convert::error_text(line))
        })?,
    )?;
    redis.raw_set(
        "status_reply",
        lua.create_function(|lua, s: mlua::LuaString| {
            let t = lua.create_table_with_capacity(0, 1)?;
            t.raw_set("ok", s)?;
            Ok(t)
        })?,
    )?;
    redis.raw_set(
        "setresp",
        lua.create_function(|_, args: mlua::MultiValue| {
            if args.len() != 1 {
                return raise("ERR redis.setresp() requires one argument.");
            }
            match args.front() {
                Some(Lua_::Integer(2)) => RESP3.set(false),
                Some(Lua_::Integer(3)) => RESP3.set(true),
                Some(Lua_::Number(n)) if *n == 2.0 => RESP3.set(false),
                Some(Lua_::Number(n)) if *n == 3.0 => RESP3.set(true),
                _ => return raise("ERR RESP version must be 2 or 3."),
            }
            Ok(())
        })?,
    )?;
    // SAFETY: both are C functions that keep Lua's stack discipline (see `call`).
    let call = unsafe { lua.create_c_function(redis_call)? };
    redis.raw_set("call", call)?;
    // SAFETY: as `call`.
    let pcall = unsafe { lua.create_c_function(redis_pcall)? };
    redis.raw_set("pcall", pcall)?;
    redis.raw_set("log", lua.create_function(|_, _: mlua::MultiValue| Ok(()))?)?;
    redis.raw_set(
        "set_repl",
        lua.create_function(|_, _: mlua::MultiValue| Ok(()))?,
    )?;
    redis.raw_set(
        "replicate_commands",
        lua.create_function(|_, _: mlua::MultiValue| Ok(true))?,
    )?;
    redis.raw_set(
        "breakpoint",
        lua.create_function(|_, _: mlua::MultiValue| Ok(false))?,
    )?;
    redis.raw_set(
        "debug",
        lua.create_function(|_, _: mlua::MultiValue| Ok(()))?,
    )?;
    for (name, v) in [
        ("LOG_DEBUG", 0),
        ("LOG_VERBOSE", 1),
        ("LOG_NOTICE", 2),
        ("LOG_WARNING", 3),
        ("REPL_NONE", 0),
        ("REPL_AOF", 1),
        ("REPL_SLAVE", 2),
        ("REPL_REPLICA", 2),
        ("REPL_ALL", 3),
    ] {
        redis.raw_set(name, v)?;
    }
    redis.raw_set("REDIS_VERSION", crate::cmd::REDIS_COMPAT_VERSION)?;
    redis.raw_set("REDIS_VERSION_NUM", 0x07_00_0f)?;
    Ok(redis)
}

/// `SCRIPT LOAD`: caches `body` and answers its SHA1, after compiling it here (a body that
/// does not compile is refused, as Redis refuses it).
pub fn load(body: &[u8], out: &mut BytesMut) {
    let sha = cache::sha1hex(body);
    let compiled = with_engine(|e| e.function(&sha, body).map(drop));
    match compiled {
        Err(text) => reply::error(out, &text),
        Ok(()) => match cache::insert(sha, body, true) {
            Ok(()) => reply::bulk(out, &sha),
            Err(cache::CacheFull) => reply::error(
                out,
                "ERR script cache is full (the scripts loaded with SCRIPT LOAD fill it)",
            ),
        },
    }
}

fn with_engine<R>(f: impl FnOnce(&mut Engine) -> Result<R, String>) -> Result<R, String> {
    ENGINE.with(|cell| {
        let Ok(mut slot) = cell.try_borrow_mut() else {
            return Err("ERR a script cannot run another script".into());
        };
        if slot
            .as_ref()
            .is_some_and(|e| e.generation != cache::generation())
        {
            *slot = None;
        }
        if slot.is_none() {
            *slot = Some(Engine::new().map_err(|e| format!("ERR Lua state: {e}"))?);
        }
        match slot.as_mut() {
            Some(engine) => f(engine),
            None => Err("ERR Lua state".into()),
        }
    })
}

/// `EVAL`/`EVALSHA`: runs the script with `keys` and `argv`, its commands through `host`,
/// and appends its reply (in `proto`, the caller's protocol) to `out`.
pub fn run(
    host: &mut dyn Host,
    source: Source<'_>,
    keys: &[&[u8]],
    argv: &[&[u8]],
    proto: Proto,
    out: &mut BytesMut,
) {
    let (sha, body, evaled) = match source {
        Source::Body(body) => (
            cache::sha1hex(body),
            bytes::Bytes::copy_from_slice(body),
            true,
        ),
        Source::Sha(text) => {
            match cache::parse_sha(text).and_then(|sha| Some((sha, cache::get(&sha)?))) {
                Some((sha, body)) => (sha, body, false),
                None => return reply::error(out, NOSCRIPT),
            }
        }
    };
    let result = with_engine(|engine| {
        let (f, no_writes) = engine.function(&sha, &body)?;
        // Cached once it compiled, as Redis caches it. An EVAL'd body that does not fit the
        // cache runs all the same.
        if evaled {
            let _ = cache::insert(sha, &body, false);
        }
        if no_writes {
            host.forbid_writes();
        }
        run_function(engine, host, &sha, f, keys, argv, proto, out);
        Ok(())
    });
    if let Err(text) = result {
        reply::error(out, &text);
    }
}

#[allow(clippy::too_many_arguments)]
fn run_function(
    engine: &mut Engine,
    host: &mut dyn Host,
    sha: &Sha,
    f: Function,
    keys: &[&[u8]],
    argv: &[&[u8]],
    proto: Proto,
    out: &mut BytesMut,
) {
    let sha_text = String::from_utf8_lossy(sha);
    RESP3.set(false);
    STASH.take();
    let lua = &engine.lua;
    let running = Running::start(host, &engine.lua, sha, keys);
    let result = (|| {
        // `run(f, KEYS, ARGV)`, the tables made with Lua's C API (in the protected call
        // `exec_raw` makes: an allocation past the limit is an error here).
        // SAFETY: the stack holds `run` and `f` (the arguments) and gets two tables, then the
        // call's two results; nothing else is on it.
        let (ok, value): (bool, Lua_) = unsafe {
            lua.exec_raw((&engine.run, &f), |state| {
                convert::push_strings(state, keys);
                convert::push_strings(state, argv);
                ffi::lua_call(state, 3, 2);
            })
        }?;
        let _unbounded = Unbounded::new(lua);
        let o = Out {
            proto,
            resp3: RESP3.get(),
            fields: &engine.fields,
        };
        if ok {
            convert::lua_to_resp(&value, o, out, 0);
        } else {
            script_error(&value, &sha_text, out);
        }
        Ok::<(), mlua::Error>(())
    })();
    drop(running);
    if let Err(e) = result {
        let text = match e {
            mlua::Error::MemoryError(_) => memory_error(),
            other => format!("ERR Error running script {sha_text}: {other}"),
        };
        reply::error(out, &text);
    }
    if lua.used_memory() > MEMORY_LIMIT / 2 {
        let _ = lua.gc_collect();
    }
}

fn memory_error() -> String {
    format!(
        "ERR Lua memory limit reached ({MEMORY_LIMIT} bytes per thread): the script was stopped"
    )
}

/// The reply to a script that raised `err` (the handler's table, or a string for errors the
/// handler does not see: out of memory).
fn script_error(err: &Lua_, sha: &str, out: &mut BytesMut) {
    // A stop raised where the error handler could not see it (in the handler itself) is
    // still answered as the stop.
    if let Some(stop) = STOPPED.get()
        && !matches!(err, Lua_::Table(_))
    {
        return reply::error(out, &format!("{} script: {sha}", stop.text()));
    }
    match err {
        Lua_::Table(t) => {
            let msg = t
                .raw_get::<Lua_>("err")
                .ok()
                .and_then(|v| match v {
                    Lua_::String(s) => Some(s.to_string_lossy()),
                    _ => None,
                })
                .unwrap_or_else(|| "ERR unknown error".into());
            let source = t
                .raw_get::<Option<mlua::LuaString>>("source")
                .ok()
                .flatten();
            let line = t.raw_get::<Option<i64>>("line").ok().flatten();
            let msg = msg.trim_matches(['\r', '\n']);
            let text = match (source, line) {
                (Some(source), Some(line)) => format!(
                    "{msg} script: {sha}, on {}:{line}.",
                    source.to_string_lossy()
                ),
                _ => msg.to_string(),
            };
            reply::error(out, &text);
        }
        Lua_::String(s) if s.as_bytes().as_ref() == b"not enough memory" => {
            reply::error(out, &memory_error())
        }
        other => {
            let msg = match other {
                Lua_::String(s) => s.to_string_lossy(),
                _ => "execution failure".into(),
            };
            let msg: String = msg.chars().take(100).collect();
            reply::error(out, &format!("ERR Error running script {sha}, {msg}"));
        }
    }
}

/// While it lives, the state's memory limit is lifted: for the values Sluice makes for a
/// script (KEYS and ARGV, a command's reply, the return value's field lookups).
///
/// While a limit is set, mlua makes every string and table in a protected call (so that an
/// allocation past the limit is an error, not a jump across Rust frames), at about 4,000
/// instructions a string: KEYS, ARGV and the replies of a script's three commands cost more
/// than Redis's whole EVALSHA. Without a limit it makes them directly, as it does by default.
/// What is made meanwhile is bounded by the request and the commands' replies, which the node
/// holds already; the limit, set again on drop, stops the script at its next allocation of
/// its own if those values took the state past it.
struct Unbounded<'l>(&'l Lua);

impl<'l> Unbounded<'l> {
    fn new(lua: &'l Lua) -> Unbounded<'l> {
        let _ = lua.set_memory_limit(0);
        Unbounded(lua)
    }
}

impl Drop for Unbounded<'_> {
    fn drop(&mut self) {
        let _ = self.0.set_memory_limit(MEMORY_LIMIT);
    }
}

/// Raises `text` from a Rust function of the `redis` table, as Redis raises `{err=text}`.
fn raise<T>(text: &str) -> mlua::Result<T> {
    STASH.set(Some(text.to_string()));
    Err(mlua::Error::runtime(text))
}

/// `redis.call`: a C function over Lua's API (see [`call`]).
unsafe extern "C-unwind" fn redis_call(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: Lua calls it with its state, from a running script (see `call`).
    unsafe { finish(state, call(state, true)) }
}

/// `redis.pcall`.
unsafe extern "C-unwind" fn redis_pcall(state: *mut ffi::lua_State) -> c_int {
    // SAFETY: as `redis_call`.
    unsafe { finish(state, call(state, false)) }
}

/// Returns the one value [`call`] left on the stack, or raises it.
///
/// # Safety
/// `state` is the running script's state, in the C function that called [`call`], which has
/// returned: no frame between here and Lua owns a value with a destructor.
unsafe fn finish(state: *mut ffi::lua_State, raise: bool) -> c_int {
    if raise {
        // SAFETY: as the caller promises; Lua's error jumps to the script's protected call.
        unsafe { ffi::lua_error(state) }
    }
    1
}

/// `redis.call` (`raise_errors`: an error reply raises) and `redis.pcall` (it is returned as
/// `{err=...}`): runs the command its arguments name through the host and leaves the reply on
/// the stack as the Lua value Redis makes of it; true if that value is an error to raise.
///
/// Made with Lua's C API, as Redis makes them: the arguments are read in place and the reply
/// pushed directly, where mlua's values cost a reference each (a third of a short script's
/// run).
///
/// # Safety
/// `state` is the running script's state, inside a call from Lua. The memory limit is lifted
/// while it pushes ([`Unbounded`]), so no push raises; everything with a destructor is dropped
/// when it returns, before [`finish`] may raise.
unsafe fn call(state: *mut ffi::lua_State, raise_errors: bool) -> bool {
    // A text left by an error the script caught (`redis.setresp` in a `pcall`) must not stand
    // for the error this call raises: the prelude's handler prefers the stash.
    STASH.take();
    let error = |text: &str| {
        // SAFETY: a free slot (a C function has LUA_MINSTACK), no raise (the limit is lifted).
        unsafe { convert::push_error(state, text) };
        raise_errors
    };
    let Some(lua) = LUA.get() else {
        return error("ERR redis.call/pcall can only be called inside a script invocation");
    };
    // SAFETY: set by `Running` for the length of a run, on this thread; the state is not used
    // through it but to lift and set its memory limit.
    let _unbounded = Unbounded::new(unsafe { lua.as_ref() });
    // A stopped script (SCRIPT KILL, SHUTDOWN NOSAVE) raises its stop, from redis.pcall too.
    if let Some(stop) = STOPPED.get() {
        // SAFETY: as above.
        unsafe { convert::push_error(state, stop.text()) };
        return true;
    }
    // SAFETY: reading the C function's own arguments.
    let n = unsafe { ffi::lua_gettop(state) };
    if n == 0 {
        return error("ERR Please specify at least one argument for this redis lib call");
    }
    // Strings are passed as Lua holds them (valid while they are on the stack, which is the
    // whole call); numbers as Redis writes them (`%.17g`).
    let mut numbers: Vec<String> = Vec::new();
    for i in 1..=n {
        // SAFETY: `i` is one of the arguments.
        match unsafe { ffi::lua_type(state, i) } {
            ffi::LUA_TSTRING => {}
            ffi::LUA_TNUMBER => {
                // SAFETY: `i` is one of the arguments, a number.
                let n = unsafe { ffi::lua_tonumber(state, i) };
                numbers.push(convert::g17(n));
            }
            _ => return error("ERR Lua redis lib command arguments must be strings or integers"),
        }
    }
    let mut numbers_at = numbers.iter();
    let mut argv: Vec<&[u8]> = Vec::with_capacity(n as usize);
    for i in 1..=n {
        // SAFETY: `i` is one of the arguments, a string (not converted in place: numbers are
        // read with `lua_tonumber` above) that stays on the stack for the whole call.
        unsafe {
            if ffi::lua_type(state, i) == ffi::LUA_TSTRING {
                let mut len = 0;
                let at = ffi::lua_tolstring(state, i, &mut len);
                argv.push(std::slice::from_raw_parts(at.cast::<u8>(), len));
            } else if let Some(text) = numbers_at.next() {
                argv.push(text.as_bytes());
            }
        }
    }
    let resp3 = RESP3.get();
    let reply = SCRATCH.with_borrow_mut(|scratch| {
        scratch.clear();
        with_host(|host| host.map(|h| h.call(&argv, resp3, scratch)))?;
        Some(sluice_resp::value::decode(scratch))
    });
    match reply {
        None => error("ERR redis.call/pcall can only be called inside a script invocation"),
        Some(Ok(Some(sluice_resp::Value::Error(e)))) => error(&convert::error_text(&e)),
        Some(Ok(Some(v))) => {
            // SAFETY: the limit is lifted, and `push_value` checks the stack as it grows.
            let pushed = unsafe { convert::push_value(state, &v, resp3, 0) };
            if pushed {
                false
            } else {
                // SAFETY: `push_value` made room for one more value before it stopped.
                unsafe { ffi::lua_settop(state, n) };
                error("ERR reached lua stack limit")
            }
        }
        _ => error("ERR the command's reply could not be read"),
    }
}
