//! A list: a [`Pack`] while it is at most [`PACK_BYTES`], then a deque of boxed entries (one way:
//! a list that grew stays big until it is gone, as Redis 7.0's quicklist never goes back).

use std::collections::VecDeque;

use super::pack::Pack;

/// The largest list kept packed (Redis's `list-max-listpack-size -2`: 8 KiB).
pub const PACK_BYTES: usize = 8192;

#[derive(Clone, Debug)]
pub enum List {
    Pack(Pack),
    Big(Box<Big>),
}

#[derive(Clone, Debug, Default)]
pub struct Big {
    items: VecDeque<Box<[u8]>>,
    /// The entries' heap bytes (their boxes' contents).
    bytes: usize,
}

impl Default for List {
    fn default() -> Self {
        List::Pack(Pack::new())
    }
}

impl List {
    pub fn len(&self) -> usize {
        match self {
            List::Pack(p) => p.count(),
            List::Big(b) => b.items.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        match self {
            List::Pack(p) => p.is_empty(),
            List::Big(b) => b.items.is_empty(),
        }
    }

    /// How many allocations freeing it takes (a pack is one).
    pub fn free_effort(&self) -> usize {
        match self {
            List::Pack(_) => 1,
            List::Big(b) => b.items.len(),
        }
    }

    pub fn heap_bytes(&self) -> usize {
        match self {
            List::Pack(p) => p.heap_bytes(),
            List::Big(b) => {
                size_of::<Big>() + b.items.capacity() * size_of::<Box<[u8]>>() + b.bytes
            }
        }
    }

    /// Every entry, head first.
    pub fn items(&self) -> Vec<&[u8]> {
        match self {
            List::Pack(p) => p.iter().map(|(_, e)| e).collect(),
            List::Big(b) => b.items.iter().map(|e| &e[..]).collect(),
        }
    }

    pub fn get(&self, i: usize) -> Option<&[u8]> {
        match self {
            List::Pack(p) => p.iter().nth(i).map(|(_, e)| e),
            List::Big(b) => b.items.get(i).map(|e| &e[..]),
        }
    }

    pub fn push(&mut self, front: bool, v: &[u8]) {
        match self {
            List::Pack(p) => {
                if front {
                    p.insert(0, v);
                } else {
                    p.push(v);
                }
                if p.byte_len() > PACK_BYTES {
                    self.grow();
                }
            }
            List::Big(b) => {
                b.bytes += v.len();
                if front {
                    b.items.push_front(v.into());
                } else {
                    b.items.push_back(v.into());
                }
            }
        }
    }

    pub fn pop(&mut self, front: bool) -> Option<Vec<u8>> {
        match self {
            List::Pack(p) => {
                let (at, e) = if front {
                    p.iter().next()?
                } else {
                    p.iter().last()?
                };
                let e = e.to_vec();
                p.remove(at, at);
                Some(e)
            }
            List::Big(b) => {
                let e = if front {
                    b.items.pop_front()
                } else {
                    b.items.pop_back()
                }?;
                b.bytes -= e.len();
                Some(e.into_vec())
            }
        }
    }

    /// LSET: false if `i` is out of range.
    pub fn set(&mut self, i: usize, v: &[u8]) -> bool {
        match self {
            List::Pack(p) => {
                let Some((at, _)) = p.iter().nth(i) else {
                    return false;
                };
                p.replace(at, v);
                if p.byte_len() > PACK_BYTES {
                    self.grow();
                }
                true
            }
            List::Big(b) => match b.items.get_mut(i) {
                Some(e) => {
                    b.bytes = b.bytes - e.len() + v.len();
                    *e = v.into();
                    true
                }
                None => false,
            },
        }
    }

    /// Keeps entries `start..=stop` (both within the list, `start <= stop`), or none if `keep`
    /// is `None`.
    pub fn trim(&mut self, keep: Option<(usize, usize)>) {
        let Some((start, stop)) = keep else {
            *self = List::default();
            return;
        };
        match self {
            // In place: a capped log's LTRIM drops an entry or none, and copies no other.
            List::Pack(p) => {
                let mut places = p.iter().map(|(at, _)| at).skip(start);
                let first = places.next().expect("start is within the list");
                let last = match stop - start {
                    0 => first,
                    n => places.nth(n - 1).expect("stop is within the list"),
                };
                p.keep(first, last);
            }
            List::Big(b) => {
                b.items.truncate(stop + 1);
                b.items.drain(..start);
                b.bytes = b.items.iter().map(|e| e.len()).sum();
                b.items.shrink_to_fit();
            }
        }
    }

    /// LREM: removes up to `count` entries equal to `v` from the head (`count > 0`), the tail
    /// (`count < 0`) or all (`0`); how many went.
    pub fn remove(&mut self, count: i64, v: &[u8]) -> usize {
        let items = self.items();
        let n = items.len();
        let limit = if count == 0 {
            usize::MAX
        } else {
            count.unsigned_abs().try_into().unwrap_or(usize::MAX)
        };
        let mut drop = vec![false; n];
        let mut removed = 0;
        let order: Box<dyn Iterator<Item = usize>> = if count < 0 {
            Box::new((0..n).rev())
        } else {
            Box::new(0..n)
        };
        for i in order {
            if removed == limit {
                break;
            }
            if items[i] == v {
                drop[i] = true;
                removed += 1;
            }
        }
        if removed > 0 {
            let kept: Vec<Vec<u8>> = items
                .iter()
                .zip(&drop)
                .filter(|(_, d)| !**d)
                .map(|(e, _)| e.to_vec())
                .collect();
            self.replace_all(kept.iter().map(|e| &e[..]));
        }
        removed
    }

    /// LINSERT: puts `v` before or after the first entry equal to `pivot`; the new length, or
    /// `None` if there is no such entry.
    pub fn insert(&mut self, before: bool, pivot: &[u8], v: &[u8]) -> Option<usize> {
        let i = self.items().iter().position(|e| *e == pivot)?;
        let at = if before { i } else { i + 1 };
        match self {
            List::Pack(p) => {
                let start = p.iter().nth(at).map_or(p.byte_len(), |(a, _)| a.start);
                p.insert(start, v);
                if p.byte_len() > PACK_BYTES {
                    self.grow();
                }
            }
            List::Big(b) => {
                b.bytes += v.len();
                b.items.insert(at, v.into());
            }
        }
        Some(self.len())
    }

    /// The list's entries as one pack's bytes (its replication and snapshot form).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            List::Pack(p) => out.extend_from_slice(p.as_bytes()),
            List::Big(b) => {
                let mut p = Pack::new();
                for e in &b.items {
                    p.push(e);
                }
                out.extend_from_slice(p.as_bytes());
            }
        }
    }

    pub fn decode(bytes: &[u8]) -> Option<List> {
        let p = Pack::from_bytes(bytes)?;
        let mut list = List::Pack(p);
        if bytes.len() > PACK_BYTES {
            list.grow();
        }
        Some(list)
    }

    fn replace_all<'a>(&mut self, items: impl Iterator<Item = &'a [u8]>) {
        let mut fresh = List::default();
        for e in items {
            fresh.push(false, e);
        }
        *self = fresh;
    }

    fn grow(&mut self) {
        if let List::Pack(p) = self {
            let items: VecDeque<Box<[u8]>> = p.iter().map(|(_, e)| e.into()).collect();
            let bytes = items.iter().map(|e| e.len()).sum();
            *self = List::Big(Box::new(Big { items, bytes }));
        }
    }

    /// OBJECT ENCODING's answer: Redis 7.0 names every list `quicklist`.
    pub fn encoding(&self) -> &'static str {
        "quicklist"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list_of(items: &[Vec<u8>]) -> List {
        let mut l = List::default();
        for e in items {
            l.push(false, e);
        }
        l
    }

    #[test]
    fn trim_keeps_the_range_packed_and_big() {
        // Ten-digit entries (a sliding log's timestamps), and entries long enough to be big.
        for size in [10, 700] {
            let items: Vec<Vec<u8>> = (0..14)
                .map(|i| format!("{:0size$}", 1_733_356_800 + i).into_bytes())
                .collect();
            for (start, stop) in [(0, 9), (0, 13), (3, 3), (13, 13), (2, 11), (0, 0)] {
                let mut l = list_of(&items);
                assert_eq!(matches!(l, List::Big(_)), size == 700);
                l.trim(Some((start, stop)));
                let want: Vec<&[u8]> = items[start..=stop].iter().map(|e| &e[..]).collect();
                assert_eq!(
                    l.items(),
                    want,
                    "LTRIM {start} {stop} of {size}-byte entries"
                );
                assert_eq!(l.len(), stop - start + 1);
            }
            let mut l = list_of(&items);
            l.trim(None);
            assert!(l.is_empty());
        }
    }

    #[test]
    fn a_capped_log_stays_in_one_small_block() {
        let mut l = List::default();
        for t in 1_733_356_800u64..1_733_357_800 {
            l.push(true, t.to_string().as_bytes());
            if l.len() > 10 {
                l.trim(Some((0, 9)));
            }
        }
        assert_eq!(l.len(), 10);
        assert_eq!(l.get(0), Some(&b"1733357799"[..]));
        assert_eq!(l.get(9), Some(&b"1733357790"[..]));
        assert!(l.heap_bytes() <= 16 + 11 * 11 + 64, "{}", l.heap_bytes());
    }
}
