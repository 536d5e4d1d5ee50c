//! An in-process executor: run commands against a full server state without a socket.
//!
//! Tests (and fuzz targets) call `exec(&["RL.CHECK", "k", "5", "10"])` and get the raw RESP reply
//! bytes, with time moved by hand through `exec_at`. It goes through the same command table,
//! argument parsing and store as the network path; only the connection loop is left out.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use sluice_core::Nanos;

use crate::cmd::{self, Ctx, Session};
use crate::config::Config;
use crate::shared::Shared;

/// A server state and one client session on it.
#[derive(Debug)]
pub struct Executor {
    pub shared: Arc<Shared>,
    session: Session,
    out: BytesMut,
}

impl Executor {
    pub fn new(config: Config) -> Executor {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let shared = Arc::new(
            Shared::new(
                config,
                addr,
                crate::cmd::STATS_ROWS,
                crate::cmd::acl_catalog(),
            )
            .expect("in-process state"),
        );
        let client = shared.clients.register(addr, addr);
        let session = Session::new(client, shared.acl.default_user());
        Executor {
            shared,
            session,
            out: BytesMut::new(),
        }
    }

    /// Runs one command at the server clock's now; returns its RESP reply.
    pub fn exec(&mut self, args: &[&[u8]]) -> Bytes {
        let now = self.shared.clock.now();
        self.exec_at(now, args)
    }

    /// [`Executor::exec_at`] with text arguments at `now_ms`, the reply as text: what tests
    /// compare with what redis-server answers.
    pub fn text_at(&mut self, now_ms: u64, args: &[&str]) -> String {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        String::from_utf8_lossy(&self.exec_at(Nanos::from_millis(now_ms), &args)).into_owned()
    }

