//! Property tests of the reply decoder ([`sluice_resp::value`]) with `redis-protocol` as the
//! oracle.
//!
//! - Valid replies: RESP2 and RESP3 frames (with attributes) encoded by redis-protocol,
//!   pipelined and cut into random chunks, decode one by one to what redis-protocol decodes.
//! - Hostile bytes: random protocol pieces and mutations of valid replies never panic; whenever
//!   the decoder returns a value, redis-protocol decodes the same value from the same bytes, and
//!   whenever redis-protocol decodes a whole value, the decoder does not wait for more.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use redis_protocol::resp3;
use redis_protocol::resp3::types::{
    FrameMap, OwnedFrame as Frame, Resp3Frame as _, VerbatimStringFormat,
};
use sluice_resp::value::{self, Garbage, Value};

mod common;
use common::{mutate, mutation, sorted_cuts};

fn encode(frame: &Frame) -> Vec<u8> {
    let mut buf = vec![0; frame.encode_len(false)];
    let n =
        resp3::encode::complete::encode(&mut buf, frame, false).expect("redis-protocol encodes");
    buf.truncate(n);
    buf
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// What the decoder should make of the oracle's frame (attributes dropped); `None` for the
/// pieces of a streamed value (`;`, `.`), which the decoder refuses.
fn from_oracle(frame: Frame) -> Option<Value> {
    let all = |items: Vec<Frame>| items.into_iter().map(from_oracle).collect::<Option<_>>();
    Some(match frame {
        Frame::BlobString { data, .. } => Value::Bulk(Bytes::from(data)),
        Frame::BlobError { data, .. } => Value::Error(lossy(&data)),
        Frame::SimpleString { data, .. } => Value::Simple(lossy(&data)),
        Frame::SimpleError { data, .. } => Value::Error(data),
        Frame::Boolean { data, .. } => Value::Boolean(data),
        Frame::Null => Value::Nil,
        Frame::Number { data, .. } => Value::Int(data),
        Frame::Double { data, .. } => Value::Double(data),
        Frame::BigNumber { data, .. } => Value::BigNumber(lossy(&data)),
        Frame::VerbatimString { data, format, .. } => Value::Verbatim {
            format: match format {
                VerbatimStringFormat::Text => "txt".into(),
                VerbatimStringFormat::Markdown => "mkd".into(),
            },
            text: Bytes::from(data),
        },
        Frame::Array { data, .. } => Value::Array(all(data)?),
        Frame::Set { data, .. } => Value::Set(all(data.into_iter().collect())?),
        Frame::Push { data, .. } => Value::Push(all(data)?),
        Frame::Map { data, .. } => Value::Map(
            data.into_iter()
                .map(|(k, v)| Some((from_oracle(k)?, from_oracle(v)?)))
                .collect::<Option<_>>()?,
        ),
        Frame::ChunkedString(_) | Frame::Hello { .. } => return None,
    })
}

/// Maps and sets in a fixed order and without repeats: the oracle keeps them in hash order and
/// keeps one of each member (the last value of a repeated key), the decoder keeps what was sent.
fn canon(v: Value) -> Value {
    let key = |v: &Value| format!("{v:?}");
    match v {
        Value::Array(items) => Value::Array(items.into_iter().map(canon).collect()),
        Value::Push(items) => Value::Push(items.into_iter().map(canon).collect()),
        Value::Set(items) => {
            let mut items: Vec<Value> = items.into_iter().map(canon).collect();
            items.sort_by_key(key);
            items.dedup();
            Value::Set(items)
        }
        Value::Map(pairs) => {
            let mut last = std::collections::BTreeMap::new();
            for (k, v) in pairs {
                let k = canon(k);
                last.insert(key(&k), (k, canon(v)));
            }
            Value::Map(last.into_values().collect())
        }
        other => other,
    }
}

/// The oracle's reading of the front of `input`.
fn oracle(input: &[u8]) -> Result<Option<(Value, usize)>, ()> {
    match resp3::decode::complete::decode(input) {
        Ok(Some((frame, used))) => match from_oracle(frame) {
            Some(v) => Ok(Some((canon(v), used))),
            None => Err(()),
        },
        Ok(None) => Ok(None),
        Err(_) => Err(()),
    }
}

/// The decoder's reading of the front of `input`, and how many bytes it took.
fn ours(input: &[u8]) -> Result<Option<(Value, usize)>, Garbage> {
    let mut buf = BytesMut::from(input);
    Ok(value::decode(&mut buf)?.map(|v| (canon(v), input.len() - buf.len())))
}

fn line() -> impl Strategy<Value = String> {
    "[ -~]{0,12}"
}

/// Scalars that can be map keys and set members (the oracle hashes them). A blob error is not
/// one: the decoder reads it as it reads a simple error, so two keys would become one.
fn key() -> impl Strategy<Value = Frame> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..24).prop_map(|data| Frame::BlobString {
            data,
            attributes: None
        }),
        line().prop_map(|s| Frame::SimpleString {
            data: s.into_bytes(),
            attributes: None
        }),
        line().prop_map(|data| Frame::SimpleError {
            data,
            attributes: None
        }),
        any::<bool>().prop_map(|data| Frame::Boolean {
            data,
            attributes: None
        }),
        any::<i64>().prop_map(|data| Frame::Number {
            data,
            attributes: None
        }),
        "-?[0-9]{1,40}".prop_map(|s| Frame::BigNumber {
            data: s.into_bytes(),
            attributes: None
        }),
        (prop::bool::ANY, prop::collection::vec(any::<u8>(), 0..24)).prop_map(|(md, data)| {
            Frame::VerbatimString {
                data,
                format: if md {
                    VerbatimStringFormat::Markdown
                } else {
                    VerbatimStringFormat::Text
                },
                attributes: None,
            }
        }),
    ]
}

