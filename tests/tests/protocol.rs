//! The wire, with raw sockets: pipelining, split frames, inline commands, protocol errors.

use std::io::{Read, Write};
use std::time::Duration;

use sluice_tests::{Sluice, read_exact_str, read_to_close};

#[test]
fn a_pipelined_batch_gets_every_reply_in_order() {
    let server = Sluice::start();
    let mut s = server.raw();
    let mut batch = Vec::new();
    for i in 0..100 {
        batch.extend_from_slice(
            format!("*2\r\n$4\r\nECHO\r\n${}\r\n{}\r\n", i.to_string().len(), i).as_bytes(),
        );
    }
    s.write_all(&batch).unwrap();
    let expected: String = (0..100)
        .map(|i| format!("${}\r\n{}\r\n", i.to_string().len(), i))
        .collect();
    assert_eq!(read_exact_str(&mut s, expected.len()), expected);
}

#[test]
fn a_frame_split_across_writes_is_reassembled() {
    let server = Sluice::start();
    let mut s = server.raw();
    let frame = b"*4\r\n$8\r\nRL.CHECK\r\n$5\r\nsplit\r\n$1\r\n5\r\n$2\r\n10\r\n";
    for chunk in frame.chunks(3) {
        s.write_all(chunk).unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    let reply = read_exact_str(&mut s, "*5\r\n:1\r\n:5\r\n:4\r\n:-1\r\n".len() + 7);
    assert!(
        reply.starts_with("*5\r\n:1\r\n:5\r\n:4\r\n:-1\r\n:"),
        "{reply:?}"
    );
}

#[test]
fn inline_commands_work_like_redis() {
    let server = Sluice::start();
    let mut s = server.raw();
    s.write_all(b"PING\r\nECHO \"a b\"\r\n\r\nRL.CHECK inline 2 10\n")
        .unwrap();
    let expected = "+PONG\r\n$3\r\na b\r\n*5\r\n:1\r\n:2\r\n:1\r\n:-1\r\n:";
    let got = read_exact_str(&mut s, expected.len());
    assert_eq!(got, expected);
}

#[test]
fn garbage_gets_a_protocol_error_and_a_closed_connection_while_others_go_on() {
    let server = Sluice::start();
    let mut good = server.raw();
    good.write_all(b"*1\r\n$4\r\nPING\r\n").unwrap();
    assert_eq!(read_exact_str(&mut good, 7), "+PONG\r\n");
    for garbage in [
        &b"*2\r\n$4\r\nECHO\r\n!oops\r\n"[..],
        b"*1\r\n$-5\r\n",
        b"*abc\r\n",
        b"*1\r\n$99999999999\r\n",
        b"ECHO \"unbalanced\r\n",
    ] {
        let mut bad = server.raw();
        bad.write_all(garbage).unwrap();
        let (reply, closed) = read_to_close(&mut bad);
        assert!(
            reply.starts_with("-ERR Protocol error"),
            "{garbage:?} -> {reply:?}"
        );
        assert!(closed, "connection closed after {garbage:?}");
    }
    // The well-behaved client is unaffected.
    good.write_all(b"PING\r\n").unwrap();
    assert_eq!(read_exact_str(&mut good, 7), "+PONG\r\n");
}

#[test]
fn a_bad_argument_is_an_error_reply_and_the_connection_goes_on() {
    let server = Sluice::start();
    let mut s = server.raw();
    s.write_all(b"RL.CHECK k 0 10\r\nPING\r\n").unwrap();
    let mut buf = vec![0u8; 512];
    let mut got = String::new();
    while !got.ends_with("+PONG\r\n") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed early: {got:?}");
        got.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert!(got.starts_with("-ERR limit"), "{got:?}");
}

#[test]
fn quit_replies_ok_then_closes() {
    let server = Sluice::start();
    let mut s = server.raw();
    s.write_all(b"QUIT\r\nPING\r\n").unwrap();
    let (reply, closed) = read_to_close(&mut s);
    assert_eq!(reply, "+OK\r\n");
    assert!(closed);
}
