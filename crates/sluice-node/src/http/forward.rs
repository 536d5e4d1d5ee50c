//! A check whose bucket another cluster node owns, forwarded to that node.
//!
//! When the command table answers `-MOVED slot host:port`, the HTTP front sends the same words
//! to `host:port` over RESP (with the cluster's password, as the nodes' other calls to each
//! other) and answers with that node's reply, so a gateway may send any check to any node's
//! HTTP port. Only one hop: a `-MOVED` from the owner too (the table is changing) stays a
//! `421`, as does `-CROSSSLOT` (a request check whose buckets span slots: the gateway library
//! splits those).
//!
//! The owner runs the words as the cluster's peer user, not as the request's: the request's
//! user was checked here first (dispatch checks the command and the key patterns before the
//! slot, so `-MOVED` comes only for a call the user may make). The ACL users of the node that
//! takes the request decide.
//!
//! Connections to owners are kept for reuse, one idle connection per owner; a call takes it
//! (or opens one), and puts it back only after a whole reply.

use std::collections::HashMap;

use sluice_resp::Value;

use crate::peer::Peer;
use crate::shared::Shared;

/// Idle connections to the other nodes, by `host:port`.
#[derive(Debug, Default)]
pub struct Owners {
    idle: parking_lot::Mutex<HashMap<String, Peer>>,
}

impl Owners {
    /// `reply` itself, or, when it is `-MOVED`, the owner's reply to `args`.
    pub async fn follow<A: AsRef<[u8]>>(&self, shared: &Shared, args: &[A], reply: Value) -> Value {
        let owner = match &reply {
            Value::Error(e) => moved_to(e),
            _ => None,
        };
        let Some(owner) = owner else { return reply };
        match self.call(shared, &owner, args).await {
            Ok(answer) => answer,
            // The owner did not answer: the redirect is still the truth to tell.
            Err(_) => reply,
        }
    }

    async fn call<A: AsRef<[u8]>>(
        &self,
        shared: &Shared,
        owner: &str,
        args: &[A],
    ) -> Result<Value, String> {
        let words: Vec<&[u8]> = args.iter().map(AsRef::as_ref).collect();
        let kept = self.idle.lock().remove(owner);
        // A kept connection may have been closed by the owner since: one fresh try then (not
        // after a timeout, when the owner may have taken the check).
        let answered = match kept {
            Some(mut peer) => peer.call(&words).await.map(|a| (a, peer)),
            None => Err(String::new()),
        };
        let (answer, peer) = match answered {
            Ok(done) => done,
            Err(e) if e.contains("timed out") => return Err(e),
            Err(_) => {
                let mut peer = connect(shared, owner).await?;
                (peer.call(&words).await?, peer)
            }
        };
        self.idle.lock().insert(owner.to_owned(), peer);
        Ok(answer)
    }
}

async fn connect(shared: &Shared, owner: &str) -> Result<Peer, String> {
    let (host, port) = owner
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
        .ok_or_else(|| format!("bad address '{owner}'"))?;
    crate::cluster::adopt::connect_peer(shared, host, port).await
}

/// The `host:port` of `-MOVED slot host:port`.
fn moved_to(error: &str) -> Option<String> {
    let mut words = error.split(' ');
    (words.next()? == "MOVED").then_some(())?;
    words.next()?;
    words.next().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_moved_names_an_owner() {
        assert_eq!(
            moved_to("MOVED 866 127.0.0.1:7001").as_deref(),
            Some("127.0.0.1:7001")
        );
        assert_eq!(moved_to("CROSSSLOT Keys in request don't hash"), None);
        assert_eq!(moved_to("MOVED 866"), None);
    }
}
