//! `RL.TOP` and `sluice top` end to end: one key hammered far past its limit among thousands of
//! quiet keys (each denied once), sent as pipelined `RL.CHECK`s by the `redis` crate.
//!
//! Asserted: on one node `RL.TOP` lists the hammered key first, its true denied count within
//! the bound the reply states, and `sluice top --once` lists it first too; across a three-node
//! cluster, `sluice top --once` pointed at a node that does not own the key lists it first with
//! its count and error summed over the nodes (as `sluice_client::top` merges them), and with a
//! node stopped shows it down; in a real terminal (tmux), the live screen shows the key within
//! 3 s of its first denial, and `q` and Ctrl-C end it with exit code 0 and the terminal's main
//! screen back.
//!
//! Every wait has a deadline; nodes are stopped by their PIDs, and the tmux server by its own
//! socket, when their guards drop.

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice_tests::{
    Sluice, TempDir, binary, cluster_slots, have_tool, key_slot, output_text, owner_of, primaries,
    try_connect, wait_cluster_ok, wait_until,
};

/// The hammered key: checked [`HITS`] times against a limit of [`LIMIT`] a minute.
const HOT: &str = "tenant:hammer";
const LIMIT: u64 = 10;
const HITS: u64 = 2000;
/// Quiet keys, each checked twice against a limit of 1: each denied once.
const QUIET: usize = 3000;

/// One `RL.TOP` entry: key, rule, count, error, last seen (Unix ms).
type Entry = (String, String, u64, u64, u64);

/// `RL.TOP args...` on the node at `port`.
fn rl_top(port: u16, args: &[&str]) -> Vec<Entry> {
    let mut c = try_connect(port).expect("connect");
    let reply: Vec<(String, String, u64, u64, u64)> = redis::cmd("RL.TOP")
        .arg(args)
        .query(&mut c)
        .unwrap_or_else(|e| panic!("RL.TOP {args:?} on {port}: {e}"));
    reply
}

/// Sends `checks` (key, limit) as `RL.CHECK key limit 60` in pipelines of 500 over `conn`;
/// the Instant of the first denied reply, if any.
fn send_checks(conn: &mut redis::Connection, checks: &[(String, u64)]) -> Option<Instant> {
    let mut first_denied = None;
    for batch in checks.chunks(500) {
        let mut pipe = redis::pipe();
        for (key, limit) in batch {
            pipe.cmd("RL.CHECK").arg(key).arg(*limit).arg(60);
        }
        let replies: Vec<Vec<i64>> = pipe.query(conn).expect("RL.CHECK pipeline");
        if first_denied.is_none() && replies.iter().any(|r| r[0] == 0) {
            first_denied = Some(Instant::now());
        }
    }
    first_denied
}

/// The quiet keys' checks (each twice) with the hot key's among them, in an order that
/// spreads the hot key's over the whole run.
fn traffic(quiet: impl Iterator<Item = String>) -> Vec<(String, u64)> {
    let quiet: Vec<String> = quiet.collect();
    let mut checks = Vec::new();
    let per_hot = (quiet.len() * 2).div_ceil(HITS as usize).max(1);
    let mut hot_left = HITS;
    for (i, key) in quiet.iter().chain(&quiet).enumerate() {
        checks.push((key.clone(), 1));
        if i % per_hot == 0 && hot_left > 0 {
            checks.push((HOT.to_string(), LIMIT));
            hot_left -= 1;
        }
    }
    checks.extend((0..hot_left).map(|_| (HOT.to_string(), LIMIT)));
    checks
}

fn quiet_keys() -> impl Iterator<Item = String> {
    (0..QUIET).map(|i| format!("quiet:{i}"))
}

/// `sluice top --once args...`, which must exit 0: its output.
fn top_once(args: &[&str]) -> String {
    let out = Command::new("timeout")
        .arg("30")
        .arg(binary())
        .args(["top", "--once"])
        .args(args)
        .output()
        .expect("run sluice top");
    let text = output_text(&out);
    assert!(out.status.success(), "sluice top --once {args:?}:\n{text}");
    text
}

/// The rows of a screen's `TOP DENIED` list, as (key, rule, count, error).
fn denied_rows(screen: &str) -> Vec<(String, String, u64, u64)> {
    screen
        .lines()
        .skip_while(|l| !l.starts_with("TOP DENIED"))
        .skip(2)
        .take_while(|l| !l.trim().is_empty() && *l != "(none)")
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let num = |i: usize| w[i].parse::<u64>().unwrap_or_else(|_| panic!("{l}"));
            (w[0].to_string(), w[1].to_string(), num(2), num(3))
        })
        .collect()
}

