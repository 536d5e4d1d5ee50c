//! A queue of work for one background loop: any thread submits; the loop takes the receiving
//! end once, when it starts. Replication and cluster control each have their own.

use parking_lot::Mutex;
use tokio::sync::mpsc;

pub struct Jobs<J> {
    tx: mpsc::UnboundedSender<J>,
    rx: Mutex<Option<mpsc::UnboundedReceiver<J>>>,
}

impl<J> Default for Jobs<J> {
    fn default() -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Jobs {
            tx,
            rx: Mutex::new(Some(rx)),
        }
    }
}

impl<J> std::fmt::Debug for Jobs<J> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Jobs").finish_non_exhaustive()
    }
}

impl<J> Jobs<J> {
    /// Queues `job`; dropped if the loop has ended (the server is stopping).
    pub fn submit(&self, job: J) {
        let _ = self.tx.send(job);
    }

    /// The receiving end, for the loop that runs the jobs (once).
    pub fn take_receiver(&self) -> Option<mpsc::UnboundedReceiver<J>> {
        self.rx.lock().take()
    }
}
