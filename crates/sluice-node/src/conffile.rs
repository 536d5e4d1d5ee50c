//! The config file: redis.conf syntax, the flags' own names.
//!
//! `sluice /etc/sluice/sluice.conf [--flags]` reads the file and turns each directive into a
//! flag (`maxmemory 1gb` becomes `--maxmemory=1gb`) placed before the command line's flags, so
//! clap checks the file exactly as it checks flags, every flag works in the file with no code
//! here, and a flag on the command line overrides the file (the later one wins). Each
//! directive is first checked alone, so a bad one is refused with the file, its line and its
//! name (`sluice.conf:3: unknown directive 'bogus-directive' (a similar one exists: 'dir')`),
//! as Redis names the line of a bad directive.
//!
//! # Syntax
//! One directive a line: a name, then its arguments, separated by spaces. `#` starts a comment
//! line; blank lines are ignored. An argument with spaces is quoted: `"a b"` (with `\"`, `\\`,
//! `\n`, `\t` and `\xHH` escapes) or `'a b'` (only `\'`), as Redis reads its own. Several
//! arguments become one value joined by a space (`replicaof 10.0.0.1 6379`). Redis's old
//! `slave` names are read as their `replica` names.
//!
//! # Rewrite
//! [`rewrite`] keeps every line (comments, order, unknown directives) and replaces the value
//! of the directives it is given in place: the first line of each, later duplicates dropped;
//! a directive with no line yet is appended; one whose value is `None` loses its lines.
//! [`write_atomic`] writes the result to a temporary file beside it and renames it over the
//! old one, so a crash leaves the old file or the new one, never half of one.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Old names Redis still reads, and the names this server uses.
const ALIASES: &[(&str, &str)] = &[
    ("slaveof", "replicaof"),
    ("slave-priority", "replica-priority"),
    ("slave-read-only", "replica-read-only"),
];

/// The first words that are subcommands, not a config file.
const SUBCOMMANDS: &[&str] = &["proxy", "cluster", "help"];

/// A directive's name as the flags spell it (lowercase, aliases resolved).
pub fn canonical(name: &str) -> String {
    let lower = name.to_ascii_lowercase();
    ALIASES
        .iter()
        .find(|(old, _)| *old == lower)
        .map_or(lower, |(_, new)| (*new).to_string())
}

/// One directive of a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Directive {
    /// 1-based, for error messages.
    pub line: usize,
    pub name: String,
    pub value: String,
}

/// Every directive of `text`, in order.
///
/// # Errors
/// A line with an unterminated quote or a name with no value: its 1-based number and why.
pub fn directives(text: &str) -> Result<Vec<Directive>, (usize, String)> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let words = split(raw).map_err(|why| (i + 1, why))?;
        let Some((name, args)) = words.split_first() else {
            continue;
        };
        if args.is_empty() {
            return Err((i + 1, format!("'{name}' has no value")));
        }
        out.push(Directive {
            line: i + 1,
            name: canonical(name),
            value: args.join(" "),
        });
    }
    Ok(out)
}

/// The words of one line; none for a blank line or a comment.
fn split(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut chars = line.trim_start().chars().peekable();
    if chars.peek() == Some(&'#') {
        return Ok(words);
    }
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        let word = match c {
            '"' => double_quoted(&mut chars)?,
            '\'' => single_quoted(&mut chars)?,
            _ => {
                let mut w = String::new();
                while let Some(&c) = chars.peek().filter(|c| !c.is_whitespace()) {
                    w.push(c);
                    chars.next();
                }
                w
            }
        };
        words.push(word);
    }
    Ok(words)
}

type Chars<'a> = std::iter::Peekable<std::str::Chars<'a>>;

fn double_quoted(chars: &mut Chars<'_>) -> Result<String, String> {
    chars.next();
    let mut w = String::new();
    loop {
        match chars.next().ok_or("unbalanced quotes")? {
            '"' => return closed(chars, w),
            '\\' => w.push(match chars.next().ok_or("unbalanced quotes")? {
                'n' => '\n',
                'r' => '\r',
                't' => '\t',
                'x' => hex_escape(chars)?,
                other => other,
            }),
            c => w.push(c),
        }
    }
}

