//! A check's answer as HTTP gives it: the status, the JSON body and the rate limit headers.
//! Pure: the five (or six) fields of `RL.CHECK`/`RL.ALLOW` in, strings out.
//!
//! # Header mapping
//! - `RateLimit-Limit: limit`, `RateLimit-Remaining: remaining`, `RateLimit-Reset:
//!   ⌈reset_after_ms ÷ 1000⌉` (the fields of draft-ietf-httpapi-ratelimit-headers up to -06,
//!   which most gateways and clients still read).
//! - The current draft's (-11) structured fields: `RateLimit-Policy: "name";q=limit;w=window`
//!   and `RateLimit: "name";r=remaining;t=⌈reset_after_ms ÷ 1000⌉`; the policy's name is the
//!   rule's (`default` for a plain key check), the window its period in seconds, rounded up.
//! - `Retry-After: ⌈retry_after_ms ÷ 1000⌉` on a denial (never 0: a client told 0 retries at
//!   once and is denied again).

use serde::Serialize;

/// One check's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Verdict {
    pub allowed: bool,
    pub limit: i64,
    pub remaining: i64,
    pub retry_after_ms: i64,
    pub reset_after_ms: i64,
    /// Unix milliseconds at which the bucket is back to fresh.
    pub reset_at: i64,
    /// The rule that decided (RL.ALLOW); absent for a plain key check.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// The policy's window in milliseconds (the rule's or the check's period); not in the body.
    #[serde(skip)]
    pub window_ms: Option<u64>,
}

/// Whole seconds, rounded up, of a non-negative millisecond count.
pub fn ceil_secs(ms: i64) -> i64 {
    if ms <= 0 { 0 } else { (ms + 999) / 1000 }
}

/// A policy name as an sf-string: printable ASCII with `"` and `\` escaped.
fn sf_string(name: &str) -> String {
    let mut s = String::with_capacity(name.len() + 2);
    s.push('"');
    for c in name
        .chars()
        .filter(|c| c.is_ascii() && !c.is_ascii_control())
    {
        if c == '"' || c == '\\' {
            s.push('\\');
        }
        s.push(c);
    }
    s.push('"');
    s
}

impl Verdict {
    /// The fields of an `RL.CHECK`/`RL.ALLOW` reply at `now_ms` (Unix milliseconds).
    pub fn from_fields(fields: [i64; 5], rule: Option<String>, now_ms: i64) -> Verdict {
        let [allowed, limit, remaining, retry_after_ms, reset_after_ms] = fields;
        Verdict {
            allowed: allowed == 1,
            limit,
            remaining,
            retry_after_ms,
            reset_after_ms,
            reset_at: now_ms.saturating_add(reset_after_ms.max(0)),
            rule,
            window_ms: None,
        }
    }

    /// 200 or 429.
    pub fn status(&self) -> u16 {
        if self.allowed { 200 } else { 429 }
    }

    /// No rule applied (RL.ALLOW with nothing to count): no rate limit headers.
    pub fn unlimited(&self) -> bool {
        self.allowed && self.limit == 0 && self.rule.is_none()
    }

    /// The rate limit headers, in the order sent.
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        if self.unlimited() {
            return Vec::new();
        }
        let name = sf_string(self.rule.as_deref().unwrap_or("default"));
        let reset = ceil_secs(self.reset_after_ms);
        let mut policy = format!("{name};q={}", self.limit);
        if let Some(w) = self.window_ms {
            policy.push_str(&format!(";w={}", w.div_ceil(1000)));
        }
        let mut h = vec![
            ("RateLimit-Limit", self.limit.to_string()),
            ("RateLimit-Remaining", self.remaining.to_string()),
            ("RateLimit-Reset", reset.to_string()),
            ("RateLimit-Policy", policy),
            (
                "RateLimit",
                format!("{name};r={};t={reset}", self.remaining),
            ),
        ];
        if !self.allowed && self.retry_after_ms >= 0 {
            h.push((
                "Retry-After",
                ceil_secs(self.retry_after_ms).max(1).to_string(),
            ));
        }
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_seconds_up_and_name_the_policy() {
        let mut v = Verdict::from_fields([0, 5, 0, 2001, 11_999], Some("per-ip".into()), 1_000);
        v.window_ms = Some(60_000);
        assert_eq!(v.status(), 429);
        assert_eq!(v.reset_at, 12_999);
        assert_eq!(
            v.headers(),
            vec![
                ("RateLimit-Limit", "5".to_string()),
                ("RateLimit-Remaining", "0".into()),
                ("RateLimit-Reset", "12".into()),
                ("RateLimit-Policy", "\"per-ip\";q=5;w=60".into()),
                ("RateLimit", "\"per-ip\";r=0;t=12".into()),
                ("Retry-After", "3".into()),
            ]
        );
        let ok = Verdict::from_fields([1, 10, 9, -1, 6_000], None, 0);
        assert_eq!(ok.status(), 200);
        assert_eq!(ok.headers()[4], ("RateLimit", "\"default\";r=9;t=6".into()));
        assert_eq!(ok.headers().len(), 5);
        assert!(
            Verdict::from_fields([1, 0, 0, -1, 0], None, 0)
                .headers()
                .is_empty()
        );
        assert_eq!(sf_string("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(ceil_secs(1), 1);
        assert_eq!(ceil_secs(1000), 1);
        assert_eq!(ceil_secs(-1), 0);
    }
}
