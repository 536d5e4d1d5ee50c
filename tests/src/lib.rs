//! # sluice-tests — the end-to-end harness
//!
//! Starts the real `sluice` binary on a free loopback port (`--port 0`; the port is read from
//! the server's ready line), hands out real clients (the `redis` crate, raw sockets, `redis-cli`,
//! `redis-benchmark`) and stops the process by its PID when dropped.
//!
//! The binary is `target/<profile>/sluice`, built by `cargo test --workspace` (the `sluice` crate's
//! own integration test makes cargo build it first); `SLUICE_BIN` overrides the path.

pub mod resp;
pub mod tls;

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

/// A running `sluice` process, stopped on drop.
#[derive(Debug)]
pub struct Sluice {
    child: Child,
    pub port: u16,
    log: Arc<Mutex<String>>,
}

/// Runs `sluice FILE` with `text` written to `dir/name` as its config file, to a refusal:
/// its exit code and stderr.
pub fn refused_config(dir: &TempDir, name: &str, text: &str) -> (Option<i32>, String) {
    let conf = dir.path().join(name);
    std::fs::write(&conf, text).unwrap();
    let out = std::process::Command::new(binary())
        .arg(&conf)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Path of the `sluice` binary under test.
pub fn binary() -> PathBuf {
    if let Some(p) = std::env::var_os("SLUICE_BIN") {
        return PathBuf::from(p);
    }
    // Test executables live in target/<profile>/deps; the binary one level up.
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir");
    let bin = dir.join("sluice");
    assert!(
        bin.exists(),
        "{} not found: run the suite with `cargo test --workspace` (or set SLUICE_BIN)",
        bin.display()
    );
    bin
}

/// `--io LOOP` when `SLUICE_TEST_IO` names a connection loop (`uring`, `epoll`): the suite, or
/// a part of it, runs against that loop (flags a test gives come after, and win).
fn io_loop() -> Vec<String> {
    match std::env::var("SLUICE_TEST_IO") {
        Ok(name) if !name.is_empty() => vec!["--io".into(), name],
        _ => Vec::new(),
    }
}

impl Sluice {
    /// Starts a server with default settings on a free port.
    pub fn start() -> Sluice {
        Sluice::start_with(&[])
    }

    /// Starts a server with extra flags (`--port 0 --bind 127.0.0.1` come first).
    pub fn start_with(args: &[&str]) -> Sluice {
        Sluice::start_on(0, args)
    }

    /// Starts a server on `port` (0: a free one) with extra flags (`--port PORT --bind
    /// 127.0.0.1` come first). A fixed port is for restarting a node where its peers expect it.
    ///
    /// `--port 0 --tls-port N` is TLS only (as Redis's `port 0`), so a server given a TLS port
    /// here gets a plain port picked by [`free_port`]; [`Sluice::start_exact`] starts one TLS only.
    pub fn start_on(port: u16, args: &[&str]) -> Sluice {
        let port = if port == 0 && args.contains(&"--tls-port") {
            free_port()
        } else {
            port
        };
        let mut cmd = Command::new(binary());
        cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(io_loop())
            .args(args);
        Sluice::spawn(cmd)
    }

    /// [`Sluice::start_on`] with environment variables set for the server (such as
    /// `SLUICE_CLOCK_OFFSET_MS`, which sets its clock wrong).
    pub fn start_on_env(port: u16, args: &[&str], env: &[(&str, &str)]) -> Sluice {
        let mut cmd = Command::new(binary());
        cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(io_loop())
            .args(args)
            .envs(env.iter().copied());
        Sluice::spawn(cmd)
    }

    /// Starts `sluice args...` exactly as given (no `--port` nor `--bind` added) with `env` set:
    /// for a config file as the first argument, which must then name the port.
    pub fn start_exact(args: &[&str], env: &[(&str, &str)]) -> Sluice {
        let mut cmd = Command::new(binary());
        cmd.args(args).envs(env.iter().copied());
        Sluice::spawn(cmd)
    }

    /// Starts the sidecar, `sluice proxy --port 0 --bind 127.0.0.1 args...`.
    pub fn start_proxy(args: &[&str]) -> Sluice {
        Sluice::start_proxy_env(args, &[])
    }

    /// [`Sluice::start_proxy`] with environment variables set for the sidecar.
    pub fn start_proxy_env(args: &[&str], env: &[(&str, &str)]) -> Sluice {
        let mut cmd = Command::new(binary());
        cmd.args(["proxy", "--port", "0", "--bind", "127.0.0.1"])
            .args(args)
            .envs(env.iter().copied());
        Sluice::spawn(cmd)
    }

    /// Spawns `cmd` and waits up to 30 s for its ready line.
    fn spawn(mut cmd: Command) -> Sluice {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn sluice");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(tx) = tx.as_ref()
                    && let Some(port) = ready_port(&line)
                {
                    let _ = tx.send(port);
                }
                if line.contains("ready to accept") {
                    tx = None;
                }
                let mut l = sink.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        let port = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(p) => p,
            Err(_) => {
                let _ = child.kill();
                panic!("sluice did not become ready; log:\n{}", log.lock().unwrap());
            }
        };
        Sluice { child, port, log }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `ROLE` of this node, or `None` if it does not answer within a few seconds.
    pub fn try_role(&self) -> Option<redis::Role> {
        let mut c = redis::Client::open(self.url())
            .ok()?
            .get_connection_with_timeout(Duration::from_secs(2))
            .ok()?;
        c.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        redis::cmd("ROLE").query(&mut c).ok()
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// A RESP2 client.
    pub fn client(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .and_then(|c| c.get_connection())
            .expect("connect")
    }

    /// A RESP3 client (the `redis` crate sends `HELLO 3` on connect).
    pub fn resp3(&self) -> redis::Connection {
        redis::Client::open(format!("{}?protocol=resp3", self.url()))
            .and_then(|c| c.get_connection())
            .expect("connect resp3")
    }

    /// A raw socket with a read timeout, for protocol-level tests.
    pub fn raw(&self) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect raw");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.set_nodelay(true).unwrap();
        s
    }

    /// The server process's resident set size in bytes (Linux /proc).
    pub fn rss(&self) -> u64 {
        let statm = std::fs::read_to_string(format!("/proc/{}/statm", self.pid())).expect("statm");
        let pages: u64 = statm
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse().ok())
            .expect("rss");
        pages * 4096
    }

    /// Waits up to 10 s for the server to log a line containing `needle` (the log is read by a
    /// thread, so a line can trail what a client already saw).
    pub fn wait_for_log(&self, needle: &str) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.log().contains(needle) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// What the server has logged so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Sends a signal to the server process.
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, sig);
        }
    }

    /// Waits up to `timeout` for the process to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Sluice {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

