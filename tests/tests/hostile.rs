//! Hostile clients: the node keeps serving everyone else and loses nothing it accepted.
//! Every test is bounded in count and time, and ends by checking the server is alive with its
//! state intact.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use sluice_tests::{Sentinel, Sluice, read_to_close};

/// A small deterministic PRNG (xorshift), so a failure replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

#[test]
fn random_bytes_on_many_connections() {
    let server = Sluice::start();
    let sentinel = Sentinel::write(&server);
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    std::thread::scope(|scope| {
        for t in 0..8 {
            let seed = rng.next() | 1;
            let port = server.port;
            scope.spawn(move || {
                let mut rng = Rng(seed ^ t);
                for _ in 0..25 {
                    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
                        continue;
                    };
                    s.set_read_timeout(Some(Duration::from_millis(300)))
                        .unwrap();
                    let len = (rng.next() % 4096) as usize + 1;
                    let mut junk = rng.bytes(len);
                    // Half the time, start like a real frame to get past the first byte check.
                    if rng.next().is_multiple_of(2) {
                        junk.splice(0..0, b"*3\r\n$8\r\nRL.CHECK\r\n".iter().copied());
                    }
                    let _ = s.write_all(&junk);
                    let mut buf = [0u8; 1024];
                    let _ = s.read(&mut buf);
                }
            });
        }
    });
    sentinel.assert_intact(&server);
}

