//! Key encoding: how a binary key sits in a table slot's 16 key bytes.
//!
//! Keys are binary (no UTF-8 assumption) and most are short (`user:1234`, an IP, an API key id),
//! so a key of up to [`INLINE_CAP`] bytes lives inside the slot itself: no allocation, no pointer
//! to chase while probing. Three forms, named by two bits of the slot's metadata:
//! - [`SHORT`] (0..=15 bytes): the bytes, zero padding, and the length in byte 15.
//! - [`FULL`] (exactly 16 bytes): the 16 bytes, nothing else (so 16-byte keys cost no more).
//! - [`HEAP`] (17 bytes and more): the slot holds a leaked `Box<[u8]>` (see `table`).
//!
//! Invariant: the form and the 16 bytes are a function of the key, so two inline keys are equal
//! iff their forms and 16 bytes are (a `SHORT` key of length 3 never equals one of length 4:
//! byte 15 differs).

/// Longest key stored inline in a slot.
pub const INLINE_CAP: usize = 16;

/// Key forms (two bits; 0 marks an empty slot).
pub const SHORT: u16 = 1;
pub const FULL: u16 = 2;
pub const HEAP: u16 = 3;

/// A key ready to compare against slots: its form and, for inline forms, its 16 slot bytes.
#[derive(Clone, Copy, Debug)]
pub struct Probe<'a> {
    pub form: u16,
    pub inline: [u8; INLINE_CAP],
    pub key: &'a [u8],
}

impl<'a> Probe<'a> {
    #[inline]
    pub fn new(key: &'a [u8]) -> Probe<'a> {
        let mut inline = [0u8; INLINE_CAP];
        let form = match key.len() {
            n if n < INLINE_CAP => {
                inline[..n].copy_from_slice(key);
                inline[INLINE_CAP - 1] = n as u8;
                SHORT
            }
            INLINE_CAP => {
                inline.copy_from_slice(key);
                FULL
            }
            _ => HEAP,
        };
        Probe { form, inline, key }
    }
}

/// The key bytes of an inline slot key (`form` is `SHORT` or `FULL`).
#[inline]
pub fn inline_bytes(form: u16, bytes: &[u8; INLINE_CAP]) -> &[u8] {
    if form == FULL {
        bytes
    } else {
        &bytes[..usize::from(bytes[INLINE_CAP - 1])]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_at_the_boundaries() {
        for len in 0..=40usize {
            let v: Vec<u8> = (0..len).map(|i| i as u8 ^ 0xA5).collect();
            let p = Probe::new(&v);
            let want = match len {
                0..=15 => SHORT,
                16 => FULL,
                _ => HEAP,
            };
            assert_eq!(p.form, want, "len {len}");
            if p.form != HEAP {
                assert_eq!(inline_bytes(p.form, &p.inline), &v[..]);
            }
        }
    }

    #[test]
    fn inline_encoding_is_injective() {
        let keys: [&[u8]; 7] = [
            b"",
            b"\0",
            b"ab",
            b"ab\0",
            b"ab\x02",
            &[2u8; 15],
            &[15u8; 16],
        ];
        for (i, a) in keys.iter().enumerate() {
            for (j, b) in keys.iter().enumerate() {
                let (pa, pb) = (Probe::new(a), Probe::new(b));
                let same = pa.form == pb.form && pa.inline == pb.inline;
                assert_eq!(same, i == j, "{a:?} vs {b:?}");
            }
        }
    }
}
