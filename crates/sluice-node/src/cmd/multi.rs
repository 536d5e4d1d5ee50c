//! `MULTI`, `EXEC`, `DISCARD` — queue commands and run them back to back.
//!
//! Clients such as redis-py wrap a pipeline in MULTI/EXEC by default, so the block is accepted
//! and answered as Redis does: `+QUEUED` per command, then EXEC's array of replies; a command
//! refused while queueing (unknown, wrong arity) aborts the block with `EXECABORT`. EXEC runs the
//! queued commands one after another on this connection, holding the shards of every key they
//! name (and of the watched keys) from the WATCH check to the last reply, so no other client's
//! command comes in between (as a script's hold, `eval`); a block with FLUSHALL, INFO or
//! CLUSTER runs unheld, one command at a time, as those take locks a holder could deadlock on.
//! `WATCH` (see `watch`) makes EXEC refuse when a watched key changed since.
//!
//! Invariant: EXEC answers with exactly one reply per queued command. Commands that would
//! break that (SHUTDOWN, PSYNC, SYNC, REPLCONF, whose ACK answers nothing, and the
//! (un)subscribe family, whose replies are one per channel) carry the `no_multi` flag and are refused when queued, as Redis refuses SHUTDOWN:
//! `-ERR Command not allowed inside a transaction`, and the EXEC that follows aborts.
//!
//! The queue is bounded as Redis bounds it: its bytes count with the connection's unparsed
//! input against `client-query-buffer-limit` (`conn::Core::check_limits`), and a client past it
//! is closed as one whose query buffer is. Each queued request is a copy of its own, so what
//! the queue holds is what it counts (a frame split from the read buffer would keep that whole
//! buffer alive).

use std::sync::atomic::Ordering::Relaxed;

use sluice_resp::reply;
use sluice_resp::{Request, RequestRef};

use super::{Args, CmdError, Command, Ctx, execute, lookup};

/// What a connection holds between MULTI and EXEC.
#[derive(Debug, Default)]
pub struct Transaction {
    pub queued: Vec<Request>,
    /// The bytes `queued` holds ([`Request::footprint`]).
    pub bytes: usize,
    /// A command was refused while queueing: EXEC must abort.
    pub failed: bool,
}

impl Transaction {
    /// Queues a copy of `request`. Once the block has failed nothing more is kept (EXEC will
    /// abort it), as Redis does; the command is still answered `QUEUED`.
    pub fn queue(&mut self, request: RequestRef<'_>) {
        if self.failed {
            return;
        }
        let request = request.to_request();
        self.bytes = self.bytes.saturating_add(request.footprint());
        self.queued.push(request);
    }
}

/// Commands that act on the transaction itself rather than being queued.
pub fn controls_transaction(name: &str) -> bool {
    matches!(
        name,
        "multi" | "exec" | "discard" | "quit" | "reset" | "watch"
    )
}

#[derive(Debug)]
pub struct Multi;

impl Command<'_> for Multi {
    fn parse(_args: &mut Args<'_>) -> Result<Self, CmdError> {
        Ok(Multi)
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        if ctx.session.transaction.is_some() {
            return Err(CmdError::msg("ERR MULTI calls can not be nested"));
        }
        ctx.session.transaction = Some(Transaction::default());
        ctx.session.client.multi.store(0, Relaxed);
        reply::simple(ctx.out, "OK");
        Ok(())
    }
}

#[derive(Debug)]
pub struct Exec;

impl Command<'_> for Exec {
    fn parse(_args: &mut Args<'_>) -> Result<Self, CmdError> {
        Ok(Exec)
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let Some(tx) = ctx.session.transaction.take() else {
            return Err(CmdError::msg("ERR EXEC without MULTI"));
        };
        ctx.session.client.multi.store(-1, Relaxed);
        let watching = ctx.session.watching.take();
        if tx.failed {
            return Err(CmdError::msg(
                "EXECABORT Transaction discarded because of previous errors.",
            ));
        }
        // The shards of every key the block names, and of the watched keys, held from the
        // check of the watched keys to the last reply: no other client's command comes in
        // between. The first hold of a thread takes them in ascending order and cannot fail.
        let store = &ctx.shared.store;
        let specs: Vec<_> = tx
            .queued
            .iter()
            .map(|r| r.arg(0).and_then(lookup))
            .collect();
        let isolated = specs.iter().flatten().all(|s| super::hold::holdable(s));
        let hold = if isolated { store.holding() } else { None };
        if hold.is_some() {
            let mut keys: Vec<&[u8]> = Vec::new();
            let mut held = Ok(());
            for (spec, request) in specs.iter().zip(&tx.queued) {
                let Some(spec) = spec else { continue };
                if spec.first_key > 0 && !spec.routed_after_parse {
                    keys.extend(spec.key_args(request.view()));
                } else {
                    // Nothing, or every shard at once (ascending, from none held).
                    held = held.and(super::hold::hold_for(store, spec, request.view()).map(drop));
                }
            }
            keys.extend(watching.iter().flat_map(|w| w.keys()));
            held = held.and(store.hold(keys));
            debug_assert!(
                held.is_ok(),
                "a thread's first hold cannot meet a busy shard"
            );
        }
        if watching.is_some_and(|w| w.dirty(ctx)) {
            reply::null_array(ctx.out, ctx.session.proto);
            return Ok(());
        }
        reply::array(ctx.out, tx.queued.len());
        ctx.session.in_exec = true;
        for request in &tx.queued {
            if ctx.output_full() {
                ctx.session.close = true;
                break;
            }
            execute(request.view(), ctx);
        }
        ctx.session.in_exec = false;
        drop(hold);
        Ok(())
    }
}

#[derive(Debug)]
pub struct Discard;

impl Command<'_> for Discard {
    fn parse(_args: &mut Args<'_>) -> Result<Self, CmdError> {
        Ok(Discard)
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        if ctx.session.transaction.take().is_none() {
            return Err(CmdError::msg("ERR DISCARD without MULTI"));
        }
        ctx.session.watching = None;
        ctx.session.client.multi.store(-1, Relaxed);
        reply::simple(ctx.out, "OK");
        Ok(())
    }
}