fn scalar() -> impl Strategy<Value = Frame> {
    prop_oneof![
        4 => key(),
        1 => line().prop_map(|s| Frame::BlobError {
            data: s.into_bytes(),
            attributes: None
        }),
    ]
}

fn attributes() -> impl Strategy<Value = Option<FrameMap<Frame, Frame>>> {
    prop::option::weighted(
        0.2,
        prop::collection::vec((key(), scalar()), 0..3).prop_map(|kv| kv.into_iter().collect()),
    )
}

fn with_attributes(frame: Frame, attrs: Option<FrameMap<Frame, Frame>>) -> Frame {
    let mut frame = frame;
    if let Some(attrs) = attrs
        && frame.kind() != resp3::types::FrameKind::Null
    {
        frame
            .add_attributes(attrs)
            .expect("a reply takes attributes");
    }
    frame
}

fn reply() -> impl Strategy<Value = Frame> {
    let leaf = prop_oneof![
        8 => scalar(),
        1 => Just(Frame::Null),
        1 => prop_oneof![
            any::<f64>().prop_filter("nan is not equal to itself", |d| !d.is_nan()),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
        ]
        .prop_map(|data| Frame::Double { data, attributes: None }),
    ];
    let tree = leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(|data| Frame::Array {
                data,
                attributes: None
            }),
            prop::collection::vec(inner.clone(), 0..6).prop_map(|data| Frame::Push {
                data,
                attributes: None
            }),
            prop::collection::vec(key(), 0..6).prop_map(|s| Frame::Set {
                data: s.into_iter().collect(),
                attributes: None
            }),
            prop::collection::vec((key(), inner), 0..6).prop_map(|kv| Frame::Map {
                data: kv.into_iter().collect(),
                attributes: None
            }),
        ]
    });
    (tree, attributes()).prop_map(|(f, a)| with_attributes(f, a))
}

