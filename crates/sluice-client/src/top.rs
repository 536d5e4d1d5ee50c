//! `RL.TOP` and `RL.RATES` replies, read and merged across nodes: the cluster-wide view of
//! `sluice top` and the sidecar's `/dashboard`.
//!
//! A node's `RL.TOP` gives each key an upper estimate `count` and how much it may over-estimate
//! (`error`). Across the primaries of a cluster a key's count is the sum of its counts. A node
//! that does not list a key may still have counted some of it: at most its smallest listed
//! count (every listed count is at least the node's error, and a list cut at `COUNT` leaves out
//! only keys counted no more than the last one listed). So the merged count adds that allowance
//! for each node that does not list the key, and the merged error adds the listing nodes' errors
//! and the others' allowances: the truth stays in `[count - error, count]`. A node that lists
//! nothing adds nothing (it counted no key of the window, unless a `RULE` filter hid them).

use std::collections::HashMap;

use sluice_resp::Value;

/// One key of an `RL.TOP` reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopEntry {
    pub key: Vec<u8>,
    /// The rule the key was checked under; empty for a check under no rule.
    pub rule: String,
    /// An upper estimate of the key's checks in the window.
    pub count: u64,
    /// How much `count` may over-estimate.
    pub error: u64,
    /// When the key was last counted, Unix ms.
    pub last_seen_ms: u64,
}

/// One rule's checks per step of an `RL.RATES` reply, oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleRates {
    pub name: String,
    pub allowed: Vec<u64>,
    pub denied: Vec<u64>,
    pub shadow: Vec<u64>,
}

/// An `RL.RATES` reply.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Rates {
    /// The length of one step, ms.
    pub step_ms: u64,
    /// The end of the newest step (the one in progress), Unix ms.
    pub end_ms: u64,
    pub rules: Vec<RuleRates>,
}

fn items(v: &Value) -> Result<&[Value], String> {
    match v {
        Value::Array(a) | Value::Set(a) => Ok(a),
        Value::Error(e) => Err(e.clone()),
        other => Err(format!("expected an array, got {other:?}")),
    }
}

fn int(v: &Value) -> Result<u64, String> {
    match v {
        Value::Int(n) => u64::try_from(*n).map_err(|_| format!("negative count {n}")),
        other => Err(format!("expected an integer, got {other:?}")),
    }
}

fn bytes(v: &Value) -> Result<&[u8], String> {
    match v {
        Value::Bulk(b) => Ok(b),
        Value::Simple(s) => Ok(s.as_bytes()),
        other => Err(format!("expected a string, got {other:?}")),
    }
}

/// Reads an `RL.TOP` reply.
pub fn parse_top(v: &Value) -> Result<Vec<TopEntry>, String> {
    items(v)?
        .iter()
        .map(|e| match items(e)? {
            [key, rule, count, error, last] => Ok(TopEntry {
                key: bytes(key)?.to_vec(),
                rule: String::from_utf8_lossy(bytes(rule)?).into_owned(),
                count: int(count)?,
                error: int(error)?,
                last_seen_ms: int(last)?,
            }),
            other => Err(format!("an RL.TOP entry has {} fields, not 5", other.len())),
        })
        .collect()
}

/// Merges the `RL.TOP` replies of several nodes (see the module docs): largest first, at most
/// `count`.
pub fn merge_top(nodes: &[Vec<TopEntry>], count: usize) -> Vec<TopEntry> {
    // What a node that does not list a key may hold of it: its smallest listed count.
    let allowance: Vec<u64> = nodes
        .iter()
        .map(|n| n.iter().map(|e| e.count).min().unwrap_or(0))
        .collect();
    let total_allowance: u64 = allowance.iter().sum();
    // Per (key, rule): the count and error summed over the nodes that list it, their
    // allowances, and the last time seen.
    let mut merged: HashMap<(&[u8], &str), [u64; 4]> = HashMap::new();
    for (node, allow) in nodes.iter().zip(&allowance) {
        for e in node {
            let m = merged
                .entry((e.key.as_slice(), e.rule.as_str()))
                .or_default();
            m[0] += e.count;
            m[1] += e.error;
            m[2] += allow;
            m[3] = m[3].max(e.last_seen_ms);
        }
    }
    let mut out: Vec<TopEntry> = merged
        .into_iter()
        .map(|((key, rule), [count, error, listed, last])| {
            let unlisted = total_allowance - listed;
            TopEntry {
                key: key.to_vec(),
                rule: rule.to_string(),
                count: count + unlisted,
                error: error + unlisted,
                last_seen_ms: last,
            }
        })
        .collect();
    out.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
    out.truncate(count);
    out
}

/// Reads an `RL.RATES` reply.
pub fn parse_rates(v: &Value) -> Result<Rates, String> {
    let fields = items(v)?;
    let mut rates = Rates::default();
    for pair in fields.chunks(2) {
        let [name, value] = pair else {
            return Err("RL.RATES: a field without its value".into());
        };
        match bytes(name)? {
            b"step-ms" => rates.step_ms = int(value)?,
            b"end-ms" => rates.end_ms = int(value)?,
            b"rules" => {
                for r in items(value)? {
                    let [name, allowed, denied, shadow] = items(r)? else {
                        return Err("RL.RATES: a rule has 4 fields".into());
                    };
                    let steps = |v: &Value| -> Result<Vec<u64>, String> {
                        items(v)?.iter().map(int).collect()
                    };
                    rates.rules.push(RuleRates {
                        name: String::from_utf8_lossy(bytes(name)?).into_owned(),
                        allowed: steps(allowed)?,
                        denied: steps(denied)?,
                        shadow: steps(shadow)?,
                    });
                }
            }
            _ => {}
        }
    }
    Ok(rates)
}

