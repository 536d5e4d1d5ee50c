//! One concept, one name: a limit's window is `window` (`WINDOW` in RESP rule words) on every
//! surface, and `period` (`PERIOD`) is accepted as its alias on every surface too: `RL.RULE
//! SET`, `PUT /rules/{id}`, `POST /v1/check` on the node and on the sidecar, a rules file
//! (TOML and YAML) and a rule's value in etcd. Giving both is refused by name.

use std::time::Duration;

use sluice_tests::{Etcd, Sluice, TempDir, http_json, sluice_with_http, wait_until};

/// `RL.RULE GET name`'s `field`, if the rule exists.
fn rule_field(c: &mut redis::Connection, name: &str, field: &str) -> Option<String> {
    let v: Option<Vec<redis::Value>> = redis::cmd("RL.RULE").arg("GET").arg(name).query(c).ok()?;
    let v = v?;
    let at = v
        .iter()
        .position(|x| *x == redis::Value::BulkString(field.as_bytes().to_vec()))?;
    Some(match &v[at + 1] {
        redis::Value::Int(n) => n.to_string(),
        redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        other => format!("{other:?}"),
    })
}

fn rule_set(c: &mut redis::Connection, words: &[&str]) -> redis::RedisResult<i64> {
    redis::cmd("RL.RULE").arg("SET").arg(words).query(c)
}

#[test]
fn resp_rule_words_take_window_and_its_alias_period() {
    let server = Sluice::start();
    let mut c = server.client();
    rule_set(&mut c, &["a", "LIMIT", "5", "WINDOW", "90s"]).unwrap();
    rule_set(&mut c, &["b", "LIMIT", "5", "PERIOD", "90s"]).unwrap();
    rule_set(&mut c, &["c", "LIMIT", "5", "window", "2m"]).unwrap();
    for (name, ms) in [("a", "90000"), ("b", "90000"), ("c", "120000")] {
        assert_eq!(rule_field(&mut c, name, "period_ms").as_deref(), Some(ms));
    }
    let err = rule_set(&mut c, &["d", "LIMIT", "5", "WINDOW", "1m", "PERIOD", "1m"]).unwrap_err();
    assert!(err.to_string().contains("same setting"), "{err}");
    let err = rule_set(&mut c, &["d", "LIMIT", "5", "WINDOW", "0"]).unwrap_err();
    assert!(err.to_string().contains("WINDOW '0'"), "{err}");
    let err = rule_set(&mut c, &["d", "LIMIT", "5"]).unwrap_err();
    assert!(err.to_string().contains("needs WINDOW"), "{err}");
}

