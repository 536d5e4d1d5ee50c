//! One client connection: read, parse every complete request, answer what the sidecar answers
//! itself, send the rest to the nodes in one batch per node, and write every reply of the read
//! in request order with one write.
//!
//! # Why it is shaped like this
//! The sidecar sits on every gateway host, so its CPU per check is multiplied by the fleet. A
//! task, a channel message and a decoded-then-encoded reply per check cost more than the node's
//! own work on the check. Here a read's plain checks become one [`Node::send_raw`] batch per
//! node (one channel message, one wake-up), the node's replies come back as bytes and are
//! copied to the client as they are; only RL.CHECK's `allowed` and `retry_after_ms` are read,
//! in place, for the blocked cache. What needs the library's full check path (APPROX, SPLIT, a
//! key whose owner is not known yet, a MOVED) goes through [`Client::check`] in a task. A key
//! that fail mode `local` admitted for while its node could not answer has that debt charged
//! (`RL.SETTLE`) ahead of its next check in the same batch, with no reply to the client.
//!
//! # Invariants
//! - Replies leave in request order; a connection waits only on its own batches.
//! - A node that cannot answer in time gives each check its fail mode, within the deadline.
//! - What a client may make the sidecar hold is bounded as on a node: its unparsed input and
//!   its MULTI queue together by `--client-query-buffer-limit`; before AUTH (with
//!   `--requirepass`), requests of 10 arguments of 16 KB and 1 MiB of input at most, as Redis.

use std::ops::Range;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use sluice_client::raw::{error_text, five_ints};
use sluice_client::{CallError, Debt, Limit, Node, Settled, cannot_answer};
use sluice_resp::reply::{self, Proto};
use sluice_resp::value::{self, Value};
use sluice_resp::{Limits, Parser, Request};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;

use crate::Proxy;
use crate::rules::HitPlan;
use crate::session::{self, Session};

/// What to do with a node's reply.
pub enum Then {
    /// A plain RL.CHECK: learn the answer (blocked cache), or the fail mode.
    Check { key: Bytes, check: PlainCheck },
    /// RL.HIT / RL.HITS: the rules' fail modes when the node cannot answer.
    Hits { plan: HitPlan, req: Request },
    /// Forwarded as it is; `-TRYAGAIN` when the node cannot answer.
    Raw { req: Request },
    /// RL.RULE GET: a map for a RESP3 client.
    RuleGet { req: Request },
    /// The sidecar's own `RL.SETTLE` of a key's debt (what fail mode `local` admitted while
    /// the node could not answer), sent ahead of the key's check: no reply to the client.
    Settle { key: Bytes, debt: Debt },
}

/// A plain RL.CHECK's arguments: parsed, or kept as the frame they came in, to be parsed only
/// if the node does not answer (most never need their limit on the sidecar).
pub enum PlainCheck {
    Parsed(Limit, u64),
    Frame(Bytes),
}

impl PlainCheck {
    fn resolve(self, default_mode: sluice_client::FailMode) -> Result<(Limit, u64), String> {
        match self {
            PlainCheck::Parsed(limit, cost) => Ok((limit, cost)),
            PlainCheck::Frame(frame) => {
                let mut buf = BytesMut::from(&frame[..]);
                let req = Parser::new(Limits::default())
                    .parse(&mut buf)
                    .ok()
                    .flatten()
                    .ok_or("ERR internal error: the request cannot be read again")?;
                let (_, limit, cost, _) = crate::parse_rl_check(&req, default_mode)?;
                Ok((limit, cost))
            }
        }
    }
}

enum Item {
    Ready(Range<usize>),
    Node { send: usize, then: Then },
    Task(JoinHandle<BytesMut>),
}

struct Send {
    node: Arc<Node>,
    frames: BytesMut,
    n: usize,
}

/// One read's requests, and what answers each.
#[derive(Default)]
pub struct Batch {
    items: Vec<Item>,
    ready: BytesMut,
    sends: Vec<Send>,
    close: bool,
}

