//! One `ShouldRateLimit` call, as envoyproxy/ratelimit answers it, over a caller's check.
//!
//! 1. A request outside the bounds below is a bad request (`INVALID_ARGUMENT`; an empty domain
//!    or descriptor list with the reference's words).
//! 2. Each descriptor's limit is looked up ([`Config::get_limit`]; a request `limit` override
//!    wins over the config). `unlimited` ones and limits named in another matched limit's
//!    `replaces` are not checked.
//! 3. Each remaining descriptor is checked on its own, in order: key
//!    `envoy:domain|key_value|key_value...` ([`KEY_PREFIX`]), limit `requests_per_unit` per
//!    `unit` (an override's window bounded as RL.CHECK's, [`sluice_core::spec::validate`]), cost the
//!    descriptor's `hits_addend` if set (0 only reads), else the request's (0 counts as 1).
//!    A cost above the limit, or a limit of 0, is over the limit without touching the store
//!    (the reference would also add the hits to its counter; we leave the window as it was).
//! 4. A status per descriptor: OVER_LIMIT when denied, unless the limit is in shadow mode
//!    (then OK, counted as shadow-denied); no limit: OK with nothing else; unlimited: OK with
//!    `limit_remaining` u32::MAX. The overall code is OVER_LIMIT when any non-quota descriptor
//!    is, or when every quota-mode descriptor is.
//! 5. Rate limit headers, when asked for, describe the descriptor closest to its limit (an
//!    over-limit one first), as the reference's.
//!
//! # Bounds
//! A caller picks the domain, the descriptors and their values, and each becomes part of a
//! store key (and a domain part of a metrics label), so each is bounded: a domain, an entry's
//! key and an entry's value at most [`MAX_NAME`] (256) bytes; at most [`MAX_DESCRIPTORS`] (64)
//! descriptors of 1 to [`MAX_ENTRIES`] (32) entries each. A descriptor without entries is
//! refused: its key would be the bare domain. A store key is then at most 16,710 bytes
//! (`envoy:`, the domain, 32 × `|key_value`); every key is under [`KEY_PREFIX`], which no RESP
//! client's key has by accident, so a call cannot occupy a bucket that `RL.HIT` or
//! `/v1/check` owns.

use std::collections::HashSet;

use sluice_core::{Algo, Decision, Nanos};

use crate::config::{Config, Limit, Unit};
use crate::pb::envoy::config::core::v3::HeaderValue;
use crate::pb::rate_limit_response::{Code, DescriptorStatus, RateLimit};
use crate::pb::{RateLimitDescriptor, RateLimitRequest, RateLimitResponse};

/// One check the caller runs on its store: RL.CHECK `key limit period COST cost ALGO algo`.
#[derive(Debug, Clone, PartialEq)]
pub struct Check<'a> {
    pub key: &'a [u8],
    pub limit: u64,
    pub period: Nanos,
    pub cost: u64,
    pub algo: Algo,
}

/// What became of one limited descriptor, for the caller's metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// The limit's stats key (`domain.key_value.key`), the metrics' `rule` label.
    pub rule: String,
    /// The bucket the descriptor was checked in (`RL.TOP` names it).
    pub key: Vec<u8>,
    pub algo: Algo,
    pub decision: Decision,
    pub shadow: bool,
}

/// Why a call gets a gRPC error instead of an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// The request itself is wrong (empty domain, no descriptors).
    InvalidArgument(String),
    /// The store could not answer: Envoy's `failure_mode_deny` decides.
    Unavailable(String),
}

