//! The etcd v3 client Sluice needs: read a key or a prefix (now or at an earlier revision),
//! put, delete, put only if a key has not changed, watch a key or a prefix, transactions of
//! puts under conditions ([`Txn`]), and leases (grant, keep alive once).
//!
//! It speaks etcd's gRPC API through tonic, with code generated from the part of etcd's protos
//! vendored in `proto/` (KV, Watch and Lease). `protoc` comes from the `protoc-bin-vendored` crate, so
//! the build needs nothing but cargo; the `etcd-client` crate compiles etcd's protos with the
//! `protoc` on `PATH`, which a fresh machine does not have.
//!
//! # Invariants
//!
//! - One [`Client`] is one HTTP/2 connection to one etcd member, made by [`Client::connect`];
//!   a call on a broken connection fails and the caller connects again.
//! - A [`Watch`] keeps its request stream open for its whole life: etcd ends a watch whose
//!   client has finished sending.
//! - A watch etcd cancels (its start revision compacted, or any other reason) is an error
//!   from [`Watch::message`], never an answer to skip: etcd keeps the stream open after
//!   cancelling, so a caller that waited for the stream to end would wait forever.

pub mod table;
pub mod tls;

pub use tls::{TlsArgs, use_tls};

use std::fmt;

use tonic::transport::Channel;

/// The generated messages and clients of etcd's `mvccpb` package (keys and events).
#[allow(clippy::all)]
pub mod mvccpb {
    tonic::include_proto!("mvccpb");
}

/// The generated messages and clients of etcd's `etcdserverpb` package (KV and Watch).
#[allow(clippy::all)]
pub mod etcdserverpb {
    tonic::include_proto!("etcdserverpb");
}

pub use etcdserverpb::{RangeResponse, WatchResponse};
pub use mvccpb::event::EventType;
pub use mvccpb::{Event, KeyValue};

use etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use etcdserverpb::kv_client::KvClient;
use etcdserverpb::lease_client::LeaseClient;
use etcdserverpb::request_op::Request;
use etcdserverpb::watch_client::WatchClient;
use etcdserverpb::watch_request::RequestUnion;
use etcdserverpb::{
    Compare, DeleteRangeRequest, LeaseGrantRequest, LeaseKeepAliveRequest, PutRequest,
    RangeRequest, RequestOp, TxnRequest, WatchCreateRequest, WatchRequest,
};

