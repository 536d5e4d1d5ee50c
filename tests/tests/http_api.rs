//! The HTTP API (`--http-port`) end to end: checks with their status, body and headers
//! against RL.CHECK's own fields over RESP, gateway subrequests, rules CRUD, authentication,
//! bad input, and every route against the OpenAPI document the server serves.

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use serde_json::Value;
use sluice_tests::{
    Etcd, HttpReply, TempDir, http, http_json, rl_check, sluice_with_http, wait_until,
};

fn int(h: &HttpReply, name: &str) -> i64 {
    h.header(name)
        .unwrap_or_else(|| panic!("no {name} in {:?}", h.headers))
        .parse()
        .unwrap()
}

fn ceil_secs(ms: i64) -> i64 {
    (ms + 999) / 1000
}

#[test]
fn key_checks_answer_rl_check_fields_as_status_body_and_headers() {
    let (server, port) = sluice_with_http(&[]);
    let mut conn = server.client();
    let body = r#"{"key":"k","limit":3,"period":"1m"}"#;
    for left in [2, 1, 0] {
        let r = http_json(port, "POST", "/v1/check", body);
        assert_eq!(r.status, 200, "{r:?}");
        let j = r.json();
        assert_eq!(j["allowed"], true);
        assert_eq!(j["remaining"], left);
        assert_eq!(j["retry_after_ms"], -1);
        assert!(j.get("rule").is_none());
        // The same bucket over RESP, read without spending.
        let f = rl_check(&mut conn, &["k", "3", "1m", "COST", "0"]).unwrap();
        assert_eq!(f[2], left);
        assert_eq!(int(&r, "RateLimit-Limit"), 3);
        assert_eq!(int(&r, "RateLimit-Remaining"), left);
        let reset = j["reset_after_ms"].as_i64().unwrap();
        assert_eq!(int(&r, "RateLimit-Reset"), ceil_secs(reset));
        assert_eq!(r.header("RateLimit-Policy"), Some("\"default\";q=3;w=60"));
        assert_eq!(
            r.header("RateLimit"),
            Some(format!("\"default\";r={left};t={}", ceil_secs(reset)).as_str())
        );
        assert!(r.header("Retry-After").is_none());
        let reset_at = j["reset_at"].as_i64().unwrap();
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        assert!(
            (reset_at - (now_ms + reset)).abs() < 5_000,
            "{reset_at} vs {now_ms}+{reset}"
        );
    }
    let r = http_json(port, "POST", "/v1/check", body);
    assert_eq!(r.status, 429);
    let j = r.json();
    assert_eq!(j["allowed"], false);
    let retry = j["retry_after_ms"].as_i64().unwrap();
    assert!((19_000..=20_000).contains(&retry), "{retry}");
    assert_eq!(int(&r, "Retry-After"), ceil_secs(retry));
    assert_eq!(int(&r, "RateLimit-Remaining"), 0);
    // RESP sees the denial the same way.
    let f = rl_check(&mut conn, &["k", "3", "1m"]).unwrap();
    assert_eq!(f[0], 0);
    assert!((f[3] - retry).abs() < 1_000);
    // Every option reaches RL.CHECK: a dry check of a sliding window changes nothing.
    let dry = r#"{"key":"s","limit":2,"period":10,"algo":"SLIDING","cost":2,"dry":true}"#;
    for _ in 0..3 {
        let r = http_json(port, "POST", "/v1/check", dry);
        assert_eq!(r.status, 200);
        assert_eq!(r.json()["remaining"], 0);
        assert_eq!(r.header("RateLimit-Policy"), Some("\"default\";q=2;w=10"));
    }
    let burst = http_json(
        port,
        "POST",
        "/v1/check",
        r#"{"key":"b","limit":1,"period":"1s","burst":5}"#,
    );
    assert_eq!(burst.json()["limit"], 5);
    // RL.CHECK's refusals are 400 with its words.
    let r = http_json(
        port,
        "POST",
        "/v1/check",
        r#"{"key":"k","limit":0,"period":"1m"}"#,
    );
    assert_eq!(r.status, 400);
    assert!(
        r.json()["error"]
            .as_str()
            .unwrap()
            .contains("limit must be a positive integer")
    );
    let r = http_json(
        port,
        "POST",
        "/v1/check",
        r#"{"key":"k","limit":3,"period":"1m","algo":"ALGO"}"#,
    );
    assert_eq!(r.status, 400);
    // The same key under another algorithm: WRONGTYPE is the caller's mistake too.
    let r = http_json(
        port,
        "POST",
        "/v1/check",
        r#"{"key":"k","limit":3,"period":"1m","algo":"FIXED"}"#,
    );
    assert_eq!(r.status, 400, "{r:?}");
    let r = http_json(
        port,
        "POST",
        "/v1/check",
        r#"{"key":"k","limit":3,"period":true}"#,
    );
    assert_eq!(r.status, 400);
}

