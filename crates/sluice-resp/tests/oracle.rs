//! Property tests with `redis-protocol` as the oracle.
//!
//! - Parser: valid frames encoded by redis-protocol, pipelined and cut into random chunks, decode
//!   to exactly the arguments that were encoded.
//! - Parser robustness: random bytes and random mutations of valid frames never panic, never make
//!   the parser grow the buffer, and decode the same way however the bytes are chunked.
//! - Encoder: what `reply` writes decodes with redis-protocol's RESP2 and RESP3 decoders to the
//!   value that was meant.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use redis_protocol::resp2::types::{OwnedFrame as Resp2, Resp2Frame as _};
use redis_protocol::resp3::types::OwnedFrame as Resp3;
use redis_protocol::{resp2, resp3};
use sluice_resp::reply::{self, Proto};
use sluice_resp::{Limits, Parser, ProtocolErrorKind};

mod common;
use common::{mutate, mutation, sorted_cuts};

fn encode_request(args: &[Vec<u8>]) -> Vec<u8> {
    let frame = Resp2::Array(args.iter().cloned().map(Resp2::BulkString).collect());
    let mut buf = vec![0; frame.encode_len(false)];
    let n = resp2::encode::encode(&mut buf, &frame, false).expect("redis-protocol encodes");
    buf.truncate(n);
    buf
}

/// What a whole parse run produced: every request's arguments, then how it ended.
#[derive(Debug, PartialEq)]
struct Outcome {
    requests: Vec<Vec<Bytes>>,
    end: End,
}

#[derive(Debug, PartialEq)]
enum End {
    /// Waiting for more bytes, with this many left in the buffer.
    Pending(usize),
    Error(ProtocolErrorKind),
}

/// Feeds `input` to one parser in chunks ending at `cuts`, draining every request after each
/// chunk, as a connection does after each read.
fn run(input: &[u8], cuts: &[usize]) -> Outcome {
    let mut parser = Parser::new(Limits::default());
    let mut buf = BytesMut::new();
    let mut requests = Vec::new();
    let mut fed = 0;
    let ends = cuts
        .iter()
        .map(|&c| c.min(input.len()))
        .chain(std::iter::once(input.len()));
    for end in ends {
        if end < fed {
            continue;
        }
        buf.extend_from_slice(&input[fed..end]);
        fed = end;
        loop {
            let before = buf.len();
            match parser.parse(&mut buf) {
                Ok(Some(request)) => {
                    assert!(!request.is_empty(), "a request has a command name");
                    assert!(buf.len() < before, "a request consumes bytes");
                    requests.push(
                        (0..request.len())
                            .map(|i| request.arg_bytes(i).expect("in range"))
                            .collect::<Vec<_>>(),
                    );
                }
                Ok(None) => {
                    assert!(buf.len() <= before, "the parser never adds bytes");
                    break;
                }
                Err(e) => {
                    assert!(e.to_string().starts_with("Protocol error: "));
                    return Outcome {
                        requests,
                        end: End::Error(e.kind()),
                    };
                }
            }
        }
    }
    Outcome {
        requests,
        end: End::Pending(buf.len()),
    }
}

fn args_strategy() -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 0..16)
}

/// Random input built from protocol pieces (`*N\r\n`, `$N\r\n`, line ends, quotes) and random
/// bytes, so that it reaches every parser state, not just the inline splitter.
fn protocol_bytes() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        (-2i64..5).prop_map(|n| format!("*{n}\r\n").into_bytes()),
        (-2i64..9).prop_map(|n| format!("${n}\r\n").into_bytes()),
        prop::sample::select(vec![
            &b"\r\n"[..],
            b"\n",
            b"\r",
            b" ",
            b"\"",
            b"'",
            b"\\x4",
            b"*",
            b"$",
            b"PING",
        ])
        .prop_map(<[u8]>::to_vec),
        prop::collection::vec(any::<u8>(), 0..8),
    ];
    prop::collection::vec(piece, 0..40).prop_map(|pieces| pieces.concat())
}

