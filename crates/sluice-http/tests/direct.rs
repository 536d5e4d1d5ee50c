//! The route served off the socket ([`sluice_http::direct`]) answers byte for byte what hyper
//! answers for the same handler (but the `date` line), and hands hyper what it does not serve.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use sluice_http::guard::Guarded;
use sluice_http::reply::{refuse, respond};
use sluice_http::serve::{Ahead, serve_ahead};
use sluice_http::{Refusal, Verdict};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The check both paths run: `allow` or `deny` with a rule, `plain` without, else a `400`.
fn answer(body: &[u8]) -> Result<Verdict, Refusal> {
    match body {
        b"allow" => Ok(Verdict::from_fields([1, 10, 9, -1, 6_000], None, 1_000)),
        b"deny" => {
            let mut v = Verdict::from_fields([0, 5, 0, 2_001, 11_999], Some("per-ip".into()), 0);
            v.window_ms = Some(60_000);
            Ok(v)
        }
        _ => Err(refuse(StatusCode::BAD_REQUEST, "bad body")),
    }
}

async fn server() -> std::net::SocketAddr {
    let inner = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = inner.local_addr().unwrap();
    let listener = Guarded::new(inner, 64, Duration::from_secs(30));
    let ahead = Ahead {
        method: axum::http::Method::POST,
        path: "/v1/check",
        handler: Arc::new(|req| {
            Box::pin(async move {
                match sluice_http::body::read_body(req.into_body()).await {
                    Ok(body) => match answer(&body) {
                        Ok(v) => respond(&v, None),
                        Err(r) => r.into_response(),
                    },
                    Err(r) => r.into_response(),
                }
            })
        }),
        direct: Some(Arc::new(|req| {
            Box::pin(async move {
                if &req.body[..] == b"slow" {
                    // A check that waits, as one forwarded to its owner does.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    return answer(b"allow");
                }
                answer(&req.body)
            })
        })),
    };
    let app = Router::new().route("/healthz", get(|| async { "ok" }));
    tokio::spawn(serve_ahead(
        listener,
        app,
        Some(ahead),
        std::future::pending(),
    ));
    addr
}

fn post(target: &str, body: &str) -> String {
    format!(
        "POST {target} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Sends `parts` one write each and reads until `responses` responses (counted by their
/// status lines) have come whole, or the connection ends.
async fn exchange(addr: std::net::SocketAddr, parts: &[&str], responses: usize) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.set_nodelay(true).unwrap();
    for p in parts {
        s.write_all(p.as_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        let text = String::from_utf8_lossy(&got).into_owned();
        if text.matches("HTTP/1.1 ").count() >= responses && whole(&text) {
            return text;
        }
        match tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await {
            Ok(Ok(0)) | Err(_) => return text + "<end>",
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Ok(Err(e)) => panic!("{e}"),
        }
    }
}

/// Whether the last response's body has all its `content-length` bytes.
fn whole(text: &str) -> bool {
    let Some(last) = text.rfind("HTTP/1.1 ") else {
        return false;
    };
    let r = &text[last..];
    let Some(end) = r.find("\r\n\r\n") else {
        return false;
    };
    let length = r
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .map_or(0, |n| n.parse().unwrap());
    r.len() - end - 4 >= length
}

/// `text` without its `date` lines.
fn undated(text: &str) -> String {
    text.split("\r\n")
        .filter(|l| !l.starts_with("date: "))
        .collect::<Vec<_>>()
        .join("\r\n")
}

#[tokio::test]
async fn off_the_socket_and_through_hyper_the_bytes_are_the_same() {
    let addr = server().await;
    for body in ["allow", "deny", "nonsense"] {
        // A query sends the request through hyper to the same handler.
        let direct = exchange(addr, &[&post("/v1/check", body)], 1).await;
        let hyper = exchange(addr, &[&post("/v1/check?via=hyper", body)], 1).await;
        assert!(direct.contains("\r\ndate: "), "{direct}");
        assert_eq!(undated(&direct), undated(&hyper), "{body}");
    }
    // `Connection: keep-alive`, which some clients send with every request: served here, and
    // answered as hyper answers it.
    let kept = |target: &str| {
        post(target, "allow").replace("Host: x", "Host: x\r\nConnection: keep-alive")
    };
    let direct = exchange(addr, &[&(kept("/v1/check") + &kept("/v1/check"))], 2).await;
    let hyper = exchange(addr, &[&(kept("/v1/check?h") + &kept("/v1/check?h"))], 2).await;
    assert_eq!(direct.matches("HTTP/1.1 200 OK").count(), 2, "{direct}");
    assert_eq!(undated(&direct), undated(&hyper));
    let denied = exchange(addr, &[&post("/v1/check", "deny")], 1).await;
    assert!(
        denied.starts_with("HTTP/1.1 429 Too Many Requests\r\n"),
        "{denied}"
    );
    assert!(denied.contains("\r\nretry-after: 3\r\n"), "{denied}");
}

#[tokio::test]
async fn a_connection_goes_on_in_hyper_after_what_it_does_not_serve() {
    let addr = server().await;
    // Two pipelined checks, then a route of the router, a check that closes, on one connection.
    let first = post("/v1/check", "allow") + &post("/v1/check", "deny");
    let rest = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n".to_string()
        + &post("/v1/check", "allow").replace("Host: x", "Host: x\r\nConnection: close");
    let text = exchange(addr, &[&first, &rest], 5).await;
    let statuses: Vec<&str> = text.split("HTTP/1.1 ").skip(1).map(|r| &r[..3]).collect();
    assert_eq!(statuses, ["200", "429", "200", "200"], "{text}");
    assert!(text.contains("\r\n\r\nok"), "{text}");
    assert!(
        text.ends_with("<end>"),
        "closed after Connection: close: {text}"
    );
    // An answer that waits comes after the one before it, and the next after it.
    let three = post("/v1/check", "deny") + &post("/v1/check", "slow") + &post("/v1/check", "deny");
    let text = exchange(addr, &[&three], 3).await;
    let statuses: Vec<&str> = text.split("HTTP/1.1 ").skip(1).map(|r| &r[..3]).collect();
    assert_eq!(statuses, ["429", "200", "429"], "{text}");
    // A head in pieces is read whole and served; a body split from its head goes to hyper.
    let check = post("/v1/check", "allow");
    let (head, body) = check.split_at(check.len() - 5);
    let pieces = exchange(addr, &[&head[..10], &head[10..], body], 1).await;
    assert!(pieces.starts_with("HTTP/1.1 200 OK\r\n"), "{pieces}");
}

#[tokio::test]
async fn a_head_too_large_is_431_and_a_bad_head_400() {
    let addr = server().await;
    let big = format!(
        "POST /v1/check HTTP/1.1\r\nX-Big: {}\r\nContent-Length: 5\r\n\r\nallow",
        "a".repeat(40 << 10)
    );
    let text = exchange(addr, &[&big], 1).await;
    assert!(text.starts_with("HTTP/1.1 431 "), "{text}");
    let text = exchange(addr, &["POST /v1/check HTTP/1.1\r\nBad Header\r\n\r\n"], 1).await;
    assert!(text.starts_with("HTTP/1.1 400 "), "{text}");
}
