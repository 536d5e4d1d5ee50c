//! Dispatch: one request through the table to its command, with every check that may refuse it
//! before it runs (arity, authentication, subscribed mode, the cluster's slots, a read-only
//! replica, a transaction's queue) in this one place.

use bytes::BytesMut;
use sluice_resp::RequestRef;
use sluice_resp::reply::{self, Proto};

use super::route::check_serve;
use super::table::flag::{NOAUTH, NOMULTI};
use super::table::{CommandSpec, lookup, row};
use super::{Args, CmdError, Ctx, LastCommand, multi, script};

/// Executes one request, appending its reply to `ctx.out`.
pub fn execute(req: RequestRef<'_>, ctx: &mut Ctx<'_>) {
    let Some(name) = req.arg(0) else {
        return;
    };
    let cached = ctx.session.last_command.and_then(|last| last.matches(name));
    let Some(spec) = cached.or_else(|| lookup(name)) else {
        if sluice_resp::is_http_request(name) {
            return drop_cross_protocol(ctx);
        }
        fail_transaction(ctx);
        ctx.shared.errors.note(b"ERR");
        return write_raw_error(ctx.out, &unknown_command(name, req.args_from(1)));
    };
    if cached.is_none() {
        ctx.session.last_command = LastCommand::new(name, spec);
    }
    let row = row(spec);
    let shared = ctx.shared;
    // Redis checks arity before authentication.
    if !spec.arity_ok(req.len()) {
        return refuse(ctx, spec, &CmdError::Arity.text(spec.name));
    }
    if !ctx.session.authenticated && !spec.has_flag(NOAUTH) {
        return refuse(ctx, spec, "NOAUTH Authentication required.");
    }
    // The user's bit for this command: one load, and one of the catalog. A command with
    // subcommands is judged by its subcommand's bit (`acl` module docs).
    if let Err(id) = shared.acl.permits(&ctx.session.user, row, req.arg(1)) {
        let name = shared.acl.catalog().name(id);
        super::acl_log::log_denial(ctx, crate::acl::log::Reason::Command, name.as_bytes(), None);
        return refuse(ctx, spec, &super::acl::noperm(name));
    }
    if ctx.session.proto == Proto::Resp2
        && ctx.session.subscribed()
        && !allowed_when_subscribed(spec.name)
    {
        return refuse(
            ctx,
            spec,
            &format!(
                "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
                spec.name
            ),
        );
    }
    // The slots and the role, by the table's key positions and write flag; a command that knows
    // them only once parsed is checked by its `run` instead (`Command::ROUTED_AFTER_PARSE`).
    if !spec.routed_after_parse
        && let Err(e) = check_serve(ctx, spec.key_args(req), spec.write)
    {
        return refuse(ctx, spec, &e.text(spec.name));
    }
    // A long script on another thread holds these keys' shards: wait for it outside the
    // lock, or answer -BUSY once it is past busy-reply-threshold.
    if crate::script::busy::any() && script::busy_refusal(ctx, spec, req) {
        return refuse(ctx, spec, script::BUSY);
    }
    if let Some(tx) = ctx.session.transaction.as_mut()
        && !multi::controls_transaction(spec.name)
    {
        if spec.has_flag(NOMULTI) {
            tx.failed = true;
            return reply::error(ctx.out, "ERR Command not allowed inside a transaction");
        }
        tx.queue(req);
        (ctx.session.client.multi)
            .store(tx.queued.len() as i32, std::sync::atomic::Ordering::Relaxed);
        return reply::simple(ctx.out, "QUEUED");
    }
    let mut args = Args::new(req);
    let result = (spec.run)(ctx, &mut args);
    ctx.session.batch.note(row);
    if let Err(e) = result {
        let stats = shared.stats.slot(ctx.session.thread);
        if e.refused() {
            stats.reject(row);
        } else {
            stats.fail(row);
        }
        let text = e.text(spec.name);
        shared.errors.note(text.as_bytes());
        reply::error(ctx.out, &text);
    }
}

/// Closes the connection without a reply and without running anything after this request,
/// with Redis's log line.
fn drop_cross_protocol(ctx: &mut Ctx<'_>) {
    sluice_log::log(&format!(
        "Possible SECURITY ATTACK detected. It looks like somebody is sending POST or Host: commands to Sluice. This is likely due to an attacker attempting to use Cross Protocol Scripting to compromise your Sluice instance. Connection from {} aborted.",
        ctx.session.client.addr_text()
    ));
    ctx.session.close = true;
}