proptest! {
    // Failing cases are kept in the crate's `proptest-regressions/` (the path is relative to the
    // crate root, where cargo runs integration tests), to be committed with the fix.
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/oracle.txt",
        ))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn valid_frames_in_random_chunks_decode_to_their_args(
        frames in prop::collection::vec(args_strategy(), 1..5),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        let input: Vec<u8> = frames.iter().flat_map(|f| encode_request(f)).collect();
        let outcome = run(&input, &sorted_cuts(input.len(), cuts));
        // `*0` is no request: Redis skips it, and so do we.
        let want: Vec<Vec<Bytes>> = frames
            .into_iter()
            .filter(|f| !f.is_empty())
            .map(|f| f.into_iter().map(Bytes::from).collect())
            .collect();
        prop_assert_eq!(outcome, Outcome { requests: want, end: End::Pending(0) });
    }

    /// The prefetch hint reads the key of the frame a buffer starts with: the frame's second
    /// argument once its header and that argument have arrived, if the frame is the command
    /// asked for; never anything else.
    #[test]
    fn peek_key_finds_the_second_argument_or_nothing(
        name in prop_oneof![
            Just(b"RL.CHECK".to_vec()),
            Just(b"rl.Check".to_vec()),
            Just(b"RL.CHECKS".to_vec()),
            Just(b"INCR".to_vec()),
            prop::collection::vec(any::<u8>(), 8..=8),
        ],
        args in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..120), 0..11),
        rest in prop::collection::vec(args_strategy(), 0..2),
        cut in any::<usize>(),
    ) {
        let mut frame = vec![name.clone()];
        frame.extend(args.iter().cloned());
        let mut input = encode_request(&frame);
        let whole = input.len();
        input.extend(rest.iter().flat_map(|f| encode_request(f)));
        let key = args.first().map(Vec::as_slice);
        let peeked = Parser::peek_key(&input, b"RL.CHECK");
        // The whole frame: the key, if the frame is that command with 2 to 9 arguments and a
        // key of 1 to 99 bytes.
        if name.eq_ignore_ascii_case(b"RL.CHECK")
            && frame.len() <= 9
            && key.is_some_and(|k| (1..100).contains(&k.len()))
        {
            prop_assert_eq!(peeked, key);
        } else {
            prop_assert!(peeked.is_none() || peeked == key, "{:?}", peeked);
        }
        // Any prefix: the key or nothing.
        let prefix = &input[..cut % (whole + 1)];
        let peeked = Parser::peek_key(prefix, b"RL.CHECK");
        prop_assert!(peeked.is_none() || peeked == key, "{:?} from {:?}", peeked, prefix);
    }

    #[test]
    fn peek_key_never_panics_on_any_bytes(input in protocol_bytes()) {
        if let Some(key) = Parser::peek_key(&input, b"RL.CHECK") {
            let start = key.as_ptr() as usize - input.as_ptr() as usize;
            prop_assert!(start + key.len() <= input.len());
        }
    }

    #[test]
    fn random_bytes_never_panic_and_chunking_does_not_matter(
        input in protocol_bytes(),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        let whole = run(&input, &[]);
        let chunked = run(&input, &sorted_cuts(input.len(), cuts));
        prop_assert_eq!(whole, chunked);
    }

    #[test]
    fn mutated_frames_never_panic_and_chunking_does_not_matter(
        frames in prop::collection::vec(args_strategy(), 1..3),
        mutations in prop::collection::vec(mutation(b"*$\r\n0-9\"'"), 1..4),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        let mut input: Vec<u8> = frames.iter().flat_map(|f| encode_request(f)).collect();
        mutate(&mut input, &mutations);
        let whole = run(&input, &[]);
        let chunked = run(&input, &sorted_cuts(input.len(), cuts));
        prop_assert_eq!(whole, chunked);
    }

    #[test]
    fn integers_round_trip(n in any::<i64>()) {
        let mut out = BytesMut::new();
        reply::integer(&mut out, n);
        prop_assert_eq!(decode2(&out), Resp2::Integer(n));
        prop_assert_eq!(decode3(&out), Resp3::Number { data: n, attributes: None });
    }

    #[test]
    fn bulk_strings_round_trip(b in prop::collection::vec(any::<u8>(), 0..128)) {
        let mut out = BytesMut::new();
        reply::bulk(&mut out, &b);
        prop_assert_eq!(decode2(&out), Resp2::BulkString(b.clone()));
        prop_assert_eq!(decode3(&out), Resp3::BlobString { data: b, attributes: None });
    }

    #[test]
    fn arrays_round_trip(
        items in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..32), 0..16),
        values in prop::collection::vec(any::<i64>(), 0..8),
    ) {
        let mut out = BytesMut::new();
        reply::array(&mut out, items.len() + 1);
        for item in &items {
            reply::bulk(&mut out, item);
        }
        reply::int_array(&mut out, &values);
        let mut want: Vec<Resp2> = items.into_iter().map(Resp2::BulkString).collect();
        want.push(Resp2::Array(values.into_iter().map(Resp2::Integer).collect()));
        prop_assert_eq!(decode2(&out), Resp2::Array(want));
    }

    #[test]
    fn doubles_round_trip(v in prop_oneof![
        any::<f64>(),
        (-1_000_000i64..1_000_000).prop_map(|n| n as f64 / 1000.0),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(f64::NAN),
    ]) {
        let mut out = BytesMut::new();
        reply::double(&mut out, Proto::Resp3, v);
        match decode3(&out) {
            Resp3::Double { data, .. } => prop_assert!(
                data.to_bits() == v.to_bits() || (data.is_nan() && v.is_nan()),
                "{:?} came back as {:?} from {:?}", v, data, out
            ),
            other => prop_assert!(false, "not a double: {:?}", other),
        }
        let mut out = BytesMut::new();
        reply::double(&mut out, Proto::Resp2, v);
        match decode2(&out) {
            Resp2::BulkString(text) => {
                let data: f64 = std::str::from_utf8(&text).unwrap().parse().unwrap();
                prop_assert!(data.to_bits() == v.to_bits() || (data.is_nan() && v.is_nan()));
            }
            other => prop_assert!(false, "not a bulk string: {:?}", other),
        }
    }
}

