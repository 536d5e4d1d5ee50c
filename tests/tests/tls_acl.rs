//! Security in production (issue 27, part B): ACL users with real clients, our own clients
//! logging in (the sidecar, gRPC forwarding in a cluster), and TLS with `redis-cli --tls`,
//! redis-py `ssl=True` and a replica over TLS. Certificates are made at test time with the
//! `openssl` CLI.

use std::time::Duration;

use sluice_envoy::pb::rate_limit_response::Code;
use sluice_tests::tls::{Certs, have_openssl};
use sluice_tests::{
    Sluice, TempDir, allowed_through, assert_azure_checks_answered_as, azure_request, cluster_node,
    free_port, have_tool, output_text as text, python_lines, redis_cli, redis_cli_as as cli_as,
    sluice_cluster, wait_until, write_azure_config,
};

const ADMIN: &str = "adm1n-pass";
const GATEWAY: &str = "gw-pass";

/// A `redis` crate connection logged in as `user` (AUTH user pass on connect).
fn client_as(port: u16, user: &str, pass: &str) -> redis::Connection {
    redis::Client::open(format!("redis://{user}:{pass}@127.0.0.1:{port}/"))
        .and_then(|c| c.get_connection())
        .expect("connect and AUTH")
}

/// Whether the server closed this connection (a reply error such as NOPERM is not a close).
fn dropped(conn: &mut redis::Connection) -> bool {
    redis::cmd("PING")
        .query::<String>(conn)
        .is_err_and(|e| e.code().is_none())
}

fn gateway_user(port: u16) {
    let out = cli_as(
        port,
        "default",
        ADMIN,
        &[
            "ACL",
            "SETUSER",
            "gateway",
            "on",
            &format!(">{GATEWAY}"),
            "~*",
            "+@ratelimit",
            "+@connection",
        ],
    );
    assert_eq!(out.trim(), "OK", "{out}");
}

