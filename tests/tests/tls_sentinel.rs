//! Sentinel over TLS (issue 27): the real `redis-sentinel`, with a TLS port and
//! `tls-replication yes`, monitors a primary and a replica that replicate over TLS, finds the
//! replica at its TLS port (announced with `REPLCONF listening-port`), and fails over when the
//! primary dies. Nodes and Sentinel run TLS only (`--port 0 --tls-port`, `port 0`). The sidecar
//! asks the Sentinel over TLS (`--sentinel-tls yes`) and follows the new primary over TLS, with
//! the quota kept.

use std::time::Duration;

use sluice_tests::tls::{Certs, have_openssl};
use sluice_tests::{RedisSentinel, Sluice, allowed_through, have_tool, wait_until};

const MASTER: &str = "tlsmaster";

/// A TLS-only node (`--port 0 --tls-port 0`: its one port, a free one, is `.port`), client
/// certificates required, replicating over TLS.
fn tls_only_node(certs: &Certs, extra: &[&str]) -> Sluice {
    let mut flags: Vec<String> = ["--port", "0", "--bind", "127.0.0.1"]
        .map(String::from)
        .to_vec();
    flags.extend(certs.server_flags(0, "yes"));
    flags.extend(["--threads", "1", "--tls-replication", "yes"].map(String::from));
    flags.extend(extra.iter().map(|s| s.to_string()));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    Sluice::start_exact(&flags, &[])
}

/// `RL.CHECK key 5 1h COST 0` over TLS: what is left, not spending.
fn left(certs: &Certs, port: u16, key: &str) -> Option<i64> {
    let out = certs.cli(port, true, &["RL.CHECK", key, "5", "1h", "COST", "0"]);
    out.lines().nth(2)?.trim().parse().ok()
}

/// Whether `needle` follows `key` somewhere in redis-cli's flattened reply.
fn pair(out: &str, key: &str, needle: &str) -> bool {
    let lines: Vec<&str> = out.lines().map(str::trim).collect();
    lines.windows(2).any(|w| w[0] == key && w[1] == needle)
}

/// Where the Sentinel says the primary is.
fn master_port(certs: &Certs, sentinel: u16) -> Option<u16> {
    let out = certs.cli(
        sentinel,
        true,
        &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER],
    );
    out.lines().nth(1)?.trim().parse().ok()
}

/// One `RL.CHECK` through the sidecar that is allowed, within 20 s: `[allowed, limit, left, ..]`.
fn check_through(proxy: &Sluice, key: &str) -> Vec<i64> {
    allowed_through(proxy, &mut proxy.client(), &[key, "5", "1h"])
}

#[test]
fn sentinel_over_tls_fails_over_and_the_sidecar_follows() {
    if !have_openssl() || !have_tool("redis-sentinel") || !have_tool("redis-cli") {
        return;
    }
    let certs = Certs::new();
    let primary = tls_only_node(&certs, &[]);
    let ptls = primary.port;
    let replica = tls_only_node(&certs, &["--replicaof", &format!("127.0.0.1:{ptls}")]);
    let rtls = replica.port;
    let port = certs.cli(ptls, true, &["CONFIG", "GET", "port"]);
    assert!(pair(&port, "port", "0"), "TLS only: no plain port\n{port}");

    // The replica links over TLS and announces its TLS port: the primary's INFO lists it.
    let listed = wait_until(Duration::from_secs(20), || {
        let info = certs.cli(ptls, true, &["INFO", "replication"]);
        info.contains(&format!("port={rtls},state=online"))
            .then_some(())
    });
    assert!(
        listed.is_some(),
        "replica not listed at its TLS port:\n{}",
        replica.log()
    );

    let tls_lines = format!(
        "tls-cert-file {crt}\ntls-key-file {key}\ntls-ca-cert-file {ca}\ntls-replication yes",
        crt = certs.path("node.crt"),
        key = certs.path("node.key"),
        ca = certs.path("ca.crt"),
    );
    let config = format!(
        "sentinel monitor {MASTER} 127.0.0.1 {ptls} 1\n\
         sentinel down-after-milliseconds {MASTER} 1000\n\
         sentinel failover-timeout {MASTER} 10000"
    );
    let pong = |port: u16| certs.cli(port, true, &["PING"]).trim() == "PONG";
    let sentinel = RedisSentinel::start_tls(&config, &tls_lines, &pong);
    let sport = sentinel.port;
    // It reaches the primary over TLS and finds the replica at its TLS port.
    let found = wait_until(Duration::from_secs(20), || {
        let out = certs.cli(sport, true, &["SENTINEL", "REPLICAS", MASTER]);
        (pair(&out, "port", &rtls.to_string()) && pair(&out, "flags", "slave")).then_some(())
    });
    assert!(
        found.is_some(),
        "the sentinel did not find the replica: {}",
        certs.cli(sport, true, &["SENTINEL", "REPLICAS", MASTER])
    );

    // The sidecar asks the Sentinel over TLS and checks on the primary over TLS.
    let proxy = certs.start_proxy(&[
        "--sentinel",
        &format!("127.0.0.1:{sport}"),
        "--master-name",
        MASTER,
        "--sentinel-tls",
        "yes",
        "--fail-mode",
        "closed",
        "--timeout-ms",
        "500",
    ]);
    assert_eq!(check_through(&proxy, "k")[2], 4);
    assert_eq!(left(&certs, ptls, "k"), Some(4));
    let copied = wait_until(Duration::from_secs(10), || {
        (left(&certs, rtls, "k") == Some(4)).then_some(())
    });
    assert!(copied.is_some(), "the check did not reach the replica");

    // The primary dies: the Sentinel promotes the replica (over TLS) and names its TLS port.
    drop(primary);
    let promoted = wait_until(Duration::from_secs(30), || {
        (master_port(&certs, sport) == Some(rtls)).then_some(())
    });
    assert!(promoted.is_some(), "no failover:\n{}", sentinel.log());
    let role = wait_until(Duration::from_secs(10), || {
        let info = certs.cli(rtls, true, &["INFO", "replication"]);
        info.contains("role:master").then_some(())
    });
    assert!(
        role.is_some(),
        "the replica was not promoted:\n{}",
        replica.log()
    );

    // The sidecar follows it, and the quota spent before the failover holds.
    assert_eq!(check_through(&proxy, "k")[2], 3, "{}", proxy.log());
    assert_eq!(left(&certs, rtls, "k"), Some(3));
}
