//! # sluice-core — the rate-limiting algorithms
//!
//! Pure functions `(state, params, now) -> (decision, new state)`. No I/O, no clock reads, no
//! allocation on the check path (LOG keeps its ring of timestamps in place). Time is integer
//! nanoseconds ([`Nanos`]) with saturating arithmetic, so nothing overflows and sub-millisecond
//! emission intervals stay exact (see each algorithm's module for its rounding rule).
//!
//! # Layout
//! - [`time`]: the `Nanos` newtype.
//! - [`params`]: `Algo`, `Params` (validated arguments of one check).
//! - [`decision`]: `Decision`, the five fields of an `RL.CHECK` reply.
//! - [`state`]: `State`, the per-key state of each algorithm, and [`check`], the dispatcher.
//! - one module per algorithm: [`token`] (TOKEN and GCRA), [`sliding`], [`fixed`], [`log`],
//!   [`leaky`].
//! - [`lease`]: in-flight leases (`RL.ACQUIRE`, `RL.RELEASE`, `RL.RENEW`), the one state that
//!   is not a rate limit.
//! - [`settle`](mod@settle): `RL.SETTLE`, correcting a check of an estimated cost by the actual one.
//! - [`token_lease`]: `RL.LEASE`, tokens a gateway takes from a key before it admits them.
//! - [`size`]: byte sizes as Redis's config writes them (`64mb`), for flags.
//! - [`compat`]: redis-cell `CL.THROTTLE` and Redis `GCRA` replies on top of the GCRA core.

pub mod compat;
pub mod decision;
pub mod fixed;
pub mod leaky;
pub mod lease;
pub mod log;
pub mod params;
pub mod scope;
pub mod settle;
pub mod size;
pub mod sliding;
pub mod spec;
pub mod state;
pub mod time;
pub mod token;
pub mod token_lease;

pub use decision::Decision;
pub use lease::LEASE_MAX;
pub use log::LOG_LIMIT_MAX;
pub use params::{Algo, CheckError, MAX_SPAN, Params};
pub use settle::settle;
pub use state::{State, acquire, check, release, renew};
pub use time::Nanos;
