//! The live page (`/dashboard`) in a real browser: headless Chromium loads it from a node with a
//! password while one key is hammered far past its rule among thousands of quiet keys, and the
//! rendered DOM shows that key first among the denied and the rule's denied rate above zero;
//! loaded without the password, the page shows no data and `/v1/dashboard` answers `401`.
//! `/v1/dashboard` also: runs each part as the request's user (ACL), finds the key through a
//! sidecar, shows a whole cluster from one node (every node's memory, each replica's lag, a
//! key hammered on another primary) and each region's share of a GLOBAL rule.
//!
//! The screenshot docs/http.md shows is this test's, saved into the repository by
//! `SLUICE_DASHBOARD_SCREENSHOT=$PWD/docs/img/dashboard.png cargo test -p sluice-tests --test
//! dashboard`; with that variable the traffic also runs over four 10 s steps, so the charts
//! have a shape.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use sluice_tests::{Sluice, TempDir, free_port, have_tool, http, http_get, wait_until};

const PASSWORD: &str = "s3cret";
const HAMMERED: &str = "tenant:4711";
/// Its bucket under rule `api`, the key `RL.TOP` names.
const BUCKET: &str = "api:tenant:4711";
const QUIET_KEYS: usize = 3000;

/// A node with `--http-port` and a password; its HTTP port.
fn node() -> (Sluice, u16) {
    let port = free_port();
    let server = Sluice::start_with(&["--http-port", &port.to_string(), "--requirepass", PASSWORD]);
    wait_until(Duration::from_secs(10), || http_get(port, "/healthz"))
        .expect("GET /healthz answers 200");
    (server, port)
}

fn connect(server: &Sluice) -> redis::Connection {
    redis::Client::open(format!("redis://:{PASSWORD}@127.0.0.1:{}/", server.port))
        .and_then(|c| c.get_connection())
        .expect("connect with the password")
}

/// The rules, then one round of traffic: every quiet key checked once, the hammered key 600
/// times against its limit of 20, and a shadow rule's users past theirs.
fn rules(conn: &mut redis::Connection) {
    for rule in [
        &["api", "SCOPE", "key", "LIMIT", "20", "WINDOW", "1m"][..],
        &[
            "search", "SCOPE", "user", "LIMIT", "30", "WINDOW", "1m", "SHADOW",
        ],
    ] {
        let _: i64 = redis::cmd("RL.RULE")
            .arg("SET")
            .arg(rule)
            .query(conn)
            .expect("RL.RULE SET");
    }
}

/// Checks under `api` until `RL.RATES` lists one: a node counts its steps from its first
/// snapshot of the check counters on (taken 100 ms after it starts, or later while that thread
/// is busy), so a check made before falls in no step.
fn rates_started(conn: &mut redis::Connection, port: u16) {
    let bearer = format!("Bearer {PASSWORD}");
    let mut n = 0;
    wait_until(Duration::from_secs(10), || {
        n += 1;
        // A key each time: none is ever denied.
        let _: redis::Value = redis::cmd("RL.ALLOW")
            .arg("KEY")
            .arg(format!("warm-up:{n}"))
            .query(conn)
            .expect("RL.ALLOW");
        let (_, d) = dashboard(port, Some(&bearer));
        let rules = d["rules_rates"]["rules"].as_array()?.clone();
        rules.iter().any(|r| r["rule"] == "api").then_some(())
    })
    .expect("RL.RATES counts a check");
}

fn round(conn: &mut redis::Connection, round: usize) {
    let mut p = redis::pipe();
    for i in 0..QUIET_KEYS {
        p.cmd("RL.ALLOW")
            .arg("KEY")
            .arg(format!("quiet:{round}:{i}"))
            .ignore();
    }
    for _ in 0..600 {
        p.cmd("RL.ALLOW").arg("KEY").arg(HAMMERED).ignore();
    }
    for i in 0..400 {
        p.cmd("RL.ALLOW")
            .arg("USER")
            .arg(format!("user:{}", i % 8))
            .ignore();
    }
    p.query::<()>(conn).expect("the traffic");
}

