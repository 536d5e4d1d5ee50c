//! `RESET` — back to a fresh connection: RESP2, no name, no transaction, no subscriptions, not
//! READONLY, the `default` user again (unauthenticated if it has a password).

use std::sync::atomic::Ordering::Relaxed;

use sluice_resp::reply::{self, Proto};

use super::{Args, CmdError, Command, Ctx};

#[derive(Debug)]
pub struct Reset;

impl Command<'_> for Reset {
    fn parse(_args: &mut Args<'_>) -> Result<Self, CmdError> {
        Ok(Reset)
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        ctx.session.proto = Proto::Resp2;
        ctx.session.transaction = None;
        ctx.session.watching = None;
        ctx.session.client.multi.store(-1, Relaxed);
        // Redis's RESET also leaves READONLY mode.
        ctx.session.readonly = false;
        super::pubsub::clear(ctx.shared, &mut ctx.session.subs, ctx.session.client.id);
        ctx.session
            .client
            .set_kind(crate::clients::ClientKind::Normal);
        ctx.session.client.set_subs(0, 0);
        ctx.session.client.resp.store(2, Relaxed);
        *ctx.session.client.name.lock() = None;
        ctx.session.login(ctx.shared.acl.default_user());
        reply::simple(ctx.out, "RESET");
        Ok(())
    }
}
