//! One door for every front (issue 34, holes 1, 3 and 4): the HTTP front, the gRPC port, the
//! metrics port and the sidecar's HTTP front take the node's credentials (Bearer for
//! `default`, Basic for a named user) and run each request as that user through the ACL; gRPC
//! keys live under `envoy:`, bounded in size; metric labels are escaped and the registry of
//! rule names forgets rules that are gone.

use std::time::Duration;

use sluice_envoy::pb::{
    RateLimitDescriptor, RateLimitRequest, RateLimitResponse, RateLimitServiceClient,
};
use sluice_tests::{
    Sluice, TempDir, envoy_descriptor, free_port, http, http_get, runtime, sluice_with_http,
    wait_until,
};
use tonic::transport::Channel;

const JSON: (&str, &str) = ("Content-Type", "application/json");
/// `gw:gwpw`, `admin:adminpw`, `lim:lp`, `default:s3cret`, `default:wrong` in base64.
const GW: &str = "Basic Z3c6Z3dwdw==";
const ADMIN: &str = "Basic YWRtaW46YWRtaW5wdw==";
const LIM: &str = "Basic bGltOmxw";
const DEFAULT_BASIC: &str = "Basic ZGVmYXVsdDpzM2NyZXQ=";
const DEFAULT_WRONG: &str = "Basic ZGVmYXVsdDp3cm9uZw==";

fn acl(server: &Sluice, args: &[&str]) {
    let mut c = server.client();
    let r: redis::RedisResult<String> = redis::cmd("ACL").arg(args).query(&mut c);
    assert_eq!(r.as_deref(), Ok("OK"), "ACL {args:?}");
}

/// The status of `method path` with an `Authorization` header (or none) and a JSON body.
fn status(port: u16, method: &str, path: &str, auth: Option<&str>, body: Option<&str>) -> u16 {
    let mut headers = vec![JSON];
    if let Some(a) = auth {
        headers.push(("Authorization", a));
    }
    http(port, method, path, &headers, body)
        .unwrap_or_else(|| panic!("{method} {path}: no answer"))
        .status
}

