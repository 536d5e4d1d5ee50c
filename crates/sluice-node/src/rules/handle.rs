//! The commands' side of the rules' etcd thread (`rules::etcd`): a write is sent to it and
//! its revision awaited. State only: the thread itself lives above.

use std::sync::mpsc as std_mpsc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::RuleSpec;

/// How long a command waits for etcd to take its write.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
pub type Reply = std_mpsc::Sender<Result<u64, String>>;

/// A write for the etcd thread: put `spec` (or delete, with `None`) under the rule's key.
#[derive(Debug)]
pub struct Write {
    pub name: String,
    pub spec: Option<RuleSpec>,
    pub reply: Reply,
}

/// The commands' side of the etcd thread.
#[derive(Debug)]
pub struct Handle {
    pub(super) tx: mpsc::UnboundedSender<Write>,
}

impl Handle {
    /// Writes `spec` (or deletes the rule) in etcd; the new revision.
    pub fn write(&self, name: &str, spec: Option<&RuleSpec>) -> Result<u64, String> {
        let (reply, rx) = std_mpsc::channel();
        self.tx
            .send(Write {
                name: name.to_string(),
                spec: spec.cloned(),
                reply,
            })
            .map_err(|_| "the etcd thread has stopped".to_string())?;
        rx.recv_timeout(WRITE_TIMEOUT)
            .map_err(|_| format!("etcd did not answer within {WRITE_TIMEOUT:?}"))?
    }
}
