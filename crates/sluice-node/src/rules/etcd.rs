//! Rules in etcd (`--rules-etcd URL --rules-prefix P`): one key per rule, `P<name>`, whose
//! value is the rule's spec text (`LIMIT 100 PERIOD 1m ...`, the words of `RL.RULE SET`).
//!
//! Every node reads the prefix at start, then watches it: a put is a new version numbered by
//! its etcd mod revision, a delete deletes the rule. A rule's history is its key's earlier
//! revisions (read back at start, as far as etcd has not compacted them), so `RL.RULE
//! ROLLBACK name rev` writes revision `rev`'s value again. `RL.RULE SET|DEL|ROLLBACK` on any
//! node write through to etcd and answer with the new revision; the writing node installs
//! it at once, the others through their watch.
//!
//! A value that is not a valid spec, or is below its rule's floor, is logged and ignored:
//! the node keeps the rule's last good version.
//!
//! The watch starts after the store's revision at the read. A watch etcd cancels (a
//! compaction), ends or fails is re-established from a fresh read of the prefix, logged and
//! counted (`sluice_etcd_watch_restarts_total{watch="rules"}`); a read every [`READ_EVERY`]
//! backs it up: if etcd holds a rule revision (or lacks a rule) the watch did not deliver,
//! the node reads the prefix afresh.
//!
//! The etcd client runs on a thread of its own with its own runtime; a command's write waits
//! for it (up to [`WRITE_TIMEOUT`](super::handle::WRITE_TIMEOUT)) on the worker thread, which is acceptable for an admin
//! command and keeps `RL.HIT` untouched.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc as std_mpsc;
use std::time::Duration;

use sluice_etcd::{Ended, EventType};
use tokio::sync::mpsc;

use super::handle::{Handle, Write};
use super::parse_spec;
use crate::shared::Shared;

/// How long to wait before reconnecting after an error.
const RETRY_EVERY: Duration = Duration::from_millis(500);
/// How often the prefix is read afresh while the watch runs.
const READ_EVERY: Duration = Duration::from_secs(30);
/// How many earlier revisions of each rule are read back at start.
const HISTORY_DEPTH: usize = 100;

/// Starts the etcd thread and waits (up to 10 s) for its first read of the prefix, so a node
/// does not serve `RL.HIT` before it knows the rules.
pub fn start(shared: Arc<Shared>) -> std::io::Result<Option<std::thread::JoinHandle<()>>> {
    let Some(url) = shared.config.rules_etcd.clone() else {
        return Ok(None);
    };
    let (tx, rx) = mpsc::unbounded_channel();
    let _ = shared.rules_etcd.set(Handle { tx });
    let (loaded_tx, loaded_rx) = std_mpsc::channel();
    let handle = crate::thread::runtime_thread("sluice-rules-etcd", move || {
        follow(shared, url, rx, loaded_tx)
    })?;
    if loaded_rx.recv_timeout(Duration::from_secs(10)).is_err() {
        sluice_log::log(
            "rules etcd: no answer within 10 s; serving without rules until it answers",
        );
    }
    Ok(Some(handle))
}

async fn follow(
    shared: Arc<Shared>,
    url: String,
    mut writes: mpsc::UnboundedReceiver<Write>,
    loaded: std_mpsc::Sender<()>,
) {
    let mut stop = shared.shutdown_signal();
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            r = follow_once(&shared, &url, &mut writes, &loaded) => match r {
                Ended::Unwatched(e) => sluice_log::log(&format!("rules etcd: {e}; retrying")),
                Ended::Watch(e) => {
                    shared.stats.rules_watch_restarts.fetch_add(1, Ordering::Relaxed);
                    sluice_log::log(&format!(
                        "Rules watch restarted: {e}; reading {} afresh",
                        shared.config.rules_prefix
                    ));
                }
            }
        }
        // Fail the writes queued meanwhile rather than let them time out.
        while let Ok(w) = writes.try_recv() {
            let _ = w.reply.send(Err("etcd is unreachable".into()));
        }
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(RETRY_EVERY) => {}
        }
    }
}

/// Reads the prefix (with each rule's history), then watches it from the revision of that
/// read on, serving `writes` meanwhile and reading it again every [`READ_EVERY`], until the
/// watch ends.
async fn follow_once(
    shared: &Arc<Shared>,
    url: &str,
    writes: &mut mpsc::UnboundedReceiver<Write>,
    loaded: &std_mpsc::Sender<()>,
) -> Ended {
    match read_prefix(shared, url, loaded).await {
        Ok((client, start_rev, seen)) => watch(shared, client, start_rev, seen, writes).await,
        Err(e) => Ended::Unwatched(e),
    }
}

/// Every rule etcd holds, by name, at its key's mod revision.
type Seen = BTreeMap<String, i64>;

