//! `SmallBytes`: an owned byte string that keeps short contents inline.
//!
//! Keys are binary (no UTF-8 assumption) and most are short (`user:1234`, an IP, an API key id),
//! so a key of up to [`INLINE_CAP`] bytes lives inside the table entry itself: no allocation, no
//! pointer to chase while probing. Longer keys go to one exact-size heap allocation.
//!
//! Invariant: `Inline` is used iff the length is at most [`INLINE_CAP`], so two equal byte strings
//! always have the same representation (equality still compares bytes, not representations).

use std::fmt;

/// Longest byte string stored inline: 22 bytes + a length byte + the enum tag = 24 bytes, the
/// same as the heap form (a boxed slice is a pointer and a length).
pub const INLINE_CAP: usize = 22;

/// An owned byte string, inline up to [`INLINE_CAP`] bytes.
#[derive(Clone)]
pub enum SmallBytes {
    Inline { len: u8, bytes: [u8; INLINE_CAP] },
    Heap(Box<[u8]>),
}

impl SmallBytes {
    pub fn new(b: &[u8]) -> SmallBytes {
        if b.len() <= INLINE_CAP {
            let mut bytes = [0u8; INLINE_CAP];
            bytes[..b.len()].copy_from_slice(b);
            SmallBytes::Inline {
                len: b.len() as u8,
                bytes,
            }
        } else {
            SmallBytes::Heap(b.into())
        }
    }

    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        match self {
            SmallBytes::Inline { len, bytes } => &bytes[..*len as usize],
            SmallBytes::Heap(b) => b,
        }
    }

    /// Bytes owned on the heap (0 when inline), for memory accounting.
    pub fn heap_bytes(&self) -> usize {
        match self {
            SmallBytes::Inline { .. } => 0,
            SmallBytes::Heap(b) => b.len(),
        }
    }

    #[cfg(test)]
    pub fn is_inline(&self) -> bool {
        matches!(self, SmallBytes::Inline { .. })
    }
}

impl PartialEq for SmallBytes {
    fn eq(&self, other: &SmallBytes) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for SmallBytes {}

impl PartialEq<[u8]> for SmallBytes {
    fn eq(&self, other: &[u8]) -> bool {
        self.as_slice() == other
    }
}

impl fmt::Debug for SmallBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", bytes::Bytes::copy_from_slice(self.as_slice()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_is_three_words() {
        assert_eq!(size_of::<SmallBytes>(), 24);
    }

    #[test]
    fn inline_heap_boundary() {
        for len in [0, 1, INLINE_CAP - 1, INLINE_CAP] {
            let v: Vec<u8> = (0..len as u8).collect();
            let k = SmallBytes::new(&v);
            assert!(k.is_inline(), "len {len} should be inline");
            assert_eq!(k.as_slice(), &v[..]);
            assert_eq!(k.heap_bytes(), 0);
        }
        for len in [INLINE_CAP + 1, 64, 1000] {
            let v: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let k = SmallBytes::new(&v);
            assert!(!k.is_inline(), "len {len} should be on the heap");
            assert_eq!(k.as_slice(), &v[..]);
            assert_eq!(k.heap_bytes(), len);
        }
    }

    #[test]
    fn equality_is_by_bytes() {
        assert_eq!(SmallBytes::new(b"abc"), SmallBytes::new(b"abc"));
        assert_ne!(SmallBytes::new(b"abc"), SmallBytes::new(b"abd"));
        // A shorter prefix differs even though the inline buffers are zero-padded alike.
        assert_ne!(SmallBytes::new(b"ab"), SmallBytes::new(b"ab\0"));
        assert_ne!(SmallBytes::new(b""), SmallBytes::new(b"\0"));
        let long = [7u8; 40];
        assert_eq!(SmallBytes::new(&long), SmallBytes::new(&long));
        assert_ne!(SmallBytes::new(&long), SmallBytes::new(&long[..39]));
        assert!(SmallBytes::new(b"k\xff\x00") == *b"k\xff\x00".as_slice());
    }
}
