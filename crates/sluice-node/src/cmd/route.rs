//! Whether this node serves a call: the cluster's slots and a replica's role, decided in one
//! place for every command (before parsing, by the table's key positions, or after, for the
//! commands that know their keys only then) and for Envoy's service.

use super::{CmdError, Ctx};

/// Why this node does not serve a call.
#[derive(Debug)]
pub enum Refusal {
    /// Another node serves these keys, or none does now.
    Redirect(crate::cluster::Redirect),
    /// A write on a read-only replica.
    ReadOnly,
    /// A write on a primary with too few replicas acked within `min-replicas-max-lag`.
    NoReplicas,
}

/// Whether this node serves a call on `keys` that does or does not `write`: the cluster's slot
/// check (MOVED, CROSSSLOT, CLUSTERDOWN, TRYAGAIN), then a read-only replica's refusal of
/// writes, then a primary's refusal of writes with too few good replicas
/// (`min-replicas-to-write`). The one place these are decided, for every RESP command and for Envoy's service.
///
/// `view` is the caller's cached table; `readonly_conn` whether it sent READONLY (a replica
/// then serves its shard's reads).
#[inline]
pub fn may_serve<'k>(
    shared: &crate::shared::Shared,
    view: &mut Option<std::sync::Arc<crate::cluster::View>>,
    readonly_conn: bool,
    keys: impl Iterator<Item = &'k [u8]>,
    write: bool,
) -> Result<(), Refusal> {
    let mut keys = keys.peekable();
    if let Some(cluster) = &shared.cluster
        && keys.peek().is_some()
    {
        cluster
            .check(view, keys, write, readonly_conn)
            .map_err(Refusal::Redirect)?;
    }
    if write && shared.repl.is_readonly() {
        return Err(Refusal::ReadOnly);
    }
    if write && shared.repl.min_replicas.refuses_writes() {
        return Err(Refusal::NoReplicas);
    }
    Ok(())
}

/// Redis's refusal of a key the user's key patterns do not grant.
pub const NOPERM_KEY: &str = "NOPERM No permissions to access a key";

/// [`may_serve`] for a connection's command, as its error, after the user's key permissions
/// (one load for a user with `~*`; the keys are gathered only for a user without it, out of
/// line, so the common path stays as small as it was without key rules).
#[inline]
pub(super) fn check_serve<'k>(
    ctx: &mut Ctx<'_>,
    keys: impl Iterator<Item = &'k [u8]>,
    write: bool,
) -> Result<(), CmdError> {
    if ctx.session.user.all_keys() {
        serve(ctx, keys, write)
    } else {
        check_keys_then_serve(ctx, keys, write)
    }
}

#[cold]
#[inline(never)]
fn check_keys_then_serve<'k>(
    ctx: &mut Ctx<'_>,
    keys: impl Iterator<Item = &'k [u8]>,
    write: bool,
) -> Result<(), CmdError> {
    let keys: Vec<&[u8]> = keys.collect();
    if let Some(key) = keys.iter().find(|k| !ctx.session.user.may_touch(k, write)) {
        super::acl_log::log_denial(ctx, crate::acl::log::Reason::Key, key, None);
        return Err(CmdError::msg(NOPERM_KEY));
    }
    serve(ctx, keys.into_iter(), write)
}

#[inline]
fn serve<'k>(
    ctx: &mut Ctx<'_>,
    keys: impl Iterator<Item = &'k [u8]>,
    write: bool,
) -> Result<(), CmdError> {
    let readonly = ctx.session.readonly;
    let tls = ctx.session.tls;
    may_serve(
        ctx.shared,
        &mut ctx.session.cluster_view,
        readonly,
        keys,
        write,
    )
    .map_err(|r| match r {
        Refusal::Redirect(r) => CmdError::Redirect(r.for_client(tls)),
        Refusal::ReadOnly => CmdError::ReadOnly,
        Refusal::NoReplicas => CmdError::NoReplicas,
    })
}
