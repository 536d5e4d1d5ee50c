//! A rule as JSON (`GET /rules`, `GET /rules/{id}`): one shape for the node, which fills it
//! from its live rule, and the sidecar, which fills it from `RL.RULE GET`'s reply
//! ([`RuleJson::from_get`]).

use serde::Serialize;
use sluice_resp::Value;

/// The `Rule` schema of the OpenAPI document.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RuleJson {
    pub id: String,
    pub version: u64,
    pub scope: Option<String>,
    pub tier: Option<String>,
    pub route: Option<String>,
    pub limit: u64,
    /// The period as the spec states it (`1m`, `500ms`).
    pub window: String,
    pub burst: u64,
    pub algo: String,
    pub failmode: String,
    pub shadow: bool,
    pub floor: Option<u64>,
    pub rollout: u64,
    /// The spec text (`RL.RULE SET id <spec>`).
    pub spec: String,
    pub denied: u64,
    pub shadow_denied: u64,
}

impl RuleJson {
    /// `RL.RULE GET`'s field/value pairs (RESP2's flat array or RESP3's map). The window,
    /// scope, tier, route and floor are read from the spec text, which states them as the node
    /// does.
    pub fn from_get(reply: &Value) -> Option<RuleJson> {
        let pairs: Vec<(String, &Value)> = match reply {
            Value::Array(items) => items
                .chunks(2)
                .filter_map(|p| Some((p.first()?.text(), p.get(1)?)))
                .collect(),
            Value::Map(m) => m.iter().map(|(k, v)| (k.text(), v)).collect(),
            _ => return None,
        };
        let field = |k: &str| pairs.iter().find(|(name, _)| name == k).map(|(_, v)| *v);
        let int = |k: &str| match field(k) {
            Some(Value::Int(n)) => u64::try_from(*n).ok(),
            Some(v) => v.text().parse().ok(),
            None => None,
        };
        let text = |k: &str| field(k).map(Value::text);
        let spec = text("spec")?;
        let word = |w: &str| spec_word(&spec, w);
        Some(RuleJson {
            id: text("name")?,
            version: int("version")?,
            scope: word("SCOPE"),
            tier: word("TIER"),
            route: word("ROUTE"),
            limit: int("limit")?,
            window: word("PERIOD")?,
            burst: int("burst")?,
            algo: text("algo")?,
            failmode: text("failmode")?,
            shadow: int("shadow").is_some_and(|s| s != 0),
            floor: word("FLOOR").and_then(|f| f.parse().ok()),
            rollout: int("rollout").unwrap_or(100),
            denied: int("denied").unwrap_or(0),
            shadow_denied: int("shadow_denied").unwrap_or(0),
            spec,
        })
    }
}

/// The value after `word` in a spec text.
fn spec_word(spec: &str, word: &str) -> Option<String> {
    let mut words = spec.split(' ');
    words.find(|w| w.eq_ignore_ascii_case(word))?;
    words.next().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_is_read_from_a_resp3_map() {
        let b = |s: &str| Value::Bulk(bytes::Bytes::copy_from_slice(s.as_bytes()));
        let int = |k: &str, n: i64| (b(k), Value::Int(n));
        let reply = Value::Map(vec![
            (b("name"), b("api")),
            int("version", 3),
            int("limit", 5),
            int("burst", 5),
            (b("algo"), b("TOKEN")),
            (b("failmode"), b("closed")),
            (
                b("spec"),
                b("LIMIT 5 PERIOD 1m FAILMODE closed FLOOR 2 SCOPE ip TIER free"),
            ),
            int("denied", 7),
        ]);
        let r = RuleJson::from_get(&reply).unwrap();
        assert_eq!(
            (r.id.as_str(), r.version, r.window.as_str(), r.floor),
            ("api", 3, "1m", Some(2))
        );
        assert_eq!(
            (r.scope.as_deref(), r.tier.as_deref(), r.route),
            (Some("ip"), Some("free"), None)
        );
        assert_eq!((r.denied, r.rollout, r.shadow), (7, 100, false));
        assert_eq!(RuleJson::from_get(&Value::Nil), None);
    }
}