fn dashboard(port: u16, auth: Option<&str>) -> (u16, Value) {
    let header = auth.map(|a| ("Authorization", a));
    let r = http(port, "GET", "/v1/dashboard", header.as_slice(), None)
        .expect("GET /v1/dashboard answers");
    let status = r.status;
    (status, r.json())
}

/// Waits until `/v1/dashboard` names the hammered key's bucket first among the denied.
fn hammered_first(port: u16) -> Value {
    let bearer = format!("Bearer {PASSWORD}");
    wait_until(Duration::from_secs(10), || {
        let (status, d) = dashboard(port, Some(&bearer));
        (status == 200 && d["top_denied"][0]["key"] == BUCKET).then_some(d)
    })
    .unwrap_or_else(|| {
        let (_, d) = dashboard(port, Some(&bearer));
        panic!("{BUCKET} is not first among the denied: {d:#}")
    })
}

/// Headless Chromium on `url`, with its own profile, within 60 s; its stdout.
fn chromium(profile: &TempDir, url: &str, extra: &[&str]) -> String {
    let out = Command::new("timeout")
        .args([
            "60",
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
        ])
        .args(["--hide-scrollbars", "--virtual-time-budget=4000"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(url)
        .output()
        .expect("run chromium");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The text of the first element after `marker` in `dom`.
fn text_after<'a>(dom: &'a str, marker: &str) -> Option<&'a str> {
    let at = dom.find(marker)? + marker.len();
    let rest = &dom[at..];
    let start = rest.find('>')? + 1;
    let end = rest[start..].find('<')?;
    Some(&rest[start..start + end])
}

#[test]
fn the_page_shows_the_hammered_key_and_the_rules_denials_only_with_the_password() {
    if !have_tool("chromium") {
        return;
    }
    let (server, port) = node();
    let mut conn = connect(&server);
    rules(&mut conn);
    rates_started(&mut conn, port);
    let screenshot_to = std::env::var("SLUICE_DASHBOARD_SCREENSHOT").ok();
    let rounds = if screenshot_to.is_some() { 4 } else { 1 };
    for r in 0..rounds {
        if r > 0 {
            // The next round in the next 10 s step: the charts are about real time.
            let bearer = format!("Bearer {PASSWORD}");
            let end = |d: &Value| d["rules_rates"]["end_ms"].as_u64();
            let before = end(&dashboard(port, Some(&bearer)).1);
            wait_until(Duration::from_secs(15), || {
                (end(&dashboard(port, Some(&bearer)).1) != before).then_some(())
            })
            .expect("RL.RATES moves to the next step");
        }
        round(&mut conn, r);
    }

    // The JSON first: the key, and the rule's denials in its steps.
    let d = hammered_first(port);
    let api = d["rules_rates"]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["rule"] == "api")
        .unwrap_or_else(|| panic!("no rates for api: {d:#}"));
    let denied: u64 = api["denied"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_u64)
        .sum();
    // 600 checks a round against a bucket of 20: 580 denied in the first, at most 600 after
    // (what refilled between rounds is allowed).
    let rounds = rounds as u64;
    assert!((580 * rounds..=600 * rounds).contains(&denied), "{api}");
    assert!(d["top_denied"][0]["count"].as_u64().unwrap() >= 580);
    assert_eq!(d["top_denied"][0]["rule"], "api");
    assert!(d["rules"].as_array().unwrap().len() == 2, "{d:#}");
    assert_eq!(d["nodes"][0]["myself"], true);
    assert!(d["errors"].as_object().unwrap().is_empty(), "{d:#}");

    // The page in the browser, the password in the URL fragment.
    let profile = TempDir::new("dashboard-chromium");
    let url = format!("http://127.0.0.1:{port}/dashboard");
    let dom = chromium(
        &profile,
        &format!("{url}#password={PASSWORD}"),
        &["--dump-dom"],
    );
    let top = &dom[dom.find("id=\"top-denied\"").expect("the top denied table")..];
    let first_key = text_after(top, "class=\"key\"").expect("a denied key");
    assert_eq!(first_key, BUCKET, "{dom}");
    let rate: f64 = text_after(&dom, "data-rule=\"api\" data-series=\"denied\"")
        .unwrap_or_else(|| panic!("no denied rate for api: {dom}"))
        .parse()
        .unwrap();
    assert!(rate > 0.0, "api's denied rate {rate}");
    assert!(dom.contains("class=\"ok\">live"), "{dom}");

    let shots = TempDir::new("dashboard-shot");
    let png = shots.path().join("dashboard.png");
    for path in std::iter::once(png.display().to_string()).chain(screenshot_to) {
        chromium(
            &profile,
            &format!("{url}#password={PASSWORD}"),
            &[&format!("--screenshot={path}"), "--window-size=1280,900"],
        );
        let bytes = std::fs::read(&path).expect("the screenshot");
        assert!(bytes.starts_with(b"\x89PNG"), "{path} is not a PNG");
    }

    // Without the password: the page (served to anyone) holds no data, and loads none.
    let page = http(port, "GET", "/dashboard", &[], None).unwrap();
    assert_eq!(page.status, 200);
    assert!(!page.body.contains(HAMMERED));
    let dom = chromium(&profile, &url, &["--dump-dom"]);
    assert!(!dom.contains(HAMMERED), "{dom}");
    assert!(!dom.contains("data-rule=\"api\""), "{dom}");
    assert!(dom.contains("password needed"), "{dom}");
    for auth in [None, Some("Bearer wrong")] {
        let (status, body) = dashboard(port, auth);
        assert_eq!(status, 401, "{auth:?}");
        assert!(!body.to_string().contains(HAMMERED));
    }
}

