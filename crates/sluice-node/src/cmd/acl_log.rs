//! Writing a connection's refusals to `ACL LOG` (`acl::log`): a command the user may not run,
//! a key it may not touch, a failed login. Kept apart from the `ACL` command so that the
//! places that refuse (dispatch, the key check, AUTH) need nothing else of it.

use super::Ctx;
use crate::acl::log::{Denial, Reason};

/// Logs a refusal for this connection in `ACL LOG`, under `username` or the session's user
/// (the log keeps at most 128 bytes of each name).
pub fn log_denial(ctx: &Ctx<'_>, reason: Reason, object: &[u8], username: Option<&[u8]>) {
    let session = &*ctx.session;
    let client = &session.client;
    let client_info = format!(
        "id={} addr={} laddr={} name={} user={}",
        client.id,
        client.addr_text(),
        client.laddr_text(),
        client.name.lock().as_deref().unwrap_or(""),
        session.user.name
    );
    ctx.shared.acl.log.note(Denial {
        reason,
        context: if session.transaction.is_some() {
            "multi"
        } else {
            "toplevel"
        },
        object,
        username: username.unwrap_or(session.user.name.as_bytes()),
        client_info,
    });
}
