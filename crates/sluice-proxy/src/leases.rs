//! `RL.ACQUIRE`, `RL.RELEASE` and `RL.RENEW` through the sidecar: forwarded to the key's node,
//! and the sidecar's fail mode (`--fail-mode`) when the node cannot answer, as
//! `sluice_client::lease` describes: `open` admits with lease id 0, `closed` denies, `local`
//! holds `max ÷ gateways` leases per key here, under ids with the top bit set that a release or
//! renew through this sidecar finds. A lease's id goes to the sidecar's client, which releases
//! it (or lets it end at its ttl); the sidecar holds no guard.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use sluice_client::Concurrency;
use sluice_core::lease::{parse_max, parse_ttl};
use sluice_resp::Request;
use sluice_resp::reply::{self, Proto};

use crate::Proxy;
use crate::conn::Batch;

const NOT_AN_ID: &str = "ERR value is not an integer or out of range";

impl Proxy {
    /// `RL.ACQUIRE key max ttl`.
    pub(crate) fn acquire(self: &Arc<Self>, req: &Request, proto: Proto, batch: &mut Batch) {
        let key = req.arg(1).unwrap_or_default().to_vec();
        let max = match parse_max(req.arg(2).unwrap_or_default()) {
            Ok(m) => m,
            Err(e) => return batch.error(&e),
        };
        let ttl = match parse_ttl(req.arg(3).unwrap_or_default()) {
            Ok(t) => Duration::from_nanos(t.as_nanos()),
            Err(e) => return batch.error(e),
        };
        let c = Concurrency::new(max, ttl)
            .fail_mode(self.default_mode)
            .local_leases(self.leases.clone());
        let proxy = self.clone();
        batch.task(tokio::spawn(async move {
            let mut out = BytesMut::new();
            match proxy.client.acquire_id(&key, &c).await {
                Ok(d) => {
                    proxy.count_one(d.allowed);
                    reply::array(&mut out, 5);
                    for n in d.fields() {
                        reply::integer(&mut out, n);
                    }
                    match d.lease_id {
                        // Two's complement: a local id (top bit set) is negative on the wire.
                        Some(id) => reply::integer(&mut out, id as i64),
                        None => reply::null(&mut out, proto),
                    }
                }
                Err(e) => reply::error(&mut out, &e.0),
            }
            out
        }));
    }

    /// `RL.RELEASE key lease_id` (`renew: None`) or `RL.RENEW key lease_id ttl`.
    pub(crate) fn release_or_renew(
        self: &Arc<Self>,
        req: &Request,
        renew: bool,
        batch: &mut Batch,
    ) {
        let key = req.arg(1).unwrap_or_default().to_vec();
        // Ids are replied as signed integers: a local id (top bit set) comes back negative.
        let id = match std::str::from_utf8(req.arg(2).unwrap_or_default())
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
        {
            Some(id) => id as u64,
            None => return batch.error(NOT_AN_ID),
        };
        let ttl = match renew.then(|| parse_ttl(req.arg(3).unwrap_or_default())) {
            Some(Ok(t)) => Some(Duration::from_nanos(t.as_nanos())),
            Some(Err(e)) => return batch.error(e),
            None => None,
        };
        let proxy = self.clone();
        batch.task(tokio::spawn(async move {
            let (client, local) = (&proxy.client, &proxy.leases);
            let done = match ttl {
                Some(ttl) => client.renew_id(&key, id, ttl, local).await,
                None => client.release_id(&key, id, local).await,
            };
            let mut out = BytesMut::new();
            reply::integer(&mut out, i64::from(done));
            out
        }));
    }
}