#[test]
fn hostile_frames_get_protocol_errors_without_allocating_or_hanging() {
    let server = Sluice::start();
    let sentinel = Sentinel::write(&server);
    let nested = "*1\r\n".repeat(100_000);
    let long_inline = format!("PING {}\r\n", "x".repeat(200 * 1024));
    let frames: Vec<(&str, Vec<u8>)> = vec![
        ("bulk length 2^31", b"*1\r\n$2147483648\r\n".to_vec()),
        ("array length 2^31", b"*2147483648\r\n".to_vec()),
        ("negative bulk length", b"*1\r\n$-2\r\n".to_vec()),
        ("nested array headers", nested.into_bytes()),
        ("200 KB inline line", long_inline.into_bytes()),
        (
            "huge bulk count string",
            format!("*1\r\n${}", "9".repeat(100_000)).into_bytes(),
        ),
    ];
    for (what, frame) in frames {
        let mut s = server.raw();
        let _ = s.write_all(&frame);
        let (reply, closed) = read_to_close(&mut s);
        assert!(
            reply.starts_with("-ERR Protocol error"),
            "{what}: {reply:?}"
        );
        assert!(closed, "{what}: connection closed");
    }
    // A declared 500 MB bulk that never arrives: the server must not reserve it.
    let before = server.rss();
    let mut held = Vec::new();
    for _ in 0..20 {
        let mut s = server.raw();
        s.write_all(b"*2\r\n$4\r\nECHO\r\n$524288000\r\nabc")
            .unwrap();
        held.push(s);
    }
    // Every held connection is the server's (a deadline, not a guess), then RSS is watched
    // over a span in which it would have grown by gigabytes had it reserved the bulks.
    let deadline = Instant::now() + Duration::from_secs(10);
    while sluice_tests::info_field(server.port, "connected_clients") < Some(21) {
        assert!(
            Instant::now() < deadline,
            "the held connections never all arrived"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let watched = Instant::now();
    while watched.elapsed() < Duration::from_millis(300) {
        let after = server.rss();
        assert!(
            after < before + 64 * 1024 * 1024,
            "RSS grew from {before} to {after}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Truncated frames: closing mid-frame is just a disconnect.
    for cut in [
        b"*3\r\n$8\r\nRL.CH".as_slice(),
        b"*3\r\n$8\r\nRL.CHECK\r\n$1",
        b"PING",
    ] {
        let mut s = server.raw();
        s.write_all(cut).unwrap();
        drop(s);
    }
    drop(held);
    sentinel.assert_intact(&server);
}

#[test]
fn thousands_of_idle_connections_and_maxclients() {
    raise_own_fd_limit(8192);
    let server = Sluice::start_with(&["--maxclients", "3000"]);
    let sentinel = Sentinel::write(&server);
    let mut idle = Vec::new();
    for _ in 0..2_990 {
        idle.push(TcpStream::connect(("127.0.0.1", server.port)).expect("connect idle"));
    }
    // Still serving with 2,990 idle clients.
    sentinel.assert_intact(&server);
    // Fill to the limit; the next one is told why and closed.
    let mut c = server.client();
    let connected = wait_for_clients(&mut c, 2_991);
    let mut extra = Vec::new();
    for _ in connected..3_000 {
        extra.push(TcpStream::connect(("127.0.0.1", server.port)).unwrap());
    }
    wait_for_clients(&mut c, 3_000);
    let mut refused = server.raw();
    let (reply, closed) = read_to_close(&mut refused);
    assert_eq!(reply, "-ERR max number of clients reached\r\n");
    assert!(closed);
    drop(extra);
    drop(idle);
    drop(c);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut c = server.client();
        if wait_for_clients(&mut c, 0) <= 1 || Instant::now() > deadline {
            break;
        }
    }
    sentinel.assert_intact(&server);
}

/// Polls INFO until `connected_clients` reaches `want` (or 10 s); returns the last value seen.
fn wait_for_clients(c: &mut redis::Connection, want: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let info: String = redis::cmd("INFO").arg("clients").query(c).unwrap();
        let n: usize = info
            .lines()
            .find_map(|l| l.strip_prefix("connected_clients:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        if n == want || (want == 0 && n <= 1) || Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn raise_own_fd_limit(n: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write `lim`, a plain struct of integers we own,
    // through a pointer valid for its size.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = n.min(lim.rlim_max);
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
}

#[test]
fn a_byte_at_a_time_client_is_served_and_does_not_stall_others() {
    let server = Sluice::start_with(&["--threads", "1"]);
    let sentinel = Sentinel::write(&server);
    let frame = b"*4\r\n$8\r\nRL.CHECK\r\n$4\r\nslow\r\n$1\r\n5\r\n$2\r\n10\r\n";
    let port = server.port;
    let slow = std::thread::spawn(move || {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_nodelay(true).unwrap();
        for b in frame {
            s.write_all(&[*b]).unwrap();
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut buf = [0u8; 64];
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let n = s.read(&mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    });
    // Meanwhile, on the same single thread, another client gets prompt answers.
    let mut c = server.client();
    let started = Instant::now();
    for _ in 0..50 {
        let _: String = redis::cmd("PING").query(&mut c).unwrap();
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "others were stalled"
    );
    let reply = slow.join().unwrap();
    assert!(
        reply.starts_with("*5\r\n:1\r\n:5\r\n:4\r\n:-1\r\n"),
        "{reply:?}"
    );
    sentinel.assert_intact(&server);
}

#[test]
fn a_client_that_never_reads_is_disconnected_at_the_output_limit() {
    let server = Sluice::start_with(&["--client-output-buffer-limit", "1mb"]);
    let sentinel = Sentinel::write(&server);
    let mut s = server.raw();
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    // Each ECHO of 64 KB asks for 64 KB of reply; never read any of it.
    let payload = "x".repeat(64 * 1024);
    let frame = format!("*2\r\n$4\r\nECHO\r\n${}\r\n{payload}\r\n", payload.len());
    let started = Instant::now();
    let mut closed = false;
    while started.elapsed() < Duration::from_secs(20) {
        if s.write_all(frame.as_bytes()).is_err() {
            closed = true;
            break;
        }
    }
    assert!(closed, "the server closed the non-reading client");
    assert!(
        server.wait_for_log("output buffer limit"),
        "{}",
        server.log()
    );
    let rss = server.rss();
    assert!(rss < 256 * 1024 * 1024, "memory stayed bounded: {rss}");
    sentinel.assert_intact(&server);
}

#[test]
fn a_huge_unfinished_frame_hits_the_query_buffer_limit() {
    let server = Sluice::start_with(&["--client-query-buffer-limit", "1mb"]);
    let sentinel = Sentinel::write(&server);
    let mut s = server.raw();
    s.write_all(b"*2\r\n$4\r\nECHO\r\n$10000000\r\n").unwrap();
    let chunk = vec![b'y'; 64 * 1024];
    let mut closed = false;
    for _ in 0..100 {
        if s.write_all(&chunk).is_err() {
            closed = true;
            break;
        }
    }
    if !closed {
        let (_, c) = read_to_close(&mut s);
        closed = c;
    }
    assert!(closed);
    assert!(
        server.wait_for_log("query buffer limit"),
        "{}",
        server.log()
    );
    sentinel.assert_intact(&server);
}

#[test]
fn idle_timeout_closes_silent_clients_only() {
    // About real time: the timeout is one second.
    let server = Sluice::start_with(&["--timeout", "1"]);
    let mut idle = server.raw();
    let mut busy = server.client();
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(1_800) {
        let _: String = redis::cmd("PING").query(&mut busy).unwrap();
        std::thread::sleep(Duration::from_millis(100));
    }
    let (_, closed) = read_to_close(&mut idle);
    assert!(closed, "idle client closed");
    let _: String = redis::cmd("PING").query(&mut busy).unwrap();
}

/// A "primary" that answers the replica's handshake and then announces a 4 EiB snapshot. The
/// replica reserves room as bytes arrive, not as the header claims, so it neither aborts nor
/// swells, keeps serving, and drops the link when the peer closes.
#[test]
fn a_garbage_snapshot_length_from_a_primary_does_not_take_the_replica_down() {
    let fake = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = fake.local_addr().unwrap().port().to_string();
    let replica = Sluice::start_with(&["--replicaof", &format!("127.0.0.1:{port}")]);
    let (mut link, _) = fake.accept().unwrap();
    link.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let mut buf = [0u8; 4096];
        let n = link.read(&mut buf).unwrap();
        assert!(n > 0, "the replica closed the link during its handshake");
        seen.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&buf[..n]).to_uppercase();
        if text.contains("$5\r\nPSYNC\r\n") {
            let id = "a".repeat(40);
            let header = format!("+FULLRESYNC {id} 0\r\n$4611686018427387904\r\n");
            link.write_all(header.as_bytes()).unwrap();
            link.write_all(&[0u8; 4096]).unwrap();
            break;
        }
        let reply: &[u8] = if text.contains("PING") {
            b"+PONG\r\n"
        } else {
            b"+OK\r\n"
        };
        link.write_all(reply).unwrap();
    }
    assert!(
        String::from_utf8_lossy(&seen)
            .to_uppercase()
            .contains("PSYNC"),
        "no PSYNC within the deadline"
    );
    // The replica is reading the snapshot: it took the header and the first bytes.
    let syncing = sluice_tests::wait_until(Duration::from_secs(10), || {
        (sluice_tests::info_field(replica.port, "master_sync_in_progress") == Some(1)).then_some(())
    });
    assert!(
        syncing.is_some(),
        "the replica never started reading the snapshot; log:\n{}",
        replica.log()
    );
    let mut c = replica.client();
    let pong: String = redis::cmd("PING").query(&mut c).unwrap();
    assert_eq!(pong, "PONG");
    drop(link);
    drop(fake);
    assert!(
        replica.wait_for_log("down: primary closed the connection during the snapshot"),
        "the replica did not report the broken sync; log:\n{}",
        replica.log()
    );
    let pong: String = redis::cmd("PING").query(&mut c).unwrap();
    assert_eq!(pong, "PONG");
    assert!(
        replica.rss() < 512 << 20,
        "the replica's memory grew to {} bytes on a claimed length",
        replica.rss()
    );
}
