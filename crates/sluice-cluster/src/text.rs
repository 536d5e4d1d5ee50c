//! The text form of a slot table: what a node keeps in its cluster config file and what the admin
//! tool pushes.
//!
//! # Format (version 1)
//!
//! Lines separated by `\n` (a `\r` before it is tolerated), fields by ASCII whitespace, numbers
//! in plain decimal digits:
//!
//! ```text
//! sluice-slots 1
//! epoch <epoch>
//! shard <id> <host> <port> tokens <t1>,<t2>,...     (or `tokens -` when the shard has none)
//! replica <shard-index> <id> <host> <port>
//! range <start> <end> <shard-index>
//! ```
//!
//! A node with a TLS port has `tls <port>` at the end of its `shard` or `replica` line. It is
//! written only for such nodes, so a table without TLS ports reads (and is written) exactly as
//! before, and a line without it is a node without a TLS port.
//!
//! The header and the epoch are the first two lines. After them `shard`, `replica` and `range`
//! lines may come in any order; shards are numbered 0, 1, ... in the order of their `shard`
//! lines, and replicas join their shard in the order of their lines. [`SlotTable::encode`] writes
//! each shard followed by its replicas, then the ranges (sorted and merged), so that
//! `decode(encode(t)) == t`.
//!
//! The first line carries the version so that a node refuses a table it cannot read instead of
//! misreading it; a new field means a new version. Decoding never panics: any text gives a table
//! that passed [`SlotTable::new`], or a [`TableError`] naming the line.

use std::fmt::Write as _;
use std::str::FromStr;

use crate::FORMAT_VERSION;
use crate::error::TableError;
use crate::table::{Node, Shard, SlotRange, SlotTable};

/// The first word of the header line.
const MAGIC: &str = "sluice-slots";

impl SlotTable {
    /// The table in the versioned text form (see the module docs).
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail, hence the ignored results.
        let _ = writeln!(text, "{MAGIC} {FORMAT_VERSION}");
        let _ = writeln!(text, "epoch {}", self.epoch);
        for (index, shard) in self.shards.iter().enumerate() {
            let Node { id, host, port, .. } = &shard.primary;
            let _ = write!(text, "shard {id} {host} {port} tokens ");
            if shard.tokens.is_empty() {
                text.push('-');
            }
            for (i, token) in shard.tokens.iter().enumerate() {
                if i > 0 {
                    text.push(',');
                }
                let _ = write!(text, "{token}");
            }
            push_tls(&mut text, &shard.primary);
            for replica in &shard.replicas {
                let Node { id, host, port, .. } = replica;
                let _ = write!(text, "replica {index} {id} {host} {port}");
                push_tls(&mut text, replica);
            }
        }
        for SlotRange { start, end, shard } in &self.ranges {
            let _ = writeln!(text, "range {start} {end} {shard}");
        }
        text
    }

    /// Parses the text form and validates the table. Refuses other versions, unknown or
    /// malformed lines, and every table [`SlotTable::new`] refuses.
    pub fn decode(text: &str) -> Result<SlotTable, TableError> {
        let mut lines = text.lines().enumerate().map(|(i, line)| (i + 1, line));

        let header: Vec<&str> = lines
            .next()
            .map(|(_, line)| line.split_ascii_whitespace().collect())
            .unwrap_or_default();
        match header.as_slice() {
            [MAGIC, version] if *version == FORMAT_VERSION.to_string() => {}
            [MAGIC, version] => {
                return Err(TableError::UnsupportedVersion {
                    version: (*version).to_owned(),
                });
            }
            _ => return Err(bad(1, "expected the header 'sluice-slots <version>'")),
        }

        let epoch = match lines.next() {
            Some((n, line)) => match fields(line).as_slice() {
                ["epoch", epoch] => number(epoch, n, "the epoch is not a number")?,
                _ => return Err(bad(n, "expected 'epoch <n>'")),
            },
            None => return Err(bad(2, "expected 'epoch <n>'")),
        };

        let mut shards = Vec::new();
        let mut replicas = Vec::new();
        let mut ranges = Vec::new();
        for (n, line) in lines {
            let (words, tls) = split_tls(fields(line), n)?;
            match words.as_slice() {
                ["shard", id, host, port, "tokens", tokens] => shards.push(Shard {
                    primary: node(id, host, port, tls, n)?,
                    replicas: Vec::new(),
                    tokens: token_list(tokens, n)?,
                }),
                ["replica", index, id, host, port] => {
                    let index: usize = number(index, n, "the shard index is not a number")?;
                    replicas.push((index, node(id, host, port, tls, n)?));
                }
                ["range", start, end, index] if tls.is_none() => ranges.push(SlotRange {
                    start: number(start, n, "the range start is not a slot number")?,
                    end: number(end, n, "the range end is not a slot number")?,
                    shard: number(index, n, "the shard index is not a number")?,
                }),
                ["shard", ..] => {
                    return Err(bad(n, "expected 'shard <id> <host> <port> tokens <list>'"));
                }
                ["replica", ..] => {
                    return Err(bad(n, "expected 'replica <shard> <id> <host> <port>'"));
                }
                ["range", ..] => return Err(bad(n, "expected 'range <start> <end> <shard>'")),
                _ => return Err(bad(n, "expected a shard, replica or range line")),
            }
        }
        for (index, replica) in replicas {
            shards
                .get_mut(index)
                .ok_or(TableError::UnknownShard { index })?
                .replicas
                .push(replica);
        }
        SlotTable::new(epoch, shards, ranges)
    }
}