/// The hot key's true denied count is within `[count - error, count]`.
fn assert_bounds(count: u64, error: u64) {
    let denied = HITS - LIMIT;
    assert!(
        count >= denied && count - error <= denied,
        "count {count} ± {error} does not bound the true {denied}"
    );
}

#[test]
fn one_node_lists_the_hammered_key_first() {
    let node = Sluice::start();
    let mut c = node.client();
    send_checks(&mut c, &traffic(quiet_keys()));

    let top = rl_top(node.port, &[]);
    let (key, rule, count, error, last_seen) = top.first().cloned().expect("RL.TOP is empty");
    assert_eq!((key.as_str(), rule.as_str()), (HOT, ""), "{top:?}");
    assert_bounds(count, error);
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(now_ms.abs_diff(last_seen) < 60_000, "last seen {last_seen}");
    // The next is a quiet key: far below.
    assert!(top.len() > 1 && top[1].2 < count / 10, "{top:?}");
    // The same with every option given.
    let again = rl_top(node.port, &["DENIED", "COUNT", "3", "WINDOW", "15m"]);
    assert_eq!(again[0].0, HOT, "{again:?}");
    assert!(again.len() <= 3, "{again:?}");

    let screen = top_once(&[&format!("127.0.0.1:{}", node.port)]);
    let rows = denied_rows(&screen);
    assert_eq!(rows.first().map(|r| r.0.as_str()), Some(HOT), "{screen}");
    assert_eq!((rows[0].1.as_str(), rows[0].2), ("-", count), "{screen}");
    assert!(screen.contains("1 of 1 nodes answering"), "{screen}");
    // `--count 1` lists only the hammered key.
    let screen = top_once(&["--count", "1", &format!("127.0.0.1:{}", node.port)]);
    assert_eq!(denied_rows(&screen).len(), 1, "{screen}");
}

#[test]
fn a_cluster_is_merged_from_every_primary() {
    let dir = TempDir::new("top-cluster");
    let nodes = primaries(&dir, "top", &[&[], &[], &[]]);
    wait_cluster_ok(&nodes);
    let slots = cluster_slots(nodes[0].port).expect("CLUSTER SLOTS");
    let owner = |key: &str| owner_of(&slots, key_slot(key.as_bytes())).expect("owner");
    let hot_owner = owner(HOT);

    // Each check goes straight to the key's owner.
    let checks = traffic(quiet_keys());
    for n in &nodes {
        let mine: Vec<(String, u64)> = checks
            .iter()
            .filter(|(k, _)| owner(k) == n.port)
            .cloned()
            .collect();
        assert!(
            mine.len() > QUIET / 2,
            "node {} owns too few keys to test the merge",
            n.port
        );
        send_checks(&mut n.client(), &mine);
    }

    // Merged, the counts and errors add up, where a node that does not list the key adds its
    // smallest listed count to both (it may hold that much of a key it cut from its list):
    // here only the owner lists it.
    let mut expected = (0, 0);
    for n in &nodes {
        let top = rl_top(n.port, &["COUNT", "10"]);
        let allowance = top.iter().map(|e| e.2).min().unwrap_or(0);
        let hot = top.iter().find(|e| e.0 == HOT);
        if hot.is_some() {
            assert_eq!(n.port, hot_owner, "a node that does not own {HOT} lists it");
        }
        expected.0 += hot.map_or(allowance, |e| e.2);
        expected.1 += hot.map_or(allowance, |e| e.3);
    }
    assert_bounds(expected.0, expected.1);

    let other = nodes
        .iter()
        .find(|n| n.port != hot_owner)
        .expect("another node");
    let screen = top_once(&[&format!("127.0.0.1:{}", other.port)]);
    assert!(screen.contains("3 of 3 nodes answering"), "{screen}");
    let rows = denied_rows(&screen);
    assert_eq!(
        rows.first().map(|r| (r.0.as_str(), r.2, r.3)),
        Some((HOT, expected.0, expected.1)),
        "{screen}"
    );
    // Every node is listed as a primary, and their slots add up to all of them.
    let slot_total: usize = screen
        .lines()
        .filter(|l| l.starts_with("127.0.0.1:") && l.contains(" primary "))
        .map(|l| {
            l.split_whitespace()
                .nth(3)
                .unwrap()
                .parse::<usize>()
                .unwrap()
        })
        .sum();
    assert_eq!(slot_total, 16384, "{screen}");

    // A node that is gone is shown down, with why, and the screen still comes.
    let other_port = other.port;
    let mut nodes = nodes;
    let gone = nodes.iter().position(|n| n.port != other_port).unwrap();
    let gone_port = nodes[gone].port;
    drop(nodes.remove(gone));
    let screen = top_once(&[&format!("127.0.0.1:{other_port}")]);
    assert!(screen.contains("2 of 3 nodes answering"), "{screen}");
    let line = screen
        .lines()
        .find(|l| l.starts_with(&format!("127.0.0.1:{gone_port} ")))
        .unwrap_or_else(|| panic!("no line for {gone_port}:\n{screen}"));
    assert!(line.contains(" down "), "{screen}");
    assert!(
        screen.contains(&format!("cannot reach 127.0.0.1:{gone_port}")),
        "{screen}"
    );
}

