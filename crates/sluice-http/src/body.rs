//! Request bodies and subjects: what a JSON body or a gateway's subrequest asks, as the words
//! of the command that answers it (`RL.CHECK`, `RL.ALLOW`, `RL.RULE SET`). Unknown, missing or
//! mistyped fields and unreadable headers are refused by name (`limit: invalid value ...`,
//! `X-User-Id: is longer than 512 bytes`); the command itself checks the values, and its
//! refusal is named after the field it concerns ([`crate::reply::resp_error`]).

use std::net::IpAddr;

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode, header};
use serde::Deserialize;
use serde_json::Value as Json;
use sluice_core::scope::MAX_ATTR_LEN;

use crate::digits::Digits;
use crate::reply::{Refusal, refuse};
use crate::trust::{Cidr, client_ip, normalize_path};
use crate::{BODY_DEADLINE, MAX_BODY};

/// A body of one `RL.CHECK`. The window is `window`, as in a rule's body; `period` (the word
/// of `RL.CHECK`) is its alias, and giving both is a duplicate field.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyCheck {
    pub key: String,
    pub limit: u64,
    #[serde(alias = "period")]
    pub window: Json,
    pub burst: Option<u64>,
    pub cost: Option<u64>,
    pub algo: Option<String>,
    pub dry: Option<bool>,
}

/// A body of one `RL.ALLOW`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Allow {
    pub user: Option<String>,
    pub ip: Option<String>,
    pub key: Option<String>,
    pub tier: Option<String>,
    pub endpoint: Option<String>,
    pub cost: Option<u64>,
}

impl Allow {
    /// `RL.ALLOW USER .. IP .. ...`, the endpoint as the gateway routes it
    /// ([`normalize_path`]): a `ROUTE` matches the path the backend serves, however the client
    /// spelled it.
    pub fn args(&self) -> Vec<String> {
        let mut args = vec!["RL.ALLOW".to_string()];
        let endpoint = self.endpoint.as_deref().map(normalize_path);
        for (word, v) in [
            ("USER", &self.user),
            ("IP", &self.ip),
            ("KEY", &self.key),
            ("TIER", &self.tier),
            ("ENDPOINT", &endpoint),
        ] {
            if let Some(v) = v {
                args.push(word.into());
                args.push(v.clone());
            }
        }
        if let Some(c) = self.cost {
            args.push("COST".into());
            args.push(c.to_string());
        }
        args
    }
}

impl KeyCheck {
    /// `RL.CHECK key limit window ...`, or why `window` is not one.
    pub fn args(&self) -> Result<Vec<String>, String> {
        let mut args = vec![
            "RL.CHECK".to_string(),
            self.key.clone(),
            self.limit.to_string(),
            window_text(&self.window)?,
        ];
        if let Some(b) = self.burst {
            args.extend(["BURST".into(), b.to_string()]);
        }
        if let Some(c) = self.cost {
            args.extend(["COST".into(), c.to_string()]);
        }
        if let Some(a) = &self.algo {
            args.extend(["ALGO".into(), a.clone()]);
        }
        if self.dry == Some(true) {
            args.push("DRY".into());
        }
        Ok(args)
    }
}

/// A window as the command's word: a duration text (`"1m"`) or integer seconds.
fn window_text(window: &Json) -> Result<String, String> {
    match window {
        Json::String(s) => Ok(s.clone()),
        Json::Number(n) if n.is_u64() => Ok(n.to_string()),
        _ => Err("window: must be a number of seconds or a duration such as \"1m\"".into()),
    }
}

/// Which form a `POST /v1/check` body is: a key check when it has `limit` or a window
/// (`window`, or its alias `period`).
pub fn check_args(map: serde_json::Map<String, Json>) -> Result<Vec<String>, Refusal> {
    if ["limit", "window", "period"]
        .iter()
        .any(|f| map.contains_key(*f))
    {
        fields::<KeyCheck>(map)?
            .args()
            .map_err(|why| refuse(StatusCode::BAD_REQUEST, why))
    } else {
        Ok(fields::<Allow>(map)?.args())
    }
}

/// The period of a key check, in milliseconds, for `RateLimit-Policy`'s window.
pub fn key_window(args: &[String]) -> Option<u64> {
    if args[0] != "RL.CHECK" {
        return None;
    }
    period_ms(&args[3])
}

/// A key check's body read in place, without building a JSON tree or copying a word: the
/// common body of `POST /v1/check`, parsed once. [`KeyCheckIn::parse`] accepts only bodies
/// that [`json_object`] and [`check_args`] take to the same words; anything else (a request
/// check, a mistake, a repeated field, a string with an escape) is `None`, and goes the way
/// that names what is wrong.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyCheckIn<'a> {
    key: &'a str,
    limit: u64,
    #[serde(alias = "period", borrow)]
    window: WindowIn<'a>,
    burst: Option<u64>,
    cost: Option<u64>,
    #[serde(borrow)]
    algo: Option<&'a str>,
    dry: Option<bool>,
}

/// A JSON string of printable ASCII without escapes, and what follows it.
fn plain_bytes(json: &[u8]) -> Option<(&[u8], &[u8])> {
    let json = json.strip_prefix(b"\"")?;
    for (at, &b) in json.iter().enumerate() {
        if b == b'"' {
            return Some((&json[..at], &json[at + 1..]));
        }
        if !(0x20..0x7f).contains(&b) || b == b'\\' {
            return None;
        }
    }
    None
}

