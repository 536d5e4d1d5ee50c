//! Observability end to end: INFO commandstats / latencystats, CONFIG RESETSTAT, and
//! `GET /metrics` scraped over HTTP and parsed with a Prometheus text parser.

use std::collections::HashMap;
use std::time::Duration;

use prometheus_parse::{Sample, Scrape, Value};
use sluice_tests::{Sluice, free_port, http_get, rl_check, wait_until};

fn scrape(port: u16) -> Vec<Sample> {
    let body = wait_until(Duration::from_secs(10), || http_get(port, "/metrics"))
        .expect("GET /metrics answers 200");
    assert!(
        body.ends_with("# EOF\n"),
        "OpenMetrics text ends with # EOF"
    );
    Scrape::parse(body.lines().map(|l| Ok(l.to_string())))
        .expect("the Prometheus text parses")
        .samples
}

/// `sluice_checks` of plain checks (no rule) of `algo` with `result`.
fn unnamed_checks(samples: &[Sample], algo: &str, result: &str) -> Option<f64> {
    value(
        samples,
        "sluice_checks",
        &[("algo", algo), ("result", result)],
    )
}

/// The value of the sample named `name` (or `name` + `_total`) whose labels are exactly `labels`.
fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let want: HashMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    samples
        .iter()
        .find(|s| {
            (s.metric == name || s.metric == format!("{name}_total"))
                && s.labels
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect::<HashMap<_, _>>()
                    == want
        })
        .map(|s| match &s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
            Value::Histogram(buckets) => buckets.iter().map(|b| b.count).fold(0.0, f64::max),
            Value::Summary(_) => f64::NAN,
        })
}

fn info_line(conn: &mut redis::Connection, section: &str, prefix: &str) -> String {
    let info: String = redis::cmd("INFO").arg(section).query(conn).expect("INFO");
    info.lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix} in INFO {section}:\n{info}"))
        .to_string()
}

/// `calls=N,...` → N for field `calls`.
fn field(line: &str, name: &str) -> String {
    line.split([':', ','])
        .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no {name} in {line}"))
        .to_string()
}

#[test]
fn commandstats_latencystats_and_resetstat() {
    let server = Sluice::start_with(&["--threads", "2"]);
    let mut c = server.client();
    for _ in 0..5 {
        rl_check(&mut c, &["cs", "3", "60"]).expect("RL.CHECK");
    }
    assert!(rl_check(&mut c, &["cs", "3", "60", "BURST", "x"]).is_err());
    let line = info_line(&mut c, "commandstats", "cmdstat_rl.check:");
    assert_eq!(field(&line, "calls"), "6", "{line}");
    assert_eq!(field(&line, "failed_calls"), "1", "{line}");
    assert_eq!(field(&line, "rejected_calls"), "0", "{line}");
    let usec: u64 = field(&line, "usec").parse().expect("usec");
    let per_call: f64 = field(&line, "usec_per_call")
        .parse()
        .expect("usec_per_call");
    assert!(
        per_call > 0.0 && (per_call * 6.0 - usec as f64).abs() <= 6.0,
        "{line}"
    );

    let line = info_line(&mut c, "latencystats", "latency_percentiles_usec_rl.check:");
    let p50: f64 = field(&line, "p50").parse().expect("p50");
    let p999: f64 = field(&line, "p99.9").parse().expect("p99.9");
    assert!(p50 > 0.0 && p999 >= p50, "{line}");

    let ok: String = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut c)
        .expect("RESETSTAT");
    assert_eq!(ok, "OK");
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut c)
        .expect("INFO");
    assert!(!info.contains("cmdstat_rl.check"), "{info}");
}