#[test]
fn a_gateway_user_checks_but_may_not_flush() {
    if !have_tool("redis-cli") {
        return;
    }
    let server = Sluice::start_with(&["--requirepass", ADMIN]);
    gateway_user(server.port);

    // redis-cli: RL.CHECK runs, FLUSHALL and RL.RULE SET are refused in Redis's words.
    let out = cli_as(
        server.port,
        "gateway",
        GATEWAY,
        &["RL.CHECK", "k", "5", "10"],
    );
    assert_eq!(out.lines().next(), Some("1"), "{out}");
    let out = cli_as(server.port, "gateway", GATEWAY, &["FLUSHALL"]);
    assert_eq!(
        out.trim(),
        "NOPERM this user has no permissions to run the 'flushall' command"
    );
    let out = cli_as(
        server.port,
        "gateway",
        GATEWAY,
        &["RL.RULE", "SET", "r", "LIMIT", "1", "PERIOD", "1"],
    );
    assert!(out.contains("'rl.rule|set' command"), "{out}");
    let out = cli_as(server.port, "gateway", GATEWAY, &["RL.RULE", "LIST"]);
    assert!(!out.contains("NOPERM"), "{out}");

    // The redis crate: AUTH user pass on connect, then the same split.
    let mut gw = client_as(server.port, "gateway", GATEWAY);
    let reply: Vec<i64> = redis::cmd("RL.CHECK")
        .arg(&["k", "5", "10"])
        .query(&mut gw)
        .unwrap();
    assert_eq!(
        reply[..3],
        [1, 5, 3],
        "the gateway's checks count on the same key"
    );
    let err = redis::cmd("FLUSHALL").query::<String>(&mut gw).unwrap_err();
    assert_eq!(err.code(), Some("NOPERM"), "{err}");
    let err = redis::cmd("CONFIG")
        .arg(&["SET", "requirepass", "x"])
        .query::<String>(&mut gw)
        .unwrap_err();
    assert_eq!(err.code(), Some("NOPERM"), "{err}");
    let whoami: String = redis::cmd("ACL")
        .arg("WHOAMI")
        .query(&mut client_as(server.port, "default", ADMIN))
        .unwrap();
    assert_eq!(whoami, "default");

    // The refusal changed nothing: the bucket is still there for the admin.
    let mut admin = client_as(server.port, "default", ADMIN);
    let n: i64 = redis::cmd("DBSIZE").query(&mut admin).unwrap();
    assert_eq!(n, 1);
    // A wrong password, an unknown user and a disabled user all get the same WRONGPASS.
    for (user, pass) in [("gateway", "nope"), ("nobody", GATEWAY)] {
        let out = cli_as(server.port, user, pass, &["PING"]);
        assert!(out.contains("WRONGPASS"), "{out}");
    }
    let out = cli_as(
        server.port,
        "default",
        ADMIN,
        &["ACL", "SETUSER", "gateway", "off"],
    );
    assert_eq!(out.trim(), "OK");
    assert!(cli_as(server.port, "gateway", GATEWAY, &["PING"]).contains("WRONGPASS"));
    // A user changed at run time: the connection already logged in sees it at once.
    let out = cli_as(
        server.port,
        "default",
        ADMIN,
        &["ACL", "SETUSER", "gateway", "-rl.check"],
    );
    assert_eq!(out.trim(), "OK");
    let err = redis::cmd("RL.CHECK")
        .arg(&["k", "5", "10"])
        .query::<Vec<i64>>(&mut gw)
        .unwrap_err();
    assert_eq!(err.code(), Some("NOPERM"), "{err}");
    // CLIENT KILL USER closes a user's connections; an unknown user is an error.
    let mut gw2 = client_as(server.port, "default", ADMIN);
    let out = cli_as(
        server.port,
        "default",
        ADMIN,
        &["CLIENT", "KILL", "USER", "nobody"],
    );
    assert_eq!(out.trim(), "ERR No such user 'nobody'");
    let _: String = redis::cmd("ACL")
        .arg(&["SETUSER", "gateway", "on"])
        .query(&mut gw2)
        .unwrap();
    let mut gw3 = client_as(server.port, "gateway", GATEWAY);
    let killed: i64 = redis::cmd("CLIENT")
        .arg(&["KILL", "USER", "gateway"])
        .query(&mut gw2)
        .unwrap();
    assert_eq!(killed, 2, "gw and gw3");
    assert!(dropped(&mut gw3));
    gw = client_as(server.port, "gateway", GATEWAY);
    // CLIENT LIST names the user; ACL DELUSER closes its connections, as in Redis.
    let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut admin).unwrap();
    assert!(list.contains("user=gateway"), "{list}");
    let removed: i64 = redis::cmd("ACL")
        .arg(&["DELUSER", "gateway"])
        .query(&mut admin)
        .unwrap();
    assert_eq!(removed, 1);
    let closed = wait_until(Duration::from_secs(5), || dropped(&mut gw).then_some(()));
    assert!(
        closed.is_some(),
        "the deleted user's connection stayed open"
    );
    let pong: String = redis::cmd("PING").query(&mut admin).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn bad_acl_rules_change_nothing() {
    if !have_tool("redis-cli") {
        return;
    }
    let server = Sluice::start();
    let p = server.port;
    for (rules, error) in [
        (
            vec!["on", "+nosuch"],
            "ERR Error in ACL SETUSER modifier '+nosuch': Unknown command or category name in ACL",
        ),
        (
            vec!["on", "&news"],
            "ERR Error in ACL SETUSER modifier '&news': only &* (all channels) is supported",
        ),
        (
            vec!["on", "bogus"],
            "ERR Error in ACL SETUSER modifier 'bogus': Syntax error",
        ),
    ] {
        let mut args = vec!["ACL", "SETUSER", "u"];
        args.extend(rules);
        assert_eq!(text(&redis_cli(p, &args)).trim(), error);
    }
    assert_eq!(text(&redis_cli(p, &["ACL", "USERS"])).trim(), "default");
    assert!(text(&redis_cli(p, &["ACL", "DELUSER", "default"])).contains("cannot be removed"));
    assert!(text(&redis_cli(p, &["ACL", "LOAD"])).contains("--aclfile"));
    // HELLO 3 AUTH with a user.
    assert_eq!(
        text(&redis_cli(
            p,
            &["ACL", "SETUSER", "u", "on", ">pw", "+@ratelimit"]
        ))
        .trim(),
        "OK"
    );
    let out = text(&redis_cli(p, &["HELLO", "3", "AUTH", "u", "pw"]));
    assert!(out.contains("proto"), "{out}");
    let out = text(&redis_cli(p, &["HELLO", "3", "AUTH", "u", "wrong"]));
    assert!(out.contains("WRONGPASS"), "{out}");
}

