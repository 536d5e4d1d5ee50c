//! The seed's rule fields: which attribute of a request a rule limits (`SCOPE user|ip|key`),
//! for which tier (`TIER name`) and under which path prefix (`ROUTE prefix`), and how a request
//! (`RL.ALLOW USER .. IP .. KEY .. TIER .. ENDPOINT ..`, `POST /v1/check`, `GET /v1/auth`)
//! finds the rules that apply to it and the subject each one counts.
//!
//! # Invariants
//! - A rule with no scope never applies to a request: it is checked by name (`RL.HIT`).
//! - A rule with a tier applies only to requests of exactly that tier; a rule with a route only
//!   to requests whose endpoint starts with it. A rule without them applies to every tier and
//!   endpoint.
//! - A rule whose scope's attribute the request lacks is skipped, not counted on an empty
//!   subject.

use std::fmt;

/// The longest tier name or route prefix a rule may state, and the longest attribute a request
/// may carry: they end up in bucket keys and logs.
pub const MAX_ATTR_LEN: usize = 512;

/// Which attribute of a request is a rule's subject.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    User,
    Ip,
    Key,
}

impl Scope {
    /// Parses `user`, `ip` or `key` (any case).
    pub fn parse(s: &[u8]) -> Option<Scope> {
        [
            ("user", Scope::User),
            ("ip", Scope::Ip),
            ("key", Scope::Key),
        ]
        .into_iter()
        .find(|(name, _)| s.eq_ignore_ascii_case(name.as_bytes()))
        .map(|(_, scope)| scope)
    }

    pub fn name(self) -> &'static str {
        match self {
            Scope::User => "user",
            Scope::Ip => "ip",
            Scope::Key => "key",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a tier or route was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttrError {
    /// Empty, longer than [`MAX_ATTR_LEN`], or holding a space or a control character (the
    /// spec text is split on whitespace).
    Tier,
    /// As [`AttrError::Tier`], or not starting with `/`.
    Route,
}

impl fmt::Display for AttrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttrError::Tier => write!(
                f,
                "TIER must be 1-{MAX_ATTR_LEN} printable characters without spaces"
            ),
            AttrError::Route => write!(
                f,
                "ROUTE must be a path prefix starting with '/' (1-{MAX_ATTR_LEN} printable characters without spaces)"
            ),
        }
    }
}

impl std::error::Error for AttrError {}

fn printable(s: &[u8]) -> bool {
    !s.is_empty() && s.len() <= MAX_ATTR_LEN && s.iter().all(|c| c.is_ascii_graphic())
}

/// Checks a rule's `TIER`.
pub fn parse_tier(s: &[u8]) -> Result<String, AttrError> {
    if !printable(s) {
        return Err(AttrError::Tier);
    }
    Ok(String::from_utf8_lossy(s).into_owned())
}

/// Checks a rule's `ROUTE`.
pub fn parse_route(s: &[u8]) -> Result<String, AttrError> {
    if !printable(s) || s[0] != b'/' {
        return Err(AttrError::Route);
    }
    Ok(String::from_utf8_lossy(s).into_owned())
}

/// A rule's seed fields.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    pub scope: Option<Scope>,
    pub tier: Option<String>,
    pub route: Option<String>,
}

/// What a request says about itself: the attributes `RL.ALLOW` takes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Request<'a> {
    pub user: Option<&'a [u8]>,
    pub ip: Option<&'a [u8]>,
    pub key: Option<&'a [u8]>,
    pub tier: Option<&'a [u8]>,
    pub endpoint: Option<&'a [u8]>,
}

impl<'a> Request<'a> {
    /// The attribute `scope` names.
    pub fn attribute(&self, scope: Scope) -> Option<&'a [u8]> {
        match scope {
            Scope::User => self.user,
            Scope::Ip => self.ip,
            Scope::Key => self.key,
        }
    }
}

impl Selector {
    /// The subject this rule counts `request` on, or `None` when the rule does not apply.
    pub fn subject<'a>(&self, request: &Request<'a>) -> Option<&'a [u8]> {
        let scope = self.scope?;
        if let Some(tier) = &self.tier
            && request.tier != Some(tier.as_bytes())
        {
            return None;
        }
        if let Some(route) = &self.route
            && !request
                .endpoint
                .is_some_and(|e| e.starts_with(route.as_bytes()))
        {
            return None;
        }
        request.attribute(scope).filter(|s| !s.is_empty())
    }

    /// The spec words (` SCOPE user TIER free ROUTE /api`), empty for a rule without them.
    pub fn to_text(&self) -> String {
        let mut t = String::new();
        if let Some(s) = self.scope {
            t.push_str(&format!(" SCOPE {s}"));
        }
        if let Some(tier) = &self.tier {
            t.push_str(&format!(" TIER {tier}"));
        }
        if let Some(route) = &self.route {
            t.push_str(&format!(" ROUTE {route}"));
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(scope: Scope, tier: Option<&str>, route: Option<&str>) -> Selector {
        Selector {
            scope: Some(scope),
            tier: tier.map(str::to_string),
            route: route.map(str::to_string),
        }
    }

    #[test]
    fn rules_apply_by_tier_route_and_present_attribute() {
        let req = Request {
            user: Some(b"alice"),
            ip: Some(b"10.0.0.1"),
            key: None,
            tier: Some(b"free"),
            endpoint: Some(b"/api/search?q=1"),
        };
        assert_eq!(
            sel(Scope::User, None, None).subject(&req),
            Some(&b"alice"[..])
        );
        assert_eq!(
            sel(Scope::Ip, Some("free"), Some("/api")).subject(&req),
            Some(&b"10.0.0.1"[..])
        );
        assert_eq!(sel(Scope::Ip, Some("pro"), None).subject(&req), None);
        assert_eq!(sel(Scope::User, None, Some("/admin")).subject(&req), None);
        // No API key in the request: a key-scoped rule is skipped.
        assert_eq!(sel(Scope::Key, None, None).subject(&req), None);
        // No scope: never applies.
        assert_eq!(Selector::default().subject(&req), None);
        // A tiered rule does not apply to a request that names no tier.
        let untiered = Request { tier: None, ..req };
        assert_eq!(
            sel(Scope::User, Some("free"), None).subject(&untiered),
            None
        );
    }

    #[test]
    fn attributes_are_checked_and_round_trip() {
        assert_eq!(Scope::parse(b"IP"), Some(Scope::Ip));
        assert_eq!(Scope::parse(b"org"), None);
        assert_eq!(parse_tier(b"free"), Ok("free".into()));
        assert_eq!(parse_tier(b""), Err(AttrError::Tier));
        assert_eq!(parse_tier(b"a b"), Err(AttrError::Tier));
        assert_eq!(parse_route(b"/api/v1"), Ok("/api/v1".into()));
        assert_eq!(parse_route(b"api"), Err(AttrError::Route));
        assert_eq!(
            parse_route(&[b'/'; MAX_ATTR_LEN + 1]),
            Err(AttrError::Route)
        );
        assert_eq!(
            sel(Scope::Key, Some("pro"), Some("/v1")).to_text(),
            " SCOPE key TIER pro ROUTE /v1"
        );
    }
}
