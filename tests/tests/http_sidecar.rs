//! The sidecar's HTTP API (`sluice proxy --http-port`): the node's routes through the gateway
//! library, and each rule's fail mode once the node is gone.

use std::time::Duration;

use sluice_tests::{
    Sluice, free_port, http, http_get, http_json, info_field, sluice_with_http, wait_until,
};

#[test]
fn the_sidecar_serves_the_api_and_each_rules_fail_mode_without_the_node() {
    let (node, node_http) = sluice_with_http(&[]);
    let put = |port, id: &str, body: &str| http_json(port, "PUT", &format!("/rules/{id}"), body);
    let r = put(
        node_http,
        "per-ip",
        r#"{"scope":"ip","limit":2,"window":"1m","failmode":"closed"}"#,
    );
    assert_eq!(r.status, 200, "{r:?}");
    let port = free_port();
    let upstream = format!("127.0.0.1:{}", node.port);
    let proxy = Sluice::start_proxy(&["--upstream", &upstream, "--http-port", &port.to_string()]);
    wait_until(Duration::from_secs(10), || http_get(port, "/healthz")).expect("sidecar /healthz");
    // A rule written through the sidecar lands on the node.
    let r = put(
        port,
        "per-user",
        r#"{"scope":"user","limit":5,"window":"1m","failmode":"open"}"#,
    );
    assert_eq!(
        (r.status, r.json()["version"].as_i64()),
        (200, Some(1)),
        "{r:?}"
    );
    assert_eq!(
        http(node_http, "GET", "/rules/per-user", &[], None)
            .unwrap()
            .json()["scope"],
        "user"
    );
    let r = put(port, "bad", r#"{"scope":"org","limit":5,"window":"1m"}"#);
    assert_eq!(r.status, 400);
    assert!(
        r.json()["error"]
            .as_str()
            .unwrap()
            .contains("unknown SCOPE")
    );
    let r = http(port, "GET", "/rules/per-ip", &[], None).unwrap();
    assert_eq!((r.status, r.json()["limit"].as_i64()), (200, Some(2)));
    assert_eq!(
        http(port, "GET", "/rules", &[], None).unwrap().json()["rules"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(http(port, "GET", "/readyz", &[], None).unwrap().status, 200);
    // The sidecar learns both rules (for their fail modes).
    let learned = wait_until(Duration::from_secs(10), || {
        (info_field(proxy.port, "rules_known") == Some(2)).then_some(())
    });
    assert!(learned.is_some(), "the sidecar learned the rules");

    // Through the node: 200, 200, 429 with the headers.
    let auth = |q: &str| http(port, "GET", &format!("/v1/auth?{q}"), &[], None).unwrap();
    assert_eq!(auth("ip=10.0.0.1").status, 200);
    assert_eq!(auth("ip=10.0.0.1").header("RateLimit-Remaining"), Some("0"));
    let r = auth("ip=10.0.0.1");
    assert_eq!(r.status, 429);
    assert_eq!(r.header("RateLimit-Policy"), Some("\"per-ip\";q=2;w=60"));
    assert!(r.header("Retry-After").is_some());
    let body = r#"{"key":"k","limit":3,"period":"1m"}"#;
    let r = http_json(port, "POST", "/v1/check", body);
    assert_eq!(
        (r.status, r.header("RateLimit-Remaining")),
        (200, Some("2"))
    );
    let r = http_json(port, "POST", "/v1/check", r#"{"user":"carol"}"#);
    assert_eq!(
        (r.status, r.json()["rule"].as_str()),
        (200, Some("per-user"))
    );

    // The node goes: each rule's own fail mode.
    drop(node);
    let r = auth("ip=10.0.0.9");
    assert_eq!(
        (r.status, r.json()["rule"].as_str()),
        (429, Some("per-ip")),
        "fail closed: {r:?}"
    );
    let r = auth("user=bob");
    assert_eq!(
        (r.status, r.json()["rule"].as_str()),
        (200, Some("per-user")),
        "fail open: {r:?}"
    );
    let r = http(
        port,
        "GET",
        "/v1/auth?user=bob&ip=10.0.0.9&deny_status=403",
        &[],
        None,
    )
    .unwrap();
    assert_eq!(r.status, 403, "the closed rule decides: {r:?}");
    let r = http_json(port, "POST", "/v1/check", body);
    assert_eq!(r.status, 200, "the default fail mode, open: {r:?}");
    assert_eq!(http(port, "GET", "/readyz", &[], None).unwrap().status, 503);
    assert_eq!(
        http(port, "GET", "/rules/per-ip", &[], None)
            .unwrap()
            .status,
        503
    );
    assert_eq!(
        http(port, "GET", "/healthz", &[], None).unwrap().status,
        200
    );
}

#[test]
fn the_sidecar_splits_a_request_check_across_slots_dry_first() {
    use sluice_tests::{TempDir, cluster_info_field, cluster_node, key_slot, sluice_cluster};
    let dir = TempDir::new("sidecar-split");
    let node_http = free_port();
    let node = cluster_node(
        0,
        &dir.path().join("nodes.conf"),
        &["--http-port", &node_http.to_string()],
    );
    let out = sluice_cluster(&["create", &format!("127.0.0.1:{}", node.port)]);
    assert!(out.status.success(), "{out:?}");
    let ok = wait_until(Duration::from_secs(10), || {
        (cluster_info_field(node.port, "cluster_state")? == "ok").then_some(())
    });
    assert!(ok.is_some());
    let put = |id: &str, body: &str| http_json(node_http, "PUT", &format!("/rules/{id}"), body);
    assert_eq!(
        put("u", r#"{"scope":"user","limit":2,"window":"1m"}"#).status,
        200
    );
    assert_eq!(
        put("i", r#"{"scope":"ip","limit":5,"window":"1m"}"#).status,
        200
    );
    assert_ne!(key_slot(b"u:alice"), key_slot(b"i:10.0.0.1"));
    let port = free_port();
    let upstream = format!("127.0.0.1:{}", node.port);
    let proxy = Sluice::start_proxy(&["--upstream", &upstream, "--http-port", &port.to_string()]);
    let learned = wait_until(Duration::from_secs(10), || {
        (info_field(proxy.port, "rules_known") == Some(2)).then_some(())
    });
    assert!(learned.is_some(), "the sidecar learned the rules");
    // The node alone refuses the call: its buckets span two slots.
    let body = r#"{"user":"alice","ip":"10.0.0.1"}"#;
    assert_eq!(http_json(node_http, "POST", "/v1/check", body).status, 421);
    // The sidecar splits it: both buckets count, the tighter rule answers.
    let r = http_json(port, "POST", "/v1/check", body);
    assert_eq!(
        (
            r.status,
            r.json()["rule"].as_str(),
            r.json()["remaining"].as_i64()
        ),
        (200, Some("u"), Some(1)),
        "{r:?}"
    );
    let r = http_json(port, "POST", "/v1/check", body);
    assert_eq!(
        (r.status, r.json()["remaining"].as_i64()),
        (200, Some(0)),
        "{r:?}"
    );
    let r = http_json(port, "POST", "/v1/check", body);
    assert_eq!(
        (r.status, r.json()["rule"].as_str()),
        (429, Some("u")),
        "{r:?}"
    );
    assert!(r.header("Retry-After").is_some());
    // The denial was found by the dry run: the ip bucket paid for the two allowed checks only.
    let mut c = node.client();
    let hit: Vec<i64> = redis::cmd("RL.HIT")
        .arg("i")
        .arg("10.0.0.1")
        .arg("COST")
        .arg(0)
        .query(&mut c)
        .unwrap();
    assert_eq!(hit[2], 3);
}
