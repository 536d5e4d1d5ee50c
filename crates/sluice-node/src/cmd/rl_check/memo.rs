//! RL.CHECK's arguments parsed once per worker, not once per request.
//!
//! A gateway sends the same limit, period and options with every check of a rule, so the
//! arguments after the key are nearly always the bytes the last check on this worker sent.
//! Their wire bytes (each argument with its `$len` header, [`sluice_resp::Request::wire_from`])
//! are an unambiguous encoding of them, and parsing is a pure function of them: equal bytes
//! parse to the same checked [`Parsed`], so one comparison replaces the parse and the
//! validation. Only arguments that parsed and validated are remembered: an error is parsed
//! again each time, and answered with its own words.

use std::cell::RefCell;

use sluice_core::{Algo, Nanos, Params};
use sluice_resp::reply::IntLine;

/// The longest argument tail remembered: `limit period BURST n COST n ALGO name` fits.
const WIRE_MAX: usize = 112;

/// What RL.CHECK's arguments after the key parse to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Parsed {
    pub algo: Algo,
    pub params: Params,
    pub dry: bool,
    /// The reply line of the limit a decision under these parameters reports.
    pub limit: IntLine,
}

struct Memo {
    /// Bytes of `wire` in use; 0 while nothing is remembered (a real tail is never empty).
    len: usize,
    wire: [u8; WIRE_MAX],
    parsed: Parsed,
}

thread_local! {
    static MEMO: RefCell<Memo> = const {
        RefCell::new(Memo {
            len: 0,
            wire: [0; WIRE_MAX],
            parsed: Parsed {
                algo: Algo::Token,
                params: Params { limit: 1, period: Nanos(1), burst: 1, cost: 1 },
                dry: false,
                limit: IntLine::ZERO,
            },
        })
    };
}

/// What `wire` parsed to, if it is the tail this worker remembers.
pub(super) fn lookup(wire: &[u8]) -> Option<Parsed> {
    MEMO.with_borrow(|m| (m.len == wire.len() && m.wire[..m.len] == *wire).then_some(m.parsed))
}

/// Remembers that `wire` parsed to `parsed` (a tail too long to keep is not remembered).
pub(super) fn store(wire: &[u8], parsed: Parsed) {
    if wire.len() > WIRE_MAX {
        return;
    }
    MEMO.with_borrow_mut(|m| {
        m.wire[..wire.len()].copy_from_slice(wire);
        m.len = wire.len();
        m.parsed = parsed;
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(limit: u64) -> Parsed {
        Parsed {
            algo: Algo::Sliding,
            params: Params {
                limit,
                period: Nanos(5),
                burst: limit,
                cost: 1,
            },
            dry: true,
            limit: IntLine::new(limit as i64),
        }
    }

    #[test]
    fn only_the_same_bytes_hit() {
        let a = b"$2\r\n10\r\n$2\r\n1s\r\n";
        store(a, parsed(10));
        assert_eq!(lookup(a), Some(parsed(10)));
        assert_eq!(lookup(b"$2\r\n11\r\n$2\r\n1s\r\n"), None);
        assert_eq!(lookup(b"$2\r\n10\r\n$2\r\n1s\r\n$3\r\nDRY\r\n"), None);
        assert_eq!(lookup(b"$2\r\n10\r\n"), None);
        store(b"$2\r\n11\r\n$2\r\n1s\r\n", parsed(11));
        assert_eq!(lookup(a), None);
        let long = [b'x'; WIRE_MAX + 1];
        store(&long, parsed(12));
        assert_eq!(lookup(&long), None);
        assert_eq!(lookup(b"$2\r\n11\r\n$2\r\n1s\r\n"), Some(parsed(11)));
    }
}