fn put_rule(port: u16, id: &str, body: &str) -> HttpReply {
    http_json(port, "PUT", &format!("/rules/{id}"), body)
}

#[test]
fn rules_crud_and_request_checks_by_scope_tier_and_route() {
    let (server, port) = sluice_with_http(&[
        "--http-user-header",
        "X-Who",
        "--http-trusted-headers",
        "X-Forwarded-Uri,X-Original-URI,X-Who,X-Tier",
    ]);
    let mut conn = server.client();
    let r = put_rule(
        port,
        "free-users",
        r#"{"scope":"user","limit":3,"window":"1m","tier":"free"}"#,
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["version"], 1);
    let r = put_rule(
        port,
        "api-ip",
        r#"{"scope":"ip","limit":2,"window":60,"route":"/api","algo":"GCRA","failmode":"closed"}"#,
    );
    assert_eq!(r.status, 200, "{r:?}");
    // Over RESP, the same rule with its seed fields.
    let spec: Vec<redis::Value> = redis::cmd("RL.RULE")
        .arg("GET")
        .arg("api-ip")
        .query(&mut conn)
        .unwrap();
    let text = format!("{spec:?}");
    assert!(text.contains("SCOPE ip ROUTE /api"), "{text}");
    // GET one, GET all.
    let j = http(port, "GET", "/rules/api-ip", &[], None)
        .unwrap()
        .json();
    assert_eq!(j["scope"], "ip");
    assert_eq!(j["route"], "/api");
    assert_eq!(j["limit"], 2);
    assert_eq!(j["window"], "1m");
    assert_eq!(j["failmode"], "closed");
    let all = http(port, "GET", "/rules", &[], None).unwrap().json();
    let ids: Vec<&str> = all["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["api-ip", "free-users"]);

    // A request check: both rules apply; api-ip (2) is the tighter.
    let req = r#"{"user":"alice","ip":"10.0.0.1","tier":"free","endpoint":"/api/x"}"#;
    let r = http_json(port, "POST", "/v1/check", req);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["rule"], "api-ip");
    assert_eq!(r.header("RateLimit-Policy"), Some("\"api-ip\";q=2;w=60"));
    // GET /v1/auth: subjects from headers (the user header renamed by the flag).
    let auth = |extra: &[(&str, &str)], query: &str| {
        let mut h = vec![
            ("X-Forwarded-For", "192.168.0.1, 10.0.0.1"),
            ("X-Who", "alice"),
            ("X-Tier", "free"),
        ];
        h.extend_from_slice(extra);
        http(port, "GET", &format!("/v1/auth{query}"), &h, None).unwrap()
    };
    let r = auth(&[("X-Forwarded-Uri", "/api/y")], "");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(int(&r, "RateLimit-Remaining"), 0);
    let r = auth(&[("X-Original-URI", "/api/z")], "");
    assert_eq!(r.status, 429);
    assert!(r.header("Retry-After").is_some());
    let r = auth(&[], "?endpoint=/api/z&deny_status=403");
    assert_eq!(r.status, 403);
    assert_eq!(r.json()["rule"], "api-ip");
    // All or nothing: alice's user bucket paid only for the two allowed requests.
    let hit: Vec<i64> = redis::cmd("RL.HIT")
        .arg("free-users")
        .arg("alice")
        .arg("COST")
        .arg(0)
        .query(&mut conn)
        .unwrap();
    assert_eq!(hit[2], 1);
    // Off the route, only the user rule applies; another tier, none does.
    let r = auth(&[("X-Forwarded-Uri", "/web")], "");
    assert_eq!(
        (r.status, r.json()["rule"].as_str()),
        (200, Some("free-users"))
    );
    let r = auth(&[], "?tier=pro&endpoint=/web");
    assert_eq!(r.status, 200);
    assert!(r.header("RateLimit-Limit").is_none());
    assert_eq!(r.json()["limit"], 0);

    // Validation and floors are RL.RULE's, as 400 naming the problem.
    for (body, want) in [
        (
            r#"{"scope":"org","limit":3,"window":"1m"}"#,
            "unknown SCOPE 'org'",
        ),
        (r#"{"scope":"ip","limit":3,"window":"0"}"#, "PERIOD '0'"),
        (
            r#"{"scope":"ip","limit":3,"window":"1m","route":"api"}"#,
            "ROUTE must be a path prefix",
        ),
        (
            r#"{"scope":"ip","limit":3,"window":"1m","colour":"red"}"#,
            "unknown field `colour`",
        ),
        (r#"{"limit":3,"window":"1m"}"#, "missing field `scope`"),
        (
            r#"{"scope":"ip","limit":"3","window":"1m"}"#,
            "invalid type",
        ),
    ] {
        let r = put_rule(port, "bad", body);
        assert_eq!(r.status, 400, "{body}: {r:?}");
        assert!(
            r.json()["error"].as_str().unwrap().contains(want),
            "{body}: {r:?}"
        );
    }
    let r = put_rule(port, "a:b", r#"{"scope":"ip","limit":3,"window":"1m"}"#);
    assert_eq!(r.status, 400);
    let r = put_rule(
        port,
        "floored",
        r#"{"scope":"ip","limit":100,"window":"1m","floor":50}"#,
    );
    assert_eq!(r.status, 200);
    let r = put_rule(
        port,
        "floored",
        r#"{"scope":"ip","limit":10,"window":"1m"}"#,
    );
    assert_eq!(r.status, 400);
    assert!(
        r.json()["error"]
            .as_str()
            .unwrap()
            .contains("below its FLOOR 50")
    );

    // History and rollback.
    assert_eq!(
        put_rule(port, "api-ip", r#"{"scope":"ip","limit":7,"window":"1m"}"#).json()["version"],
        2
    );
    let h = http(port, "GET", "/rules/api-ip/history", &[], None)
        .unwrap()
        .json();
    assert_eq!(h["versions"].as_array().unwrap().len(), 2);
    assert!(
        h["versions"][1]["spec"]
            .as_str()
            .unwrap()
            .starts_with("LIMIT 7 PERIOD 1m")
    );
    let r = http(port, "POST", "/rules/api-ip/rollback", &[], None).unwrap();
    assert_eq!((r.status, r.json()["version"].as_i64()), (200, Some(3)));
    assert_eq!(
        http(port, "GET", "/rules/api-ip", &[], None)
            .unwrap()
            .json()["limit"],
        2
    );
    let r = http_json(port, "POST", "/rules/api-ip/rollback", r#"{"version":2}"#);
    assert_eq!(r.json()["version"], 4);
    let r = http_json(port, "POST", "/rules/api-ip/rollback", r#"{"version":99}"#);
    assert_eq!(r.status, 400);
    assert!(
        r.json()["error"]
            .as_str()
            .unwrap()
            .contains("has no version 99")
    );
    // Delete; then 404s.
    let r = http(port, "DELETE", "/rules/api-ip", &[], None).unwrap();
    assert_eq!((r.status, r.json()["deleted"].as_bool()), (200, Some(true)));
    assert_eq!(
        http(port, "DELETE", "/rules/api-ip", &[], None)
            .unwrap()
            .status,
        404
    );
    assert_eq!(
        http(port, "GET", "/rules/api-ip", &[], None)
            .unwrap()
            .status,
        404
    );
    assert_eq!(
        http(port, "GET", "/rules/none/history", &[], None)
            .unwrap()
            .status,
        404
    );
    assert_eq!(
        http(port, "POST", "/rules/none/rollback", &[], None)
            .unwrap()
            .status,
        404
    );
    let names: Vec<String> = redis::cmd("RL.RULE").arg("LIST").query(&mut conn).unwrap();
    assert_eq!(names, ["floored", "free-users"]);
}

#[test]
fn a_rules_file_makes_writes_409_and_etcd_takes_them() {
    let dir = TempDir::new("http-rules");
    let path = dir.path().join("rules.toml");
    std::fs::write(
        &path,
        "[per-ip]\nlimit = 2\nperiod = \"1m\"\nscope = \"ip\"\n",
    )
    .unwrap();
    let (_file_server, port) = sluice_with_http(&["--rules", path.to_str().unwrap()]);
    let r = put_rule(port, "x", r#"{"scope":"ip","limit":3,"window":"1m"}"#);
    assert_eq!(r.status, 409, "{r:?}");
    assert!(
        r.json()["error"]
            .as_str()
            .unwrap()
            .contains("edit that file")
    );
    assert_eq!(
        http(port, "DELETE", "/rules/per-ip", &[], None)
            .unwrap()
            .status,
        409
    );
    assert_eq!(
        http(port, "POST", "/rules/per-ip/rollback", &[], None)
            .unwrap()
            .status,
        409
    );
    // The file's scope works for request checks.
    let r = http(port, "GET", "/v1/auth?ip=1.2.3.4", &[], None).unwrap();
    assert_eq!((r.status, r.json()["rule"].as_str()), (200, Some("per-ip")));

    let etcd = Etcd::start();
    let url = etcd.url();
    let (_a, port_a) = sluice_with_http(&["--rules-etcd", &url]);
    let (b, _) = sluice_with_http(&["--rules-etcd", &url]);
    let ready = wait_until(Duration::from_secs(10), || {
        let r = http(port_a, "GET", "/readyz", &[], None)?;
        (r.status == 200).then_some(())
    });
    assert!(ready.is_some(), "readyz once etcd is connected");
    let r = put_rule(
        port_a,
        "shared",
        r#"{"scope":"user","limit":4,"window":"1m","tier":"gold"}"#,
    );
    assert_eq!(r.status, 200, "{r:?}");
    // Through etcd to the other node.
    let mut conn = b.client();
    let seen = wait_until(Duration::from_secs(10), || {
        let spec: Option<Vec<redis::Value>> = redis::cmd("RL.RULE")
            .arg("GET")
            .arg("shared")
            .query(&mut conn)
            .ok();
        spec.filter(|s| format!("{s:?}").contains("TIER gold"))
    });
    assert!(
        seen.is_some(),
        "node b sees the rule written over HTTP on node a"
    );
}

#[test]
fn a_password_guards_every_route_but_healthz() {
    let (_server, port) = sluice_with_http(&["--requirepass", "s3cret"]);
    for (method, path) in [
        ("GET", "/rules"),
        ("GET", "/readyz"),
        ("GET", "/openapi.json"),
        ("GET", "/v1/auth?ip=1"),
    ] {
        let r = http(port, method, path, &[], None).unwrap();
        assert_eq!(r.status, 401, "{path}");
        assert_eq!(
            r.header("WWW-Authenticate"),
            Some("Basic realm=\"sluice\", Bearer")
        );
        let r = http(
            port,
            method,
            path,
            &[("Authorization", "Bearer wrong")],
            None,
        )
        .unwrap();
        assert_eq!(r.status, 401, "{path}");
        let r = http(
            port,
            method,
            path,
            &[("Authorization", "Bearer s3cret")],
            None,
        )
        .unwrap();
        assert_eq!(r.status, 200, "{path}");
    }
    let body = r#"{"key":"k","limit":1,"period":1}"#;
    let r = http(
        port,
        "POST",
        "/v1/check",
        &[("Content-Type", "application/json")],
        Some(body),
    )
    .unwrap();
    assert_eq!(r.status, 401);
    assert_eq!(
        http(port, "GET", "/healthz", &[], None).unwrap().status,
        200
    );
}

#[test]
fn bad_input_is_refused_and_the_server_stays_up() {
    let (server, port) = sluice_with_http(&[]);
    let json = [("Content-Type", "application/json")];
    let post = |headers: &[(&str, &str)], body: &str| {
        http(port, "POST", "/v1/check", headers, Some(body)).unwrap()
    };
    let r = post(&json, "{not json");
    assert_eq!(r.status, 400);
    assert!(r.json()["error"].as_str().unwrap().contains("bad JSON"));
    let r = post(&json, "[1,2]");
    assert_eq!(r.status, 400);
    let r = post(
        &json,
        r#"{"key":"k","limit":3,"period":"1m","colour":"red"}"#,
    );
    assert_eq!(r.status, 400);
    assert!(
        r.json()["error"]
            .as_str()
            .unwrap()
            .contains("unknown field `colour`")
    );
    let r = post(&json, r#"{"user":"a","colour":"red"}"#);
    assert!(
        r.json()["error"]
            .as_str()
            .unwrap()
            .contains("unknown field `colour`")
    );
    let r = post(&json, r#"{"key":"k","limit":-3,"period":"1m"}"#);
    assert_eq!(r.status, 400);
    let r = post(
        &[("Content-Type", "text/plain")],
        r#"{"key":"k","limit":3,"period":"1m"}"#,
    );
    assert_eq!(r.status, 415);
    let r = post(&[], r#"{"key":"k","limit":3,"period":"1m"}"#);
    assert_eq!(r.status, 415);
    let big = format!(r#"{{"user":"{}"}}"#, "x".repeat(100 << 10));
    let r = post(&json, &big);
    assert_eq!(r.status, 413);
    let long = format!(r#"{{"user":"{}"}}"#, "x".repeat(1000));
    let r = post(&json, &long);
    assert_eq!(r.status, 400);
    assert!(
        r.json()["error"]
            .as_str()
            .unwrap()
            .contains("USER is longer than 512")
    );
    assert_eq!(
        http(port, "GET", "/nowhere", &[], None).unwrap().status,
        404
    );
    assert_eq!(
        http(port, "GET", "/v1/auth?deny_status=abc", &[], None)
            .unwrap()
            .status,
        400
    );

    // Slow clients: half a request held open, a body promised and never sent.
    let mut slow = Vec::new();
    for _ in 0..20 {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(b"POST /v1/check HTTP/1.1\r\nHost: x\r\n")
            .unwrap();
        slow.push(s);
    }
    let mut promised = TcpStream::connect(("127.0.0.1", port)).unwrap();
    promised
        .write_all(b"POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
        .unwrap();
    // Thousands of connections at once.
    let many: Vec<TcpStream> = (0..2000)
        .filter_map(|_| TcpStream::connect(("127.0.0.1", port)).ok())
        .collect();
    assert!(many.len() >= 1000, "only {} connections opened", many.len());
    let r = post(&json, r#"{"key":"alive","limit":3,"period":"1m"}"#);
    assert_eq!(r.status, 200);
    drop(many);
    drop(slow);
    drop(promised);
    let mut conn = server.client();
    let pong: String = redis::cmd("PING").query(&mut conn).unwrap();
    assert_eq!(pong, "PONG");
    assert_eq!(
        http(port, "GET", "/healthz", &[], None).unwrap().status,
        200
    );
}

#[test]
fn a_request_head_that_never_completes_is_cut_off_within_the_bound() {
    let (_server, port) = sluice_with_http(&[]);
    // Half a head then silence, and a head trickled a byte every 500 ms (never idle), at once.
    let half = std::thread::spawn(move || sluice_tests::http_head_cut_off(port, false));
    let trickle = std::thread::spawn(move || sluice_tests::http_head_cut_off(port, true));
    // Meanwhile the server answers others.
    for _ in 0..5 {
        let r = http_json(
            port,
            "POST",
            "/v1/check",
            r#"{"key":"k","limit":9,"period":"1m"}"#,
        );
        assert_eq!(r.status, 200);
        std::thread::sleep(Duration::from_millis(200));
    }
    // The bound is 10 s (sluice_http::HEAD_TIMEOUT); the idle close would take 30 s.
    for (what, cut) in [("half", half), ("trickle", trickle)] {
        let took = cut
            .join()
            .unwrap()
            .unwrap_or_else(|| panic!("{what}: still open"));
        assert!(
            took >= Duration::from_secs(9) && took < Duration::from_secs(20),
            "{what}: closed after {took:?}"
        );
    }
    assert_eq!(
        http(port, "GET", "/healthz", &[], None).unwrap().status,
        200
    );
}

/// A response's JSON against a schema of the document: required fields present, each
/// property of the declared type (refs followed).
fn conforms(doc: &Value, schema: &Value, v: &Value) -> Result<(), String> {
    let schema = resolve(doc, schema);
    if let Some(one) = schema.get("oneOf") {
        return one
            .as_array()
            .unwrap()
            .iter()
            .find(|s| conforms(doc, s, v).is_ok())
            .map(|_| ())
            .ok_or_else(|| format!("{v} matches no oneOf"));
    }
    let types: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => return Ok(()),
    };
    let is = |t: &str| match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        _ => true,
    };
    if !types.iter().any(|t| is(t)) {
        return Err(format!("{v} is not {types:?}"));
    }
    if let Some(req) = schema.get("required").and_then(Value::as_array) {
        for r in req {
            let r = r.as_str().unwrap();
            if v.get(r).is_none() {
                return Err(format!("{v} lacks required {r}"));
            }
        }
    }
    if let (Some(props), Some(obj)) = (
        schema.get("properties").and_then(Value::as_object),
        v.as_object(),
    ) {
        for (k, val) in obj {
            match props.get(k) {
                Some(p) => conforms(doc, p, val)?,
                None => return Err(format!("{k} is not in the schema")),
            }
        }
    }
    if let (Some(items), Some(arr)) = (schema.get("items"), v.as_array()) {
        for val in arr {
            conforms(doc, items, val)?;
        }
    }
    Ok(())
}

fn resolve<'a>(doc: &'a Value, v: &'a Value) -> &'a Value {
    match v.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let mut at = doc;
            for part in r.trim_start_matches("#/").split('/') {
                at = &at[part];
            }
            resolve(doc, at)
        }
        None => v,
    }
}

#[test]
fn every_route_answers_as_the_openapi_document_says() {
    let (_server, port) = sluice_with_http(&[]);
    put_rule(port, "r1", r#"{"scope":"user","limit":1,"window":"1m"}"#);
    put_rule(port, "r1", r#"{"scope":"user","limit":2,"window":"1m"}"#);
    answers_as_documented(port);
}

#[test]
fn every_sidecar_route_answers_as_the_openapi_document_says() {
    let (node, node_http) = sluice_with_http(&[]);
    let port = sluice_tests::free_port();
    let upstream = format!("127.0.0.1:{}", node.port);
    let proxy = sluice_tests::Sluice::start_proxy(&[
        "--upstream",
        &upstream,
        "--http-port",
        &port.to_string(),
    ]);
    wait_until(Duration::from_secs(10), || {
        sluice_tests::http_get(port, "/healthz")
    })
    .expect("sidecar /healthz");
    put_rule(port, "r1", r#"{"scope":"user","limit":1,"window":"1m"}"#);
    put_rule(port, "r1", r#"{"scope":"user","limit":2,"window":"1m"}"#);
    // The sidecar learns r1 (its window goes into RateLimit-Policy).
    wait_until(Duration::from_secs(10), || {
        (sluice_tests::info_field(proxy.port, "rules_known") == Some(1)).then_some(())
    })
    .expect("the sidecar learned r1");
    // The same rule JSON as the node's, field for field.
    let get = |p| http(p, "GET", "/rules/r1", &[], None).unwrap().json();
    assert_eq!(get(port), get(node_http));
    assert_eq!(get(port)["window"], "1m");
    // A head that never completes is cut off here too, while every route answers.
    let half = std::thread::spawn(move || sluice_tests::http_head_cut_off(port, false));
    answers_as_documented(port);
    let took = half
        .join()
        .unwrap()
        .expect("the half head's connection closed");
    assert!(
        took >= Duration::from_secs(9) && took < Duration::from_secs(20),
        "closed after {took:?}"
    );
}

/// One request per documented (path, method, status) against the server on `port`, where rule
/// `r1` (scope user, limit 2, 1m) has two versions; each answer against the document.
fn answers_as_documented(port: u16) {
    let doc = http(port, "GET", "/openapi.json", &[], None)
        .unwrap()
        .json();
    assert_eq!(doc["openapi"], "3.1.0");
    // One request per documented (path, method, status) this test can produce.
    let cases: Vec<(&str, &str, &str, Option<&str>, u16)> = vec![
        (
            "/v1/check",
            "post",
            "/v1/check",
            Some(r#"{"key":"o","limit":1,"period":"1m"}"#),
            200,
        ),
        (
            "/v1/check",
            "post",
            "/v1/check",
            Some(r#"{"key":"o","limit":1,"period":"1m"}"#),
            429,
        ),
        (
            "/v1/check",
            "post",
            "/v1/check",
            Some(r#"{"user":"u1"}"#),
            200,
        ),
        ("/v1/check", "post", "/v1/check", Some(r#"{"bad":1}"#), 400),
        ("/v1/auth", "get", "/v1/auth?user=u2", None, 200),
        ("/v1/auth", "get", "/v1/auth?user=u2", None, 200),
        ("/v1/auth", "get", "/v1/auth?user=u2", None, 429),
        (
            "/v1/auth/{endpoint}",
            "get",
            "/v1/auth/api/x?foo=1",
            None,
            200,
        ),
        ("/rules", "get", "/rules", None, 200),
        ("/rules/{id}", "get", "/rules/r1", None, 200),
        ("/rules/{id}", "get", "/rules/nope", None, 404),
        (
            "/rules/{id}",
            "put",
            "/rules/r2",
            Some(r#"{"scope":"ip","limit":5,"window":"1s"}"#),
            200,
        ),
        (
            "/rules/{id}",
            "put",
            "/rules/r2",
            Some(r#"{"scope":"ip"}"#),
            400,
        ),
        ("/rules/{id}/history", "get", "/rules/r1/history", None, 200),
        (
            "/rules/{id}/rollback",
            "post",
            "/rules/r1/rollback",
            Some(r#"{"version":1}"#),
            200,
        ),
        ("/rules/{id}", "delete", "/rules/r2", None, 200),
        ("/rules/{id}", "delete", "/rules/r2", None, 404),
        ("/healthz", "get", "/healthz", None, 200),
        ("/v1/dashboard", "get", "/v1/dashboard", None, 200),
        ("/readyz", "get", "/readyz", None, 200),
        ("/openapi.json", "get", "/openapi.json", None, 200),
    ];
    let mut covered = std::collections::BTreeSet::new();
    for (doc_path, method, path, body, want) in cases {
        let headers: &[(&str, &str)] = if body.is_some() {
            &[("Content-Type", "application/json")]
        } else if path.starts_with("/v1/auth/") {
            // Envoy's form reads the subjects from headers only.
            &[("X-User-Id", "u3")]
        } else {
            &[]
        };
        let r = http(port, &method.to_uppercase(), path, headers, body).unwrap();
        assert_eq!(r.status, want, "{method} {path}: {r:?}");
        let op = &doc["paths"][doc_path][method];
        assert!(op.is_object(), "{method} {doc_path} is not in the document");
        let documented = resolve(&doc, &op["responses"][want.to_string()]);
        assert!(
            documented.is_object(),
            "{method} {doc_path} {want} is not documented"
        );
        if let Some(schema) = documented.pointer("/content/application~1json/schema") {
            conforms(&doc, schema, &r.json())
                .unwrap_or_else(|e| panic!("{method} {path} {want}: {e}"));
        }
        if let Some(headers) = documented.get("headers").and_then(Value::as_object) {
            for name in headers.keys() {
                assert!(
                    r.header(name).is_some(),
                    "{method} {path} {want}: no {name}"
                );
            }
        }
        covered.insert((doc_path, method));
    }
    // Every documented operation was exercised.
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for method in ops
            .as_object()
            .unwrap()
            .keys()
            .filter(|m| *m != "parameters")
        {
            assert!(
                covered.contains(&(path.as_str(), method.as_str())),
                "{method} {path} untested"
            );
        }
    }
}

#[test]
fn allow_in_a_cluster_answers_crossslot_when_buckets_span_slots() {
    use sluice_tests::{cluster_info_field, cluster_node, free_port, key_slot, sluice_cluster};
    let dir = TempDir::new("allow-cluster");
    let http_port = free_port();
    let p = http_port.to_string();
    let node = cluster_node(0, &dir.path().join("nodes.conf"), &["--http-port", &p]);
    let out = sluice_cluster(&["create", &format!("127.0.0.1:{}", node.port)]);
    assert!(out.status.success(), "{out:?}");
    let ok = wait_until(Duration::from_secs(10), || {
        (cluster_info_field(node.port, "cluster_state")? == "ok").then_some(())
    });
    assert!(ok.is_some());
    put_rule(
        http_port,
        "u",
        r#"{"scope":"user","limit":5,"window":"1m"}"#,
    );
    put_rule(http_port, "i", r#"{"scope":"ip","limit":9,"window":"1m"}"#);
    assert_ne!(key_slot(b"u:alice"), key_slot(b"i:10.0.0.1"));
    let mut c = server_client(node.port);
    let err = redis::cmd("RL.ALLOW")
        .arg(&["USER", "alice", "IP", "10.0.0.1"])
        .query::<Vec<redis::Value>>(&mut c)
        .unwrap_err();
    assert!(err.to_string().contains("hash to the same slot"), "{err}");
    // Over HTTP the same refusal is 421, naming it; nothing was consumed.
    let r = http_json(
        http_port,
        "POST",
        "/v1/check",
        r#"{"user":"alice","ip":"10.0.0.1"}"#,
    );
    assert_eq!(r.status, 421, "{r:?}");
    assert!(r.json()["error"].as_str().unwrap().contains("CROSSSLOT"));
    // Subjects with one hash tag share a slot: allowed, both buckets counted.
    let r = http_json(
        http_port,
        "POST",
        "/v1/check",
        r#"{"user":"{a}alice","ip":"{a}10.0.0.1"}"#,
    );
    assert_eq!((r.status, r.json()["rule"].as_str()), (200, Some("u")));
    let hit: Vec<i64> = redis::cmd("RL.HIT")
        .arg("i")
        .arg("{a}10.0.0.1")
        .arg("COST")
        .arg(0)
        .query(&mut c)
        .unwrap();
    assert_eq!(hit[2], 8);
}

fn server_client(port: u16) -> redis::Connection {
    redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .unwrap()
        .get_connection()
        .unwrap()
}

#[test]
fn a_check_another_node_owns_is_forwarded_to_it() {
    use sluice_tests::{cluster_slots, free_port, key_slot, owner_of, primaries, wait_cluster_ok};
    let dir = TempDir::new("http-forward");
    let https: Vec<u16> = (0..2).map(|_| free_port()).collect();
    let (p0, p1) = (https[0].to_string(), https[1].to_string());
    let nodes = primaries(&dir, "n", &[&["--http-port", &p0], &["--http-port", &p1]]);
    wait_cluster_ok(&nodes);
    let slots = cluster_slots(nodes[0].port).expect("CLUSTER SLOTS");
    let owner = |key: &str| owner_of(&slots, key_slot(key.as_bytes())).expect("owned");
    // A key and a user whose buckets node 1 owns, asked of node 0's HTTP port.
    let (there, here) = (nodes[1].port, nodes[0].port);
    let key = (0..1000)
        .map(|n| format!("k{n}"))
        .find(|k| owner(k) == there)
        .expect("a key on node 1");
    let user = (0..1000)
        .map(|n| format!("user{n}"))
        .find(|u| owner(&format!("u:{u}")) == there)
        .expect("a user on node 1");
    for port in [here, there] {
        let mut c = server_client(port);
        let _: i64 = redis::cmd("RL.RULE")
            .arg(&["SET", "u", "LIMIT", "2", "PERIOD", "1m", "SCOPE", "user"])
            .query(&mut c)
            .unwrap();
    }
    let body = format!(r#"{{"key":"{key}","limit":3,"period":"1m"}}"#);
    for left in ["2", "1"] {
        let r = http_json(https[0], "POST", "/v1/check", &body);
        assert_eq!(
            (r.status, r.header("RateLimit-Remaining")),
            (200, Some(left)),
            "{r:?}"
        );
    }
    // The bucket is node 1's: it has one left there.
    let mut c = server_client(there);
    assert_eq!(
        rl_check(&mut c, &[&key, "3", "1m", "COST", "0"]).unwrap()[2],
        1,
        "the forwarded checks counted on the owner"
    );
    let request = format!(r#"{{"user":"{user}"}}"#);
    for want in [200, 200, 429] {
        let r = http_json(https[0], "POST", "/v1/check", &request);
        assert_eq!(
            (r.status, r.json()["rule"].as_str()),
            (want, Some("u")),
            "{r:?}"
        );
    }
    let auth = http(https[0], "GET", &format!("/v1/auth?user={user}"), &[], None).unwrap();
    assert_eq!(auth.status, 429);
    assert!(auth.header("Retry-After").is_some());
    // Node 1 gone: node 0 answers the redirect it could not follow, 421, and keeps serving.
    let mut nodes = nodes;
    drop(nodes.pop());
    let r = http_json(https[0], "POST", "/v1/check", &body);
    assert_eq!(r.status, 421, "{r:?}");
    assert!(r.json()["error"].as_str().unwrap().contains("MOVED"));
    assert_eq!(
        http(https[0], "GET", "/healthz", &[], None).unwrap().status,
        200
    );
}
