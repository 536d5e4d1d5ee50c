//! A table that grew by moving into new arrays holds no memory for the arrays it moved out of.
//!
//! Tables grow a step at a time (`table`: the old arrays are held while their entries move
//! in), and the moved-from pages go back to the system as the move passes them, whatever the
//! allocator does with the freed block afterwards. This test runs under the system allocator
//! (glibc's malloc keeps a freed block in its heap, resident), so it fails if a finished move
//! leaves its old arrays resident. It is the only test in this file: it reads the RSS of its
//! own process.

use sluice_core::{Algo, Nanos, Params};
use sluice_store::{Store, StoreConfig};

const T0: Nanos = Nanos(1_700_000_000_123_456_789);

/// Resident bytes of this process (Linux).
fn rss() -> Option<usize> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: usize = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

#[test]
fn moved_from_arrays_are_not_resident() {
    let n = 200_000u64;
    let p = Params {
        limit: 10,
        period: Nanos::from_secs(10),
        burst: 10,
        cost: 1,
    };
    let store = Store::new(StoreConfig::default());
    let (Some(rss_before), used_before) = (rss(), store.used_memory()) else {
        return; // not Linux: no RSS to read.
    };
    // 16-byte keys, each a new TOKEN bucket: every shard's table grows through several moves.
    for i in 0..n {
        let key = format!("user:{i:011}");
        let d = store.check(key.as_bytes(), Algo::Token, &p, T0, false);
        assert!(d.unwrap().allowed);
    }
    // Housekeeping finishes the moves still going.
    for shard in 0..store.shard_count() {
        while !store.expire_some(shard, T0, 2048).1 {}
    }
    let rss = (rss().unwrap() - rss_before) as f64 / n as f64;
    let used = (store.used_memory() - used_before) as f64 / n as f64;
    println!("{n} TOKEN buckets: {rss:.1} B RSS, {used:.1} B used_memory per bucket");
    // `used_memory` counts the arrays of today. The moved-from ones, if the allocator kept
    // them resident after their move, would add about 30 B (66.6 B RSS against 36.1 B used
    // before they were handed back). The bound leaves a few bytes for what the allocator keeps
    // of smaller freed blocks (the wheel's buffers, for one, double as they grow).
    assert!(used <= 40.0, "{used:.1} B used_memory per bucket");
    assert!(
        rss <= used + 10.0,
        "{rss:.1} B RSS per bucket against {used:.1} B used_memory"
    );
}