/// Adds several nodes' `RL.RATES` step by step, aligned on the newest node's last step (a
/// node whose clock is a step behind adds its steps one place earlier). Rules by name.
pub fn merge_rates(nodes: &[Rates]) -> Rates {
    let Some(newest) = nodes.iter().max_by_key(|n| n.end_ms) else {
        return Rates::default();
    };
    let step_ms = newest.step_ms.max(1);
    let end_ms = newest.end_ms;
    let steps = nodes
        .iter()
        .flat_map(|n| n.rules.iter().map(|r| r.allowed.len()))
        .max()
        .unwrap_or(0);
    let mut by_name: Vec<RuleRates> = Vec::new();
    for node in nodes {
        let behind = (end_ms.saturating_sub(node.end_ms) / step_ms) as usize;
        for r in &node.rules {
            let at = match by_name.iter().position(|m| m.name == r.name) {
                Some(i) => i,
                None => {
                    by_name.push(RuleRates {
                        name: r.name.clone(),
                        allowed: vec![0; steps],
                        denied: vec![0; steps],
                        shadow: vec![0; steps],
                    });
                    by_name.len() - 1
                }
            };
            let m = &mut by_name[at];
            for (into, from) in [
                (&mut m.allowed, &r.allowed),
                (&mut m.denied, &r.denied),
                (&mut m.shadow, &r.shadow),
            ] {
                // The node's step i (of len) lands at steps - len - behind + i.
                let offset = steps as i64 - from.len() as i64 - behind as i64;
                for (i, n) in from.iter().enumerate() {
                    if let Ok(j) = usize::try_from(offset + i as i64)
                        && let Some(slot) = into.get_mut(j)
                    {
                        *slot += n;
                    }
                }
            }
        }
    }
    by_name.sort_by(|a, b| a.name.cmp(&b.name));
    Rates {
        step_ms,
        end_ms,
        rules: by_name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(key: &str, count: u64, error: u64) -> TopEntry {
        TopEntry {
            key: key.as_bytes().to_vec(),
            rule: "api".into(),
            count,
            error,
            last_seen_ms: count,
        }
    }

    #[test]
    fn counts_add_across_nodes_and_a_missing_key_carries_that_nodes_smallest_count() {
        let a = vec![e("hot", 100, 2), e("x", 10, 2)];
        let b = vec![e("hot", 50, 3), e("y", 20, 3)];
        let m = merge_top(&[a, b], 10);
        assert_eq!(m[0].key, b"hot");
        assert_eq!((m[0].count, m[0].error), (150, 5));
        // y: 20 on b, and up to 10 on a, which did not list it (a may have cut its list at x).
        let y = m.iter().find(|t| t.key == b"y").unwrap();
        assert_eq!((y.count, y.error), (30, 13));
        assert_eq!(merge_top(&[vec![e("a", 1, 0)]], 0), vec![]);
    }

    #[test]
    fn a_key_a_node_cut_from_its_list_stays_within_the_merged_bound() {
        // Node a holds y = 90 but lists only hot (COUNT 1); b lists y = 95. The truth, 185,
        // is within the merged [count - error, count].
        let a = vec![e("hot", 100, 0)];
        let b = vec![e("y", 95, 0)];
        let m = merge_top(&[a, b], 10);
        let y = m.iter().find(|t| t.key == b"y").unwrap();
        assert!(y.count >= 185 && y.count - y.error <= 185, "{y:?}");
    }

    #[test]
    fn replies_parse_and_bad_ones_say_why() {
        let reply = Value::Array(vec![Value::Array(vec![
            Value::Bulk("k".into()),
            Value::Bulk("".into()),
            Value::Int(7),
            Value::Int(1),
            Value::Int(99),
        ])]);
        let t = parse_top(&reply).unwrap();
        assert_eq!(t[0].key, b"k");
        assert_eq!((t[0].count, t[0].error, t[0].last_seen_ms), (7, 1, 99));
        assert!(parse_top(&Value::Error("NOPERM no".into())).is_err());
        assert!(parse_top(&Value::Array(vec![Value::Array(vec![])])).is_err());
    }

    #[test]
    fn rates_align_on_the_newest_step() {
        let r = |end, allowed: Vec<u64>| Rates {
            step_ms: 10,
            end_ms: end,
            rules: vec![RuleRates {
                name: "api".into(),
                denied: vec![0; allowed.len()],
                shadow: vec![0; allowed.len()],
                allowed,
            }],
        };
        let m = merge_rates(&[r(100, vec![1, 2, 3]), r(90, vec![10, 20, 30])]);
        assert_eq!(m.end_ms, 100);
        assert_eq!(m.rules[0].allowed, vec![1 + 20, 2 + 30, 3]);
        let bytes = Value::Array(vec![
            Value::Bulk("step-ms".into()),
            Value::Int(10000),
            Value::Bulk("end-ms".into()),
            Value::Int(5),
            Value::Bulk("rules".into()),
            Value::Array(vec![Value::Array(vec![
                Value::Bulk("api".into()),
                Value::Array(vec![Value::Int(1)]),
                Value::Array(vec![Value::Int(2)]),
                Value::Array(vec![Value::Int(3)]),
            ])]),
        ]);
        let p = parse_rates(&bytes).unwrap();
        assert_eq!((p.step_ms, p.end_ms), (10000, 5));
        assert_eq!(p.rules[0].shadow, vec![3]);
    }
}
