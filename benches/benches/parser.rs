//! The request parser, `sluice_resp::Parser`, on `RL.CHECK` frames as `redis-benchmark` sends
//! them.
//!
//! Each iteration appends the frame's bytes to the connection's read buffer (the copy a socket
//! read does) and decodes it, the way the connection loop does: the `Request` holds slices of
//! the buffer, and dropping it lets the buffer reuse its memory for the next read.
//!
//! - `whole`: the frame arrives in one read.
//! - `split`: it arrives in two reads, cut inside the key; the parser keeps its place between
//!   them, so the second call does not rescan the first half.
//! - `pipeline16`: sixteen frames in one read (`redis-benchmark -P 16`), decoded one by one.

use std::hint::black_box;

use bytes::BytesMut;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use sluice_resp::{Limits, Parser};

/// `RL.CHECK rlt:000000123456 1000000 100000000` with a 16-byte key, as the scripts send it.
const FRAME: &[u8] =
    b"*4\r\n$8\r\nRL.CHECK\r\n$16\r\nrlt:000000123456\r\n$7\r\n1000000\r\n$9\r\n100000000\r\n";

fn parse_one(parser: &mut Parser, buf: &mut BytesMut) {
    let request = parser
        .parse(buf)
        .expect("well-formed frame")
        .expect("complete frame");
    black_box(&request);
}

fn parser(c: &mut Criterion) {
    let mut group = c.benchmark_group("parse_rl_check");
    group.throughput(Throughput::Elements(1));

    group.bench_function("whole", |b| {
        let mut parser = Parser::new(Limits::default());
        let mut buf = BytesMut::with_capacity(16 * 1024);
        b.iter(|| {
            buf.extend_from_slice(black_box(FRAME));
            parse_one(&mut parser, &mut buf);
        });
    });

    group.bench_function("split", |b| {
        let mut parser = Parser::new(Limits::default());
        let mut buf = BytesMut::with_capacity(16 * 1024);
        // Cut in the middle of the key.
        let cut = FRAME.windows(4).position(|w| w == b"rlt:").expect("key") + 8;
        let (first, second) = FRAME.split_at(cut);
        b.iter(|| {
            buf.extend_from_slice(black_box(first));
            let none = parser.parse(&mut buf).expect("well-formed prefix");
            assert!(none.is_none());
            buf.extend_from_slice(black_box(second));
            parse_one(&mut parser, &mut buf);
        });
    });

    let pipeline = FRAME.repeat(16);
    group.throughput(Throughput::Elements(16));
    group.bench_function("pipeline16", |b| {
        let mut parser = Parser::new(Limits::default());
        let mut buf = BytesMut::with_capacity(16 * 1024);
        b.iter(|| {
            buf.extend_from_slice(black_box(&pipeline));
            for _ in 0..16 {
                parse_one(&mut parser, &mut buf);
            }
        });
    });
    group.finish();
}

criterion_group!(benches, parser);
criterion_main!(benches);
