//! Pub/sub: channels and patterns with real fan-out.
//!
//! Sentinels find each other only by publishing on `__sentinel__:hello` of the nodes they watch
//! and subscribing to it, so PUBLISH must reach every subscriber of every thread. The registry
//! is one mutex (touched by SUBSCRIBE, PUBLISH and disconnects, never by RL.CHECK); each
//! subscribed connection owns a channel receiver that its loop drains into its output buffer,
//! encoding each message in the connection's own protocol.

use std::collections::{BTreeSet, HashMap};

use bytes::Bytes;
use bytes::BytesMut;
use parking_lot::Mutex;
use sluice_resp::reply::{self, Proto};
use tokio::sync::mpsc;

use crate::glob::glob_match;

/// A message on its way to one subscriber.
#[derive(Debug, Clone)]
pub enum Message {
    Message {
        channel: Bytes,
        payload: Bytes,
    },
    PMessage {
        pattern: Bytes,
        channel: Bytes,
        payload: Bytes,
    },
}

impl Message {
    /// `message`/`pmessage` as Redis sends it: an array in RESP2, a push in RESP3.
    pub fn write(&self, out: &mut BytesMut, proto: Proto) {
        match self {
            Message::Message { channel, payload } => {
                reply::push(out, proto, 3);
                reply::bulk(out, b"message");
                reply::bulk(out, channel);
                reply::bulk(out, payload);
            }
            Message::PMessage {
                pattern,
                channel,
                payload,
            } => {
                reply::push(out, proto, 4);
                reply::bulk(out, b"pmessage");
                reply::bulk(out, pattern);
                reply::bulk(out, channel);
                reply::bulk(out, payload);
            }
        }
    }
}

#[derive(Debug, Clone)]
struct Subscriber {
    client: u64,
    tx: mpsc::UnboundedSender<Message>,
}

#[derive(Debug, Default)]
struct Registry {
    channels: HashMap<Bytes, Vec<Subscriber>>,
    /// Keyed like channels, so that dropping one client's patterns touches only those
    /// patterns' subscribers, never every pattern on the node.
    patterns: HashMap<Bytes, Vec<Subscriber>>,
}

/// Channels and patterns are kept alike, each in its own map.
#[derive(Clone, Copy)]
enum Kind {
    Channel,
    Pattern,
}

impl Kind {
    fn of_client(self, subs: &mut Subscriptions) -> &mut BTreeSet<Bytes> {
        match self {
            Kind::Channel => &mut subs.channels,
            Kind::Pattern => &mut subs.patterns,
        }
    }

    fn of_node(self, registry: &mut Registry) -> &mut HashMap<Bytes, Vec<Subscriber>> {
        match self {
            Kind::Channel => &mut registry.channels,
            Kind::Pattern => &mut registry.patterns,
        }
    }
}

/// Every subscription on this node.
#[derive(Debug, Default)]
pub struct PubSub {
    registry: Mutex<Registry>,
}

/// One connection's subscriptions and its end of the message channel.
#[derive(Debug)]
pub struct Subscriptions {
    pub channels: BTreeSet<Bytes>,
    pub patterns: BTreeSet<Bytes>,
    tx: mpsc::UnboundedSender<Message>,
    pub rx: mpsc::UnboundedReceiver<Message>,
}

impl Default for Subscriptions {
    fn default() -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Subscriptions {
            channels: BTreeSet::new(),
            patterns: BTreeSet::new(),
            tx,
            rx,
        }
    }
}

impl Subscriptions {
    /// Channels plus patterns: the count Redis replies with.
    pub fn count(&self) -> usize {
        self.channels.len() + self.patterns.len()
    }
}