#[test]
fn the_http_front_runs_each_request_as_its_acl_user() {
    let (server, port) = sluice_with_http(&[]);
    acl(
        &server,
        &["SETUSER", "admin", "on", ">adminpw", "~*", "+@all"],
    );
    acl(
        &server,
        &[
            "SETUSER",
            "gw",
            "on",
            ">gwpw",
            "~gw:*",
            "+rl.check",
            "+rl.allow",
        ],
    );
    acl(&server, &["SETUSER", "default", "off"]);
    let rule = Some(r#"{"scope":"user","limit":5,"window":"1m"}"#);
    let check = |key: &str| format!(r#"{{"key":"{key}","limit":5,"period":60}}"#);
    // No credentials, or wrong ones: 401 on every route but /healthz.
    for (method, path, body) in [
        ("PUT", "/rules/evil", rule),
        ("DELETE", "/rules/evil", None),
        ("GET", "/rules", None),
        ("POST", "/v1/check", Some(check("gw:a").as_str())),
        ("GET", "/v1/auth?ip=1.2.3.4", None),
    ] {
        assert_eq!(
            status(port, method, path, None, body),
            401,
            "{method} {path}"
        );
        assert_eq!(
            status(port, method, path, Some("Bearer nope"), body),
            401,
            "{method} {path} with a wrong password"
        );
    }
    assert_eq!(status(port, "GET", "/healthz", None, None), 200);
    // A user who may check but not write rules: its checks pass, its writes are 403.
    assert_eq!(
        status(port, "POST", "/v1/check", Some(GW), Some(&check("gw:a"))),
        200
    );
    let r = http(
        port,
        "PUT",
        "/rules/evil",
        &[JSON, ("Authorization", GW)],
        rule,
    )
    .expect("an answer");
    assert_eq!(r.status, 403, "{r:?}");
    assert!(r.body.contains("NOPERM"), "{r:?}");
    assert_eq!(status(port, "GET", "/rules", Some(GW), None), 403);
    // Its key patterns hold too: a key outside `gw:*` is 403.
    assert_eq!(
        status(port, "POST", "/v1/check", Some(GW), Some(&check("other"))),
        403
    );
    // The admin writes and deletes.
    assert_eq!(status(port, "PUT", "/rules/evil", Some(ADMIN), rule), 200);
    assert_eq!(status(port, "GET", "/rules/evil", Some(ADMIN), None), 200);
    assert_eq!(
        status(port, "DELETE", "/rules/evil", Some(ADMIN), None),
        200
    );
}

/// A gRPC client of `port`, once it connects.
fn rls(rt: &tokio::runtime::Runtime, port: u16) -> RateLimitServiceClient<Channel> {
    wait_until(Duration::from_secs(10), || {
        rt.block_on(RateLimitServiceClient::connect(format!(
            "http://127.0.0.1:{port}"
        )))
        .ok()
    })
    .expect("gRPC connects")
}

fn descriptor(entries: &[(&str, &str)], limit: Option<(u32, i32)>) -> RateLimitDescriptor {
    envoy_descriptor(entries, limit, None)
}

fn call(
    rt: &tokio::runtime::Runtime,
    client: &mut RateLimitServiceClient<Channel>,
    auth: Option<&str>,
    domain: &str,
    descriptors: Vec<RateLimitDescriptor>,
) -> Result<RateLimitResponse, tonic::Status> {
    let mut request = tonic::Request::new(RateLimitRequest {
        domain: domain.into(),
        descriptors,
        hits_addend: 1,
    });
    if let Some(a) = auth {
        request
            .metadata_mut()
            .insert("authorization", a.parse().expect("metadata"));
    }
    rt.block_on(client.should_rate_limit(request))
        .map(tonic::Response::into_inner)
}

/// `RateLimit.Unit` values.
const MINUTE: i32 = 2;
const YEAR: i32 = 6;

#[test]
fn grpc_takes_the_same_credentials_and_acl() {
    let grpc = free_port();
    let server = Sluice::start_with(&["--requirepass", "s3cret", "--grpc-port", &grpc.to_string()]);
    let rt = runtime();
    let mut client = rls(&rt, grpc);
    let d = || vec![descriptor(&[("k", "v")], Some((5, MINUTE)))];
    let unauthenticated = |r: Result<RateLimitResponse, tonic::Status>| {
        r.map_err(|s| s.code()).map(|r| r.overall_code)
    };
    assert_eq!(
        unauthenticated(call(&rt, &mut client, None, "d", d())),
        Err(tonic::Code::Unauthenticated)
    );
    assert_eq!(
        unauthenticated(call(&rt, &mut client, Some("Bearer wrong"), "d", d())),
        Err(tonic::Code::Unauthenticated)
    );
    assert_eq!(
        unauthenticated(call(&rt, &mut client, Some(DEFAULT_WRONG), "d", d())),
        Err(tonic::Code::Unauthenticated)
    );
    assert!(call(&rt, &mut client, Some("Bearer s3cret"), "d", d()).is_ok());
    assert!(call(&rt, &mut client, Some(DEFAULT_BASIC), "d", d()).is_ok());
    // A user whose keys are elsewhere, or who may not check, is refused.
    let mut c = server.client();
    let _: () = redis::cmd("AUTH").arg("s3cret").query(&mut c).unwrap();
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "lim", "on", ">lp", "~other:*", "+@all"])
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "gw", "on", ">gwpw", "~*", "+@all", "-rl.check"])
        .query(&mut c)
        .unwrap();
    for user in [LIM, GW] {
        let r = call(&rt, &mut client, Some(user), "d", d()).expect_err("refused");
        assert_eq!(r.code(), tonic::Code::PermissionDenied, "{user}: {r:?}");
        assert!(r.message().contains("NOPERM"), "{r:?}");
    }
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "lim", "~envoy:*"])
        .query(&mut c)
        .unwrap();
    assert!(call(&rt, &mut client, Some(LIM), "d", d()).is_ok());
}

#[test]
fn the_metrics_port_takes_the_same_credentials() {
    let metrics = free_port();
    let _server = Sluice::start_with(&[
        "--requirepass",
        "s3cret",
        "--metrics-port",
        &metrics.to_string(),
    ]);
    let scrape = |auth: Option<&str>| {
        wait_until(Duration::from_secs(10), || {
            let headers: Vec<(&str, &str)> =
                auth.map(|a| ("Authorization", a)).into_iter().collect();
            http(metrics, "GET", "/metrics", &headers, None)
        })
        .expect("the metrics port answers")
    };
    let r = scrape(None);
    assert_eq!(r.status, 401, "{r:?}");
    assert!(
        r.header("WWW-Authenticate")
            .is_some_and(|h| h.contains("Basic"))
    );
    assert_eq!(scrape(Some("Bearer wrong")).status, 401);
    // A denied key: the admin sees it in sluice_top_denied_requests (it may run RL.TOP); a
    // user allowed INFO only scrapes every other metric, without the keys.
    let mut c = redis::Client::open(format!("redis://:s3cret@127.0.0.1:{}", _server.port))
        .and_then(|c| c.get_connection())
        .expect("connects");
    for _ in 0..3 {
        let _: Vec<i64> = redis::cmd("RL.CHECK")
            .arg(&["secret:key", "1", "60"])
            .query(&mut c)
            .expect("RL.CHECK");
    }
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "watcher", "on", ">w", "+info"])
        .query(&mut c)
        .expect("ACL SETUSER");
    let r = scrape(Some("Bearer s3cret"));
    assert_eq!(r.status, 200);
    assert!(r.body.contains("sluice_connected_clients"));
    assert!(r.body.contains("key=\"secret:key\""), "{}", r.body);
    assert_eq!(scrape(Some(DEFAULT_BASIC)).status, 200);
    // Basic base64("watcher:w").
    let r = scrape(Some("Basic d2F0Y2hlcjp3"));
    assert_eq!(r.status, 200);
    assert!(r.body.contains("sluice_connected_clients"));
    assert!(!r.body.contains("secret:key"), "{}", r.body);
}

