//! A flood of random new keys against a small `--maxmemory`: the node stays within the limit,
//! keeps answering existing keys exactly, and counts what it evicted or refused in INFO.

use sluice_tests::{Sentinel, Sluice, rl_check};

fn info_field(c: &mut redis::Connection, field: &str) -> u64 {
    let info: String = redis::cmd("INFO").query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("INFO has no {field}"))
        .trim()
        .parse()
        .unwrap()
}

/// Sends `n` RL.CHECKs on fresh random keys, pipelined 1000 at a time; returns the replies
/// that were errors (their texts).
fn flood(c: &mut redis::Connection, n: usize, seed: u64) -> Vec<String> {
    let mut errors = Vec::new();
    for batch in 0..n / 1000 {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for i in 0..1000 {
            let key = format!(
                "flood:{seed}:{batch}:{i}:{:08x}",
                (batch * 1000 + i) as u64 * 2_654_435_761 % (1 << 32)
            );
            // An hour's bucket: each key lives far longer than the flood, so only memory limits them.
            pipe.cmd("RL.CHECK").arg(key).arg(100).arg("1h");
        }
        let replies: Vec<redis::RedisResult<redis::Value>> = pipe.query(c).unwrap();
        for r in replies {
            if let Err(e) = r {
                errors.push(e.to_string());
            }
        }
    }
    errors
}

#[test]
fn evict_soonest_keeps_memory_bounded_and_long_lived_keys_exact() {
    let limit = 2 * 1024 * 1024;
    let server = Sluice::start_with(&["--maxmemory", "2mb", "--threads", "1"]);
    let sentinel = Sentinel::write(&server);
    let mut c = server.client();
    let rss_before = server.rss();
    let errors = flood(&mut c, 200_000, 1);
    assert!(
        errors.is_empty(),
        "evict-soonest never refuses a check: {:?}",
        &errors[..errors.len().min(3)]
    );
    let used = info_field(&mut c, "used_memory");
    assert!(
        used <= limit + 64 * 1024,
        "used_memory {used} over maxmemory {limit}"
    );
    let evicted = info_field(&mut c, "evicted_keys");
    assert!(evicted > 100_000, "the flood evicted buckets: {evicted}");
    let rss_after = server.rss();
    println!(
        "flood of 200000 keys against maxmemory {limit}: used_memory {used}, evicted {evicted}, RSS {rss_before} -> {rss_after}"
    );
    assert!(
        rss_after < rss_before + 8 * limit,
        "RSS grew from {rss_before} to {rss_after} against a {limit}-byte limit"
    );
    sentinel.assert_intact(&server);
}

#[test]
fn reject_refuses_new_keys_and_keeps_existing_ones_working() {
    let server = Sluice::start_with(&["--maxmemory", "1mb", "--maxmemory-policy", "reject"]);
    let sentinel = Sentinel::write(&server);
    let mut c = server.client();
    let errors = flood(&mut c, 100_000, 2);
    assert!(!errors.is_empty(), "the flood hit the limit");
    assert!(
        errors.iter().all(|e| e.contains("OOM")),
        "{:?}",
        &errors[..3]
    );
    let rejected = info_field(&mut c, "rejected_keys");
    assert_eq!(rejected as usize, errors.len());
    let used = info_field(&mut c, "used_memory");
    assert!(used <= 1024 * 1024 + 64 * 1024, "used_memory {used}");
    // A new key in a full shard is refused with Redis's OOM error and no state change; old
    // keys still count. (The limit is kept per shard, so look for a key in a full one.)
    let refused = (0..10_000)
        .map(|i| format!("brand-new:{i}"))
        .find(|k| rl_check(&mut c, &[k, "5", "10"]).is_err_and(|e| e.code() == Some("OOM")))
        .expect("some new key is refused");
    assert_eq!(
        redis::cmd("EXISTS")
            .arg(&refused)
            .query::<i64>(&mut c)
            .unwrap(),
        0
    );
    sentinel.assert_intact(&server);
    // CONFIG SET lifts the limit at run time.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("0")
        .query(&mut c)
        .unwrap();
    assert_eq!(rl_check(&mut c, &[&refused, "5", "10"]).unwrap()[0], 1);
}