#[test]
fn http_rules_and_checks_take_window_and_its_alias_period() {
    let (_server, port) = sluice_with_http(&[]);
    for (id, field) in [("w", "window"), ("p", "period")] {
        let body = format!(r#"{{"scope":"user","limit":3,"{field}":"1m"}}"#);
        let r = http_json(port, "PUT", &format!("/rules/{id}"), &body);
        assert_eq!(r.status, 200, "{field}: {r:?}");
        let r = http_json(port, "GET", &format!("/rules/{id}"), "{}");
        assert_eq!(r.json()["window"], "1m", "{field}: {r:?}");
    }
    let r = http_json(
        port,
        "PUT",
        "/rules/both",
        r#"{"scope":"user","limit":3,"window":"1m","period":"1m"}"#,
    );
    assert_eq!(r.status, 400, "{r:?}");
    assert!(
        r.json()["error"].as_str().unwrap().contains("duplicate"),
        "{r:?}"
    );

    for (key, field) in [("kw", "window"), ("kp", "period")] {
        let body = format!(r#"{{"key":"{key}","limit":2,"{field}":"1m"}}"#);
        let r = http_json(port, "POST", "/v1/check", &body);
        assert_eq!(r.status, 200, "{field}: {r:?}");
        assert_eq!(r.json()["remaining"], 1, "{field}: {r:?}");
    }
    // A bad window is refused whichever spelling carried it (named by RL.CHECK's word).
    for field in ["window", "period"] {
        let body = format!(r#"{{"key":"k","limit":2,"{field}":"soon"}}"#);
        let r = http_json(port, "POST", "/v1/check", &body);
        assert_eq!(r.status, 400, "{r:?}");
        let e = r.json()["error"].as_str().unwrap().to_string();
        assert!(e.starts_with("period: "), "{field}: {e}");
    }
    let r = http_json(
        port,
        "POST",
        "/v1/check",
        r#"{"key":"k","limit":2,"window":"1m","period":"1m"}"#,
    );
    assert_eq!(r.status, 400, "{r:?}");
}

#[test]
fn the_sidecar_checks_take_window_and_its_alias_period() {
    let node = Sluice::start();
    let port = sluice_tests::free_port();
    let upstream = format!("127.0.0.1:{}", node.port);
    let _proxy = Sluice::start_proxy(&["--upstream", &upstream, "--http-port", &port.to_string()]);
    wait_until(Duration::from_secs(10), || {
        sluice_tests::http_get(port, "/healthz")
    })
    .expect("the sidecar's /healthz");
    for (key, field) in [("sw", "window"), ("sp", "period")] {
        let body = format!(r#"{{"key":"{key}","limit":2,"{field}":"1m"}}"#);
        let r = http_json(port, "POST", "/v1/check", &body);
        assert_eq!(r.status, 200, "{field}: {r:?}");
        assert_eq!(r.json()["remaining"], 1, "{field}: {r:?}");
    }
}

#[test]
fn a_rules_file_takes_window_and_its_alias_period() {
    let dir = TempDir::new("window-file");
    let toml = dir.path().join("rules.toml");
    std::fs::write(
        &toml,
        "[w]\nlimit = 3\nwindow = \"1m\"\n\n[p]\nlimit = 3\nperiod = 30\n",
    )
    .unwrap();
    let server = Sluice::start_with(&["--rules", toml.to_str().unwrap()]);
    let mut c = server.client();
    assert_eq!(
        rule_field(&mut c, "w", "period_ms").as_deref(),
        Some("60000")
    );
    assert_eq!(
        rule_field(&mut c, "p", "period_ms").as_deref(),
        Some("30000")
    );

    let yaml = dir.path().join("rules.yaml");
    std::fs::write(&yaml, "w:\n  limit: 3\n  window: 2s\n").unwrap();
    let server = Sluice::start_with(&["--rules", yaml.to_str().unwrap()]);
    let mut c = server.client();
    assert_eq!(
        rule_field(&mut c, "w", "period_ms").as_deref(),
        Some("2000")
    );

    let both = dir.path().join("both.toml");
    std::fs::write(&both, "[x]\nlimit = 3\nwindow = \"1m\"\nperiod = \"1m\"\n").unwrap();
    let out = std::process::Command::new("timeout")
        .arg("30")
        .arg(sluice_tests::binary())
        .args(["--port", "0", "--rules"])
        .arg(&both)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(log.contains("same setting"), "{log}");
}

/// RFC 4648 base64, for etcd's JSON gateway.
fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[test]
fn a_rule_in_etcd_takes_window_and_its_alias_period() {
    let etcd = Etcd::start();
    let server = Sluice::start_with(&["--rules-etcd", &etcd.url()]);
    let mut c = server.client();
    for (name, value) in [("w", "LIMIT 4 WINDOW 1m"), ("p", "LIMIT 4 PERIOD 1m")] {
        let body = format!(
            r#"{{"key":"{}","value":"{}"}}"#,
            base64(format!("/sluice/rules/{name}").as_bytes()),
            base64(value.as_bytes())
        );
        let r = http_json(etcd.port, "POST", "/v3/kv/put", &body);
        assert_eq!(r.status, 200, "{r:?}");
    }
    for name in ["w", "p"] {
        let seen = wait_until(Duration::from_secs(10), || {
            rule_field(&mut c, name, "period_ms").filter(|ms| ms == "60000")
        });
        assert!(seen.is_some(), "{name}: {}", server.log());
    }
}
