//! `AUTH [username] password` — logs the connection in as an ACL user.
//!
//! The one-argument form names the `default` user, whose password is `requirepass`; with no
//! password set it is refused, as in Redis. Every failure answers the same `WRONGPASS`, so a
//! client learns nothing about which users exist.

use std::sync::Arc;

use sluice_resp::reply;

use super::{Args, CmdError, Command, Ctx};
use crate::acl::User;
use crate::acl::log::Reason;
use crate::shared::Shared;

pub const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";

#[derive(Debug)]
pub struct Auth<'a> {
    user: Option<&'a [u8]>,
    pass: &'a [u8],
}

/// Checks a username/password pair; `user` None means the legacy one-argument form. Returns
/// the user to run as.
pub fn check(shared: &Shared, user: Option<&[u8]>, pass: &[u8]) -> Result<Arc<User>, CmdError> {
    let Some(user) = user else {
        let default = shared.acl.default_user();
        if default.needs_no_password() {
            return Err(CmdError::msg(
                "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
            ));
        }
        return default
            .accepts(pass)
            .then_some(default)
            .ok_or_else(|| CmdError::msg(WRONGPASS));
    };
    std::str::from_utf8(user)
        .ok()
        .and_then(|name| shared.acl.authenticate(name, pass))
        .ok_or_else(|| CmdError::msg(WRONGPASS))
}

/// [`check`] for this connection, a failure logged in `ACL LOG` (reason `auth`) under the
/// user name tried (its first 128 bytes: the name is a stranger's to choose).
pub fn login(ctx: &Ctx<'_>, user: Option<&[u8]>, pass: &[u8]) -> Result<Arc<User>, CmdError> {
    check(ctx.shared, user, pass).inspect_err(|_| {
        let name = user.unwrap_or(b"default");
        super::acl_log::log_denial(ctx, Reason::Auth, b"AUTH", Some(name));
    })
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
        let user = login(ctx, self.user, self.pass)?;
        ctx.session.login(user);
        ctx.session.authenticated = true;
        reply::simple(ctx.out, "OK");
        Ok(())
    }
}
