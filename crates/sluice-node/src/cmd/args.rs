//! A cursor over a request's arguments (after the command name).
//!
//! Arguments are `Bytes` slices of the connection's read buffer: nothing here copies them.
//! Number parsing follows Redis (`string2ll`): optional '-', digits only, no '+', no spaces,
//! no leading zeros except "0" itself.

use sluice_resp::{ArgIter, RequestRef};

use super::CmdError;

/// The arguments of one request after the command name, borrowed from its frame.
#[derive(Debug)]
pub struct Args<'a> {
    request: RequestRef<'a>,
    pos: usize,
}

impl<'a> Args<'a> {
    /// The arguments of `request` after its name.
    pub fn new(request: RequestRef<'a>) -> Args<'a> {
        Args { request, pos: 1 }
    }

    /// The next argument, if any.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<&'a [u8]> {
        let item = self.request.arg(self.pos)?;
        self.pos += 1;
        Some(item)
    }

    /// The next argument; a missing one is a syntax error.
    pub fn required(&mut self) -> Result<&'a [u8], CmdError> {
        self.next().ok_or(CmdError::Syntax)
    }

    /// The next argument, which must exist (the table's arity guarantees it).
    pub fn key(&mut self) -> Result<&'a [u8], CmdError> {
        self.next().ok_or(CmdError::Arity)
    }

    /// The next argument as an i64, or `value is not an integer or out of range`.
    pub fn i64(&mut self) -> Result<i64, CmdError> {
        parse_i64(self.required()?).ok_or(CmdError::NotInteger)
    }

    /// Arguments not yet consumed.
    pub fn remaining(&self) -> usize {
        self.request.len().saturating_sub(self.pos)
    }

    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// Every argument not yet consumed, consuming them.
    pub fn rest(&mut self) -> ArgIter<'a> {
        let rest = self.request.args_from(self.pos);
        self.pos = self.request.len();
        rest
    }

    /// The arguments not yet consumed as they arrived on the wire, with their headers (see
    /// [`Request::wire_from`]); `None` when none are left or the request was not a wire frame.
    pub fn wire_rest(&self) -> Option<&'a [u8]> {
        self.request.wire_from(self.pos)
    }

    /// Errors with a syntax error if arguments are left over.
    pub fn finish(&self) -> Result<(), CmdError> {
        if self.is_empty() {
            Ok(())
        } else {
            Err(CmdError::Syntax)
        }
    }
}

/// A command's key and the arguments after it (`SADD key member [member ...]`, `HDEL key
/// field [field ...]`, ...).
#[derive(Debug)]
pub struct KeyAnd<'a> {
    pub key: &'a [u8],
    pub rest: ArgIter<'a>,
}

impl<'a> KeyAnd<'a> {
    pub fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(KeyAnd {
            key: args.key()?,
            rest: args.rest(),
        })
    }
}

/// Parses a Redis-style signed 64-bit integer (Redis's `string2ll`, shared with the parser).
pub fn parse_i64(b: &[u8]) -> Option<i64> {
    sluice_resp::string2ll(b)
}

pub use sluice_core::spec::parse_u64;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_parse_like_redis() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-5"), Some(-5));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_i64(b"9223372036854775808"), None);
        for bad in [
            &b""[..],
            b"-",
            b"+1",
            b" 1",
            b"1 ",
            b"01",
            b"-0",
            b"1.5",
            b"abc",
        ] {
            assert_eq!(parse_i64(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
    }

    #[test]
    fn cursor_walks_and_finishes() {
        let request = sluice_resp::Request::from_args(&["CMD", "a", "12"]);
        let mut args = Args::new(request.view());
        assert_eq!(args.required().unwrap(), b"a");
        assert!(args.finish().is_err());
        assert_eq!(args.i64().unwrap(), 12);
        assert!(args.finish().is_ok());
        assert!(matches!(args.required(), Err(CmdError::Syntax)));
    }
}