#[test]
fn the_acl_file_is_loaded_saved_and_reloaded() {
    if !have_tool("redis-cli") {
        return;
    }
    let dir = TempDir::new("aclfile");
    let file = dir.path().join("users.acl");
    std::fs::write(
        &file,
        format!("# gateways\nuser gateway on >{GATEWAY} ~* &* -@all +@ratelimit +ping\n"),
    )
    .unwrap();
    let file_arg = file.to_str().unwrap();
    let server = Sluice::start_with(&["--aclfile", file_arg, "--requirepass", ADMIN]);
    let p = server.port;
    let mut gw = client_as(p, "gateway", GATEWAY);
    let out = cli_as(p, "gateway", GATEWAY, &["RL.CHECK", "k", "5", "10"]);
    assert_eq!(out.lines().next(), Some("1"), "{out}");
    assert!(cli_as(p, "gateway", GATEWAY, &["FLUSHALL"]).contains("NOPERM"));
    // SETUSER then SAVE: the file holds hashes, never the password.
    cli_as(
        p,
        "default",
        ADMIN,
        &["ACL", "SETUSER", "ops", "on", ">ops-pass", "+@all"],
    );
    assert_eq!(cli_as(p, "default", ADMIN, &["ACL", "SAVE"]).trim(), "OK");
    let saved = std::fs::read_to_string(&file).unwrap();
    assert!(
        saved.contains("user ops on #") && !saved.contains("ops-pass"),
        "{saved}"
    );
    // A wrong line: ACL LOAD refuses the whole file and the users stay.
    std::fs::write(&file, "user gateway on nopass +@all\nuser broken +nosuch\n").unwrap();
    let out = cli_as(p, "default", ADMIN, &["ACL", "LOAD"]);
    assert!(out.contains(":2:"), "{out}");
    assert!(cli_as(p, "gateway", GATEWAY, &["FLUSHALL"]).contains("NOPERM"));
    // The saved file again: a restart reads it, and `ops` logs in with its password.
    // ACL LOAD of a file without `gateway`: its connections are closed.
    std::fs::write(&file, "user ops on nopass +@all\n").unwrap();
    assert_eq!(cli_as(p, "default", ADMIN, &["ACL", "LOAD"]).trim(), "OK");
    let closed = wait_until(Duration::from_secs(5), || dropped(&mut gw).then_some(()));
    assert!(closed.is_some(), "a removed user's connection stayed open");
    std::fs::write(&file, &saved).unwrap();
    drop(server);
    let server = Sluice::start_with(&["--aclfile", file_arg, "--requirepass", ADMIN]);
    assert_eq!(
        cli_as(server.port, "ops", "ops-pass", &["DBSIZE"]).trim(),
        "0"
    );
    let users = cli_as(server.port, "default", ADMIN, &["ACL", "USERS"]);
    assert_eq!(
        users.split_whitespace().collect::<Vec<_>>(),
        ["default", "gateway", "ops"]
    );
}

