//! Issue 34, hole 8 and the 400s: `GET /v1/auth` trusts only what the gateway sets, and every
//! HTTP error names the JSON field or header at fault.
//!
//! The bypasses run against real nginx with the shipped examples/nginx/nginx.conf and the
//! issue's rule (`per-ip LIMIT 2 PERIOD 1m SCOPE ip ROUTE /api`): after `GET /api/search`
//! answers 200 200 429 429, a client's own `X-Forwarded-Uri`, a doubled slash, a percent-escape,
//! a dot segment, a forged `X-Forwarded-For` and its own `X-Tier` or `X-User-Id` are all still
//! limited. The client-address rule (the rightmost `X-Forwarded-For` entry not from a trusted
//! proxy) and the trusted-headers flag are checked against the node directly.

use std::time::Duration;

use sluice_tests::{
    HttpReply, Nginx, Sluice, TempDir, free_port, have_tool, http, http_json, redis_cli,
    sluice_with_http, wait_until,
};

/// nginx in the foreground in a process group of its own, stopped by that group when dropped
/// (killing the master alone leaves its worker running).
/// A node with `rules` (spec texts after `RL.RULE SET`) behind nginx running the shipped
/// example, serving a site with `/api/search`.
struct Gateway {
    server: Sluice,
    listen: u16,
    _nginx: Nginx,
    _dir: TempDir,
}

impl Gateway {
    /// `None` when nginx is not installed.
    fn start(rules: &[&str]) -> Option<Gateway> {
        if !have_tool("nginx") {
            return None;
        }
        let (server, http_port) = sluice_with_http(&[]);
        for rule in rules {
            let mut args = vec!["RL.RULE", "SET"];
            args.extend(rule.split(' '));
            let out = redis_cli(server.port, &args);
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(text.trim().parse::<u64>().is_ok(), "{rule}: {text}");
        }
        let dir = TempDir::new("nginx-security");
        let root = dir.path().join("site");
        std::fs::create_dir_all(root.join("api")).unwrap();
        std::fs::write(root.join("api/search"), "results\n").unwrap();
        let listen = free_port();
        let nginx = Nginx::example(listen, http_port, &root, &dir);
        // Up once it answers a path no rule covers.
        wait_until(Duration::from_secs(10), || {
            http(listen, "GET", "/healthz-of-nginx", &[], None)
        })
        .expect("nginx answers");
        Some(Gateway {
            server,
            listen,
            _nginx: nginx,
            _dir: dir,
        })
    }

    fn get(&self, path: &str, headers: &[(&str, &str)]) -> HttpReply {
        http(self.listen, "GET", path, headers, None)
            .unwrap_or_else(|| panic!("GET {path} through nginx got no answer"))
    }

    /// `GET /api/search` until the bucket is empty: 200 200 429 429.
    fn exhaust(&self) {
        let statuses: Vec<u16> = (0..4)
            .map(|_| self.get("/api/search", &[]).status)
            .collect();
        assert_eq!(statuses, [200, 200, 429, 429]);
    }

    /// The tokens left in `rule`'s bucket for `subject`, read over RESP without taking one.
    fn remaining(&self, rule: &str, subject: &str) -> u64 {
        let out = redis_cli(self.server.port, &["RL.HIT", rule, subject, "COST", "0"]);
        let text = String::from_utf8_lossy(&out.stdout);
        let fields: Vec<&str> = text.lines().collect();
        fields[2].parse().unwrap_or_else(|_| panic!("{text}"))
    }
}

const PER_IP: &str = "per-ip LIMIT 2 PERIOD 1m SCOPE ip ROUTE /api";

#[test]
fn nginx_limits_api_search_200_200_429_429() {
    let Some(gw) = Gateway::start(&[PER_IP]) else {
        return;
    };
    gw.exhaust();
    assert_eq!(gw.remaining("per-ip", "127.0.0.1"), 0);
    // Another route is not the rule's.
    let r = gw.get("/index.html", &[]);
    assert_ne!(r.status, 429, "{r:?}");
}

