//! Conversions between RESP and Lua values, as Redis 7.0 makes them (`script_lua.c`).
//!
//! # RESP → Lua (a command's reply, for `redis.call` and `redis.pcall`)
//! integer → number; bulk → string; nil bulk and nil array → `false` (RESP2) or `nil` (RESP3);
//! array → table; status → `{ok=...}`; error → `{err=...}`. After `redis.setresp(3)`: map →
//! `{map={...}}`, set → `{set={member=true}}`, double → `{double=n}`, boolean → boolean, big
//! number → `{big_number=...}`, verbatim → `{verbatim_string={format=...,string=...}}`.
//!
//! # Lua → RESP (the script's return value, in the caller's protocol)
//! number → integer (truncated); string → bulk; `nil` → nil; `true` → `:1` and `false` → nil
//! (RESP2 script) or booleans (after `redis.setresp(3)`); a table with a string `err` → error,
//! `ok` → status, a number `double` → double, a string `big_number`, a `verbatim_string`, a
//! table `map` or `set`; any other table → array of its items 1, 2, ... up to the first nil.

use bytes::BytesMut;
use mlua::{Lua, Table, Value as Lua_, ffi};
use sluice_resp::Value;
use sluice_resp::reply::{self, Proto};

/// Nesting past this in a script's return value is refused, as Redis refuses it when the Lua
/// stack runs out (a table that holds itself would otherwise recurse without end).
const MAX_DEPTH: usize = 200;

/// A command's error reply (its text after `-`) as the `{err=...}` table Redis makes of it
/// (`luaPushErrorBuff`): the first word is the code, `ERR` when there is only one word.
pub fn error_text(line: &str) -> String {
    let (code, msg) = match line.split_once(' ') {
        Some((code, msg)) => (code, msg),
        None => ("ERR", line),
    };
    format!("{code} {}", msg.trim_matches(['\r', '\n']))
}

/// `{err=text}`.
pub fn error_table(lua: &Lua, text: &str) -> mlua::Result<Table> {
    let t = lua.create_table_with_capacity(0, 1)?;
    t.raw_set("err", text)?;
    Ok(t)
}

/// Pushes `bytes` as a Lua string.
///
/// # Safety
/// `state` has a free stack slot, and its memory limit is lifted (no push raises).
pub unsafe fn push_bytes(state: *mut ffi::lua_State, bytes: &[u8]) {
    // SAFETY: as the caller promises; Lua copies the bytes.
    unsafe { ffi::lua_pushlstring(state, bytes.as_ptr().cast(), bytes.len()) };
}

/// Pushes `{field=bytes}`.
///
/// # Safety
/// As [`push_value`].
unsafe fn push_single(state: *mut ffi::lua_State, field: &str, bytes: &[u8]) {
    // SAFETY: as the caller promises (three slots).
    unsafe {
        ffi::lua_createtable(state, 0, 1);
        push_bytes(state, field.as_bytes());
        push_bytes(state, bytes);
        ffi::lua_rawset(state, -3);
    }
}