/// A tmux server on a socket of its own (`tmux -S`, in a directory of its own), killed when
/// dropped, its socket removed with the directory.
struct Tmux {
    dir: TempDir,
}

impl Tmux {
    fn new(name: &str) -> Tmux {
        Tmux {
            dir: TempDir::new(name),
        }
    }

    fn socket(&self) -> std::path::PathBuf {
        self.dir.path().join("tmux.sock")
    }

    fn run(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .arg("-S")
            .arg(self.socket())
            .args(args)
            .output()
            .expect("run tmux")
    }

    /// Starts `command` in a detached 160x50 session `name`.
    fn start(&self, name: &str, command: &str) {
        let out = self.run(&[
            "new-session",
            "-d",
            "-s",
            name,
            "-x",
            "160",
            "-y",
            "50",
            command,
        ]);
        assert!(out.status.success(), "tmux: {}", output_text(&out));
    }

    /// The pane's text as shown now.
    fn screen(&self, name: &str) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", name]).stdout).into_owned()
    }

    fn keys(&self, name: &str, keys: &str) {
        let out = self.run(&["send-keys", "-t", name, keys]);
        assert!(out.status.success(), "tmux: {}", output_text(&out));
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

/// In tmux session `name`, the screen of `sluice top` against `port`, run by a shell that
/// says how it ended and stays open to show it.
fn start_top(tmux: &Tmux, name: &str, port: u16) {
    let command = format!(
        "'{}' top 127.0.0.1:{port}; echo \"top exited with $?\"; sleep 60",
        binary().display()
    );
    tmux.start(name, &command);
    let up = wait_until(Duration::from_secs(10), || {
        tmux.screen(name)
            .contains("1 of 1 nodes answering")
            .then_some(())
    });
    assert!(
        up.is_some(),
        "sluice top did not draw:\n{}",
        tmux.screen(name)
    );
}

/// `keys` end the screen: the shell after it says exit code 0, on the main screen again.
fn assert_quits_on(tmux: &Tmux, name: &str, keys: &str) {
    tmux.keys(name, keys);
    let ended = wait_until(Duration::from_secs(5), || {
        let s = tmux.screen(name);
        s.contains("top exited with").then_some(s)
    })
    .unwrap_or_else(|| panic!("{keys} did not end sluice top:\n{}", tmux.screen(name)));
    assert!(ended.contains("top exited with 0"), "{ended}");
    assert!(
        !ended.contains("TOP DENIED"),
        "the alternate screen was not left:\n{ended}"
    );
}

#[test]
fn the_live_screen_shows_the_hammered_key_within_3_s() {
    if !have_tool("tmux") {
        return;
    }
    let node = Sluice::start();
    let tmux = Tmux::new("top");
    start_top(&tmux, "live", node.port);

    // Hammer in the background until told to stop; note the first denial.
    let stop = Arc::new(AtomicBool::new(false));
    let first_denied = Arc::new(Mutex::new(None::<Instant>));
    let hammer = {
        let (stop, first_denied) = (stop.clone(), first_denied.clone());
        let mut c = node.client();
        std::thread::spawn(move || {
            let checks = traffic(quiet_keys());
            for round in checks.chunks(1000) {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                if let Some(at) = send_checks(&mut c, round) {
                    first_denied.lock().unwrap().get_or_insert(at);
                }
            }
        })
    };
    let shown = wait_until(Duration::from_secs(15), || {
        let rows = denied_rows(&tmux.screen("live"));
        (rows.first().map(|r| r.0.as_str()) == Some(HOT)).then(Instant::now)
    });
    stop.store(true, Ordering::Relaxed);
    hammer.join().expect("the hammer thread");
    let screen = tmux.screen("live");
    let shown = shown.unwrap_or_else(|| panic!("{HOT} never shown first:\n{screen}"));
    let denied = first_denied
        .lock()
        .unwrap()
        .expect("the hot key was denied");
    let after = shown.saturating_duration_since(denied);
    eprintln!("the hammered key was on the screen {after:?} after its first denial");
    assert!(after <= Duration::from_secs(3), "{after:?}:\n{screen}");
    assert_quits_on(&tmux, "live", "q");

    // Ctrl-C ends it just as well.
    start_top(&tmux, "ctrl-c", node.port);
    assert_quits_on(&tmux, "ctrl-c", "C-c");
}
