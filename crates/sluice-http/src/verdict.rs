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

use crate::digits::push;

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
        let mut h = Vec::new();
        self.each_header(|name, parts| {
            let mut value = Vec::new();
            for part in parts {
                part.write(&mut value);
            }
            h.push((name.name(), String::from_utf8_lossy(&value).into_owned()));
        });
        h
    }

    /// [`Verdict::headers`] one by one, each value in parts for the caller to write where it
    /// goes, without a string of its own.
    pub fn each_header(&self, mut put: impl FnMut(Header, &[Part<'_>])) {
        if self.unlimited() {
            return;
        }
        let quoted;
        let name = match self.rule.as_deref() {
            Some(rule) => {
                quoted = sf_string(rule);
                quoted.as_str()
            }
            None => "\"default\"",
        };
        let reset = ceil_secs(self.reset_after_ms);
        put(Header::Limit, &[Part::Int(self.limit)]);
        put(Header::Remaining, &[Part::Int(self.remaining)]);
        put(Header::Reset, &[Part::Int(reset)]);
        let policy = [Part::Text(name), Part::Text(";q="), Part::Int(self.limit)];
        match self.window_ms {
            Some(w) => put(
                Header::Policy,
                &[
                    policy[0],
                    policy[1],
                    policy[2],
                    Part::Text(";w="),
                    Part::Uint(w.div_ceil(1000)),
                ],
            ),
            None => put(Header::Policy, &policy),
        }
        put(
            Header::RateLimit,
            &[
                Part::Text(name),
                Part::Text(";r="),
                Part::Int(self.remaining),
                Part::Text(";t="),
                Part::Int(reset),
            ],
        );
        if !self.allowed && self.retry_after_ms >= 0 {
            put(
                Header::RetryAfter,
                &[Part::Int(ceil_secs(self.retry_after_ms).max(1))],
            );
        }
    }

    /// Appends the JSON body, byte for byte what `serde_json` makes of the struct (the test
    /// compares), without a serializer call per field.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(if self.allowed {
            b"{\"allowed\":true,\"limit\":"
        } else {
            b"{\"allowed\":false,\"limit\":"
        });
        push(out, self.limit);
        out.extend_from_slice(b",\"remaining\":");
        push(out, self.remaining);
        out.extend_from_slice(b",\"retry_after_ms\":");
        push(out, self.retry_after_ms);
        out.extend_from_slice(b",\"reset_after_ms\":");
        push(out, self.reset_after_ms);
        out.extend_from_slice(b",\"reset_at\":");
        push(out, self.reset_at);
        if let Some(rule) = &self.rule {
            out.extend_from_slice(b",\"rule\":");
            // serde_json's escaping of the one string; a String always serializes.
            let _ = serde_json::to_writer(&mut *out, rule);
        }
        out.push(b'}');
    }
}

/// A rate limit header of [`Verdict::each_header`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Header {
    Limit,
    Remaining,
    Reset,
    Policy,
    RateLimit,
    RetryAfter,
}

impl Header {
    /// The name as the drafts spell it.
    pub fn name(self) -> &'static str {
        match self {
            Header::Limit => "RateLimit-Limit",
            Header::Remaining => "RateLimit-Remaining",
            Header::Reset => "RateLimit-Reset",
            Header::Policy => "RateLimit-Policy",
            Header::RateLimit => "RateLimit",
            Header::RetryAfter => "Retry-After",
        }
    }

    /// The name as HTTP/1 writes it from a header map: lowercase (the one spelling both
    /// answers use: the header map of the routed answer and the bytes of the direct one).
    pub const fn wire(self) -> &'static str {
        match self {
            Header::Limit => "ratelimit-limit",
            Header::Remaining => "ratelimit-remaining",
            Header::Reset => "ratelimit-reset",
            Header::Policy => "ratelimit-policy",
            Header::RateLimit => "ratelimit",
            Header::RetryAfter => "retry-after",
        }
    }
}

/// A piece of a header value: text, or a number in decimal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part<'a> {
    Text(&'a str),
    Int(i64),
    Uint(u64),
}

impl Part<'_> {
    /// Appends the piece.
    pub fn write(&self, out: &mut Vec<u8>) {
        match *self {
            Part::Text(t) => out.extend_from_slice(t.as_bytes()),
            Part::Int(n) => push(out, n),
            Part::Uint(n) => push(out, n),
        }
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
        assert_eq!(sf_string("default"), "\"default\"");
        assert_eq!(ceil_secs(1), 1);
        assert_eq!(ceil_secs(1000), 1);
        assert_eq!(ceil_secs(-1), 0);
    }

    #[test]
    fn the_json_body_is_serde_s() {
        let mut denied = Verdict::from_fields([0, 5, 0, 2001, 11_999], None, i64::MAX);
        denied.rule = Some("per-\"ip\"\\ é\u{1}".into());
        for v in [
            denied,
            Verdict::from_fields([1, 10, 9, -1, 6_000], None, 1_700_000_000_000),
            Verdict::from_fields([1, i64::MAX, i64::MIN, 0, -5], None, -3),
        ] {
            let mut body = Vec::new();
            v.write_json(&mut body);
            assert_eq!(
                String::from_utf8(body).unwrap(),
                serde_json::to_string(&v).unwrap()
            );
        }
    }
}
