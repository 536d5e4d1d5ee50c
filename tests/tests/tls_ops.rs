//! TLS in the places around the client port (issue 27): etcd reached over TLS by the node and
//! the admin tool (a real etcd with `--client-cert-auth`), and the client certificate and CA
//! of a replica and of the sidecar reloaded when their files change. Certificates are made at test time with `openssl`.

use std::time::Duration;

use sluice_tests::tls::{Certs, have_openssl};
use sluice_tests::{
    Etcd, Sluice, TempDir, cluster_info_field, cluster_node, free_port, have_tool,
    output_text as text, rl_check, sluice_cluster, wait_until,
};

fn start(flags: &[String], extra: &[&str]) -> Sluice {
    let mut all: Vec<&str> = flags.iter().map(String::as_str).collect();
    all.extend_from_slice(extra);
    Sluice::start_with(&all)
}

fn rule_limit(conn: &mut redis::Connection, name: &str) -> Option<String> {
    let fields: Vec<(String, redis::Value)> =
        redis::cmd("RL.RULE").arg(&["GET", name]).query(conn).ok()?;
    fields.into_iter().find_map(|(k, v)| match (k.as_str(), v) {
        ("limit", redis::Value::Int(n)) => Some(n.to_string()),
        ("limit", redis::Value::BulkString(b)) => Some(String::from_utf8_lossy(&b).into()),
        _ => None,
    })
}

fn tls_etcd() -> Option<(Certs, Etcd)> {
    if !have_openssl() || !have_tool("etcd") {
        return None;
    }
    let certs = Certs::new();
    let etcd = Etcd::start_tls(&certs);
    Some((certs, etcd))
}

#[test]
fn rules_through_an_etcd_over_tls() {
    let Some((certs, etcd)) = tls_etcd() else {
        return;
    };
    let url = etcd.url();
    assert!(url.starts_with("https://"), "{url}");
    let flags = certs.file_flags("etcd-tls");
    let a = start(&flags, &["--rules-etcd", &url]);
    let b = start(&flags, &["--rules-etcd", &url]);
    let (mut ca, mut cb) = (a.client(), b.client());
    let version: i64 = redis::cmd("RL.RULE")
        .arg(&["SET", "user", "LIMIT", "7", "PERIOD", "1m"])
        .query(&mut ca)
        .unwrap_or_else(|e| panic!("{e}\n{}", a.log()));
    assert!(version > 0);
    // b learns it through its watch, over TLS too.
    let seen = wait_until(Duration::from_secs(10), || {
        (rule_limit(&mut cb, "user")? == "7").then_some(())
    });
    assert!(seen.is_some(), "b:\n{}", b.log());
    let hit: Vec<i64> = redis::cmd("RL.HIT")
        .arg(&["user", "bob"])
        .query(&mut cb)
        .unwrap();
    assert_eq!(hit[..3], [1, 7, 6]);

    // Trusting another CA, a node refuses etcd's certificate and says why.
    let other = Certs::new();
    let c = start(&other.file_flags("etcd-tls"), &["--rules-etcd", &url]);
    let refused = c.wait_for_log("invalid peer certificate");
    assert!(refused, "{}", c.log());
    assert!(
        c.log()
            .contains(&format!("cannot connect to etcd at {url}"))
    );
    assert_eq!(rule_limit(&mut c.client(), "user"), None);
    // Without the client certificate, etcd (--client-cert-auth) refuses the node.
    // The CA's two flags come first.
    let no_cert = start(&flags[..2], &["--rules-etcd", &url]);
    assert!(no_cert.wait_for_log("rules etcd: "), "{}", no_cert.log());
    assert_eq!(rule_limit(&mut no_cert.client(), "user"), None);
    // An https URL needs the CA; a plain URL with the CA is refused, not sent in the clear.
    let plain = Sluice::start_with(&["--rules-etcd", &url]);
    assert!(
        plain.wait_for_log("give --etcd-tls-ca-cert-file"),
        "{}",
        plain.log()
    );
}

#[test]
fn bad_etcd_tls_files_refuse_to_start() {
    if !have_openssl() {
        return;
    }
    let certs = Certs::new();
    let (ca, crt, key) = (
        certs.path("ca.crt"),
        certs.path("node.crt"),
        certs.path("node.key"),
    );
    let missing = certs.path("missing.crt");
    for (flags, why) in [
        (
            vec!["--etcd-tls-ca-cert-file", &missing],
            "etcd TLS: cannot read CA",
        ),
        (
            vec!["--etcd-tls-ca-cert-file", &key],
            "etcd TLS: cannot load CA",
        ),
        (
            vec![
                "--etcd-tls-ca-cert-file",
                &ca,
                "--etcd-tls-cert-file",
                &crt,
                "--etcd-tls-key-file",
                &crt,
            ],
            "etcd TLS: cannot load key",
        ),
        (
            vec!["--etcd-tls-cert-file", &crt, "--etcd-tls-key-file", &key],
            "--etcd-tls-ca-cert-file",
        ),
        (
            vec!["--etcd-tls-ca-cert-file", &ca, "--etcd-tls-cert-file", &crt],
            "--etcd-tls-key-file",
        ),
    ] {
        // A node that wrongly starts would serve until killed: `timeout` bounds it.
        let out = std::process::Command::new("timeout")
            .arg("20")
            .arg(sluice_tests::binary())
            .args(["--port", "0", "--rules-etcd", "https://127.0.0.1:1"])
            .args(&flags)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{flags:?}");
        assert!(text(&out).contains(why), "{flags:?}: {}", text(&out));
    }
}

