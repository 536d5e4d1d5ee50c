//! The binary's command line. (Being an integration test of this package also makes
//! `cargo test --workspace` build the `sluice` binary that the end-to-end suite starts.)

use std::process::Command;

#[test]
fn help_lists_the_flags_and_bad_flags_fail() {
    let bin = env!("CARGO_BIN_EXE_sluice");
    let help = Command::new(bin).arg("--help").output().unwrap();
    assert!(help.status.success());
    let text = String::from_utf8_lossy(&help.stdout);
    for flag in ["--port", "--bind", "--threads"] {
        assert!(text.contains(flag), "{flag} missing from --help:\n{text}");
    }
    let bad = Command::new(bin)
        .arg("--port")
        .arg("notaport")
        .output()
        .unwrap();
    assert!(!bad.status.success());
}
