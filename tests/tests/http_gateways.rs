//! Real gateways in front of the HTTP API: nginx (`auth_request` to `GET /v1/auth`, the
//! shipped examples/nginx/nginx.conf) serving a static site, 200 until the limit, then 429 with
//! the rate limit headers, and the same bucket seen through `redis-cli`; `GET /` charged once;
//! and the example run as docs/gateways.md tells a user to run it (examples/nginx/run.sh). Traefik and Envoy are
//! not packaged here: their shipped configs are parsed and their key fields checked, and the
//! request Envoy's ext_authz makes (`path_prefix`) is made by hand.

use std::process::Command;
use std::time::Duration;

use serde_yaml_ng::Value as Yaml;
use sluice_tests::{
    Nginx, TempDir, free_port, have_tool, http, http_json, redis_cli, sluice_with_http, wait_until,
};

fn example(path: &str) -> String {
    let path = format!("{}/../examples/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// nginx in the foreground, in a process group of its own (its PID), stopped by that group
/// when dropped: killing the master alone leaves its worker running, adopted by init.
#[test]
fn nginx_auth_request_forwards_until_the_limit_then_answers_429_with_headers() {
    if !have_tool("nginx") {
        return;
    }
    let (server, http_port) = sluice_with_http(&[]);
    let r = http_json(
        http_port,
        "PUT",
        "/rules/per-ip",
        r#"{"scope":"ip","limit":3,"window":"1m"}"#,
    );
    assert_eq!(r.status, 200, "{r:?}");
    let dir = TempDir::new("nginx");
    let root = dir.path().join("site");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("index.html"), "hello from the backend\n").unwrap();
    let listen = free_port();
    let _nginx = Nginx::example(listen, http_port, &root, &dir);
    let first = wait_until(Duration::from_secs(10), || {
        http(listen, "GET", "/index.html", &[], None)
    })
    .expect("nginx answers");
    let mut replies = vec![first];
    for _ in 0..3 {
        replies.push(http(listen, "GET", "/index.html", &[], None).unwrap());
    }
    for (i, r) in replies[..3].iter().enumerate() {
        assert_eq!(r.status, 200, "request {i}: {r:?}");
        assert_eq!(r.body, "hello from the backend\n");
        assert_eq!(r.header("RateLimit-Limit"), Some("3"));
        assert_eq!(
            r.header("RateLimit-Remaining"),
            Some((2 - i).to_string().as_str())
        );
        assert_eq!(r.header("RateLimit-Policy"), Some("\"per-ip\";q=3;w=60"));
        assert!(r.header("Retry-After").is_none());
    }
    let denied = &replies[3];
    assert_eq!(denied.status, 429, "{denied:?}");
    assert_eq!(denied.header("RateLimit-Remaining"), Some("0"));
    assert_eq!(denied.header("RateLimit"), Some("\"per-ip\";r=0;t=60"));
    let retry: u64 = denied.header("Retry-After").unwrap().parse().unwrap();
    assert!((19..=20).contains(&retry), "{retry}");
    assert!(!denied.body.contains("hello"));
    // The same bucket over RESP: rule per-ip, subject nginx's $remote_addr.
    let out = redis_cli(server.port, &["RL.HIT", "per-ip", "127.0.0.1", "COST", "0"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let fields: Vec<&str> = text.lines().collect();
    assert_eq!(fields[..3], ["1", "3", "0"], "{text}");
    let out = redis_cli(server.port, &["PTTL", "per-ip:127.0.0.1"]);
    let pttl: i64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert!((50_000..=60_000).contains(&pttl), "{pttl}");
}

/// `GET /` is one client request, charged once: nginx's `index` would redirect it internally
/// to /index.html and run auth_request a second time; the example serves the index file from
/// the same location instead. Directories below the root too.
#[test]
fn nginx_charges_get_slash_once() {
    if !have_tool("nginx") {
        return;
    }
    let (_server, http_port) = sluice_with_http(&[]);
    let r = http_json(
        http_port,
        "PUT",
        "/rules/per-ip",
        r#"{"scope":"ip","limit":5,"window":"1m"}"#,
    );
    assert_eq!(r.status, 200, "{r:?}");
    let dir = TempDir::new("nginx-index");
    let root = dir.path().join("site");
    std::fs::create_dir_all(root.join("docs")).unwrap();
    std::fs::write(root.join("index.html"), "hello from the backend\n").unwrap();
    std::fs::write(root.join("docs/index.html"), "the docs\n").unwrap();
    let listen = free_port();
    let _nginx = Nginx::example(listen, http_port, &root, &dir);
    let first = wait_until(Duration::from_secs(10), || {
        http(listen, "GET", "/", &[], None)
    })
    .expect("nginx answers");
    let mut replies = vec![first];
    for path in ["/index.html", "/docs/", "/docs/index.html"] {
        replies.push(http(listen, "GET", path, &[], None).unwrap());
    }
    let bodies = [
        "hello from the backend\n",
        "hello from the backend\n",
        "the docs\n",
        "the docs\n",
    ];
    for (i, (r, body)) in replies.iter().zip(bodies).enumerate() {
        assert_eq!(r.status, 200, "request {i}: {r:?}");
        assert_eq!(r.body, body, "request {i}");
        assert_eq!(
            r.header("RateLimit-Remaining"),
            Some((4 - i).to_string().as_str()),
            "request {i}: {r:?}"
        );
    }
    let r = http(listen, "GET", "/", &[], None).unwrap();
    assert_eq!(r.header("content-type"), Some("text/html"));
    assert_eq!(r.header("RateLimit-Remaining"), Some("0"));
    // A directory without its slash is redirected to it, unchecked.
    let r = http(listen, "GET", "/docs", &[], None).unwrap();
    assert_eq!(r.status, 301, "{r:?}");
    assert!(r.header("location").unwrap().ends_with("/docs/"), "{r:?}");
    assert!(r.header("RateLimit-Remaining").is_none(), "{r:?}");
}

/// The nginx example runs as docs/gateways.md tells a user to run it
/// (`examples/nginx/run.sh`, which creates the rule, then `GET /` until a 429): that page's
/// runnable blocks, run by the docs check as CI runs it.
#[test]
fn the_nginx_example_runs_as_the_docs_say() {
    if !have_tool("nginx") || !have_tool("curl") || !have_tool("redis-cli") {
        return;
    }
    let root = format!("{}/..", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("scripts/docs-check.sh")
        .arg("docs/gateways.md")
        .current_dir(&root)
        .env("SLUICE_BIN", sluice_tests::binary())
        .output()
        .expect("scripts/docs-check.sh");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains(" 0 failed"), "{text}");
}

#[test]
fn envoy_ext_authz_requests_carry_the_path_after_the_prefix() {
    let (_server, port) = sluice_with_http(&[]);
    http_json(
        port,
        "PUT",
        "/rules/api",
        r#"{"scope":"user","limit":1,"window":"1m","route":"/api"}"#,
    );
    let user = [("X-User-Id", "u1")];
    let r = http(port, "GET", "/v1/auth/api/orders?page=2", &user, None).unwrap();
    assert_eq!((r.status, r.json()["rule"].as_str()), (200, Some("api")));
    let r = http(port, "GET", "/v1/auth/api/orders", &user, None).unwrap();
    assert_eq!(r.status, 429);
    assert!(r.header("Retry-After").is_some());
    // Outside the rule's route.
    let r = http(port, "GET", "/v1/auth/web/home", &user, None).unwrap();
    assert_eq!(r.status, 200);
    assert!(r.header("RateLimit-Limit").is_none());
}

fn at<'a>(v: &'a Yaml, path: &[&str]) -> &'a Yaml {
    path.iter().fold(v, |v, k| match k.parse::<usize>() {
        Ok(i) => &v[i],
        Err(_) => &v[*k],
    })
}

fn strings(v: &Yaml) -> Vec<String> {
    v.as_sequence()
        .unwrap_or_else(|| panic!("not a list: {v:?}"))
        .iter()
        .map(|s| match s {
            Yaml::String(s) => s.clone(),
            Yaml::Mapping(_) => s["exact"].as_str().unwrap().to_string(),
            other => panic!("{other:?}"),
        })
        .collect()
}

#[test]
fn traefik_and_envoy_examples_parse_and_point_at_v1_auth() {
    let traefik: Yaml =
        serde_yaml_ng::from_str(&example("traefik/dynamic.yml")).expect("Traefik YAML");
    let auth = at(
        &traefik,
        &["http", "middlewares", "sluice-limit", "forwardAuth"],
    );
    assert_eq!(
        auth["address"].as_str(),
        Some("http://127.0.0.1:8080/v1/auth")
    );
    assert_eq!(auth["trustForwardHeader"].as_bool(), Some(false));
    let passed = strings(&auth["authResponseHeaders"]);
    for h in [
        "RateLimit-Limit",
        "RateLimit-Remaining",
        "RateLimit-Reset",
        "RateLimit-Policy",
        "RateLimit",
    ] {
        assert!(passed.iter().any(|p| p == h), "{h} not passed on");
    }
    // Exactly the headers Sluice is told to trust besides Traefik's own X-Forwarded-*, each
    // removed from the client's request by a middleware before the check.
    let passed = strings(&auth["authRequestHeaders"]);
    assert_eq!(passed, ["X-User-Id", "X-Tier"]);
    let strip = at(
        &traefik,
        &[
            "http",
            "middlewares",
            "sluice-strip",
            "headers",
            "customRequestHeaders",
        ],
    );
    for h in &passed {
        assert_eq!(strip[h.as_str()].as_str(), Some(""), "{h} is not stripped");
    }
    let router = at(&traefik, &["http", "routers", "app"]);
    let chain = strings(&router["middlewares"]);
    assert_eq!(chain.first().map(String::as_str), Some("sluice-strip"));
    assert_eq!(chain.last().map(String::as_str), Some("sluice-limit"));
    assert!(
        at(
            &traefik,
            &["http", "services", router["service"].as_str().unwrap()]
        )
        .is_mapping()
    );

    let envoy: Yaml = serde_yaml_ng::from_str(&example("envoy/envoy.yaml")).expect("Envoy YAML");
    let hcm = at(
        &envoy,
        &[
            "static_resources",
            "listeners",
            "0",
            "filter_chains",
            "0",
            "filters",
            "0",
            "typed_config",
        ],
    );
    assert_eq!(hcm["normalize_path"].as_bool(), Some(true));
    assert_eq!(hcm["merge_slashes"].as_bool(), Some(true));
    let filters = hcm["http_filters"].as_sequence().unwrap();
    let names: Vec<&str> = filters
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    let authz_at = names
        .iter()
        .position(|n| *n == "envoy.filters.http.ext_authz")
        .expect("an ext_authz filter");
    assert_eq!(names.last(), Some(&"envoy.filters.http.router"));
    // The client's x-user-id and x-tier are removed before anything reads them.
    assert_eq!(names[0], "envoy.filters.http.header_mutation");
    let removed: Vec<&str> = filters[0]["typed_config"]["mutations"]["request_mutations"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|m| m["remove"].as_str())
        .collect();
    assert!(authz_at > 0);
    let authz = &filters[authz_at]["typed_config"];
    assert_eq!(
        authz["@type"].as_str(),
        Some("type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz")
    );
    let service = &authz["http_service"];
    assert_eq!(service["path_prefix"].as_str(), Some("/v1/auth"));
    let cluster = service["server_uri"]["cluster"].as_str().unwrap();
    let clusters = at(&envoy, &["static_resources", "clusters"])
        .as_sequence()
        .unwrap();
    let sluice = clusters
        .iter()
        .find(|c| c["name"].as_str() == Some(cluster))
        .expect("the ext_authz cluster is defined");
    let port = at(
        sluice,
        &[
            "load_assignment",
            "endpoints",
            "0",
            "lb_endpoints",
            "0",
            "endpoint",
            "address",
            "socket_address",
            "port_value",
        ],
    );
    assert_eq!(port.as_u64(), Some(8080));
    let to_client =
        strings(&service["authorization_response"]["allowed_client_headers"]["patterns"]);
    for h in [
        "ratelimit-limit",
        "ratelimit-remaining",
        "ratelimit-reset",
        "ratelimit-policy",
        "ratelimit",
        "retry-after",
    ] {
        assert!(
            to_client.iter().any(|p| p == h),
            "{h} not sent to the client on a denial"
        );
    }
    let on_success = strings(
        &service["authorization_response"]["allowed_client_headers_on_success"]["patterns"],
    );
    assert!(on_success.contains(&"ratelimit-remaining".to_string()));
    let asked = strings(&service["authorization_request"]["allowed_headers"]["patterns"]);
    assert_eq!(asked, ["x-forwarded-for", "x-user-id", "x-tier"]);
    for h in &asked[1..] {
        assert!(
            removed.contains(&h.as_str()),
            "the client's {h} reaches Sluice"
        );
    }
}

#[test]
fn the_nginx_example_sets_every_header_sluice_trusts_by_default() {
    let help = Command::new(sluice_tests::binary())
        .arg("--help")
        .output()
        .expect("sluice --help");
    let help = String::from_utf8_lossy(&help.stdout);
    let at = help.find("--http-trusted-headers").expect("the flag");
    let default = help[at..]
        .split("[default: ")
        .nth(1)
        .and_then(|d| d.split(']').next())
        .expect("its default");
    let conf = example("nginx/nginx.conf");
    let location = conf
        .split("location = /_sluice {")
        .nth(1)
        .and_then(|l| l.split('}').next())
        .expect("the subrequest's location");
    let set: Vec<&str> = location
        .lines()
        .filter_map(|l| l.trim().strip_prefix("proxy_set_header "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for h in default.split(',') {
        assert!(
            set.contains(&h),
            "nginx passes the client's {h} on: {set:?}"
        );
    }
}
