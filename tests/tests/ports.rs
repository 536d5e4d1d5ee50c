//! One process per port: a second `sluice` started on a port the first one listens on (the
//! main port, whose workers bind with SO_REUSEPORT, the metrics port, the gRPC port) stops at
//! once, non-zero, with Redis's message naming the port; the first keeps serving alone, so a
//! limit of 3 stays 3 however many fresh connections ask. A node also claims its address for
//! its life, so two started at the same instant cannot both pass the check.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sluice_tests::{Sluice, binary, free_port, http_get, rl_check};

/// Runs `sluice --bind 127.0.0.1 args...` and waits up to 20 s for it to exit: its exit code
/// and what it logged. A process still running then is killed and the test fails.
fn second_process(args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(binary())
        .args(["--bind", "127.0.0.1"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sluice");
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("a second sluice with {args:?} was still running after 20 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut log = String::new();
    if let Some(mut err) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut err, &mut log);
    }
    (status.code(), log)
}

fn assert_refused(args: &[&str], port: u16) {
    let (code, log) = second_process(args);
    assert!(
        code.is_some_and(|c| c != 0),
        "second process with {args:?}: exit {code:?}, log:\n{log}"
    );
    let expected = format!(
        "Could not create server TCP listening socket 127.0.0.1:{port}: bind: Address already in use"
    );
    assert!(
        log.contains(&expected),
        "second process with {args:?}: no '{expected}' in its log:\n{log}"
    );
}

/// A limit of 3 checked over `n` fresh connections allows exactly 3: one bucket store.
fn allowed_over_fresh_connections(node: &Sluice, key: &str, n: usize) -> i64 {
    (0..n)
        .map(|_| {
            let mut c = node.client();
            rl_check(&mut c, &[key, "3", "1h"]).expect("RL.CHECK")[0]
        })
        .sum()
}

#[test]
fn a_second_process_on_a_taken_port_stops_and_the_first_serves_alone() {
    let metrics = free_port();
    let grpc = free_port();
    let (metrics_s, grpc_s) = (metrics.to_string(), grpc.to_string());
    let first = Sluice::start_with(&[
        "--threads",
        "2",
        "--metrics-port",
        &metrics_s,
        "--grpc-port",
        &grpc_s,
    ]);
    let main_s = first.port.to_string();

    // The main port, whose workers would join the first process's SO_REUSEPORT group.
    assert_refused(&["--port", &main_s, "--threads", "2"], first.port);
    // Each extra port, with a free main port.
    assert_refused(&["--port", "0", "--metrics-port", &metrics_s], metrics);
    assert_refused(&["--port", "0", "--grpc-port", &grpc_s], grpc);

    // The first one serves alone: every connection lands on one store.
    assert_eq!(allowed_over_fresh_connections(&first, "ports:alone", 40), 3);
    assert!(
        http_get(metrics, "/metrics").is_some_and(|b| b.contains("sluice_")),
        "the first process's metrics stopped answering"
    );
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", grpc)).is_ok(),
        "the first process's gRPC port stopped accepting"
    );
}

/// A port freed by a stopped node is free again at once (SO_REUSEADDR: connections left in
/// TIME_WAIT do not block the restart), and the probe does not stand in its own way.
#[test]
fn a_node_restarts_on_its_own_port_at_once() {
    let mut first = Sluice::start_with(&["--threads", "2"]);
    let port = first.port;
    assert_eq!(
        allowed_over_fresh_connections(&first, "ports:restart", 5),
        3
    );
    first.signal(libc::SIGTERM);
    assert!(first.wait_exit(Duration::from_secs(10)).is_some());
    let again = Sluice::start_on(port, &["--threads", "2"]);
    assert_eq!(
        allowed_over_fresh_connections(&again, "ports:restart", 5),
        3
    );
}

/// Two nodes started at the same instant could both find the port free before either listens:
/// each first claims the address (an abstract Unix socket named after it, see
/// `sluice_node::server`), and the one that finds the claim taken stops. The claim is held
/// here, as the other node would hold it.
#[test]
fn a_node_whose_address_is_claimed_stops() {
    use std::os::linux::net::SocketAddrExt;
    let port = free_port();
    let name = std::os::unix::net::SocketAddr::from_abstract_name(format!(
        "sluice-listen-127.0.0.1:{port}"
    ))
    .unwrap();
    let held = std::os::unix::net::UnixListener::bind_addr(&name).expect("claim the address");
    assert_refused(&["--port", &port.to_string()], port);
    drop(held);
    let node = Sluice::start_on(port, &[]);
    assert_eq!(allowed_over_fresh_connections(&node, "ports:claimed", 5), 3);
}
