//! docs/flags.md is generated from the clap definitions, so the flag reference cannot drift from
//! the flags: this test renders every flag of the node (`sluice_node::Config`) and of the sidecar
//! (`sluice_proxy::ProxyConfig`), in definition order, and fails when the file differs.
//!
//! `SLUICE_BLESS=1 cargo test -p sluice --test flags_doc` rewrites the file.
//!
//! The commands are built as the binary builds them: the node's flags at the top level, the
//! sidecar's under `proxy`, each flag also read from an environment variable
//! ([`sluice_node::config::with_env`]), which the table names.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::{Args, Command, CommandFactory};

const REGENERATE: &str = "SLUICE_BLESS=1 cargo test -p sluice --test flags_doc";

/// The file: a short preamble, then one table per program.
fn render() -> String {
    let node = sluice_node::config::with_env(sluice_node::Config::command(), "SLUICE_");
    let proxy = sluice_node::config::with_env(
        sluice_proxy::ProxyConfig::augment_args(Command::new("proxy")),
        "SLUICE_PROXY_",
    );
    let mut out = String::new();
    out.push_str("# Flags\n\n");
    let _ = writeln!(
        out,
        "<!-- Generated from the clap definitions by crates/sluice/tests/flags_doc.rs: do not edit.\n     \
         Regenerate with `{REGENERATE}`. -->\n"
    );
    out.push_str(
        "Every flag of the node (`sluice [CONFIG-FILE] [flags]`) and of the gateway sidecar \
         (`sluice proxy [flags]`), in the order `--help` lists them. Each flag is also read from \
         the environment variable in the last column; a flag on the command line wins over the \
         variable, and a config file's directive (a flag's name without the dashes) is read \
         before the command line's flags. `--help` and `--version` print and exit.\n\n",
    );
    table(&mut out, "The node: `sluice`", &node);
    out.push('\n');
    table(&mut out, "The sidecar: `sluice proxy`", &proxy);
    out
}

/// One program's flags as a markdown table under a `##` heading.
fn table(out: &mut String, heading: &str, cmd: &Command) {
    let _ = writeln!(out, "## {heading}\n");
    out.push_str("| Flag | Value | Default | Description | Environment |\n");
    out.push_str("|---|---|---|---|---|\n");
    for arg in cmd.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        if arg.is_hide_set() || matches!(long, "help" | "version") {
            continue;
        }
        let flag = match arg.get_short() {
            Some(s) => format!("`-{s}`, `--{long}`"),
            None => format!("`--{long}`"),
        };
        let takes_value = arg.get_action().takes_values();
        let choices: Vec<String> = arg
            .get_possible_values()
            .iter()
            .filter(|v| !v.is_hide_set())
            .map(|v| format!("`{}`", v.get_name()))
            .collect();
        // The value's choices when clap knows them (a `value_enum` or a list), else its name.
        let value = match arg.get_value_names() {
            _ if !takes_value => String::new(),
            _ if !choices.is_empty() => choices.join(" \\| "),
            Some(names) => names
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(" "),
            None => String::new(),
        };
        let default = arg
            .get_default_values()
            .iter()
            .map(|v| format!("`{}`", v.to_string_lossy()))
            .collect::<Vec<_>>()
            .join(", ");
        // clap drops the period that ends a one-paragraph help; the table puts it back.
        let mut help = arg
            .get_long_help()
            .or(arg.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default();
        if !help.is_empty() && !help.trim_end().ends_with('.') {
            help = format!("{}.", help.trim_end());
        }
        let env = arg
            .get_env()
            .map(|e| format!("`{}`", e.to_string_lossy()))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "| {flag} | {value} | {default} | {} | {env} |",
            cell(&help)
        );
    }
}

/// Text fit for one table cell: paragraphs joined by `<br>`, pipes escaped.
fn cell(text: &str) -> String {
    text.trim()
        .split("\n\n")
        .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("<br>")
        .replace('|', "\\|")
}

fn doc_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/flags.md")
}

#[test]
fn docs_flags_md_matches_the_clap_definitions() {
    let want = render();
    let path = doc_path();
    if std::env::var_os("SLUICE_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &want).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        return;
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    if have != want {
        let first = have
            .lines()
            .zip(want.lines())
            .position(|(h, w)| h != w)
            .unwrap_or_else(|| have.lines().count().min(want.lines().count()));
        panic!(
            "docs/flags.md is not what the clap definitions generate (first difference at line {}):\n  \
             file:      {:?}\n  generated: {:?}\nRegenerate it with `{REGENERATE}` and commit it.",
            first + 1,
            have.lines().nth(first).unwrap_or("<end of file>"),
            want.lines().nth(first).unwrap_or("<end of file>"),
        );
    }
}
