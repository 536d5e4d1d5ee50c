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
//! The etcd client runs on a thread of its own with its own runtime; a command's write waits
//! for it (up to [`WRITE_TIMEOUT`](super::handle::WRITE_TIMEOUT)) on the worker thread, which is acceptable for an admin
//! command and keeps `RL.HIT` untouched.

use std::sync::Arc;
use std::sync::mpsc as std_mpsc;
use std::time::Duration;

use sluice_etcd::EventType;
use tokio::sync::mpsc;

use super::handle::{Handle, Write};
use super::parse_spec;
use crate::shared::Shared;

/// How long to wait before reconnecting after an error.
const RETRY_EVERY: Duration = Duration::from_millis(500);
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
            r = follow_once(&shared, &url, &mut writes, &loaded) => {
                if let Err(e) = r {
                    sluice_log::log(&format!("rules etcd: {e}; retrying"));
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

async fn follow_once(
    shared: &Arc<Shared>,
    url: &str,
    writes: &mut mpsc::UnboundedReceiver<Write>,
    loaded: &std_mpsc::Sender<()>,
) -> Result<(), String> {
    let prefix = shared.config.rules_prefix.clone();
    let mut client = sluice_etcd::connect(url).await?;
    let resp = client
        .get_prefix(prefix.as_bytes())
        .await
        .map_err(|e| format!("get {prefix}: {e}"))?;
    let start_rev = resp.header.as_ref().map_or(0, |h| h.revision);
    let mut names = Vec::new();
    for kv in &resp.kvs {
        let Some(name) = rule_name(&prefix, &kv.key) else {
            continue;
        };
        names.push(name.to_string());
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
        if !names.contains(&name) {
            shared.rules.delete(&name);
        }
    }
    let _ = loaded.send(());
    let mut stream = client
        .watch(prefix.as_bytes(), true, start_rev + 1)
        .await
        .map_err(|e| format!("watch {prefix}: {e}"))?;
    loop {
        tokio::select! {
            msg = stream.message() => {
                let msg = msg.map_err(|e| format!("watch: {e}"))?.ok_or("watch closed")?;
                for ev in &msg.events {
                    let Some(kv) = &ev.kv else { continue };
                    let Some(name) = rule_name(&prefix, &kv.key) else { continue };
                    match ev.r#type() {
                        EventType::Put => apply_put(shared, name, kv.mod_revision, &kv.value),
                        EventType::Delete => {
                            shared.rules.delete(name);
                        }
                    }
                }
            }
            Some(w) = writes.recv() => {
                let key = format!("{prefix}{}", w.name);
                let result = match &w.spec {
                    Some(spec) => client.put(key.as_bytes(), spec.to_text().as_bytes()).await,
                    None => client.delete(key.as_bytes()).await,
                };
                let result = result.map_err(|e| e.to_string()).map(|rev| {
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