/// Pushes a command's reply as the Lua value `redis.call` returns (see the module's table),
/// with Lua's C API: no value of mlua's is made for it. False (with nothing pushed for the
/// value that failed) when it nests past [`MAX_DEPTH`] or the stack cannot grow.
///
/// # Safety
/// `state` is a running Lua state inside a C function, and its memory limit is lifted, so no
/// push raises (a raise would jump over this frame).
pub unsafe fn push_value(state: *mut ffi::lua_State, v: &Value, resp3: bool, depth: usize) -> bool {
    // SAFETY: every push below has its slots (checked here, four: a table, a key, a value and
    // one for the level below's check), and raises nothing, as the caller promises.
    unsafe {
        if depth > MAX_DEPTH || ffi::lua_checkstack(state, 4) == 0 {
            return false;
        }
        match v {
            Value::Int(n) => ffi::lua_pushnumber(state, *n as f64),
            Value::Bulk(b) => push_bytes(state, b),
            Value::Simple(s) => push_single(state, "ok", s.as_bytes()),
            Value::Error(e) => push_single(state, "err", error_text(e).as_bytes()),
            Value::Nil if resp3 => ffi::lua_pushnil(state),
            Value::Nil => ffi::lua_pushboolean(state, 0),
            Value::Array(items) | Value::Push(items) => {
                ffi::lua_createtable(state, items.len().try_into().unwrap_or(0), 0);
                for (i, item) in items.iter().enumerate() {
                    if !push_value(state, item, resp3, depth + 1) {
                        return false;
                    }
                    ffi::lua_rawseti(state, -2, (i + 1) as ffi::lua_Integer);
                }
            }
            Value::Double(d) => {
                ffi::lua_createtable(state, 0, 1);
                push_bytes(state, b"double");
                ffi::lua_pushnumber(state, *d);
                ffi::lua_rawset(state, -3);
            }
            Value::Boolean(b) => ffi::lua_pushboolean(state, i32::from(*b)),
            Value::BigNumber(n) => push_single(state, "big_number", n.as_bytes()),
            Value::Verbatim { format, text } => {
                ffi::lua_createtable(state, 0, 1);
                push_bytes(state, b"verbatim_string");
                ffi::lua_createtable(state, 0, 2);
                push_bytes(state, b"format");
                push_bytes(state, format.as_bytes());
                ffi::lua_rawset(state, -3);
                push_bytes(state, b"string");
                push_bytes(state, text);
                ffi::lua_rawset(state, -3);
                ffi::lua_rawset(state, -3);
            }
            Value::Map(pairs) => {
                ffi::lua_createtable(state, 0, 1);
                push_bytes(state, b"map");
                ffi::lua_createtable(state, 0, pairs.len().try_into().unwrap_or(0));
                for (k, v) in pairs {
                    // A nil key cannot be set (Lua would raise): no command answers one.
                    if matches!(k, Value::Nil) {
                        continue;
                    }
                    if !push_value(state, k, resp3, depth + 1)
                        || !push_value(state, v, resp3, depth + 1)
                    {
                        return false;
                    }
                    ffi::lua_rawset(state, -3);
                }
                ffi::lua_rawset(state, -3);
            }
            Value::Set(items) => {
                ffi::lua_createtable(state, 0, 1);
                push_bytes(state, b"set");
                ffi::lua_createtable(state, 0, items.len().try_into().unwrap_or(0));
                for item in items {
                    if matches!(item, Value::Nil) {
                        continue;
                    }
                    if !push_value(state, item, resp3, depth + 1) {
                        return false;
                    }
                    ffi::lua_pushboolean(state, 1);
                    ffi::lua_rawset(state, -3);
                }
                ffi::lua_rawset(state, -3);
            }
        }
        true
    }
}

/// Pushes `{err=text}`.
///
/// # Safety
/// As [`push_value`].
pub unsafe fn push_error(state: *mut ffi::lua_State, text: &str) {
    // SAFETY: as the caller promises.
    unsafe { push_single(state, "err", text.as_bytes()) }
}

/// Pushes the strings `items` as one Lua array (KEYS, ARGV).
///
/// # Safety
/// As [`push_value`], with two free slots.
pub unsafe fn push_strings(state: *mut ffi::lua_State, items: &[&[u8]]) {
    // SAFETY: as the caller promises.
    unsafe {
        ffi::lua_createtable(state, items.len().try_into().unwrap_or(0), 0);
        for (i, item) in items.iter().enumerate() {
            push_bytes(state, item);
            ffi::lua_rawseti(state, -2, (i + 1) as ffi::lua_Integer);
        }
    }
}

/// A Lua number as C's `(long long)` cast makes it on x86-64: out of range (and NaN) is
/// `i64::MIN`, where Rust's `as` would saturate.
pub fn truncate(f: f64) -> i64 {
    if (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&f) {
        f as i64
    } else {
        i64::MIN
    }
}

/// `printf("%.17g", f)`: how Redis 7.0 turns a Lua number into a command argument and a
/// `{double=...}` into a reply.
pub fn g17(f: f64) -> String {
    gfmt(f, 17)
}