#[test]
fn the_cluster_table_in_an_etcd_over_tls() {
    let Some((certs, etcd)) = tls_etcd() else {
        return;
    };
    let url = etcd.url();
    let flags = certs.file_flags("etcd-tls");
    let dir = TempDir::new("etcd-tls-cluster");
    let mut extra: Vec<&str> = flags.iter().map(String::as_str).collect();
    extra.extend(["--etcd", &url]);
    let node = cluster_node(0, &dir.path().join("nodes.conf"), &extra);
    let addr = format!("127.0.0.1:{}", node.port);
    let mut args = vec!["create", &addr, "--etcd", &url];
    args.extend(flags.iter().map(String::as_str));
    let out = sluice_cluster(&args);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("holds table epoch 1"), "{}", text(&out));
    let ok = wait_until(Duration::from_secs(10), || {
        (cluster_info_field(node.port, "cluster_state")? == "ok").then_some(())
    });
    assert!(ok.is_some(), "{}", node.log());
    // Without the CA, the admin tool refuses to store a table in that etcd.
    let other = cluster_node(0, &dir.path().join("other.conf"), &[]);
    let other_addr = format!("127.0.0.1:{}", other.port);
    let out = sluice_cluster(&[
        "create",
        &other_addr,
        "--etcd",
        &url,
        "--etcd-prefix",
        "/o/",
    ]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("give --etcd-tls-ca-cert-file"),
        "{}",
        text(&out)
    );
}

/// `RL.CHECK key 5 60 DRY`'s remaining on `conn`, if it answers: 4 for a key never checked,
/// 3 once one check has reached it.
fn remaining(conn: &mut redis::Connection, key: &str) -> Option<i64> {
    let r: Vec<i64> = redis::cmd("RL.CHECK")
        .arg(&[key, "5", "60", "DRY"])
        .query(conn)
        .ok()?;
    Some(r[2])
}

/// One check of `key` on `primary`; then waits (`secs` at most) until the replica behind
/// `on_replica` has it.
fn check_reaches_replica(
    primary: &Sluice,
    on_replica: &mut redis::Connection,
    key: &str,
    secs: u64,
) -> bool {
    let _: Vec<i64> = redis::cmd("RL.CHECK")
        .arg(&[key, "5", "60"])
        .query(&mut primary.client())
        .unwrap();
    wait_until(Duration::from_secs(secs), || {
        (remaining(on_replica, key)? == 3).then_some(())
    })
    .is_some()
}

#[test]
fn a_replica_presents_its_renewed_certificate() {
    if !have_openssl() {
        return;
    }
    let old = Certs::new();
    let tls = free_port();
    let primary_flags = |certs: &Certs| certs.server_flags(tls, "yes");
    let primary = start(&primary_flags(&old), &[]);
    // The replica is given `old`'s paths: they are renewed in place later.
    let master = format!("127.0.0.1:{tls}");
    let replica = Sluice::start_with(&[
        "--replicaof",
        &master,
        "--tls-replication",
        "yes",
        "--tls-cert-file",
        &old.path("node.crt"),
        "--tls-key-file",
        &old.path("node.key"),
        "--tls-ca-cert-file",
        &old.path("ca.crt"),
    ]);
    let mut on_replica = replica.client();
    let synced = check_reaches_replica(&primary, &mut on_replica, "before", 15);
    assert!(synced, "{}", replica.log());

    // A new CA and a new certificate for both sides: the replica's files are replaced, the
    // primary restarts with its new pair and requires client certificates of the new CA.
    let new = Certs::new();
    old.install_from(&new);
    drop(primary);
    let primary = start(&primary_flags(&new), &[]);
    let resynced = check_reaches_replica(&primary, &mut on_replica, "after", 20);
    assert!(
        resynced,
        "replica:\n{}\nprimary:\n{}",
        replica.log(),
        primary.log()
    );
    reloaded_both(&replica);
}

/// Waits until `server`'s log says both the CA and the certificate were loaded again.
fn reloaded_both(server: &Sluice) {
    assert!(server.wait_for_log("TLS CA reloaded"), "{}", server.log());
    assert!(
        server.wait_for_log("TLS certificate reloaded"),
        "{}",
        server.log()
    );
}

#[test]
fn the_sidecar_presents_its_renewed_certificate() {
    if !have_openssl() {
        return;
    }
    let old = Certs::new();
    let tls = free_port();
    let node = start(&old.server_flags(tls, "yes"), &[]);
    let upstream = format!("127.0.0.1:{tls}");
    let proxy = old.start_proxy(&[
        "--upstream",
        &upstream,
        "--fail-mode",
        "closed",
        "--timeout-ms",
        "500",
    ]);
    let mut pc = proxy.client();
    let allowed = |pc: &mut redis::Connection, key: &str| {
        wait_until(Duration::from_secs(20), || {
            rl_check(pc, &[key, "5", "60"]).ok().filter(|r| r[0] == 1)
        })
        .is_some()
    };
    assert!(allowed(&mut pc, "before"), "{}", proxy.log());
    assert_eq!(remaining(&mut node.client(), "before"), Some(3));

    // A new CA and pair on the node (restarted, requiring client certificates of the new CA),
    // and the sidecar's files replaced in place: its next connections trust the new CA and
    // present the new certificate, with no restart of the sidecar.
    let new = Certs::new();
    old.install_from(&new);
    drop(node);
    let node = start(&new.server_flags(tls, "yes"), &[]);
    assert!(
        allowed(&mut pc, "after"),
        "sidecar:\n{}\nnode:\n{}",
        proxy.log(),
        node.log()
    );
    assert_eq!(remaining(&mut node.client(), "after"), Some(3));
    reloaded_both(&proxy);
}
