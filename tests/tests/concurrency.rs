//! Many clients on one key: the number allowed must equal the limit exactly, for every
//! algorithm. The limit refills at 1000 per day, i.e. one unit per 86.4 s, so no refill can
//! happen inside the test.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use sluice_tests::{Sluice, rl_check};

const CLIENTS: usize = 16;
const ATTEMPTS_PER_CLIENT: usize = 100;

#[test]
fn sixteen_clients_on_one_key_get_exactly_the_limit() {
    let server = Sluice::start_with(&["--threads", "2"]);
    for algo in ["TOKEN", "GCRA", "SLIDING", "FIXED", "LOG", "LEAKY"] {
        let allowed = Arc::new(AtomicI64::new(0));
        let key = format!("hot:{algo}");
        std::thread::scope(|scope| {
            for _ in 0..CLIENTS {
                let allowed = allowed.clone();
                let key = key.clone();
                let mut conn = server.client();
                scope.spawn(move || {
                    for _ in 0..ATTEMPTS_PER_CLIENT {
                        let r = rl_check(&mut conn, &[&key, "1000", "1d", "ALGO", algo]).unwrap();
                        allowed.fetch_add(r[0], Ordering::Relaxed);
                    }
                });
            }
        });
        assert_eq!(allowed.load(Ordering::Relaxed), 1000, "{algo}");
    }
}
