//! Starting and stopping: SIGTERM, SIGINT and SHUTDOWN exit 0 after the replies in flight.

use std::time::Duration;

use sluice_tests::Sluice;

#[test]
fn sigterm_exits_zero() {
    let mut server = Sluice::start();
    let mut c = server.client();
    let _: String = redis::cmd("PING").query(&mut c).unwrap();
    server.signal(libc::SIGTERM);
    let status = server.wait_exit(Duration::from_secs(10)).expect("exits");
    assert!(status.success(), "{status:?}\n{}", server.log());
}

#[test]
fn sigint_exits_zero() {
    let mut server = Sluice::start();
    server.signal(libc::SIGINT);
    let status = server.wait_exit(Duration::from_secs(10)).expect("exits");
    assert!(status.success(), "{status:?}");
}

#[test]
fn shutdown_command_exits_zero() {
    let mut server = Sluice::start();
    let mut c = server.client();
    let _ = redis::cmd("SHUTDOWN").query::<()>(&mut c);
    let status = server.wait_exit(Duration::from_secs(10)).expect("exits");
    assert!(status.success(), "{status:?}");
}

#[test]
fn threads_flag_serves_on_every_thread() {
    let server = Sluice::start_with(&["--threads", "3"]);
    // Connections spread over the SO_REUSEPORT listeners; every one must be served.
    for _ in 0..12 {
        let mut c = server.client();
        let pong: String = redis::cmd("PING").query(&mut c).unwrap();
        assert_eq!(pong, "PONG");
    }
    let mut c = server.client();
    let threads: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("threads")
        .query(&mut c)
        .unwrap();
    assert_eq!(threads[1], "3");
}
