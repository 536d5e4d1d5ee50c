//! The reply encoder: `RL.CHECK`'s array of five integers
//! (`[allowed, limit, remaining, retry_after_ms, reset_after_ms]`), appended to an output
//! buffer that is reused, as the connection loop reuses its output buffer between writes.

use std::hint::black_box;

use bytes::BytesMut;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use sluice_resp::reply;

fn reply(c: &mut Criterion) {
    let mut group = c.benchmark_group("reply");
    group.throughput(Throughput::Elements(1));
    // A typical allowed answer: remaining near a million, reset in about 100 s.
    let values: [i64; 5] = [1, 1_000_000, 999_123, -1, 100_000];
    group.bench_function("rl_check_5_ints", |b| {
        let mut out = BytesMut::with_capacity(16 * 1024);
        b.iter(|| {
            out.clear();
            reply::int_array(&mut out, black_box(&values));
            black_box(out.len())
        });
    });
    group.finish();
}

criterion_group!(benches, reply);
criterion_main!(benches);
