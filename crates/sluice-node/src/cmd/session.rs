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
        (name.len() == usize::from(self.len) && self.name[..name.len()] == *name)
            .then_some(self.spec)
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
