//! Real Redis tools against Sluice: `redis-cli` and `redis-benchmark` (installed by .ci/run).

use sluice_tests::{Sluice, have_tool, redis_benchmark, redis_cli};

#[test]
fn redis_cli_six_checks_show_five_allowed_then_a_two_second_retry() {
    if !have_tool("redis-cli") {
        return;
    }
    let server = Sluice::start();
    let mut replies = Vec::new();
    let started = std::time::Instant::now();
    for _ in 0..6 {
        let out = redis_cli(server.port, &["RL.CHECK", "user:42", "5", "10"]);
        assert!(out.status.success());
        let text = String::from_utf8(out.stdout).unwrap();
        let fields: Vec<i64> = text
            .split_whitespace()
            .map(|f| f.parse().unwrap())
            .collect();
        replies.push(fields);
    }
    for r in &replies[..5] {
        assert_eq!(r[0], 1, "{replies:?}");
    }
    let denied = &replies[5];
    assert_eq!(denied[0], 0, "{replies:?}");
    // One unit refills every 2 s from the first call; the six processes took `elapsed` to run.
    let elapsed = started.elapsed().as_millis() as i64;
    assert!(
        denied[3] <= 2_000 && denied[3] >= 2_000 - elapsed - 1,
        "retry_after_ms about 2000 (calls took {elapsed} ms): {denied:?}"
    );
    // redis-cli's interactive niceties work too.
    let out = redis_cli(server.port, &["PING"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "PONG");
    let out = redis_cli(server.port, &["INFO", "server"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("redis_version"));
}

fn assert_clean_benchmark(out: &std::process::Output, tests: &[&str]) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "redis-benchmark failed:\n{stdout}\n{stderr}"
    );
    assert!(
        !stdout.to_lowercase().contains("error") && !stderr.to_lowercase().contains("error"),
        "{stdout}\n{stderr}"
    );
    for t in tests {
        assert!(stdout.contains(t), "no {t} result in:\n{stdout}");
    }
}

#[test]
fn redis_benchmark_standard_tests_run_clean() {
    if !have_tool("redis-benchmark") {
        return;
    }
    let server = Sluice::start();
    let out = redis_benchmark(
        server.port,
        &["-t", "ping,set,get,incr", "-n", "20000", "-q"],
    );
    assert_clean_benchmark(&out, &["PING_INLINE", "PING_MBULK", "SET", "GET", "INCR"]);
}

#[test]
fn redis_benchmark_rl_check_with_random_keys_runs_clean() {
    if !have_tool("redis-benchmark") {
        return;
    }
    let server = Sluice::start();
    let out = redis_benchmark(
        server.port,
        &[
            "-P",
            "16",
            "-r",
            "1000000",
            "-n",
            "50000",
            "-q",
            "RL.CHECK",
            "rl:__rand_int__",
            "100",
            "60",
        ],
    );
    assert_clean_benchmark(&out, &["RL.CHECK"]);
    let mut c = server.client();
    let keys: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert!(keys > 1000, "random keys were created: {keys}");
}