/// Each part runs as the request's user: one the ACL refuses `RL.TOP` (it shows keys) sees the
/// rest and no key; one refused every part gets `403`.
#[test]
fn a_user_refused_rl_top_sees_the_rates_but_no_key() {
    const VIEWER: &str = "Basic dmlld2VyOnZwdw=="; // viewer:vpw
    const NOBODY: &str = "Basic bm9ib2R5Om5wdw=="; // nobody:npw
    let (server, port) = node();
    let mut conn = connect(&server);
    rules(&mut conn);
    rates_started(&mut conn, port);
    round(&mut conn, 0);
    hammered_first(port);
    for user in [
        &["viewer", "on", ">vpw", "+@all", "-rl.top"][..],
        &["nobody", "on", ">npw", "+ping"],
    ] {
        let _: () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg(user)
            .query(&mut conn)
            .expect("ACL SETUSER");
    }
    let (status, d) = dashboard(port, Some(VIEWER));
    assert_eq!(status, 200, "{d:#}");
    for part in ["top_denied", "top_allowed"] {
        let refused = d["errors"][part].as_str().unwrap_or_default();
        assert!(refused.starts_with("NOPERM"), "{d:#}");
        assert!(d[part].as_array().unwrap().is_empty());
    }
    assert!(!d.to_string().contains(HAMMERED), "{d:#}");
    assert!(!d["rules_rates"]["rules"].as_array().unwrap().is_empty());
    assert_eq!(d["rules"].as_array().unwrap().len(), 2);
    let (status, d) = dashboard(port, Some(NOBODY));
    assert_eq!(status, 403, "{d:#}");
    assert!(!d.to_string().contains(HAMMERED));
}