/// [`plain_bytes`] as text.
fn plain_text(json: &[u8]) -> Option<(&str, &[u8])> {
    let (text, rest) = plain_bytes(json)?;
    Some((std::str::from_utf8(text).ok()?, rest))
}

/// A JSON integer of at most 19 digits without a sign or a leading zero, and what follows it.
fn plain_u64(json: &[u8]) -> Option<(u64, &[u8])> {
    let digits = json.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 19 || (digits > 1 && json[0] == b'0') {
        return None;
    }
    let n = json[..digits]
        .iter()
        .fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    Some((n, &json[digits..]))
}

/// A key check's window as sent: a duration text or integer seconds.
#[derive(Debug, Clone, Copy)]
enum WindowIn<'a> {
    Text(&'a str),
    Seconds(u64),
}

impl<'de: 'a, 'a> Deserialize<'de> for WindowIn<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = WindowIn<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a number of seconds or a duration text")
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Self::Value, E> {
                Ok(WindowIn::Seconds(n))
            }
            fn visit_borrowed_str<E: serde::de::Error>(
                self,
                text: &'de str,
            ) -> Result<Self::Value, E> {
                Ok(WindowIn::Text(text))
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// One word of a command built in place: the body's text or a number's digits.
#[derive(Debug, Clone, Copy)]
pub enum Word<'a> {
    Text(&'a [u8]),
    Number(Digits),
}

impl AsRef<[u8]> for Word<'_> {
    fn as_ref(&self) -> &[u8] {
        match self {
            Word::Text(t) => t,
            Word::Number(d) => d.as_ref(),
        }
    }
}

/// The words of one `RL.CHECK` (at most 11: the name, key, limit, window, and four options).
#[derive(Debug)]
pub struct Words<'a> {
    words: [Word<'a>; 11],
    len: usize,
}

impl<'a> Words<'a> {
    fn push(&mut self, w: Word<'a>) {
        self.words[self.len] = w;
        self.len += 1;
    }

    pub fn as_slice(&self) -> &[Word<'a>] {
        &self.words[..self.len]
    }
}