impl Batch {
    /// A reply known now.
    pub fn ready(&mut self, f: impl FnOnce(&mut BytesMut)) {
        let start = self.ready.len();
        f(&mut self.ready);
        self.items.push(Item::Ready(start..self.ready.len()));
    }

    pub fn error(&mut self, msg: &str) {
        self.ready(|out| reply::error(out, msg));
    }

    /// A request for `node`: its frame as it came (or encoded again, if it came inline).
    pub fn upstream(&mut self, node: Arc<Node>, req: &Request, then: Then) {
        let s = self.send_for(node);
        let frames = &mut self.sends[s].frames;
        match req.wire_frame() {
            Some(frame) => frames.extend_from_slice(frame),
            None => encode_args(frames, req.args()),
        }
        self.queued(s, then);
    }

    /// A request of the sidecar's own for `node`, as a frame.
    pub fn upstream_frame(&mut self, node: Arc<Node>, frame: &[u8], then: Then) {
        let s = self.send_for(node);
        self.sends[s].frames.extend_from_slice(frame);
        self.queued(s, then);
    }

    /// The index of `node`'s send in this batch, added if new.
    fn send_for(&mut self, node: Arc<Node>) -> usize {
        match self.sends.iter().position(|s| Arc::ptr_eq(&s.node, &node)) {
            Some(i) => i,
            None => {
                self.sends.push(Send {
                    node,
                    frames: BytesMut::new(),
                    n: 0,
                });
                self.sends.len() - 1
            }
        }
    }

    /// One more request in send `send`, answered by `then`.
    fn queued(&mut self, send: usize, then: Then) {
        self.sends[send].n += 1;
        self.items.push(Item::Node { send, then });
    }

    /// The connection to the node that owns `key`: one already in this batch if it is the
    /// same node (no lookup in the client's node map), else the client's.
    pub fn node_for(&self, client: &sluice_client::Client, key: &[u8]) -> Option<Arc<Node>> {
        let addr = client.owner(key)?;
        match self.sends.iter().find(|s| **s.node.addr() == *addr) {
            Some(s) => Some(s.node.clone()),
            None => client.node_for(key),
        }
    }

    /// A reply that a task makes.
    pub fn task(&mut self, t: JoinHandle<BytesMut>) {
        self.items.push(Item::Task(t));
    }

    /// Stop reading after this batch (QUIT, a framing error, an HTTP request).
    pub fn close(&mut self) {
        self.close = true;
    }

    /// Sends every node its batch, then writes every reply into `out` in request order.
    async fn finish(&mut self, proxy: &Arc<Proxy>, proto: Proto, out: &mut BytesMut) {
        let deadline = proxy.client.deadline();
        let pending: Vec<_> = self
            .sends
            .iter_mut()
            .map(|s| s.node.send_raw(s.frames.split().freeze(), s.n))
            .collect();
        let mut replies = Vec::with_capacity(pending.len());
        for (s, p) in self.sends.iter().zip(pending) {
            replies.push((s.node.wait_raw(p, deadline).await, 0usize));
        }
        for item in self.items.drain(..) {
            match item {
                Item::Ready(r) => out.extend_from_slice(&self.ready[r]),
                Item::Task(t) => match t.await {
                    Ok(b) => out.extend_from_slice(&b),
                    Err(_) => reply::error(out, "ERR internal error"),
                },
                Item::Node { send, then } => {
                    let (result, i) = &mut replies[send];
                    let reply = match result {
                        Ok(batch) => {
                            let start = i.checked_sub(1).map_or(0, |p| batch.ends[p]);
                            let end = batch.ends.get(*i).copied().unwrap_or(start);
                            *i += 1;
                            Ok(batch.bytes.slice(start..end))
                        }
                        Err(e) => Err(*e),
                    };
                    answer(proxy, then, reply, proto, out).await;
                }
            }
        }
        self.ready.clear();
        self.sends.clear();
    }
}

