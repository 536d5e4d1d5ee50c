//! The `bit` library scripts get in Redis (Lua BitOp 1.0): 32-bit operations on numbers.
//!
//! Every argument is first taken modulo 2^32 as BitOp does (the double plus 2^52 + 2^51, whose
//! low 32 bits are the rounded number's), and every result is a signed 32-bit number.

use mlua::{Lua, Table, Variadic};

/// BitOp's normalisation of a number to a signed 32-bit integer.
fn tobit(f: f64) -> i32 {
    (f + 6_755_399_441_055_744.0).to_bits() as u32 as i32
}

fn fold(args: Variadic<f64>, init: i32, op: fn(i32, i32) -> i32) -> f64 {
    f64::from(args.iter().fold(init, |acc, &x| op(acc, tobit(x))))
}

/// The `bit` table.
pub fn library(lua: &Lua) -> mlua::Result<Table> {
    let bit = lua.create_table()?;
    bit.raw_set(
        "tobit",
        lua.create_function(|_, x: f64| Ok(f64::from(tobit(x))))?,
    )?;
    bit.raw_set(
        "bnot",
        lua.create_function(|_, x: f64| Ok(f64::from(!tobit(x))))?,
    )?;
    bit.raw_set(
        "band",
        lua.create_function(|_, a: Variadic<f64>| Ok(fold(a, -1, |x, y| x & y)))?,
    )?;
    bit.raw_set(
        "bor",
        lua.create_function(|_, a: Variadic<f64>| Ok(fold(a, 0, |x, y| x | y)))?,
    )?;
    bit.raw_set(
        "bxor",
        lua.create_function(|_, a: Variadic<f64>| Ok(fold(a, 0, |x, y| x ^ y)))?,
    )?;
    let shift = |op: fn(i32, u32) -> i32| {
        move |_: &Lua, (x, n): (f64, f64)| Ok(f64::from(op(tobit(x), tobit(n) as u32 & 31)))
    };
    bit.raw_set("lshift", lua.create_function(shift(|x, n| x << n))?)?;
    bit.raw_set(
        "rshift",
        lua.create_function(shift(|x, n| ((x as u32) >> n) as i32))?,
    )?;
    bit.raw_set("arshift", lua.create_function(shift(|x, n| x >> n))?)?;
    bit.raw_set(
        "rol",
        lua.create_function(shift(|x, n| (x as u32).rotate_left(n) as i32))?,
    )?;
    bit.raw_set(
        "ror",
        lua.create_function(shift(|x, n| (x as u32).rotate_right(n) as i32))?,
    )?;
    bit.raw_set(
        "bswap",
        lua.create_function(|_, x: f64| Ok(f64::from(tobit(x).swap_bytes())))?,
    )?;
    bit.raw_set(
        "tohex",
        lua.create_function(|_, (x, n): (f64, Option<f64>)| {
            let mut n = n.map_or(8, tobit);
            let upper = n < 0;
            n = n.unsigned_abs().min(8) as i32;
            let v = u64::from(tobit(x) as u32) & ((1u64 << (4 * n)) - 1);
            let width = n as usize;
            Ok(if upper {
                format!("{v:0width$X}")
            } else {
                format!("{v:0width$x}")
            })
        })?,
    )?;
    Ok(bit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_wrap_as_bitop_wraps_them() {
        assert_eq!(tobit(4294967295.0), -1);
        assert_eq!(tobit(4294967296.0 + 5.0), 5);
        assert_eq!(tobit(-1.0), -1);
        assert_eq!(tobit(2.5), 2);
        assert_eq!(tobit(3.5), 4);
    }
}
