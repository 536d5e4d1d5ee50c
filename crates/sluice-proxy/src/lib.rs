//! # sluice-proxy — `sluice proxy`, the gateway sidecar: a RESP front on [`sluice_client`].
//!
//! A gateway in any language talks to the sidecar on localhost as if it were one Sluice node; the
//! sidecar routes to the cluster (or the Sentinel's primary) and applies the gateway options:
//! fail mode, blocked cache, key splitting, approximate counting.
//!
//! # Format
//! ```text
//! sluice proxy [--port 6390] (--upstream HOST:PORT[,...] | --sentinel HOST:PORT[,...] --master-name NAME)
//!              [--bind 127.0.0.1] [--timeout-ms 20] [--gateways N] [--fail-mode open|closed|local]
//! ```
//! One upstream is a single node; several are the seeds of a cluster. Commands: `RL.CHECK` (with
//! `FAILMODE open|closed|local`, `SPLIT k`, `APPROX ms`, stripped before forwarding),
//! `CL.THROTTLE` and `GCRA` (forwarded as they are), `RL.WHERE key`, `PING`, `ECHO`, `INFO`,
//! `CLIENT`, `COMMAND`, `CONFIG GET`, `HELLO 2`, `SELECT 0`, `QUIT`. Anything else is an error
//! naming the sidecar's commands.
//!
//! Why a crate of its own and not part of `sluice-client`: it is a program (a subcommand of the
//! `sluice` binary) where the library is not; it reuses the node's request parser and reply
//! encoders (`sluice-resp`) and RL.CHECK's own argument grammar (`sluice_core::spec`), and keeps
//! clap out of the library.
//!
//! # Invariants
//! - Each client connection is served by its own task, and each upstream call by its own task:
//!   a slow upstream delays only the replies queued behind it on the same connection (RESP
//!   order), never another client.
//! - The sidecar runs on one thread (a current-thread runtime): a sidecar is one per gateway
//!   host, and its CPU per check is what it costs.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::BytesMut;
use sluice_client::{Client, Config, FailMode, Limit, Source, Topology};
use sluice_resp::{Limits, Parser, Request, reply};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use sluice_core::spec::{CheckArgs, SpecError};

/// `sluice proxy` flags.
#[derive(clap::Args, Debug, Clone)]
pub struct ProxyConfig {
    /// Port to listen on (0: any free port; the ready line names it). 6390, clear of a node's
    /// 6379 and the 6380 a local replica often takes.
    #[arg(long, default_value_t = 6390)]
    pub port: u16,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: String,
    /// One node, or the seed nodes of a cluster, as HOST:PORT[,HOST:PORT...].
    #[arg(long, value_delimiter = ',', conflicts_with = "sentinel")]
    pub upstream: Vec<String>,
    /// Sentinels to ask for the primary, as HOST:PORT[,...] (with --master-name).
    #[arg(long, value_delimiter = ',', requires = "master_name")]
    pub sentinel: Vec<String>,
    /// The primary's name in Sentinel.
    #[arg(long)]
    pub master_name: Option<String>,
    /// Deadline of one check, in milliseconds.
    #[arg(long, default_value_t = 20)]
    pub timeout_ms: u64,
    /// Gateways sharing the limits (fail mode local allows limit ÷ gateways here).
    #[arg(long, default_value_t = 1)]
    pub gateways: u32,
    /// Fail mode of RL.CHECK without FAILMODE.
    #[arg(long, default_value = "open", value_parser = ["open", "closed", "local"])]
    pub fail_mode: String,
    /// Most keys held in each local map (local buckets, blocked cache, approximate counters).
    #[arg(long, default_value_t = 100_000)]
    pub max_local_keys: usize,
}

