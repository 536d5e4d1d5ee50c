//! [`Watch::message`] against a real etcd (skipped when `etcd` is not on `PATH`): a watch from
//! a compacted revision is cancelled by etcd, and the client says so instead of waiting for
//! ever on the stream etcd keeps open (issue 37, overshoot 4).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sluice_etcd::{Client, Error};

/// etcd on free loopback ports, killed by its PID and its data removed on drop.
struct Etcd {
    child: Child,
    port: u16,
    dir: std::path::PathBuf,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Starts etcd and waits up to 20 s for it to answer; `None` without an `etcd` binary.
fn start_etcd() -> Option<Etcd> {
    let (port, peer) = (free_port(), free_port());
    let dir = std::env::temp_dir().join(format!("sluice-etcd-watch-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let client_url = format!("http://127.0.0.1:{port}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    let child = Command::new("etcd")
        .args(["--name", "watch-test", "--data-dir"])
        .arg(&dir)
        .args(["--listen-client-urls", &client_url])
        .args(["--advertise-client-urls", &client_url])
        .args(["--listen-peer-urls", &peer_url])
        .args(["--initial-advertise-peer-urls", &peer_url])
        .args(["--initial-cluster", &format!("watch-test={peer_url}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let etcd = Etcd { child, port, dir };
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if post(port, "/v3/kv/range", r#"{"key":"AA=="}"#).is_some() {
            return Some(etcd);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("etcd did not start on port {port}");
}

/// `POST path` with a JSON body to etcd's gateway; the response if it was `200`.
fn post(port: u16, path: &str, body: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "POST {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let status = text.lines().next()?;
    status.contains(" 200 ").then_some(text)
}

#[test]
fn a_watch_from_a_compacted_revision_is_an_error() {
    let Some(etcd) = start_etcd() else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut client = Client::connect(&format!("http://127.0.0.1:{}", etcd.port))
            .await
            .unwrap();
        let mut rev = 0;
        for i in 0..5 {
            rev = client.put(b"/watch/other", &[b'0' + i]).await.unwrap();
        }
        let compaction = format!(r#"{{"revision":"{rev}"}}"#);
        assert!(post(etcd.port, "/v3/kv/compaction", &compaction).is_some());

        let mut watch = client.watch(b"/watch/table", false, 2).await.unwrap();
        let ended = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                match watch.message().await {
                    Ok(Some(_)) => continue,
                    other => return other,
                }
            }
        })
        .await
        .expect("the cancelled watch is reported within 5 s, not waited on for ever");
        match ended {
            Err(Error::WatchCanceled {
                compact_revision, ..
            }) => assert_eq!(compact_revision, rev),
            other => panic!("expected a cancelled watch, got {other:?}"),
        }
    });
}