    /// Runs one command as if the clock read `now`.
    pub fn exec_at(&mut self, now: Nanos, args: &[&[u8]]) -> Bytes {
        let request = sluice_resp::Request::from_args(args);
        let mut ctx = Ctx {
            shared: &self.shared,
            session: &mut self.session,
            out: &mut self.out,
            now,
            ahead: sluice_store::Ahead::NONE,
        };
        let started = std::time::Instant::now();
        cmd::execute(request.view(), &mut ctx);
        let slot = self.shared.stats.slot(self.session.thread);
        self.session.batch.charge(slot, started.elapsed());
        self.out.split().freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exec(e: &mut Executor, now_ms: u64, args: &[&str]) -> String {
        e.text_at(now_ms, args)
    }

    #[test]
    fn time_moved_by_hand_refills_the_bucket() {
        let mut e = Executor::new(Config::default_for_tests());
        let t0 = 1_000_000_000;
        for _ in 0..5 {
            assert!(exec(&mut e, t0, &["RL.CHECK", "k", "5", "10"]).starts_with("*5\r\n:1\r\n"));
        }
        assert_eq!(
            exec(&mut e, t0, &["RL.CHECK", "k", "5", "10"]),
            "*5\r\n:0\r\n:5\r\n:0\r\n:2000\r\n:10000\r\n"
        );
        // 2 s later exactly one unit is back.
        assert_eq!(
            exec(&mut e, t0 + 2000, &["RL.CHECK", "k", "5", "10"]),
            "*5\r\n:1\r\n:5\r\n:0\r\n:-1\r\n:10000\r\n"
        );
        // 10 s after that the key is fresh and gone.
        assert_eq!(exec(&mut e, t0 + 12_000, &["EXISTS", "k"]), ":0\r\n");
    }

    #[test]
    fn multi_exec_queues_then_answers_every_reply() {
        let mut e = Executor::new(Config::default_for_tests());
        let t0 = 1_000_000_000;
        assert_eq!(exec(&mut e, t0, &["MULTI"]), "+OK\r\n");
        assert_eq!(exec(&mut e, t0, &["INCR", "n"]), "+QUEUED\r\n");
        assert_eq!(
            exec(&mut e, t0, &["RL.CHECK", "k", "2", "10"]),
            "+QUEUED\r\n"
        );
        assert_eq!(
            exec(&mut e, t0, &["MULTI"]),
            "-ERR MULTI calls can not be nested\r\n"
        );
        assert_eq!(
            exec(&mut e, t0, &["EXEC"]),
            "*2\r\n:1\r\n*5\r\n:1\r\n:2\r\n:1\r\n:-1\r\n:5000\r\n"
        );
        assert_eq!(exec(&mut e, t0, &["EXEC"]), "-ERR EXEC without MULTI\r\n");
        // A refused command aborts the whole block; nothing in it runs.
        exec(&mut e, t0, &["MULTI"]);
        exec(&mut e, t0, &["INCR", "n"]);
        assert!(exec(&mut e, t0, &["GET"]).starts_with("-ERR wrong number"));
        assert!(exec(&mut e, t0, &["EXEC"]).starts_with("-EXECABORT"));
        assert_eq!(exec(&mut e, t0, &["GET", "n"]), "$1\r\n1\r\n");
        exec(&mut e, t0, &["MULTI"]);
        exec(&mut e, t0, &["INCR", "n"]);
        assert_eq!(exec(&mut e, t0, &["DISCARD"]), "+OK\r\n");
        // Commands whose replies would break EXEC's count are refused when queued (found by
        // the fuzzer: a queued REPLCONF ACK answered nothing).
        for refused in [
            &["SHUTDOWN"][..],
            &["REPLCONF", "ACK", "0"],
            &["SUBSCRIBE", "a", "b"],
            &["PSYNC", "?", "-1"],
        ] {
            exec(&mut e, t0, &["MULTI"]);
            assert_eq!(
                exec(&mut e, t0, refused),
                "-ERR Command not allowed inside a transaction\r\n",
                "{refused:?}"
            );
            assert!(exec(&mut e, t0, &["EXEC"]).starts_with("-EXECABORT"));
        }
        assert_eq!(exec(&mut e, t0, &["GET", "n"]), "$1\r\n1\r\n");
    }

    #[test]
    fn errors_do_not_touch_state() {
        let mut e = Executor::new(Config::default_for_tests());
        let t0 = 1_000_000_000;
        exec(&mut e, t0, &["RL.CHECK", "k", "5", "10"]);
        let err = exec(&mut e, t0, &["RL.CHECK", "k", "5", "10", "COST", "9"]);
        assert!(err.starts_with("-ERR COST 9"), "{err}");
        assert_eq!(
            exec(&mut e, t0, &["RL.CHECK", "k", "5", "10", "DRY"]),
            "*5\r\n:1\r\n:5\r\n:3\r\n:-1\r\n:4000\r\n"
        );
    }

    #[test]
    fn commandstats_count_calls_failures_and_rejections_until_resetstat() {
        let mut e = Executor::new(Config::default_for_tests());
        let t0 = 1_000_000_000;
        for _ in 0..3 {
            exec(&mut e, t0, &["RL.CHECK", "k", "5", "10"]);
        }
        // A bad argument fails inside the command; a wrong arity is rejected before it.
        assert!(exec(&mut e, t0, &["RL.CHECK", "k", "0", "10"]).starts_with("-ERR"));
        assert!(exec(&mut e, t0, &["RL.CHECK", "k"]).starts_with("-ERR wrong number"));
        let info = exec(&mut e, t0, &["INFO", "commandstats"]);
        let line = info
            .lines()
            .find(|l| l.starts_with("cmdstat_rl.check:"))
            .unwrap_or_else(|| panic!("no rl.check line in {info}"));
        assert!(line.starts_with("cmdstat_rl.check:calls=4,usec="), "{line}");
        assert!(line.ends_with(",rejected_calls=1,failed_calls=1"), "{line}");
        let latency = exec(&mut e, t0, &["INFO", "latencystats"]);
        assert!(
            latency.contains("latency_percentiles_usec_rl.check:p50="),
            "{latency}"
        );
        // Neither is in the default INFO, as in Redis.
        assert!(!exec(&mut e, t0, &["INFO"]).contains("cmdstat_"));
        assert!(exec(&mut e, t0, &["INFO", "all"]).contains("cmdstat_info:"));
        assert_eq!(exec(&mut e, t0, &["CONFIG", "RESETSTAT"]), "+OK\r\n");
        let info = exec(&mut e, t0, &["INFO", "commandstats"]);
        assert!(!info.contains("cmdstat_rl.check"), "{info}");
        assert!(info.contains("cmdstat_config:calls=1,"), "{info}");
    }

    /// Issue 24's holes that a command alone opens, each refused without a change.
    #[test]
    fn hostile_arguments_are_refused_and_change_nothing() {
        let mut e = Executor::new(Config::default_for_tests());
        let t0 = 1_000_000_000;
        // CONFIG SET validates every pair before it applies any, and refuses a name twice.
        let get = |e: &mut Executor, name: &str| exec(e, t0, &["CONFIG", "GET", name]);
        let before = (get(&mut e, "maxclients"), get(&mut e, "timeout"));
        let r = exec(
            &mut e,
            t0,
            &["CONFIG", "SET", "maxclients", "5", "timeout", "soon"],
        );
        assert!(r.contains("argument 'timeout'"), "{r}");
        let r = exec(
            &mut e,
            t0,
            &["CONFIG", "SET", "timeout", "1", "TIMEOUT", "2"],
        );
        assert!(r.contains("duplicate parameter"), "{r}");
        assert_eq!((get(&mut e, "maxclients"), get(&mut e, "timeout")), before);
        // A timeout past Redis's INT_MAX would overflow the connection's idle deadline.
        for huge in ["2147483648", "9223372036854775807", "18446744073709551615"] {
            let r = exec(&mut e, t0, &["CONFIG", "SET", "timeout", huge]);
            assert!(r.starts_with("-ERR CONFIG SET failed"), "{huge}: {r}");
        }
        assert_eq!(get(&mut e, "timeout"), before.1);
        let r = exec(
            &mut e,
            t0,
            &["CONFIG", "SET", "timeout", "2147483647", "maxclients", "5"],
        );
        assert_eq!(r, "+OK\r\n");
        assert!(get(&mut e, "maxclients").ends_with("$1\r\n5\r\n"));
        // CLUSTER PAUSE is bounded by the admin tool's own pause.
        let r = exec(&mut e, t0, &["CLUSTER", "PAUSE", "10001", "0-16383"]);
        assert!(r.contains("at most 10000 ms"), "{r}");
        // SPLIT needs a unit of the limit (and BURST) per sub-key.
        let r = exec(&mut e, t0, &["RL.CHECK", "k", "10", "1m", "SPLIT", "1000"]);
        assert!(
            r.starts_with("-ERR SPLIT 1000 is more than the limit 10"),
            "{r}"
        );
        let r = exec(
            &mut e,
            t0,
            &["RL.CHECK", "k", "10", "1m", "BURST", "4", "SPLIT", "5"],
        );
        assert!(
            r.starts_with("-ERR SPLIT 5 is more than the BURST 4"),
            "{r}"
        );
        assert!(exec(&mut e, t0, &["RL.CHECK", "k", "10", "1m", "SPLIT", "10"]).starts_with("*5"));
        // A window's state spans two periods: its error names the window's own bound.
        let r = exec(
            &mut e,
            t0,
            &["RL.CHECK", "w", "5", "27000d", "ALGO", "SLIDING"],
        );
        assert_eq!(
            r,
            "-ERR period too long: a window may span at most 73 years\r\n"
        );
        assert!(
            exec(
                &mut e,
                t0,
                &["RL.CHECK", "w", "5", "26000d", "ALGO", "FIXED"]
            )
            .starts_with("*5")
        );
        // Too large to count in nanoseconds: the accurate error, not "must be a positive number".
        let r = exec(&mut e, t0, &["RL.CHECK", "p", "5", "99999999999"]);
        assert_eq!(
            r,
            "-ERR period too long: it would span more than 146 years\r\n"
        );
        assert_eq!(exec(&mut e, t0, &["DBSIZE"]), ":2\r\n");
    }

    #[test]
    fn replies_that_grow_with_the_request_are_bounded() {
        let mut e = Executor::new(Config::default_for_tests());
        let t0 = 1_000_000_000;
        // COMMAND DOCS is a map: a name given many times is one entry.
        let mut args = vec!["COMMAND", "DOCS"];
        args.extend(std::iter::repeat_n("get", 1000));
        assert!(exec(&mut e, t0, &args).starts_with("*2\r\n$3\r\nget\r\n"));
        // CLIENT KILL keeps the last filter of each kind, as Redis does.
        let me = exec(&mut e, t0, &["CLIENT", "ID"]);
        let me = me.trim_start_matches(':').trim_end();
        let r = exec(
            &mut e,
            t0,
            &["CLIENT", "KILL", "ID", me, "ID", "999999", "SKIPME", "no"],
        );
        assert_eq!(r, ":0\r\n");
    }

    #[test]
    fn hello_says_the_role_it_has() {
        let mut e = Executor::new(Config::default_for_tests());
        let t0 = 1_000_000_000;
        let hello = exec(&mut e, t0, &["HELLO", "3"]);
        assert!(
            hello.contains("$4\r\nmode\r\n$10\r\nstandalone\r\n"),
            "{hello}"
        );
        assert!(hello.contains("$4\r\nrole\r\n$6\r\nmaster\r\n"), "{hello}");
        assert_eq!(
            exec(&mut e, t0, &["REPLICAOF", "127.0.0.1", "1"]),
            "+OK\r\n"
        );
        let hello = exec(&mut e, t0, &["HELLO", "3"]);
        assert!(hello.contains("$4\r\nrole\r\n$7\r\nreplica\r\n"), "{hello}");
    }
}
