//! Per-key state of every algorithm, and the dispatcher the store calls.
//!
//! CONTRACT (the store codes against exactly this):
//! - `State` is the stored value of one limiter key; `State::algo()` names its algorithm.
//! - `check(slot, algo, params, now, dry)`: `slot` is `None` for a missing (or expired) key.
//!   Returns the decision and, unless `dry`, updates `slot` in place: `Some(new)` to store,
//!   `None` when the key is back to its fresh state (the store then drops it). The store keeps
//!   the entry until `now + decision.reset_after`, when it is fresh again.
//! - `Err(WrongType)` when `slot` holds another algorithm's state; errors change nothing.

use crate::{Algo, CheckError, Decision, Nanos, Params};

/// The stored state of one limiter key. (Placeholder shape; the algorithms module defines it.)
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    Token { tat: Nanos },
}

impl State {
    pub fn algo(&self) -> Algo {
        match self {
            State::Token { .. } => Algo::Token,
        }
    }

    /// Bytes this state owns on the heap (LOG's ring), for memory accounting.
    pub fn heap_bytes(&self) -> usize {
        0
    }
}

/// Makes one check against `slot`. See the module docs for the contract.
pub fn check(
    slot: &mut Option<State>,
    algo: Algo,
    params: &Params,
    now: Nanos,
    dry: bool,
) -> Result<Decision, CheckError> {
    let _ = (slot, algo, params, now, dry);
    Err(CheckError::CostExceedsCapacity)
}