#[test]
fn the_sidecar_logs_in_to_a_password_protected_node() {
    let dir = TempDir::new("sidecar-auth");
    let node = Sluice::start_with(&["--requirepass", ADMIN]);
    gateway_user(node.port);
    let upstream = format!("127.0.0.1:{}", node.port);
    // Without credentials the node refuses the sidecar, as before: no check is counted.
    let blind = Sluice::start_proxy(&["--upstream", &upstream, "--fail-mode", "closed"]);
    let mut c = blind.client();
    let err = redis::cmd("RL.CHECK")
        .arg(&["k", "5", "10"])
        .query::<Vec<i64>>(&mut c);
    assert!(
        !matches!(err, Ok(ref r) if r[0] == 1 && r[2] == 4),
        "{err:?}"
    );
    // As the gateway user, with the password from a file.
    let pass_file = dir.path().join("upstream.pass");
    std::fs::write(&pass_file, format!("{GATEWAY}\n")).unwrap();
    let proxy = Sluice::start_proxy(&[
        "--upstream",
        &upstream,
        "--upstream-user",
        "gateway",
        "--upstream-password-file",
        pass_file.to_str().unwrap(),
        "--fail-mode",
        "closed",
    ]);
    let mut c = proxy.client();
    let first = allowed_through(&proxy, &mut c, &["k", "5", "10"]);
    let second: Vec<i64> = redis::cmd("RL.CHECK")
        .arg(&["k", "5", "10"])
        .query(&mut c)
        .unwrap();
    assert_eq!(second[2], first[2] - 1, "checks are counted on the node");
    let mut admin = client_as(node.port, "default", ADMIN);
    let exists: i64 = redis::cmd("EXISTS").arg("k").query(&mut admin).unwrap();
    assert_eq!(exists, 1);
    // The password on the command line works too (the default user).
    let proxy = Sluice::start_proxy(&[
        "--upstream",
        &upstream,
        "--upstream-password",
        ADMIN,
        "--fail-mode",
        "closed",
    ]);
    let mut c = proxy.client();
    let ok = wait_until(Duration::from_secs(10), || {
        redis::cmd("RL.CHECK")
            .arg(&["k2", "5", "10"])
            .query::<Vec<i64>>(&mut c)
            .ok()
    });
    assert_eq!(ok.map(|r| r[0]), Some(1));
}

/// Node a serves gRPC; the keys node b owns are forwarded to b, which wants a password. The
/// admin tool creates the cluster as an ACL user (`--user`).
#[test]
fn a_cluster_with_requirepass_forwards_grpc_checks() {
    let dir = TempDir::new("grpc-auth-config");
    write_azure_config(dir.path());
    let nodes = TempDir::new("grpc-auth-nodes");
    let grpc = free_port().to_string();
    let config_dir = dir.path().to_str().unwrap();
    let auth = ["--requirepass", ADMIN, "--masterauth", ADMIN];
    let mut a_flags = vec!["--grpc-port", &grpc, "--envoy-config", config_dir];
    a_flags.extend(auth);
    let a = cluster_node(0, &nodes.path().join("a.conf"), &a_flags);
    let b = cluster_node(0, &nodes.path().join("b.conf"), &auth);
    // The admin tool logs in as an operator's ACL user.
    for port in [a.port, b.port] {
        let out = cli_as(
            port,
            "default",
            ADMIN,
            &["ACL", "SETUSER", "ops", "on", ">ops-pass", "~*", "+@all"],
        );
        assert_eq!(out.trim(), "OK");
    }
    let created = sluice_cluster(&[
        "create",
        &format!("127.0.0.1:{}", a.port),
        &format!("127.0.0.1:{}", b.port),
        "--user",
        "ops",
        "--password",
        "ops-pass",
    ]);
    assert!(created.status.success(), "{created:?}");
    // Until the table is pushed, checks may be unavailable; then every one of 40 values (about
    // half of them b's) is answered by its owner.
    assert_azure_checks_answered_as(grpc.parse().unwrap(), Some(&format!("Bearer {ADMIN}")));
    let mut on_b = client_as(b.port, "default", ADMIN);
    let keys: i64 = redis::cmd("DBSIZE").query(&mut on_b).unwrap();
    assert!(
        keys >= 5,
        "node b counted the forwarded checks ({keys} keys)"
    );
    drop(a);
}

