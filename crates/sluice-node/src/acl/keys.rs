//! Which keys a user may touch: Redis's key rules, `~pattern` (read and write), `%R~pattern`
//! (read), `%W~pattern` (write), `%RW~pattern`, `~*` / `allkeys` and `resetkeys`.
//!
//! A new user may touch no key, as in Redis. A command that changes state needs both read and
//! write on each of its keys (a check reads the bucket it updates); any other needs read.
//! Patterns are Redis's globs, matched without recursion ([`crate::glob`]).

use crate::glob::glob_match;

/// One key pattern and what it grants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyPattern {
    pattern: Vec<u8>,
    read: bool,
    write: bool,
}

impl KeyPattern {
    /// Whether this pattern grants a call that does or does not `write` on `key`.
    pub fn grants(&self, key: &[u8], write: bool) -> bool {
        self.read && (self.write || !write) && glob_match(&self.pattern, key)
    }

    fn describe(&self) -> String {
        let flags = match (self.read, self.write) {
            (true, true) => "",
            (true, false) => "%R",
            _ => "%W",
        };
        format!("{flags}~{}", String::from_utf8_lossy(&self.pattern))
    }
}

/// A user's key rules.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyPerms {
    /// `~*` / `allkeys`: every key, read and write.
    pub all: bool,
    pub patterns: Vec<KeyPattern>,
}

const AFTER_ALL: &str = "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not have any effect. Try 'resetkeys' to start with an empty list of patterns";

impl KeyPerms {
    /// Applies `~*`, `allkeys`, `resetkeys` or a `~pattern` / `%FLAGS~pattern` rule; `None`
    /// when `rule` is not a key rule.
    pub fn apply(&mut self, rule: &str) -> Option<Result<(), &'static str>> {
        if rule.eq_ignore_ascii_case("allkeys") || rule == "~*" {
            *self = KeyPerms {
                all: true,
                patterns: Vec::new(),
            };
            return Some(Ok(()));
        }
        if rule.eq_ignore_ascii_case("resetkeys") {
            *self = KeyPerms::default();
            return Some(Ok(()));
        }
        let (flags, pattern) = match rule.strip_prefix('%') {
            Some(rest) => rest.split_once('~')?,
            None => ("RW", rule.strip_prefix('~')?),
        };
        Some(self.add(flags, pattern))
    }

    fn add(&mut self, flags: &str, pattern: &str) -> Result<(), &'static str> {
        let (mut read, mut write) = (false, false);
        for c in flags.chars() {
            match c.to_ascii_uppercase() {
                'R' => read = true,
                'W' => write = true,
                _ => return Err("Syntax error"),
            }
        }
        // A space or a control character could end the rule's word, or its line, in the ACL
        // file (`super::bad_pattern`).
        if !read && !write || super::bad_pattern(pattern.as_bytes()) {
            return Err("Syntax error");
        }
        if self.all {
            return Err(AFTER_ALL);
        }
        let new = KeyPattern {
            pattern: pattern.as_bytes().to_vec(),
            read,
            write,
        };
        if !self.patterns.contains(&new) {
            self.patterns.push(new);
        }
        Ok(())
    }

    /// The rules as `ACL LIST` and `ACL GETUSER` show them (empty: no key).
    pub fn describe(&self) -> String {
        if self.all {
            return "~*".into();
        }
        let parts: Vec<String> = self.patterns.iter().map(KeyPattern::describe).collect();
        parts.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn perms(rules: &[&str]) -> Result<KeyPerms, &'static str> {
        let mut p = KeyPerms::default();
        for r in rules {
            p.apply(r).expect("a key rule")?;
        }
        Ok(p)
    }

    #[test]
    fn patterns_grant_reads_and_writes_as_flagged() {
        let p = perms(&["~app:*", "%R~shared:*", "%W~log:*"]).unwrap();
        let grants = |key: &[u8], write| p.patterns.iter().any(|k| k.grants(key, write));
        assert!(grants(b"app:1", true) && grants(b"app:1", false));
        assert!(grants(b"shared:x", false) && !grants(b"shared:x", true));
        assert!(!grants(b"log:x", false) && !grants(b"log:x", true));
        assert!(!grants(b"other", false));
        assert_eq!(p.describe(), "~app:* %R~shared:* %W~log:*");
    }

    #[test]
    fn all_keys_and_reset() {
        assert!(perms(&["allkeys"]).unwrap().all);
        assert_eq!(perms(&["~*", "~a"]), Err(AFTER_ALL));
        assert_eq!(perms(&["~*", "resetkeys", "~a"]).unwrap().describe(), "~a");
        assert_eq!(perms(&["%X~a"]), Err("Syntax error"));
        assert_eq!(perms(&["%rw~a"]).unwrap().describe(), "~a");
        assert!(KeyPerms::default().apply("+@all").is_none());
        assert!(KeyPerms::default().apply("%R").is_none());
    }

    #[test]
    fn a_pattern_with_a_space_or_a_control_character_is_refused() {
        for bad in [
            "~a b",
            "~a\tb",
            "~a\nuser evil",
            "%R~a\x0bb",
            "%W~\0",
            "~a\x01",
            "~\x7f",
        ] {
            assert_eq!(perms(&[bad]), Err("Syntax error"), "{bad:?}");
        }
        assert_eq!(perms(&["~a:*", "~é"]).unwrap().describe(), "~a:* ~é");
    }
}
