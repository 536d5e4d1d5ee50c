//! The slowest single checks while new keys are created, in process (no network): a probe
//! for housekeeping that stalls a request (table growth, the wheel's cascades and expiries).
//!
//! `cargo run --release -p sluice-store --example stall [KEYS] [REQUESTS] [RUNS] [BUDGET] [SHARDS]`
//! (SHARDS default 64, a one-thread server's; fewer make each shard's O(n) work longer) runs the same
//! checks (TOKEN, new keys at random, 10 µs of simulated time apart, the server's expiry pass
//! every simulated millisecond) `RUNS` times (default 3) on fresh stores and keeps, for each
//! request, its fastest run: a request that another process preempted in one run is not slow
//! in all of them, while a rebuild is. Then it runs the housekeeping alone for 200 simulated
//! seconds, past every deadline, in [`EXPIRE_BUDGET`] steps, and reports the longest step
//! (each step's fastest run, too; and the longest step's CPU time in any run). A BUDGET of 18446744073709551615 is the unbounded pass
//! (`Store::expire_due`) for comparison.
//!
//! Each check is timed twice: wall time, and the thread's CPU time (which a preemption by
//! another process does not inflate: on a loaded machine, the figure that shows what the store
//! itself did). Before the housekeeping, with every key in place, a second thread takes a
//! snapshot of the store and then deletes one key in ten by a scan (a slot migration's drop),
//! while this one keeps checking existing keys: the slowest of those checks is the wait behind
//! a snapshot or a drop. There a check that waited for a lock parks its thread (a voluntary
//! context switch), and a preempted one does not, so the checks that were never preempted
//! (no involuntary context switch, `getrusage(RUSAGE_THREAD)`) show the waits for the lock
//! on a loaded machine, though not the time the hypervisor takes the CPU away (steal), which
//! no thread inside the VM sees; the checks' CPU time shows what they did themselves (a
//! spinning wait for a lock included).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use sluice_core::{Algo, Nanos, Params};
use sluice_repl::SnapshotWriter;
use sluice_store::{EXPIRE_BUDGET, Store, StoreConfig};

const T0: u64 = 1_700_000_000_000_000_000;

fn main() {
    let mut args = std::env::args()
        .skip(1)
        .map(|a| a.parse::<u64>().expect("a number"));
    let keys = args.next().unwrap_or(100_000);
    let requests = args.next().unwrap_or(200_000);
    let runs = args.next().unwrap_or(3);
    let budget = args.next().map_or(EXPIRE_BUDGET, |b| b as usize);
    let shards = args.next().map_or(64, |s| s as usize);
    let mut best = vec![u64::MAX; requests as usize];
    let mut best_cpu = vec![u64::MAX; requests as usize];
    let mut steps: Vec<u64> = Vec::new();
    let mut passes: Vec<u64> = Vec::new();
    let mut step_cpu = 0;
    for _ in 0..runs {
        let store = Store::new(StoreConfig {
            shards,
            ..StoreConfig::default()
        });
        let (wall, cpu) = checks(&store, keys, requests, budget);
        fastest(&mut best, wall);
        fastest(&mut best_cpu, cpu);
        let now = Nanos(T0 + requests * 10_000);
        beside_scans(&store, keys, now);
        let (run, pass, cpu) = housekeeping(&store, now, budget);
        fastest(&mut steps, run);
        fastest(&mut passes, pass);
        step_cpu = step_cpu.max(cpu);
    }
    report("wall", &best, keys);
    report("cpu", &best_cpu, keys);
    let total: u64 = steps.iter().sum();
    println!(
        "housekeeping for 200 s past every deadline: {} steps of at most {budget} items, {total} ns in all; the longest step {} ns (CPU time: {step_cpu} ns in the worst run), the longest pass over every shard {} ns",
        steps.len(),
        steps.iter().max().unwrap_or(&0),
        passes.iter().max().unwrap_or(&0)
    );
}

/// Keeps in `best` each element's fastest run (the runs do the same work, element by element).
fn fastest(best: &mut Vec<u64>, run: Vec<u64>) {
    if best.is_empty() {
        *best = run;
    } else {
        for (b, t) in best.iter_mut().zip(run) {
            *b = (*b).min(t);
        }
    }
}

/// This thread's CPU time, in ns.
fn cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write to.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// This thread's (voluntary, involuntary) context switches so far.
fn switches() -> (i64, i64) {
    // SAFETY: all-zero bytes are a valid `rusage`, which `getrusage` then fills.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid rusage to write to.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    (ru.ru_nvcsw, ru.ru_nivcsw)
}

