//! Redis's glob patterns, for CONFIG GET and PSUBSCRIBE.
//!
//! Patterns come from clients, so matching is iterative and bounded: one pass over the text
//! that, on a mismatch, goes back only to the last `*` (each later star supersedes the earlier
//! ones). That is O(pattern × text) at worst, with no recursion: a pattern of 100,000 stars
//! cannot overflow a worker's stack, and `*a*a*a*b` cannot backtrack exponentially.

/// Redis-style glob: `*`, `?`, `[abc]`, `[^a-z]`, `\x`.
pub fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    // After the last star: where its pattern resumes, and the text it has swallowed up to.
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if pattern.get(p) == Some(&b'*') {
            p += 1;
            star = Some((p, t));
            continue;
        }
        if let Some(next) = one(pattern, p, text[t]) {
            p = next;
            t += 1;
            continue;
        }
        // Mismatch: the last star takes one more byte, and its pattern starts over there.
        let Some((resume, swallowed)) = star else {
            return false;
        };
        p = resume;
        t = swallowed + 1;
        star = Some((resume, t));
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// Whether the one-byte token at `pattern[p..]` (not a star) matches `c`; if so, where the
/// next token starts.
fn one(pattern: &[u8], p: usize, c: u8) -> Option<usize> {
    let (&first, rest) = pattern.get(p..)?.split_first()?;
    match first {
        b'?' => Some(p + 1),
        b'[' => {
            let (negate, mut i) = match rest.first() {
                Some(b'^') => (true, 1),
                _ => (false, 0),
            };
            let mut matched = false;
            // An unterminated class ends with the pattern, as in Redis.
            while let Some(&b) = rest.get(i) {
                if b == b']' {
                    i += 1;
                    break;
                }
                if b == b'\\' && i + 1 < rest.len() {
                    matched |= rest[i + 1] == c;
                    i += 2;
                } else if i + 2 < rest.len() && rest[i + 1] == b'-' && rest[i + 2] != b']' {
                    let (lo, hi) = (b.min(rest[i + 2]), b.max(rest[i + 2]));
                    matched |= (lo..=hi).contains(&c);
                    i += 3;
                } else {
                    matched |= b == c;
                    i += 1;
                }
            }
            (matched != negate).then_some(p + 1 + i)
        }
        b'\\' if !rest.is_empty() => (rest[0] == c).then_some(p + 2),
        _ => (first == c).then_some(p + 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plain recursive definition: the model the iterative matcher must agree with.
    fn model(pattern: &[u8], text: &[u8]) -> bool {
        match pattern.first() {
            None => text.is_empty(),
            Some(b'*') => (0..=text.len()).any(|i| model(&pattern[1..], &text[i..])),
            Some(_) => match text.split_first() {
                None => false,
                Some((&c, rest)) => one(pattern, 0, c).is_some_and(|n| model(&pattern[n..], rest)),
            },
        }
    }

    /// Every string of up to `len` bytes over `alphabet`.
    fn all(alphabet: &[u8], len: usize) -> Vec<Vec<u8>> {
        let mut out = vec![Vec::new()];
        let mut last = vec![Vec::new()];
        for _ in 0..len {
            last = last
                .iter()
                .flat_map(|s| {
                    alphabet.iter().map(move |&c| {
                        let mut s: Vec<u8> = s.clone();
                        s.push(c);
                        s
                    })
                })
                .collect();
            out.extend(last.iter().cloned());
        }
        out
    }

    #[test]
    fn agrees_with_the_recursive_definition() {
        let texts = all(b"ab", 5);
        for pattern in all(b"ab*?[]^\\", 4) {
            for text in &texts {
                assert_eq!(
                    glob_match(&pattern, text),
                    model(&pattern, text),
                    "{:?} on {:?}",
                    String::from_utf8_lossy(&pattern),
                    String::from_utf8_lossy(text)
                );
            }
        }
    }

    #[test]
    fn hostile_patterns_are_cheap() {
        // Once a stack overflow (recursion per pattern byte) and an exponential backtrack.
        let deep = b"*a".repeat(100_000);
        let text = vec![b'a'; 100_000];
        assert!(glob_match(&deep, &text));
        let mut six_stars = b"*a".repeat(6);
        six_stars.extend_from_slice(b"*b");
        assert!(!glob_match(&six_stars, &[b'a'; 10_000]));
        let mut many = b"*?".repeat(10);
        many.push(b'#');
        assert!(!glob_match(&many, b"maxmemory-policy"));
    }
}