impl<'a> KeyCheckIn<'a> {
    /// The body's key check, or `None` (see the type).
    pub fn parse(body: &'a [u8]) -> Option<KeyCheckIn<'a>> {
        // Only an object: serde would also read a struct from an array of its fields, which
        // the JSON tree's path refuses ("the body must be a JSON object").
        if body.trim_ascii_start().first() != Some(&b'{') {
            return None;
        }
        KeyCheckIn::plain(body).or_else(|| serde_json::from_slice(body).ok())
    }

    /// [`KeyCheckIn::parse`] of the bodies clients send, without serde: an object with no
    /// whitespace, escape, `null` or non-ASCII text, its numbers integers without a sign,
    /// fraction or leading zero, each field at most once. What this takes, serde takes to the
    /// same fields (a test compares); anything else is `None` here and serde reads it.
    fn plain(body: &'a [u8]) -> Option<KeyCheckIn<'a>> {
        fn once<T>(slot: &mut Option<T>, value: T) -> Option<()> {
            slot.is_none().then(|| *slot = Some(value))
        }
        let mut rest = body.strip_prefix(b"{")?;
        let mut check = KeyCheckIn {
            key: "",
            limit: 0,
            window: WindowIn::Seconds(0),
            burst: None,
            cost: None,
            algo: None,
            dry: None,
        };
        let (mut key, mut limit, mut window) = (None, None, None);
        loop {
            let (name, after) = plain_bytes(rest)?;
            rest = after.strip_prefix(b":")?;
            rest = match name {
                b"key" => plain_text(rest).and_then(|(v, r)| once(&mut key, v).map(|()| r))?,
                b"limit" => plain_u64(rest).and_then(|(v, r)| once(&mut limit, v).map(|()| r))?,
                b"window" | b"period" => {
                    let (w, r) = match rest.first()? {
                        b'"' => plain_text(rest).map(|(t, r)| (WindowIn::Text(t), r))?,
                        _ => plain_u64(rest).map(|(n, r)| (WindowIn::Seconds(n), r))?,
                    };
                    once(&mut window, w)?;
                    r
                }
                b"burst" => {
                    plain_u64(rest).and_then(|(v, r)| once(&mut check.burst, v).map(|()| r))?
                }
                b"cost" => {
                    plain_u64(rest).and_then(|(v, r)| once(&mut check.cost, v).map(|()| r))?
                }
                b"algo" => {
                    plain_text(rest).and_then(|(v, r)| once(&mut check.algo, v).map(|()| r))?
                }
                b"dry" => {
                    let (v, r) = if let Some(r) = rest.strip_prefix(b"true") {
                        (true, r)
                    } else {
                        (false, rest.strip_prefix(b"false")?)
                    };
                    once(&mut check.dry, v)?;
                    r
                }
                _ => return None,
            };
            match rest.split_first()? {
                (b',', after) => rest = after,
                (b'}', b"") => break,
                _ => return None,
            }
        }
        check.key = key?;
        check.limit = limit?;
        check.window = window?;
        Some(check)
    }

    /// `RL.CHECK key limit window ...`, word for word what [`KeyCheck::args`] gives.
    pub fn words(&self) -> Words<'a> {
        let mut w = Words {
            words: [Word::Text(b""); 11],
            len: 0,
        };
        w.push(Word::Text(b"RL.CHECK"));
        w.push(Word::Text(self.key.as_bytes()));
        w.push(Word::Number(Digits::of(self.limit)));
        w.push(match self.window {
            WindowIn::Text(t) => Word::Text(t.as_bytes()),
            WindowIn::Seconds(n) => Word::Number(Digits::of(n)),
        });
        if let Some(b) = self.burst {
            w.push(Word::Text(b"BURST"));
            w.push(Word::Number(Digits::of(b)));
        }
        if let Some(c) = self.cost {
            w.push(Word::Text(b"COST"));
            w.push(Word::Number(Digits::of(c)));
        }
        if let Some(a) = self.algo {
            w.push(Word::Text(b"ALGO"));
            w.push(Word::Text(a.as_bytes()));
        }
        if self.dry == Some(true) {
            w.push(Word::Text(b"DRY"));
        }
        w
    }

    /// The window in milliseconds, for `RateLimit-Policy`, as [`key_window`] reads it.
    pub fn window_ms(&self) -> Option<u64> {
        match self.window {
            WindowIn::Text(t) => period_ms(t),
            WindowIn::Seconds(n) => n.checked_mul(1000),
        }
    }
}

/// A period's milliseconds: integer seconds or a number with `ms`, `s`, `m`, `h` or `d`
/// (only for the policy header: the command has already checked it).
fn period_ms(text: &str) -> Option<u64> {
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let n: u64 = text[..digits].parse().ok()?;
    let unit = match text[digits..].to_ascii_lowercase().as_str() {
        "" | "s" => 1000,
        "ms" => 1,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    n.checked_mul(unit)
}

/// Reads a body of at most [`MAX_BODY`] bytes within [`BODY_DEADLINE`]. A body already read
/// with its head (a check's, nearly always) is taken without arming the deadline's timer.
pub async fn read_body(body: Body) -> Result<bytes::Bytes, Refusal> {
    let mut whole = std::pin::pin!(collect(body, MAX_BODY));
    let first = std::future::poll_fn(|cx| std::task::Poll::Ready(whole.as_mut().poll(cx))).await;
    let read = match first {
        std::task::Poll::Ready(read) => Ok(read),
        std::task::Poll::Pending => tokio::time::timeout(BODY_DEADLINE, whole).await,
    };
    match read {
        Err(_) => Err(refuse(
            StatusCode::REQUEST_TIMEOUT,
            "the body did not arrive in time",
        )),
        Ok(None) => Err(refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body is larger than {MAX_BODY} bytes"),
        )),
        Ok(Some(b)) => Ok(b),
    }
}

/// The body's bytes, as `axum::body::to_bytes` gives them (one frame as it came, several
/// joined, trailers left out); `None` past `limit` bytes or when the body breaks off.
async fn collect(mut body: Body, limit: usize) -> Option<bytes::Bytes> {
    use axum::body::HttpBody;
    let mut first = bytes::Bytes::new();
    let mut joined: Option<bytes::BytesMut> = None;
    let mut len = 0usize;
    while let Some(frame) =
        std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await
    {
        let Ok(data) = frame.ok()?.into_data() else {
            continue;
        };
        len = len.checked_add(data.len()).filter(|&n| n <= limit)?;
        match &mut joined {
            Some(j) => j.extend_from_slice(&data),
            None if first.is_empty() => first = data,
            None => {
                let mut j = bytes::BytesMut::with_capacity(len);
                j.extend_from_slice(&first);
                j.extend_from_slice(&data);
                joined = Some(j);
            }
        }
    }
    Some(joined.map_or(first, bytes::BytesMut::freeze))
}

/// A JSON object body, or the response that refuses it.
pub async fn json_object(
    headers: &HeaderMap,
    body: Body,
) -> Result<serde_json::Map<String, Json>, Refusal> {
    object_of(&json_body(headers, body).await?)
}

/// The bytes of a body the request says is JSON (see [`is_json`]), read as [`read_body`] does.
pub async fn json_body(headers: &HeaderMap, body: Body) -> Result<bytes::Bytes, Refusal> {
    if !is_json(headers) {
        return Err(not_json());
    }
    read_body(body).await
}

/// A JSON object's fields, or the `400` that says why `bytes` is not one.
pub fn object_of(bytes: &[u8]) -> Result<serde_json::Map<String, Json>, Refusal> {
    match serde_json::from_slice::<Json>(bytes) {
        Ok(Json::Object(m)) => Ok(m),
        Ok(_) => Err(refuse(
            StatusCode::BAD_REQUEST,
            "the body must be a JSON object",
        )),
        Err(e) => Err(refuse(StatusCode::BAD_REQUEST, format!("bad JSON: {e}"))),
    }
}

/// `T` from a JSON object; an unknown, missing or mistyped field refused as `field: why`.
pub fn fields<T: serde::de::DeserializeOwned>(
    map: serde_json::Map<String, Json>,
) -> Result<T, Refusal> {
    serde_path_to_error::deserialize(Json::Object(map))
        .map_err(|e| refuse(StatusCode::BAD_REQUEST, field_error(&e)))
}

/// `field: why` for a deserializing error: the path where it happened, or, for a field that is
/// missing or unknown (an error of the object as a whole), the field serde names.
fn field_error(e: &serde_path_to_error::Error<serde_json::Error>) -> String {
    let why = e.inner().to_string();
    let path = e.path().to_string();
    if path != "." {
        return format!("{path}: {why}");
    }
    let named = ["missing field `", "unknown field `", "duplicate field `"]
        .iter()
        .find_map(|p| why.strip_prefix(p))
        .and_then(|rest| rest.split('`').next());
    match named {
        Some(field) => format!("{field}: {why}"),
        None => why,
    }
}

/// Whether the request says its body is JSON (`application/json`, parameters allowed).
pub fn is_json(headers: &HeaderMap) -> bool {
    is_json_type(headers.get(header::CONTENT_TYPE).map(|v| v.as_bytes()))
}

/// [`is_json`] of a `Content-Type` value: text as `HeaderValue::to_str` takes it (visible
/// ASCII, spaces and tabs), its media type `application/json` in any case.
pub fn is_json_type(value: Option<&[u8]>) -> bool {
    value
        .filter(|v| v.iter().all(|&b| b == b'\t' || (32..127).contains(&b)))
        .and_then(|v| v.split(|&b| b == b';').next())
        .is_some_and(|m| m.trim_ascii().eq_ignore_ascii_case(b"application/json"))
}

/// The `415` of a body that is not JSON.
pub fn not_json() -> Refusal {
    refuse(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "Content-Type: must be application/json",
    )
}

/// What `GET /v1/auth` may read from a subrequest's headers: each subject's header when the
/// deployment trusts it (its gateway sets and overwrites it), and the proxies whose
/// `X-Forwarded-For` entries count.
#[derive(Clone, Debug, Default)]
pub struct SubjectHeaders {
    pub user: Option<Trusted>,
    pub key: Option<Trusted>,
    pub tier: Option<Trusted>,
    /// The trusted ones of `X-Original-URI` (nginx) and `X-Forwarded-Uri` (Traefik), in that
    /// order.
    pub endpoint: Vec<Trusted>,
    /// `X-Real-IP`, read when no `X-Forwarded-For` names the client.
    pub real_ip: Option<Trusted>,
    pub proxies: Vec<Cidr>,
}

/// A trusted header: its name as looked up (lower case) and as the deployment spelled it (in
/// errors).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trusted {
    lookup: String,
    name: String,
}