#[test]
fn nginx_a_client_x_forwarded_uri_does_not_move_the_request_off_the_route() {
    let Some(gw) = Gateway::start(&[PER_IP]) else {
        return;
    };
    gw.exhaust();
    for i in 0..4 {
        let r = gw.get("/api/search", &[("X-Forwarded-Uri", "/x")]);
        assert_eq!(r.status, 429, "request {i} with X-Forwarded-Uri: /x: {r:?}");
    }
}

#[test]
fn nginx_slashes_escapes_and_dot_segments_do_not_move_the_request_off_the_route() {
    let Some(gw) = Gateway::start(&[PER_IP]) else {
        return;
    };
    gw.exhaust();
    for path in [
        "//api/search",
        "///api//search",
        "/%61pi/search",
        "/%2Fapi/search",
        "/x/../api/search",
        "/./api/search",
        "/api/search?page=2",
    ] {
        let r = gw.get(path, &[]);
        assert_eq!(r.status, 429, "{path}: {r:?}");
    }
}

#[test]
fn nginx_a_forged_x_forwarded_for_does_not_pick_the_bucket() {
    let Some(gw) = Gateway::start(&[PER_IP]) else {
        return;
    };
    gw.exhaust();
    for forged in ["10.9.9.9", "10.9.9.10, 10.9.9.11", "garbage"] {
        let r = gw.get("/api/search", &[("X-Forwarded-For", forged)]);
        assert_eq!(r.status, 429, "X-Forwarded-For: {forged}: {r:?}");
    }
}

#[test]
fn nginx_a_client_tier_or_user_header_never_reaches_sluice() {
    // Every request is tier `free` in the example (its map of $remote_user); the user is the
    // one nginx authenticated, none here.
    let Some(gw) = Gateway::start(&[
        "free-ip LIMIT 2 PERIOD 1m SCOPE ip TIER free ROUTE /api",
        "per-user LIMIT 100 PERIOD 1m SCOPE user",
    ]) else {
        return;
    };
    let forged = [("X-Tier", "pro"), ("X-User-Id", "mallory")];
    let statuses: Vec<u16> = (0..4)
        .map(|_| gw.get("/api/search", &forged).status)
        .collect();
    assert_eq!(
        statuses,
        [200, 200, 429, 429],
        "X-Tier: pro escaped the free tier"
    );
    assert_eq!(gw.remaining("free-ip", "127.0.0.1"), 0);
    assert_eq!(
        gw.remaining("per-user", "mallory"),
        100,
        "the client's X-User-Id picked a bucket"
    );
}

