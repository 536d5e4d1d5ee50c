//! The binary's command line. (Being an integration test of this package also makes
//! `cargo test --workspace` build the `sluice` binary that the end-to-end suite starts.)

use std::process::{Command, Output};

fn sluice(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn help_lists_the_flags_and_the_modes_and_bad_flags_fail() {
    for help in [&["--help"][..], &["help"]] {
        let out = sluice(help);
        assert!(out.status.success(), "{help:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        for word in ["--port", "--bind", "--threads", "proxy", "cluster"] {
            assert!(text.contains(word), "{word} missing from {help:?}:\n{text}");
        }
    }
    for (mode, word) in [("proxy", "--upstream"), ("cluster", "add-node")] {
        let out = sluice(&[mode, "--help"]);
        assert!(out.status.success(), "{mode} --help");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains(word),
            "{word} missing from {mode} --help:\n{text}"
        );
    }
    assert!(!sluice(&["--port", "notaport"]).status.success());
    assert!(!sluice(&["nosuchmode"]).status.success());
    assert!(!sluice(&["--port", "7000", "proxy"]).status.success());
}