#[test]
fn the_sidecar_merges_what_the_node_saw() {
    let (server, node_http) = node();
    let mut conn = connect(&server);
    rules(&mut conn);
    rates_started(&mut conn, node_http);
    round(&mut conn, 0);
    hammered_first(node_http);
    let port = free_port();
    let upstream = format!("127.0.0.1:{}", server.port);
    let _proxy = Sluice::start_proxy(&[
        "--upstream",
        &upstream,
        "--upstream-password",
        PASSWORD,
        "--requirepass",
        "sidecar-pass",
        "--http-port",
        &port.to_string(),
    ]);
    wait_until(Duration::from_secs(10), || http_get(port, "/healthz")).expect("sidecar /healthz");
    assert_eq!(dashboard(port, None).0, 401);
    // Until its connection to the node is up, a part is "no node answered".
    let d = wait_until(Duration::from_secs(10), || {
        let (status, d) = dashboard(port, Some("Bearer sidecar-pass"));
        (status == 200 && d["top_denied"][0]["key"] == BUCKET).then_some(d)
    })
    .unwrap_or_else(|| panic!("{:#}", dashboard(port, Some("Bearer sidecar-pass")).1));
    assert_eq!(d["rules"].as_array().unwrap().len(), 2, "{d:#}");
    assert_eq!(d["nodes"].as_array().unwrap().len(), 1, "{d:#}");
    let page = http(port, "GET", "/dashboard", &[], None).unwrap();
    assert_eq!(page.status, 200);
    assert!(page.body.contains("/v1/dashboard"));
}

/// In a cluster every node is listed with its slots and role, its memory from its own `INFO`
/// (the node behind the page asks the others), and each replica's lag behind its primary; the
/// top keys and rates are the whole cluster's: a key hammered on the other primary comes first,
/// on the node's page and on a sidecar's in front of the cluster.
#[test]
fn in_a_cluster_every_node_shows_its_memory_and_the_top_keys_are_the_clusters() {
    use sluice_tests::{cluster_node, cluster_slots, key_slot, owner_of, sluice_cluster};
    let dir = TempDir::new("dashboard-cluster");
    let http_port = free_port();
    let nodes: Vec<Sluice> = (0..4)
        .map(|i| {
            let config = dir.path().join(format!("nodes-{i}.conf"));
            let p = http_port.to_string();
            let http: &[&str] = if i == 0 { &["--http-port", &p] } else { &[] };
            cluster_node(0, &config, http)
        })
        .collect();
    let addrs: Vec<String> = nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port))
        .collect();
    // The first two nodes are the primaries, the others their replicas.
    let mut args = vec!["create", "--replicas", "1"];
    args.extend(addrs.iter().map(String::as_str));
    let out = sluice_cluster(&args);
    assert!(out.status.success(), "{out:?}");
    sluice_tests::wait_cluster_ok(&nodes);

    // Plain checks, each on its key's owner: quiet keys everywhere, one key of the other
    // primary's hammered.
    let slots = cluster_slots(nodes[0].port).expect("CLUSTER SLOTS");
    let owner = |key: &str| owner_of(&slots, key_slot(key.as_bytes())).expect("an owner");
    let hot = (0..)
        .map(|i| format!("hot:{i}"))
        .find(|k| owner(k) == nodes[1].port)
        .unwrap();
    let mut conns: Vec<(u16, redis::Connection)> =
        nodes[..2].iter().map(|n| (n.port, n.client())).collect();
    let mut pipes = [redis::pipe(), redis::pipe()];
    for i in 0..2000 {
        let key = format!("quiet:{i}");
        let at = usize::from(owner(&key) == nodes[1].port);
        pipes[at]
            .cmd("RL.CHECK")
            .arg(&[&key, "100", "60"][..])
            .ignore();
    }
    for _ in 0..300 {
        pipes[1]
            .cmd("RL.CHECK")
            .arg(&[&hot, "5", "60"][..])
            .ignore();
    }
    for (pipe, (_, conn)) in pipes.iter().zip(&mut conns) {
        pipe.query::<()>(conn).expect("the traffic");
    }

    let d = wait_until(Duration::from_secs(10), || {
        let (status, d) = dashboard(http_port, None);
        let rows = d["nodes"].as_array()?;
        let replicas_in_step = rows
            .iter()
            .filter(|n| n["role"] == "replica")
            .all(|n| n["lag_bytes"].is_u64() && n["link"] == "up");
        let hot_first = d["top_denied"][0]["key"] == hot.as_str();
        (status == 200 && rows.len() == 4 && replicas_in_step && hot_first).then_some(d)
    })
    .unwrap_or_else(|| panic!("{:#}", dashboard(http_port, None).1));
    let rows = d["nodes"].as_array().unwrap();
    for addr in &addrs {
        let row = rows
            .iter()
            .find(|n| n["addr"] == addr.as_str())
            .unwrap_or_else(|| panic!("{addr} missing: {d:#}"));
        assert!(row["used_memory"].as_u64().unwrap() > 0, "{row}");
        assert!(row["error"].is_null(), "{row}");
        match row["role"].as_str().unwrap() {
            "primary" => assert!(!row["slots"].as_str().unwrap().is_empty()),
            _ => assert!(row["primary"].is_string(), "{row}"),
        }
    }
    assert_eq!(rows.iter().filter(|n| n["myself"] == true).count(), 1);
    assert_eq!(d["top_denied"][0]["count"], 295, "{d:#}");
    assert!(d["errors"].as_object().unwrap().is_empty(), "{d:#}");

    // A sidecar given two of the nodes asks both primaries.
    let port = free_port();
    let _proxy = Sluice::start_proxy(&[
        "--upstream",
        &format!("{},{}", addrs[0], addrs[1]),
        "--http-port",
        &port.to_string(),
    ]);
    let d = wait_until(Duration::from_secs(10), || {
        let (status, d) = dashboard(port, None);
        (status == 200 && d["top_denied"][0]["key"] == hot.as_str()).then_some(d)
    })
    .unwrap_or_else(|| panic!("{:#}", dashboard(port, None).1));
    assert_eq!(d["top_denied"][0]["count"], 295, "{d:#}");
    assert_eq!(d["nodes"].as_array().unwrap().len(), 4, "{d:#}");
}

