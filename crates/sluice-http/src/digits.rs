//! Decimal numbers written without the formatting machinery, by itoa: a check's reply is
//! mostly numbers (its command's words, its headers, its body), and `format!` costs more than
//! the digits.

/// An integer's decimal text, on the stack.
#[derive(Debug, Clone, Copy)]
pub struct Digits {
    buf: [u8; 20],
    start: u8,
}

impl Digits {
    /// `n`'s digits, as [`push`] writes them (itoa's, kept where the caller wants them).
    pub fn of(n: u64) -> Digits {
        let mut buf = [0u8; 20];
        let mut text = itoa::Buffer::new();
        let text = text.format(n).as_bytes();
        let start = buf.len() - text.len();
        buf[start..].copy_from_slice(text);
        Digits {
            buf,
            start: start as u8,
        }
    }
}

impl AsRef<[u8]> for Digits {
    fn as_ref(&self) -> &[u8] {
        &self.buf[usize::from(self.start)..]
    }
}

/// Appends `n` in decimal, with a `-` when negative, as `Display` writes it.
pub fn push(out: &mut Vec<u8>, n: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_are_display_s() {
        for n in (-1_000..=1_000).chain([12_345, 1_000_000, i64::MAX, i64::MIN]) {
            let mut out = Vec::new();
            push(&mut out, n);
            assert_eq!(out, n.to_string().as_bytes());
        }
        for n in (0..=1_000u64).chain([u64::MAX, 1 << 40]) {
            assert_eq!(Digits::of(n).as_ref(), n.to_string().as_bytes());
            let mut out = Vec::new();
            push(&mut out, n);
            assert_eq!(out, n.to_string().as_bytes());
        }
    }
}
