//! `CL.THROTTLE key max_burst count period [quantity]` — redis-cell's command, for users who
//! switch without changing code.
//!
//! # Format
//! `*5 :limited :max_burst+1 :remaining :retry_after_s :reset_after_s` — seconds rounded as
//! redis-cell rounds them, `retry_after_s` -1 when allowed. Errors carry redis-cell's texts. The
//! state is GCRA's, shared with `RL.CHECK ... ALGO GCRA` on the same key.

use super::gcra::{CheckFn, CompatRequest, GcraCompat, ParseFn};
use sluice_core::compat::{self, ClThrottle as Request};

/// `CL.THROTTLE`: [`GcraCompat`] over redis-cell's arguments.
pub type ClThrottle<'a> = GcraCompat<'a, Request>;

impl CompatRequest for Request {
    const PARSE: ParseFn<Self> = Request::parse;
    const CHECK: CheckFn<Self> = compat::cl_throttle;
    const BUCKET: fn(&Self) -> compat::Bucket = Request::bucket;
}
