//! The help a newcomer reads, and the errors a mistyped command line gets: the usage names the
//! config file, `-h` is short (what it is, the common flags, three examples) and `--help` long,
//! a mistyped subcommand is named as one (with a suggestion), a word too many is said to be
//! one, and every positional argument is described.

use std::process::{Command, Output};

fn sluice(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn the_usage_names_the_config_file_and_describes_it() {
    for flag in ["-h", "--help"] {
        let out = sluice(&[flag]);
        assert!(out.status.success(), "{flag}");
        let text = stdout(&out);
        assert!(
            text.contains("Usage: sluice [CONFIG-FILE] [OPTIONS]"),
            "{flag}:\n{text}"
        );
        let described = text
            .lines()
            .find(|l| l.trim_start().starts_with("[CONFIG-FILE]"))
            .unwrap_or_else(|| panic!("no [CONFIG-FILE] argument in {flag}:\n{text}"));
        assert!(described.contains("config file"), "{described}");
    }
}

#[test]
fn short_help_is_short_and_long_help_has_every_flag() {
    let short = sluice(&["-h"]);
    assert!(short.status.success());
    let short = stdout(&short);
    let long = stdout(&sluice(&["--help"]));
    assert!(
        short.lines().count() <= 40,
        "-h is {} lines:\n{short}",
        short.lines().count()
    );
    assert!(long.lines().count() > 2 * short.lines().count());
    assert!(short.starts_with("A rate-limiter server that speaks the Redis protocol"));
    let flags: Vec<&str> = short
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("--"))
        .collect();
    assert!((4..=6).contains(&flags.len()), "{flags:?}");
    for flag in ["--port", "--bind", "--http-port"] {
        assert!(short.contains(flag), "{flag} not in -h:\n{short}");
    }
    for flag in ["--shards", "--maxmemory-policy", "--loglevel"] {
        assert!(!short.contains(flag), "{flag} in -h");
        assert!(long.contains(flag), "{flag} not in --help");
    }
    let examples = short
        .split("Examples:\n")
        .nth(1)
        .expect("an Examples section in -h");
    let lines: Vec<&str> = examples.lines().take_while(|l| !l.is_empty()).collect();
    assert_eq!(lines.len(), 3, "{examples}");
    assert!(lines.iter().all(|l| l.trim_start().starts_with("sluice")));
    assert!(short.contains("sluice --help"), "-h points to --help");
}

#[test]
fn the_sidecars_short_help_is_short_too() {
    let short = stdout(&sluice(&["proxy", "-h"]));
    let long = stdout(&sluice(&["proxy", "--help"]));
    for flag in ["--upstream", "--sentinel", "--fail-mode"] {
        assert!(short.contains(flag), "{flag} not in proxy -h:\n{short}");
    }
    for flag in [
        "--syslog-ident",
        "--upstream-tls-key-file",
        "--http-trusted-proxies",
    ] {
        assert!(!short.contains(flag), "{flag} in proxy -h");
        assert!(long.contains(flag), "{flag} not in proxy --help");
    }
    assert!(short.lines().count() <= 30, "{short}");
}

#[test]
fn a_mistyped_subcommand_is_named_with_a_suggestion() {
    let out = sluice(&["proxi", "--upstream", "x"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("unrecognized subcommand 'proxi'"), "{err}");
    assert!(err.contains("similar subcommand exists: 'proxy'"), "{err}");
    assert!(!err.contains("cannot read config file"), "{err}");
}

#[test]
fn a_missing_file_named_as_a_path_is_still_a_config_file() {
    for path in ["missing.conf", "/nonexistent/sluice"] {
        let out = sluice(&[path]);
        assert_eq!(out.status.code(), Some(1), "{path}");
        let err = stderr(&out);
        assert!(err.contains("cannot read config file"), "{path}: {err}");
    }
}

#[test]
fn an_existing_file_first_is_still_a_config_file() {
    let dir = std::env::temp_dir().join(format!("sluice-help-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("proxi");
    std::fs::write(&file, "port notaport\n").unwrap();
    let out = sluice(&[file.to_str().unwrap()]);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("proxi:1"), "{err}");
}

#[test]
fn a_word_too_many_is_said_to_be_one() {
    let out = sluice(&["--port", "7000", "extra1"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("unexpected argument 'extra1'"), "{err}");
    assert!(!err.contains("cannot be used with"), "{err}");

    let out = sluice(&["--port", "7000", "proxy"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("sluice proxy [OPTIONS]"), "{err}");
    assert!(!err.contains("cannot be used with"), "{err}");
}

#[test]
fn every_positional_argument_is_described() {
    for (args, names) in [
        (
            &["cluster", "create", "--help"][..],
            &["<HOST:PORT>..."][..],
        ),
        (&["cluster", "add-node", "--help"], &["<NEW>", "<EXISTING>"]),
        (
            &["cluster", "remove-node", "--help"],
            &["<NODE>", "<EXISTING>"],
        ),
        (&["cluster", "show", "--help"], &["<HOST:PORT>"]),
        (&["top", "--help"], &["<HOST:PORT>"]),
    ] {
        let out = sluice(args);
        assert!(out.status.success(), "{args:?}");
        let text = stdout(&out);
        let arguments = text
            .split("Arguments:\n")
            .nth(1)
            .unwrap_or_else(|| panic!("{args:?}:\n{text}"));
        for name in names {
            let line = arguments
                .lines()
                .find(|l| l.trim_start().starts_with(name))
                .unwrap_or_else(|| panic!("{name} in {args:?}:\n{text}"));
            let description = line.trim_start()[name.len()..].trim();
            assert!(
                !description.is_empty(),
                "{name} has no description in {args:?}"
            );
        }
    }
}
