//! `--metrics-port`: the sidecar's Prometheus metrics (`GET /metrics`, text format 0.0.4),
//! read from the same counters INFO shows, at scrape time (nothing is counted twice).
//!
//! Families: `sluice_proxy_checks_total{outcome}` (RL.CHECK answers, allowed or denied),
//! `sluice_proxy_decisions_total{source}` (who decided: the node or a fail mode),
//! `sluice_proxy_node_calls_total`, `sluice_proxy_upstream_answered_total{upstream}`,
//! `sluice_proxy_upstream_failed_total{upstream}`, `sluice_proxy_upstream_breaker{upstream,state}`
//! (1 for the breaker's current state), `sluice_proxy_upstream_up{upstream}` (1 if its last
//! dial reached it), `sluice_proxy_upstream_down_total{upstream}` and
//! `sluice_proxy_upstream_back_total{upstream}` (its changes of state) and
//! `sluice_proxy_local_keys{map}`.
//!
//! With `--requirepass`, a scrape needs the sidecar's password as its HTTP front does
//! ([`sluice_http::authorized`]: `Bearer <password>` or Basic `default:<password>`). Label
//! values are escaped as the text format requires ([`label`]).

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use axum::Router;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use sluice_client::{Source, Upstream};
use tokio::net::TcpListener;

use crate::Proxy;

/// Serves `/metrics` on `listener` until the process ends.
pub(crate) fn spawn(listener: TcpListener, proxy: Arc<Proxy>) {
    let password = proxy.requirepass.clone();
    let app = Router::new()
        .route(
            "/metrics",
            get(move || {
                let body = render(&proxy);
                async move {
                    (
                        [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
                        body,
                    )
                }
            }),
        )
        .route_layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                let allowed = sluice_http::authorized(req.headers(), password.as_deref());
                async move {
                    match allowed {
                        Ok(()) => next.run(req).await,
                        Err(r) => r.into_response(),
                    }
                }
            },
        ));
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            sluice_log::warn(&format!("metrics: server stopped: {e}"));
        }
    });
}

/// `value` as a label value of the text format: backslash, double quote and newline escaped.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n");
}

/// One per-upstream counter, read from its row.
type UpstreamCount = fn(&Upstream) -> u64;

/// The exposition text for the sidecar's counters now.
fn render(p: &Proxy) -> String {
    let mut s = String::with_capacity(2048);
    let c = &p.client;
    family(
        &mut s,
        "sluice_proxy_checks_total",
        "counter",
        "RL.CHECK answers (not DRY), by outcome.",
    );
    for (outcome, n) in [("allowed", &p.allowed), ("denied", &p.denied)] {
        let _ = writeln!(
            s,
            "sluice_proxy_checks_total{{outcome=\"{outcome}\"}} {}",
            n.load(Relaxed)
        );
    }
    family(
        &mut s,
        "sluice_proxy_decisions_total",
        "counter",
        "Decisions by who made them: the node or a fail mode.",
    );
    for (source, n) in Source::NAMES.iter().zip(c.decisions()) {
        let _ = writeln!(s, "sluice_proxy_decisions_total{{source=\"{source}\"}} {n}");
    }
    family(
        &mut s,
        "sluice_proxy_node_calls_total",
        "counter",
        "Calls sent to the nodes.",
    );
    let _ = writeln!(s, "sluice_proxy_node_calls_total {}", c.node_calls());
    let upstreams = c.upstreams();
    let counts: [(&str, &str, UpstreamCount); 4] = [
        (
            "sluice_proxy_upstream_answered_total",
            "Calls each upstream answered.",
            |u| u.answered,
        ),
        (
            "sluice_proxy_upstream_failed_total",
            "Calls to each upstream that failed or timed out.",
            |u| u.failed,
        ),
        (
            "sluice_proxy_upstream_down_total",
            "Times each upstream became unreachable (its first failed dial counts).",
            |u| u.went_down,
        ),
        (
            "sluice_proxy_upstream_back_total",
            "Times each upstream was reached again after being unreachable.",
            |u| u.came_back,
        ),
    ];
    for (name, help, count) in counts {
        family(&mut s, name, "counter", help);
        for u in &upstreams {
            let _ = writeln!(s, "{name}{{upstream=\"{}\"}} {}", label(&u.addr), count(u));
        }
    }
    family(
        &mut s,
        "sluice_proxy_upstream_breaker",
        "gauge",
        "1 for the state each upstream's circuit breaker is in.",
    );
    for u in &upstreams {
        let _ = writeln!(
            s,
            "sluice_proxy_upstream_breaker{{upstream=\"{}\",state=\"{}\"}} 1",
            label(&u.addr),
            u.breaker.name()
        );
    }
    family(
        &mut s,
        "sluice_proxy_upstream_up",
        "gauge",
        "1 if the last dial of each upstream reached it, else 0.",
    );
    for u in &upstreams {
        let _ = writeln!(
            s,
            "sluice_proxy_upstream_up{{upstream=\"{}\"}} {}",
            label(&u.addr),
            u8::from(u.reachable == Some(true))
        );
    }
    let (local, blocked, approx) = c.local_keys();
    family(
        &mut s,
        "sluice_proxy_local_keys",
        "gauge",
        "Keys held in each local map.",
    );
    for (map, n) in [("local", local), ("blocked", blocked), ("approx", approx)] {
        let _ = writeln!(s, "sluice_proxy_local_keys{{map=\"{map}\"}} {n}");
    }
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn labels_are_escaped() {
        assert_eq!(super::label("a\"b\\c\nd"), r#"a\"b\\c\nd"#);
    }
}