#[test]
fn metrics_scrape_counts_checks_by_algorithm_and_outcome() {
    let metrics = free_port();
    let server = Sluice::start_with(&["--threads", "2", "--metrics-port", &metrics.to_string()]);
    let mut c = server.client();
    // TOKEN: 10 allowed (the last two leave under 20% of 10), 2 denied.
    for _ in 0..12 {
        rl_check(&mut c, &["t", "10", "60"]).expect("RL.CHECK");
    }
    // FIXED: 3 allowed, 1 denied. DRY checks are not counted.
    for _ in 0..4 {
        rl_check(&mut c, &["f", "3", "60", "ALGO", "FIXED"]).expect("RL.CHECK");
    }
    rl_check(&mut c, &["f", "3", "60", "ALGO", "FIXED", "DRY"]).expect("RL.CHECK");
    // A rejected call: wrong arity.
    assert!(
        redis::cmd("RL.CHECK")
            .arg("k")
            .query::<Vec<i64>>(&mut c)
            .is_err()
    );

    let s = scrape(metrics);
    let checks = |algo, result| unnamed_checks(&s, algo, result);
    assert_eq!(checks("token", "allowed"), Some(10.0));
    assert_eq!(checks("token", "denied"), Some(2.0));
    assert_eq!(checks("fixed", "allowed"), Some(3.0));
    assert_eq!(checks("fixed", "denied"), Some(1.0));
    assert_eq!(checks("token", "shadow_denied"), None);
    // remaining 1 and 0 out of 10 are under 20%; for FIXED 3, remaining 0 is.
    assert_eq!(
        value(&s, "sluice_checks_near_limit", &[("algo", "token")]),
        Some(2.0)
    );
    assert_eq!(
        value(&s, "sluice_checks_near_limit", &[("algo", "fixed")]),
        Some(1.0)
    );
    assert_eq!(
        value(&s, "sluice_commands", &[("command", "rl.check")]),
        Some(17.0)
    );
    assert_eq!(
        value(&s, "sluice_commands_rejected", &[("command", "rl.check")]),
        Some(1.0)
    );
    assert_eq!(value(&s, "sluice_keys", &[]), Some(2.0));
    assert_eq!(value(&s, "sluice_connected_clients", &[]), Some(1.0));
    assert_eq!(
        value(&s, "sluice_replication_role", &[("role", "master")]),
        Some(1.0)
    );
    assert_eq!(value(&s, "sluice_cluster_enabled", &[]), Some(0.0));
    assert!(value(&s, "sluice_used_memory_bytes", &[]).is_some_and(|v| v > 0.0));
    // The latency histogram counted every RL.CHECK that ran (17), and none over gRPC.
    let hist = s
        .iter()
        .find(|x| {
            x.metric == "sluice_check_duration_seconds" && x.labels.get("api") == Some("resp")
        })
        .expect("check latency histogram");
    let Value::Histogram(buckets) = &hist.value else {
        panic!("not a histogram: {:?}", hist.value);
    };
    assert_eq!(buckets.last().map(|b| b.count), Some(17.0));
    assert!(
        buckets.windows(2).all(|w| w[0].count <= w[1].count),
        "cumulative"
    );

    named_rules_are_labelled_by_name(&mut c, metrics);

    // RESETSTAT resets INFO, not the Prometheus counters.
    let _: String = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut c)
        .expect("RESETSTAT");
    let s = scrape(metrics);
    assert_eq!(unnamed_checks(&s, "token", "allowed"), Some(10.0));
    drop(server);
}

/// Named rules are labelled with their name: an enforcing GCRA rule (2 per minute, hit 3
/// times) and a shadow rule (1 per minute, hit twice: its denial is a would-be one). The
/// unnamed series (10 allowed TOKEN checks before) does not move.
fn named_rules_are_labelled_by_name(c: &mut redis::Connection, metrics: u16) {
    for rule in [
        "SET login LIMIT 2 PERIOD 60 ALGO GCRA",
        "SET probe LIMIT 1 PERIOD 60 SHADOW",
    ] {
        let mut cmd = redis::cmd("RL.RULE");
        for w in rule.split(' ') {
            cmd.arg(w);
        }
        let _: i64 = cmd.query(c).expect("RL.RULE SET");
    }
    for (rule, n) in [("login", 3), ("probe", 2)] {
        for _ in 0..n {
            let _: Vec<i64> = redis::cmd("RL.HIT")
                .arg(rule)
                .arg("user:1")
                .query(c)
                .expect("RL.HIT");
        }
    }
    let s = scrape(metrics);
    let ruled = |rule, algo, result| {
        value(
            &s,
            "sluice_checks",
            &[("rule", rule), ("algo", algo), ("result", result)],
        )
    };
    assert_eq!(ruled("login", "gcra", "allowed"), Some(2.0));
    assert_eq!(ruled("login", "gcra", "denied"), Some(1.0));
    assert_eq!(ruled("probe", "token", "allowed"), Some(1.0));
    assert_eq!(ruled("probe", "token", "shadow_denied"), Some(1.0));
    assert_eq!(ruled("probe", "token", "denied"), None);
    // The unnamed series did not move.
    assert_eq!(unnamed_checks(&s, "token", "allowed"), Some(10.0));

    // The keys denied most, with their rules: a shadow denial counts under its rule. Four keys
    // were denied (t twice; f, login:user:1 and probe:user:1 once), within the top 5.
    let top = |rule, key| {
        value(
            &s,
            "sluice_top_denied_requests",
            &[("rule", rule), ("key", key)],
        )
    };
    assert_eq!(top("", "t"), Some(2.0));
    assert_eq!(top("", "f"), Some(1.0));
    assert_eq!(top("login", "login:user:1"), Some(1.0));
    assert_eq!(top("probe", "probe:user:1"), Some(1.0));
    let series = s
        .iter()
        .filter(|x| x.metric == "sluice_top_denied_requests")
        .count();
    assert_eq!(series, 4);
}
