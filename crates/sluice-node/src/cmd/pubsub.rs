//! `SUBSCRIBE`, `UNSUBSCRIBE`, `PSUBSCRIBE`, `PUNSUBSCRIBE`, `PUBLISH`.
//!
//! # Format
//! Each (un)subscription is confirmed by its own reply: `[kind, channel, count]`, an array in
//! RESP2 and a push in RESP3, where `count` is the connection's channels plus patterns after
//! it. Messages arrive as `[message, channel, payload]` or `[pmessage, pattern, channel,
//! payload]`. In RESP2, a subscribed connection may only (un)subscribe, PING, QUIT and RESET.

use sluice_resp::reply;

use super::{Args, CmdError, Command, Ctx};
use crate::clients::ClientKind;
use crate::pubsub::Subscriptions;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Subscribe,
    Unsubscribe,
    PSubscribe,
    PUnsubscribe,
}

impl Kind {
    fn name(self) -> &'static [u8] {
        match self {
            Kind::Subscribe => b"subscribe",
            Kind::Unsubscribe => b"unsubscribe",
            Kind::PSubscribe => b"psubscribe",
            Kind::PUnsubscribe => b"punsubscribe",
        }
    }
}

fn confirm(ctx: &mut Ctx<'_>, kind: Kind, name: Option<&[u8]>, count: usize) {
    reply::push(ctx.out, ctx.session.proto, 3);
    reply::bulk(ctx.out, kind.name());
    match name {
        Some(n) => reply::bulk(ctx.out, n),
        None => reply::null(ctx.out, ctx.session.proto),
    }
    reply::integer(ctx.out, count as i64);
}

fn run(ctx: &mut Ctx<'_>, kind: Kind, names: Vec<&[u8]>) {
    let id = ctx.session.client.id;
    let pubsub = &ctx.shared.pubsub;
    let mut subs = ctx.session.subs.take().unwrap_or_default();
    match kind {
        Kind::Subscribe | Kind::PSubscribe => {
            for name in names {
                if kind == Kind::Subscribe {
                    pubsub.subscribe(id, &mut subs, name);
                } else {
                    pubsub.psubscribe(id, &mut subs, name);
                }
                confirm(ctx, kind, Some(name), subs.count());
            }
        }
        Kind::Unsubscribe | Kind::PUnsubscribe => {
            let names: Vec<Vec<u8>> = if names.is_empty() {
                let all = if kind == Kind::Unsubscribe {
                    &subs.channels
                } else {
                    &subs.patterns
                };
                all.iter().map(|b| b.to_vec()).collect()
            } else {
                names.into_iter().map(<[u8]>::to_vec).collect()
            };
            if names.is_empty() {
                confirm(ctx, kind, None, subs.count());
            }
            for name in names {
                if kind == Kind::Unsubscribe {
                    pubsub.unsubscribe(id, &mut subs, &name);
                } else {
                    pubsub.punsubscribe(id, &mut subs, &name);
                }
                confirm(ctx, kind, Some(&name), subs.count());
            }
        }
    }
    ctx.session
        .client
        .set_subs(subs.channels.len(), subs.patterns.len());
    let subscribed = subs.count() > 0;
    ctx.session.client.set_kind(if subscribed {
        ClientKind::PubSub
    } else {
        ClientKind::Normal
    });
    ctx.session.subs = Some(subs);
}

macro_rules! subscription_command {
    ($ty:ident, $kind:expr) => {
        #[derive(Debug)]
        pub struct $ty<'a>(Vec<&'a [u8]>);

        impl<'a> Command<'a> for $ty<'a> {
            fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
                Ok($ty(args.rest().collect()))
            }

            fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
                run(ctx, $kind, self.0);
                Ok(())
            }
        }
    };
}

subscription_command!(Subscribe, Kind::Subscribe);
subscription_command!(Unsubscribe, Kind::Unsubscribe);
subscription_command!(PSubscribe, Kind::PSubscribe);
subscription_command!(PUnsubscribe, Kind::PUnsubscribe);

#[derive(Debug)]
pub struct Publish<'a> {
    channel: &'a [u8],
    message: &'a [u8],
}

impl<'a> Command<'a> for Publish<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        let channel = args.required()?;
        let message = args.required()?;
        args.finish()?;
        Ok(Publish { channel, message })
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let n = ctx.shared.pubsub.publish(self.channel, self.message);
        reply::integer(ctx.out, n as i64);
        Ok(())
    }
}

/// Drops a connection's subscriptions (on close and RESET).
pub fn clear(shared: &crate::shared::Shared, subs: &mut Option<Subscriptions>, client: u64) {
    if let Some(mut s) = subs.take() {
        shared.pubsub.remove_all(client, &mut s);
    }
}