fn bad(line: usize, reason: &'static str) -> TableError {
    TableError::BadFormat { line, reason }
}

fn fields(line: &str) -> Vec<&str> {
    line.split_ascii_whitespace().collect()
}

/// Plain decimal digits only: `+5`, `-0` and the empty string are refused, so that one table has
/// one spelling.
fn number<T: FromStr>(field: &str, line: usize, reason: &'static str) -> Result<T, TableError> {
    if field.is_empty() || !field.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad(line, reason));
    }
    field.parse().map_err(|_| bad(line, reason))
}

/// Ends a node's line with ` tls <port>` if it has a TLS port, then the line break.
fn push_tls(text: &mut String, node: &Node) {
    if let Some(port) = node.tls_port {
        let _ = write!(text, " tls {port}");
    }
    text.push('\n');
}

/// A line's words without a trailing `tls <port>`, and that port.
fn split_tls(mut words: Vec<&str>, line: usize) -> Result<(Vec<&str>, Option<u16>), TableError> {
    match words.as_slice() {
        [.., "tls", port] if words.len() > 2 => {
            let port = number(port, line, "the TLS port is not a number up to 65535")?;
            words.truncate(words.len() - 2);
            Ok((words, Some(port)))
        }
        _ => Ok((words, None)),
    }
}

fn node(
    id: &str,
    host: &str,
    port: &str,
    tls_port: Option<u16>,
    line: usize,
) -> Result<Node, TableError> {
    Ok(Node {
        id: id.to_owned(),
        host: host.to_owned(),
        port: number(port, line, "the port is not a number up to 65535")?,
        tls_port,
    })
}