/// A failed call: no connection, or etcd's error status.
#[derive(Debug)]
pub enum Error {
    /// The URL is not one, or nothing answered there.
    Connect(tonic::transport::Error),
    /// The URL does not fit the TLS settings (see [`tls`]).
    Url(String),
    /// etcd (or the transport under a call) answered with an error.
    Rpc(tonic::Status),
    /// etcd cancelled a watch: `compact_revision` is the oldest revision it still holds when
    /// the watch's start revision was compacted (0 when cancelled for another reason).
    WatchCanceled {
        compact_revision: i64,
        reason: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Connect(e) => f.write_str(&chain(e)),
            Error::Url(why) => f.write_str(why),
            Error::Rpc(status) => write!(f, "{}: {}", status.code(), status.message()),
            Error::WatchCanceled {
                compact_revision,
                reason,
            } => {
                f.write_str("etcd cancelled the watch")?;
                if *compact_revision > 0 {
                    write!(f, ": compacted up to revision {compact_revision}")?;
                }
                if !reason.is_empty() {
                    write!(f, " ({reason})")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for Error {}

/// `e` and every cause under it, `: `-separated: a TLS refusal (`invalid peer certificate:
/// UnknownIssuer`) sits a few levels under tonic's `transport error`.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let part = c.to_string();
        if !text.ends_with(&part) {
            text = format!("{text}: {part}");
        }
        cause = c.source();
    }
    text
}

impl From<tonic::Status> for Error {
    fn from(status: tonic::Status) -> Self {
        Error::Rpc(status)
    }
}

/// A connection to one etcd member.
#[derive(Debug, Clone)]
pub struct Client {
    kv: KvClient<Channel>,
    watch: WatchClient<Channel>,
    lease: LeaseClient<Channel>,
}

impl Client {
    /// Connects to etcd at `url` (`http://HOST:PORT`, or `https://` with [`use_tls`];
    /// `HOST:PORT` means whichever of the two the process uses).
    pub async fn connect(url: &str) -> Result<Client, Error> {
        let channel = tls::endpoint(url)
            .map_err(Error::Url)?
            .connect()
            .await
            .map_err(Error::Connect)?;
        Ok(Client {
            kv: KvClient::new(channel.clone()),
            lease: LeaseClient::new(channel.clone()),
            watch: WatchClient::new(channel),
        })
    }

    /// `key` as of `revision` (0: now). A revision etcd has compacted is an error.
    pub async fn get(&mut self, key: &[u8], revision: i64) -> Result<RangeResponse, Error> {
        let request = RangeRequest {
            key: key.to_vec(),
            revision,
            ..Default::default()
        };
        Ok(self.kv.range(request).await?.into_inner())
    }

    /// Every key under `prefix`, now.
    pub async fn get_prefix(&mut self, prefix: &[u8]) -> Result<RangeResponse, Error> {
        let request = RangeRequest {
            key: prefix.to_vec(),
            range_end: prefix_end(prefix),
            ..Default::default()
        };
        Ok(self.kv.range(request).await?.into_inner())
    }

    /// Puts `value` under `key`; the store's revision after the put.
    pub async fn put(&mut self, key: &[u8], value: &[u8]) -> Result<i64, Error> {
        let response = self.kv.put(put_request(key, value)).await?.into_inner();
        Ok(response.header.map_or(0, |h| h.revision))
    }

    /// Deletes `key`; the store's revision after the delete.
    pub async fn delete(&mut self, key: &[u8]) -> Result<i64, Error> {
        let request = DeleteRangeRequest {
            key: key.to_vec(),
            ..Default::default()
        };
        let response = self.kv.delete_range(request).await?.into_inner();
        Ok(response.header.map_or(0, |h| h.revision))
    }

    /// Puts `value` under `key` in one transaction, only if nobody has written the key since it
    /// was read at mod revision `read` (`None`: only if the key does not exist). Whether it did.
    pub async fn put_unless_changed(
        &mut self,
        key: &[u8],
        value: &[u8],
        read: Option<i64>,
    ) -> Result<bool, Error> {
        let compare = match read {
            Some(rev) => Compare {
                result: CompareResult::Equal.into(),
                target: CompareTarget::Mod.into(),
                key: key.to_vec(),
                target_union: Some(TargetUnion::ModRevision(rev)),
                range_end: Vec::new(),
            },
            // A key that does not exist has create revision 0.
            None => Compare {
                result: CompareResult::Equal.into(),
                target: CompareTarget::Create.into(),
                key: key.to_vec(),
                target_union: Some(TargetUnion::CreateRevision(0)),
                range_end: Vec::new(),
            },
        };
        let request = TxnRequest {
            compare: vec![compare],
            success: vec![RequestOp {
                request: Some(Request::RequestPut(put_request(key, value))),
            }],
            failure: Vec::new(),
        };
        Ok(self.kv.txn(request).await?.into_inner().succeeded)
    }

    /// Applies `txn`: its puts if every one of its conditions holds, else nothing. Whether
    /// they held.
    pub async fn commit(&mut self, txn: Txn) -> Result<bool, Error> {
        let request = TxnRequest {
            compare: txn.compare,
            success: txn.success,
            failure: Vec::new(),
        };
        Ok(self.kv.txn(request).await?.into_inner().succeeded)
    }

    /// Grants a lease of `ttl_secs` seconds; its id.
    pub async fn lease_grant(&mut self, ttl_secs: i64) -> Result<i64, Error> {
        let request = LeaseGrantRequest {
            ttl: ttl_secs,
            id: 0,
        };
        let response = self.lease.lease_grant(request).await?.into_inner();
        if response.error.is_empty() {
            Ok(response.id)
        } else {
            Err(Error::Rpc(tonic::Status::unknown(response.error)))
        }
    }

    /// Renews lease `id` once; the seconds it now has left (0: it had already expired).
    pub async fn lease_keep_alive(&mut self, id: i64) -> Result<i64, Error> {
        let request = LeaseKeepAliveRequest { id };
        // One request, then the stream stays open until the answer is read: etcd ends a
        // keep-alive stream whose client has finished sending before it answers.
        let requests =
            tokio_stream::StreamExt::chain(tokio_stream::iter([request]), tokio_stream::pending());
        let mut responses = self.lease.lease_keep_alive(requests).await?.into_inner();
        match responses.message().await? {
            Some(r) => Ok(r.ttl),
            None => Ok(0),
        }
    }

    /// Watches `key` (every key under it, with `prefix`) from `start_revision` on: every change
    /// at or after that revision arrives, in order, through [`Watch::message`].
    pub async fn watch(
        &mut self,
        key: &[u8],
        prefix: bool,
        start_revision: i64,
    ) -> Result<Watch, Error> {
        let create = WatchCreateRequest {
            key: key.to_vec(),
            range_end: if prefix { prefix_end(key) } else { Vec::new() },
            start_revision,
            ..Default::default()
        };
        let request = WatchRequest {
            request_union: Some(RequestUnion::CreateRequest(create)),
        };
        // One create request, then a stream that never ends: see the module's invariants.
        let requests =
            tokio_stream::StreamExt::chain(tokio_stream::iter([request]), tokio_stream::pending());
        let responses = self.watch.watch(requests).await?.into_inner();
        Ok(Watch { responses })
    }
}

/// A running watch: etcd's answers, the first one confirming its creation.
#[derive(Debug)]
pub struct Watch {
    responses: tonic::Streaming<WatchResponse>,
}

impl Watch {
    /// The next answer, with the events since the last one; `None` when etcd ended the watch.
    /// An answer that cancels the watch (a compacted start revision, or any other reason) is
    /// [`Error::WatchCanceled`]: no event follows it on this stream.
    pub async fn message(&mut self) -> Result<Option<WatchResponse>, Error> {
        match self.responses.message().await? {
            Some(resp) if resp.canceled || resp.compact_revision > 0 => Err(Error::WatchCanceled {
                compact_revision: resp.compact_revision,
                reason: resp.cancel_reason,
            }),
            other => Ok(other),
        }
    }

    /// The next answer of a watch that is meant to run for good: its end (etcd ended it,
    /// cancelled it, or the stream failed) is [`Ended::Watch`], with why.
    pub async fn events(&mut self) -> Result<WatchResponse, Ended> {
        match self.message().await {
            Ok(Some(resp)) => Ok(resp),
            Ok(None) => Err(Ended::Watch("etcd ended the watch".into())),
            Err(e) => Err(Ended::Watch(e.to_string())),
        }
    }
}

/// Why one round of following a key or a prefix (read it, then watch it) ended: the caller
/// reads afresh and watches again.
#[derive(Debug)]
pub enum Ended {
    /// Before the watch ran: etcd unreachable, the read failed.
    Unwatched(String),
    /// The running watch was cancelled (a compaction), ended or failed, or a periodic read
    /// found a change it had not delivered.
    Watch(String),
}

/// A transaction for [`Client::commit`]: conditions on keys, then the puts made if all hold.
#[derive(Debug, Default, Clone)]
pub struct Txn {
    compare: Vec<Compare>,
    success: Vec<RequestOp>,
}

impl Txn {
    pub fn new() -> Txn {
        Txn::default()
    }

    /// Holds if `key` was last written at mod revision `rev` (0: the key does not exist).
    pub fn mod_revision_is(mut self, key: &[u8], rev: i64) -> Txn {
        self.compare.push(Compare {
            result: CompareResult::Equal.into(),
            target: CompareTarget::Mod.into(),
            key: key.to_vec(),
            target_union: Some(TargetUnion::ModRevision(rev)),
            range_end: Vec::new(),
        });
        self
    }

    /// Puts `value` under `key`, bound to lease `lease` (0: none).
    pub fn put(mut self, key: &[u8], value: &[u8], lease: i64) -> Txn {
        let mut put = put_request(key, value);
        put.lease = lease;
        self.success.push(RequestOp {
            request: Some(Request::RequestPut(put)),
        });
        self
    }
}

fn put_request(key: &[u8], value: &[u8]) -> PutRequest {
    PutRequest {
        key: key.to_vec(),
        value: value.to_vec(),
        ..Default::default()
    }
}

/// The end of the range of every key that starts with `prefix`: the prefix with its last byte
/// that is not 0xff incremented and what follows it dropped; `\0` (no end) if every byte is
/// 0xff or the prefix is empty.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    match prefix.iter().rposition(|&b| b != 0xff) {
        Some(i) => {
            let mut end = prefix[..=i].to_vec();
            end[i] += 1;
            end
        }
        None => vec![0],
    }
}

/// Connects to the etcd at `url` (`http://HOST:PORT`), giving up after 5 s; errors as text.
pub async fn connect(url: &str) -> Result<Client, String> {
    tokio::time::timeout(std::time::Duration::from_secs(5), Client::connect(url))
        .await
        .map_err(|_| format!("etcd at {url} did not answer"))?
        .map_err(|e| format!("cannot connect to etcd at {url}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn prefix_end_is_the_first_key_past_the_prefix() {
        assert_eq!(prefix_end(b"/sluice/rules/"), b"/sluice/rules0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff\xff"), b"\0");
        assert_eq!(prefix_end(b""), b"\0");
    }
}
