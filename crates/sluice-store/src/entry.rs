//! What a key holds: a limiter's [`State`] or a plain-string [`Counter`].
//!
//! The table (see `table`) keeps the limiter states packed in the slot itself when they fit
//! (TOKEN, GCRA, LEAKY: one `tat`; SLIDING, FIXED: with an extension word); everything else is
//! a [`Value`] in a boxed record. This module is the value side: the types and their heap
//! accounting.

use bytes::Bytes;
use sluice_core::State;

use crate::Kind;
use crate::types::{Hash, List, Set, ZSet};

/// What a key holds: a rate limiter's state, a plain-string counter or a collection. A key is
/// one of them; another kind of command answers `WRONGTYPE`. 24 bytes: the discriminant lives
/// in a spare value of `State`'s own tag, which is why `Counter` and the collections are kept
/// to 16 bytes.
#[derive(Clone, Debug)]
pub enum Value {
    Limiter(State),
    Counter(Counter),
    List(List),
    Hash(Hash),
    Set(Set),
    ZSet(ZSet),
}

impl Value {
    pub fn heap_bytes(&self) -> usize {
        match self {
            Value::Limiter(s) => s.heap_bytes(),
            Value::Counter(c) => c.heap_bytes(),
            Value::List(l) => l.heap_bytes(),
            Value::Hash(h) => h.heap_bytes(),
            Value::Set(s) => s.heap_bytes(),
            Value::ZSet(z) => z.heap_bytes(),
        }
    }

    /// How many allocations freeing it takes: a big collection's entries each own one.
    pub fn free_effort(&self) -> usize {
        match self {
            Value::Limiter(_) | Value::Counter(_) => 1,
            Value::List(l) => l.free_effort(),
            Value::Hash(h) => h.free_effort(),
            Value::Set(s) => s.free_effort(),
            Value::ZSet(z) => z.free_effort(),
        }
    }

    /// What the value is, as `TYPE` names it.
    pub fn kind(&self) -> Kind {
        match self {
            Value::Limiter(_) => Kind::Limiter,
            Value::Counter(_) => Kind::String,
            Value::List(_) => Kind::List,
            Value::Hash(_) => Kind::Hash,
            Value::Set(_) => Kind::Set,
            Value::ZSet(_) => Kind::ZSet,
        }
    }

    /// A collection's replication and snapshot form (see `types`), `None` for a limiter or a
    /// string, which have records of their own.
    pub fn encode_collection(&self, out: &mut Vec<u8>) -> Option<Kind> {
        match self {
            Value::Limiter(_) | Value::Counter(_) => return None,
            Value::List(l) => l.encode(out),
            Value::Hash(h) => h.encode(out),
            Value::Set(s) => s.encode(out),
            Value::ZSet(z) => z.encode(out),
        }
        Some(self.kind())
    }

    /// A collection from its replication form; `None` if the bytes are not one.
    pub fn decode_collection(kind: Kind, body: &[u8]) -> Option<Value> {
        Some(match kind {
            Kind::List => Value::List(List::decode(body)?),
            Kind::Hash => Value::Hash(Hash::decode(body)?),
            Kind::Set => Value::Set(Set::decode(body)?),
            Kind::ZSet => Value::ZSet(ZSet::decode(body)?),
            Kind::String | Kind::Limiter => return None,
        })
    }

    /// Moves a limiter's state out for the algorithms to work on as an `Option<State>`, leaving
    /// a counter `0` in its place: the caller must put a state back or remove the entry before
    /// it releases the shard lock. A counter is left as it is (`None`).
    pub fn take_limiter(&mut self) -> Option<State> {
        match std::mem::replace(self, Value::Counter(Counter::Int(0))) {
            Value::Limiter(s) => Some(s),
            counter => {
                *self = counter;
                None
            }
        }
    }
}

/// Longest non-integer counter value stored inline (16 bytes with the tag and length).
pub const COUNTER_INLINE_CAP: usize = 14;