fn start_tls(certs: &Certs, tls_port: u16, auth_clients: &str, extra: &[&str]) -> Sluice {
    let mut flags = certs.server_flags(tls_port, auth_clients);
    flags.extend(extra.iter().map(|s| s.to_string()));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    Sluice::start_with(&flags)
}

#[test]
fn tls_with_redis_cli_and_redis_py() {
    if !have_openssl() || !have_tool("redis-cli") || !have_tool("python3") {
        return;
    }
    let certs = Certs::new();
    let tls = free_port();
    let server = start_tls(&certs, tls, "yes", &["--requirepass", ADMIN]);
    gateway_user(server.port);
    let admin = ["--user", "default", "--pass", ADMIN, "--no-auth-warning"];
    let out = certs.cli(
        tls,
        true,
        &[&admin[..], &["RL.CHECK", "k", "5", "10"]].concat(),
    );
    assert_eq!(
        out.lines().take(3).collect::<Vec<_>>(),
        ["1", "5", "4"],
        "{out}"
    );
    // tls-auth-clients yes: no certificate, no session.
    let out = certs.cli(tls, false, &[&admin[..], &["PING"]].concat());
    assert!(!out.contains("PONG"), "{out}");
    // The plain port serves the same store.
    let mut plain = client_as(server.port, "default", ADMIN);
    let left: Vec<i64> = redis::cmd("RL.CHECK")
        .arg(&["k", "5", "10", "DRY"])
        .query(&mut plain)
        .unwrap();
    assert_eq!(left[2], 3, "{left:?}");

    // redis-py 8 with ssl=True, in its default RESP3, logged in as the gateway user (HELLO 3
    // AUTH gateway ...): a pipeline of checks, a big reply, and NOPERM on FLUSHALL.
    let script = r#"
import sys, redis
port, ca, crt, key, pw = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
r = redis.Redis(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=ca, ssl_certfile=crt, ssl_keyfile=key,
                username="gateway", password=pw)
hello = r.execute_command("HELLO")
print(hello[b"proto"] if isinstance(hello, dict) else "resp2")
p = r.pipeline(transaction=False)
for i in range(200):
    p.execute_command("RL.CHECK", "py", 1000, 60)
res = p.execute()
print(res[0][2], res[-1][2])
print(len(r.execute_command("ECHO", "x" * 100000)))
try:
    r.flushall()
    print("flushed")
except redis.exceptions.NoPermissionError as e:
    print("NOPERM")
"#;
    let (ca, crt, key) = (
        certs.path("ca.crt"),
        certs.path("node.crt"),
        certs.path("node.key"),
    );
    let (lines, all) = python_lines(script, &[&tls.to_string(), &ca, &crt, &key, GATEWAY]);
    assert_eq!(lines, ["3", "999 800", "100000", "NOPERM"], "{all}");
    drop(server);
}

/// `--tls-port PORT --tls-cert-file CRT --tls-key-file KEY`.
fn tls_flags<'a>(port: &'a str, crt: &'a str, key: &'a str) -> Vec<&'a str> {
    vec![
        "--tls-port",
        port,
        "--tls-cert-file",
        crt,
        "--tls-key-file",
        key,
    ]
}

