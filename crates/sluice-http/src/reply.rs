//! A command's reply as an HTTP response: a decision as [`Verdict`] with its status and
//! headers, an error reply as `{"error"}` with the status that says whose fault it is.

use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use sluice_resp::Value;

use crate::verdict::{Header, Verdict};

/// A refused request: the response to send, boxed so that a `Result` carrying it stays small.
#[derive(Debug)]
pub struct Refusal(Box<Response>);

impl From<Response> for Refusal {
    fn from(r: Response) -> Refusal {
        Refusal(Box::new(r))
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        *self.0
    }
}

/// [`error`] as a [`Refusal`].
pub fn refuse(status: StatusCode, text: impl Into<String>) -> Refusal {
    error(status, text).into()
}

impl Refusal {
    pub fn status(&self) -> StatusCode {
        self.0.status()
    }
}

/// `{"error": text}` with `status`.
pub fn error(status: StatusCode, text: impl Into<String>) -> Response {
    let body = serde_json::json!({ "error": text.into() });
    (status, axum::Json(body)).into_response()
}

/// The status of a RESP error reply: the caller's mistake is `400` (a rule write against a
/// rules file `409`); a key this node does not serve (and the node's HTTP front could not
/// forward) is `421`, as is a request check spanning slots; a node that cannot take writes now
/// is `503`.
pub fn error_status(text: &str) -> StatusCode {
    let word = text.split(' ').next().unwrap_or("");
    match word {
        // RL.RULE's refusal of a write while a rules file is the source.
        "ERR" if text.contains("rules come from") => StatusCode::CONFLICT,
        "ERR" | "WRONGTYPE" => StatusCode::BAD_REQUEST,
        "NOPERM" => StatusCode::FORBIDDEN,
        "MOVED" | "ASK" | "CROSSSLOT" => StatusCode::MISDIRECTED_REQUEST,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    }
}

/// A RESP error reply to a check as a JSON error, without Redis's `ERR ` prefix, and named
/// after the field of `POST /v1/check` (or query parameter of `GET /v1/auth`) it concerns when
/// it is the caller's mistake: `period: period must be ...` (a check's window is named by
/// `RL.CHECK`'s word for it, whichever of `window` and its alias `period` the body used).
pub fn resp_error(text: &str) -> Response {
    named_error(text, "period")
}

/// [`resp_error`] for a rule write (`PUT /rules/{id}`, rollback), whose window is named
/// `window`.
pub fn rule_error(text: &str) -> Response {
    named_error(text, "window")
}

fn named_error(text: &str, period: &str) -> Response {
    let status = error_status(text);
    let text = text.strip_prefix("ERR ").unwrap_or(text);
    match field_of(text) {
        Some(field) if status == StatusCode::BAD_REQUEST => {
            let field = if field == "period" { period } else { field };
            error(status, format!("{field}: {text}"))
        }
        _ => error(status, text),
    }
}

/// The fields of the bodies and queries, each spelled as the command word that carries it.
const FIELDS: [&str; 17] = [
    "period", "limit", "burst", "algo", "cost", "failmode", "scope", "tier", "route", "floor",
    "rollout", "shadow", "user", "ip", "key", "endpoint", "version",
];

/// The field a command's refusal is about: the first of [`FIELDS`] its text names as a word
/// (`limit for ALGO TOKEN must be at most ...` is about `limit`).
fn field_of(text: &str) -> Option<&'static str> {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .find_map(|w| FIELDS.iter().find(|f| f.eq_ignore_ascii_case(w)))
        .copied()
}

/// An `RL.CHECK` or `RL.ALLOW` reply as a [`Verdict`], or its error as a response.
pub fn verdict_of(reply: &Value, now_ms: i64) -> Result<Verdict, Refusal> {
    let items = match reply {
        Value::Error(e) => return Err(resp_error(e).into()),
        Value::Array(items) if items.len() == 5 || items.len() == 6 => items,
        other => {
            return Err(refuse(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("unexpected reply {other:?}"),
            ));
        }
    };
    let mut fields = [0i64; 5];
    for (f, item) in fields.iter_mut().zip(items) {
        *f = match item {
            Value::Int(n) => *n,
            _ => {
                return Err(refuse(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "unexpected reply",
                ));
            }
        };
    }
    let rule = match items.get(5) {
        Some(Value::Bulk(b)) => Some(String::from_utf8_lossy(b).into_owned()),
        _ => None,
    };
    Ok(Verdict::from_fields(fields, rule, now_ms))
}

/// The response for `v`: its status (or `deny` for a denial), JSON body and headers.
///
/// The header values and the body are written into one buffer and handed out as slices of
/// it, and the header map is sized for them at once: a check answers with a handful of
/// allocations, not one per header.
pub fn respond(v: &Verdict, deny: Option<StatusCode>) -> Response {
    let status = if v.allowed {
        StatusCode::OK
    } else {
        deny.unwrap_or(StatusCode::TOO_MANY_REQUESTS)
    };
    let mut buf = Vec::with_capacity(384);
    let mut values: [(Header, usize); 6] = [(Header::Limit, 0); 6];
    let mut count = 0;
    v.each_header(|name, parts| {
        for part in parts {
            part.write(&mut buf);
        }
        values[count] = (name, buf.len());
        count += 1;
    });
    let headers_end = buf.len();
    v.write_json(&mut buf);
    let buf = Bytes::from(buf);
    let mut headers = HeaderMap::with_capacity(8);
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let mut start = 0;
    for &(name, end) in &values[..count] {
        if let Ok(value) = HeaderValue::from_maybe_shared(buf.slice(start..end)) {
            headers.insert(header_name(name), value);
        }
        start = end;
    }
    let mut r = Response::new(axum::body::Body::from(buf.slice(headers_end..)));
    *r.status_mut() = status;
    *r.headers_mut() = headers;
    r
}

/// A header of [`Verdict::each_header`] as a header map's name.
fn header_name(h: Header) -> HeaderName {
    const LIMIT: HeaderName = HeaderName::from_static(Header::Limit.wire());
    const REMAINING: HeaderName = HeaderName::from_static(Header::Remaining.wire());
    const RESET: HeaderName = HeaderName::from_static(Header::Reset.wire());
    const POLICY: HeaderName = HeaderName::from_static(Header::Policy.wire());
    const RATELIMIT: HeaderName = HeaderName::from_static(Header::RateLimit.wire());
    match h {
        Header::Limit => LIMIT,
        Header::Remaining => REMAINING,
        Header::Reset => RESET,
        Header::Policy => POLICY,
        Header::RateLimit => RATELIMIT,
        Header::RetryAfter => header::RETRY_AFTER,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_refusal_is_named_after_its_field() {
        assert_eq!(
            field_of("limit for ALGO TOKEN must be at most 5"),
            Some("limit")
        );
        assert_eq!(field_of("unknown ALGO 'x'; expected TOKEN"), Some("algo"));
        assert_eq!(
            field_of("PERIOD '1 m' must be a positive duration"),
            Some("period")
        );
        assert_eq!(field_of("wrong number of arguments"), None);
        assert_eq!(field_of("Operation against a key holding"), Some("key"));
        assert_eq!(
            rule_error("ERR PERIOD 'x' bad").status(),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            resp_error("MOVED 1 127.0.0.1:1").status(),
            StatusCode::MISDIRECTED_REQUEST
        );
    }
}