/// The flags naming those headers, the node's and the sidecar's alike.
#[derive(clap::Args, Debug, Clone)]
pub struct SubjectHeaderArgs {
    /// The request header `GET /v1/auth` reads the user id from (when trusted).
    #[arg(long = "http-user-header", default_value = "X-User-Id")]
    pub http_user_header: String,
    /// The request header `GET /v1/auth` reads the API key from (when trusted).
    #[arg(long = "http-key-header", default_value = "X-Api-Key")]
    pub http_key_header: String,
    /// The request header `GET /v1/auth` reads the tier from (when trusted).
    #[arg(long = "http-tier-header", default_value = "X-Tier")]
    pub http_tier_header: String,
    /// The only headers `GET /v1/auth` reads, comma-separated: those the gateway sets and
    /// overwrites on every subrequest (a header it passes on from the client would let the
    /// client pick its own path, user or tier). The default matches examples/nginx; Traefik
    /// sets X-Forwarded-Uri instead of X-Original-URI. An API key header is the client's own
    /// by nature: trust it only where the gateway checks the key (made-up keys are fresh
    /// buckets).
    #[arg(
        long = "http-trusted-headers",
        value_delimiter = ',',
        default_value = "X-Original-URI,X-User-Id,X-Tier"
    )]
    pub http_trusted_headers: Vec<String>,
    /// The proxies whose X-Forwarded-For entries `GET /v1/auth` believes, comma-separated
    /// networks (10.0.0.0/8) or addresses: the client is the rightmost entry none of them
    /// wrote. A peer outside them is itself the client.
    #[arg(
        long = "http-trusted-proxies",
        value_delimiter = ',',
        value_parser = Cidr::parse,
        default_value = "127.0.0.0/8,::1/128"
    )]
    pub http_trusted_proxies: Vec<Cidr>,
}

impl SubjectHeaderArgs {
    /// The headers to read, each only if trusted.
    pub fn headers(&self) -> SubjectHeaders {
        let trusted = |name: &str| {
            self.http_trusted_headers
                .iter()
                .map(|t| t.trim())
                .find(|t| t.eq_ignore_ascii_case(name))
                .map(|t| Trusted {
                    lookup: t.to_ascii_lowercase(),
                    name: t.to_string(),
                })
        };
        SubjectHeaders {
            user: trusted(&self.http_user_header),
            key: trusted(&self.http_key_header),
            tier: trusted(&self.http_tier_header),
            endpoint: ["X-Original-URI", "X-Forwarded-Uri"]
                .into_iter()
                .filter_map(trusted)
                .collect(),
            real_ip: trusted("X-Real-IP"),
            proxies: self.http_trusted_proxies.clone(),
        }
    }
}

/// The query of `GET /v1/auth`: subjects and `deny_status`.
pub fn parse_query(query: &str) -> Result<(Allow, Option<StatusCode>), Refusal> {
    let mut allow = Allow::default();
    let mut deny = None;
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        let v = v.into_owned();
        match &*k {
            "user" => allow.user = Some(v),
            "ip" => allow.ip = Some(v),
            "key" => allow.key = Some(v),
            "tier" => allow.tier = Some(v),
            "endpoint" => allow.endpoint = Some(v),
            "cost" => {
                allow.cost = Some(v.parse().map_err(|_| {
                    refuse(
                        StatusCode::BAD_REQUEST,
                        "cost: must be a non-negative integer",
                    )
                })?)
            }
            "deny_status" => {
                let s = v
                    .parse::<u16>()
                    .ok()
                    .filter(|s| (400..=599).contains(s))
                    .and_then(|s| StatusCode::from_u16(s).ok())
                    .ok_or_else(|| {
                        refuse(
                            StatusCode::BAD_REQUEST,
                            "deny_status: must be a status from 400 to 599",
                        )
                    })?;
                deny = Some(s);
            }
            other => {
                return Err(refuse(
                    StatusCode::BAD_REQUEST,
                    format!("{other}: unknown query parameter"),
                ));
            }
        }
    }
    Ok((allow, deny))
}