/// Reads the prefix and installs what it holds; the client, the store's revision at the read,
/// and the rules read.
async fn read_prefix(
    shared: &Arc<Shared>,
    url: &str,
    loaded: &std_mpsc::Sender<()>,
) -> Result<(sluice_etcd::Client, i64, Seen), String> {
    let prefix = &shared.config.rules_prefix;
    let mut client = sluice_etcd::connect(url).await?;
    let resp = client
        .get_prefix(prefix.as_bytes())
        .await
        .map_err(|e| format!("get {prefix}: {e}"))?;
    let start_rev = resp.header.as_ref().map_or(0, |h| h.revision);
    let mut seen = Seen::new();
    for kv in &resp.kvs {
        let Some(name) = rule_name(prefix, &kv.key) else {
            continue;
        };
        seen.insert(name.to_string(), kv.mod_revision);
        // Oldest first: walk back from the current revision.
        let mut chain = vec![(kv.mod_revision, kv.value.clone())];
        let mut rev = kv.mod_revision;
        while chain.len() < HISTORY_DEPTH && rev > kv.create_revision {
            let Ok(old) = client.get(&kv.key, rev - 1).await else {
                break; // compacted: history starts here
            };
            let Some(okv) = old.kvs.first() else { break };
            rev = okv.mod_revision;
            chain.push((rev, okv.value.clone()));
        }
        for (rev, value) in chain.into_iter().rev() {
            apply_put(shared, name, rev, &value);
        }
    }
    // Rules deleted while this node was away.
    for name in shared.rules.names() {
        if !seen.contains_key(&name) {
            shared.rules.delete(&name);
        }
    }
    let _ = loaded.send(());
    Ok((client, start_rev, seen))
}

/// Watches the prefix from after `start_rev`, keeping `seen` as etcd's rules, until the watch
/// ends or a periodic read finds etcd's rules differ from `seen`.
async fn watch(
    shared: &Arc<Shared>,
    mut client: sluice_etcd::Client,
    start_rev: i64,
    mut seen: Seen,
    writes: &mut mpsc::UnboundedReceiver<Write>,
) -> Ended {
    let prefix = &shared.config.rules_prefix;
    let mut stream = match client.watch(prefix.as_bytes(), true, start_rev + 1).await {
        Ok(s) => s,
        Err(e) => return Ended::Unwatched(format!("watch {prefix}: {e}")),
    };
    let mut read_every =
        tokio::time::interval_at(tokio::time::Instant::now() + READ_EVERY, READ_EVERY);
    loop {
        tokio::select! {
            msg = stream.events() => {
                let msg = match msg {
                    Ok(msg) => msg,
                    Err(ended) => return ended,
                };
                for ev in &msg.events {
                    let Some(kv) = &ev.kv else { continue };
                    let Some(name) = rule_name(prefix, &kv.key) else { continue };
                    match ev.r#type() {
                        EventType::Put => {
                            seen.insert(name.to_string(), kv.mod_revision);
                            apply_put(shared, name, kv.mod_revision, &kv.value);
                        }
                        EventType::Delete => {
                            seen.remove(name);
                            shared.rules.delete(name);
                        }
                    }
                }
            }
            _ = read_every.tick() => {
                // A failed read is left to the watch: it fails too if etcd is gone.
                let Ok(resp) = client.get_prefix(prefix.as_bytes()).await else { continue };
                let now: Seen = resp
                    .kvs
                    .iter()
                    .filter_map(|kv| Some((rule_name(prefix, &kv.key)?.to_string(), kv.mod_revision)))
                    .collect();
                // A change made just before the read may still be on its way through the
                // watch: reading afresh then costs one read, and misses nothing.
                if now != seen {
                    let read_rev = resp.header.as_ref().map_or(0, |h| h.revision);
                    return Ended::Watch(format!(
                        "a periodic read found rules the watch had not delivered (revision {read_rev})"
                    ));
                }
            }
            Some(w) = writes.recv() => {
                let key = format!("{prefix}{}", w.name);
                let result = match &w.spec {
                    Some(spec) => client.put(key.as_bytes(), spec.to_text().as_bytes()).await,
                    None => client.delete(key.as_bytes()).await,
                };
                let result = result.map_err(|e| e.to_string()).map(|rev| {
                    match &w.spec {
                        Some(_) => seen.insert(w.name.clone(), rev),
                        None => seen.remove(&w.name),
                    };
                    let rev = u64::try_from(rev).unwrap_or(0);
                    match w.spec {
                        Some(spec) => {
                            shared.rules.install(&w.name, spec, Some(rev));
                        }
                        None => {
                            shared.rules.delete(&w.name);
                        }
                    }
                    rev
                });
                let _ = w.reply.send(result);
            }
        }
    }
}

/// The rule name of an etcd key under `prefix`, if it is one.
fn rule_name<'k>(prefix: &str, key: &'k [u8]) -> Option<&'k str> {
    let name = key.strip_prefix(prefix.as_bytes())?;
    super::check_name(name).ok()
}

/// Installs a stored value as version `rev` of `name`, unless it is invalid (logged).
fn apply_put(shared: &Shared, name: &str, rev: i64, value: &[u8]) {
    let rev = u64::try_from(rev).unwrap_or(0);
    let spec = parse_spec(
        value
            .split(|c| c.is_ascii_whitespace())
            .filter(|w| !w.is_empty()),
    )
    .and_then(|spec| shared.rules.prepare(name, spec));
    match spec {
        Ok(spec) => {
            shared.rules.install(name, spec, Some(rev));
        }
        Err(e) => sluice_log::log(&format!(
            "rules etcd: rule '{name}' revision {rev} ignored, keeping its last good version: {}",
            e.text()
        )),
    }
}