fn ready_port(line: &str) -> Option<u16> {
    let rest = line.split("ready to accept connections on ").nth(1)?;
    let addr = rest.split_whitespace().next()?;
    addr.rsplit(':').next()?.parse().ok()
}

/// Reads exactly `n` bytes (panics on timeout or early close).
pub fn read_exact_str(stream: &mut TcpStream, n: usize) -> String {
    let mut buf = vec![0; n];
    stream.read_exact(&mut buf).expect("read reply");
    String::from_utf8_lossy(&buf).into_owned()
}

/// Reads until the peer closes (or the read timeout hits); returns what arrived and whether it closed.
pub fn read_to_close(stream: &mut TcpStream) -> (String, bool) {
    let mut all = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return (String::from_utf8_lossy(&all).into_owned(), true),
            Ok(n) => all.extend_from_slice(&buf[..n]),
            Err(_) => return (String::from_utf8_lossy(&all).into_owned(), false),
        }
    }
}

/// Whether an external tool is on the PATH. With `CI=true` (as `scripts/test.sh`, the README's
/// test command, runs the suite) a missing tool is a failure; under a bare `cargo test` the
/// test says what it skipped.
pub fn have_tool(name: &str) -> bool {
    let found = Command::new(name)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    installed(name, found)
}

/// Whether `program args` runs and succeeds ([`have_tool`] for a tool without `--version`, or
/// one that must work, not only be found): `what` names it if it does not.
pub fn have_command(what: &str, program: &str, args: &[&str]) -> bool {
    let ok = Command::new(program)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success());
    installed(what, ok)
}

