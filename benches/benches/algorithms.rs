//! Each algorithm's decision, `sluice_core::check`, on an existing key in steady state.
//!
//! The clock advances by one emission interval per check, so every check is allowed, the key
//! stays live (`Some` state) and the work is the same every iteration: the cost of the decision
//! itself, with no store, lock or hash around it. LOG runs at a small limit (its ring holds up
//! to `limit` timestamps, and a strict low limit is what it is for).

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use sluice_core::{Algo, Nanos, Params, State, check};

/// An instant in 2026, as the server's clock would give.
const START: Nanos = Nanos(1_780_000_000 * Nanos::PER_SEC);

fn params(algo: Algo) -> Params {
    match algo {
        // A strict low limit: 100 per second, one request every 10 ms.
        Algo::Log => Params {
            limit: 100,
            period: Nanos::from_secs(1),
            burst: 100,
            cost: 1,
        },
        // A million per second with a full burst: one request every microsecond.
        _ => Params {
            limit: 1_000_000,
            period: Nanos::from_secs(1),
            burst: 1_000_000,
            cost: 1,
        },
    }
}

fn decisions(c: &mut Criterion) {
    let mut group = c.benchmark_group("check");
    group.throughput(Throughput::Elements(1));
    for algo in Algo::ALL {
        let params = params(algo);
        // One emission interval; LOG one nanosecond more, so its oldest timestamp has just
        // left the window when the next request comes (allowed, not denied at the edge).
        let step = params.period.as_nanos() / params.limit + u64::from(algo == Algo::Log);
        group.bench_function(BenchmarkId::from_parameter(algo.name()), |b| {
            let mut slot: Option<State> = None;
            let mut now = START;
            // Warm the key up to its steady state (LOG: a full window of timestamps).
            for _ in 0..2 * params.limit.min(10_000) {
                now = now.saturating_add(Nanos(step));
                check(&mut slot, algo, &params, now, false).expect("valid params");
            }
            assert!(slot.is_some(), "{} key must stay live", algo.name());
            b.iter(|| {
                now = now.saturating_add(Nanos(step));
                black_box(check(&mut slot, algo, black_box(&params), now, false))
            });
        });
    }
    group.finish();
}

criterion_group!(benches, decisions);
criterion_main!(benches);
