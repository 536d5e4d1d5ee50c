//! The shipped service files (`contrib/`) agree with the failover the docs recommend.
//!
//! - `contrib/systemd/sluice.service` restarts a killed node later than Sentinel's
//!   `down-after-milliseconds` as docs/replication.md recommends it: a primary back sooner is
//!   seen healthy, nothing fails over, and it serves its older snapshot as the primary (issue
//!   37, item 6). Its start timeout outlasts the longest wait for the Sentinels' verdict.
//! - `contrib/sluice.conf` shows the lines that make the node ask the Sentinels before it
//!   serves, commented, and they are valid directives.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

fn repo_file(rel: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `down-after-milliseconds` docs/replication.md recommends: its Sentinel config block
/// and its "Keep ... at N or more" must say the same.
fn recommended_down_after() -> Duration {
    let doc = repo_file("docs/replication.md");
    let in_block: Vec<u64> = doc
        .lines()
        .filter_map(|l| l.trim().strip_prefix("sentinel down-after-milliseconds "))
        .filter_map(|rest| rest.split_whitespace().nth(1)?.parse().ok())
        .collect();
    let floor: u64 = doc
        .split("Keep `down-after-milliseconds` at ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .expect("docs/replication.md: 'Keep `down-after-milliseconds` at N or more'");
    assert!(
        !in_block.is_empty() && in_block.iter().all(|&ms| ms >= floor),
        "docs/replication.md's Sentinel config ({in_block:?}) is below its own floor ({floor})"
    );
    Duration::from_millis(floor)
}

/// A `[Service]` setting of the unit, as systemd reads a time span (`5`, `5s`, `500ms`,
/// `2min`).
fn unit_time(unit: &str, name: &str) -> Duration {
    let value = unit
        .lines()
        .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("sluice.service has no {name}"))
        .trim();
    let digits = value.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let n: u64 = digits.parse().unwrap_or_else(|_| panic!("{name}={value}"));
    match &value[digits.len()..] {
        "" | "s" | "sec" => Duration::from_secs(n),
        "ms" | "msec" => Duration::from_millis(n),
        "m" | "min" => Duration::from_secs(n * 60),
        unit => panic!("{name}={value}: unit '{unit}' not read here"),
    }
}

#[test]
fn the_unit_restarts_a_node_after_sentinels_down_after() {
    let unit = repo_file("contrib/systemd/sluice.service");
    let down_after = recommended_down_after();
    let restart = unit_time(&unit, "RestartSec");
    assert!(
        restart > down_after,
        "RestartSec={restart:?} brings a killed primary back before Sentinel's down-after-milliseconds ({down_after:?}, docs/replication.md) ends: it serves its older snapshot as the primary and nothing fails over"
    );
    let start = unit_time(&unit, "TimeoutStartSec");
    assert!(
        start > sluice_node::sentinel_start::MAX_WAIT,
        "TimeoutStartSec={start:?} fails a node that waits for the Sentinels' verdict ({:?})",
        sluice_node::sentinel_start::MAX_WAIT
    );
}

#[test]
fn the_config_shows_the_sentinel_lines_commented() {
    let conf = repo_file("contrib/sluice.conf");
    let commented: Vec<&str> = conf
        .lines()
        .filter_map(|l| l.strip_prefix("# "))
        .filter(|l| l.starts_with("sentinel ") || l.starts_with("master-name "))
        .collect();
    let live = sluice_node::conffile::directives(&conf).expect("contrib/sluice.conf");
    assert!(
        live.iter()
            .all(|d| d.name != "sentinel" && d.name != "master-name"),
        "contrib/sluice.conf: the sentinel lines are examples, to be commented"
    );
    // Uncommented, the file is a valid config that asks the Sentinels.
    let uncommented = format!("{conf}\n{}\n", commented.join("\n"));
    let flags = sluice_node::conffile::directives(&uncommented)
        .expect("contrib/sluice.conf")
        .into_iter()
        .map(|d| format!("--{}={}", d.name, d.value));
    let config = sluice_node::Config::try_parse_from(std::iter::once("sluice".into()).chain(flags))
        .unwrap_or_else(|e| panic!("contrib/sluice.conf with its sentinel lines: {e}"));
    assert!(
        config.sentinel.len() >= 2 && config.master_name.is_some(),
        "contrib/sluice.conf shows {} Sentinels and master-name {:?}",
        config.sentinel.len(),
        config.master_name
    );
}
