//! A bad config file, on the real binary: the node refuses to start (exit code 1) with one
//! line that names the file, the line number and the directive, and keeps clap's suggestion
//! for a mistyped name (issue 41, item 7).

use sluice_tests::{TempDir, refused_config};

/// Starts `sluice FILE` with `text` as the file; its exit code and stderr.
fn refused(dir: &TempDir, text: &str) -> (Option<i32>, String) {
    refused_config(dir, "sluice.conf", text)
}

#[test]
fn a_bad_line_is_named_by_file_line_and_directive() {
    let dir = TempDir::new("conf-errors");
    let file = dir.path().join("sluice.conf").display().to_string();
    for (text, expected) in [
        (
            "port 0\n# a comment\nbogus-directive 5\n",
            format!(
                "sluice: {file}:3: unknown directive 'bogus-directive' (a similar one exists: 'dir')\n"
            ),
        ),
        (
            "port abc\n",
            format!(
                "sluice: {file}:1: invalid value 'abc' for 'port': invalid digit found in string\n"
            ),
        ),
        (
            "port 0\n\nloglevel loud\n",
            format!(
                "sluice: {file}:3: invalid value 'loud' for 'loglevel' (possible values: debug, verbose, notice, warning)\n"
            ),
        ),
        (
            "port 0\nthreads 2000\n",
            format!(
                "sluice: {file}:2: invalid value '2000' for 'threads': 2000 is not in 1..=1024\n"
            ),
        ),
        (
            "port 0\nmaxmemory lots\n",
            format!(
                "sluice: {file}:2: invalid value 'lots' for 'maxmemory': 'lots' is not a size (examples: 1048576, 100mb, 2gb)\n"
            ),
        ),
    ] {
        let (code, stderr) = refused(&dir, text);
        assert_eq!(code, Some(1), "{text:?}: {stderr}");
        assert_eq!(stderr, expected, "{text:?}");
    }
}

#[test]
fn directives_that_need_each_other_are_checked_together() {
    // `region` requires `regions-etcd`: alone on its line it is not an error of that line.
    let dir = TempDir::new("conf-errors-requires");
    let (code, stderr) = refused(&dir, "port 0\nregion eu\n");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--regions-etcd"), "{stderr}");
}
