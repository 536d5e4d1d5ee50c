//! Decimal numbers written without the formatting machinery: a check's reply is mostly
//! numbers (its command's words, its headers, its body), and `format!` costs more than the
//! digits.

/// "00" to "99".
const PAIRS: &[u8; 200] = b"\
    0001020304050607080910111213141516171819\
    2021222324252627282930313233343536373839\
    4041424344454647484950515253545556575859\
    6061626364656667686970717273747576777879\
    8081828384858687888990919293949596979899";

/// An integer's decimal text, on the stack.
#[derive(Debug, Clone, Copy)]
pub struct Digits {
    buf: [u8; 20],
    start: u8,
}

impl Digits {
    pub fn of(mut n: u64) -> Digits {
        let mut buf = [0u8; 20];
        let mut at = buf.len();
        // Two digits a step, from a table of the hundred pairs.
        while n >= 100 {
            let pair = (n % 100) as usize * 2;
            n /= 100;
            at -= 2;
            buf[at..at + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
        }
        if n >= 10 {
            let pair = n as usize * 2;
            at -= 2;
            buf[at..at + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
        } else {
            at -= 1;
            buf[at] = b'0' + n as u8;
        }
        Digits {
            buf,
            start: at as u8,
        }
    }
}

impl AsRef<[u8]> for Digits {
    fn as_ref(&self) -> &[u8] {
        &self.buf[usize::from(self.start)..]
    }
}

/// Appends `n` in decimal, with a `-` when negative, as `Display` writes it.
pub fn push_int(out: &mut Vec<u8>, n: i64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// Appends `n` in decimal.
pub fn push_uint(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_are_display_s() {
        for n in (-1_000..=1_000).chain([12_345, 1_000_000, i64::MAX, i64::MIN]) {
            let mut out = Vec::new();
            push_int(&mut out, n);
            assert_eq!(out, n.to_string().as_bytes());
        }
        for n in (0..=1_000u64).chain([u64::MAX, 1 << 40]) {
            assert_eq!(Digits::of(n).as_ref(), n.to_string().as_bytes());
            let mut out = Vec::new();
            push_uint(&mut out, n);
            assert_eq!(out, n.to_string().as_bytes());
        }
    }
}