/// Fills what the query left out from what the gateway says: the client's address from
/// `peer` and `X-Forwarded-For` ([`client_ip`]), the rest from the trusted headers only. A
/// trusted header that is not visible ASCII, or longer than a subject may be, is refused by
/// name.
pub fn from_headers(
    allow: &mut Allow,
    headers: &HeaderMap,
    peer: IpAddr,
    trust: &SubjectHeaders,
) -> Result<(), Refusal> {
    let read = |t: &Trusted| -> Result<Option<String>, Refusal> {
        let Some(v) = headers.get(&t.lookup) else {
            return Ok(None);
        };
        let v = v
            .to_str()
            .map_err(|_| bad_header(&t.name, "must be visible ASCII"))?
            .trim();
        Ok((!v.is_empty()).then(|| v.to_string()))
    };
    let subject = |t: &Option<Trusted>| -> Result<Option<String>, Refusal> {
        let Some(t) = t else { return Ok(None) };
        let v = read(t)?;
        if v.as_ref().is_some_and(|v| v.len() > MAX_ATTR_LEN) {
            return Err(bad_header(
                &t.name,
                format!("is longer than {MAX_ATTR_LEN} bytes"),
            ));
        }
        Ok(v)
    };
    if allow.ip.is_none() {
        let lines: Vec<&str> = headers
            .get_all("x-forwarded-for")
            .iter()
            // A line that is not text is one entry no address parses from.
            .map(|v| v.to_str().unwrap_or("?"))
            .collect();
        let entries = lines.iter().flat_map(|l| l.split(','));
        let proxied = trust.proxies.iter().any(|c| c.contains(peer));
        allow.ip = match client_ip(peer, entries, &trust.proxies) {
            Some(ip) => Some(ip.to_string()),
            None if proxied => subject(&trust.real_ip)?,
            None => None,
        };
    }
    if allow.endpoint.is_none() {
        for t in &trust.endpoint {
            if let Some(v) = read(t)? {
                if normalize_path(&v).len() > MAX_ATTR_LEN {
                    return Err(bad_header(
                        &t.name,
                        format!("names a path longer than {MAX_ATTR_LEN} bytes"),
                    ));
                }
                allow.endpoint = Some(v);
                break;
            }
        }
    }
    if allow.user.is_none() {
        allow.user = subject(&trust.user)?;
    }
    if allow.key.is_none() {
        allow.key = subject(&trust.key)?;
    }
    if allow.tier.is_none() {
        allow.tier = subject(&trust.tier)?;
    }
    Ok(())
}

/// A `400` naming `header`.
fn bad_header(header: &str, why: impl std::fmt::Display) -> Refusal {
    refuse(StatusCode::BAD_REQUEST, format!("{header}: {why}"))
}

/// The endpoint of `GET /v1/auth/<path>` (Envoy's `path_prefix`): the raw path after the
/// prefix, its query left out (the query is the client's request's, not Sluice's).
pub fn prefixed_endpoint(uri: &axum::http::Uri) -> String {
    let path = uri.path();
    let rest = path.strip_prefix("/v1/auth").unwrap_or(path);
    if rest.starts_with('/') {
        rest.to_string()
    } else {
        format!("/{rest}")
    }
}

/// The body of `PUT /rules/{id}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleBody {
    scope: String,
    limit: u64,
    /// `period` is its alias (the word of `RL.CHECK` and `RL.RULE SET`).
    #[serde(alias = "period")]
    window: Json,
    tier: Option<String>,
    route: Option<String>,
    burst: Option<u64>,
    algo: Option<String>,
    failmode: Option<String>,
    shadow: Option<bool>,
    floor: Option<u64>,
    rollout: Option<u64>,
}

impl RuleBody {
    /// `SCOPE s LIMIT n PERIOD w ...`: the words of `RL.RULE SET id`.
    pub fn words(&self) -> Result<Vec<String>, String> {
        let window = window_text(&self.window)?;
        let mut w = vec![
            "SCOPE".to_string(),
            self.scope.clone(),
            "LIMIT".into(),
            self.limit.to_string(),
            "PERIOD".into(),
            window,
        ];
        let texts = [
            ("TIER", &self.tier),
            ("ROUTE", &self.route),
            ("ALGO", &self.algo),
            ("FAILMODE", &self.failmode),
        ];
        for (word, v) in texts {
            if let Some(v) = v {
                w.extend([word.to_string(), v.clone()]);
            }
        }
        for (word, v) in [
            ("BURST", self.burst),
            ("FLOOR", self.floor),
            ("ROLLOUT", self.rollout),
        ] {
            if let Some(v) = v {
                w.extend([word.to_string(), v.to_string()]);
            }
        }
        if self.shadow == Some(true) {
            w.push("SHADOW".into());
        }
        Ok(w)
    }
}

/// The body of `POST /rules/{id}/rollback`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RollbackBody {
    pub version: Option<u64>,
}

/// `PUT /rules/{id}`'s body as the words of `RL.RULE SET id` after the name.
pub async fn rule_words(headers: &HeaderMap, body: Body) -> Result<Vec<String>, Refusal> {
    let rule: RuleBody = fields(json_object(headers, body).await?)?;
    rule.words()
        .map_err(|why| refuse(StatusCode::BAD_REQUEST, why))
}