fn hex_escape(chars: &mut Chars<'_>) -> Result<char, String> {
    let hex: String = chars.take(2).collect();
    u8::from_str_radix(&hex, 16)
        .map(char::from)
        .map_err(|_| format!("bad escape \\x{hex}"))
}

fn single_quoted(chars: &mut Chars<'_>) -> Result<String, String> {
    chars.next();
    let mut w = String::new();
    loop {
        match chars.next().ok_or("unbalanced quotes")? {
            '\'' => return closed(chars, w),
            '\\' if chars.peek() == Some(&'\'') => w.push(chars.next().unwrap_or('\'')),
            c => w.push(c),
        }
    }
}

/// A closing quote must end the word, as in Redis.
fn closed(chars: &mut Chars<'_>, word: String) -> Result<String, String> {
    match chars.peek() {
        Some(c) if !c.is_whitespace() => Err("closing quote must be followed by a space".into()),
        _ => Ok(word),
    }
}

/// A value as a config line writes it: bare when it is one plain word, else double-quoted.
pub fn quote(value: &str) -> String {
    let plain = !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_graphic() && !matches!(c, '"' | '\'' | '\\' | '#'));
    if plain {
        return value.to_string();
    }
    let mut q = String::from('"');
    for c in value.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            '\n' => q.push_str("\\n"),
            '\r' => q.push_str("\\r"),
            '\t' => q.push_str("\\t"),
            c if c.is_control() => q.push_str(&format!("\\x{:02x}", c as u32)),
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

/// The command line with the config file's directives in place of its path: `argv[1]` is a
/// config file when it is not a flag nor a subcommand. Returns the new arguments and the file.
///
/// # Errors
/// The file cannot be read or has a bad line (the message names the file and the line).
pub fn expand(argv: Vec<OsString>) -> Result<(Vec<OsString>, Option<PathBuf>), String> {
    let is_file = argv.get(1).and_then(|a| a.to_str()).is_some_and(|a| {
        !a.starts_with('-') && !SUBCOMMANDS.contains(&a.to_ascii_lowercase().as_str())
    }) || argv.get(1).is_some_and(|a| a.to_str().is_none());
    if !is_file {
        return Ok((argv, None));
    }
    let path = PathBuf::from(&argv[1]);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read config file {}: {e}", path.display()))?;
    let at = |line: usize, why: String| format!("{}:{line}: {why}", path.display());
    let found = directives(&text).map_err(|(line, why)| at(line, why))?;
    let mut flags = <crate::config::Config as clap::CommandFactory>::command();
    for d in &found {
        check(&mut flags, d).map_err(|why| at(d.line, why))?;
    }
    let mut out = Vec::with_capacity(argv.len() + found.len());
    out.push(argv[0].clone());
    for d in found {
        out.push(flag(&d).into());
    }
    out.extend(argv.into_iter().skip(2));
    Ok((out, Some(path)))
}

/// A directive as one flag, `--name=value`: a value that starts with `-` (`requirepass
/// -secret`) stays a value, as Redis reads it.
fn flag(d: &Directive) -> String {
    format!("--{}={}", d.name, d.value)
}