/// A path inside the tests crate (`js/...`, `py/...`).
pub fn repo_path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// Runs `program args` with a time bound (60 s); returns its stdout, or panics with its
/// stderr.
pub fn run_client(program: &str, args: &[&str]) -> String {
    let out = Command::new("timeout")
        .arg("60")
        .arg(program)
        .args(args)
        .output()
        .expect("run the client");
    assert!(
        out.status.success(),
        "{program} {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `found`; if not, `what` is missing: a failure under `CI=true`, else a skip said on stderr.
fn installed(what: &str, found: bool) -> bool {
    if !found {
        assert!(
            std::env::var("CI").is_err(),
            "{what} is not installed (scripts/test.sh installs what the tests need)"
        );
        eprintln!("SKIPPED: {what} not installed (scripts/test.sh installs what the tests need)");
    }
    found
}

/// A finished command's output as text: stdout, then stderr.
pub fn output_text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `redis-cli` logged in as `user` (`--user --pass`): its output as text.
pub fn redis_cli_as(port: u16, user: &str, pass: &str, args: &[&str]) -> String {
    let mut all = vec!["--user", user, "--pass", pass, "--no-auth-warning"];
    all.extend_from_slice(args);
    output_text(&redis_cli(port, &all))
}

/// Runs `python3 -c script args...` (60 s at most), which must succeed: the lines it printed,
/// and all its output as text for messages.
pub fn python_lines(script: &str, args: &[&str]) -> (Vec<String>, String) {
    let out = Command::new("timeout")
        .args(["60", "python3", "-c", script])
        .args(args)
        .output()
        .expect("python3");
    assert!(out.status.success(), "{}", output_text(&out));
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect();
    (lines, output_text(&out))
}

/// Runs `redis-cli -p PORT args...` and returns its output.
pub fn redis_cli(port: u16, args: &[&str]) -> Output {
    Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .expect("run redis-cli")
}

/// Runs `redis-benchmark -p PORT args...` with a time bound, returning its output.
pub fn redis_benchmark(port: u16, args: &[&str]) -> Output {
    Command::new("timeout")
        .args([
            "120",
            "redis-benchmark",
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
        ])
        .args(args)
        .output()
        .expect("run redis-benchmark")
}

/// Runs one `RL.CHECK` and returns its five integers.
pub fn rl_check(conn: &mut redis::Connection, args: &[&str]) -> redis::RedisResult<Vec<i64>> {
    let mut cmd = redis::cmd("RL.CHECK");
    for a in args {
        cmd.arg(*a);
    }
    cmd.query(conn)
}

/// Waits (20 s at most) for an `RL.CHECK args` on `conn`, through the sidecar `proxy`, that is
/// allowed, and returns its integers; panics with the last reply and the sidecar's log.
pub fn allowed_through(proxy: &Sluice, conn: &mut redis::Connection, args: &[&str]) -> Vec<i64> {
    let mut last = String::new();
    let got = wait_until(Duration::from_secs(20), || {
        let r = rl_check(conn, args);
        last = format!("{r:?}");
        r.ok().filter(|r| r[0] == 1)
    });
    got.unwrap_or_else(|| {
        panic!(
            "no check {args:?} through the sidecar: {last}\n{}",
            proxy.log()
        )
    })
}

/// State written before a hostile test, checked after it: the server must keep what it accepted.
#[derive(Debug)]
pub struct Sentinel {
    key: String,
}

impl Sentinel {
    /// Writes a counter and takes two units of a 5-per-hour bucket.
    pub fn write(server: &Sluice) -> Sentinel {
        let key = format!("sentinel:{}", server.port);
        let mut c = server.client();
        let _: () = redis::cmd("SET").arg(&key).arg("42").query(&mut c).unwrap();
        for _ in 0..2 {
            rl_check(&mut c, &[&format!("{key}:bucket"), "5", "1h"]).unwrap();
        }
        Sentinel { key }
    }

    /// Asserts the server answers PING on a new connection and still holds the sentinel state.
    pub fn assert_intact(&self, server: &Sluice) {
        let mut c = server.client();
        let pong: String = redis::cmd("PING").query(&mut c).unwrap();
        assert_eq!(pong, "PONG");
        let v: String = redis::cmd("GET").arg(&self.key).query(&mut c).unwrap();
        assert_eq!(v, "42", "counter kept");
        let r = rl_check(&mut c, &[&format!("{}:bucket", self.key), "5", "1h", "DRY"]).unwrap();
        assert_eq!(
            r[2], 2,
            "bucket state kept (two taken, DRY shows the third): {r:?}"
        );
    }
}

/// One integer field of the node's `INFO` (e.g. `total_commands_processed`), read over a
/// connection that sends nothing before the INFO (no `CLIENT SETINFO`, which redis-rs sends by
/// default), so each call adds exactly one command to the node's count.
pub fn info_field(port: u16, name: &str) -> Option<u64> {
    use redis::IntoConnectionInfo;
    let info = format!("redis://127.0.0.1:{port}/")
        .into_connection_info()
        .ok()?;
    let quiet = info.redis_settings().clone().set_skip_set_lib_name();
    let mut conn = redis::Client::open(info.set_redis_settings(quiet))
        .ok()?
        .get_connection_with_timeout(Duration::from_secs(2))
        .ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let text: String = redis::cmd("INFO").query(&mut conn).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
}

/// A count of the node's `INFO scripting`: a field's value (`scripts_lua_calls:N`), or the
/// `calls=N` of a known script's line (`script_native_<name>:sha=...,calls=N`). Panics if the
/// field is missing.
pub fn script_count(port: u16, field: &str) -> u64 {
    let text = match resp::RespConn::connect(port).call(&["INFO", "scripting"]) {
        resp::Reply::Bulk(b) => String::from_utf8(b).unwrap(),
        other => panic!("{other:?}"),
    };
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in INFO scripting:\n{text}"));
    line.rsplit(['=', ':'])
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{field}: {line}"))
}

/// A free TCP port on 127.0.0.1 (checked by binding it, then released), for ports a test must
/// name: redis-sentinel's, side ports (`--http-port`), a node restarted where its peers expect it.
///
/// The port comes from just below the kernel's ephemeral range (`ip_local_port_range`), in a
/// sequence of this process's own: a port the kernel hands out to an outgoing connection or to
/// a server binding port 0 is never one of these, so nothing takes the port between the moment
/// it is picked here and the moment the server binds it. Where the range leaves no room below
/// it, the kernel picks (`bind` to port 0).
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
    const SPAN: u32 = 10_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(0);
    if low > SPAN + 1024 {
        let start = std::process::id().wrapping_mul(7919) % SPAN;
        for _ in 0..SPAN {
            let n = NEXT.fetch_add(1, Relaxed);
            let port = (low - SPAN + (start + n) % SPAN) as u16;
            if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return port;
            }
        }
    }
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .expect("bind a free port")
        .port()
}

