//! A refused TLS handshake leaves a trace (issue 41, item 4): the node logs it at verbose with
//! the peer and rustls's reason, and counts it in INFO's stats and in `/metrics`. The client
//! presents a certificate without v3 extensions (an X.509 v1 certificate), which rustls
//! refuses.

use std::time::Duration;

use sluice_tests::tls::{Certs, have_openssl, openssl};
use sluice_tests::{
    Sluice, TempDir, free_port, have_tool, http_get, info_field, output_text as text, redis_cli,
    wait_until,
};

#[test]
fn a_refused_handshake_is_logged_and_counted() {
    if !have_openssl() || !have_tool("redis-cli") {
        return;
    }
    let certs = Certs::new();
    // A client certificate signed by the right CA, but v1: `x509 -req` with no -extfile.
    let dir = TempDir::new("tls-v1-client");
    let (ca, ca_key) = (certs.path("ca.crt"), certs.path("ca.key"));
    openssl(
        &dir,
        &[
            "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "v1.key", "-out", "v1.csr", "-subj",
            "/CN=v1",
        ],
    );
    openssl(
        &dir,
        &[
            "x509",
            "-req",
            "-in",
            "v1.csr",
            "-CA",
            &ca,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-out",
            "v1.crt",
            "-days",
            "2",
        ],
    );
    let file = |f: &str| dir.path().join(f).to_str().unwrap().to_string();
    let (tls, metrics) = (free_port(), free_port());
    let mut flags = certs.server_flags(tls, "yes");
    flags.extend(
        [
            "--loglevel",
            "verbose",
            "--metrics-port",
            &metrics.to_string(),
        ]
        .map(String::from),
    );
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let node = Sluice::start_with(&flags);
    assert_eq!(info_field(node.port, "tls_handshakes_refused"), Some(0));

    let out = text(&redis_cli(
        tls,
        &[
            "--tls",
            "--cacert",
            &ca,
            "--cert",
            &file("v1.crt"),
            "--key",
            &file("v1.key"),
            "PING",
        ],
    ));
    assert!(!out.contains("PONG"), "{out}");
    assert!(
        node.wait_for_log("TLS handshake refused from 127.0.0.1:"),
        "{}",
        node.log()
    );
    let line = node
        .log()
        .lines()
        .find(|l| l.contains("TLS handshake refused"))
        .map(str::to_string)
        .unwrap_or_default();
    assert!(
        line.to_lowercase().contains("certificate"),
        "no reason in: {line}"
    );
    let counted = wait_until(Duration::from_secs(5), || {
        (info_field(node.port, "tls_handshakes_refused")? == 1).then_some(())
    });
    assert!(counted.is_some(), "{}", node.log());
    let scraped = http_get(metrics, "/metrics").expect("metrics");
    assert!(
        scraped.contains("sluice_tls_handshakes_refused_total 1"),
        "{scraped}"
    );

    // A good certificate still gets in, and is not counted.
    assert!(certs.cli(tls, true, &["PING"]).contains("PONG"));
    assert_eq!(info_field(node.port, "tls_handshakes_refused"), Some(1));
}