fn decode2(buf: &[u8]) -> Resp2 {
    let (frame, used) = resp2::decode::decode(buf)
        .expect("valid RESP2")
        .expect("a complete RESP2 frame");
    assert_eq!(used, buf.len(), "one frame, nothing after it");
    frame
}

fn decode3(buf: &[u8]) -> Resp3 {
    let (frame, used) = resp3::decode::complete::decode(buf)
        .expect("valid RESP3")
        .expect("a complete RESP3 frame");
    assert_eq!(used, buf.len(), "one frame, nothing after it");
    frame
}

#[test]
fn resp3_aggregates_and_scalars_decode() {
    let mut out = BytesMut::new();
    reply::map(&mut out, Proto::Resp3, 1);
    reply::bulk(&mut out, b"proto");
    reply::integer(&mut out, 3);
    let Resp3::Map { data, .. } = decode3(&out) else {
        panic!("not a map");
    };
    assert_eq!(
        data.get(&Resp3::BlobString {
            data: b"proto".to_vec(),
            attributes: None
        }),
        Some(&Resp3::Number {
            data: 3,
            attributes: None
        })
    );

    let mut out = BytesMut::new();
    reply::set(&mut out, Proto::Resp3, 2);
    reply::bulk(&mut out, b"a");
    reply::bulk(&mut out, b"b");
    let Resp3::Set { data, .. } = decode3(&out) else {
        panic!("not a set");
    };
    assert_eq!(data.len(), 2);

    let mut out = BytesMut::new();
    reply::null(&mut out, Proto::Resp3);
    assert_eq!(decode3(&out), Resp3::Null);
    let mut out = BytesMut::new();
    reply::null(&mut out, Proto::Resp2);
    assert_eq!(decode2(&out), Resp2::Null);
    let mut out = BytesMut::new();
    reply::null_array(&mut out, Proto::Resp2);
    assert_eq!(decode2(&out), Resp2::Null);

    let mut out = BytesMut::new();
    reply::boolean(&mut out, Proto::Resp3, true);
    assert_eq!(
        decode3(&out),
        Resp3::Boolean {
            data: true,
            attributes: None
        }
    );

    let mut out = BytesMut::new();
    reply::verbatim(&mut out, Proto::Resp3, "txt", b"# Server\r\n");
    assert_eq!(
        decode3(&out),
        Resp3::VerbatimString {
            data: b"# Server\r\n".to_vec(),
            format: redis_protocol::resp3::types::VerbatimStringFormat::Text,
            attributes: None,
        }
    );

    let mut out = BytesMut::new();
    reply::map(&mut out, Proto::Resp2, 2);
    for item in [&b"a"[..], b"1", b"b", b"2"] {
        reply::bulk(&mut out, item);
    }
    let Resp2::Array(items) = decode2(&out) else {
        panic!("not an array");
    };
    assert_eq!(items.len(), 4);

    let mut out = BytesMut::new();
    reply::error(
        &mut out,
        "WRONGTYPE Operation against a key holding the wrong kind of value",
    );
    assert_eq!(
        decode2(&out),
        Resp2::Error("WRONGTYPE Operation against a key holding the wrong kind of value".into())
    );
    let mut out = BytesMut::new();
    reply::simple(&mut out, "PONG");
    assert_eq!(decode2(&out), Resp2::SimpleString(b"PONG".to_vec()));
}
