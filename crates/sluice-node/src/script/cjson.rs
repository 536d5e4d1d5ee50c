//! A small `cjson` for scripts (`cjson.encode`, `cjson.decode`, `cjson.null`), over serde_json.
//!
//! As lua-cjson: a table whose keys are exactly 1..n is an array (an empty table is an object,
//! `{}`), any other an object whose number keys become strings; numbers print as `%.14g`; JSON
//! `null` decodes to `cjson.null` (a light userdata that encodes back to `null`). Nesting is
//! bounded at 1000 both ways, as lua-cjson's default.

use mlua::{LightUserData, Lua, Table, Value as Lua_};
use serde_json::Value as Json;

const MAX_DEPTH: usize = 1000;

fn null() -> Lua_ {
    Lua_::LightUserData(LightUserData(std::ptr::null_mut()))
}

/// The `cjson` table.
pub fn library(lua: &Lua) -> mlua::Result<Table> {
    let cjson = lua.create_table()?;
    cjson.raw_set(
        "encode",
        lua.create_function(|lua, v: Lua_| {
            let mut out = String::new();
            encode(&v, &mut out, 0).map_err(mlua::Error::runtime)?;
            lua.create_string(out)
        })?,
    )?;
    cjson.raw_set(
        "decode",
        lua.create_function(|lua, text: mlua::LuaString| {
            let json: Json = serde_json::from_slice(&text.as_bytes()).map_err(|e| {
                mlua::Error::runtime(format!("Expected value but found invalid token: {e}"))
            })?;
            decode(lua, &json, 0)
        })?,
    )?;
    cjson.raw_set("null", null())?;
    Ok(cjson)
}

fn encode(v: &Lua_, out: &mut String, depth: usize) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err("Cannot serialise, excessive nesting (1001)".into());
    }
    match v {
        Lua_::Nil => out.push_str("null"),
        Lua_::LightUserData(u) if u.0.is_null() => out.push_str("null"),
        Lua_::Boolean(b) => out.push_str(if *b { "true" } else { "false" }),
        Lua_::Integer(n) => out.push_str(&n.to_string()),
        Lua_::Number(f) if f.is_finite() => out.push_str(&super::convert::gfmt(*f, 14)),
        Lua_::Number(_) => return Err("Cannot serialise number: must not be NaN or Inf".into()),
        Lua_::String(s) => {
            let s = s.to_string_lossy();
            out.push_str(&serde_json::to_string(&s).map_err(|e| e.to_string())?);
        }
        Lua_::Table(t) => {
            let pairs: Vec<(Lua_, Lua_)> = t.pairs::<Lua_, Lua_>().filter_map(Result::ok).collect();
            let n = pairs.len();
            let is_array = n > 0
                && pairs.iter().all(|(k, _)| match k {
                    Lua_::Integer(i) => *i >= 1 && (*i as usize) <= n,
                    Lua_::Number(f) => f.fract() == 0.0 && *f >= 1.0 && (*f as usize) <= n,
                    _ => false,
                });
            if is_array {
                out.push('[');
                for i in 1..=n {
                    if i > 1 {
                        out.push(',');
                    }
                    let item = t.raw_get::<Lua_>(i).map_err(|e| e.to_string())?;
                    encode(&item, out, depth + 1)?;
                }
                out.push(']');
            } else {
                out.push('{');
                for (i, (k, v)) in pairs.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let key = match k {
                        Lua_::String(s) => s.to_string_lossy(),
                        Lua_::Integer(n) => n.to_string(),
                        Lua_::Number(f) => super::convert::gfmt(*f, 14),
                        _ => {
                            return Err(
                                "Cannot serialise table: table key must be a number or string"
                                    .into(),
                            );
                        }
                    };
                    out.push_str(&serde_json::to_string(&key).map_err(|e| e.to_string())?);
                    out.push(':');
                    encode(v, out, depth + 1)?;
                }
                out.push('}');
            }
        }
        other => {
            return Err(format!(
                "Cannot serialise {}: type not supported",
                other.type_name()
            ));
        }
    }
    Ok(())
}

fn decode(lua: &Lua, v: &Json, depth: usize) -> mlua::Result<Lua_> {
    if depth > MAX_DEPTH {
        return Err(mlua::Error::runtime(
            "Found too many nested data structures (1001)",
        ));
    }
    Ok(match v {
        Json::Null => null(),
        Json::Bool(b) => Lua_::Boolean(*b),
        Json::Number(n) => Lua_::Number(n.as_f64().unwrap_or(0.0)),
        Json::String(s) => Lua_::String(lua.create_string(s)?),
        Json::Array(items) => {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, decode(lua, item, depth + 1)?)?;
            }
            Lua_::Table(t)
        }
        Json::Object(fields) => {
            let t = lua.create_table_with_capacity(0, fields.len())?;
            for (k, item) in fields {
                t.raw_set(k.as_str(), decode(lua, item, depth + 1)?)?;
            }
            Lua_::Table(t)
        }
    })
}
