//! A sidecar whose upstream is wrong or gone says so (issue 41, item 3): it logs an upstream
//! it cannot reach at start and each change of its state once, counts those changes in INFO
//! and `/metrics`, and with `--require-upstream` refuses to start when no upstream answers.

use std::process::{Command, Stdio};
use std::time::Duration;

use sluice_tests::{Sluice, binary, free_port, http_get, wait_until};

/// The sidecar's INFO as text.
fn info(proxy: &Sluice) -> String {
    redis::cmd("INFO").query(&mut proxy.client()).unwrap()
}

/// The `key=value` field of the first upstream row of the sidecar's INFO.
fn upstream_field(proxy: &Sluice, key: &str) -> Option<String> {
    let text = info(proxy);
    let row = text.lines().find_map(|l| l.strip_prefix("upstream0:"))?;
    row.split(',')
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .map(str::to_string)
}

#[test]
fn an_unreachable_upstream_is_logged_once_per_change_and_counted() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let metrics = free_port();
    let proxy = Sluice::start_proxy(&["--upstream", &addr, "--metrics-port", &metrics.to_string()]);
    let down = format!("upstream {addr} unreachable");
    assert!(proxy.wait_for_log(&down), "{}", proxy.log());
    // Checks meanwhile get the fail mode, and do not log the same thing again.
    let mut conn = proxy.client();
    for _ in 0..20 {
        let _: Vec<i64> = redis::cmd("RL.CHECK")
            .arg(&["k", "5", "60"])
            .query(&mut conn)
            .unwrap();
    }
    assert_eq!(upstream_field(&proxy, "state").as_deref(), Some("down"));
    assert_eq!(upstream_field(&proxy, "went_down").as_deref(), Some("1"));
    assert_eq!(proxy.log().matches(&down).count(), 1, "{}", proxy.log());

    // The node comes up where the sidecar looks: it says so once, and counts it.
    let node = Sluice::start_on(port, &[]);
    let back = format!("upstream {addr} answers again");
    assert!(proxy.wait_for_log(&back), "{}", proxy.log());
    let up = wait_until(Duration::from_secs(10), || {
        (upstream_field(&proxy, "state")? == "up").then_some(())
    });
    assert!(up.is_some(), "{}", info(&proxy));
    assert_eq!(upstream_field(&proxy, "came_back").as_deref(), Some("1"));

    // It goes away again: a second change, a second line.
    drop(node);
    let twice = wait_until(Duration::from_secs(10), || {
        (proxy.log().matches(&down).count() == 2).then_some(())
    });
    assert!(twice.is_some(), "{}", proxy.log());
    assert_eq!(upstream_field(&proxy, "went_down").as_deref(), Some("2"));
    let text = http_get(metrics, "/metrics").expect("metrics");
    for line in [
        format!("sluice_proxy_upstream_down_total{{upstream=\"{addr}\"}} 2"),
        format!("sluice_proxy_upstream_back_total{{upstream=\"{addr}\"}} 1"),
        format!("sluice_proxy_upstream_up{{upstream=\"{addr}\"}} 0"),
    ] {
        assert!(text.contains(&line), "{line} not in:\n{text}");
    }
}

#[test]
fn require_upstream_refuses_to_start_when_none_answers() {
    let addr = format!("127.0.0.1:{}", free_port());
    let mut child = Command::new(binary())
        .args([
            "proxy",
            "--port",
            "0",
            "--bind",
            "127.0.0.1",
            "--upstream",
            &addr,
            "--require-upstream",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sluice proxy");
    let status = wait_until(Duration::from_secs(30), || child.try_wait().ok().flatten());
    if status.is_none() {
        let _ = child.kill();
    }
    let out = child.wait_with_output().expect("sidecar output");
    let log = String::from_utf8_lossy(&out.stderr);
    let status = status.expect("the sidecar exits by itself");
    assert!(!status.success(), "{log}");
    assert!(!log.contains("ready to accept"), "{log}");
    assert!(
        log.contains(&addr) && log.contains("--require-upstream"),
        "{log}"
    );
}

#[test]
fn require_upstream_starts_when_the_upstream_answers() {
    let node = Sluice::start();
    let addr = format!("127.0.0.1:{}", node.port);
    let proxy = Sluice::start_proxy(&["--upstream", &addr, "--require-upstream"]);
    let r: Vec<i64> = redis::cmd("RL.CHECK")
        .arg(&["k", "5", "60"])
        .query(&mut proxy.client())
        .unwrap();
    assert_eq!(r[..3], [1, 5, 4]);
    assert!(!proxy.log().contains("unreachable"), "{}", proxy.log());
}