#[test]
fn bad_tls_settings_refuse_to_start() {
    let certs = if have_openssl() { Certs::new() } else { return };
    let port = free_port().to_string();
    let (crt, node_key, ca_key) = (
        certs.path("node.crt"),
        certs.path("node.key"),
        certs.path("ca.key"),
    );
    for (flags, why) in [
        (vec!["--tls-port", &port], "need --tls-cert-file"),
        (tls_flags(&port, &crt, &ca_key), "cannot load key"),
        (
            tls_flags(&port, &crt, &node_key),
            "needs --tls-ca-cert-file",
        ),
        (
            vec![
                "--tls-cluster",
                "yes",
                "--tls-cert-file",
                &crt,
                "--tls-key-file",
                &node_key,
            ],
            "--tls-cluster yes needs --tls-port",
        ),
    ] {
        let out = std::process::Command::new(sluice_tests::binary())
            .args(["--port", "0"])
            .args(&flags)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{flags:?}");
        assert!(text(&out).contains(why), "{flags:?}: {}", text(&out));
    }
}

/// The certificate's subject as `openssl s_client` sees it on `port`.
fn served_subject(certs: &Certs, port: u16) -> String {
    let out = std::process::Command::new("timeout")
        .args([
            "10",
            "openssl",
            "s_client",
            "-connect",
            &format!("127.0.0.1:{port}"),
            "-CAfile",
            &certs.path("ca.crt"),
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("openssl s_client");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.starts_with("subject="))
        .unwrap_or_default()
        .replace(' ', "")
}

#[test]
fn certificates_are_reloaded_when_their_files_change() {
    if !have_openssl() || !have_tool("redis-cli") {
        return;
    }
    let certs = Certs::new();
    let tls = free_port();
    let _server = start_tls(&certs, tls, "no", &[]);
    assert!(
        served_subject(&certs, tls).contains("CN=node"),
        "{}",
        served_subject(&certs, tls)
    );
    // A renewed certificate under the same file names: new connections get it.
    certs.issue("renewed");
    for ext in ["key", "crt"] {
        std::fs::copy(
            certs.path(&format!("renewed.{ext}")),
            certs.path(&format!("node.{ext}")),
        )
        .unwrap();
    }
    let reloaded = wait_until(Duration::from_secs(10), || {
        served_subject(&certs, tls)
            .contains("CN=renewed")
            .then_some(())
    });
    assert!(reloaded.is_some(), "{}", served_subject(&certs, tls));
    assert!(certs.cli(tls, false, &["PING"]).contains("PONG"));
    // A broken file is logged and the renewed certificate stays.
    std::fs::write(certs.path("node.crt"), "not a certificate").unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    assert!(certs.cli(tls, false, &["PING"]).contains("PONG"));
    assert!(served_subject(&certs, tls).contains("CN=renewed"));
}

#[test]
fn a_replica_over_tls() {
    if !have_openssl() {
        return;
    }
    let certs = Certs::new();
    let tls = free_port();
    let primary = start_tls(&certs, tls, "yes", &["--requirepass", ADMIN]);
    let replica_tls = free_port();
    let master = format!("127.0.0.1:{tls}");
    let replica = start_tls(
        &certs,
        replica_tls,
        "yes",
        &[
            "--replicaof",
            &master,
            "--tls-replication",
            "yes",
            "--masterauth",
            ADMIN,
        ],
    );
    let mut on_primary = client_as(primary.port, "default", ADMIN);
    for _ in 0..3 {
        let _: Vec<i64> = redis::cmd("RL.CHECK")
            .arg(&["k", "5", "60"])
            .query(&mut on_primary)
            .unwrap();
    }
    let mut on_replica = replica.client();
    let mut last = String::new();
    let synced = wait_until(Duration::from_secs(15), || {
        let r = redis::cmd("RL.CHECK")
            .arg(&["k", "5", "60", "DRY"])
            .query::<Vec<i64>>(&mut on_replica);
        last = format!("{r:?}");
        r.ok().filter(|r| r[2] == 1)
    });
    assert!(
        synced.is_some(),
        "the replica never had the primary's bucket: {last}\n{}",
        replica.log()
    );
    // The stream goes on over the same TLS link.
    let _: Vec<i64> = redis::cmd("RL.CHECK")
        .arg(&["k", "5", "60"])
        .query(&mut on_primary)
        .unwrap();
    let streamed = wait_until(Duration::from_secs(10), || {
        let r: Vec<i64> = redis::cmd("RL.CHECK")
            .arg(&["k", "5", "60", "DRY"])
            .query(&mut on_replica)
            .ok()?;
        (r[0] == 1 && r[2] == 0).then_some(())
    });
    assert!(streamed.is_some());
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut on_replica)
        .unwrap();
    assert!(info.contains("master_link_status:up"), "{info}");
}