/// A GLOBAL rule shows each region's share, as `RL.REGION INFO` on the node behind the page.
#[test]
fn a_global_rule_shows_each_regions_share() {
    let etcd = sluice_tests::Etcd::start();
    let dir = TempDir::new("dashboard-regions");
    let rules = dir.path().join("rules.toml");
    std::fs::write(
        &rules,
        "[g]\nlimit = 1000\nperiod = \"1m\"\nglobal = true\n",
    )
    .unwrap();
    let (url, rules) = (etcd.url(), rules.to_str().unwrap().to_owned());
    let http_port = free_port();
    let p = http_port.to_string();
    let _regions: Vec<Sluice> = ["eu", "us"]
        .iter()
        .map(|region| {
            let mut args = vec![
                "--region",
                region,
                "--regions-etcd",
                &url,
                "--rebalance-interval",
                "1s",
                "--rules",
                &rules,
            ];
            if *region == "eu" {
                args.extend(["--http-port", &p]);
            }
            Sluice::start_with(&args)
        })
        .collect();
    let d = wait_until(Duration::from_secs(20), || {
        let (status, d) = dashboard(http_port, None);
        let g = d["rules"]
            .as_array()?
            .iter()
            .find(|r| r["rule"]["id"] == "g")?;
        let regions = g["global"]["regions"].as_array()?;
        (status == 200 && regions.len() == 2).then(|| g["global"].clone())
    })
    .unwrap_or_else(|| panic!("{:#}", dashboard(http_port, None).1));
    assert_eq!(d["region"], "eu", "{d:#}");
    let mut regions: Vec<(&str, f64)> = d["regions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["region"].as_str().unwrap(), r["share"].as_f64().unwrap()))
        .collect();
    regions.sort_by(|a, b| a.0.cmp(b.0));
    assert_eq!(
        regions.iter().map(|r| r.0).collect::<Vec<_>>(),
        ["eu", "us"]
    );
    // While the regions learn their demand, each holds at least the minimum share.
    assert!(regions.iter().all(|r| r.1 > 0.0 && r.1 <= 1.0), "{d:#}");
    assert!(d["limit"].as_u64().unwrap() > 0, "{d:#}");
}