/// A plain-string value (GET/SET/INCR). Integers in canonical form are kept as `i64`, as Redis
/// does: `INCR` needs no parsing and the value takes no heap. Other short strings are inline;
/// long ones take a boxed slice behind a thin pointer (two allocations, but 8 bytes in the
/// entry instead of 16: long string values are rare in a rate limiter).
///
/// Invariant: the representation is a function of the bytes (Int iff canonical integer, else
/// Inline iff short), so equal strings are equal values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Counter {
    Int(i64),
    Inline {
        len: u8,
        bytes: [u8; COUNTER_INLINE_CAP],
    },
    Heap(Box<Box<[u8]>>),
}

impl Counter {
    /// Stores `b`, as `Int` iff it is exactly what formatting an `i64` gives (no sign `+`, no
    /// leading zeros, no `-0`): the strings Redis accepts as integers.
    pub fn from_bytes(b: &[u8]) -> Counter {
        if let Some(n) = parse_canonical_i64(b) {
            Counter::Int(n)
        } else if b.len() <= COUNTER_INLINE_CAP {
            let mut bytes = [0; COUNTER_INLINE_CAP];
            bytes[..b.len()].copy_from_slice(b);
            Counter::Inline {
                len: b.len() as u8,
                bytes,
            }
        } else {
            Counter::Heap(Box::new(b.into()))
        }
    }

    pub fn to_bytes(&self) -> Bytes {
        Bytes::copy_from_slice(self.as_bytes(&mut itoa::Buffer::new()))
    }

    /// The value as `GET` returns it, without allocating: an integer is formatted into
    /// `digits`.
    pub fn as_bytes<'a>(&'a self, digits: &'a mut itoa::Buffer) -> &'a [u8] {
        match self {
            Counter::Int(n) => digits.format(*n).as_bytes(),
            Counter::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Counter::Heap(b) => b,
        }
    }

    pub fn heap_bytes(&self) -> usize {
        match self {
            Counter::Int(_) | Counter::Inline { .. } => 0,
            Counter::Heap(b) => size_of::<Box<[u8]>>() + b.len(),
        }
    }
}

fn parse_canonical_i64(b: &[u8]) -> Option<i64> {
    let digits = b.strip_prefix(b"-").unwrap_or(b);
    let canonical = match digits {
        [] => false,
        [b'0'] => digits.len() == b.len(), // "0" yes, "-0" no
        [first, rest @ ..] => (b'1'..=b'9').contains(first) && rest.iter().all(u8::is_ascii_digit),
    };
    if !canonical {
        return None;
    }
    std::str::from_utf8(b).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout() {
        assert_eq!(size_of::<Counter>(), 16);
        // The counter and the collections hide in `State`'s niche: a value is no bigger than a
        // state.
        for size in [
            size_of::<List>(),
            size_of::<Hash>(),
            size_of::<Set>(),
            size_of::<ZSet>(),
        ] {
            assert_eq!(size, 16);
        }
        assert_eq!(size_of::<Value>(), size_of::<State>().max(16));
        assert_eq!(size_of::<Value>(), 24);
    }

    #[test]
    fn canonical_integers_only() {
        for (s, want) in [
            ("0", Some(0)),
            ("7", Some(7)),
            ("-12", Some(-12)),
            ("9223372036854775807", Some(i64::MAX)),
            ("-9223372036854775808", Some(i64::MIN)),
            ("9223372036854775808", None),
            ("-0", None),
            ("007", None),
            ("+1", None),
            (" 1", None),
            ("1 ", None),
            ("", None),
            ("-", None),
            ("1.5", None),
            ("abc", None),
        ] {
            assert_eq!(parse_canonical_i64(s.as_bytes()), want, "{s:?}");
            let c = Counter::from_bytes(s.as_bytes());
            assert_eq!(
                c.to_bytes(),
                Bytes::copy_from_slice(s.as_bytes()),
                "{s:?} round trip"
            );
        }
    }

    #[test]
    fn counter_strings_inline_and_heap() {
        for len in [0, 1, COUNTER_INLINE_CAP, COUNTER_INLINE_CAP + 1, 300] {
            let v = vec![b'x'; len];
            let c = Counter::from_bytes(&v);
            assert_eq!(c.to_bytes(), Bytes::from(v.clone()));
            let on_heap = len > COUNTER_INLINE_CAP;
            assert_eq!(matches!(c, Counter::Heap(_)), on_heap, "len {len}");
            assert_eq!(c.heap_bytes(), if on_heap { 16 + len } else { 0 });
        }
    }
}