/// What a RESP2 connection may send while subscribed.
fn allowed_when_subscribed(name: &str) -> bool {
    matches!(
        name,
        "subscribe" | "psubscribe" | "unsubscribe" | "punsubscribe" | "ping" | "quit" | "reset"
    )
}

/// A command refused inside MULTI makes the EXEC that follows abort, as in Redis.
/// A command refused before it ran (arity, authentication, subscribed mode, a cluster
/// redirect, a replica's read-only state): counted as rejected, and a transaction it was meant
/// for fails at EXEC, as in Redis.
///
/// A refused EXEC discards the transaction, if any, and answers why in Redis's words
/// (`execCommandAbort`): `EXECABORT Transaction discarded because of: ` and the error, whose
/// `ERR ` Redis never wrote there.
fn refuse(ctx: &mut Ctx<'_>, spec: &'static CommandSpec, error: &str) {
    ctx.shared.stats.slot(ctx.session.thread).reject(row(spec));
    ctx.shared.errors.note(error.as_bytes());
    if spec.name == "exec" {
        ctx.session.transaction = None;
        ctx.session.watching = None;
        (ctx.session.client.multi).store(-1, std::sync::atomic::Ordering::Relaxed);
        let cause = error.strip_prefix("ERR ").unwrap_or(error);
        return reply::error(
            ctx.out,
            &format!("EXECABORT Transaction discarded because of: {cause}"),
        );
    }
    fail_transaction(ctx);
    reply::error(ctx.out, error);
}

fn fail_transaction(ctx: &mut Ctx<'_>) {
    if let Some(tx) = ctx.session.transaction.as_mut() {
        tx.failed = true;
    }
}

/// Writes an error line from raw bytes (client bytes are echoed as sent, as Redis does), with
/// CR and LF turned into spaces so the line stays one line.
fn write_raw_error(out: &mut BytesMut, text: &[u8]) {
    out.reserve(text.len() + 3);
    out.extend_from_slice(b"-");
    out.extend(
        text.iter()
            .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
    out.extend_from_slice(b"\r\n");
}

/// Redis's text for a command it does not know, quoting the first arguments.
fn unknown_command<'a>(name: &[u8], args: impl Iterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut quoted = Vec::new();
    for a in args {
        if quoted.len() >= 128 {
            break;
        }
        let room = 128 - quoted.len();
        quoted.push(b'\'');
        quoted.extend_from_slice(&a[..a.len().min(room)]);
        quoted.extend_from_slice(b"' ");
    }
    let mut text = b"ERR unknown command '".to_vec();
    text.extend_from_slice(&name[..name.len().min(128)]);
    text.extend_from_slice(b"', with args beginning with: ");
    text.extend_from_slice(&quoted);
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_command_text_matches_redis() {
        let args = [&b"a"[..], b"b c"];
        assert_eq!(
            unknown_command(b"FOO", args.into_iter()),
            b"ERR unknown command 'FOO', with args beginning with: 'a' 'b c' "
        );
        assert_eq!(
            unknown_command(b"foo", std::iter::empty()),
            b"ERR unknown command 'foo', with args beginning with: "
        );
        let mut out = BytesMut::new();
        write_raw_error(&mut out, b"x\r\ny\xff");
        assert_eq!(&out[..], b"-x  y\xff\r\n");
    }

    /// As redis-server 7.0.15 answers (tests/tests/differential.rs found it): a refused EXEC
    /// aborts with its reason, in MULTI or not, and ends the transaction.
    #[test]
    fn a_refused_exec_aborts_the_transaction_with_its_reason() {
        let mut e = crate::Executor::new(crate::Config::default_for_tests());
        let mut run = |args: &[&str]| {
            let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
            String::from_utf8_lossy(&e.exec(&args)).into_owned()
        };
        let abort = "-EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command\r\n";
        assert_eq!(run(&["EXEC", "a"]), abort);
        assert_eq!(run(&["MULTI"]), "+OK\r\n");
        assert_eq!(run(&["INCR", "n"]), "+QUEUED\r\n");
        assert_eq!(run(&["exec", "a"]), abort);
        assert_eq!(run(&["EXEC"]), "-ERR EXEC without MULTI\r\n");
        assert_eq!(run(&["GET", "n"]), "$-1\r\n");
    }
}
