//! `Pack`: a short sequence of byte strings in one allocation, our listpack. Each entry is a
//! LEB128 length and its bytes; the allocation is a thin pointer (`ThinVec`: one word in the
//! value, its length and capacity in the heap block), so a ten-field hash costs one box of
//! about a hundred bytes, as Redis's listpack does. Every operation walks from the start: a
//! pack is kept small (the types convert to their big forms past a few hundred entries or
//! 8 KiB), so a walk is a few cache lines.

use thin_vec::ThinVec;

/// Bytes of a non-empty `ThinVec`'s header (its length and capacity, one `usize` each).
const HEADER: usize = 2 * size_of::<usize>();

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pack(ThinVec<u8>);

/// An entry's place in its pack: where its length starts and where its bytes end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct At {
    pub start: usize,
    pub end: usize,
}

impl Pack {
    pub fn new() -> Pack {
        Pack(ThinVec::new())
    }

    /// A pack of these bytes (as [`Pack::as_bytes`] gave them), if they are whole entries.
    pub fn from_bytes(bytes: &[u8]) -> Option<Pack> {
        let mut at = 0;
        while at < bytes.len() {
            let (len, head) = read_len(&bytes[at..])?;
            at = at.checked_add(head)?.checked_add(len)?;
        }
        (at == bytes.len()).then(|| {
            let mut v = ThinVec::with_capacity(bytes.len());
            v.extend_from_slice(bytes);
            Pack(v)
        })
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The encoded length in bytes.
    pub fn byte_len(&self) -> usize {
        self.0.len()
    }

    /// Heap bytes: the block (header and capacity), none while nothing was ever stored.
    pub fn heap_bytes(&self) -> usize {
        match self.0.capacity() {
            0 => 0,
            cap => HEADER + cap,
        }
    }

    pub fn iter(&self) -> Iter<'_> {
        Iter {
            bytes: &self.0,
            at: 0,
        }
    }

    /// How many entries.
    pub fn count(&self) -> usize {
        self.iter().count()
    }

    /// The entry at `at` (which [`Pack::iter`] gave).
    pub fn get(&self, at: At) -> &[u8] {
        let (len, head) = read_len(&self.0[at.start..]).expect("a pack holds whole entries");
        &self.0[at.start + head..at.start + head + len]
    }

    pub fn push(&mut self, entry: &[u8]) {
        let end = self.0.len();
        self.insert(end, entry);
    }

    /// Inserts `entry` so that it starts at byte `start` (an entry's start or the end).
    pub fn insert(&mut self, start: usize, entry: &[u8]) {
        let mut head = [0u8; 10];
        let h = write_len(&mut head, entry.len());
        let n = h + entry.len();
        let old = self.0.len();
        self.0.reserve_exact(n);
        self.0.resize(old + n, 0);
        self.0.copy_within(start..old, start + n);
        self.0[start..start + h].copy_from_slice(&head[..h]);
        self.0[start + h..start + n].copy_from_slice(entry);
    }

    /// Removes the entries between `from.start` and `to.end` (one entry: `from == to`).
    pub fn remove(&mut self, from: At, to: At) {
        let (start, end) = (from.start, to.end);
        let old = self.0.len();
        self.0.copy_within(end..old, start);
        self.0.truncate(old - (end - start));
        self.shrink();
    }

    /// Keeps only the entries between `from.start` and `to.end` (LTRIM), in place.
    pub fn keep(&mut self, from: At, to: At) {
        let (start, end) = (from.start, to.end);
        self.0.copy_within(start..end, 0);
        self.0.truncate(end - start);
        self.shrink();
    }

    /// Gives back the block once it is empty, or most of it once it is mostly unused.
    fn shrink(&mut self) {
        if self.0.is_empty() {
            self.0 = ThinVec::new();
        } else if self.0.capacity() > 2 * self.0.len() + 64 {
            self.0.shrink_to_fit();
        }
    }

    /// Replaces the entry at `at` with `entry`.
    pub fn replace(&mut self, at: At, entry: &[u8]) {
        self.remove(at, at);
        self.insert(at.start, entry);
    }
}

/// The entries of a pack, with their places.
#[derive(Clone, Debug)]
pub struct Iter<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (At, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.bytes.len() {
            return None;
        }
        let (len, head) = read_len(&self.bytes[self.at..]).expect("a pack holds whole entries");
        let start = self.at;
        let data = start + head;
        self.at = data + len;
        Some((
            At {
                start,
                end: self.at,
            },
            &self.bytes[data..self.at],
        ))
    }
}

fn read_len(b: &[u8]) -> Option<(usize, usize)> {
    let mut len = 0usize;
    for (i, &byte) in b.iter().enumerate().take(10) {
        len |= usize::from(byte & 0x7f).checked_shl(7 * i as u32)?;
        if byte < 0x80 {
            return Some((len, i + 1));
        }
    }
    None
}

fn write_len(out: &mut [u8; 10], mut len: usize) -> usize {
    let mut i = 0;
    loop {
        let byte = (len & 0x7f) as u8;
        len >>= 7;
        if len == 0 {
            out[i] = byte;
            return i + 1;
        }
        out[i] = byte | 0x80;
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_remove_replace_keep_whole_entries() {
        let mut p = Pack::new();
        assert_eq!(p.heap_bytes(), 0);
        let long = vec![b'x'; 300];
        p.push(b"a");
        p.push(&long);
        p.insert(0, b"");
        let all: Vec<&[u8]> = p.iter().map(|(_, e)| e).collect();
        assert_eq!(all, vec![&b""[..], b"a", &long[..]]);
        let second = p.iter().nth(1).unwrap().0;
        p.replace(second, b"bcd");
        assert_eq!(p.get(p.iter().nth(1).unwrap().0), b"bcd");
        let (first, last) = (p.iter().next().unwrap().0, p.iter().nth(1).unwrap().0);
        p.remove(first, last);
        assert_eq!(p.count(), 1);
        assert_eq!(Pack::from_bytes(p.as_bytes()), Some(p.clone()));
        assert_eq!(Pack::from_bytes(&[5, b'a']), None);
        let only = p.iter().next().unwrap().0;
        p.remove(only, only);
        assert!(p.is_empty());
        assert_eq!(p.heap_bytes(), 0);
    }

    #[test]
    fn keep_leaves_the_entries_between() {
        let mut p = Pack::new();
        for e in [&b"a"[..], b"bb", b"", b"dddd", b"e"] {
            p.push(e);
        }
        let at: Vec<At> = p.iter().map(|(at, _)| at).collect();
        p.keep(at[1], at[3]);
        let kept: Vec<&[u8]> = p.iter().map(|(_, e)| e).collect();
        assert_eq!(kept, vec![&b"bb"[..], b"", b"dddd"]);
        let only = p.iter().nth(2).unwrap().0;
        p.keep(only, only);
        assert_eq!(
            p.iter().map(|(_, e)| e).collect::<Vec<_>>(),
            vec![&b"dddd"[..]]
        );
        assert_eq!(Pack::from_bytes(p.as_bytes()), Some(p.clone()));
    }
}