/// Random input built from reply pieces (type bytes with lengths, line ends) and random bytes.
fn protocol_bytes() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        (prop::sample::select(b"*%~>|$!=".to_vec()), -2i64..6).prop_map(|(k, n)| format!(
            "{}{n}\r\n",
            k as char
        )
        .into_bytes()),
        prop::sample::select(vec![
            &b"\r\n"[..],
            b"+OK\r\n",
            b"-ERR x\r\n",
            b":12\r\n",
            b",1.5\r\n",
            b"#t\r\n",
            b"_\r\n",
            b"(123\r\n",
            b"txt:",
            b"\r",
            b"\n",
        ])
        .prop_map(<[u8]>::to_vec),
        prop::collection::vec(any::<u8>(), 0..6),
    ];
    prop::collection::vec(piece, 0..30).prop_map(|pieces| pieces.concat())
}

/// Whether a map inside `v` repeats a key.
fn repeats_a_key(v: &Value) -> bool {
    match v {
        Value::Array(items) | Value::Push(items) | Value::Set(items) => {
            items.iter().any(repeats_a_key)
        }
        Value::Map(pairs) => {
            let mut keys: Vec<String> = pairs.iter().map(|(k, _)| format!("{k:?}")).collect();
            keys.sort();
            keys.dedup();
            keys.len() < pairs.len()
                || pairs
                    .iter()
                    .any(|(k, v)| repeats_a_key(k) || repeats_a_key(v))
        }
        _ => false,
    }
}

/// What the decoder must agree on with the oracle for any input.
fn agrees_with_the_oracle(input: &[u8]) -> Result<(), TestCaseError> {
    // A map that repeats a key has no one reading (Redis never sends one): the decoder keeps
    // every pair, and the oracle one of them, not always the last (`%2 :12 *0 :12 +OK` keeps
    // `*0`). Such an input is not compared.
    if let Ok(Some(v)) = value::decode(&mut BytesMut::from(input))
        && repeats_a_key(&v)
    {
        return Ok(());
    }
    let (ours, oracle) = (ours(input), oracle(input));
    if let Ok(Some(decoded)) = &ours {
        // The decoder may refuse what the oracle accepts (lengths over 64 MiB, `+1` as a
        // double, deep nesting), never the other way round.
        if let Ok(want) = &oracle {
            prop_assert_eq!(Some(decoded), want.as_ref());
        }
    }
    if let Ok(Some(_)) = oracle {
        prop_assert!(
            ours != Ok(None),
            "the oracle decoded a whole value: {:?}",
            input
        );
    }
    Ok(())
}

proptest! {
    // Failing cases are kept in the crate's `proptest-regressions/` (the path is relative to the
    // crate root, where cargo runs integration tests), to be committed with the fix.
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/value_oracle.txt",
        ))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn replies_in_random_chunks_decode_as_the_oracle_decodes(
        frames in prop::collection::vec(reply(), 1..4),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        let input: Vec<u8> = frames.iter().flat_map(encode).collect();
        let mut want = Vec::new();
        let mut at = 0;
        while at < input.len() {
            let (v, used) = oracle(&input[at..]).unwrap().expect("whole frames");
            want.push(v);
            at += used;
        }
        let mut cuts = sorted_cuts(input.len(), cuts);
        cuts.push(input.len());
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        let mut fed = 0;
        for end in cuts {
            buf.extend_from_slice(&input[fed..end.max(fed)]);
            fed = end.max(fed);
            while let Some(v) = value::decode(&mut buf).map_err(|e| TestCaseError::fail(e.to_string()))? {
                got.push(canon(v));
            }
        }
        prop_assert!(buf.is_empty());
        prop_assert_eq!(got, want);
    }

    #[test]
    fn random_bytes_agree_with_the_oracle(input in protocol_bytes()) {
        agrees_with_the_oracle(&input)?;
    }

    #[test]
    fn mutated_replies_agree_with_the_oracle(
        frame in reply(),
        mutations in prop::collection::vec(mutation(b"*%$:+-_,#|\r\n0-9"), 1..4),
    ) {
        let mut input = encode(&frame);
        mutate(&mut input, &mutations);
        agrees_with_the_oracle(&input)?;
    }
}
