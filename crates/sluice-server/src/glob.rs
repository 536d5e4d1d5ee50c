//! Redis's glob patterns, for CONFIG GET and PSUBSCRIBE.

/// Redis-style glob: `*`, `?`, `[abc]`, `[^a-z]`, `\x`.
pub fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some((b'*', rest)) => {
            // Consecutive stars are one star: keeps hostile patterns from exploding.
            let rest = &rest[rest.iter().take_while(|&&c| c == b'*').count()..];
            (0..=text.len()).any(|i| glob_match(rest, &text[i..]))
        }
        Some((b'?', rest)) => !text.is_empty() && glob_match(rest, &text[1..]),
        Some((b'[', rest)) => {
            let Some((&c, text_rest)) = text.split_first() else {
                return false;
            };
            let (negate, mut p) = match rest.split_first() {
                Some((b'^', r)) => (true, r),
                _ => (false, rest),
            };
            let mut matched = false;
            while let Some((&first, r)) = p.split_first() {
                if first == b']' {
                    p = r;
                    break;
                }
                if first == b'\\' && !r.is_empty() {
                    matched |= r[0] == c;
                    p = &r[1..];
                } else if r.len() >= 2 && r[0] == b'-' && r[1] != b']' {
                    let (lo, hi) = (first.min(r[1]), first.max(r[1]));
                    matched |= (lo..=hi).contains(&c);
                    p = &r[2..];
                } else {
                    matched |= first == c;
                    p = r;
                }
            }
            matched != negate && glob_match(p, text_rest)
        }
        Some((b'\\', rest)) if !rest.is_empty() => {
            text.first() == Some(&rest[0]) && glob_match(&rest[1..], &text[1..])
        }
        Some((&c, rest)) => text.first() == Some(&c) && glob_match(rest, &text[1..]),
    }
}
