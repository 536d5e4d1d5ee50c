//! [`Client::allow`]: `RL.ALLOW`, the seed's `isRequestAllowed`, through the library.
//!
//! The request goes to the node of its first bucket (the rules that apply to it, as a
//! [`RuleBook`] last learned them). When no node can answer, each applying rule gives its fail
//! mode, combined as the node combines them ([`HitPlan::fail`]).
//!
//! # The split
//! In a cluster the request's buckets may sit in different slots, and a node answers
//! `-CROSSSLOT` (or `-MOVED` for another node's slot). The check is then split by slot, with
//! the rules the book knows apply: `RL.ALLOW ... RULES n names... DRY` on each slot's node
//! first, which changes nothing; if every one allows, the same without `DRY`, which consumes.
//! A slot whose node cannot answer gives its rules' fail mode in the dry pass and is not asked
//! again.
//!
//! The race this leaves: between a slot's dry call and its consuming call, another request may
//! take what the dry call saw, so one slot can deny (or overdraw by this request's cost) after
//! the others have consumed. The answer is still the most restrictive one, but the
//! all-or-nothing guarantee of one node holds only within each slot.

use std::collections::BTreeMap;

use sluice_resp::value::Value;

use crate::node::cannot_answer;
use crate::rules::{Check, HitPlan, RuleBook, more_restrictive};
use crate::{Client, Decision, ReplyError, Source};

/// One request's attributes: `RL.ALLOW [USER id] [IP addr] [KEY apikey] [TIER name]
/// [ENDPOINT path] [COST n]`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllowRequest {
    pub user: Option<Vec<u8>>,
    pub ip: Option<Vec<u8>>,
    pub key: Option<Vec<u8>>,
    pub tier: Option<Vec<u8>>,
    pub endpoint: Option<Vec<u8>>,
    /// `None`: the node's default, 1.
    pub cost: Option<u64>,
}

/// The decision, and the rule that decided (`None` when no rule applies).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allowed {
    pub decision: Decision,
    pub rule: Option<Vec<u8>>,
}

impl AllowRequest {
    /// The command's words.
    pub fn words(&self) -> Vec<Vec<u8>> {
        let mut words = vec![b"RL.ALLOW".to_vec()];
        let attrs = [
            ("USER", &self.user),
            ("IP", &self.ip),
            ("KEY", &self.key),
            ("TIER", &self.tier),
            ("ENDPOINT", &self.endpoint),
        ];
        for (name, value) in attrs {
            if let Some(v) = value {
                words.push(name.as_bytes().to_vec());
                words.push(v.clone());
            }
        }
        if let Some(c) = self.cost {
            words.push(b"COST".to_vec());
            words.push(c.to_string().into_bytes());
        }
        words
    }

    /// The attributes as the rules' selectors read them.
    pub fn subjects(&self) -> sluice_core::scope::Request<'_> {
        sluice_core::scope::Request {
            user: self.user.as_deref(),
            ip: self.ip.as_deref(),
            key: self.key.as_deref(),
            tier: self.tier.as_deref(),
            endpoint: self.endpoint.as_deref(),
        }
    }
}

/// One call's outcome: the node's answer, or a fail mode's when it could not give one.
struct Answer {
    allowed: Allowed,
    from_node: bool,
}

impl Client {
    /// `RL.ALLOW` for `request` under the rules `book` knows; split by slot on `-CROSSSLOT`.
    /// `Err` only when the node refuses the request itself (bad arguments).
    pub async fn allow(
        &self,
        book: &RuleBook,
        request: &AllowRequest,
    ) -> Result<Allowed, ReplyError> {
        let checks = book.allow_checks(&request.subjects());
        let route = checks.first().map(|c| c.0.clone()).unwrap_or_default();
        let words = request.words();
        let answer = self.allow_call(&route, &words, &checks, request).await?;
        Ok(answer.allowed)
    }

    /// One `RL.ALLOW` call routed by `route`; on a slot refusal, the split.
    async fn allow_call(
        &self,
        route: &[u8],
        words: &[Vec<u8>],
        checks: &[Check],
        request: &AllowRequest,
    ) -> Result<Answer, ReplyError> {
        let refs: Vec<&[u8]> = words.iter().map(Vec::as_slice).collect();
        match self.command(route, &refs).await {
            Ok(Value::Error(e)) if spans_slots(&e) && !checks.is_empty() => {
                let allowed = self.split(checks, request).await?;
                Ok(Answer {
                    allowed,
                    from_node: true,
                })
            }
            Ok(Value::Error(e)) if !cannot_answer(&e) => Err(ReplyError(e)),
            Ok(Value::Error(_)) => Ok(self.allow_failed(checks, request, true)),
            Ok(reply) => match allowed_of(&reply, self.owner(route)) {
                Some(allowed) => Ok(Answer {
                    allowed,
                    from_node: true,
                }),
                None => Ok(self.allow_failed(checks, request, true)),
            },
            Err(_) => Ok(self.allow_failed(checks, request, false)),
        }
    }

    /// Each check's fail mode, combined as the node would.
    fn allow_failed(&self, checks: &[Check], request: &AllowRequest, unavailable: bool) -> Answer {
        let plan = HitPlan {
            checks: checks.to_vec(),
            cost: request.cost.unwrap_or(1),
            multi: true,
        };
        let (decision, label) = plan.fail(self, unavailable);
        Answer {
            allowed: Allowed {
                decision,
                rule: (!label.is_empty()).then_some(label),
            },
            from_node: false,
        }
    }

