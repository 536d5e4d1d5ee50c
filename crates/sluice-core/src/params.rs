//! The arguments of one check, already parsed and validated by the caller's grammar.

use crate::Nanos;

/// The algorithm a key is limited by. A key keeps the algorithm it was created with; calling it
/// with another answers `WRONGTYPE` ([`CheckError::WrongType`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algo {
    Token,
    Gcra,
    Sliding,
    Fixed,
    Log,
    Leaky,
}

impl Algo {
    pub const ALL: [Algo; 6] = [
        Algo::Token,
        Algo::Gcra,
        Algo::Sliding,
        Algo::Fixed,
        Algo::Log,
        Algo::Leaky,
    ];

    /// Parses an `ALGO` argument, case-insensitively.
    pub fn parse(name: &[u8]) -> Option<Algo> {
        Self::ALL
            .into_iter()
            .find(|a| a.name().as_bytes().eq_ignore_ascii_case(name))
    }

    pub const fn name(self) -> &'static str {
        match self {
            Algo::Token => "TOKEN",
            Algo::Gcra => "GCRA",
            Algo::Sliding => "SLIDING",
            Algo::Fixed => "FIXED",
            Algo::Log => "LOG",
            Algo::Leaky => "LEAKY",
        }
    }
}

/// The longest span any state may cover: a bucket's full refill (BURST × ⌈period ÷ limit⌉) or
/// a window. 2^62 ns is 146 years: with it, every instant the algorithms compute stays inside
/// the u64 nanosecond range until the year 2400, so nothing saturates into a wrong answer.
/// Callers reject parameters past it (the server answers `ERR period too long`).
pub const MAX_SPAN: Nanos = Nanos(1 << 62);

/// One check's parameters.
///
/// `burst` is the capacity actually used (BURST if given, else `limit`); SLIDING, FIXED and LOG
/// ignore it and use `limit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    /// Requests allowed per `period` (≥ 1).
    pub limit: u64,
    /// The period (> 0).
    pub period: Nanos,
    /// Capacity (≥ 1) for TOKEN, GCRA and LEAKY.
    pub burst: u64,
    /// Units this request takes; 0 only reads.
    pub cost: u64,
}

/// Why a check was refused without being made. Being limited is not an error: it is a
/// [`Decision`](crate::Decision) with `allowed == false`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckError {
    /// The key holds state of another algorithm.
    WrongType,
    /// `cost` is larger than the capacity: no wait would ever let it through.
    CostExceedsCapacity,
    /// `limit` is above what this algorithm stores (LOG keeps one timestamp per unit), or an
    /// acquire's `max` above [`LEASE_MAX`](crate::LEASE_MAX).
    LimitTooLarge { max: u64 },
    /// `RL.SETTLE` on an algorithm where a cost cannot be corrected afterwards (LEAKY).
    SettleNotApplicable,
}