impl PubSub {
    /// Delivers `payload` to every subscriber of `channel` and of a matching pattern; returns
    /// how many received it.
    pub fn publish(&self, channel: &[u8], payload: &[u8]) -> usize {
        let registry = self.registry.lock();
        let channel = Bytes::copy_from_slice(channel);
        let payload = Bytes::copy_from_slice(payload);
        let mut receivers = 0;
        if let Some(subs) = registry.channels.get(&channel) {
            for s in subs {
                let msg = Message::Message {
                    channel: channel.clone(),
                    payload: payload.clone(),
                };
                receivers += usize::from(s.tx.send(msg).is_ok());
            }
        }
        for (pattern, subs) in &registry.patterns {
            if glob_match(pattern, &channel) {
                for s in subs {
                    let msg = Message::PMessage {
                        pattern: pattern.clone(),
                        channel: channel.clone(),
                        payload: payload.clone(),
                    };
                    receivers += usize::from(s.tx.send(msg).is_ok());
                }
            }
        }
        receivers
    }

    /// Subscribes `client` to `channel`; false if it already was.
    pub fn subscribe(&self, client: u64, subs: &mut Subscriptions, channel: &[u8]) -> bool {
        self.add(Kind::Channel, client, subs, channel)
    }

    /// Unsubscribes `client` from `channel`; false if it was not subscribed.
    pub fn unsubscribe(&self, client: u64, subs: &mut Subscriptions, channel: &[u8]) -> bool {
        self.remove(Kind::Channel, client, subs, channel)
    }

    pub fn psubscribe(&self, client: u64, subs: &mut Subscriptions, pattern: &[u8]) -> bool {
        self.add(Kind::Pattern, client, subs, pattern)
    }

    pub fn punsubscribe(&self, client: u64, subs: &mut Subscriptions, pattern: &[u8]) -> bool {
        self.remove(Kind::Pattern, client, subs, pattern)
    }

    fn add(&self, kind: Kind, client: u64, subs: &mut Subscriptions, name: &[u8]) -> bool {
        let name = Bytes::copy_from_slice(name);
        if !kind.of_client(subs).insert(name.clone()) {
            return false;
        }
        let tx = subs.tx.clone();
        kind.of_node(&mut self.registry.lock())
            .entry(name)
            .or_default()
            .push(Subscriber { client, tx });
        true
    }

    fn remove(&self, kind: Kind, client: u64, subs: &mut Subscriptions, name: &[u8]) -> bool {
        if !kind.of_client(subs).remove(name) {
            return false;
        }
        let mut registry = self.registry.lock();
        let map = kind.of_node(&mut registry);
        if let Some(list) = map.get_mut(name) {
            list.retain(|s| s.client != client);
            if list.is_empty() {
                map.remove(name);
            }
        }
        true
    }

    /// Drops every subscription of a connection that is closing or being RESET.
    pub fn remove_all(&self, client: u64, subs: &mut Subscriptions) {
        for channel in subs.channels.clone() {
            self.unsubscribe(client, subs, &channel);
        }
        for pattern in subs.patterns.clone() {
            self.punsubscribe(client, subs, &pattern);
        }
    }

    /// Channels with at least one subscriber (`PUBSUB CHANNELS` and INFO).
    pub fn channel_count(&self) -> usize {
        self.registry.lock().channels.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publish_reaches_channels_and_patterns() {
        let ps = PubSub::default();
        let mut a = Subscriptions::default();
        let mut b = Subscriptions::default();
        assert!(ps.subscribe(1, &mut a, b"news"));
        assert!(!ps.subscribe(1, &mut a, b"news"));
        assert!(ps.psubscribe(2, &mut b, b"n*"));
        assert_eq!(ps.publish(b"news", b"hi"), 2);
        assert_eq!(ps.publish(b"other", b"hi"), 0);
        assert!(matches!(a.rx.try_recv(), Ok(Message::Message { .. })));
        assert!(matches!(b.rx.try_recv(), Ok(Message::PMessage { .. })));
        ps.remove_all(1, &mut a);
        assert_eq!(a.count(), 0);
        assert_eq!(ps.publish(b"news", b"hi"), 1);
        assert!(ps.punsubscribe(2, &mut b, b"n*"));
        assert_eq!(ps.publish(b"news", b"hi"), 0);
        assert_eq!(ps.channel_count(), 0);
    }
}