fn token_list(field: &str, line: usize) -> Result<Vec<u16>, TableError> {
    if field == "-" {
        return Ok(Vec::new());
    }
    field
        .split(',')
        .map(|token| number(token, line, "a token is not a number up to 65535"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> SlotTable {
        let node = |n: u8, port: u16| Node::plain(format!("{n:040x}"), "10.0.0.1", port);
        SlotTable::new(
            7,
            vec![
                Shard {
                    primary: node(0xa1, 7000),
                    replicas: vec![node(0xb1, 7100), node(0xc1, 7200)],
                    tokens: vec![],
                },
                Shard {
                    primary: node(0xa2, 7001),
                    replicas: vec![],
                    tokens: vec![],
                },
            ],
            vec![
                SlotRange {
                    start: 0,
                    end: 5000,
                    shard: 1,
                },
                SlotRange {
                    start: 5001,
                    end: 16383,
                    shard: 0,
                },
            ],
        )
        .unwrap()
    }

    #[test]
    fn encodes_the_documented_form_and_round_trips() {
        let table = sample();
        let text = table.encode();
        let a1 = format!("{:040x}", 0xa1);
        let b1 = format!("{:040x}", 0xb1);
        let c1 = format!("{:040x}", 0xc1);
        let a2 = format!("{:040x}", 0xa2);
        assert_eq!(
            text,
            format!(
                "sluice-slots 1\nepoch 7\n\
                 shard {a1} 10.0.0.1 7000 tokens -\n\
                 replica 0 {b1} 10.0.0.1 7100\n\
                 replica 0 {c1} 10.0.0.1 7200\n\
                 shard {a2} 10.0.0.1 7001 tokens -\n\
                 range 0 5000 1\nrange 5001 16383 0\n"
            )
        );
        assert_eq!(SlotTable::decode(&text), Ok(table.clone()));
        // Windows line ends and extra spaces read the same.
        let loose = text.replace('\n', "\r\n").replace(' ', "  ");
        assert_eq!(SlotTable::decode(&loose), Ok(table));
    }

    #[test]
    fn tls_ports_are_optional_and_round_trip() {
        let mut table = sample();
        table.shards[0].primary.tls_port = Some(17000);
        table.shards[0].replicas[1].tls_port = Some(17200);
        let text = table.encode();
        let a1 = format!("{:040x}", 0xa1);
        let b1 = format!("{:040x}", 0xb1);
        let c1 = format!("{:040x}", 0xc1);
        assert!(text.contains(&format!("shard {a1} 10.0.0.1 7000 tokens - tls 17000\n")));
        assert!(text.contains(&format!("replica 0 {b1} 10.0.0.1 7100\n")));
        assert!(text.contains(&format!("replica 0 {c1} 10.0.0.1 7200 tls 17200\n")));
        assert_eq!(SlotTable::decode(&text), Ok(table.clone()));
        // An old table (no TLS ports) reads as nodes without one.
        assert_eq!(
            SlotTable::decode(&sample().encode()).unwrap().shards[0]
                .primary
                .tls_port,
            None
        );
        for bad in ["tls 0", "tls x", "tls 70000", "tls"] {
            let text = text.replace("tls 17000", bad);
            assert!(SlotTable::decode(&text).is_err(), "{bad}");
        }
        let range = text.replace("range 0 5000 1", "range 0 5000 1 tls 1");
        assert!(
            SlotTable::decode(&range).is_err(),
            "a range has no TLS port"
        );
        assert_eq!(table.shards[0].primary.port_for(true), 17000);
        assert_eq!(table.shards[0].primary.port_for(false), 7000);
        assert_eq!(table.shards[0].replicas[0].port_for(true), 7100);
        assert!(table.shards[0].primary.listens_on(17000));
    }

    #[test]
    fn lines_after_the_epoch_may_come_in_any_order() {
        let table = sample();
        let text = table.encode();
        let mut lines: Vec<&str> = text.lines().collect();
        // Ranges first, then replicas, then shards; shards keep their order, as it numbers them.
        lines[2..].sort_by_key(|line| match line.split(' ').next() {
            Some("range") => 0,
            Some("replica") => 1,
            _ => 2,
        });
        assert!(lines[2].starts_with("range"));
        assert_eq!(SlotTable::decode(&lines.join("\n")), Ok(table));
    }

    fn decode_err(text: &str) -> TableError {
        SlotTable::decode(text).unwrap_err()
    }

    #[test]
    fn refuses_bad_text_with_the_line() {
        let good = sample().encode();
        assert_eq!(
            decode_err(&good.replace("sluice-slots 1", "sluice-slots 2")),
            TableError::UnsupportedVersion {
                version: "2".to_owned()
            }
        );
        assert!(matches!(
            decode_err(&good.replace("sluice-slots 1", "slots 1")),
            TableError::BadFormat { line: 1, .. }
        ));
        assert!(matches!(
            decode_err(""),
            TableError::BadFormat { line: 1, .. }
        ));
        assert!(matches!(
            decode_err("sluice-slots 1\n"),
            TableError::BadFormat { line: 2, .. }
        ));
        assert!(matches!(
            decode_err(&good.replace("epoch 7", "epoch -7")),
            TableError::BadFormat { line: 2, .. }
        ));
        assert!(matches!(
            decode_err(&good.replace("7001 tokens", "7001 tokenz")),
            TableError::BadFormat { line: 6, .. }
        ));
        assert!(matches!(
            decode_err(&good.replace("range 0 5000 1", "range 0 +5000 1")),
            TableError::BadFormat { line: 7, .. }
        ));
        assert!(matches!(
            decode_err(&good.replace("range 0 5000 1", "range 0 5000 1 extra")),
            TableError::BadFormat { line: 7, .. }
        ));
        assert!(matches!(
            decode_err(&format!("{good}garbage\n")),
            TableError::BadFormat { line: 9, .. }
        ));
        assert!(matches!(
            decode_err(&format!("{good}\n")),
            TableError::BadFormat { line: 9, .. }
        ));
        assert!(matches!(
            decode_err(&good.replace("7000 tokens -", "70000 tokens -")),
            TableError::BadFormat { line: 3, .. }
        ));
        assert!(matches!(
            decode_err(&good.replace("7001 tokens -", "7001 tokens 1,,2")),
            TableError::BadFormat { line: 6, .. }
        ));
    }

    #[test]
    fn refuses_invalid_tables() {
        let good = sample().encode();
        assert_eq!(
            decode_err(&good.replace("range 0 5000 1", "range 0 4999 1")),
            TableError::Gap { slot: 5000 }
        );
        assert_eq!(
            decode_err(&good.replace("range 0 5000 1", "range 0 5001 1")),
            TableError::Overlap { slot: 5001 }
        );
        assert_eq!(
            decode_err(&good.replace("range 0 5000 1", "range 0 5000 2")),
            TableError::UnknownShard { index: 2 }
        );
        assert_eq!(
            decode_err(&good.replace("replica 0 ", "replica 5 ")),
            TableError::UnknownShard { index: 5 }
        );
        let b1 = format!("{:040x}", 0xb1);
        let c1 = format!("{:040x}", 0xc1);
        assert_eq!(
            decode_err(&good.replace(&c1, &b1)),
            TableError::DuplicateNodeId { id: b1.clone() }
        );
        assert!(matches!(
            decode_err(&good.replace(&b1, &b1.to_uppercase().replace("0", "G"))),
            TableError::BadNodeId { .. }
        ));
        assert!(matches!(
            decode_err(&good.replace("7200", "7100")),
            TableError::DuplicateAddress { port: 7100, .. }
        ));
        assert_eq!(
            decode_err(&good.replace("7001 tokens -", "7001 tokens 20000")),
            TableError::BadToken { token: 20000 }
        );
    }

    proptest! {
        #[test]
        fn decode_never_panics_on_any_text(text in "\\PC*") {
            let _ = SlotTable::decode(&text);
        }

        #[test]
        fn decode_never_panics_on_table_like_text(
            lines in proptest::collection::vec(
                "(sluice-slots|epoch|shard|replica|range|tokens|[0-9a-f]{40}|[0-9]{1,6}|127\\.0\\.0\\.1|-|,| |\n)*",
                0..8,
            )
        ) {
            let text = format!("sluice-slots 1\nepoch 1\n{}", lines.join("\n"));
            let _ = SlotTable::decode(&text);
        }

        #[test]
        fn decode_never_panics_on_a_mutated_table(at in 0usize..400, byte in any::<u8>()) {
            let mut text = sample().encode().into_bytes();
            let at = at % text.len();
            text[at] = byte;
            if let Ok(text) = String::from_utf8(text)
                && let Ok(table) = SlotTable::decode(&text)
            {
                prop_assert_eq!(SlotTable::decode(&table.encode()), Ok(table));
            }
        }
    }
}