/// Checks one directive alone as clap checks its flag, so that an error names its line: an
/// unknown name (with clap's suggestion) or a value its flag refuses. What only several
/// directives together can break (`region` without `regions-etcd`) is left to the whole
/// command line.
fn check(flags: &mut clap::Command, d: &Directive) -> Result<(), String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if matches!(d.name.as_str(), "help" | "version") {
        return Err(format!("unknown directive '{}'", d.name));
    }
    let Err(e) = flags.try_get_matches_from_mut(["sluice".to_string(), flag(d)]) else {
        return Ok(());
    };
    let long = format!("--{}", d.name);
    let context = |kind| match e.get(kind) {
        Some(ContextValue::String(s)) => vec![s.clone()],
        Some(ContextValue::Strings(v)) => v.clone(),
        _ => Vec::new(),
    };
    let named = |kind| context(kind).first().map(|arg| arg.starts_with(&long)) == Some(true);
    let value = || format!("invalid value '{}' for '{}'", d.value, d.name);
    match e.kind() {
        ErrorKind::MissingRequiredArgument => Ok(()),
        ErrorKind::UnknownArgument if named(ContextKind::InvalidArg) => {
            let mut why = format!("unknown directive '{}'", d.name);
            if let Some(like) = context(ContextKind::SuggestedArg).first() {
                why.push_str(&format!(
                    " (a similar one exists: '{}')",
                    like.trim_start_matches('-')
                ));
            }
            Err(why)
        }
        ErrorKind::ValueValidation if named(ContextKind::InvalidArg) => {
            match std::error::Error::source(&e) {
                Some(why) => Err(format!("{}: {why}", value())),
                None => Err(value()),
            }
        }
        ErrorKind::InvalidValue if named(ContextKind::InvalidArg) => {
            let valid = context(ContextKind::ValidValue);
            if valid.is_empty() {
                Err(value())
            } else {
                Err(format!(
                    "{} (possible values: {})",
                    value(),
                    valid.join(", ")
                ))
            }
        }
        // Anything else: clap's own words.
        _ => {
            let text = e.render().to_string();
            let first = text.lines().next().unwrap_or_default();
            Err(format!(
                "'{} {}': {}",
                d.name,
                d.value,
                first.trim_start_matches("error: ")
            ))
        }
    }
}

/// The directive names of `text`, canonical, skipping lines that do not parse.
pub fn names(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| split(l).ok()?.first().map(|n| canonical(n)))
        .collect()
}

/// Settings whose value is several words, written unquoted (`replicaof HOST PORT`).
const MULTI_WORD: &[&str] = &["replicaof"];

/// A directive's line.
fn line_of(name: &str, value: &str) -> String {
    if MULTI_WORD.contains(&name) {
        let words: Vec<String> = value.split(' ').map(quote).collect();
        return format!("{name} {}", words.join(" "));
    }
    format!("{name} {}", quote(value))
}

/// `text` with each `(name, value)` of `updates` written in (see the module docs).
pub fn rewrite(text: &str, updates: &[(String, Option<String>)]) -> String {
    let mut done = vec![false; updates.len()];
    let mut out = String::with_capacity(text.len() + 64);
    for line in text.lines() {
        let name = split(line)
            .ok()
            .and_then(|w| w.first().map(|n| canonical(n)));
        let hit = name.and_then(|n| updates.iter().position(|(u, _)| *u == n));
        match hit {
            None => push_line(&mut out, line),
            Some(i) if done[i] => {}
            Some(i) => {
                done[i] = true;
                if let Some(value) = &updates[i].1 {
                    push_line(&mut out, &line_of(&updates[i].0, value));
                }
            }
        }
    }
    let mut header = false;
    for ((name, value), done) in updates.iter().zip(done) {
        if let (Some(value), false) = (value, done) {
            if !header {
                push_line(&mut out, "# Generated by CONFIG REWRITE");
                header = true;
            }
            push_line(&mut out, &line_of(name, value));
        }
    }
    out
}

fn push_line(out: &mut String, line: &str) {
    out.push_str(line);
    out.push('\n');
}

