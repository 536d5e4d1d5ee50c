//! `sluice_cluster::key_slot`, the slot check of every keyed command in cluster mode, on the key
//! shapes the scripts and clients send: 9 and 16 bytes (`rlt:` and 12 digits, as
//! `scripts/bench-vs-redis.sh` names them), 22 bytes with a hash tag, and 64 bytes. Each is
//! measured as `key_slot` computes it (carry-less multiplication where the CPU has it) and as the
//! portable table-driven code does (`crc16(hash_tag(key))`), the reference it must match.
//!
//! Keys rotate through 1024 distinct ones, so the branch predictor does not learn one key.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use sluice_benches::key16;
use sluice_cluster::{SLOTS, crc16, hash_tag, key_slot};

/// 1024 keys of one shape.
fn keys(shape: &str) -> Vec<Vec<u8>> {
    (0..1024u64)
        .map(|i| {
            let key = key16(b"rlt:", i * 7919 + 12_345);
            match shape {
                "9B" => key[7..].to_vec(),
                "16B" => key.to_vec(),
                "22B-tagged" => [&b"{"[..], &key, b"}:cnt"].concat(),
                "64B" => [&key[..], &key, &key, &key].concat(),
                _ => unreachable!("unknown key shape {shape}"),
            }
        })
        .collect()
}

fn slots(c: &mut Criterion) {
    let mut group = c.benchmark_group("key_slot");
    group.throughput(Throughput::Elements(1));
    for shape in ["9B", "16B", "22B-tagged", "64B"] {
        let keys = keys(shape);
        for key in &keys {
            assert_eq!(key_slot(key), crc16(hash_tag(key)) & (SLOTS as u16 - 1));
        }
        group.bench_function(BenchmarkId::new("key_slot", shape), |b| {
            let mut i = 0;
            b.iter(|| {
                i = (i + 1) % keys.len();
                black_box(key_slot(black_box(&keys[i])))
            });
        });
        group.bench_function(BenchmarkId::new("portable", shape), |b| {
            let mut i = 0;
            b.iter(|| {
                i = (i + 1) % keys.len();
                black_box(crc16(hash_tag(black_box(&keys[i]))) & (SLOTS as u16 - 1))
            });
        });
    }
    group.finish();
}

criterion_group!(benches, slots);
criterion_main!(benches);