impl ProxyConfig {
    fn client_config(&self) -> Result<Config, String> {
        let topology =
            match (&self.upstream[..], &self.sentinel[..], &self.master_name) {
                ([one], [], _) => Topology::Single(one.clone()),
                (seeds @ [_, _, ..], [], _) => Topology::Cluster(seeds.to_vec()),
                ([], sentinels @ [_, ..], Some(name)) => Topology::Sentinel {
                    sentinels: sentinels.to_vec(),
                    master_name: name.clone(),
                },
                _ => return Err(
                    "give --upstream HOST:PORT[,...] or --sentinel HOST:PORT --master-name NAME"
                        .into(),
                ),
            };
        let mut c = Config::new(topology);
        c.deadline = Duration::from_millis(self.timeout_ms.max(1));
        c.gateways = self.gateways.max(1);
        c.max_local_keys = self.max_local_keys;
        Ok(c)
    }
}

/// Runs `sluice proxy` with these flags until SIGTERM or SIGINT; returns the exit code.
pub fn main(config: ProxyConfig) -> i32 {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            sluice_log::log(&format!("fatal: {e}"));
            return 1;
        }
    };
    match runtime.block_on(run(config)) {
        Ok(()) => 0,
        Err(e) => {
            sluice_log::log(&format!("fatal: {e}"));
            1
        }
    }
}

/// Runs the sidecar until SIGTERM or SIGINT.
pub async fn run(config: ProxyConfig) -> Result<(), String> {
    use tokio::signal::unix::{SignalKind, signal};
    sluice_log::set_role(b'P');
    let client_config = config.client_config()?;
    let default_mode = FailMode::parse(config.fail_mode.as_bytes()).unwrap_or_default();
    let listener = TcpListener::bind((config.bind.as_str(), config.port))
        .await
        .map_err(|e| format!("cannot listen on {}:{}: {e}", config.bind, config.port))?;
    let client = Client::connect(client_config).await;
    let state = Arc::new(Proxy {
        client,
        default_mode,
        allowed: AtomicU64::new(0),
        denied: AtomicU64::new(0),
    });
    let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    sluice_log::log(&format!(
        "Sluice proxy ready to accept connections on {local} (upstream {}, timeout {} ms, gateways {}, fail mode {})",
        state.client.config().topology,
        config.timeout_ms,
        config.gateways,
        default_mode.name()
    ));
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                if let Ok((stream, peer)) = accepted {
                    let _ = stream.set_nodelay(true);
                    tokio::spawn(serve(stream, peer, state.clone()));
                }
            }
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
    }
    sluice_log::log("proxy shutting down");
    Ok(())
}

#[derive(Debug)]
struct Proxy {
    client: Client,
    default_mode: FailMode,
    /// RL.CHECK answers (not DRY) that allowed and that denied, whatever their source.
    allowed: AtomicU64,
    denied: AtomicU64,
}

/// A reply, ready now or from an upstream call.
enum Pending {
    Ready(BytesMut),
    Upstream(JoinHandle<BytesMut>),
}