/// Replaces `path` with `text` atomically: a temporary file in the same directory, synced,
/// then renamed over it (keeping the old file's permissions).
///
/// # Errors
/// Any I/O error; the old file is then unchanged.
pub fn write_atomic(path: &Path, text: &str) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(".{name}.rewrite-{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        if let Ok(meta) = std::fs::metadata(path) {
            f.set_permissions(meta.permissions())?;
        }
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_become_directives() {
        let text = "# a comment\n\nport 7000\n  maxmemory   1gb  \nslaveof 10.0.0.1 6379\nrequirepass \"a b\\\"c\"\nmasterauth 'x y'\n";
        let d = directives(text).unwrap();
        let pairs: Vec<(&str, &str)> = d
            .iter()
            .map(|d| (d.name.as_str(), d.value.as_str()))
            .collect();
        assert_eq!(
            pairs,
            [
                ("port", "7000"),
                ("maxmemory", "1gb"),
                ("replicaof", "10.0.0.1 6379"),
                ("requirepass", "a b\"c"),
                ("masterauth", "x y"),
            ]
        );
        assert_eq!(d[0].line, 3);
        assert_eq!(directives("\nport"), Err((2, "'port' has no value".into())));
        assert!(directives("x \"open").unwrap_err().1.contains("unbalanced"));
        assert!(directives("x \"a\"b").is_err());
    }

    #[test]
    fn a_bad_line_names_the_file_the_line_and_the_directive() {
        let dir = std::env::temp_dir().join(format!("sluice-badconf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bad.conf");
        let refused = |text: &str| {
            std::fs::write(&path, text).unwrap();
            expand(vec![OsString::from("sluice"), path.clone().into()]).unwrap_err()
        };
        let file = path.display();
        assert_eq!(
            refused("port 7000\n# typo below\nbogus-directive 5\n"),
            format!("{file}:3: unknown directive 'bogus-directive' (a similar one exists: 'dir')")
        );
        assert_eq!(
            refused("port abc\n"),
            format!("{file}:1: invalid value 'abc' for 'port': invalid digit found in string")
        );
        assert_eq!(
            refused("tls-replication maybe\n"),
            format!(
                "{file}:1: invalid value 'maybe' for 'tls-replication': 'maybe' must be yes or no"
            )
        );
        assert_eq!(
            refused("help 1\n"),
            format!("{file}:1: unknown directive 'help'")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn quoting_round_trips() {
        for v in [
            "plain",
            "a b",
            "",
            "q\"uo\\te",
            "tab\there",
            "#hash",
            "new\nline",
        ] {
            let line = format!("name {}", quote(v));
            let words = split(&line).unwrap();
            assert_eq!(words, ["name", v], "{line}");
        }
    }

    #[test]
    fn rewrite_keeps_comments_and_order() {
        let text = "# top\nport 7000\n# the limit\nmaxmemory 1gb\nmaxmemory 2gb\nreplicaof h 1\n";
        let updates = vec![
            ("maxmemory".to_string(), Some("3gb".to_string())),
            ("replicaof".to_string(), None),
            ("port".to_string(), Some("7001".to_string())),
            ("timeout".to_string(), Some("30".to_string())),
        ];
        assert_eq!(
            rewrite(text, &updates),
            "# top\nport 7001\n# the limit\nmaxmemory 3gb\n# Generated by CONFIG REWRITE\ntimeout 30\n"
        );
    }

    #[test]
    fn expand_puts_the_file_before_the_flags() {
        let dir = std::env::temp_dir().join(format!("sluice-conffile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.conf");
        std::fs::write(&path, "port 7000\ntimeout 5\n").unwrap();
        let argv = vec![
            OsString::from("sluice"),
            path.clone().into(),
            "--port".into(),
            "7001".into(),
        ];
        let (out, file) = expand(argv).unwrap();
        assert_eq!(file.as_deref(), Some(path.as_path()));
        assert_eq!(
            out,
            ["sluice", "--port=7000", "--timeout=5", "--port", "7001"]
        );
        std::fs::write(&path, "requirepass -secret\n").unwrap();
        let (out, _) = expand(vec![OsString::from("sluice"), path.clone().into()]).unwrap();
        let config = <crate::config::Config as clap::Parser>::try_parse_from(out).unwrap();
        assert_eq!(config.requirepass.as_deref(), Some("-secret"));
        let flags = vec![OsString::from("sluice"), "proxy".into()];
        assert_eq!(expand(flags.clone()).unwrap(), (flags, None));
        write_atomic(&path, "port 1\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "port 1\n");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