#[test]
fn the_sidecar_http_front_takes_bearer_and_basic() {
    let (node, _node_http) = sluice_with_http(&[]);
    let port = free_port();
    let upstream = format!("127.0.0.1:{}", node.port);
    let _proxy = Sluice::start_proxy(&[
        "--upstream",
        &upstream,
        "--requirepass",
        "s3cret",
        "--http-port",
        &port.to_string(),
    ]);
    wait_until(Duration::from_secs(10), || http_get(port, "/healthz")).expect("sidecar /healthz");
    assert_eq!(status(port, "GET", "/rules", None, None), 401);
    assert_eq!(
        status(port, "GET", "/rules", Some(DEFAULT_WRONG), None),
        401
    );
    assert_eq!(status(port, "GET", "/rules", Some(GW), None), 401);
    assert_eq!(
        status(port, "GET", "/rules", Some("Bearer s3cret"), None),
        200
    );
    assert_eq!(
        status(port, "GET", "/rules", Some(DEFAULT_BASIC), None),
        200
    );
}

#[test]
fn grpc_keys_live_in_their_own_namespace() {
    let grpc = free_port();
    let server = Sluice::start_with(&["--grpc-port", &grpc.to_string()]);
    let rt = runtime();
    let mut client = rls(&rt, grpc);
    // The issue's squat: no entries, a year-long override, the domain a RESP key.
    let r = call(
        &rt,
        &mut client,
        None,
        "api:bob",
        vec![descriptor(&[], Some((1000, YEAR)))],
    );
    assert_eq!(
        r.map(|r| r.overall_code).map_err(|s| s.code()),
        Err(tonic::Code::InvalidArgument),
        "a descriptor with no entries"
    );
    let r = call(
        &rt,
        &mut client,
        None,
        "api:bob",
        vec![descriptor(&[("k", "v")], Some((1000, YEAR)))],
    );
    assert!(r.is_ok(), "{r:?}");
    let mut c = server.client();
    let exists = |c: &mut redis::Connection, key: &str| -> i64 {
        redis::cmd("EXISTS").arg(key).query(c).unwrap()
    };
    assert_eq!(
        exists(&mut c, "envoy:api:bob|k_v"),
        1,
        "the gRPC bucket is under envoy:"
    );
    assert_eq!(exists(&mut c, "api:bob|k_v"), 0);
    assert_eq!(exists(&mut c, "api:bob"), 0);
    // RL.HIT's and /v1/check's buckets are untouched.
    let _: i64 = redis::cmd("RL.RULE")
        .arg(&["SET", "api", "LIMIT", "5", "PERIOD", "1m"])
        .query(&mut c)
        .unwrap();
    let hit: Vec<i64> = redis::cmd("RL.HIT")
        .arg(&["api", "bob"])
        .query(&mut c)
        .unwrap();
    assert_eq!(hit[..3], [1, 5, 4], "RL.HIT api bob owns a fresh bucket");
}

