//! `AUTH [username] password` — authenticates the connection against `requirepass`.
//!
//! There is one user, `default`, as in Redis without ACLs: its password is `requirepass`, and
//! with no password set it accepts anything under the two-argument form.

use sluice_resp::reply;

use super::{Args, CmdError, Command, Ctx};
use crate::shared::Shared;

pub const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";

#[derive(Debug)]
pub struct Auth<'a> {
    user: Option<&'a [u8]>,
    pass: &'a [u8],
}

/// Checks a username/password pair; `user` None means the legacy one-argument form.
pub fn check(shared: &Shared, user: Option<&[u8]>, pass: &[u8]) -> Result<(), CmdError> {
    let required = shared.requirepass.read();
    if user.is_some_and(|u| u != b"default") {
        return Err(CmdError::msg(WRONGPASS));
    }
    match required.as_deref() {
        None if user.is_none() => Err(CmdError::msg(
            "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
        )),
        None => Ok(()),
        Some(p) if constant_time_eq(p.as_bytes(), pass) => Ok(()),
        Some(_) => Err(CmdError::msg(WRONGPASS)),
    }
}

/// Compares without an early exit, so response time says nothing about a prefix match.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl<'a> Command<'a> for Auth<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let first = args.key()?;
        let auth = match args.next() {
            None => Auth {
                user: None,
                pass: first,
            },
            Some(pass) => Auth {
                user: Some(first),
                pass,
            },
        };
        args.finish()?;
        Ok(auth)
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        check(ctx.shared, self.user, self.pass)?;
        ctx.session.authenticated = true;
        reply::simple(ctx.out, "OK");
        Ok(())
    }
}
