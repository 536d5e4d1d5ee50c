//! `machine-floor`: what this machine charges any server for a request, before the server's own
//! work. It prices the three costs that `scripts/cpu-per-request.sh` cannot separate:
//!
//! - one system call that does nothing (a `recv` on an empty non-blocking socket: EAGAIN), the
//!   toll of every kernel entry, which mitigations such as IBRS and PTI raise;
//! - the kernel's side of one pipelined batch over loopback TCP, as a server sees it: reading
//!   16 requests and writing their 16 replies (`-P 16`), timed on the server's socket only;
//! - one dependent load that misses every cache, in a 40 MB array of 4 KB pages (the size of a
//!   million buckets' table), and one that hits in a 1 MB array.
//!
//! Run with `cargo run --release -p sluice-benches --bin machine-floor`, pinned
//! like the servers of `cpu-per-request.sh` (`taskset -c 0`). Each figure is the best of 5 runs.

use std::hint::black_box;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::time::Instant;

const RUNS: usize = 5;

fn main() -> std::io::Result<()> {
    let syscall = best(|| empty_recv(200_000))?;
    let ping = best(|| batch(&b"*1\r\n$4\r\nPING\r\n".repeat(16), b"+PONG\r\n", 50_000))?;
    let check_request =
        b"*4\r\n$8\r\nRL.CHECK\r\n$16\r\nrlt:000000123456\r\n$7\r\n1000000\r\n$9\r\n100000000\r\n";
    let check_reply = b"*5\r\n:0\r\n:1000000\r\n:999999\r\n:-1\r\n:100\r\n";
    let check = best(|| batch(&check_request.repeat(16), check_reply, 50_000))?;
    let miss = best(|| Ok(chase(40 << 20, 2_000_000)))?;
    let hit = best(|| Ok(chase(1 << 20, 2_000_000)))?;

    println!("Machine floor (best of {RUNS} runs; pin with taskset -c 0 to match the servers)");
    println!();
    println!("| cost | ns |");
    println!("|---|---|");
    println!("| one system call that does nothing (recv → EAGAIN) | {syscall:.0} |");
    println!(
        "| loopback TCP, server side of a -P 16 PING batch: read 16 + write 16 replies | {ping:.0} |"
    );
    println!("|   … per request | {:.0} |", ping / 16.0);
    println!("| loopback TCP, server side of a -P 16 RL.CHECK batch | {check:.0} |");
    println!("|   … per request | {:.0} |", check / 16.0);
    println!("| dependent load, 40 MB array (cache and TLB miss) | {miss:.1} |");
    println!("| dependent load, 1 MB array (cache hit) | {hit:.1} |");
    Ok(())
}

/// The lowest of [`RUNS`] measurements.
fn best(mut f: impl FnMut() -> std::io::Result<f64>) -> std::io::Result<f64> {
    let mut low = f64::INFINITY;
    for _ in 0..RUNS {
        low = low.min(f()?);
    }
    Ok(low)
}

/// Nanoseconds per `recv` on an empty non-blocking socket.
fn empty_recv(n: u32) -> std::io::Result<f64> {
    let socket = UdpSocket::bind("127.0.0.1:0")?;
    socket.set_nonblocking(true)?;
    let mut buf = [0u8; 64];
    let started = Instant::now();
    for _ in 0..n {
        match socket.recv(&mut buf) {
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            other => {
                return Err(std::io::Error::other(format!(
                    "expected EAGAIN, got {other:?}"
                )));
            }
        }
    }
    Ok(started.elapsed().as_nanos() as f64 / f64::from(n))
}

/// Nanoseconds the server's side spends in one batch: reading `request` (already sent by the
/// client) and writing 16 × `reply`. The client's send and read are outside the timed part, as
/// they are another process's cost under `redis-benchmark`.
fn batch(request: &[u8], reply: &[u8], n: u32) -> std::io::Result<f64> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let mut client = TcpStream::connect(listener.local_addr()?)?;
    let (mut server, _) = listener.accept()?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    let replies = reply.repeat(16);
    let mut buf = vec![0u8; 64 * 1024];
    let mut timed = 0u128;
    for _ in 0..n {
        client.write_all(request)?;
        let started = Instant::now();
        let mut got = 0;
        while got < request.len() {
            match server.read(&mut buf)? {
                0 => return Err(ErrorKind::UnexpectedEof.into()),
                k => got += k,
            }
        }
        server.write_all(&replies)?;
        timed += started.elapsed().as_nanos();
        let mut got = 0;
        while got < replies.len() {
            match client.read(&mut buf)? {
                0 => return Err(ErrorKind::UnexpectedEof.into()),
                k => got += k,
            }
        }
    }
    Ok(timed as f64 / f64::from(n))
}

/// Nanoseconds per load in a random cycle through `bytes` of memory, one 64-byte line a step,
/// each load's address coming from the one before (so no two overlap).
fn chase(bytes: usize, steps: u32) -> f64 {
    const LINE: usize = 64 / std::mem::size_of::<usize>();
    let lines = bytes / 64;
    // A random cyclic order of the lines (Sattolo's shuffle, xorshift random numbers).
    let mut order: Vec<usize> = (0..lines).collect();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for i in (1..lines).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let j = (x % i as u64) as usize;
        order.swap(i, j);
    }
    let mut next = vec![0usize; lines * LINE];
    for w in 0..lines {
        next[order[w] * LINE] = order[(w + 1) % lines] * LINE;
    }
    let mut at = order[0] * LINE;
    let started = Instant::now();
    for _ in 0..steps {
        at = next[at];
    }
    black_box(at);
    started.elapsed().as_nanos() as f64 / f64::from(steps)
}
