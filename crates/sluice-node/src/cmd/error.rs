//! Command errors: small values on the hot path, turned into wire text in one place.

use std::borrow::Cow;

use sluice_store::StoreError;

#[derive(Debug)]
pub enum CmdError {
    /// `ERR syntax error`
    Syntax,
    /// `ERR value is not an integer or out of range`
    NotInteger,
    /// `WRONGTYPE Operation against a key holding the wrong kind of value`
    WrongType,
    /// `ERR increment or decrement would overflow`
    Overflow,
    /// `ERR wrong number of arguments for '<command>' command`
    Arity,
    /// `READONLY You can't write against a read only replica.`
    ReadOnly,
    /// `NOREPLICAS Not enough good replicas to write.`
    NoReplicas,
    /// Not served here: `MOVED`, `CROSSSLOT`, `CLUSTERDOWN` or `TRYAGAIN`.
    Redirect(crate::cluster::Redirect),
    /// A full error line, prefix included (`ERR ...`, `NOPROTO ...`).
    Msg(Cow<'static, str>),
}

impl CmdError {
    pub fn msg(text: impl Into<Cow<'static, str>>) -> CmdError {
        CmdError::Msg(text.into())
    }

    /// The error line for a failure of `command` (its lower-case table name).
    pub fn text(&self, command: &str) -> String {
        match self {
            CmdError::Syntax => "ERR syntax error".into(),
            CmdError::NotInteger => "ERR value is not an integer or out of range".into(),
            CmdError::WrongType => {
                "WRONGTYPE Operation against a key holding the wrong kind of value".into()
            }
            CmdError::Overflow => "ERR increment or decrement would overflow".into(),
            CmdError::Arity => format!("ERR wrong number of arguments for '{command}' command"),
            CmdError::ReadOnly => "READONLY You can't write against a read only replica.".into(),
            CmdError::NoReplicas => "NOREPLICAS Not enough good replicas to write.".into(),
            CmdError::Redirect(r) => redirect_text(r),
            CmdError::Msg(m) => m.to_string(),
        }
    }
}

impl From<sluice_core::spec::SpecError> for CmdError {
    fn from(e: sluice_core::spec::SpecError) -> CmdError {
        CmdError::msg(format!("ERR {e}"))
    }
}

impl CmdError {
    /// Refused before it ran (a redirect, a read-only replica, too few good replicas): counted as rejected, not failed.
    pub fn refused(&self) -> bool {
        matches!(
            self,
            CmdError::ReadOnly | CmdError::NoReplicas | CmdError::Redirect(_)
        )
    }
}

impl From<crate::cluster::Redirect> for CmdError {
    fn from(r: crate::cluster::Redirect) -> CmdError {
        CmdError::Redirect(r)
    }
}

/// A redirect as the Redis Cluster error a client expects.
fn redirect_text(r: &crate::cluster::Redirect) -> String {
    use crate::cluster::Redirect;
    match r {
        Redirect::Moved {
            slot, host, port, ..
        } => format!("MOVED {slot} {host}:{port}"),
        Redirect::CrossSlot => "CROSSSLOT Keys in request don't hash to the same slot".into(),
        Redirect::Down => "CLUSTERDOWN Hash slot not served".into(),
        Redirect::TryAgain => "TRYAGAIN Slot is being migrated; retry in a few milliseconds".into(),
    }
}

impl From<crate::rules::RuleError> for CmdError {
    fn from(e: crate::rules::RuleError) -> CmdError {
        CmdError::msg(e.0)
    }
}

impl From<StoreError> for CmdError {
    fn from(e: StoreError) -> CmdError {
        match e {
            StoreError::WrongType => CmdError::WrongType,
            StoreError::NotInteger => CmdError::NotInteger,
            StoreError::Overflow => CmdError::Overflow,
            StoreError::OutOfMemory => {
                CmdError::msg("OOM command not allowed when used memory > 'maxmemory'.")
            }

            StoreError::Check(sluice_core::CheckError::WrongType) => CmdError::WrongType,
            StoreError::Check(e) => CmdError::msg(format!("ERR {e:?}")),
        }
    }
}