/// The rate limit headers envoyproxy/ratelimit can add (`LIMIT_RESPONSE_HEADERS_ENABLED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Headers {
    Off,
    /// `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset` (the reference's names).
    RateLimit,
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset`.
    XRateLimit,
}

/// The namespace of every gRPC store key (envoyproxy/ratelimit prefixes its cache keys with
/// `CACHE_KEY_PREFIX`; ours is fixed). RESP users reach these keys only by naming them, and an
/// ACL user needs `~envoy:*` for gRPC.
pub const KEY_PREFIX: &[u8] = b"envoy:";

/// The longest domain, descriptor entry key or value, in bytes.
pub const MAX_NAME: usize = 256;

/// The most descriptors in one request.
pub const MAX_DESCRIPTORS: usize = 64;

/// The most entries in one descriptor.
pub const MAX_ENTRIES: usize = 32;

/// The store key of a descriptor: `envoy:domain|key_value|key_value...`, a `share_threshold`
/// wildcard match counting under its pattern.
fn store_key(domain: &str, entries: &[(&str, &str)], shared: &[Option<&str>]) -> Vec<u8> {
    let mut key = KEY_PREFIX.to_vec();
    key.extend_from_slice(domain.as_bytes());
    for (i, (k, v)) in entries.iter().enumerate() {
        key.push(b'|');
        key.extend_from_slice(k.as_bytes());
        key.push(b'_');
        let v = shared.get(i).copied().flatten().unwrap_or(v);
        key.extend_from_slice(v.as_bytes());
    }
    key
}

/// Seconds until the current `unit` window ends, windows aligned on the Unix epoch (the
/// reference's `CalculateReset`, and FIXED's windows).
fn window_reset(unit: Unit, now_unix_secs: u64) -> u64 {
    let s = unit.seconds();
    s - now_unix_secs % s
}

fn over(limit: u32) -> Decision {
    Decision {
        allowed: false,
        limit: u64::from(limit),
        remaining: 0,
        retry_after: None,
        reset_after: Nanos(0),
    }
}

/// A descriptor's limit and store key; `None` when no limit matches it.
type Found = Option<(Limit, Vec<u8>)>;

/// Answers one `ShouldRateLimit` request against `config` at `now` (Unix time), running the
/// checks through `check`, whose future may wait (a server forwards a key another node owns to
/// it) but must not borrow the check it is given. Returns the
/// answer and a verdict per checked descriptor.
pub async fn should_rate_limit<F>(
    config: &Config,
    request: &RateLimitRequest,
    now: Nanos,
    headers: Headers,
    mut check: impl FnMut(&Check<'_>) -> F,
) -> Result<(RateLimitResponse, Vec<Verdict>), CallError>
where
    F: std::future::Future<Output = Result<Decision, String>>,
{
    validate(request)?;
    let domain = request.domain.as_str();
    let now_secs = now.0 / Nanos::PER_SEC;

    // Limits first (overrides, config), then what `replaces` drops.
    let limits: Vec<Found> = request
        .descriptors
        .iter()
        .map(|d| find_limit(config, domain, d))
        .collect::<Result<_, _>>()?;
    let replaced: HashSet<&str> = limits
        .iter()
        .flatten()
        .flat_map(|(l, _)| l.replaces.iter().map(String::as_str))
        .collect();

    let mut statuses = Vec::with_capacity(limits.len());
    let mut verdicts = Vec::new();
    let mut tally = Tally::default();
    for (d, found) in request.descriptors.iter().zip(&limits) {
        let Some((limit, key)) = found
            .as_ref()
            .filter(|(l, _)| !l.unlimited && !is_replaced(l, &replaced))
        else {
            statuses.push(unchecked_status(found));
            continue;
        };
        let unit = limit.unit.unwrap_or(Unit::Second);
        let cost = match &d.hits_addend {
            Some(h) => *h,
            None => u64::from(request.hits_addend.max(1)),
        };
        let decision = check_limit(limit, key, unit, cost, &mut check).await?;
        let code = if !decision.allowed && !limit.shadow_mode {
            Code::OverLimit
        } else {
            Code::Ok
        };
        tally.count(limit, code);
        statuses.push(limited_status(limit, unit, code, &decision, now_secs));
        verdicts.push(Verdict {
            rule: limit.full_key.clone(),
            key: key.clone(),
            algo: limit.algo,
            decision,
            shadow: limit.shadow_mode,
        });
    }
    let mut response = RateLimitResponse {
        overall_code: tally.overall().into(),
        ..RateLimitResponse::default()
    };
    if headers != Headers::Off
        && let Some(closest) = closest_to_limit(&statuses, &limits)
    {
        response.response_headers_to_add = rate_limit_headers(headers, closest);
    }
    response.statuses = statuses;
    Ok((response, verdicts))
}

/// A request outside the [bounds](self#bounds) is a bad request (an empty domain or
/// descriptor list in the reference's words).
fn validate(request: &RateLimitRequest) -> Result<(), CallError> {
    let bad = |why: String| Err(CallError::InvalidArgument(why));
    if request.domain.is_empty() {
        return bad("rate limit domain must not be empty".into());
    }
    if request.domain.len() > MAX_NAME {
        return bad(format!("rate limit domain longer than {MAX_NAME} bytes"));
    }
    if request.descriptors.is_empty() {
        return bad("rate limit descriptor list must not be empty".into());
    }
    if request.descriptors.len() > MAX_DESCRIPTORS {
        return bad(format!("more than {MAX_DESCRIPTORS} descriptors"));
    }
    for d in &request.descriptors {
        if d.entries.is_empty() {
            return bad("a descriptor must have at least one entry".into());
        }
        if d.entries.len() > MAX_ENTRIES {
            return bad(format!("a descriptor has more than {MAX_ENTRIES} entries"));
        }
        if d.entries
            .iter()
            .any(|e| e.key.len() > MAX_NAME || e.value.len() > MAX_NAME)
        {
            return bad(format!(
                "a descriptor entry's key or value is longer than {MAX_NAME} bytes"
            ));
        }
    }
    Ok(())
}

/// A descriptor's limit: the request's override (a FIXED window, keyed without sharing, bounded
/// as RL.CHECK bounds a window), else the config's match. An override is counted under the
/// rule `domain.override` when the config knows the domain, else under no rule: a caller does
/// not name metrics series.
fn find_limit(config: &Config, domain: &str, d: &RateLimitDescriptor) -> Result<Found, CallError> {
    let entries: Vec<(&str, &str)> = d
        .entries
        .iter()
        .map(|e| (e.key.as_str(), e.value.as_str()))
        .collect();
    if let Some(o) = &d.limit
        && let Some(unit) = Unit::from_proto(o.unit)
        && o.requests_per_unit > 0
    {
        let period = Nanos::from_secs(unit.seconds());
        sluice_core::spec::validate(Algo::Fixed, u64::from(o.requests_per_unit), period, None, 0)
            .map_err(|e| CallError::InvalidArgument(format!("limit override: {e}")))?;
    }
    Ok(match &d.limit {
        Some(o) => Unit::from_proto(o.unit).map(|unit| {
            let limit = Limit {
                full_key: if config.has_domain(domain) {
                    crate::config::override_rule(domain)
                } else {
                    String::new()
                },
                requests_per_unit: o.requests_per_unit,
                unit: Some(unit),
                unlimited: false,
                shadow_mode: false,
                quota_mode: false,
                name: String::new(),
                replaces: Vec::new(),
                algo: Algo::Fixed,
            };
            (limit, store_key(domain, &entries, &[]))
        }),
        None => config.get_limit(domain, &entries).map(|m| {
            (
                (**m.limit).clone(),
                store_key(domain, &entries, &m.shared_values),
            )
        }),
    })
}

/// Whether another matched limit names this one in its `replaces`.
fn is_replaced(limit: &Limit, replaced: &HashSet<&str>) -> bool {
    !limit.name.is_empty() && replaced.contains(limit.name.as_str())
}

/// The status of a descriptor that is not checked: OK, with `limit_remaining` u32::MAX when it
/// is unlimited.
fn unchecked_status(found: &Found) -> DescriptorStatus {
    let unlimited = found.as_ref().is_some_and(|(l, _)| l.unlimited);
    DescriptorStatus {
        code: Code::Ok.into(),
        limit_remaining: if unlimited { u32::MAX } else { 0 },
        ..DescriptorStatus::default()
    }
}

/// Checks one limit through `check`; a cost above the limit, or a limit of 0, is over the
/// limit without touching the store.
async fn check_limit<F>(
    limit: &Limit,
    key: &[u8],
    unit: Unit,
    cost: u64,
    check: &mut impl FnMut(&Check<'_>) -> F,
) -> Result<Decision, CallError>
where
    F: std::future::Future<Output = Result<Decision, String>>,
{
    let limit_n = u64::from(limit.requests_per_unit);
    if limit_n == 0 || cost > limit_n {
        return Ok(over(limit.requests_per_unit));
    }
    check(&Check {
        key,
        limit: limit_n,
        period: Nanos::from_secs(unit.seconds()),
        cost,
        algo: limit.algo,
    })
    .await
    .map_err(CallError::Unavailable)
}

/// The status of a checked descriptor: its code, its limit, what remains and when it resets
/// (FIXED's window end; otherwise the decision's reset, or the window end for a denial
/// that gives none).
fn limited_status(
    limit: &Limit,
    unit: Unit,
    code: Code,
    decision: &Decision,
    now_secs: u64,
) -> DescriptorStatus {
    let reset_secs =
        if limit.algo == Algo::Fixed || !decision.allowed && decision.reset_after.0 == 0 {
            window_reset(unit, now_secs)
        } else {
            decision.reset_after.0.div_ceil(Nanos::PER_SEC)
        };
    DescriptorStatus {
        code: code.into(),
        current_limit: Some(RateLimit {
            name: limit.name.clone(),
            requests_per_unit: limit.requests_per_unit,
            unit: unit.to_proto(),
        }),
        limit_remaining: if decision.allowed {
            u32::try_from(decision.remaining).unwrap_or(u32::MAX)
        } else {
            0
        },
        duration_until_reset: Some(prost_types::Duration {
            seconds: i64::try_from(reset_secs).unwrap_or(i64::MAX),
            nanos: 0,
        }),
    }
}

/// Over-limit counts toward the overall code.
#[derive(Debug, Default)]
struct Tally {
    failed: usize,
    quota_total: usize,
    quota_failed: usize,
}

impl Tally {
    fn count(&mut self, limit: &Limit, code: Code) {
        let over = usize::from(code == Code::OverLimit);
        if limit.quota_mode {
            self.quota_total += 1;
            self.quota_failed += over;
        } else {
            self.failed += over;
        }
    }

    /// OVER_LIMIT when any non-quota descriptor is, or when every quota-mode descriptor is.
    fn overall(&self) -> Code {
        let quota_all = self.quota_total > 0 && self.quota_total == self.quota_failed;
        if self.failed > 0 || quota_all {
            Code::OverLimit
        } else {
            Code::Ok
        }
    }
}

/// The headers that describe `closest`: `Limit`, `Remaining` and `Reset`, under `headers`'
/// prefix.
fn rate_limit_headers(headers: Headers, closest: &DescriptorStatus) -> Vec<HeaderValue> {
    let prefix = if headers == Headers::XRateLimit {
        "X-RateLimit"
    } else {
        "RateLimit"
    };
    let limit = closest
        .current_limit
        .as_ref()
        .map_or(0, |l| l.requests_per_unit);
    let reset = closest
        .duration_until_reset
        .as_ref()
        .map_or(0, |d| d.seconds);
    [
        ("Limit", limit.to_string()),
        ("Remaining", closest.limit_remaining.to_string()),
        ("Reset", reset.to_string()),
    ]
    .into_iter()
    .map(|(name, value)| HeaderValue {
        key: format!("{prefix}-{name}"),
        value,
        ..HeaderValue::default()
    })
    .collect()
}

/// The status the headers describe: the last over-limit non-quota descriptor, else the
/// first with the least remaining.
fn closest_to_limit<'s>(
    statuses: &'s [DescriptorStatus],
    limits: &[Found],
) -> Option<&'s DescriptorStatus> {
    let mut best: Option<&DescriptorStatus> = None;
    let mut least = u32::MAX;
    for (s, l) in statuses.iter().zip(limits) {
        if s.current_limit.is_some() && s.limit_remaining < least {
            best = Some(s);
            least = s.limit_remaining;
        }
        let quota = l.as_ref().is_some_and(|(l, _)| l.quota_mode);
        if s.code == i32::from(Code::OverLimit) && !quota {
            best = Some(s);
            least = 0;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::pb::rate_limit_descriptor::{Entry, RateLimitOverride};

    /// Runs a future that never waits (the test checkers answer at once) to its end.
    fn ready<F: std::future::Future>(f: F) -> F::Output {
        let mut f = std::pin::pin!(f);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match f.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(v) => v,
            std::task::Poll::Pending => panic!("a test checker waited"),
        }
    }

    /// A fixed-window reference model of the store: counts per key, window by period.
    #[derive(Default)]
    struct Windows(HashMap<Vec<u8>, (u64, u64)>);

    impl Windows {
        fn check(&mut self, c: &Check<'_>, now: Nanos) -> Result<Decision, String> {
            let window = now.0 / c.period.0;
            let used = self.0.entry(c.key.to_vec()).or_insert((window, 0));
            if used.0 != window {
                *used = (window, 0);
            }
            let allowed = used.1 + c.cost <= c.limit;
            if allowed {
                used.1 += c.cost;
            }
            Ok(Decision {
                allowed,
                limit: c.limit,
                remaining: c.limit - used.1,
                retry_after: None,
                reset_after: Nanos((window + 1) * c.period.0 - now.0),
            })
        }
    }

    fn desc(entries: &[(&str, &str)]) -> RateLimitDescriptor {
        RateLimitDescriptor {
            entries: entries
                .iter()
                .map(|(k, v)| Entry {
                    key: k.to_string(),
                    value: v.to_string(),
                })
                .collect(),
            ..RateLimitDescriptor::default()
        }
    }

    fn call(
        config: &Config,
        store: &mut Windows,
        domain: &str,
        descriptors: Vec<RateLimitDescriptor>,
    ) -> Result<RateLimitResponse, CallError> {
        let now = Nanos::from_secs(1_700_000_000);
        let request = RateLimitRequest {
            domain: domain.into(),
            descriptors,
            hits_addend: 0,
        };
        ready(should_rate_limit(
            config,
            &request,
            now,
            Headers::XRateLimit,
            |c| std::future::ready(store.check(c, now)),
        ))
        .map(|(r, _)| r)
    }

    fn codes(r: &RateLimitResponse) -> (i32, Vec<i32>) {
        (r.overall_code, r.statuses.iter().map(|s| s.code).collect())
    }

    const OK: i32 = Code::Ok as i32;
    const OVER: i32 = Code::OverLimit as i32;

    #[test]
    fn bad_requests_are_errors_and_unknowns_are_allowed() {
        let c = Config::from_files([("a.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")]).unwrap();
        let mut s = Windows::default();
        assert!(matches!(
            call(&c, &mut s, "", vec![desc(&[("k", "v")])]),
            Err(CallError::InvalidArgument(_))
        ));
        assert!(matches!(
            call(&c, &mut s, "d", vec![]),
            Err(CallError::InvalidArgument(_))
        ));
        let r = call(&c, &mut s, "nosuch", vec![desc(&[("k", "v")])]).unwrap();
        assert_eq!(codes(&r), (OK, vec![OK]));
        assert!(r.statuses[0].current_limit.is_none());
        let r = call(&c, &mut s, "d", vec![desc(&[("other", "v")])]).unwrap();
        assert_eq!(codes(&r), (OK, vec![OK]));
    }

    #[test]
    fn limits_remaining_reset_and_headers() {
        let c = Config::from_files([("a.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 2}\n")]).unwrap();
        let mut s = Windows::default();
        let r = call(&c, &mut s, "d", vec![desc(&[("k", "v")])]).unwrap();
        assert_eq!(codes(&r), (OK, vec![OK]));
        assert_eq!(r.statuses[0].limit_remaining, 1);
        // 1_700_000_000 is 20 s into its minute.
        assert_eq!(r.statuses[0].duration_until_reset.unwrap().seconds, 40);
        let h: Vec<_> = r
            .response_headers_to_add
            .iter()
            .map(|h| format!("{}: {}", h.key, h.value))
            .collect();
        assert_eq!(
            h,
            [
                "X-RateLimit-Limit: 2",
                "X-RateLimit-Remaining: 1",
                "X-RateLimit-Reset: 40"
            ]
        );
        call(&c, &mut s, "d", vec![desc(&[("k", "v")])]).unwrap();
        let r = call(&c, &mut s, "d", vec![desc(&[("k", "v")])]).unwrap();
        assert_eq!(codes(&r), (OVER, vec![OVER]));
        // Another value of the default key has its own window.
        let r = call(&c, &mut s, "d", vec![desc(&[("k", "w")])]).unwrap();
        assert_eq!(codes(&r), (OK, vec![OK]));
    }

    #[test]
    fn hits_addend_overrides_and_huge_costs() {
        let c = Config::from_files([("a.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10}\n")]).unwrap();
        let mut s = Windows::default();
        let now = Nanos::from_secs(1_700_000_000);
        let mut run = |hits: u32, per: Option<u64>| {
            let mut d = desc(&[("k", "v")]);
            d.hits_addend = per;
            let req = RateLimitRequest {
                domain: "d".into(),
                descriptors: vec![d],
                hits_addend: hits,
            };
            let (r, _) = ready(should_rate_limit(&c, &req, now, Headers::Off, |c| {
                std::future::ready(s.check(c, now))
            }))
            .unwrap();
            (r.statuses[0].code, r.statuses[0].limit_remaining)
        };
        assert_eq!(run(7, None), (OK, 3));
        // The descriptor's own addend wins; 0 only reads.
        assert_eq!(run(7, Some(0)), (OK, 3));
        assert_eq!(run(u32::MAX, None), (OVER, 0));
        assert_eq!(run(0, Some(u64::MAX)), (OVER, 0));
        // Neither huge one took anything.
        assert_eq!(run(0, None), (OK, 2));
        // A request override limit replaces the config's.
        let mut d = desc(&[("k", "v")]);
        d.limit = Some(RateLimitOverride {
            requests_per_unit: 0,
            unit: 1,
        });
        let req = RateLimitRequest {
            domain: "d".into(),
            descriptors: vec![d],
            hits_addend: 0,
        };
        let (r, _) = ready(should_rate_limit(&c, &req, now, Headers::Off, |c| {
            std::future::ready(s.check(c, now))
        }))
        .unwrap();
        assert_eq!(codes(&r), (OVER, vec![OVER]));
    }

    #[test]
    fn keys_are_namespaced_and_requests_bounded() {
        let c = Config::from_files([("a.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")]).unwrap();
        let mut keys = Vec::new();
        let mut run = |domain: &str, descriptors: Vec<RateLimitDescriptor>| {
            let req = RateLimitRequest {
                domain: domain.into(),
                descriptors,
                hits_addend: 1,
            };
            let now = Nanos::from_secs(1_700_000_000);
            ready(should_rate_limit(&c, &req, now, Headers::Off, |c| {
                keys.push(c.key.to_vec());
                std::future::ready(Windows::default().check(c, now))
            }))
            .map(|(_, v)| v)
        };
        let verdicts = run("d", vec![desc(&[("k", "v")])]).unwrap();
        assert_eq!(verdicts[0].rule, "d.k");
        let mut d = desc(&[("a", "b")]);
        d.limit = Some(RateLimitOverride {
            requests_per_unit: 5,
            unit: 6,
        });
        // An override in a domain the config does not know counts under no rule.
        let verdicts = run("api:bob", vec![d.clone()]).unwrap();
        assert_eq!(verdicts[0].rule, "");
        assert_eq!(run("d", vec![d.clone()]).unwrap()[0].rule, "d.override");
        let bad =
            |r: Result<Vec<Verdict>, CallError>| matches!(r, Err(CallError::InvalidArgument(_)));
        let long = "x".repeat(MAX_NAME + 1);
        assert!(bad(run(&long, vec![desc(&[("k", "v")])])));
        assert!(bad(run("d", vec![desc(&[])])));
        assert!(bad(run("d", vec![desc(&[("k", &long)])])));
        assert!(bad(run("d", vec![desc(&[(&long, "v")])])));
        assert!(bad(run(
            "d",
            vec![desc(&[("k", "v")]); MAX_DESCRIPTORS + 1]
        )));
        assert!(bad(run("d", vec![desc(&[("k", "v"); MAX_ENTRIES + 1])])));
        // At the bounds: served.
        let at = "x".repeat(MAX_NAME);
        assert!(
            run(
                &at,
                vec![desc(&[(at.as_str(), at.as_str()); MAX_ENTRIES]); MAX_DESCRIPTORS]
            )
            .is_ok()
        );
        assert_eq!(keys[0], b"envoy:d|k_v");
        assert_eq!(keys[1], b"envoy:api:bob|a_b");
    }

    #[test]
    fn a_failing_store_is_unavailable() {
        let c = Config::from_files([("a.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")]).unwrap();
        let req = RateLimitRequest {
            domain: "d".into(),
            descriptors: vec![desc(&[("k", "v")])],
            hits_addend: 1,
        };
        let got = ready(should_rate_limit(&c, &req, Nanos(0), Headers::Off, |_| {
            std::future::ready(Err("down".into()))
        }));
        assert_eq!(got.unwrap_err(), CallError::Unavailable("down".into()));
    }

    #[test]
    fn share_threshold_counts_matches_together() {
        let c = Config::from_files([("a.yaml", "domain: d\ndescriptors:\n  - key: files\n    value: files/*\n    share_threshold: true\n    rate_limit: {unit: hour, requests_per_unit: 2}\n  - key: own\n    value: own/*\n    rate_limit: {unit: hour, requests_per_unit: 2}\n")]).unwrap();
        let mut s = Windows::default();
        let mut one =
            |k: &str, v: &str| codes(&call(&c, &mut s, "d", vec![desc(&[(k, v)])]).unwrap()).0;
        assert_eq!(one("files", "files/a"), OK);
        assert_eq!(one("files", "files/b"), OK);
        assert_eq!(one("files", "files/c"), OVER);
        assert_eq!(one("own", "own/a"), OK);
        assert_eq!(one("own", "own/a"), OK);
        assert_eq!(one("own", "own/b"), OK);
        assert_eq!(one("own", "own/a"), OVER);
    }
}
