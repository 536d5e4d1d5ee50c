//! The Node limiter libraries, unchanged and in their default settings, against Sluice and
//! against redis-server: rate-limiter-flexible's RateLimiterRedis over ioredis (its Lua
//! `consume`), and a real express app behind express-rate-limit with rate-limit-redis (its
//! `EVALSHA` increment script, after `SCRIPT LOAD`). Each must allow and deny exactly as
//! against Redis, with the same headers. They come from npm with `scripts/test.sh` (`npm
//! install` in tests/js); under `CI=true` a missing one fails the test.

use sluice_tests::{RedisServer, Sluice, have_command, repo_path, run_client, script_count};

#[test]
fn rate_limiter_flexible_and_express_rate_limit_run_unchanged() {
    let installed = repo_path("js/node_modules/rate-limiter-flexible").exists()
        && repo_path("js/node_modules/express-rate-limit").exists();
    if !have_command("node", "node", &["--version"]) || !installed {
        assert!(
            installed || std::env::var("CI").is_err(),
            "the Node limiter libraries are not installed in tests/js (scripts/test.sh runs npm install there)"
        );
        return;
    }
    let script = repo_path("js/limiters.js");
    let script = script.to_str().unwrap();
    let redis = RedisServer::start(&[]);
    let sluice = Sluice::start();
    let theirs = run_client("node", &[script, &redis.port.to_string()]);
    let ours = run_client("node", &[script, &sluice.port.to_string()]);
    eprintln!("redis-server:\n{theirs}\nsluice:\n{ours}");
    assert_eq!(
        ours, theirs,
        "the libraries answered differently against Sluice"
    );
    // And what they answered is a limiter at work: 3 consumes allowed then 2 denied; two
    // requests served then a 429, with the draft-7 headers.
    assert!(
        ours.contains(r#"["allowed",0,3],["denied",0,4],["denied",0,5]"#),
        "{ours}"
    );
    assert!(
        ours.contains(r#"[429,"limit=2, remaining=0, reset=60","2;w=60"]"#),
        "{ours}"
    );
    // The installed libraries send exactly the scripts Sluice knows (tests/fixtures/
    // known-scripts): both ran natively, never in Lua.
    for name in [
        "rate_limit_redis_increment",
        "rate_limiter_flexible_incr_ttl",
    ] {
        let field = format!("script_native_{name}");
        assert!(
            script_count(sluice.port, &field) > 0,
            "{name} never ran natively"
        );
    }
    assert_eq!(script_count(sluice.port, "scripts_lua_calls"), 0);
}
