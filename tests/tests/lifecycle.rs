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

#[test]
fn shutdown_in_a_pipeline_answers_what_came_before_it() {
    use std::io::Write;
    let mut server = Sluice::start();
    let mut s = server.raw();
    s.write_all(b"RL.CHECK k 5 10\r\nINCR n\r\nSHUTDOWN\r\nPING\r\n")
        .unwrap();
    let (reply, closed) = sluice_tests::read_to_close(&mut s);
    assert!(closed);
    assert!(
        reply.starts_with("*5\r\n:1\r\n:5\r\n:4\r\n:-1\r\n:") && reply.ends_with(":1\r\n"),
        "replies before SHUTDOWN arrive, nothing after: {reply:?}"
    );
    let status = server.wait_exit(Duration::from_secs(10)).expect("exits");
    assert!(status.success(), "{status:?}");
}
