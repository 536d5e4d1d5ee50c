//! Server counters for INFO. Hot counters are per thread and cache-padded, so threads never
//! share a written cache line; readers sum them.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;

/// How many samples of the command counter `instantaneous_ops_per_sec` averages over (as Redis).
const OPS_SAMPLES: usize = 16;

#[derive(Debug)]
pub struct Stats {
    commands: Box<[CachePadded<AtomicU64>]>,
    pub connections_received: AtomicU64,
    pub rejected_connections: AtomicU64,
    ops: Mutex<OpsSampler>,
}

#[derive(Debug, Default)]
struct OpsSampler {
    last_total: u64,
    last_at_ms: u64,
    samples: [u64; OPS_SAMPLES],
    next: usize,
}

impl Stats {
    pub fn new(threads: usize) -> Stats {
        Stats {
            commands: (0..threads)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
            connections_received: AtomicU64::new(0),
            rejected_connections: AtomicU64::new(0),
            ops: Mutex::new(OpsSampler::default()),
        }
    }

    /// Counts `n` commands executed on `thread`.
    pub fn add_commands(&self, thread: usize, n: u64) {
        if n > 0 {
            self.commands[thread].fetch_add(n, Relaxed);
        }
    }

    pub fn total_commands(&self) -> u64 {
        self.commands.iter().map(|c| c.load(Relaxed)).sum()
    }

    /// Takes one sample of the command rate; called every 100 ms by one thread.
    pub fn sample_ops(&self, now_ms: u64) {
        let total = self.total_commands();
        let mut s = self.ops.lock();
        if s.last_at_ms != 0 && now_ms > s.last_at_ms {
            let rate = (total - s.last_total) * 1000 / (now_ms - s.last_at_ms);
            let i = s.next;
            s.samples[i] = rate;
            s.next = (i + 1) % OPS_SAMPLES;
        }
        s.last_total = total;
        s.last_at_ms = now_ms;
    }

    pub fn instantaneous_ops_per_sec(&self) -> u64 {
        let s = self.ops.lock();
        s.samples.iter().sum::<u64>() / OPS_SAMPLES as u64
    }
}