/// `printf("%.<precision>g", f)` (`precision` 1 to 17).
pub fn gfmt(f: f64, precision: usize) -> String {
    if f.is_nan() {
        return if f.is_sign_negative() { "-nan" } else { "nan" }.into();
    }
    if f.is_infinite() {
        return if f < 0.0 { "-inf" } else { "inf" }.into();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.into();
    }
    let p = precision.clamp(1, 17);
    // An integer of at most `p` digits is written as its digits (the common case: the counts
    // and times limiter scripts pass), without formatting the float.
    if f.fract() == 0.0 && f.abs() < 10f64.powi(p as i32) && f.abs() <= (1u64 << 53) as f64 {
        return (f as i64).to_string();
    }
    formatted(f, p)
}

/// `gfmt` of a finite, non-zero `f` through the float's decimal expansion.
fn formatted(f: f64, p: usize) -> String {
    let sci = format!("{f:.prec$e}", prec = p - 1);
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if exp < -4 || exp >= p as i32 {
        let m = strip_zeros(mantissa);
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{m}e{sign}{:02}", exp.unsigned_abs());
    }
    let decimals = usize::try_from(p as i32 - 1 - exp).unwrap_or(0);
    strip_zeros(&format!("{f:.decimals$}")).to_owned()
}

fn strip_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

/// The names of the fields a return value's table is read by, made once per Lua state (a
/// lookup by a Rust `&str` makes the Lua string each time).
#[derive(Debug)]
pub struct Fields([mlua::LuaString; 7]);

impl Fields {
    const ERR: usize = 0;
    const OK: usize = 1;
    const DOUBLE: usize = 2;
    const BIG_NUMBER: usize = 3;
    const VERBATIM_STRING: usize = 4;
    const MAP: usize = 5;
    const SET: usize = 6;

    const NAMES: [&str; 7] = [
        "err",
        "ok",
        "double",
        "big_number",
        "verbatim_string",
        "map",
        "set",
    ];

    pub fn new(lua: &Lua) -> mlua::Result<Fields> {
        let [a, b, c, d, e, f, g] = Self::NAMES.map(|n| lua.create_string(n));
        Ok(Fields([a?, b?, c?, d?, e?, f?, g?]))
    }
}

/// How the script's return value is written.
#[derive(Clone, Copy, Debug)]
pub struct Out<'f> {
    /// The caller's protocol: what the reply is written in.
    pub proto: Proto,
    /// The script switched to RESP3 (`redis.setresp(3)`): booleans stay booleans.
    pub resp3: bool,
    pub fields: &'f Fields,
}

/// Writes the script's return value `v` to `out`.
pub fn lua_to_resp(v: &Lua_, o: Out<'_>, out: &mut BytesMut, depth: usize) {
    if depth > MAX_DEPTH {
        return reply::error(out, "ERR reached lua stack limit");
    }
    match v {
        Lua_::String(s) => reply::bulk(out, &s.as_bytes()),
        Lua_::Boolean(true) if o.resp3 => reply::boolean(out, o.proto, true),
        Lua_::Boolean(false) if o.resp3 => reply::boolean(out, o.proto, false),
        Lua_::Boolean(true) => reply::integer(out, 1),
        Lua_::Integer(n) => reply::integer(out, *n),
        Lua_::Number(f) => reply::integer(out, truncate(*f)),
        Lua_::Table(t) => table_to_resp(t, o, out, depth),
        _ => reply::null(out, o.proto),
    }
}

