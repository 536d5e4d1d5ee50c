//! Sentinel over TLS (issue 27): the real `redis-sentinel`, with a TLS port and
//! `tls-replication yes`, monitors a primary and a replica that replicate over TLS, finds the
//! replica at its TLS port (announced with `REPLCONF listening-port`), and fails over when the
//! primary dies; the sidecar asks the Sentinel over TLS (`--sentinel-tls yes`) and follows the
//! new primary over TLS, with the quota kept.

use std::collections::HashMap;
use std::time::Duration;

use sluice_tests::tls::{Certs, have_openssl};
use sluice_tests::{
    RedisSentinel, Sluice, free_port, have_tool, rl_check, try_connect, wait_until,
};

const MASTER: &str = "tlsmaster";

/// A node with a TLS port (client certificates required) that replicates over TLS.
fn tls_node(certs: &Certs, tls_port: u16, extra: &[&str]) -> Sluice {
    let mut flags = certs.server_flags(tls_port, "yes");
    flags.extend(["--threads", "1", "--tls-replication", "yes"].map(String::from));
    flags.extend(extra.iter().map(|s| s.to_string()));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    Sluice::start_with(&flags)
}

/// `RL.CHECK key 5 1h COST 0` on the plain port: what is left, not spending.
fn left(port: u16, key: &str) -> Option<i64> {
    let mut c = try_connect(port)?;
    Some(rl_check(&mut c, &[key, "5", "1h", "COST", "0"]).ok()?[2])
}

fn sentinel_cmd<T: redis::FromRedisValue>(sentinel: &RedisSentinel, what: &str) -> Option<T> {
    redis::cmd("SENTINEL")
        .arg(what)
        .arg(MASTER)
        .query(&mut sentinel.client())
        .ok()
}

/// Where the Sentinel says the primary is.
fn master_port(sentinel: &RedisSentinel) -> Option<u16> {
    let addr: Vec<String> = sentinel_cmd(sentinel, "GET-MASTER-ADDR-BY-NAME")?;
    addr.get(1)?.parse().ok()
}

/// One `RL.CHECK` through the sidecar that is allowed, within 20 s: `[allowed, limit, left, ..]`.
fn check_through(proxy: &Sluice, key: &str) -> Vec<i64> {
    let mut c = proxy.client();
    let mut last = String::new();
    let got = wait_until(Duration::from_secs(20), || {
        let r = rl_check(&mut c, &[key, "5", "1h"]);
        last = format!("{r:?}");
        r.ok().filter(|r| r[0] == 1)
    });
    got.unwrap_or_else(|| panic!("no check through the sidecar: {last}\n{}", proxy.log()))
}

#[test]
fn sentinel_over_tls_fails_over_and_the_sidecar_follows() {
    if !have_openssl() || !have_tool("redis-sentinel") {
        return;
    }
    let certs = Certs::new();
    let (ptls, rtls) = (free_port(), free_port());
    let primary = tls_node(&certs, ptls, &[]);
    let replica = tls_node(&certs, rtls, &["--replicaof", &format!("127.0.0.1:{ptls}")]);

    // The replica links over TLS and announces its TLS port: the primary's INFO lists it.
    let listed = wait_until(Duration::from_secs(20), || {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut try_connect(primary.port)?)
            .ok()?;
        info.contains(&format!("port={rtls},state=online"))
            .then_some(info)
    });
    assert!(
        listed.is_some(),
        "replica not listed at its TLS port:\n{}",
        replica.log()
    );

    let stls = free_port();
    let config = format!(
        "tls-port {stls}\n\
         tls-cert-file {crt}\n\
         tls-key-file {key}\n\
         tls-ca-cert-file {ca}\n\
         tls-replication yes\n\
         sentinel monitor {MASTER} 127.0.0.1 {ptls} 1\n\
         sentinel down-after-milliseconds {MASTER} 1000\n\
         sentinel failover-timeout {MASTER} 10000",
        crt = certs.path("node.crt"),
        key = certs.path("node.key"),
        ca = certs.path("ca.crt"),
    );
    let sentinel = RedisSentinel::start(&config);
    // It reaches the primary over TLS and finds the replica at its TLS port.
    let found = wait_until(Duration::from_secs(20), || {
        let replicas: Vec<HashMap<String, String>> = sentinel_cmd(&sentinel, "REPLICAS")?;
        replicas
            .iter()
            .any(|r| {
                r.get("port") == Some(&rtls.to_string())
                    && r.get("flags").is_some_and(|f| f == "slave")
            })
            .then_some(())
    });
    assert!(
        found.is_some(),
        "the sentinel did not find the replica: {:?}",
        sentinel_cmd::<Vec<HashMap<String, String>>>(&sentinel, "REPLICAS")
    );

    // The sidecar asks the Sentinel over TLS and checks on the primary over TLS.
    let proxy = Sluice::start_proxy(&[
        "--sentinel",
        &format!("127.0.0.1:{stls}"),
        "--master-name",
        MASTER,
        "--sentinel-tls",
        "yes",
        "--upstream-tls-ca-cert-file",
        &certs.path("ca.crt"),
        "--upstream-tls-cert-file",
        &certs.path("node.crt"),
        "--upstream-tls-key-file",
        &certs.path("node.key"),
        "--fail-mode",
        "closed",
        "--timeout-ms",
        "500",
    ]);
    assert_eq!(check_through(&proxy, "k")[2], 4);
    assert_eq!(left(primary.port, "k"), Some(4));
    let copied = wait_until(Duration::from_secs(10), || {
        (left(replica.port, "k") == Some(4)).then_some(())
    });
    assert!(copied.is_some(), "the check did not reach the replica");

    // The primary dies: the Sentinel promotes the replica (over TLS) and names its TLS port.
    drop(primary);
    let promoted = wait_until(Duration::from_secs(30), || {
        (master_port(&sentinel) == Some(rtls)).then_some(())
    });
    assert!(promoted.is_some(), "no failover:\n{}", sentinel.log());
    let role = wait_until(Duration::from_secs(10), || {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut try_connect(replica.port)?)
            .ok()?;
        info.contains("role:master").then_some(())
    });
    assert!(
        role.is_some(),
        "the replica was not promoted:\n{}",
        replica.log()
    );

    // The sidecar follows it, and the quota spent before the failover holds.
    assert_eq!(check_through(&proxy, "k")[2], 3, "{}", proxy.log());
    assert_eq!(left(replica.port, "k"), Some(3));
}