/// Polls `f` every 20 ms until it returns `Some`, or returns `None` once `timeout` has passed
/// (`f` is always tried at least once).
pub fn wait_until<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Polls `f` every 20 ms until it holds (true) or `secs` pass (false).
pub fn holds_within(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    wait_until(Duration::from_secs(secs), || f().then_some(())).is_some()
}

/// A real redis-server on a free loopback port, with no persistence (`--save '' --appendonly
/// no`): the reference the differential and comparison tests hold Sluice to. Stopped by its PID
/// on drop.
#[derive(Debug)]
pub struct RedisServer {
    child: Child,
    pub port: u16,
}

impl RedisServer {
    /// Starts `redis-server` with extra flags and waits up to 10 s for it to accept connections.
    pub fn start(args: &[&str]) -> RedisServer {
        let port = free_port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        let server = RedisServer { child, port };
        let up = wait_until(Duration::from_secs(10), || {
            TcpStream::connect(("127.0.0.1", port)).ok()
        });
        assert!(up.is_some(), "redis-server did not start");
        server
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running `redis-sentinel` on a free loopback port, with a fresh, writable config file and
/// log in a directory of its own (Sentinel rewrites its config on every change). Stopped by its
/// PID and its directory removed on drop; if the test is panicking, the log's tail is printed.
#[derive(Debug)]
pub struct RedisSentinel {
    child: Child,
    pub port: u16,
    dir: PathBuf,
}

impl RedisSentinel {
    /// Starts a sentinel with `config` (lines such as `sentinel monitor ...`) after its own
    /// `port`, `bind 127.0.0.1`, `dir` and `logfile` lines. Waits up to 10 s for `PING`.
    pub fn start(config: &str) -> RedisSentinel {
        RedisSentinel::launch(config, None)
    }

    /// A TLS-only sentinel (`port 0`, `tls-port` the port picked, then `tls` lines such as
    /// `tls-cert-file ...`), ready once `ready(port)` says so (a `PING` over TLS: this harness's
    /// own clients speak plain RESP only). [`RedisSentinel::client`] does not reach it.
    pub fn start_tls(config: &str, tls: &str, ready: &dyn Fn(u16) -> bool) -> RedisSentinel {
        RedisSentinel::launch(config, Some((tls, ready)))
    }

    fn launch(config: &str, tls: Option<(&str, &dyn Fn(u16) -> bool)>) -> RedisSentinel {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("sluice-sentinel-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("sentinel dir");
        let conf = dir.join("sentinel.conf");
        let logfile = dir.join("sentinel.log");
        // A port picked by free_port can be taken before the sentinel binds it: try another.
        let mut last_log = String::new();
        for _ in 0..3 {
            let port = free_port();
            let ports = match tls {
                None => format!("port {port}"),
                Some((lines, _)) => format!("port 0\ntls-port {port}\n{lines}"),
            };
            let text = format!(
                "{ports}\nbind 127.0.0.1\ndaemonize no\nprotected-mode no\nloglevel verbose\ndir {}\nlogfile {}\n{config}\n",
                dir.display(),
                logfile.display()
            );
            std::fs::write(&conf, text).expect("write sentinel.conf");
            let child = Command::new("redis-sentinel")
                .arg(&conf)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn redis-sentinel");
            let mut sentinel = RedisSentinel {
                child,
                port,
                dir: dir.clone(),
            };
            let ready = wait_until(Duration::from_secs(10), || {
                if let Ok(Some(_)) = sentinel.child.try_wait() {
                    return Some(false);
                }
                if let Some((_, ready)) = tls {
                    return ready(port).then_some(true);
                }
                let pong: Option<String> = sentinel
                    .try_client()
                    .and_then(|mut c| redis::cmd("PING").query(&mut c).ok());
                (pong.as_deref() == Some("PONG")).then_some(true)
            });
            if ready == Some(true) {
                return sentinel;
            }
            last_log = sentinel.log();
            // Keep the directory for the next attempt.
            let _ = sentinel.child.kill();
            let _ = sentinel.child.wait();
            sentinel.dir = PathBuf::new();
        }
        let _ = std::fs::remove_dir_all(&dir);
        panic!("redis-sentinel did not start; log:\n{last_log}");
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn try_client(&self) -> Option<redis::Connection> {
        let c = redis::Client::open(self.url())
            .ok()?
            .get_connection_with_timeout(Duration::from_secs(2))
            .ok()?;
        c.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        Some(c)
    }

    /// A RESP2 client to the sentinel (5 s read timeout).
    pub fn client(&self) -> redis::Connection {
        self.try_client().expect("connect to redis-sentinel")
    }

    /// What the sentinel has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("sentinel.log")).unwrap_or_default()
    }
}

impl Drop for RedisSentinel {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        if self.dir.as_os_str().is_empty() {
            return;
        }
        if std::thread::panicking() {
            let log = self.log();
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            eprintln!("--- redis-sentinel :{} log (tail) ---", self.port);
            for line in tail.into_iter().rev() {
                eprintln!("{line}");
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A directory under the system temp dir, removed on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// A fresh, empty directory named after `name`, this process and a counter.
    pub fn new(name: &str) -> TempDir {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("sluice-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }

    pub fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs the admin tool, `sluice cluster ARGS...`, bounded by `timeout 120`.
pub fn sluice_cluster(args: &[&str]) -> Output {
    Command::new("timeout")
        .arg("120")
        .arg(binary())
        .arg("cluster")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run sluice cluster")
}

/// A running `etcd` (the Debian etcd-server's) on free loopback ports, with its data in a
/// directory of its own. Stopped by its PID and its directory removed on drop; if the test is
/// panicking, its log's tail is printed.
#[derive(Debug)]
pub struct Etcd {
    child: Child,
    pub port: u16,
    dir: TempDir,
    scheme: &'static str,
}

impl Etcd {
    /// Starts etcd and waits up to 20 s for `GET /health` to say `"health":"true"`.
    pub fn start() -> Etcd {
        Etcd::launch(None)
    }

    /// Starts etcd serving its clients over TLS only, with `certs`' `node` certificate, and
    /// requiring a client certificate its CA signed (`--client-cert-auth`). Its health is read
    /// on a plain metrics port.
    pub fn start_tls(certs: &tls::Certs) -> Etcd {
        Etcd::launch(Some(certs))
    }

    fn launch(tls: Option<&tls::Certs>) -> Etcd {
        let dir = TempDir::new("etcd");
        let logfile = dir.path().join("etcd.log");
        let scheme = if tls.is_some() { "https" } else { "http" };
        // A port picked by free_port can be taken before etcd binds it: try others.
        for attempt in 0..3 {
            let (port, peer, metrics) = (free_port(), free_port(), free_port());
            let client_url = format!("{scheme}://127.0.0.1:{port}");
            let peer_url = format!("http://127.0.0.1:{peer}");
            let mut cmd = Command::new("etcd");
            cmd.args(["--name", "sluice-test"])
                .arg("--data-dir")
                .arg(dir.path().join(format!("data-{attempt}")))
                .args(["--listen-client-urls", &client_url])
                .args(["--advertise-client-urls", &client_url])
                .args(["--listen-peer-urls", &peer_url])
                .args(["--initial-advertise-peer-urls", &peer_url])
                .args(["--initial-cluster", &format!("sluice-test={peer_url}")]);
            let health = match tls {
                None => port,
                Some(certs) => {
                    cmd.args(["--cert-file", &certs.path("node.crt")])
                        .args(["--key-file", &certs.path("node.key")])
                        .args(["--trusted-ca-file", &certs.path("ca.crt")])
                        .arg("--client-cert-auth")
                        .args([
                            "--listen-metrics-urls",
                            &format!("http://127.0.0.1:{metrics}"),
                        ]);
                    metrics
                }
            };
            let mut child = cmd
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&logfile).expect("etcd log"))
                .spawn()
                .unwrap_or_else(|e| {
                    panic!("spawn etcd: {e} (scripts/test.sh installs what the tests need)")
                });
            let healthy = wait_until(Duration::from_secs(20), || {
                if let Ok(Some(_)) = child.try_wait() {
                    return Some(false);
                }
                http_get(health, "/health")
                    .filter(|body| body.contains("\"health\":\"true\""))
                    .map(|_| true)
            });
            if healthy == Some(true) {
                return Etcd {
                    child,
                    port,
                    dir,
                    scheme,
                };
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!(
            "etcd did not start; log:\n{}",
            std::fs::read_to_string(&logfile).unwrap_or_default()
        );
    }

    pub fn url(&self) -> String {
        format!("{}://127.0.0.1:{}", self.scheme, self.port)
    }

    /// Stops etcd now (SIGKILL), as a crash or a lost network would; its directory goes on
    /// drop.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// What etcd has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = self.log();
            let tail: Vec<&str> = log.lines().rev().take(30).collect();
            eprintln!("--- etcd :{} log (tail) ---", self.port);
            for line in tail.into_iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

/// `GET path` on 127.0.0.1:`port` over HTTP/1.0; the body, or `None` on any failure.
pub fn http_get(port: u16, path: &str) -> Option<String> {
    use std::io::Write;
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?;
    (status == "200").then(|| body.to_string())
}

/// An HTTP/1.1 response: status, headers (names lower-case) and body.
#[derive(Debug)]
pub struct HttpReply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpReply {
    /// The value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON (panics with the body when it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }
}

/// One request to 127.0.0.1:`port` (`Connection: close`), with `headers` and `body`; `None`
/// if the server cannot be reached or answers garbage.
pub fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Option<HttpReply> {
    use std::io::Write;
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        req.push_str(&format!("Content-Length: {}\r\n", b.len()));
    }
    req.push_str("\r\n");
    req.push_str(body.unwrap_or(""));
    s.write_all(req.as_bytes()).ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let mut lines = head.lines();
    let status = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        unchunk(body)
    } else {
        body.to_string()
    };
    Some(HttpReply {
        status,
        headers,
        body,
    })
}

/// A chunked body's data.
fn unchunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    out
}

/// `POST path` with a JSON body.
pub fn http_json(port: u16, method: &str, path: &str, body: &str) -> HttpReply {
    http(
        port,
        method,
        path,
        &[("Content-Type", "application/json")],
        Some(body),
    )
    .unwrap_or_else(|| panic!("{method} {path} got no answer"))
}

/// Starts a server with `--http-port` on a free port; returns it and the HTTP port, once
/// `/healthz` answers.
pub fn sluice_with_http(args: &[&str]) -> (Sluice, u16) {
    let port = free_port();
    let p = port.to_string();
    let mut all = vec!["--http-port", &p];
    all.extend_from_slice(args);
    let server = Sluice::start_with(&all);
    wait_until(Duration::from_secs(10), || http_get(port, "/healthz"))
        .expect("GET /healthz answers 200");
    (server, port)
}

/// Starts a cluster node (`--cluster yes --threads 1`) keeping its id and table in `config`, on
/// `port` (0: a free one; a fixed port restarts a node where its peers expect it).
pub fn cluster_node(port: u16, config: &std::path::Path, extra: &[&str]) -> Sluice {
    let config = config.to_str().expect("utf-8 path");
    let mut args = vec![
        "--threads",
        "1",
        "--cluster",
        "yes",
        "--cluster-config-file",
        config,
    ];
    args.extend_from_slice(extra);
    Sluice::start_on(port, &args)
}

/// Cluster nodes keeping their files in `dir` as `NAME-I.conf`, node `i` started with
/// `flags[i]`, made one cluster of primaries by `sluice cluster create`, which must succeed.
pub fn primaries(dir: &TempDir, name: &str, flags: &[&[&str]]) -> Vec<Sluice> {
    let nodes: Vec<Sluice> = flags
        .iter()
        .enumerate()
        .map(|(i, f)| cluster_node(0, &dir.path().join(format!("{name}-{i}.conf")), f))
        .collect();
    let addrs: Vec<String> = nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port))
        .collect();
    let mut args = vec!["create"];
    args.extend(addrs.iter().map(String::as_str));
    let out = sluice_cluster(&args);
    assert!(
        out.status.success(),
        "create: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    nodes
}

/// Waits (10 s at most) until every one of `nodes` says `cluster_state:ok`.
pub fn wait_cluster_ok(nodes: &[Sluice]) {
    wait_until(Duration::from_secs(10), || {
        nodes
            .iter()
            .all(|n| cluster_info_field(n.port, "cluster_state").as_deref() == Some("ok"))
            .then_some(())
    })
    .expect("cluster ok");
}

/// Two shards of a primary and a replica each: four cluster nodes (`flags` added to each)
/// keeping their files in `dir`, made one cluster by `sluice cluster create ... --replicas 1`
/// (`admin` added to its arguments), which must succeed. Nodes 0 and 1 are the primaries,
/// node 2 replicates node 0 and node 3 node 1.
pub fn two_shard_cluster(dir: &TempDir, flags: &[&str], admin: &[&str]) -> Vec<Sluice> {
    let nodes: Vec<Sluice> = (0..4)
        .map(|i| cluster_node(0, &dir.path().join(format!("nodes-{i}.conf")), flags))
        .collect();
    let addrs: Vec<String> = nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port))
        .collect();
    let mut args: Vec<&str> = vec!["create"];
    args.extend(addrs.iter().map(String::as_str));
    args.extend(["--replicas", "1"]);
    args.extend_from_slice(admin);
    let out = sluice_cluster(&args);
    assert!(
        out.status.success(),
        "create --replicas 1: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    nodes
}

/// A RESP2 connection to 127.0.0.1:`port` with 5 s timeouts, or `None`.
pub fn try_connect(port: u16) -> Option<redis::Connection> {
    let c = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .ok()?
        .get_connection_with_timeout(Duration::from_secs(2))
        .ok()?;
    c.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    c.set_write_timeout(Some(Duration::from_secs(5))).ok()?;
    Some(c)
}

/// One field of `CLUSTER INFO` on the node at `port`.
pub fn cluster_info_field(port: u16, name: &str) -> Option<String> {
    let text: String = redis::cmd("CLUSTER")
        .arg("INFO")
        .query(&mut try_connect(port)?)
        .ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(|v| v.trim().to_string())
}

/// One range of `CLUSTER SLOTS`: its slots and the ports of its primary and replicas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotsEntry {
    pub start: u16,
    pub end: u16,
    pub primary: u16,
    pub replicas: Vec<u16>,
}

/// `CLUSTER SLOTS` on the node at `port`, sorted by slot; `None` if it does not answer.
pub fn cluster_slots(port: u16) -> Option<Vec<SlotsEntry>> {
    let reply: redis::Value = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query(&mut try_connect(port)?)
        .ok()?;
    let int = |v: &redis::Value| match v {
        redis::Value::Int(n) => u16::try_from(*n).ok(),
        _ => None,
    };
    let node_port = |v: &redis::Value| match v {
        redis::Value::Array(n) => n.get(1).and_then(int),
        _ => None,
    };
    let redis::Value::Array(ranges) = reply else {
        return None;
    };
    let mut out = Vec::new();
    for r in &ranges {
        let redis::Value::Array(r) = r else {
            return None;
        };
        out.push(SlotsEntry {
            start: int(r.first()?)?,
            end: int(r.get(1)?)?,
            primary: node_port(r.get(2)?)?,
            replicas: r[3..].iter().map(node_port).collect::<Option<_>>()?,
        });
    }
    out.sort_by_key(|e| e.start);
    Some(out)
}

/// Whether `slots` covers 0..=16383 exactly once, in order.
pub fn covers_every_slot(slots: &[SlotsEntry]) -> bool {
    let mut next = 0u32;
    for e in slots {
        if u32::from(e.start) != next || e.end < e.start {
            return false;
        }
        next = u32::from(e.end) + 1;
    }
    next == 16384
}

/// The port of the primary that owns `slot` in `slots`.
pub fn owner_of(slots: &[SlotsEntry], slot: u16) -> Option<u16> {
    slots
        .iter()
        .find(|e| (e.start..=e.end).contains(&slot))
        .map(|e| e.primary)
}

/// Redis Cluster's key slot: CRC16/XMODEM of the key or its first non-empty `{tag}`, mod 16384.
/// Computed here on purpose, not asked of the server: the test checks the server against it.
pub fn key_slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    let mut crc: u16 = 0;
    for &b in tagged.unwrap_or(key) {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// A current-thread tokio runtime for the async cluster client.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// A redis-rs cluster connection, retrying MOVED and TRYAGAIN quickly (its default first wait
/// is over a second).
pub async fn cluster_client(urls: Vec<String>) -> redis::cluster_async::ClusterConnection {
    cluster_client_with(urls, false).await
}

/// [`cluster_client`], whose connections first send READONLY when `readonly` (redis-rs's
/// `read_from_replicas`, as clients that read from replicas do): its writes must still pause
/// and move with their slots.
pub async fn cluster_client_with(
    urls: Vec<String>,
    readonly: bool,
) -> redis::cluster_async::ClusterConnection {
    let builder = redis::cluster::ClusterClient::builder(urls);
    let builder = if readonly {
        builder.read_routing_strategy(redis::cluster_read_routing::RandomReplicaStrategy)
    } else {
        builder
    };
    connect_cluster(builder).await
}

/// The connection of a cluster client from `builder`, retrying MOVED and TRYAGAIN quickly.
pub async fn connect_cluster(
    builder: redis::cluster::ClusterClientBuilder,
) -> redis::cluster_async::ClusterConnection {
    builder
        .retries(50)
        .min_retry_wait(2)
        .max_retry_wait(100)
        .connection_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_secs(5))
        .build()
        .expect("cluster client")
        .get_async_connection()
        .await
        .expect("cluster connection")
}

/// One `RL.CHECK` through a cluster connection.
pub async fn cluster_rl_check(
    c: &mut redis::cluster_async::ClusterConnection,
    args: &[&str],
) -> redis::RedisResult<Vec<i64>> {
    let mut cmd = redis::cmd("RL.CHECK");
    for a in args {
        cmd.arg(*a);
    }
    cmd.query_async(c).await
}

/// How long the HTTP server on `port` takes to close a connection that sends a request head
/// and never finishes it: half a head and then silence, or (`trickle`) one byte of it every
/// 500 ms, which keeps the connection from ever being idle. `None`: still open after 40 s.
pub fn http_head_cut_off(port: u16, trickle: bool) -> Option<Duration> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    let head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Padding: ";
    let started = Instant::now();
    if !trickle {
        s.write_all(head).ok()?;
    }
    let mut buf = [0u8; 256];
    for i in 0..80 {
        if trickle {
            let byte = head.get(i).copied().unwrap_or(b'a');
            if s.write_all(&[byte]).is_err() {
                return Some(started.elapsed());
            }
        }
        match s.read(&mut buf) {
            Ok(0) => return Some(started.elapsed()),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return Some(started.elapsed()),
        }
    }
    None
}

/// Writes `internal.yaml` into `dir`: Envoy's domain `internal` with one descriptor, `azure`,
/// allowed 100 a day (a window no test outlasts).
pub fn write_azure_config(dir: &std::path::Path) {
    std::fs::write(
        dir.join("internal.yaml"),
        "domain: internal\ndescriptors:\n  - key: azure\n    rate_limit:\n      unit: day\n      requests_per_unit: 100\n",
    )
    .expect("write the Envoy config");
}

/// A ShouldRateLimit descriptor of `entries` (key, value), with an override `limit`
/// (`requests_per_unit`, unit) and a descriptor-level `hits_addend`.
pub fn envoy_descriptor(
    entries: &[(&str, &str)],
    limit: Option<(u32, i32)>,
    hits_addend: Option<u64>,
) -> sluice_envoy::pb::RateLimitDescriptor {
    use sluice_envoy::pb::rate_limit_descriptor::{Entry, RateLimitOverride};
    sluice_envoy::pb::RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        limit: limit.map(|(requests_per_unit, unit)| RateLimitOverride {
            requests_per_unit,
            unit,
        }),
        hits_addend,
    }
}

/// A ShouldRateLimit request in [`write_azure_config`]'s domain: one hit on `azure` = `value`.
pub fn azure_request(value: &str) -> sluice_envoy::pb::RateLimitRequest {
    sluice_envoy::pb::RateLimitRequest {
        domain: "internal".into(),
        descriptors: vec![envoy_descriptor(&[("azure", value)], None, Some(1))],
        hits_addend: 0,
    }
}

/// Against a gRPC front on `port` serving [`write_azure_config`]'s domain: waits until a probe
/// is answered OK (until a cluster's table is pushed, checks may be unavailable), then every
/// one of 40 values, each its own bucket (in a cluster, spread over the nodes), must be
/// answered OK with 99 left.
pub fn assert_azure_checks_answered(port: u16) {
    assert_azure_checks_answered_as(port, None);
}

/// [`assert_azure_checks_answered`] with `authorization` metadata (`Bearer <password>`).
pub fn assert_azure_checks_answered_as(port: u16, authorization: Option<&str>) {
    use sluice_envoy::pb::RateLimitServiceClient;
    use sluice_envoy::pb::rate_limit_response::Code;
    let rt = runtime();
    let mut rls = wait_until(Duration::from_secs(10), || {
        rt.block_on(RateLimitServiceClient::connect(format!(
            "http://127.0.0.1:{port}"
        )))
        .ok()
    })
    .expect("gRPC connects");
    let mut call = |v: &str| {
        let mut request = tonic::Request::new(azure_request(v));
        if let Some(a) = authorization {
            let a = a.parse().expect("metadata");
            request.metadata_mut().insert("authorization", a);
        }
        rt.block_on(rls.should_rate_limit(request))
            .map(|r| r.into_inner())
    };
    let mut last = String::new();
    let up = wait_until(Duration::from_secs(15), || {
        let r = call("probe");
        last = format!("{r:?}");
        r.ok().filter(|r| r.overall_code == Code::Ok as i32)
    });
    assert!(up.is_some(), "{last}");
    for i in 0..40 {
        let r = call(&i.to_string()).unwrap_or_else(|s| panic!("value {i}: {s}"));
        assert_eq!(r.overall_code, Code::Ok as i32);
        assert_eq!(r.statuses[0].limit_remaining, 99, "value {i}");
    }
}

/// nginx in the foreground running the shipped example (`examples/nginx/nginx.conf`), in a
/// process group of its own (its PID), stopped by that group when dropped: killing the master
/// alone leaves its worker running, adopted by init.
#[derive(Debug)]
pub struct Nginx(Child);

impl Nginx {
    /// Starts the example listening on `listen`, sending its checks to the node's HTTP port
    /// `sluice_http`, serving the files of `root`, its prefix (config, logs, temp) in `dir`.
    pub fn example(listen: u16, sluice_http: u16, root: &std::path::Path, dir: &TempDir) -> Nginx {
        let example = format!(
            "{}/../examples/nginx/nginx.conf",
            env!("CARGO_MANIFEST_DIR")
        );
        let conf = std::fs::read_to_string(&example)
            .unwrap_or_else(|e| panic!("{example}: {e}"))
            .replace("@LISTEN@", &listen.to_string())
            .replace("@SLUICE@", &format!("127.0.0.1:{sluice_http}"))
            .replace("@ROOT@", root.to_str().expect("a UTF-8 path"))
            .replace("@PREFIX@", dir.path().to_str().expect("a UTF-8 path"));
        let conf_path = dir.path().join("nginx.conf");
        std::fs::write(&conf_path, conf).expect("write nginx.conf");
        let prefix = dir.path().to_str().expect("a UTF-8 path");
        let child = Command::new("nginx")
            .args(["-p", prefix, "-e", "stderr"])
            .args([
                "-c",
                conf_path.to_str().expect("a UTF-8 path"),
                "-g",
                "daemon off;",
            ])
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nginx");
        Nginx(child)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the process group our own child leads; no memory is involved.
        unsafe {
            libc::kill(-(self.0.id() as libc::pid_t), libc::SIGKILL);
        }
        let _ = self.0.wait();
    }
}