    /// The check split by slot: a dry call per slot, then, if all allow, the consuming calls.
    async fn split(&self, checks: &[Check], request: &AllowRequest) -> Result<Allowed, ReplyError> {
        let mut slots: BTreeMap<u16, Vec<Check>> = BTreeMap::new();
        for c in checks {
            let slot = sluice_cluster::slot::key_slot(&c.0);
            slots.entry(slot).or_default().push(c.clone());
        }
        let mut dry = Vec::with_capacity(slots.len());
        for group in slots.values() {
            dry.push(self.slot_call(group, request, true).await?);
        }
        if dry.iter().any(|a| !a.allowed.decision.allowed) {
            return Ok(most_restrictive(dry));
        }
        let mut consumed = Vec::with_capacity(slots.len());
        for (group, dry) in slots.values().zip(dry) {
            // A slot that answered by its fail mode already decided (and a local bucket took).
            consumed.push(if dry.from_node {
                self.slot_call(group, request, false).await?
            } else {
                dry
            });
        }
        Ok(most_restrictive(consumed))
    }

    /// `RL.ALLOW ... RULES n names... [DRY]` on the node of `group`'s slot.
    async fn slot_call(
        &self,
        group: &[Check],
        request: &AllowRequest,
        dry: bool,
    ) -> Result<Answer, ReplyError> {
        let mut words = request.words();
        words.push(b"RULES".to_vec());
        words.push(group.len().to_string().into_bytes());
        words.extend(group.iter().map(|c| c.1.clone()));
        if dry {
            words.push(b"DRY".to_vec());
        }
        let refs: Vec<&[u8]> = words.iter().map(Vec::as_slice).collect();
        let route = &group[0].0;
        match self.command(route, &refs).await {
            Ok(Value::Error(e)) if !cannot_answer(&e) => Err(ReplyError(e)),
            Ok(reply @ Value::Array(_)) => match allowed_of(&reply, self.owner(route)) {
                Some(allowed) => Ok(Answer {
                    allowed,
                    from_node: true,
                }),
                None => Ok(self.allow_failed(group, request, true)),
            },
            Ok(_) => Ok(self.allow_failed(group, request, true)),
            Err(_) => Ok(self.allow_failed(group, request, false)),
        }
    }
}

/// A node's answer that the request's buckets are not all in one of its slots.
fn spans_slots(error: &str) -> bool {
    error.starts_with("CROSSSLOT") || error.starts_with("MOVED")
}

/// The most restrictive of the slots' answers, as the node picks among its buckets.
fn most_restrictive(answers: Vec<Answer>) -> Allowed {
    let mut answers = answers.into_iter().map(|a| a.allowed);
    let first = answers.next().expect("a split has at least one slot");
    answers.fold(first, |best, a| {
        if more_restrictive(&a.decision, &best.decision) {
            a
        } else {
            best
        }
    })
}

/// `RL.ALLOW`'s six fields: allowed limit remaining retry_after_ms reset_after_ms rule.
fn allowed_of(reply: &Value, node: Option<std::sync::Arc<str>>) -> Option<Allowed> {
    let Value::Array(items) = reply else {
        return None;
    };
    let [a, l, r, retry, reset, rule] = items.as_slice() else {
        return None;
    };
    let int = |v: &Value| match v {
        Value::Int(n) => Some(*n),
        _ => None,
    };
    let rule = match rule {
        Value::Bulk(b) => Some(b.to_vec()),
        _ => None,
    };
    Some(Allowed {
        decision: Decision {
            allowed: int(a)? == 1,
            limit: u64::try_from(int(l)?).ok()?,
            remaining: u64::try_from(int(r)?).ok()?,
            retry_after_ms: int(retry)?,
            reset_after_ms: int(reset)?,
            source: Source::Node(node.unwrap_or_else(|| "".into())),
        },
        rule,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_states_its_words_in_order() {
        let r = AllowRequest {
            user: Some(b"alice".to_vec()),
            endpoint: Some(b"/api".to_vec()),
            cost: Some(2),
            ..AllowRequest::default()
        };
        let words: Vec<String> = r
            .words()
            .iter()
            .map(|w| String::from_utf8_lossy(w).into_owned())
            .collect();
        assert_eq!(
            words,
            ["RL.ALLOW", "USER", "alice", "ENDPOINT", "/api", "COST", "2"]
        );
        assert_eq!(r.subjects().user, Some(&b"alice"[..]));
    }

    #[test]
    fn the_six_fields_are_read_and_garbage_is_not() {
        let b = |s: &str| Value::Bulk(bytes::Bytes::copy_from_slice(s.as_bytes()));
        let reply = Value::Array(vec![
            Value::Int(0),
            Value::Int(2),
            Value::Int(0),
            Value::Int(900),
            Value::Int(1000),
            b("u"),
        ]);
        let a = allowed_of(&reply, Some("n:1".into())).unwrap();
        assert!(!a.decision.allowed);
        assert_eq!(a.decision.retry_after_ms, 900);
        assert_eq!(a.rule.as_deref(), Some(&b"u"[..]));
        assert_eq!(allowed_of(&Value::Array(vec![Value::Int(1)]), None), None);
        assert_eq!(allowed_of(&Value::Nil, None), None);
    }
}
