//! What a hold on shards (a script's run, an EXEC) takes for each command it runs: the shards
//! of the command's keys, none, or all (see `sluice_store::Store::holding`).

use sluice_resp::RequestRef;
use sluice_store::{Holding, ShardBusy, Store};

use super::table::CommandSpec;

/// Commands refused inside a script though Redis allows them, and that an EXEC runs unheld:
/// they take a lock some thread holds while it waits on shards (FLUSHALL and FLUSHDB the
/// journal's spill lock, INFO and CLUSTER the replication state, held by the replication thread
/// while it drains the shards), so a holder could deadlock with it.
pub(super) const SCRIPT_REFUSED: &[&str] = &["flushall", "flushdb", "info", "cluster"];

/// Keyless commands that touch no key: a script calling them holds nothing more. Every other
/// keyless command (DBSIZE, INFO, CLUSTER COUNTKEYSINSLOT, RL.ALLOW) may read every shard.
const TOUCH_NO_KEY: &[&str] = &[
    "echo",
    "ping",
    "time",
    "select",
    "command",
    "lastsave",
    "readonly",
    "readwrite",
    "publish",
    "slowlog",
];

/// Inside a hold (a script's, or EXEC's), holds what `request` will touch: its keys' shards by
/// the table's key positions; nothing for a command that touches no key; every shard for one
/// that finds its keys by itself.
pub(super) fn hold_for(
    store: &Store,
    spec: &CommandSpec,
    request: RequestRef<'_>,
) -> Result<Held, ShardBusy> {
    if spec.first_key > 0 && !spec.routed_after_parse {
        store.hold(spec.key_args(request)).map(|()| Held::Keys)
    } else if spec.first_key == 0 && TOUCH_NO_KEY.contains(&spec.name) {
        Ok(Held::Nothing)
    } else {
        store.hold_all().map(|()| Held::All)
    }
}

/// What [`hold_for`] held for a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Held {
    /// The shards of its keys, by the table's key positions.
    Keys,
    /// Nothing: it touches no key.
    Nothing,
    /// Every shard: it finds its keys by itself.
    All,
}

/// Whether a command may run under a hold: not those that take a lock some thread holds
/// while it waits on shards (see [`SCRIPT_REFUSED`]).
pub(super) fn holdable(spec: &CommandSpec) -> bool {
    !SCRIPT_REFUSED.contains(&spec.name)
}

/// Holds the shards of `keys` until the returned hold drops, so a command over several keys
/// (RENAME, COPY, LMOVE, SMOVE, MSET, the STORE commands) is atomic: no other client's command
/// comes between its reads and its writes. Inside a script or an EXEC the hold is already
/// there, with these keys (the table names them), and nothing more is taken.
pub(super) fn hold_keys<'s>(store: &'s Store, keys: &[&[u8]]) -> Option<Holding<'s>> {
    let hold = store.holding();
    if hold.is_some() {
        let first = store.hold(keys.iter().copied());
        debug_assert!(
            first.is_ok(),
            "a thread's first hold cannot meet a busy shard"
        );
    }
    hold
}
