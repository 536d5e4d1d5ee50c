//! A hash: a [`Pack`] of field, value pairs while it has at most [`PACK_ENTRIES`] fields and
//! none longer than [`PACK_VALUE`], then a hash map (one way, as in Redis).

use std::collections::HashMap;

use super::pack::Pack;

/// Redis 7's `hash-max-listpack-entries` and `hash-max-listpack-value`.
pub const PACK_ENTRIES: usize = 128;
pub const PACK_VALUE: usize = 64;

#[derive(Clone, Debug)]
pub enum Hash {
    Pack(Pack),
    Big(Box<Big>),
}

#[derive(Clone, Debug, Default)]
pub struct Big {
    map: HashMap<Box<[u8]>, Box<[u8]>>,
    bytes: usize,
}

impl Default for Hash {
    fn default() -> Self {
        Hash::Pack(Pack::new())
    }
}

/// Bytes a big hash's table spends on one slot (two boxed slices and a control byte).
const SLOT: usize = 2 * size_of::<Box<[u8]>>() + 1;

impl Hash {
    pub fn len(&self) -> usize {
        match self {
            Hash::Pack(p) => p.count() / 2,
            Hash::Big(b) => b.map.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        match self {
            Hash::Pack(p) => p.is_empty(),
            Hash::Big(b) => b.map.is_empty(),
        }
    }

    /// How many allocations freeing it takes (a pack is one).
    pub fn free_effort(&self) -> usize {
        match self {
            Hash::Pack(_) => 1,
            Hash::Big(b) => b.map.len(),
        }
    }

    pub fn heap_bytes(&self) -> usize {
        match self {
            Hash::Pack(p) => p.heap_bytes(),
            Hash::Big(b) => size_of::<Big>() + b.map.capacity() * SLOT + b.bytes,
        }
    }

    pub fn get(&self, field: &[u8]) -> Option<&[u8]> {
        match self {
            Hash::Pack(p) => {
                let mut it = p.iter();
                while let (Some((_, f)), Some((_, v))) = (it.next(), it.next()) {
                    if f == field {
                        return Some(v);
                    }
                }
                None
            }
            Hash::Big(b) => b.map.get(field).map(|v| &v[..]),
        }
    }

    /// Every field and value.
    pub fn pairs(&self) -> Vec<(&[u8], &[u8])> {
        match self {
            Hash::Pack(p) => {
                let mut out = Vec::new();
                let mut it = p.iter();
                while let (Some((_, f)), Some((_, v))) = (it.next(), it.next()) {
                    out.push((f, v));
                }
                out
            }
            Hash::Big(b) => b.map.iter().map(|(f, v)| (&f[..], &v[..])).collect(),
        }
    }

    /// Sets `field`; true if it is new.
    pub fn set(&mut self, field: &[u8], value: &[u8]) -> bool {
        if let Hash::Pack(p) = self {
            let mut it = p.iter();
            let mut found = None;
            while let (Some((_, f)), Some((v, _))) = (it.next(), it.next()) {
                if f == field {
                    found = Some(v);
                    break;
                }
            }
            let fits = field.len() <= PACK_VALUE && value.len() <= PACK_VALUE;
            match found {
                Some(at) if fits => {
                    p.replace(at, value);
                    return false;
                }
                None if fits && p.count() / 2 < PACK_ENTRIES => {
                    p.push(field);
                    p.push(value);
                    return true;
                }
                _ => self.grow(),
            }
        }
        let Hash::Big(b) = self else { unreachable!() };
        b.bytes += value.len();
        match b.map.insert(field.into(), value.into()) {
            Some(old) => {
                b.bytes -= old.len();
                false
            }
            None => {
                b.bytes += field.len();
                true
            }
        }
    }

    /// Removes `field`; true if it was there.
    pub fn del(&mut self, field: &[u8]) -> bool {
        match self {
            Hash::Pack(p) => {
                let mut it = p.iter();
                while let (Some((fa, f)), Some((va, _))) = (it.next(), it.next()) {
                    if f == field {
                        p.remove(fa, va);
                        return true;
                    }
                }
                false
            }
            Hash::Big(b) => match b.map.remove_entry(field) {
                Some((f, v)) => {
                    b.bytes -= f.len() + v.len();
                    true
                }
                None => false,
            },
        }
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Hash::Pack(p) => out.extend_from_slice(p.as_bytes()),
            Hash::Big(_) => {
                let mut p = Pack::new();
                for (f, v) in self.pairs() {
                    p.push(f);
                    p.push(v);
                }
                out.extend_from_slice(p.as_bytes());
            }
        }
    }

    pub fn decode(bytes: &[u8]) -> Option<Hash> {
        let p = Pack::from_bytes(bytes)?;
        let n = p.count();
        if n % 2 != 0 {
            return None;
        }
        let small = n / 2 <= PACK_ENTRIES && p.iter().all(|(_, e)| e.len() <= PACK_VALUE);
        let mut h = Hash::Pack(p);
        if !small {
            h.grow();
        }
        Some(h)
    }

    fn grow(&mut self) {
        if let Hash::Pack(_) = self {
            let mut big = Big::default();
            for (f, v) in self.pairs() {
                big.bytes += f.len() + v.len();
                big.map.insert(f.into(), v.into());
            }
            *self = Hash::Big(Box::new(big));
        }
    }

    pub fn encoding(&self) -> &'static str {
        match self {
            Hash::Pack(_) => "listpack",
            Hash::Big(_) => "hashtable",
        }
    }
}