/// A node with `args`, one ROUTE rule on the client address; `GET /v1/auth` with `headers`.
fn auth_node(args: &[&str]) -> (Sluice, u16) {
    let (server, port) = sluice_with_http(args);
    let out = redis_cli(
        server.port,
        &[
            "RL.RULE", "SET", "api", "LIMIT", "5", "PERIOD", "1m", "SCOPE", "ip", "ROUTE", "/api",
        ],
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1");
    (server, port)
}

fn auth(port: u16, path: &str, headers: &[(&str, &str)]) -> HttpReply {
    http(port, "GET", path, headers, None).expect("GET /v1/auth answers")
}

/// The tokens `api`'s bucket for `ip` has left (5 when no request counted on it).
fn left(server: &Sluice, ip: &str) -> u64 {
    let out = redis_cli(server.port, &["RL.HIT", "api", ip, "COST", "0"]);
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines().nth(2).unwrap().parse().unwrap()
}

#[test]
fn auth_takes_the_client_address_from_the_rightmost_untrusted_forwarded_for_entry() {
    let uri = ("X-Original-URI", "/api/x");
    // Loopback is trusted by default: the peer (127.0.0.1) is a proxy, and so may its list be.
    let (server, port) = auth_node(&[]);
    let xff = ("X-Forwarded-For", "203.0.113.7, 198.51.100.2");
    assert_eq!(auth(port, "/v1/auth", &[uri, xff]).status, 200);
    assert_eq!(left(&server, "198.51.100.2"), 4, "not the rightmost entry");
    assert_eq!(
        left(&server, "203.0.113.7"),
        5,
        "the client's own first entry"
    );
    // A trusted hop inside the list is skipped; all trusted: the farthest one.
    let xff = ("X-Forwarded-For", "203.0.113.9, 127.0.0.5");
    assert_eq!(auth(port, "/v1/auth", &[uri, xff]).status, 200);
    assert_eq!(left(&server, "203.0.113.9"), 4);
    let xff = ("X-Forwarded-For", "127.0.0.6, 127.0.0.5");
    assert_eq!(auth(port, "/v1/auth", &[uri, xff]).status, 200);
    assert_eq!(left(&server, "127.0.0.6"), 4);
    // A garbage entry ends the walk at the hop that wrote it.
    let xff = (
        "X-Forwarded-For",
        "203.0.113.10, not-an-address, 198.51.100.3",
    );
    assert_eq!(auth(port, "/v1/auth", &[uri, xff]).status, 200);
    assert_eq!(left(&server, "198.51.100.3"), 4);
    assert_eq!(left(&server, "not-an-address"), 5);
    drop(server);

    // More trusted proxies: the walk goes past them.
    let (server, port) = auth_node(&["--http-trusted-proxies", "127.0.0.0/8,198.51.100.0/24"]);
    let xff = ("X-Forwarded-For", "203.0.113.7, 198.51.100.2");
    assert_eq!(auth(port, "/v1/auth", &[uri, xff]).status, 200);
    assert_eq!(left(&server, "203.0.113.7"), 4);
    drop(server);

    // The peer is no trusted proxy: its list is not read at all.
    let (server, port) = auth_node(&["--http-trusted-proxies", "10.0.0.0/8"]);
    let xff = ("X-Forwarded-For", "203.0.113.7");
    assert_eq!(auth(port, "/v1/auth", &[uri, xff]).status, 200);
    assert_eq!(left(&server, "127.0.0.1"), 4);
    assert_eq!(left(&server, "203.0.113.7"), 5);
}

#[test]
fn auth_reads_only_the_headers_the_deployment_trusts() {
    let ip = "/v1/auth?ip=203.0.113.7";
    // The default trusts nginx's X-Original-URI, not Traefik's X-Forwarded-Uri.
    let (server, port) = auth_node(&[]);
    let r = auth(port, ip, &[("X-Forwarded-Uri", "/api/x")]);
    assert_eq!(r.status, 200);
    assert!(r.header("RateLimit-Limit").is_none(), "{r:?}");
    assert_eq!(left(&server, "203.0.113.7"), 5);
    let r = auth(port, ip, &[("X-Original-URI", "//api/./x")]);
    assert_eq!(r.header("RateLimit-Limit"), Some("5"), "{r:?}");
    drop(server);

    // Traefik's deployment names its own.
    let (server, port) = auth_node(&["--http-trusted-headers", "X-Forwarded-Uri,X-User-Id"]);
    let r = auth(port, ip, &[("X-Original-URI", "/api/x")]);
    assert!(r.header("RateLimit-Limit").is_none(), "{r:?}");
    let r = auth(port, ip, &[("X-Forwarded-Uri", "/%61pi/x")]);
    assert_eq!(r.header("RateLimit-Limit"), Some("5"), "{r:?}");
    assert_eq!(left(&server, "203.0.113.7"), 4);
    // Envoy's form: the path after /v1/auth, normalized too.
    for path in [
        "/v1/auth//api/y?ip=1",
        "/v1/auth/%61pi/y",
        "/v1/auth/web/../api/y",
    ] {
        let r = auth(port, path, &[("X-Forwarded-For", "203.0.113.8")]);
        assert_eq!(r.header("RateLimit-Limit"), Some("5"), "{path}: {r:?}");
    }
    assert_eq!(left(&server, "203.0.113.8"), 2);
}

/// The error text of a 400.
fn bad_request(r: &HttpReply) -> String {
    assert_eq!(r.status, 400, "{r:?}");
    r.json()["error"].as_str().unwrap().to_string()
}

#[test]
fn every_400_names_the_field_or_header_at_fault() {
    let (_server, port) = sluice_with_http(&[]);
    let rule = |body: &str| bad_request(&http_json(port, "PUT", "/rules/bad", body));
    for (body, field) in [
        (r#"{"scope":"user","limit":-1,"window":"1m"}"#, "limit"),
        (r#"{"scope":"user","limit":"ten","window":"1m"}"#, "limit"),
        (r#"{"scope":"user","limit":1,"window":"1 m"}"#, "window"),
        (r#"{"scope":"user","limit":1,"window":[1]}"#, "window"),
        (r#"{"scope":"user","limit":0,"window":"1m"}"#, "limit"),
        (r#"{"scope":"planet","limit":1,"window":"1m"}"#, "scope"),
        (
            r#"{"scope":"user","limit":1,"window":"1m","burst":-3}"#,
            "burst",
        ),
        (
            r#"{"scope":"user","limit":1,"window":"1m","algo":"NOPE"}"#,
            "algo",
        ),
        (
            r#"{"scope":"user","limit":1,"window":"1m","shadow":"yes"}"#,
            "shadow",
        ),
        (
            r#"{"scope":"user","limit":1,"window":"1m","route":"api"}"#,
            "route",
        ),
        (
            r#"{"scope":"user","limit":1,"window":"1m","colour":"red"}"#,
            "colour",
        ),
        (r#"{"limit":1,"window":"1m"}"#, "scope"),
    ] {
        let e = rule(body);
        assert!(e.starts_with(&format!("{field}: ")), "{body}: {e}");
    }
    let check = |body: &str| bad_request(&http_json(port, "POST", "/v1/check", body));
    for (body, field) in [
        (r#"{"key":"k","limit":-1,"period":1}"#, "limit"),
        (r#"{"key":"k","limit":1,"period":"soon"}"#, "period"),
        (r#"{"key":"k","limit":1,"period":1,"cost":1.5}"#, "cost"),
        (r#"{"key":"k","limit":1,"period":1,"dry":1}"#, "dry"),
        (r#"{"key":"k","limit":1,"period":1,"algo":"NOPE"}"#, "algo"),
        (r#"{"user":5}"#, "user"),
        (r#"{"user":"u","cost":-2}"#, "cost"),
    ] {
        let e = check(body);
        assert!(e.starts_with(&format!("{field}: ")), "{body}: {e}");
    }
    let e = bad_request(&http_json(
        port,
        "POST",
        "/rules/bad/rollback",
        r#"{"version":"x"}"#,
    ));
    assert!(e.starts_with("version: "), "{e}");
    // Headers: the body's type, an attribute too long.
    let r = http(
        port,
        "POST",
        "/v1/check",
        &[("Content-Type", "text/plain")],
        Some("{}"),
    )
    .unwrap();
    assert_eq!(r.status, 415);
    assert!(r.json()["error"].as_str().unwrap().contains("Content-Type"));
    let long = "u".repeat(600);
    let r = auth(port, "/v1/auth", &[("X-User-Id", &long)]);
    let e = bad_request(&r);
    assert!(e.starts_with("X-User-Id: "), "{e}");
    let e = bad_request(&auth(port, "/v1/auth?cost=x", &[]));
    assert!(e.starts_with("cost: "), "{e}");
}

#[test]
fn a_request_head_over_32_kib_is_refused_and_the_server_stays_up() {
    let (_server, port) = sluice_with_http(&[]);
    let big = "x".repeat(40 << 10);
    let r = http(port, "GET", "/v1/auth", &[("X-Padding", &big)], None);
    assert_eq!(r.map(|r| r.status), Some(431));
    // Just under the bound is served.
    let fits = "x".repeat(30 << 10);
    let r = http(port, "GET", "/v1/auth", &[("X-Padding", &fits)], None).unwrap();
    assert_eq!(r.status, 200, "{r:?}");
}
