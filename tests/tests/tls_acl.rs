//! Security in production (issue 27, part B): ACL users with real clients, our own clients
//! logging in (the sidecar, gRPC forwarding in a cluster), and TLS with `redis-cli --tls`,
//! redis-py `ssl=True` and a replica over TLS. Certificates are made at test time with the
//! `openssl` CLI.

use std::time::Duration;

use sluice_envoy::pb::rate_limit_descriptor::Entry;
use sluice_envoy::pb::rate_limit_response::Code;
use sluice_envoy::pb::{RateLimitDescriptor, RateLimitRequest, RateLimitServiceClient};
use sluice_tests::{
    Sluice, TempDir, cluster_node, free_port, have_tool, redis_cli, runtime, sluice_cluster,
    wait_until,
};

const ADMIN: &str = "adm1n-pass";
const GATEWAY: &str = "gw-pass";

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `redis-cli` logged in as `user`.
fn cli_as(port: u16, user: &str, pass: &str, args: &[&str]) -> String {
    let mut all = vec!["--user", user, "--pass", pass, "--no-auth-warning"];
    all.extend_from_slice(args);
    text(&redis_cli(port, &all))
}

/// A `redis` crate connection logged in as `user` (AUTH user pass on connect).
fn client_as(port: u16, user: &str, pass: &str) -> redis::Connection {
    redis::Client::open(format!("redis://{user}:{pass}@127.0.0.1:{port}/"))
        .and_then(|c| c.get_connection())
        .expect("connect and AUTH")
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
            vec!["on", "~app:*"],
            "ERR Error in ACL SETUSER modifier '~app:*': only ~* (all keys) and &* (all channels) are supported",
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
    let mut last = None;
    let answered = wait_until(Duration::from_secs(10), || {
        let r = redis::cmd("RL.CHECK")
            .arg(&["k", "5", "10"])
            .query::<Vec<i64>>(&mut c);
        last = Some(format!("{r:?}"));
        r.ok().filter(|r| r[0] == 1)
    });
    let first = answered.unwrap_or_else(|| panic!("the sidecar never answered: {last:?}"));
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

fn envoy_request(value: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: "internal".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "azure".into(),
                value: value.into(),
            }],
            limit: None,
            hits_addend: Some(1),
        }],
        hits_addend: 0,
    }
}

/// Node a serves gRPC; the keys node b owns are forwarded to b, which wants a password.
#[test]
fn a_cluster_with_requirepass_forwards_grpc_checks() {
    let dir = TempDir::new("grpc-auth-config");
    std::fs::write(
        dir.path().join("internal.yaml"),
        "domain: internal\ndescriptors:\n  - key: azure\n    rate_limit:\n      unit: day\n      requests_per_unit: 100\n",
    )
    .unwrap();
    let nodes = TempDir::new("grpc-auth-nodes");
    let grpc = free_port().to_string();
    let config_dir = dir.path().to_str().unwrap();
    let auth = ["--requirepass", ADMIN, "--masterauth", ADMIN];
    let mut a_flags = vec!["--grpc-port", &grpc, "--envoy-config", config_dir];
    a_flags.extend(auth);
    let a = cluster_node(0, &nodes.path().join("a.conf"), &a_flags);
    let b = cluster_node(0, &nodes.path().join("b.conf"), &auth);
    let created = sluice_cluster(&[
        "create",
        &format!("127.0.0.1:{}", a.port),
        &format!("127.0.0.1:{}", b.port),
        "--password",
        ADMIN,
    ]);
    assert!(created.status.success(), "{created:?}");
    let rt = runtime();
    let mut rls = wait_until(Duration::from_secs(10), || {
        rt.block_on(RateLimitServiceClient::connect(format!(
            "http://127.0.0.1:{grpc}"
        )))
        .ok()
    })
    .expect("gRPC connects");
    let mut call = |v: &str| {
        rt.block_on(rls.should_rate_limit(envoy_request(v)))
            .map(|r| r.into_inner())
    };
    // Until the table is pushed, checks may be unavailable; then every one of 40 values (about
    // half of them b's) is answered by its owner.
    let mut last = String::new();
    let up = wait_until(Duration::from_secs(15), || {
        let r = call("probe");
        last = format!("{r:?}");
        r.ok().filter(|r| r.overall_code == Code::Ok as i32)
    });
    assert!(up.is_some(), "{last}");
    for i in 0..40 {
        let r = call(&i.to_string()).unwrap_or_else(|s| panic!("value {i}: {s}"));
        assert_eq!(r.overall_code, Code::Ok as i32);
        assert_eq!(r.statuses[0].limit_remaining, 99, "value {i}");
    }
    let mut on_b = client_as(b.port, "default", ADMIN);
    let keys: i64 = redis::cmd("DBSIZE").query(&mut on_b).unwrap();
    assert!(
        keys >= 5,
        "node b counted the forwarded checks ({keys} keys)"
    );
    drop(a);
}
