//! A big collection deleted, overwritten or expired is freed off the request path (Redis's
//! lazyfree): the command answers at once and the node's freeing thread counts it
//! (`INFO memory`'s `lazyfreed_objects`), while `used_memory` drops at once.

use std::time::Duration;

use sluice_tests::{Sluice, wait_until};

fn info_field(c: &mut redis::Connection, name: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg("memory").query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {info}"))
}

fn fill(c: &mut redis::Connection, key: &str, members: usize) {
    for start in (0..members).step_by(10_000) {
        let mut cmd = redis::cmd("SADD");
        cmd.arg(key);
        for i in start..(start + 10_000).min(members) {
            cmd.arg(i);
        }
        let _: i64 = cmd.query(c).unwrap();
    }
}

#[test]
fn big_sets_are_freed_off_the_request_path() {
    let node = Sluice::start();
    let mut c = node.client();
    let before = info_field(&mut c, "used_memory");
    fill(&mut c, "big", 200_000);
    let full = info_field(&mut c, "used_memory");
    assert!(full > before + 200_000 * 8, "{before} -> {full}");
    let freed = info_field(&mut c, "lazyfreed_objects");

    let n: i64 = redis::cmd("DEL").arg("big").query(&mut c).unwrap();
    assert_eq!(n, 1);
    assert!(info_field(&mut c, "used_memory") < before + 100_000);
    let counted = |c: &mut redis::Connection, n| {
        wait_until(Duration::from_secs(10), || {
            (info_field(c, "lazyfreed_objects") >= n).then_some(())
        })
        .is_some()
    };
    assert!(
        counted(&mut c, freed + 1),
        "the DEL'd set was not freed lazily"
    );

    // Overwritten by SET, then expired: each freed the same way.
    fill(&mut c, "big", 1000);
    let _: () = redis::cmd("SET").arg("big").arg(1).query(&mut c).unwrap();
    assert!(
        counted(&mut c, freed + 2),
        "the overwritten set was not freed lazily"
    );
    fill(&mut c, "big2", 1000);
    let _: i64 = redis::cmd("PEXPIRE")
        .arg("big2")
        .arg(50)
        .query(&mut c)
        .unwrap();
    assert!(
        counted(&mut c, freed + 3),
        "the expired set was not freed lazily"
    );
    let n: i64 = redis::cmd("EXISTS").arg("big2").query(&mut c).unwrap();
    assert_eq!(n, 0);
}
