//! Credentials on every HTTP and gRPC front: the `Authorization` header (or gRPC's
//! `authorization` metadata, the same text) read as the user and password a RESP client would
//! give to `AUTH`.
//!
//! # Format
//! - `Bearer <password>`: the `default` user's password (`AUTH <password>`).
//! - `Basic base64(<user>:<password>)`: a named user (`AUTH <user> <password>`), RFC 7617; the
//!   user name ends at the first `:`.
//!
//! This module only reads what was sent; who may log in, and what they may run, is the
//! caller's (the node's ACL users, the sidecar's `--requirepass`). A refusal is [`unauthorized`]
//! (no or wrong credentials: `401` with `WWW-Authenticate`) or [`forbidden`] (a valid user
//! without the permission: `403` with Redis's `NOPERM` text).

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};

use crate::reply::{self, Refusal};

/// The longest `Authorization` value read: Redis bounds an unauthenticated bulk to 16 KB, and
/// a user name and password are far shorter.
pub const MAX_CREDENTIALS: usize = 16 << 10;

/// The user name `Bearer` logs in as.
pub const DEFAULT_USER: &str = "default";

/// An `Authorization` value that is neither Bearer nor Basic, does not decode, or is longer
/// than [`MAX_CREDENTIALS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

/// A user and password, as sent.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub user: String,
    pub password: Vec<u8>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password: a debug print may end up in a log.
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

/// The credentials of an `Authorization` value; `None` when there are none. `Err` when a value
/// is there but is not Bearer or Basic, or does not decode.
pub fn parse(value: Option<&[u8]>) -> Result<Option<Credentials>, Malformed> {
    let Some(value) = value else { return Ok(None) };
    if value.len() > MAX_CREDENTIALS {
        return Err(Malformed);
    }
    let (scheme, rest) = match value.iter().position(|&b| b == b' ') {
        Some(at) => (&value[..at], value[at + 1..].trim_ascii()),
        None => return Err(Malformed),
    };
    if scheme.eq_ignore_ascii_case(b"Bearer") {
        return Ok(Some(Credentials {
            user: DEFAULT_USER.into(),
            password: rest.to_vec(),
        }));
    }
    if !scheme.eq_ignore_ascii_case(b"Basic") {
        return Err(Malformed);
    }
    let decoded = base64_decode(rest).ok_or(Malformed)?;
    let at = decoded.iter().position(|&b| b == b':').ok_or(Malformed)?;
    let user = String::from_utf8(decoded[..at].to_vec()).map_err(|_| Malformed)?;
    Ok(Some(Credentials {
        user,
        password: decoded[at + 1..].to_vec(),
    }))
}

/// [`parse`] on a request's `Authorization` header.
pub fn from_headers(headers: &HeaderMap) -> Result<Option<Credentials>, Malformed> {
    parse(
        headers
            .get(header::AUTHORIZATION)
            .map(HeaderValue::as_bytes),
    )
}

/// `401`: no credentials, or ones no user accepts.
pub fn unauthorized() -> Refusal {
    let mut r = reply::error(
        StatusCode::UNAUTHORIZED,
        "Authorization: Bearer <password> or Basic <user:password> required (WRONGPASS invalid username-password pair or user is disabled)",
    );
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Basic realm=\"sluice\", Bearer"),
    );
    r.into()
}

/// `403`: the user logged in but may not run the request's command on its keys.
pub fn forbidden(noperm: &str) -> Refusal {
    reply::error(StatusCode::FORBIDDEN, noperm).into()
}

/// Compares without stopping at the first difference.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Standard base64 (RFC 4648, with or without padding); `None` on any other byte.
fn base64_decode(text: &[u8]) -> Option<Vec<u8>> {
    let text = text
        .strip_suffix(b"==")
        .or(text.strip_suffix(b"="))
        .unwrap_or(text);
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let mut acc = 0u32;
    let mut bits = 0;
    for &c in text {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds(v: &str) -> Result<Option<(String, String)>, Malformed> {
        parse(Some(v.as_bytes()))
            .map(|c| c.map(|c| (c.user, String::from_utf8(c.password).unwrap())))
    }

    #[test]
    fn bearer_is_default_and_basic_names_a_user() {
        assert_eq!(
            creds("Bearer s3cret"),
            Ok(Some(("default".into(), "s3cret".into())))
        );
        // "admin:pw:x" — the password may hold a colon.
        assert_eq!(
            creds("Basic YWRtaW46cHc6eA=="),
            Ok(Some(("admin".into(), "pw:x".into())))
        );
        assert_eq!(
            creds("basic YWRtaW46cHc"),
            Ok(Some(("admin".into(), "pw".into())))
        );
        assert_eq!(parse(None), Ok(None));
    }

    #[test]
    fn anything_else_is_refused() {
        assert_eq!(creds("Digest x"), Err(Malformed));
        assert_eq!(creds("Bearer"), Err(Malformed));
        assert_eq!(creds("Basic !!!"), Err(Malformed));
        // No colon: no user/password split.
        assert_eq!(creds("Basic YWRtaW4="), Err(Malformed));
        let huge = format!("Bearer {}", "x".repeat(MAX_CREDENTIALS));
        assert_eq!(creds(&huge), Err(Malformed));
    }
}