/// The sidecar reaches its node over TLS (a client certificate required) as an ACL user.
#[test]
fn the_sidecar_reaches_its_node_over_tls() {
    if !have_openssl() {
        return;
    }
    let certs = Certs::new();
    let tls = free_port();
    let node = start_tls(&certs, tls, "yes", &["--requirepass", ADMIN]);
    gateway_user(node.port);
    let proxy = certs.start_proxy(&[
        "--upstream",
        &format!("127.0.0.1:{tls}"),
        "--upstream-user",
        "gateway",
        "--upstream-password",
        GATEWAY,
        "--fail-mode",
        "closed",
    ]);
    allowed_through(&proxy, &mut proxy.client(), &["t", "5", "10"]);
    let mut admin = client_as(node.port, "default", ADMIN);
    let left: Vec<i64> = redis::cmd("RL.CHECK")
        .arg(&["t", "5", "10", "DRY"])
        .query(&mut admin)
        .unwrap();
    assert!(
        left[2] < 5,
        "the sidecar's checks were counted on the node: {left:?}"
    );
    // Without a client certificate the node refuses the handshake: closed fails closed.
    let no_cert = Sluice::start_proxy(&[
        "--upstream",
        &format!("127.0.0.1:{tls}"),
        "--upstream-tls-ca-cert-file",
        &certs.path("ca.crt"),
        "--upstream-password",
        ADMIN,
        "--fail-mode",
        "closed",
    ]);
    let mut c = no_cert.client();
    let r = redis::cmd("RL.CHECK")
        .arg(&["t2", "5", "10"])
        .query::<Vec<i64>>(&mut c);
    assert!(!matches!(r, Ok(ref v) if v[0] == 1), "{r:?}");
    let exists: i64 = redis::cmd("EXISTS").arg("t2").query(&mut admin).unwrap();
    assert_eq!(exists, 0);
}

/// curl over TLS, trusting the test CA; its output, or `None` if it failed.
fn curl(certs: &Certs, args: &[&str]) -> Option<Vec<u8>> {
    let out = std::process::Command::new("timeout")
        .args([
            "20",
            "curl",
            "-sS",
            "--fail",
            "--cacert",
            &certs.path("ca.crt"),
        ])
        .args(args)
        .output()
        .expect("run curl");
    out.status.success().then_some(out.stdout)
}