fn table_to_resp(t: &Table, o: Out<'_>, out: &mut BytesMut, depth: usize) {
    let field = |at: usize| t.raw_get::<Lua_>(&o.fields.0[at]).unwrap_or(Lua_::Nil);
    if let Lua_::String(e) = field(Fields::ERR) {
        let text = e.to_string_lossy();
        return reply::error(out, text.trim_matches(['\r', '\n']));
    }
    if let Lua_::String(s) = field(Fields::OK) {
        return reply::simple(out, &s.to_string_lossy());
    }
    match field(Fields::DOUBLE) {
        Lua_::Number(d) => return double(out, o.proto, d),
        Lua_::Integer(d) => return double(out, o.proto, d as f64),
        _ => {}
    }
    if let Lua_::String(n) = field(Fields::BIG_NUMBER) {
        let n = n.to_string_lossy().replace(['\r', '\n'], " ");
        return match o.proto {
            Proto::Resp2 => reply::bulk(out, n.as_bytes()),
            Proto::Resp3 => {
                out.extend_from_slice(b"(");
                out.extend_from_slice(n.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
        };
    }
    if let Lua_::Table(v) = field(Fields::VERBATIM_STRING)
        && let (Ok(Lua_::String(format)), Ok(Lua_::String(text))) =
            (v.raw_get::<Lua_>("format"), v.raw_get::<Lua_>("string"))
    {
        let format = format.to_string_lossy();
        let format = if format.len() == 3 {
            format.as_str()
        } else {
            "txt"
        };
        return reply::verbatim(out, o.proto, format, &text.as_bytes());
    }
    if let Lua_::Table(m) = field(Fields::MAP) {
        let pairs: Vec<(Lua_, Lua_)> = m.pairs::<Lua_, Lua_>().filter_map(Result::ok).collect();
        reply::map(out, o.proto, pairs.len());
        for (k, v) in &pairs {
            lua_to_resp(k, o, out, depth + 1);
            lua_to_resp(v, o, out, depth + 1);
        }
        return;
    }
    if let Lua_::Table(s) = field(Fields::SET) {
        let members: Vec<Lua_> = s
            .pairs::<Lua_, Lua_>()
            .filter_map(|p| p.ok().map(|(k, _)| k))
            .collect();
        reply::set(out, o.proto, members.len());
        for k in &members {
            lua_to_resp(k, o, out, depth + 1);
        }
        return;
    }
    let mut items = Vec::new();
    for i in 1.. {
        match t.raw_get::<Lua_>(i) {
            Ok(Lua_::Nil) | Err(_) => break,
            Ok(v) => items.push(v),
        }
    }
    reply::array(out, items.len());
    for v in &items {
        lua_to_resp(v, o, out, depth + 1);
    }
}

/// `{double=d}` as Redis 7.0 writes it: `%.17g`, a bulk string in RESP2.
fn double(out: &mut BytesMut, p: Proto, d: f64) {
    let text = g17(d);
    match p {
        Proto::Resp2 => reply::bulk(out, text.as_bytes()),
        Proto::Resp3 => {
            out.extend_from_slice(b",");
            out.extend_from_slice(text.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_as_c_prints_them() {
        assert_eq!(g17(0.1), "0.10000000000000001");
        assert_eq!(g17(3.5), "3.5");
        assert_eq!(g17(3.0), "3");
        assert_eq!(g17(2.675), "2.6749999999999998");
        assert_eq!(g17(1e20), "1e+20");
        assert_eq!(g17(1e16), "10000000000000000");
        assert_eq!(g17(1e17), "1e+17");
        assert_eq!(g17(0.0001), "0.0001");
        assert_eq!(g17(0.00001), "1.0000000000000001e-05");
        assert_eq!(g17(-2.5), "-2.5");
        assert_eq!(gfmt(1.0 / 3.0, 14), "0.33333333333333");
        assert_eq!(gfmt(100.0, 14), "100");
        assert_eq!(truncate(3.99), 3);
        assert_eq!(truncate(-3.99), -3);
        assert_eq!(truncate(1e20), i64::MIN);
    }

    /// The integer shortcut writes what the decimal expansion writes, up to its edges.
    #[test]
    fn integers_print_alike_by_either_way() {
        for p in [1, 6, 14, 16, 17] {
            let top = 10f64.powi(p as i32);
            for n in [
                1.0,
                7.0,
                42.0,
                3600000.0,
                top - 1.0,
                top,
                top + 1.0,
                9007199254740992.0,
            ] {
                for f in [n, -n] {
                    if f.abs() <= 9007199254740992.0 {
                        assert_eq!(gfmt(f, p), formatted(f, p), "{f} at {p}");
                    }
                }
            }
        }
    }

    #[test]
    fn error_replies_take_redis_s_form() {
        assert_eq!(error_text("ERR value is wrong"), "ERR value is wrong");
        assert_eq!(error_text("My Error"), "My Error");
        assert_eq!(error_text("oops"), "ERR oops");
        assert_eq!(error_text("WRONGTYPE Operation"), "WRONGTYPE Operation");
    }
}
