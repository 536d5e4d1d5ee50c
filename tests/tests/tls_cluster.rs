//! TLS across a cluster (issue 27): nodes name their TLS ports to TLS clients (CLUSTER SLOTS,
//! SHARDS, NODES, MOVED) and their plain ports to plain ones; `redis-cli --tls -c`, redis-py's
//! `RedisCluster(ssl=True)` and redis-rs's cluster client (`rediss://`) follow the redirects;
//! with `--tls-cluster yes` the nodes' own calls to each other (forwarded checks, slot imports)
//! go over TLS; the sidecar reaches the cluster over TLS from several seeds. Certificates are made at test time with the `openssl` CLI.

use std::time::Duration;

use sluice_tests::tls::{Certs, have_openssl};
use sluice_tests::{
    TempDir, allowed_through, assert_azure_checks_answered, cluster_node, cluster_rl_check,
    cluster_slots, connect_cluster, free_port, have_tool, http_json, key_slot, output_text as text,
    owner_of, primaries, redis_cli, rl_check, runtime, sluice_cluster, try_connect,
    wait_cluster_ok, wait_until, write_azure_config,
};

/// A node's flags: a TLS port with the test certificate (client certificates required) and
/// node-to-node calls over TLS.
fn tls_flags(certs: &Certs, tls_port: u16, extra: &[&str]) -> Vec<String> {
    let mut flags = certs.server_flags(tls_port, "yes");
    flags.extend(["--tls-cluster", "yes"].map(String::from));
    flags.extend(extra.iter().map(|s| s.to_string()));
    flags
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// The numbers on the lines of redis-cli's output (a flattened array reply).
fn numbers(out: &str) -> Vec<u32> {
    out.lines().filter_map(|l| l.trim().parse().ok()).collect()
}

/// `RL.CHECK key 5 1h COST 0` on the plain port: what is left of the bucket, not spending.
/// `TRYAGAIN` (a slot whose import still streams) is retried, as Redis Cluster clients do.
fn left(port: u16, key: &str) -> i64 {
    let mut c = try_connect(port).expect("connect");
    let mut last = None;
    wait_until(Duration::from_secs(10), || {
        match rl_check(&mut c, &[key, "5", "1h", "COST", "0"]) {
            Ok(r) => Some(r[2]),
            Err(e) if e.code() == Some("TRYAGAIN") => {
                last = Some(e);
                None
            }
            Err(e) => panic!("RL.CHECK: {e}"),
        }
    })
    .unwrap_or_else(|| panic!("RL.CHECK: still {last:?} after 10 s"))
}

/// redis-py's cluster client over TLS: `RL.CHECK key 5 1h` for each key, one reply per line.
fn redis_py_cluster(certs: &Certs, seed: u16, keys: &[&str]) -> String {
    let script = format!(
        r#"
import sys
from redis.cluster import RedisCluster
rc = RedisCluster(host="127.0.0.1", port={seed}, ssl=True, ssl_ca_certs="{ca}",
                  ssl_certfile="{crt}", ssl_keyfile="{key}", socket_timeout=5)
for k in sys.argv[1:]:
    print(rc.execute_command("RL.CHECK", k, 5, "1h")[0])
for node in rc.get_nodes():
    print("node", node.port)
"#,
        ca = certs.path("ca.crt"),
        crt = certs.path("node.crt"),
        key = certs.path("node.key"),
    );
    let out = std::process::Command::new("timeout")
        .args(["60", "python3", "-c", &script])
        .args(keys)
        .output()
        .expect("run python3");
    text(&out)
}

/// A redis-rs cluster connection over TLS, seeded with one node's TLS port: it trusts the
/// test CA and presents the test certificate (the nodes require one).
async fn redis_rs_cluster(certs: &Certs, seed: u16) -> redis::cluster_async::ClusterConnection {
    let read = |f: &str| std::fs::read(certs.path(f)).expect("a test certificate file");
    let tls = redis::TlsCertificates {
        client_tls: Some(redis::ClientTlsConfig {
            client_cert: read("node.crt"),
            client_key: read("node.key"),
        }),
        root_cert: Some(read("ca.crt")),
    };
    let seeds = vec![format!("rediss://127.0.0.1:{seed}")];
    connect_cluster(redis::cluster::ClusterClient::builder(seeds).certs(tls)).await
}

#[test]
fn a_tls_cluster_names_tls_ports_follows_redirects_and_moves_slots() {
    if !have_openssl() || !have_tool("redis-cli") || !have_tool("python3") {
        return;
    }
    let certs = Certs::new();
    let dir = TempDir::new("tls-cluster");
    let tls: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let http = free_port().to_string();
    let f0 = tls_flags(&certs, tls[0], &["--http-port", &http]);
    let f1 = tls_flags(&certs, tls[1], &[]);
    let nodes = primaries(&dir, "t", &[&strs(&f0), &strs(&f1)]);
    wait_cluster_ok(&nodes);
    let plain = [nodes[0].port, nodes[1].port];

    // Plain clients get plain ports; TLS clients get TLS ports, in SLOTS and NODES alike.
    let slots = cluster_slots(plain[0]).expect("CLUSTER SLOTS");
    let mut owners: Vec<u16> = slots.iter().map(|e| e.primary).collect();
    owners.sort_unstable();
    owners.dedup();
    let mut want = plain.to_vec();
    want.sort_unstable();
    assert_eq!(owners, want, "{slots:?}");
    let over_tls = certs.cli(tls[0], true, &["CLUSTER", "SLOTS"]);
    let ports = numbers(&over_tls);
    for p in [tls[0], tls[1]] {
        assert!(ports.contains(&u32::from(p)), "{over_tls}");
    }
    for p in plain {
        assert!(!ports.contains(&u32::from(p)), "{over_tls}");
    }
    let nodes_tls = certs.cli(tls[1], true, &["CLUSTER", "NODES"]);
    assert!(
        nodes_tls.contains(&format!("127.0.0.1:{}@", tls[0])),
        "{nodes_tls}"
    );
    let nodes_plain = text(&redis_cli(plain[1], &["CLUSTER", "NODES"]));
    assert!(
        nodes_plain.contains(&format!("127.0.0.1:{}@", plain[0])),
        "{nodes_plain}"
    );
    // CLUSTER SHARDS names both, as Redis 7 does.
    let shards = text(&redis_cli(plain[0], &["CLUSTER", "SHARDS"]));
    assert!(shards.contains("tls-port"), "{shards}");
    assert!(numbers(&shards).contains(&u32::from(tls[1])), "{shards}");

    // A key node 1 owns, asked of node 0: MOVED to the port matching the connection.
    let owner = |key: &str| owner_of(&slots, key_slot(key.as_bytes())).expect("owned");
    let on = |port: u16, skip: usize| {
        (0..1000)
            .map(|n| format!("k{n}"))
            .filter(|k| owner(k) == port)
            .nth(skip)
            .expect("a key")
    };
    let key = on(plain[1], 0);
    let slot = key_slot(key.as_bytes());
    let moved = certs.cli(tls[0], true, &["RL.CHECK", &key, "5", "1h"]);
    assert_eq!(
        moved.trim(),
        format!("MOVED {slot} 127.0.0.1:{}", tls[1]),
        "a TLS client is sent to the TLS port"
    );
    let moved = text(&redis_cli(plain[0], &["RL.CHECK", &key, "5", "1h"]));
    assert_eq!(moved.trim(), format!("MOVED {slot} 127.0.0.1:{}", plain[1]));
    // redis-cli --tls -c follows it to the TLS port, where the check counts.
    let followed = certs.cli(tls[0], true, &["-c", "RL.CHECK", &key, "5", "1h"]);
    assert_eq!(followed.lines().next(), Some("1"), "{followed}");
    assert_eq!(left(plain[1], &key), 4);

    // redis-py's cluster client over TLS learns the TLS ports and checks on both nodes.
    let (a, b) = (on(plain[0], 1), on(plain[1], 1));
    let py = redis_py_cluster(&certs, tls[0], &[&a, &b]);
    let lines: Vec<&str> = py.lines().collect();
    assert_eq!(lines.get(..2), Some(&["1", "1"][..]), "{py}");
    for p in [tls[0], tls[1]] {
        assert!(py.contains(&format!("node {p}")), "{py}");
    }
    assert_eq!((left(plain[0], &a), left(plain[1], &b)), (4, 4));

    // redis-rs's cluster client over TLS (rediss://, the test CA, a client certificate).
    let (g, h) = (on(plain[0], 4), on(plain[1], 4));
    runtime().block_on(async {
        let mut c = redis_rs_cluster(&certs, tls[0]).await;
        for k in [&g, &h] {
            let r = cluster_rl_check(&mut c, &[k, "5", "1h"]).await;
            assert_eq!(r.expect("RL.CHECK over TLS").first(), Some(&1), "{k}");
        }
    });
    assert_eq!((left(plain[0], &g), left(plain[1], &h)), (4, 4));

    // A check forwarded by node 0's HTTP front reaches node 1 over TLS (--tls-cluster yes):
    // the owner sees the kept connection arrive on its TLS port.
    let c = on(plain[1], 2);
    let r = http_json(
        http.parse().unwrap(),
        "POST",
        "/v1/check",
        &format!(r#"{{"key":"{c}","limit":5,"period":"1h"}}"#),
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        left(plain[1], &c),
        4,
        "the forwarded check counted on the owner"
    );
    assert!(
        !clients_on(plain[1], tls[1]).is_empty(),
        "the forwarded call came over TLS:\n{}",
        text(&redis_cli(plain[1], &["CLIENT", "LIST"]))
    );
    // Nothing of the forwarding front is on the plain port. The test's own connection of
    // `left` may still be listed until the node has read its close: wait for that.
    let mut plain_clients = Vec::new();
    let none = wait_until(Duration::from_secs(10), || {
        plain_clients = clients_on(plain[1], plain[1]);
        plain_clients.is_empty().then_some(())
    });
    assert!(
        none.is_some(),
        "no call came over the plain port: {plain_clients:?}"
    );

    // The sidecar in front of the TLS cluster, seeded with both TLS ports.
    let seeds = format!("127.0.0.1:{},127.0.0.1:{}", tls[0], tls[1]);
    let proxy = certs.start_proxy(&[
        "--upstream",
        &seeds,
        "--fail-mode",
        "closed",
        "--timeout-ms",
        "500",
    ]);
    let (d, e) = (on(plain[0], 3), on(plain[1], 3));
    let mut pc = proxy.client();
    for k in [&d, &e] {
        allowed_through(&proxy, &mut pc, &[k, "5", "1h"]);
    }
    assert_eq!((left(plain[0], &d), left(plain[1], &e)), (4, 4));

    // Spent buckets on both nodes, then a third TLS node joins: the slots it takes are
    // imported over TLS, and their buckets keep what was spent.
    let spent: Vec<String> = (0..60).map(|n| format!("m{n}")).collect();
    for k in &spent {
        let port = owner(k);
        let mut conn = try_connect(port).expect("connect");
        for _ in 0..2 {
            rl_check(&mut conn, &[k, "5", "1h"]).expect("RL.CHECK");
        }
    }
    let f2 = tls_flags(&certs, tls[2], &[]);
    let new = cluster_node(0, &dir.path().join("t-2.conf"), &strs(&f2));
    let out = sluice_cluster(&[
        "add-node",
        &format!("127.0.0.1:{}", new.port),
        &format!("127.0.0.1:{}", plain[0]),
    ]);
    assert!(out.status.success(), "add-node: {}", text(&out));
    assert!(
        new.wait_for_log("over TLS: loaded"),
        "the import ran over TLS:\n{}",
        new.log()
    );
    let after = cluster_slots(plain[0]).expect("CLUSTER SLOTS");
    let moved: Vec<&String> = spent
        .iter()
        .filter(|k| owner_of(&after, key_slot(k.as_bytes())) == Some(new.port))
        .collect();
    assert!(!moved.is_empty(), "add-node moved none of {spent:?}");
    for k in &moved {
        assert_eq!(
            left(new.port, k),
            3,
            "{k} kept its spent quota on the new node"
        );
    }
    // The new node's TLS port is in the table every node serves to TLS clients.
    let over_tls = certs.cli(tls[1], true, &["CLUSTER", "SLOTS"]);
    assert!(
        numbers(&over_tls).contains(&u32::from(tls[2])),
        "{over_tls}"
    );
    // And the sidecar follows the move over TLS.
    let k = moved[0];
    allowed_through(&proxy, &mut pc, &[k, "5", "1h"]);
    assert_eq!(left(new.port, k), 2);
}

/// The lines of `CLIENT LIST` on `port` of other connections that came in on `laddr_port`.
fn clients_on(port: u16, laddr_port: u16) -> Vec<String> {
    let list = text(&redis_cli(port, &["CLIENT", "LIST"]));
    list.lines()
        .filter(|l| {
            l.contains(&format!(" laddr=127.0.0.1:{laddr_port} ")) && !l.contains("cmd=client|list")
        })
        .map(str::to_owned)
        .collect()
}

/// Node a serves gRPC; the descriptors node b owns are forwarded to b over TLS
/// (`--tls-cluster yes`): b sees the forwarding connection on its TLS port, none on its plain
/// one.
#[test]
fn grpc_checks_are_forwarded_over_tls() {
    if !have_openssl() || !have_tool("redis-cli") {
        return;
    }
    let certs = Certs::new();
    let dir = TempDir::new("tls-grpc");
    write_azure_config(dir.path());
    let grpc = free_port().to_string();
    let (ta, tb) = (free_port(), free_port());
    let envoy = dir.path().to_str().unwrap().to_owned();
    let fa = tls_flags(
        &certs,
        ta,
        &["--grpc-port", &grpc, "--envoy-config", &envoy],
    );
    let fb = tls_flags(&certs, tb, &[]);
    let nodes = primaries(&dir, "g", &[&strs(&fa), &strs(&fb)]);
    wait_cluster_ok(&nodes);
    assert_azure_checks_answered(grpc.parse().unwrap());
    let keys: i64 = redis::cmd("DBSIZE")
        .query(&mut try_connect(nodes[1].port).unwrap())
        .unwrap();
    assert!(
        keys >= 5,
        "node b counted the forwarded checks ({keys} keys)"
    );
    assert!(
        !clients_on(nodes[1].port, tb).is_empty(),
        "no forwarding connection on b's TLS port:\n{}",
        text(&redis_cli(nodes[1].port, &["CLIENT", "LIST"]))
    );
    assert!(
        clients_on(nodes[1].port, nodes[1].port).is_empty(),
        "a forwarding connection on b's plain port"
    );
}

/// Replicas with `--tls-replication yes` in a cluster made by the admin tool: it points them at
/// their primaries' TLS ports, they announce theirs, and CLUSTER SHARDS sees them online.
#[test]
fn cluster_replicas_replicate_over_tls() {
    if !have_openssl() || !have_tool("redis-cli") {
        return;
    }
    let certs = Certs::new();
    let dir = TempDir::new("tls-replicas");
    // `--tls-port 0`: each node a free TLS port of its own, as CONFIG GET tls-port tells.
    let flags = tls_flags(&certs, 0, &["--tls-replication", "yes"]);
    let nodes = sluice_tests::two_shard_cluster(&dir, &strs(&flags), &[]);
    wait_cluster_ok(&nodes);
    let tls_port = |port: u16| -> u16 {
        let out = text(&redis_cli(port, &["CONFIG", "GET", "tls-port"]));
        out.lines()
            .nth(1)
            .and_then(|p| p.parse().ok())
            .expect("tls-port")
    };
    // Node 2 replicates node 0, node 3 node 1 (see two_shard_cluster).
    for (replica, primary) in [(2, 0), (3, 1)] {
        let (r, p) = (&nodes[replica], &nodes[primary]);
        let (rtls, ptls) = (tls_port(r.port), tls_port(p.port));
        assert_ne!(ptls, p.port);
        let linked = wait_until(Duration::from_secs(20), || {
            let info = text(&redis_cli(r.port, &["INFO", "replication"]));
            (info.contains(&format!("master_port:{ptls}"))
                && info.contains("master_link_status:up"))
            .then_some(())
        });
        assert!(linked.is_some(), "replica {replica}:\n{}", r.log());
        let listed = text(&redis_cli(p.port, &["INFO", "replication"]));
        assert!(listed.contains(&format!("port={rtls},")), "{listed}");
        let shards = wait_until(Duration::from_secs(10), || {
            let out = text(&redis_cli(p.port, &["CLUSTER", "SHARDS"]));
            let lines: Vec<&str> = out.lines().collect();
            // The replica's entry: its id, ..., health online (known first-hand by its primary).
            let id = text(&redis_cli(r.port, &["CLUSTER", "MYID"]));
            let at = lines.iter().position(|l| *l == id.trim())?;
            let health = lines[at..].iter().position(|l| *l == "health")?;
            (lines.get(at + health + 1) == Some(&"online")).then_some(())
        });
        assert!(
            shards.is_some(),
            "{}",
            text(&redis_cli(p.port, &["CLUSTER", "SHARDS"]))
        );
    }
}
