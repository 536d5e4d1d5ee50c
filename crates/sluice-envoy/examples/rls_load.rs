//! A load generator for Envoy's rate limit service: `ShouldRateLimit` calls from `--connections`
//! HTTP/2 connections with `--concurrency` calls in flight on each, for `--seconds`, one
//! descriptor `(key, k<random in 0..keys>)` of `--domain`. Prints the calls per second and the
//! p50 / p99 latency of the calls that got an answer.
//!
//! `cargo run --release -p sluice-envoy --example rls_load -- --port 8081 --domain bench`

use std::time::{Duration, Instant};

use sluice_envoy::pb::rate_limit_descriptor::Entry;
use sluice_envoy::pb::{RateLimitDescriptor, RateLimitRequest, RateLimitServiceClient};

struct Args {
    port: u16,
    domain: String,
    connections: usize,
    concurrency: usize,
    seconds: u64,
    keys: u64,
}

fn args() -> Args {
    let mut a = Args {
        port: 8081,
        domain: "bench".into(),
        connections: 4,
        concurrency: 16,
        seconds: 5,
        keys: 100_000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        let n = || {
            value
                .parse::<u64>()
                .unwrap_or_else(|_| panic!("{flag}: not a number"))
        };
        match flag.as_str() {
            "--port" => a.port = n() as u16,
            "--domain" => a.domain = value.clone(),
            "--connections" => a.connections = n() as usize,
            "--concurrency" => a.concurrency = n() as usize,
            "--seconds" => a.seconds = n(),
            "--keys" => a.keys = n().max(1),
            _ => panic!("unknown flag {flag}"),
        }
    }
    a
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let a = args();
    let deadline = Instant::now() + Duration::from_secs(a.seconds);
    let mut tasks = Vec::new();
    for c in 0..a.connections {
        let client = RateLimitServiceClient::connect(format!("http://127.0.0.1:{}", a.port))
            .await
            .expect("connect");
        for t in 0..a.concurrency {
            let mut client = client.clone();
            let domain = a.domain.clone();
            let keys = a.keys;
            // A small xorshift per task: no shared state between tasks.
            let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ ((c * 1000 + t) as u64 + 1);
            tasks.push(tokio::spawn(async move {
                let (mut latencies, mut errors) = (Vec::new(), 0u64);
                while Instant::now() < deadline {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let request = RateLimitRequest {
                        domain: domain.clone(),
                        descriptors: vec![RateLimitDescriptor {
                            entries: vec![Entry {
                                key: "key".into(),
                                value: format!("k{}", x % keys),
                            }],
                            ..RateLimitDescriptor::default()
                        }],
                        hits_addend: 1,
                    };
                    let started = Instant::now();
                    match client.should_rate_limit(request).await {
                        Ok(_) => latencies.push(started.elapsed().as_micros() as u32),
                        Err(_) => errors += 1,
                    }
                }
                (latencies, errors)
            }));
        }
    }
    let started = Instant::now();
    let (mut all, mut errors) = (Vec::new(), 0);
    for t in tasks {
        let (l, e) = t.await.expect("task");
        all.extend(l);
        errors += e;
    }
    let secs = started.elapsed().as_secs_f64().max(a.seconds as f64);
    all.sort_unstable();
    let pct = |q: f64| {
        all.get(((all.len() as f64 * q) as usize).min(all.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    println!(
        "calls={} errors={errors} rps={:.0} p50_us={} p99_us={}",
        all.len(),
        all.len() as f64 / secs,
        pct(0.50),
        pct(0.99)
    );
}
