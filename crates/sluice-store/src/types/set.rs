//! A set: a [`Pack`] of members while it has at most [`PACK_ENTRIES`] members and none longer
//! than [`PACK_VALUE`], then a hash set (one way).

use std::collections::HashSet;

use super::pack::Pack;

/// Redis 7.2's `set-max-listpack-entries` and `set-max-listpack-value`.
pub const PACK_ENTRIES: usize = 128;
pub const PACK_VALUE: usize = 64;

#[derive(Clone, Debug)]
pub enum Set {
    Pack(Pack),
    Big(Box<Big>),
}

#[derive(Clone, Debug, Default)]
pub struct Big {
    members: HashSet<Box<[u8]>>,
    bytes: usize,
}

impl Default for Set {
    fn default() -> Self {
        Set::Pack(Pack::new())
    }
}

const SLOT: usize = size_of::<Box<[u8]>>() + 1;

impl Set {
    pub fn len(&self) -> usize {
        match self {
            Set::Pack(p) => p.count(),
            Set::Big(b) => b.members.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        match self {
            Set::Pack(p) => p.is_empty(),
            Set::Big(b) => b.members.is_empty(),
        }
    }

    /// How many allocations freeing it takes (a pack is one).
    pub fn free_effort(&self) -> usize {
        match self {
            Set::Pack(_) => 1,
            Set::Big(b) => b.members.len(),
        }
    }

    pub fn heap_bytes(&self) -> usize {
        match self {
            Set::Pack(p) => p.heap_bytes(),
            Set::Big(b) => size_of::<Big>() + b.members.capacity() * SLOT + b.bytes,
        }
    }

    pub fn contains(&self, m: &[u8]) -> bool {
        match self {
            Set::Pack(p) => p.iter().any(|(_, e)| e == m),
            Set::Big(b) => b.members.contains(m),
        }
    }

    pub fn members(&self) -> Vec<&[u8]> {
        match self {
            Set::Pack(p) => p.iter().map(|(_, e)| e).collect(),
            Set::Big(b) => b.members.iter().map(|m| &m[..]).collect(),
        }
    }

    /// Adds `m`; true if it is new.
    pub fn add(&mut self, m: &[u8]) -> bool {
        if let Set::Pack(p) = self {
            if p.iter().any(|(_, e)| e == m) {
                return false;
            }
            if m.len() <= PACK_VALUE && p.count() < PACK_ENTRIES {
                p.push(m);
                return true;
            }
            self.grow();
        }
        let Set::Big(b) = self else { unreachable!() };
        let new = b.members.insert(m.into());
        if new {
            b.bytes += m.len();
        }
        new
    }

    /// Removes `m`; true if it was there.
    pub fn remove(&mut self, m: &[u8]) -> bool {
        match self {
            Set::Pack(p) => match p.iter().find(|(_, e)| *e == m) {
                Some((at, _)) => {
                    p.remove(at, at);
                    true
                }
                None => false,
            },
            Set::Big(b) => {
                let gone = b.members.remove(m);
                if gone {
                    b.bytes -= m.len();
                }
                gone
            }
        }
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Set::Pack(p) => out.extend_from_slice(p.as_bytes()),
            Set::Big(b) => {
                let mut p = Pack::new();
                for m in &b.members {
                    p.push(m);
                }
                out.extend_from_slice(p.as_bytes());
            }
        }
    }

    pub fn decode(bytes: &[u8]) -> Option<Set> {
        let p = Pack::from_bytes(bytes)?;
        let mut set = Set::default();
        for (_, m) in p.iter() {
            set.add(m);
        }
        Some(set)
    }

    fn grow(&mut self) {
        if let Set::Pack(p) = self {
            let members: HashSet<Box<[u8]>> = p.iter().map(|(_, e)| e.into()).collect();
            let bytes = members.iter().map(|m| m.len()).sum();
            *self = Set::Big(Box::new(Big { members, bytes }));
        }
    }

    /// OBJECT ENCODING's answer, as Redis 7.0 names a set like this one: `intset` while every
    /// member is an integer (and there are at most 512), else `hashtable`.
    pub fn encoding(&self) -> &'static str {
        let integer = |m: &[u8]| {
            std::str::from_utf8(m)
                .ok()
                .and_then(|s| s.parse::<i64>().ok())
                .is_some_and(|n| n.to_string().as_bytes() == m)
        };
        match self {
            Set::Pack(p) if p.iter().all(|(_, m)| integer(m)) => "intset",
            _ => "hashtable",
        }
    }
}