fn encode_args<'a>(out: &mut BytesMut, args: impl ExactSizeIterator<Item = &'a [u8]>) {
    let mut n = itoa::Buffer::new();
    out.extend_from_slice(b"*");
    out.extend_from_slice(n.format(args.len()).as_bytes());
    out.extend_from_slice(b"\r\n");
    for a in args {
        out.extend_from_slice(b"$");
        out.extend_from_slice(n.format(a.len()).as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// One node reply (or none: the node could not answer) to the client.
async fn answer(
    proxy: &Arc<Proxy>,
    then: Then,
    reply: Result<Bytes, CallError>,
    proto: Proto,
    out: &mut BytesMut,
) {
    let client = &proxy.client;
    let err = reply.as_ref().ok().and_then(|r| error_text(r));
    let unavailable = err.is_some_and(cannot_answer);
    let moved = err.is_some_and(|e| e.starts_with("MOVED ") || e.starts_with("ASK "));
    match then {
        Then::Check { key, check } => {
            if let Ok(r) = &reply
                && !unavailable
                && !moved
            {
                // Anything else (WRONGTYPE, a syntax error) is the request's own fault: passed on.
                if let Some(fields) = five_ints(r) {
                    client.learn(&key, fields);
                    proxy.count_one(fields[0] == 1);
                }
                return out.extend_from_slice(r);
            }
            // Parsed only now, when its limit is needed: a MOVED, or the fail mode.
            let (limit, cost) = match check.resolve(proxy.default_mode) {
                Ok(c) => c,
                Err(e) => return reply::error(out, &e),
            };
            let d = if moved {
                match client.check(&key, &limit, cost).await {
                    Ok(d) => d,
                    Err(e) => return reply::error(out, &e.0),
                }
            } else if matches!(reply, Err(CallError::Timeout)) {
                client.fail_mode_late(&key, &limit, cost)
            } else {
                client.fail_mode(&key, &limit, cost, unavailable)
            };
            proxy.count(&d);
            reply::int_array(out, &d.fields());
        }
        Then::Hits { plan, req } => match reply {
            Ok(_) if moved => forward_slowly(proxy, &req, proto, false, out).await,
            Ok(r) if !unavailable => out.extend_from_slice(&r),
            _ => {
                let (d, label) = plan.fail(client, unavailable);
                if plan.multi {
                    reply::array(out, 6);
                    for f in d.fields() {
                        reply::integer(out, f);
                    }
                    reply::bulk(out, &label);
                } else {
                    reply::int_array(out, &d.fields());
                }
            }
        },
        Then::Settle { key, debt } => {
            let how = match &reply {
                Ok(r) => match five_ints(r) {
                    Some(fields) => Settled::Charged(fields),
                    None => Settled::Refused(error_text(r).unwrap_or("ERR unexpected reply")),
                },
                Err(CallError::Timeout) => Settled::Late,
                Err(_) => Settled::Lost,
            };
            client.settled(&key, debt, how);
        }
        Then::Raw { req } | Then::RuleGet { req } if moved => {
            forward_slowly(proxy, &req, proto, true, out).await
        }
        Then::Raw { .. } | Then::RuleGet { .. } if reply.is_err() || unavailable => {
            let why = err.unwrap_or("no reply in time");
            reply::error(out, &format!("TRYAGAIN the node cannot answer now ({why})"))
        }
        Then::Raw { .. } => out.extend_from_slice(&reply.unwrap_or_default()),
        Then::RuleGet { .. } => {
            let mut r = BytesMut::from(&reply.unwrap_or_default()[..]);
            match value::decode(&mut r) {
                Ok(Some(v)) => write_in(&v, proto, true, out),
                _ => reply::error(out, "ERR unexpected reply from the node"),
            }
        }
    }
}

/// Through the library's call path (follows MOVED, one deadline); `-TRYAGAIN` if no node
/// answers. `map`: an RL.RULE GET reply, a map in RESP3.
async fn forward_slowly(
    proxy: &Arc<Proxy>,
    req: &Request,
    proto: Proto,
    map: bool,
    out: &mut BytesMut,
) {
    let args: Vec<&[u8]> = req.args().collect();
    let key = crate::route_key(req);
    match proxy.client.command(&key, &args).await {
        Ok(Value::Error(e)) if !cannot_answer(&e) => reply::error(out, &e),
        Ok(v) if !matches!(&v, Value::Error(_)) => {
            let is_rule_get = map && req.arg(1).is_some_and(|s| s.eq_ignore_ascii_case(b"GET"));
            write_in(&v, proto, is_rule_get, out)
        }
        other => reply::error(
            out,
            &format!("TRYAGAIN the node cannot answer now ({other:?})"),
        ),
    }
}

/// `v` in the client's protocol; `as_map`: a flat array of pairs is a map (RL.RULE GET).
fn write_in(v: &Value, proto: Proto, as_map: bool, out: &mut BytesMut) {
    match (v, proto) {
        (Value::Nil, Proto::Resp3) => out.extend_from_slice(b"_\r\n"),
        (Value::Array(items), Proto::Resp3) if as_map && items.len().is_multiple_of(2) => {
            reply::map(out, proto, items.len() / 2);
            for i in items {
                i.write(out);
            }
        }
        _ => v.write(out),
    }
}

/// A command name in upper case, on the stack (no allocation per request); a name longer than
/// any command is left as it is (it matches nothing, and errors quote the original).
fn upper_name<'a>(name: &'a [u8], buf: &'a mut [u8; 32]) -> &'a [u8] {
    match buf.get_mut(..name.len()) {
        Some(dst) => {
            dst.copy_from_slice(name);
            dst.make_ascii_uppercase();
            dst
        }
        None => name,
    }
}

/// Most commands queued in one MULTI.
const MAX_QUEUED: usize = 10_000;

/// The most requests of one read that run as one batch: their replies are written before the
/// next ones run, so a client that pipelines many requests with large replies and never reads
/// makes the sidecar hold at most this many replies (not one per request it sent).
const MAX_BATCH: usize = 1024;

/// A read or reply buffer grown past this for one large request is given back once empty.
const SPARE_BUFFER: usize = 1024 * 1024;

/// MULTI ... EXEC: the commands queued, each a copy of its own (so the queue holds what it
/// counts), and their bytes.
#[derive(Default)]
struct Queue {
    requests: Vec<Request>,
    bytes: usize,
}

impl Queue {
    fn push(&mut self, req: &Request) {
        let req = req.detached();
        self.bytes = self.bytes.saturating_add(req.footprint());
        self.requests.push(req);
    }
}

/// One request, answered here or put in the batch.
fn request(
    proxy: &Arc<Proxy>,
    name: &[u8],
    req: &Request,
    session: &mut Session,
    batch: &mut Batch,
) {
    let start = batch.ready.len();
    match session::answer(
        name,
        req,
        session,
        proxy.requirepass.as_deref(),
        &mut batch.ready,
    ) {
        session::Local::Done => {
            batch.items.push(Item::Ready(start..batch.ready.len()));
            if name == b"QUIT" {
                batch.close();
            }
        }
        session::Local::NotMine => proxy.dispatch(name, req, session.proto, batch),
    }
}

/// Serves one client until it closes, sends QUIT, or breaks the protocol.
/// The two halves of a TCP or Unix stream; `peer` names the client in log lines.
pub async fn serve<R, W>(
    (mut rd, mut wr): (R, W),
    peer: impl std::fmt::Display,
    proxy: Arc<Proxy>,
    id: u64,
) where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let mut session = Session::new(id, proxy.requirepass.as_deref());
    let mut parser = Parser::new(Limits::default());
    parser.set_unauthenticated(!session.authenticated);
    let mut buf = BytesMut::with_capacity(4096);
    let mut out = BytesMut::with_capacity(4096);
    let mut batch = Batch::default();
    let mut req = Request::default();
    // MULTI ... EXEC: the commands queued, run as one pipeline at EXEC.
    let mut multi: Option<Queue> = None;
    // Whether the last batch stopped at MAX_BATCH with whole requests still in `buf`: then
    // they run before the next read.
    let mut more = false;
    loop {
        if !more {
            match rd.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
        more = false;
        let mut parsed = 0usize;
        // The limits before AUTH follow the session: set for each read (a RESET may have
        // brought them back), lifted below by the request that authenticates.
        if parser.unauthenticated() == session.authenticated {
            parser.set_unauthenticated(!session.authenticated);
        }
        let limit = parser.query_limit(proxy.query_limit);
        let queued = multi.as_ref().map_or(0, |q| q.bytes);
        if buf.len().saturating_add(queued) > limit {
            sluice_log::log(&format!(
                "closing client {peer} (id={id}) that reached the query buffer limit"
            ));
            return;
        }
        loop {
            match parser.parse_into(&mut buf, &mut req) {
                Ok(true) => {
                    let name = req.arg(0).unwrap_or_default();
                    if sluice_resp::is_http_request(name) {
                        sluice_log::log(&format!(
                            "Possible SECURITY ATTACK detected: POST or Host: sent to the sidecar (Cross Protocol Scripting). Connection from {peer} aborted."
                        ));
                        return;
                    }
                    let mut upper = [0u8; 32];
                    let name = upper_name(name, &mut upper);
                    if let Some(queued) = multi.as_mut() {
                        match name {
                            b"EXEC" => {
                                let queued = multi.take().unwrap_or_default().requests;
                                batch.ready(|o| reply::array(o, queued.len()));
                                for q in &queued {
                                    let mut upper = [0u8; 32];
                                    let n = upper_name(q.arg(0).unwrap_or_default(), &mut upper);
                                    request(&proxy, n, q, &mut session, &mut batch);
                                }
                            }
                            b"DISCARD" => {
                                multi = None;
                                batch.ready(|o| reply::simple(o, "OK"));
                            }
                            b"MULTI" => batch.error("ERR MULTI calls can not be nested"),
                            // As Redis: RESET and QUIT leave the transaction, not join it.
                            b"RESET" | b"QUIT" => {
                                multi = None;
                                request(&proxy, name, &req, &mut session, &mut batch);
                            }
                            _ if queued.requests.len() >= MAX_QUEUED => {
                                multi = None;
                                batch.error("EXECABORT Transaction discarded: more than 10000 commands queued.");
                            }
                            _ => {
                                queued.push(&req);
                                batch.ready(|o| reply::simple(o, "QUEUED"));
                            }
                        }
                    } else {
                        match name {
                            b"MULTI" if session.authenticated => {
                                multi = Some(Queue::default());
                                batch.ready(|o| reply::simple(o, "OK"));
                            }
                            b"EXEC" if session.authenticated => {
                                batch.error("ERR EXEC without MULTI")
                            }
                            b"DISCARD" if session.authenticated => {
                                batch.error("ERR DISCARD without MULTI")
                            }
                            _ => request(&proxy, name, &req, &mut session, &mut batch),
                        }
                    }
                    if parser.unauthenticated() && session.authenticated {
                        parser.set_unauthenticated(false);
                    }
                    if batch.close {
                        break;
                    }
                    parsed += 1;
                    if parsed == MAX_BATCH {
                        more = !buf.is_empty();
                        break;
                    }
                }
                Ok(false) => break,
                Err(e) => {
                    batch.ready(|o| e.write_reply(o));
                    batch.close();
                    break;
                }
            }
        }
        batch.finish(&proxy, session.proto, &mut out).await;
        if wr.write_all(&out).await.is_err() || batch.close {
            return;
        }
        // A large reply or request once is not held for the connection's life.
        if out.capacity() > SPARE_BUFFER {
            out = BytesMut::with_capacity(4096);
        } else {
            out.clear();
        }
        if buf.is_empty() && buf.capacity() > SPARE_BUFFER {
            buf = BytesMut::with_capacity(4096);
        }
    }
}