/// `--metrics-tls yes` and `--grpc-tls yes`: Prometheus text over HTTPS, and Envoy's
/// ShouldRateLimit over gRPC on TLS (HTTP/2 negotiated by ALPN), both with curl.
#[test]
fn metrics_and_grpc_over_tls() {
    use prost::Message;
    if !have_openssl() || !have_tool("curl") {
        return;
    }
    let certs = Certs::new();
    let config = TempDir::new("grpc-tls-config");
    write_azure_config(config.path());
    let (metrics, grpc) = (free_port().to_string(), free_port().to_string());
    let flags = [
        "--metrics-port",
        &metrics,
        "--metrics-tls",
        "yes",
        "--grpc-port",
        &grpc,
        "--grpc-tls",
        "yes",
        "--envoy-config",
        config.path().to_str().unwrap(),
        "--tls-cert-file",
        &certs.path("node.crt"),
        "--tls-key-file",
        &certs.path("node.key"),
        "--tls-auth-clients",
        "no",
    ];
    let _server = Sluice::start_with(&flags);
    let url = format!("https://127.0.0.1:{metrics}/metrics");
    let body =
        wait_until(Duration::from_secs(10), || curl(&certs, &[&url])).expect("metrics over TLS");
    assert!(
        String::from_utf8_lossy(&body).contains("sluice_"),
        "not Prometheus text"
    );
    // Plain HTTP on the TLS port gets nothing.
    let plain = format!("http://127.0.0.1:{metrics}/metrics");
    assert!(curl(&certs, &[&plain]).is_none());

    let request = azure_request("tls").encode_to_vec();
    let mut framed = vec![0u8];
    framed.extend_from_slice(&(request.len() as u32).to_be_bytes());
    framed.extend_from_slice(&request);
    let body_file = config.path().join("request.bin");
    std::fs::write(&body_file, &framed).unwrap();
    let url = format!(
        "https://127.0.0.1:{grpc}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
    );
    let data = format!("@{}", body_file.display());
    let reply = curl(
        &certs,
        &[
            "--http2",
            "-X",
            "POST",
            "-H",
            "content-type: application/grpc",
            "-H",
            "te: trailers",
            "--data-binary",
            &data,
            &url,
        ],
    )
    .expect("gRPC over TLS");
    assert!(reply.len() > 5, "{reply:?}");
    let response =
        sluice_envoy::pb::RateLimitResponse::decode(&reply[5..]).expect("a RateLimitResponse");
    assert_eq!(response.overall_code, Code::Ok as i32);
    assert_eq!(response.statuses[0].limit_remaining, 99);
}

/// A replica logs in to its primary as an ACL user that may only replicate
/// (`--masteruser`/`--masterauth`); a wrong password keeps the link down.
#[test]
fn a_replica_logs_in_as_its_acl_user() {
    if !have_tool("redis-cli") {
        return;
    }
    let primary = Sluice::start_with(&["--requirepass", ADMIN]);
    let out = cli_as(
        primary.port,
        "default",
        ADMIN,
        &[
            "ACL",
            "SETUSER",
            "repl",
            "on",
            ">repl-pass",
            "+psync",
            "+replconf",
            "+ping",
        ],
    );
    assert_eq!(out.trim(), "OK");
    let master = format!("127.0.0.1:{}", primary.port);
    let replica = Sluice::start_with(&[
        "--replicaof",
        &master,
        "--masteruser",
        "repl",
        "--masterauth",
        "repl-pass",
    ]);
    let wrong = Sluice::start_with(&[
        "--replicaof",
        &master,
        "--masteruser",
        "repl",
        "--masterauth",
        "nope",
    ]);
    let mut on_primary = client_as(primary.port, "default", ADMIN);
    let _: Vec<i64> = redis::cmd("RL.CHECK")
        .arg(&["k", "5", "60"])
        .query(&mut on_primary)
        .unwrap();
    let mut on_replica = replica.client();
    let synced = wait_until(Duration::from_secs(15), || {
        let r: Vec<i64> = redis::cmd("RL.CHECK")
            .arg(&["k", "5", "60", "DRY"])
            .query(&mut on_replica)
            .ok()?;
        (r[2] == 3).then_some(())
    });
    assert!(synced.is_some(), "{}", replica.log());
    assert!(wrong.wait_for_log("refused AUTH"), "{}", wrong.log());
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut wrong.client())
        .unwrap();
    assert!(!info.contains("master_link_status:up"), "{info}");
    // The replication user can do nothing else.
    assert!(cli_as(primary.port, "repl", "repl-pass", &["FLUSHALL"]).contains("NOPERM"));
}