/// Checks of existing keys on this thread while another takes a snapshot, then drops one key
/// in ten by a scan; prints the slowest checks and how long each took.
fn beside_scans(store: &Store, keys: u64, now: Nanos) {
    let p = params();
    let done = AtomicBool::new(false);
    let mut times = Vec::new();
    let (mut unpreempted, mut parked, mut cpu) = (Vec::new(), 0, Vec::new());
    let (snapshot, drop) = std::thread::scope(|s| {
        let background = s.spawn(|| {
            let t = Instant::now();
            let mut w = SnapshotWriter::new();
            let n = store.snapshot_into(&mut w, now);
            let snapshot = (t.elapsed(), n);
            let t = Instant::now();
            let n = store.delete_where(now, |k| k.last() == Some(&b'7'));
            done.store(true, Ordering::Relaxed);
            (snapshot, (t.elapsed(), n))
        });
        let mut rng = 0x2545_F491_4F6C_DD1Du64;
        while !done.load(Ordering::Relaxed) && times.len() < 50_000_000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let key = format!("rl:{:012}", rng % keys);
            let (start, (vol, invol), c) = (Instant::now(), switches(), cpu_ns());
            let _ = store.check(key.as_bytes(), Algo::Token, &p, now, false);
            let t = start.elapsed().as_nanos() as u64;
            cpu.push(cpu_ns() - c);
            let (vol_after, invol_after) = switches();
            times.push(t);
            if invol_after == invol {
                unpreempted.push(t);
                parked += usize::from(vol_after > vol);
            }
        }
        background.join().expect("the scanning thread")
    });
    println!(
        "beside a snapshot ({} entries, {} ms) and a drop by scan ({} keys, {} ms):",
        snapshot.1,
        snapshot.0.as_millis(),
        drop.1,
        drop.0.as_millis()
    );
    report("wall", &times, keys);
    report("wall, never preempted", &unpreempted, keys);
    println!("  of which {parked} parked (waited for a lock)");
    report("cpu", &cpu, keys);
}

fn params() -> Params {
    Params {
        limit: 1_000_000,
        period: Nanos::from_secs(100_000_000),
        burst: 1_000_000,
        cost: 1,
    }
}

/// Each check's wall time and CPU time in ns, in request order.
fn checks(store: &Store, keys: u64, requests: u64, budget: usize) -> (Vec<u64>, Vec<u64>) {
    let p = params();
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut times = Vec::with_capacity(requests as usize);
    let mut cpu = Vec::with_capacity(requests as usize);
    for n in 0..requests {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let key = format!("rl:{:012}", rng % keys);
        let now = Nanos(T0 + n * 10_000);
        if n % 100 == 0 {
            for shard in 0..store.shard_count() {
                while !store.expire_some(shard, now, budget).1 {}
            }
        }
        let (start, start_cpu) = (Instant::now(), cpu_ns());
        store
            .check(key.as_bytes(), Algo::Token, &p, now, false)
            .expect("allowed");
        cpu.push(cpu_ns() - start_cpu);
        times.push(start.elapsed().as_nanos() as u64);
    }
    (times, cpu)
}

fn report(clock: &str, times: &[u64], keys: u64) {
    // What a client at -c 50 waits behind: the 50 requests served before its own.
    let window = 50;
    let (mut sum, mut worst) = (0u64, (0u64, 0usize));
    for (n, t) in times.iter().enumerate() {
        sum += t;
        if n >= window {
            sum -= times[n - window];
        }
        worst = worst.max((sum, n));
    }
    let mut sorted: Vec<(u64, usize)> = times.iter().copied().zip(0..).collect();
    sorted.sort_unstable();
    let over = |ns: u64| sorted.iter().filter(|t| t.0 > ns).count();
    println!(
        "{clock}: {} checks over {keys} keys: p99 {} ns, max {} ns, >100 µs {}, >1 ms {}; slowest {window} in a row {} ns (ending at request {})",
        times.len(),
        sorted[sorted.len() * 99 / 100].0,
        sorted[sorted.len() - 1].0,
        over(100_000),
        over(1_000_000),
        worst.0,
        worst.1
    );
    for (ns, n) in sorted.iter().rev().take(3) {
        println!("  request {n}: {ns} ns");
    }
}

/// The server's housekeeping (every shard's wheel, every 10 ms, in bounded steps) for 200
/// simulated seconds from `from`; returns each step's wall time and each pass's (every shard,
/// as the server's housekeeping runs them back to back but for its yields), in ns.
fn housekeeping(store: &Store, from: Nanos, budget: usize) -> (Vec<u64>, Vec<u64>, u64) {
    let (mut steps, mut passes, mut cpu) = (Vec::new(), Vec::new(), 0);
    for step in 1..=20_000u64 {
        let now = Nanos(from.0 + step * 10_000_000);
        let pass = Instant::now();
        for shard in 0..store.shard_count() {
            loop {
                let (t, c) = (Instant::now(), cpu_ns());
                let (_, done) = store.expire_some(shard, now, budget);
                cpu = cpu.max(cpu_ns() - c);
                steps.push(t.elapsed().as_nanos() as u64);
                if done {
                    break;
                }
            }
        }
        passes.push(pass.elapsed().as_nanos() as u64);
    }
    (steps, passes, cpu)
}