/// `POST /rules/{id}/rollback`'s optional body (none without a `Content-Type`).
pub async fn rollback_body(headers: &HeaderMap, body: Body) -> Result<RollbackBody, Refusal> {
    if !headers.contains_key(header::CONTENT_TYPE) {
        return Ok(RollbackBody::default());
    }
    fields(json_object(headers, body).await?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use axum::response::IntoResponse;

    #[test]
    fn a_plain_body_reads_as_serde_reads_it() {
        let bodies = [
            &br#"{"key":"rlt:000000012345","limit":1000000,"period":100000000}"#[..],
            br#"{"limit":5,"window":"1m","key":"k","burst":7,"cost":2,"algo":"GCRA","dry":true}"#,
            br#"{"key":"k","limit":5,"window":60,"dry":false}"#,
            br#"{"key":"","limit":0,"window":""}"#,
            br#"{"key":"k","limit":18446744073709551615,"window":1}"#,
            br#"{"key":"k","limit":9999999999999999999,"window":1}"#,
            br#"{"key":"k","limit":5,"window":1,"period":2}"#,
            br#"{"key":"k","limit":5,"window":1,"limit":6}"#,
            br#"{"key":"k","limit":05,"window":1}"#,
            br#"{"key":"k","limit":5.0,"window":1}"#,
            br#"{"key":"k","limit":-5,"window":1}"#,
            br#"{"key":"k","limit":5,"window":1e3}"#,
            br#"{"key":"k\"x","limit":5,"window":1}"#,
            b"{\"key\":\"\xc3\xa9\",\"limit\":5,\"window\":1}",
            br#"{"key":"k","limit":5,"window":1,"burst":null}"#,
            br#"{"key":"k","limit":5,"window":1,"other":1}"#,
            br#"{"key":"k","limit":5}"#,
            br#"{"key":"k", "limit":5,"window":1}"#,
            br#"{"key":"k","limit":5,"window":1} "#,
            br#"{"key":"k","limit":5,"window":1}x"#,
            br#"{"key":"k","limit":5,"window":1,}"#,
            br#"{"key":5,"limit":5,"window":1}"#,
            br#"{"key":"k","limit":5,"window":true}"#,
            br#"{"key":"k","limit":5,"window":1,"dry":tru}"#,
            b"{}",
            b"{",
        ];
        for body in bodies {
            let by_serde = serde_json::from_slice::<KeyCheckIn<'_>>(body).ok();
            if let Some(plain) = KeyCheckIn::plain(body) {
                assert_eq!(
                    Some(format!("{plain:?}")),
                    by_serde.map(|c| format!("{c:?}")),
                    "{}",
                    String::from_utf8_lossy(body)
                );
            }
        }
        assert!(KeyCheckIn::plain(bodies[0]).is_some());
        assert!(KeyCheckIn::plain(bodies[1]).is_some());
    }

    /// Bodies near the plain form: its fields in any order, each present or not and now and
    /// then twice (`window` or `period`, and another field), mostly with values of their type and
    /// now and then with any JSON value, strings with the bytes that end the plain form
    /// (quotes, escapes, control and non-ASCII bytes), numbers with signs, fractions,
    /// exponents, leading zeros and 20 digits, and now and then a blank, a comma or other
    /// bytes where a separator or the end belongs. About one in seven is a plain key check.
    fn near_plain_body() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        let text = || {
            proptest::collection::vec(
                prop_oneof![
                    120 => b'a'..=b'z',
                    1 => Just(b'"'),
                    1 => Just(b'\\'),
                    1 => Just(b'\t'),
                    1 => Just(0xc3u8),
                    1 => Just(0xa9u8),
                    1 => Just(b' '),
                ],
                0..6,
            )
            .prop_map(|bytes| [&b"\""[..], &bytes, b"\""].concat())
        };
        let number = || {
            prop_oneof![
                20 => any::<u64>().prop_map(|n| n.to_string().into_bytes()),
                20 => (0u64..100).prop_map(|n| n.to_string().into_bytes()),
                1 => Just(b"05".to_vec()),
                1 => Just(b"-5".to_vec()),
                1 => Just(b"5.0".to_vec()),
                1 => Just(b"1e3".to_vec()),
                1 => Just(b"99999999999999999999".to_vec()),
                1 => Just(b"18446744073709551616".to_vec()),
            ]
        };
        let boolean = || prop_oneof![Just(b"true".to_vec()), Just(b"false".to_vec())];
        let any_value = move || {
            prop_oneof![
                number(),
                text(),
                boolean(),
                Just(b"null".to_vec()),
                Just(b"tru".to_vec()),
                Just(b"{}".to_vec()),
            ]
        };
        // A field: absent, once or twice (weights), each value of its type or (1 in 11) any.
        let field = move |name: &'static str, weights: [u32; 3], typed: BoxedStrategy<Vec<u8>>| {
            let value = prop_oneof![30 => typed, 1 => any_value()];
            proptest::collection::vec(value, 2).prop_flat_map(move |values| {
                let [none, once, twice] = weights;
                prop_oneof![
                    none => Just(Vec::new()),
                    once => Just(values.iter().take(1).cloned().collect::<Vec<_>>()),
                    twice => Just(values.clone()),
                ]
                .prop_map(move |vs| vs.into_iter().map(|v| (name, v)).collect::<Vec<_>>())
            })
        };
        let required = [1, 40, 1];
        let optional = [20, 20, 1];
        let fields = (
            field("key", required, text().boxed()),
            field("limit", required, number().boxed()),
            // One of the two names, now and then both.
            (
                any::<bool>(),
                field("window", [1, 20, 1], prop_oneof![number(), text()].boxed()),
            )
                .prop_map(|(period, w)| {
                    let name = if period { "period" } else { "window" };
                    w.into_iter().map(|(_, v)| (name, v)).collect::<Vec<_>>()
                }),
            field("period", [40, 1, 0], prop_oneof![number(), text()].boxed()),
            (
                field("burst", optional, number().boxed()),
                field("cost", optional, number().boxed()),
                field("algo", optional, text().boxed()),
                field("dry", optional, boolean().boxed()),
                field("other", [30, 1, 0], any_value().boxed()),
            ),
        )
            .prop_flat_map(|(k, l, w, p, (b, c, a, d, o))| {
                let all: Vec<(&str, Vec<u8>)> = [k, l, w, p, b, c, a, d, o].concat();
                Just(all).prop_shuffle()
            });
        let separator = prop_oneof![
            150 => Just(&b","[..]),
            1 => Just(&b", "[..]),
            1 => Just(&b" ,"[..]),
            1 => Just(&b",,"[..]),
        ];
        let colon = prop_oneof![
            150 => Just(&b":"[..]),
            1 => Just(&b" :"[..]),
            1 => Just(&b": "[..]),
        ];
        let end = prop_oneof![
            60 => Just(&b"}"[..]),
            1 => Just(&b",}"[..]),
            1 => Just(&b"} "[..]),
            1 => Just(&b"}x"[..]),
            1 => Just(&b""[..]),
        ];
        (
            fields,
            proptest::collection::vec((colon, separator), 10),
            end,
        )
            .prop_map(|(fields, punctuation, end)| {
                let mut body = b"{".to_vec();
                for (i, ((name, value), (colon, separator))) in
                    fields.iter().zip(punctuation.iter().cycle()).enumerate()
                {
                    if i > 0 {
                        body.extend_from_slice(separator);
                    }
                    body.extend_from_slice(format!("\"{name}\"").as_bytes());
                    body.extend_from_slice(colon);
                    body.extend_from_slice(value);
                }
                body.extend_from_slice(end);
                body
            })
    }

    /// The property below is not vacuous: many of the bodies it tries are plain key checks,
    /// and serde reads more of them (those the plain reader leaves to it).
    #[test]
    fn near_plain_bodies_are_often_plain() {
        use proptest::strategy::{Strategy, ValueTree};
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let bodies = near_plain_body();
        let (mut plain, mut by_serde) = (0, 0);
        for _ in 0..4096 {
            let body = bodies.new_tree(&mut runner).expect("a body").current();
            plain += usize::from(KeyCheckIn::plain(&body).is_some());
            by_serde += usize::from(serde_json::from_slice::<KeyCheckIn<'_>>(&body).is_ok());
        }
        assert!(plain >= 400, "{plain} of 4096 plain");
        assert!(
            by_serde > plain,
            "{by_serde} of 4096 read by serde, {plain} plain"
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4096))]

        /// What the plain reader takes, serde takes to the same fields; and it never panics.
        #[test]
        fn the_plain_reader_agrees_with_serde(body in near_plain_body()) {
            if let Some(plain) = KeyCheckIn::plain(&body) {
                let by_serde = serde_json::from_slice::<KeyCheckIn<'_>>(&body).ok();
                proptest::prop_assert_eq!(
                    Some(format!("{plain:?}")),
                    by_serde.map(|c| format!("{c:?}")),
                    "{}",
                    String::from_utf8_lossy(&body)
                );
            }
        }

        /// Any bytes, and (where the reader does its work) bodies near the plain form cut
        /// short anywhere, with a byte changed anywhere.
        #[test]
        fn the_plain_reader_never_panics_on_any_bytes(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
            body in near_plain_body(),
            cut in proptest::prelude::any::<proptest::sample::Index>(),
            at in proptest::prelude::any::<proptest::sample::Index>(),
            byte in proptest::prelude::any::<u8>(),
        ) {
            let _ = KeyCheckIn::plain(&bytes);
            let mut body = body;
            body.truncate(cut.index(body.len() + 1));
            let _ = KeyCheckIn::plain(&body);
            if !body.is_empty() {
                let at = at.index(body.len());
                body[at] = byte;
                let _ = KeyCheckIn::plain(&body);
            }
        }
    }

    #[test]
    fn a_content_type_s_bytes_read_as_its_header_does() {
        for value in [
            &b"application/json"[..],
            b"Application/JSON; charset=utf-8",
            b" application/json\t;x",
            b"application/jsonx",
            b"text/plain",
            b"application/json;\xc3\xa9",
            b"",
        ] {
            let mut headers = HeaderMap::new();
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_bytes(value).unwrap(),
            );
            assert_eq!(is_json_type(Some(value)), is_json(&headers), "{value:?}");
        }
        assert!(!is_json_type(None));
        assert!(!is_json(&HeaderMap::new()));
    }

    fn args(flags: &[&str]) -> SubjectHeaders {
        #[derive(clap::Parser)]
        struct Flags {
            #[command(flatten)]
            subjects: SubjectHeaderArgs,
        }
        let mut argv = vec!["sluice"];
        argv.extend_from_slice(flags);
        <Flags as clap::Parser>::parse_from(argv).subjects.headers()
    }

    fn loopback() -> IpAddr {
        IpAddr::from([127, 0, 0, 1])
    }

    #[test]
    fn auth_subjects_come_from_the_query_then_the_trusted_headers() {
        let (mut a, deny) = parse_query("endpoint=%2Fapi%2Fx&deny_status=403").unwrap();
        assert_eq!(deny, Some(StatusCode::FORBIDDEN));
        let mut h = HeaderMap::new();
        h.insert(
            "x-forwarded-for",
            HeaderValue::from_static("10.1.1.1, 10.0.0.2"),
        );
        h.insert("x-real-ip", HeaderValue::from_static("10.9.9.9"));
        h.insert("x-original-uri", HeaderValue::from_static("/ignored"));
        h.insert("x-user-id", HeaderValue::from_static("alice"));
        h.insert("x-api-key", HeaderValue::from_static("k1"));
        let with_key = args(&[
            "--http-trusted-headers",
            "X-Original-URI,X-User-Id,X-Api-Key",
        ]);
        from_headers(&mut a, &h, loopback(), &with_key).unwrap();
        assert_eq!(a.ip.as_deref(), Some("10.0.0.2"), "the rightmost entry");
        assert_eq!(a.endpoint.as_deref(), Some("/api/x"));
        assert_eq!(a.user.as_deref(), Some("alice"));
        assert_eq!(
            a.args(),
            [
                "RL.ALLOW", "USER", "alice", "IP", "10.0.0.2", "KEY", "k1", "ENDPOINT", "/api/x"
            ]
        );
        // Untrusted headers are not read at all.
        let mut a = Allow::default();
        let only_uri = args(&["--http-trusted-headers", "X-Forwarded-Uri"]);
        h.insert("x-forwarded-uri", HeaderValue::from_static("//api/./y?z"));
        from_headers(&mut a, &h, loopback(), &only_uri).unwrap();
        assert_eq!((&a.user, &a.key, &a.tier), (&None, &None, &None));
        assert_eq!(a.endpoint.as_deref(), Some("//api/./y?z"));
        assert_eq!(
            a.args(),
            ["RL.ALLOW", "IP", "10.0.0.2", "ENDPOINT", "/api/y"]
        );
        // X-Real-IP only when trusted and no list names the client.
        h.remove("x-forwarded-for");
        let mut a = Allow::default();
        from_headers(&mut a, &h, loopback(), &only_uri).unwrap();
        assert_eq!(a.ip, None);
        let mut a = Allow::default();
        let real_ip = args(&["--http-trusted-headers", "X-Real-IP"]);
        from_headers(&mut a, &h, loopback(), &real_ip).unwrap();
        assert_eq!(a.ip.as_deref(), Some("10.9.9.9"));
        let mut a = Allow::default();
        from_headers(&mut a, &h, IpAddr::from([192, 0, 2, 1]), &real_ip).unwrap();
        assert_eq!(
            a.ip.as_deref(),
            Some("192.0.2.1"),
            "an untrusted peer is the client"
        );
        assert!(parse_query("deny_status=200").is_err());
        assert!(parse_query("colour=red").is_err());
        assert!(parse_query("cost=-1").is_err());
    }

    #[test]
    fn only_an_object_is_read_in_place() {
        assert!(KeyCheckIn::parse(br#" {"key":"k","limit":5,"window":"1m"}"#).is_some());
        // A struct's fields as an array: serde would take it; the JSON tree's path refuses it.
        assert!(KeyCheckIn::parse(br#"["k",5,"1m",null,null,null,null]"#).is_none());
        assert!(KeyCheckIn::parse(b"").is_none());
    }

    #[test]
    fn a_bad_trusted_header_is_refused_by_name() {
        let mut h = HeaderMap::new();
        h.insert("x-tier", HeaderValue::from_str(&"t".repeat(513)).unwrap());
        let e = from_headers(&mut Allow::default(), &h, loopback(), &args(&[])).unwrap_err();
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
        h.insert("x-tier", HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap());
        assert!(from_headers(&mut Allow::default(), &h, loopback(), &args(&[])).is_err());
        // The same header, untrusted, is not read.
        let none = args(&["--http-trusted-headers", "X-Original-URI"]);
        assert!(from_headers(&mut Allow::default(), &h, loopback(), &none).is_ok());
        assert!(Cidr::parse("127.0.0.0/33").is_err());
    }

    #[test]
    fn field_errors_name_the_field() {
        let map = |j: &str| match serde_json::from_str::<Json>(j).unwrap() {
            Json::Object(m) => m,
            _ => unreachable!(),
        };
        let text = |j: &str| {
            let e = fields::<RuleBody>(map(j)).unwrap_err().into_response();
            let body = futures_body(e);
            serde_json::from_slice::<Json>(&body).unwrap()["error"]
                .as_str()
                .unwrap()
                .to_string()
        };
        let e = text(r#"{"scope":"user","limit":-1,"window":"1m"}"#);
        assert!(e.starts_with("limit: invalid value"), "{e}");
        let e = text(r#"{"limit":1,"window":"1m"}"#);
        assert!(e.starts_with("scope: missing field"), "{e}");
        let e = text(r#"{"scope":"user","limit":1,"window":"1m","colour":1}"#);
        assert!(e.starts_with("colour: unknown field"), "{e}");
    }

    /// A response body's bytes (a JSON error is a single full chunk).
    fn futures_body(r: axum::response::Response) -> bytes::Bytes {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(axum::body::to_bytes(r.into_body(), 1 << 16))
            .unwrap()
    }
}
