//! What one connection carries between its commands: protocol, authentication, transaction,
//! subscriptions, the cluster view it checks keys against, and the last command it sent.

use std::sync::Arc;

use sluice_resp::reply::Proto;

use super::table::CommandSpec;
use super::{multi, wait};
use crate::clients::ClientHandle;
use crate::pubsub::Subscriptions;
use crate::repl::PsyncRequest;

/// What one connection carries between its commands.
#[derive(Debug)]
pub struct Session {
    pub client: Arc<ClientHandle>,
    pub proto: Proto,
    pub authenticated: bool,
    /// The ACL user this connection runs as (`default` until AUTH names another).
    pub user: Arc<crate::acl::User>,
    /// Set by QUIT and SHUTDOWN: close once this batch's replies are written.
    pub close: bool,
    /// Commands queued since MULTI.
    pub transaction: Option<multi::Transaction>,
    /// The keys WATCH named, until EXEC, DISCARD, UNWATCH or RESET.
    pub watching: Option<super::watch::Watching>,
    /// The last command name this connection sent, as sent, and its table row: clients repeat
    /// one command, so most lookups are one short compare.
    pub last_command: Option<LastCommand>,
    /// EXEC is running the queued commands (blocking commands answer at once).
    pub in_exec: bool,
    /// Channels and patterns, once the connection has subscribed.
    pub subs: Option<Subscriptions>,
    /// Set by WAIT: the connection loop answers when enough replicas ack or time runs out.
    pub blocked: Option<wait::Blocked>,
    /// Set by PSYNC: the connection loop hands the socket to the replication thread.
    pub handoff: Option<PsyncRequest>,
    /// REPLCONF listening-port and capa, remembered for PSYNC.
    pub replica_port: u16,
    pub replica_capa: bool,
    /// Cluster mode: the table this connection last checked keys against.
    pub cluster_view: Option<Arc<crate::cluster::View>>,
    /// READONLY: read keys of this replica's shard here instead of following MOVED.
    pub readonly: bool,
    /// The worker thread this connection lives on.
    pub thread: usize,
    /// The connection came in on the TLS port: cluster replies name nodes' TLS ports.
    pub tls: bool,
    /// The CLUSTER IMPORTs and PAUSEs this connection asked for: dropped with it, which
    /// abandons the imports whose slots are not this node's yet and lifts a pause the table
    /// did not end (an admin tool killed mid-move).
    pub asked: Vec<tokio::sync::oneshot::Sender<()>>,
    /// The commands of the current read batch, charged its time when it ends.
    pub batch: crate::stats::Batch,
}

impl Session {
    /// A new connection, running as `user` (the `default` user): logged in at once if that
    /// user needs no password.
    pub fn new(client: Arc<ClientHandle>, user: Arc<crate::acl::User>) -> Session {
        Session {
            client,
            proto: Proto::default(),
            authenticated: user.needs_no_password(),
            user,
            close: false,
            transaction: None,
            watching: None,
            last_command: None,
            in_exec: false,
            subs: None,
            blocked: None,
            handoff: None,
            replica_port: 0,
            replica_capa: false,
            cluster_view: None,
            readonly: false,
            thread: 0,
            tls: false,
            asked: Vec::new(),
            batch: crate::stats::Batch::default(),
        }
    }

    /// Runs as `user` from now on (AUTH, HELLO AUTH, RESET).
    pub fn login(&mut self, user: Arc<crate::acl::User>) {
        self.authenticated = user.needs_no_password();
        if *self.client.user.lock() != user.name {
            *self.client.user.lock() = user.name.clone();
        }
        self.user = user;
    }

    /// True while subscribed to any channel or pattern.
    pub fn subscribed(&self) -> bool {
        self.subs.as_ref().is_some_and(|s| s.count() > 0)
    }
}

/// A command name exactly as a client spelled it, with the row it resolved to.
#[derive(Debug, Clone, Copy)]
pub struct LastCommand {
    name: [u8; 16],
    len: u8,
    spec: &'static CommandSpec,
}

impl LastCommand {
    pub(super) fn matches(&self, name: &[u8]) -> Option<&'static CommandSpec> {
        let len = name.len();
        if len != usize::from(self.len) {
            return None;
        }
        // Two words that overlap cover a name of 4 to 16 bytes (every common command): a few
        // loads and compares instead of a call to `memcmp`.
        let same = match len {
            8.. => {
                word8(name, 0) == word8(&self.name, 0)
                    && word8(name, len - 8) == word8(&self.name, len - 8)
            }
            4.. => {
                word4(name, 0) == word4(&self.name, 0)
                    && word4(name, len - 4) == word4(&self.name, len - 4)
            }
            _ => self.name[..len] == *name,
        };
        same.then_some(self.spec)
    }

    pub(super) fn new(name: &[u8], spec: &'static CommandSpec) -> Option<LastCommand> {
        let mut buf = [0u8; 16];
        buf.get_mut(..name.len())?.copy_from_slice(name);
        Some(LastCommand {
            name: buf,
            len: name.len() as u8,
            spec,
        })
    }
}

/// The 8 bytes of `b` from `at`.
#[inline]
fn word8(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_ne_bytes(w)
}

/// The 4 bytes of `b` from `at`.
#[inline]
fn word4(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_ne_bytes(w)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::COMMANDS;

    #[test]
    fn a_remembered_name_matches_itself_only() {
        let spec = &COMMANDS[0];
        for len in 1..=16 {
            let name: Vec<u8> = (0..len).map(|i| b'a' + i as u8).collect();
            let last = LastCommand::new(&name, spec).unwrap();
            assert!(last.matches(&name).is_some(), "{len}");
            for at in 0..len {
                let mut other = name.clone();
                other[at] = b'Z';
                assert!(last.matches(&other).is_none(), "{len} {at}");
            }
            assert!(last.matches(&name[..len - 1]).is_none());
            let mut longer = name.clone();
            longer.push(b'a');
            assert!(last.matches(&longer).is_none());
        }
        assert!(LastCommand::new(&[b'x'; 17], spec).is_none());
    }
}