#[test]
fn grpc_domains_and_descriptors_are_bounded() {
    let grpc = free_port();
    let server = Sluice::start_with(&["--grpc-port", &grpc.to_string()]);
    let rt = runtime();
    let mut client = rls(&rt, grpc);
    let code = |r: Result<RateLimitResponse, tonic::Status>| r.map(|_| ()).map_err(|s| s.code());
    // Warm up the path once, then measure.
    assert!(
        call(
            &rt,
            &mut client,
            None,
            "d",
            vec![descriptor(&[("k", "v")], Some((5, MINUTE)))]
        )
        .is_ok()
    );
    let before = server.rss();
    let started = std::time::Instant::now();
    for i in 0..100 {
        let domain = format!("{i}{}", "x".repeat(1 << 20));
        let r = call(
            &rt,
            &mut client,
            None,
            &domain,
            vec![descriptor(&[("k", "v")], Some((1000, YEAR)))],
        );
        assert_eq!(code(r), Err(tonic::Code::InvalidArgument), "call {i}");
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "bounded in time"
        );
    }
    let grown = server.rss().saturating_sub(before);
    assert!(grown < 32 << 20, "RSS grew by {grown} bytes");
    let long = "v".repeat(257);
    for d in [
        vec![descriptor(&[("k", &long)], None)],
        vec![descriptor(&[(&long, "v")], None)],
        (0..65).map(|_| descriptor(&[("k", "v")], None)).collect(),
        vec![descriptor(
            &(0..33).map(|_| ("k", "v")).collect::<Vec<_>>(),
            None,
        )],
    ] {
        assert_eq!(
            code(call(&rt, &mut client, None, "d", d)),
            Err(tonic::Code::InvalidArgument)
        );
    }
    let mut c = server.client();
    let n: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(n, 1, "only the warm-up's bucket");
}

/// `GET /metrics` on `port`, the whole text.
fn metrics_text(port: u16) -> String {
    wait_until(Duration::from_secs(10), || http_get(port, "/metrics")).expect("GET /metrics")
}

#[test]
fn metric_labels_are_escaped_and_gone_rules_drop_out() {
    let dir = TempDir::new("security-envoy");
    let evil = "evil\"} 1\nsluice_up{injected=\"yes";
    let yaml = format!(
        "domain: {}\ndescriptors:\n  - key: k\n    rate_limit: {{unit: minute, requests_per_unit: 5}}\n",
        serde_json::to_string(evil).unwrap()
    );
    std::fs::write(dir.path().join("evil.yaml"), yaml).unwrap();
    let (grpc, metrics) = (free_port(), free_port());
    let server = Sluice::start_with(&[
        "--grpc-port",
        &grpc.to_string(),
        "--metrics-port",
        &metrics.to_string(),
        "--envoy-config",
        dir.path().to_str().unwrap(),
    ]);
    let rt = runtime();
    let mut client = rls(&rt, grpc);
    // A configured domain, and the issue's override on a domain of the caller's choosing.
    assert!(
        call(
            &rt,
            &mut client,
            None,
            evil,
            vec![descriptor(&[("k", "v")], None)]
        )
        .is_ok()
    );
    let r = call(
        &rt,
        &mut client,
        None,
        evil,
        vec![descriptor(&[("o", "v")], Some((5, MINUTE)))],
    );
    assert!(r.is_ok(), "{r:?}");
    let mut c = server.client();
    let _: i64 = redis::cmd("RL.RULE")
        .arg(&["SET", "gone", "LIMIT", "5", "PERIOD", "1m"])
        .query(&mut c)
        .unwrap();
    let _: Vec<i64> = redis::cmd("RL.HIT")
        .arg(&["gone", "a"])
        .query(&mut c)
        .unwrap();
    let text = metrics_text(metrics);
    let forged: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("sluice_up"))
        .collect();
    assert!(forged.is_empty(), "forged series: {forged:?}");
    assert!(
        text.contains(r#"rule="evil\"} 1\nsluice_up{injected=\"yes.k""#),
        "the escaped label:\n{text}"
    );
    assert!(text.contains(r#"rule="gone""#), "{text}");
    // A deleted rule's name leaves the registry (and the scrape).
    let _: i64 = redis::cmd("RL.RULE")
        .arg(&["DEL", "gone"])
        .query(&mut c)
        .unwrap();
    let text = metrics_text(metrics);
    assert!(!text.contains(r#"rule="gone""#), "{text}");
}

#[test]
fn an_aclfile_password_on_default_closes_the_http_front() {
    let dir = TempDir::new("security-aclfile");
    let file = dir.path().join("users.acl");
    std::fs::write(&file, "user default on >filepw ~* &* +@all\n").unwrap();
    let (_server, port) = sluice_with_http(&["--aclfile", file.to_str().unwrap()]);
    let check = Some(r#"{"key":"k","limit":5,"period":60}"#);
    assert_eq!(status(port, "POST", "/v1/check", None, check), 401);
    assert_eq!(
        status(
            port,
            "PUT",
            "/rules/evil",
            None,
            Some(r#"{"scope":"user","limit":5,"window":"1m"}"#)
        ),
        401
    );
    assert_eq!(
        status(port, "POST", "/v1/check", Some("Bearer filepw"), check),
        200
    );
}