/// Serves one client: the reader parses and starts each request; the writer sends the replies
/// in request order, as many as are ready in one write.
async fn serve(stream: TcpStream, peer: std::net::SocketAddr, proxy: Arc<Proxy>) {
    let (mut rd, mut wr) = stream.into_split();
    let (tx, mut rx) = mpsc::unbounded_channel::<Pending>();
    let writer = tokio::spawn(async move {
        let mut out = BytesMut::with_capacity(4096);
        while let Some(first) = rx.recv().await {
            let mut next = Some(first);
            while let Some(p) = next.take() {
                match p {
                    Pending::Ready(b) => out.extend_from_slice(&b),
                    Pending::Upstream(h) => match h.await {
                        Ok(b) => out.extend_from_slice(&b),
                        Err(_) => reply::error(&mut out, "ERR internal error"),
                    },
                }
                next = rx.try_recv().ok();
            }
            if wr.write_all(&out).await.is_err() {
                return;
            }
            out.clear();
        }
    });
    let mut parser = Parser::new(Limits::default());
    let mut buf = BytesMut::with_capacity(4096);
    'conn: loop {
        match rd.read_buf(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        loop {
            match parser.parse(&mut buf) {
                Ok(Some(req)) => {
                    let name = req.arg(0).unwrap_or_default();
                    if sluice_resp::is_http_request(name) {
                        sluice_log::log(&format!(
                            "Possible SECURITY ATTACK detected: POST or Host: sent to the sidecar (Cross Protocol Scripting). Connection from {peer} aborted."
                        ));
                        break 'conn;
                    }
                    let quit = name.eq_ignore_ascii_case(b"QUIT");
                    if tx.send(proxy.clone().handle(req)).is_err() || quit {
                        break 'conn;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    let mut out = BytesMut::new();
                    e.write_reply(&mut out);
                    let _ = tx.send(Pending::Ready(out));
                    break 'conn;
                }
            }
        }
    }
    drop(tx);
    let _ = writer.await;
}

fn error(msg: &str) -> Pending {
    let mut out = BytesMut::new();
    reply::error(&mut out, msg);
    Pending::Ready(out)
}

fn ready(f: impl FnOnce(&mut BytesMut)) -> Pending {
    let mut out = BytesMut::new();
    f(&mut out);
    Pending::Ready(out)
}

const NOT_A_PROXY: &str = "this is sluice proxy, a rate-limit sidecar, not a general Redis proxy: it answers RL.CHECK, CL.THROTTLE, GCRA, RL.WHERE, PING, ECHO, INFO, CLIENT, COMMAND, CONFIG GET, HELLO, SELECT 0 and QUIT";

impl Proxy {
    fn handle(self: Arc<Self>, req: Request) -> Pending {
        let name = req.arg(0).unwrap_or_default().to_ascii_uppercase();
        let argc = req.len();
        match name.as_slice() {
            b"RL.CHECK" => self.rl_check(req),
            b"CL.THROTTLE" | b"GCRA" => {
                let Some(key) = req.arg_bytes(1) else {
                    return error(&format!(
                        "ERR wrong number of arguments for '{}' command",
                        String::from_utf8_lossy(&name).to_lowercase()
                    ));
                };
                Pending::Upstream(tokio::spawn(async move {
                    let args: Vec<&[u8]> = req.args().collect();
                    let mut out = BytesMut::new();
                    match self.client.command(&key, &args).await {
                        Ok(v) => v.write(&mut out),
                        Err(e) => reply::error(
                            &mut out,
                            &format!(
                                "TRYAGAIN upstream unavailable ({e:?}); fail modes apply to RL.CHECK only"
                            ),
                        ),
                    }
                    out
                }))
            }
            b"RL.WHERE" if argc == 2 => {
                let owner = self.client.owner(req.arg(1).unwrap_or_default());
                ready(|out| match owner {
                    Some(a) => reply::bulk(out, a.as_bytes()),
                    None => reply::null(out, reply::Proto::Resp2),
                })
            }
            b"PING" if argc <= 2 => ready(|out| match req.arg(1) {
                Some(m) => reply::bulk(out, m),
                None => reply::simple(out, "PONG"),
            }),
            b"ECHO" if argc == 2 => ready(|out| reply::bulk(out, req.arg(1).unwrap_or_default())),
            b"INFO" => ready(|out| reply::bulk(out, self.info().as_bytes())),
            b"QUIT" => ready(|out| reply::simple(out, "OK")),
            b"SELECT" if argc == 2 && req.arg(1) == Some(b"0") => {
                ready(|out| reply::simple(out, "OK"))
            }
            b"HELLO" => match req.arg(1) {
                None | Some(b"2") => ready(|out| {
                    reply::array(out, 14);
                    for (k, v) in [
                        ("server", "sluice-proxy"),
                        ("version", env!("CARGO_PKG_VERSION")),
                    ] {
                        reply::bulk(out, k.as_bytes());
                        reply::bulk(out, v.as_bytes());
                    }
                    reply::bulk(out, b"proto");
                    reply::integer(out, 2);
                    reply::bulk(out, b"id");
                    reply::integer(out, 1);
                    for (k, v) in [("mode", "standalone"), ("role", "master")] {
                        reply::bulk(out, k.as_bytes());
                        reply::bulk(out, v.as_bytes());
                    }
                    reply::bulk(out, b"modules");
                    reply::array(out, 0);
                }),
                Some(_) => error("NOPROTO sluice proxy speaks RESP2 only"),
            },
            b"CLIENT" => {
                let sub = req.arg(1).unwrap_or_default().to_ascii_uppercase();
                match sub.as_slice() {
                    b"SETNAME" | b"SETINFO" | b"NO-EVICT" | b"NO-TOUCH" | b"REPLY" => {
                        ready(|out| reply::simple(out, "OK"))
                    }
                    b"GETNAME" => ready(|out| reply::null(out, reply::Proto::Resp2)),
                    b"ID" => ready(|out| reply::integer(out, 1)),
                    _ => error(
                        "ERR sluice proxy answers CLIENT SETNAME, SETINFO, GETNAME and ID only",
                    ),
                }
            }
            b"COMMAND" => {
                let sub = req.arg(1).unwrap_or_default().to_ascii_uppercase();
                match sub.as_slice() {
                    b"COUNT" => ready(|out| reply::integer(out, 0)),
                    _ => ready(|out| reply::array(out, 0)),
                }
            }
            b"CONFIG" if req.arg(1).is_some_and(|s| s.eq_ignore_ascii_case(b"GET")) => {
                // What redis-benchmark asks at start; nothing else is configurable here.
                let wanted = req.arg(2).unwrap_or_default().to_ascii_lowercase();
                ready(|out| match wanted.as_slice() {
                    b"save" | b"appendonly" => {
                        reply::array(out, 2);
                        reply::bulk(out, &wanted);
                        reply::bulk(out, if wanted == b"save" { b"" } else { b"no" });
                    }
                    _ => reply::array(out, 0),
                })
            }
            _ => error(&format!(
                "ERR unknown command '{}': {NOT_A_PROXY}",
                String::from_utf8_lossy(req.arg(0).unwrap_or_default())
            )),
        }
    }

    /// `RL.CHECK key limit period [BURST n] [COST n] [ALGO a] [DRY] [FAILMODE m] [SPLIT k]
    /// [APPROX ms]`: the gateway options are taken here and stripped; `DRY` goes to the node as
    /// is (it changes nothing, so no gateway option applies to it).
    fn rl_check(self: Arc<Self>, req: Request) -> Pending {
        let parsed = match parse_rl_check(&req, self.default_mode) {
            Ok(p) => p,
            Err(e) => return error(&e),
        };
        Pending::Upstream(tokio::spawn(async move {
            let mut out = BytesMut::new();
            let (key, limit, cost, dry) = parsed;
            if dry {
                let mut args: Vec<&[u8]> = vec![b"RL.CHECK"];
                args.extend(req.args_from(1).take(3));
                let (l, p, c) = (
                    limit.burst.map(|b| b.to_string()),
                    limit.algo.name(),
                    cost.to_string(),
                );
                if let Some(b) = &l {
                    args.extend([&b"BURST"[..], b.as_bytes()]);
                }
                args.extend([&b"COST"[..], c.as_bytes(), b"ALGO", p.as_bytes(), b"DRY"]);
                match self.client.command(&key, &args).await {
                    Ok(v) => v.write(&mut out),
                    Err(e) => {
                        reply::error(&mut out, &format!("TRYAGAIN upstream unavailable ({e:?})"))
                    }
                }
                return out;
            }
            match self.client.check(&key, &limit, cost).await {
                Ok(d) => {
                    let counter = if d.allowed {
                        &self.allowed
                    } else {
                        &self.denied
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                    reply::int_array(&mut out, &d.fields())
                }
                Err(e) => reply::error(&mut out, &e.0),
            }
            out
        }))
    }

    fn info(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::from("# Proxy\r\n");
        let c = &self.client;
        let _ = write!(
            s,
            "proxy_version:{}\r\ntopology:{:?}\r\ndeadline_ms:{}\r\ngateways:{}\r\ndefault_fail_mode:{}\r\n",
            env!("CARGO_PKG_VERSION"),
            c.config().topology,
            c.config().deadline.as_millis(),
            c.config().gateways,
            self.default_mode.name()
        );
        s.push_str("\r\n# Upstreams\r\n");
        for (i, u) in c.upstreams().iter().enumerate() {
            let _ = write!(
                s,
                "upstream{i}:addr={},breaker={},answered={},failed={}\r\n",
                u.addr,
                u.breaker.name(),
                u.answered,
                u.failed
            );
        }
        s.push_str("\r\n# Decisions\r\n");
        for (name, n) in Source::NAMES.iter().zip(c.decisions()) {
            let _ = write!(s, "decisions_{name}:{n}\r\n");
        }
        let (local, blocked, approx) = c.local_keys();
        let _ = write!(
            s,
            "checks_allowed:{}\r\nchecks_denied:{}\r\nnode_calls:{}\r\nlocal_buckets:{local}\r\nblocked_keys:{blocked}\r\napprox_keys:{approx}\r\n",
            self.allowed.load(Ordering::Relaxed),
            self.denied.load(Ordering::Relaxed),
            c.node_calls()
        );
        s
    }
}

type Parsed = (bytes::Bytes, Limit, u64, bool);

fn parse_rl_check(req: &Request, default_mode: FailMode) -> Result<Parsed, String> {
    let err = |e: SpecError| format!("ERR {e}");
    let key = req.arg_bytes(1).ok_or_else(|| err(SpecError::Arity))?;
    let spec = CheckArgs::parse(req.args_from(2)).map_err(err)?;
    spec.params().map_err(err)?;
    if spec.period.0 % 1_000_000 != 0 {
        return Err("ERR period must be whole milliseconds".into());
    }
    let mut limit = Limit::new(spec.limit, Duration::from_nanos(spec.period.0))
        .algo(spec.algo)
        .fail_mode(spec.fail_mode.unwrap_or(default_mode));
    limit.burst = spec.burst;
    if let Some(k) = spec.split {
        limit = limit.split(u32::try_from(k).map_err(|_| "ERR SPLIT is too large")?);
    }
    if let Some(ms) = spec.approx_ms {
        limit = limit.approximate(Duration::from_millis(ms), 0);
    }
    Ok((key, limit, spec.cost, spec.dry))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Parsed, String> {
        parse_rl_check(&Request::from_args(args), FailMode::Open)
    }

    #[test]
    fn gateway_options_are_taken_and_validated() {
        let (key, l, cost, dry) = parse(&[
            "RL.CHECK", "k", "100", "1m", "BURST", "150", "COST", "3", "FAILMODE", "local",
            "SPLIT", "4", "APPROX", "50",
        ])
        .unwrap();
        assert_eq!(&key[..], b"k");
        assert_eq!((l.limit, l.burst, cost, dry), (100, Some(150), 3, false));
        assert_eq!(l.period, Duration::from_secs(60));
        assert_eq!(l.fail_mode, FailMode::Local);
        assert_eq!(l.split, 4);
        assert_eq!(l.approximate.unwrap().sync_every, Duration::from_millis(50));
        assert!(parse(&["RL.CHECK", "k", "10", "1s", "DRY"]).unwrap().3);
        for bad in [
            &["RL.CHECK", "k", "10", "1s", "FAILMODE", "maybe"][..],
            &["RL.CHECK", "k", "10", "1s", "SPLIT", "0"],
            &["RL.CHECK", "k", "10", "1s", "SPLIT", "11"],
            &["RL.CHECK", "k", "10", "1s", "BURST", "5", "SPLIT", "6"],
            &["RL.CHECK", "k", "10", "1s", "APPROX"],
            &["RL.CHECK", "k", "0", "1s"],
            &["RL.CHECK", "k", "10", "1x"],
            &["RL.CHECK", "k", "10", "1s", "COST", "11"],
            &["RL.CHECK", "k", "10", "1s", "NOPE"],
        ] {
            assert!(parse(bad).unwrap_err().starts_with("ERR"), "{bad:?}");
        }
    }
}
