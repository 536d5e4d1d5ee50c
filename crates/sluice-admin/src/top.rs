//! `sluice top HOST:PORT` — who is being limited right now, on one screen, like top(1).
//!
//! Each refresh reads the slot table from the node it was given (`CLUSTER GETTABLE`; out of a
//! cluster that node is the only one), then asks every node of the table at once: each primary
//! `RL.TOP DENIED`, `RL.TOP ALLOWED` and `RL.RATES`, every node `INFO memory replication`. The
//! primaries' answers are merged by `sluice_client::top`: a primary owns its slots' keys, so a
//! key's counts add up across nodes (replicas run no checks and are not asked).
//!
//! Each node has a thread of its own that keeps its connection: a node that does not answer
//! within [`REPLY_WAIT`] is shown down, and is asked again once its thread is free, so a hung
//! node slows no refresh beyond that wait and never stops the screen.
//!
//! Without `--once` the screen is drawn on the terminal's alternate screen every `--interval`;
//! `q`, Ctrl-C or Ctrl-D (or SIGINT, SIGTERM, SIGHUP) ends it, and the terminal is left as it
//! was found.
//! The terminal's modes are set with stty(1), as a shell script would: key input needs no
//! echo and no line buffering, and this crate stays free of termios calls.
//!
//! # Screen
//!
//! ```text
//! sluice top  10:41:07 UTC  3 of 3 nodes answering  window 1m  every 1s  (q quits)
//!
//! RULE                       ALLOWED/s    DENIED/s    SHADOW/s   (the last complete 10 s)
//! api                           1203.4       512.0         0.0
//!
//! TOP DENIED, last 1m
//! KEY                          RULE                      COUNT      ±ERR        SEEN
//! tenant:hammer                api                       30712        61     0s ago
//!
//! TOP ALLOWED (sampled 1 in 16), last 1m
//! ...
//!
//! NODE                     ROLE     STATE  SLOTS     MEMORY  REPLICAS
//! 127.0.0.1:7000           primary  up      5461      2.10M         1
//! 127.0.0.1:7001           primary  down    5462          -         -
//! cannot reach 127.0.0.1:7001: Connection refused (os error 111)
//! ```

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Args;
use sluice_cluster::SlotTable;
use sluice_resp::value::Value;

use sluice_client::top::{Rates, TopEntry, merge_rates, merge_top, parse_rates, parse_top};

use crate::conn::{Conn, Fallible, FromValue};

/// `sluice top HOST:PORT [options]`
#[derive(Debug, Args)]
pub struct Top {
    /// Any node: in a cluster every primary is asked (the table is read from this one); out of
    /// a cluster, the node to watch.
    #[arg(value_name = "HOST:PORT")]
    node: String,
    /// Print one screen as text and exit (1 if no node answered).
    #[arg(long)]
    once: bool,
    /// How many keys each list shows (1-1000).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..=1000))]
    count: u16,
    /// Only checks under this rule: keys and rates.
    #[arg(long)]
    rule: Option<String>,
    /// The key lists' window: the last minute or the last 15 minutes.
    #[arg(long, default_value = "1m", value_parser = ["1m", "15m"])]
    window: String,
    /// Password of the nodes (their --requirepass, or `--user`'s); from the environment, it
    /// stays out of `ps`.
    #[arg(
        short = 'a',
        long,
        visible_alias = "pass",
        env = "SLUICE_TOP_PASSWORD",
        hide_env_values = true
    )]
    password: Option<String>,
    /// The ACL user to log in as, with `--password` (default: `default`); it needs RL.TOP,
    /// RL.RATES, INFO and CLUSTER GETTABLE.
    #[arg(long, requires = "password")]
    user: Option<String>,
    /// Time between refreshes: `1s`, `500ms`, `2` (seconds); 100 ms to 1 hour.
    #[arg(long, default_value = "1s", value_parser = parse_interval)]
    interval: Duration,
}

/// How long a refresh waits for each node's answers: past it the node is shown down.
const REPLY_WAIT: Duration = Duration::from_secs(2);
/// `--once` waits longer: there is no next refresh to catch a slow node.
const ONCE_WAIT: Duration = Duration::from_secs(5);
/// The screen's width when it is no terminal (`--once` into a pipe).
const TEXT_WIDTH: usize = 120;
/// Rules shown in the rates table at most, the busiest first.
const MAX_RULES: usize = 10;

fn parse_interval(s: &str) -> Result<Duration, String> {
    let ms = match s.strip_suffix("ms") {
        Some(n) => n.parse::<f64>().ok(),
        None => s
            .strip_suffix('s')
            .unwrap_or(s)
            .parse::<f64>()
            .ok()
            .map(|secs| secs * 1000.0),
    };
    match ms {
        Some(ms) if (100.0..=3_600_000.0).contains(&ms) => Ok(Duration::from_millis(ms as u64)),
        _ => Err(format!(
            "'{s}' is not an interval from 100ms to 3600s (`1s`, `500ms`, `2`)"
        )),
    }
}

/// Runs `sluice top`; returns the exit code.
pub fn main(top: Top) -> i32 {
    let mut watch = Watch::new(&top);
    if top.once {
        let screen = watch.refresh(ONCE_WAIT);
        print!("{}", render(&screen, TEXT_WIDTH));
        return if screen.answering() == 0 { 1 } else { 0 };
    }
    let (events, quit) = mpsc::channel();
    let terminal = Terminal::enter(events.clone());
    spawn_signal_watch(events);
    loop {
        let started = Instant::now();
        let screen = watch.refresh(REPLY_WAIT);
        terminal.draw(&render(&screen, terminal.width()));
        match quit.recv_timeout(top.interval.saturating_sub(started.elapsed())) {
            Ok(()) => return 0,
            // `events` is kept by this function's terminal guard: the channel never closes.
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {}
        }
    }
}

/// Who a connection logs in as.
#[derive(Clone)]
struct Login {
    user: Option<String>,
    password: Option<String>,
}

impl Login {
    /// A connection to `addr`, logged in (a refused login's error never repeats the password).
    fn open(&self, addr: &str) -> Fallible<Conn> {
        let auth = self.password.as_deref().map(|p| (self.user.as_deref(), p));
        Conn::open(auth, addr)
    }
}

/// What `RL.TOP` is asked for.
struct Query {
    count: String,
    rule: Option<String>,
    window: String,
}

impl Query {
    fn top<'a>(&'a self, outcome: &'a str) -> Vec<&'a str> {
        let mut args = vec![
            "RL.TOP",
            outcome,
            "COUNT",
            &self.count,
            "WINDOW",
            &self.window,
        ];
        if let Some(rule) = &self.rule {
            args.extend(["RULE", rule.as_str()]);
        }
        args
    }
}

/// A question for one node's thread.
enum Ask {
    /// The slot table, `None` out of a cluster (or in one not created yet).
    Table,
    /// INFO; a primary also its top keys and rates.
    Node { primary: bool },
}

enum Got {
    Table(Option<SlotTable>),
    Node(NodeData),
}

/// What one node said in one refresh.
struct NodeData {
    /// `master` or `slave`, as INFO says.
    role: String,
    memory: String,
    replicas: String,
    /// A primary's denied and allowed keys and rates, or why they are missing (a node that
    /// refuses `RL.TOP` is up, its keys unknown).
    lists: Option<Fallible<Lists>>,
}

/// A primary's denied keys, allowed keys and rates.
type Lists = (Vec<TopEntry>, Vec<TopEntry>, Rates);

impl Query {
    fn lists(&self, conn: &mut Conn) -> Fallible<Lists> {
        let denied = parse_top(&conn.query(&self.top("DENIED"))?)?;
        let allowed = parse_top(&conn.query(&self.top("ALLOWED"))?)?;
        let rates = parse_rates(&conn.query(&["RL.RATES"])?)?;
        Ok((denied, allowed, rates))
    }
}

/// A reply as it came, for `sluice_client::top`'s parsers.
impl FromValue for Value {
    fn from_value(v: Value) -> Fallible<Self> {
        Ok(v)
    }
}

impl Ask {
    fn run(&self, conn: &mut Conn, query: &Query) -> Fallible<Got> {
        match self {
            Ask::Table => {
                let cluster = conn.field("cluster", "cluster_enabled")?;
                let table = match cluster.as_deref() {
                    Some("1") => conn.table()?,
                    _ => None,
                };
                Ok(Got::Table(table))
            }
            Ask::Node { primary } => {
                let info: String = conn.query(&["INFO", "memory", "replication"])?;
                let field = |name: &str| {
                    info.lines()
                        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                        .map_or_else(|| "?".to_string(), |v| v.trim().to_string())
                };
                let lists = primary.then(|| query.lists(conn));
                Ok(Got::Node(NodeData {
                    role: field("role"),
                    memory: field("used_memory_human"),
                    replicas: field("connected_slaves"),
                    lists,
                }))
            }
        }
    }
}

/// One question in flight, and its answer.
struct Job {
    id: u64,
    ask: Ask,
}

struct Answer {
    id: u64,
    got: Fallible<Got>,
}

/// A node's thread: asks its node what it is sent, on one connection, opened again after a
/// failure.
fn node_thread(addr: String, login: Login, query: Query, jobs: Receiver<Job>, out: Sender<Answer>) {
    let mut conn: Option<Conn> = None;
    for job in jobs {
        let got = match conn.take() {
            Some(c) => Ok(c),
            None => login.open(&addr),
        }
        .and_then(|mut c| {
            let got = job.ask.run(&mut c, &query);
            // After any error the next job opens a new connection: Conn does not say whether
            // it was an error reply (the connection still usable) or a failed one.
            let failed = match &got {
                Ok(Got::Node(NodeData {
                    lists: Some(Err(_)),
                    ..
                })) => true,
                other => other.is_err(),
            };
            if !failed {
                conn = Some(c);
            }
            got
        });
        if out.send(Answer { id: job.id, got }).is_err() {
            return;
        }
    }
}

/// A node's thread, as the refresh loop sees it.
struct Worker {
    jobs: Sender<Job>,
    /// The job it has not answered yet: it is not sent another until it does.
    busy: Option<u64>,
}

/// A node as shown.
struct NodeRow {
    addr: String,
    /// From the table; out of a cluster, from INFO.
    role: &'static str,
    slots: Option<usize>,
    state: Result<NodeData, String>,
}

/// One refresh's view.
struct Screen {
    at_ms: u64,
    window: String,
    interval: Option<Duration>,
    nodes: Vec<NodeRow>,
    rule: Option<String>,
    rates: Option<Rates>,
    denied: Vec<TopEntry>,
    allowed: Vec<TopEntry>,
    /// The cluster's table could not be read this time: the last one read is shown.
    stale_table: Option<String>,
}

impl Screen {
    fn answering(&self) -> usize {
        self.nodes.iter().filter(|n| n.state.is_ok()).count()
    }
}

/// The refresh loop's state: a thread per node, and the last table read.
struct Watch {
    seed: String,
    login: Login,
    count: usize,
    rule: Option<String>,
    window: String,
    interval: Option<Duration>,
    workers: BTreeMap<String, Worker>,
    answers: Receiver<Answer>,
    answers_in: Sender<Answer>,
    next_id: u64,
    table: Option<SlotTable>,
}

impl Watch {
    fn new(top: &Top) -> Watch {
        let (answers_in, answers) = mpsc::channel();
        Watch {
            seed: top.node.clone(),
            login: Login {
                user: top.user.clone(),
                password: top.password.clone(),
            },
            count: usize::from(top.count),
            rule: top.rule.clone(),
            window: top.window.clone(),
            interval: (!top.once).then_some(top.interval),
            workers: BTreeMap::new(),
            answers,
            answers_in,
            next_id: 0,
            table: None,
        }
    }

    /// Sends `ask` to `addr`'s thread (started on first use) unless it is still busy; the
    /// job's id.
    fn send(&mut self, addr: &str, ask: Ask) -> Option<u64> {
        let worker = self.workers.entry(addr.to_string()).or_insert_with(|| {
            let (jobs, inbox) = mpsc::channel();
            let query = Query {
                count: self.count.to_string(),
                rule: self.rule.clone(),
                window: self.window.clone(),
            };
            let (addr, login, out) = (
                addr.to_string(),
                self.login.clone(),
                self.answers_in.clone(),
            );
            std::thread::spawn(move || node_thread(addr, login, query, inbox, out));
            Worker { jobs, busy: None }
        });
        if worker.busy.is_some() {
            return None;
        }
        self.next_id += 1;
        let id = self.next_id;
        worker.jobs.send(Job { id, ask }).ok()?;
        worker.busy = Some(id);
        Some(id)
    }

    /// Waits until every job of `ids` is answered or `deadline` passes; the answers.
    fn collect(&mut self, ids: &[u64], deadline: Instant) -> BTreeMap<u64, Fallible<Got>> {
        let mut got = BTreeMap::new();
        while got.len() < ids.len() {
            let Some(wait) = deadline.checked_duration_since(Instant::now()) else {
                break;
            };
            let Ok(answer) = self.answers.recv_timeout(wait) else {
                break;
            };
            for w in self.workers.values_mut() {
                if w.busy == Some(answer.id) {
                    w.busy = None;
                }
            }
            // A late answer to an earlier refresh only frees its thread.
            if ids.contains(&answer.id) {
                got.insert(answer.id, answer.got);
            }
        }
        got
    }

    /// Asks `addr` one question, waiting until `deadline`.
    fn ask(&mut self, addr: &str, ask: Ask, deadline: Instant) -> Fallible<Got> {
        let Some(id) = self.send(addr, ask) else {
            return Err(format!("{addr} has not answered the last question yet"));
        };
        self.collect(&[id], deadline)
            .remove(&id)
            .unwrap_or_else(|| Err(format!("{addr} did not answer in time")))
    }

    /// The table: from the node given, else from a node of the last table read. `Err` says why
    /// the last one is kept.
    fn read_table(&mut self, deadline: Instant) -> Result<(), String> {
        let mut candidates = vec![self.seed.clone()];
        for (addr, _, _) in self.table.iter().flat_map(table_nodes) {
            if !candidates.contains(&addr) {
                candidates.push(addr);
            }
        }
        let mut why = String::new();
        for addr in candidates {
            match self.ask(&addr, Ask::Table, deadline) {
                Ok(Got::Table(table)) => {
                    self.table = table;
                    return Ok(());
                }
                Ok(Got::Node(_)) => {}
                Err(e) if why.is_empty() => why = e,
                Err(_) => {}
            }
            if Instant::now() >= deadline {
                break;
            }
        }
        Err(why)
    }

    fn refresh(&mut self, wait: Duration) -> Screen {
        let started = Instant::now();
        let deadline = started + wait;
        // Half the wait at most for the table: a node that hangs on it leaves the other half
        // to the rest (and at the next refresh, its thread still busy, another node is asked).
        let stale_table = self.read_table(started + wait / 2).err();
        // (address, role, slots); out of a cluster the node given, its role from INFO.
        let nodes: Vec<(String, Option<&'static str>, Option<usize>)> = match &self.table {
            Some(t) => table_nodes(t).collect(),
            None => vec![(self.seed.clone(), None, None)],
        };
        let jobs: Vec<Option<u64>> = nodes
            .iter()
            .map(|(addr, role, _)| {
                let primary = *role != Some("replica");
                self.send(addr, Ask::Node { primary })
            })
            .collect();
        let ids: Vec<u64> = jobs.iter().flatten().copied().collect();
        let mut answers = self.collect(&ids, deadline);
        let mut rows = Vec::new();
        let (mut denied, mut allowed, mut rates) = (Vec::new(), Vec::new(), Vec::new());
        for ((addr, role, slots), id) in nodes.into_iter().zip(jobs) {
            let state = match id.and_then(|id| answers.remove(&id)) {
                Some(Ok(Got::Node(mut data))) => {
                    match data.lists.take() {
                        Some(Ok((d, a, r))) => {
                            denied.push(d);
                            allowed.push(a);
                            rates.push(r);
                        }
                        Some(Err(e)) => data.lists = Some(Err(e)),
                        None => {}
                    }
                    Ok(data)
                }
                Some(Ok(Got::Table(_))) => Err("internal: a table for a node's question".into()),
                Some(Err(e)) => Err(e),
                // Its thread may still wait for an earlier question's answer: the node has not
                // answered for longer still.
                None => Err(format!("{addr} did not answer within {wait:?}")),
            };
            let role = role.unwrap_or(match &state {
                Ok(d) if d.role == "slave" => "replica",
                Ok(_) => "primary",
                Err(_) => "?",
            });
            rows.push(NodeRow {
                addr,
                role,
                slots,
                state,
            });
        }
        Screen {
            at_ms: now_ms(),
            window: self.window.clone(),
            interval: self.interval,
            nodes: rows,
            rule: self.rule.clone(),
            rates: (!rates.is_empty()).then(|| merge_rates(&rates)),
            denied: merge_top(&denied, self.count),
            allowed: merge_top(&allowed, self.count),
            // Out of a cluster there is no last table to fall back on.
            stale_table: self.table.as_ref().and(stale_table),
        }
    }
}

/// The table's nodes as (address, role, slots): each shard's primary, then its replicas.
fn table_nodes(
    t: &SlotTable,
) -> impl Iterator<Item = (String, Option<&'static str>, Option<usize>)> + '_ {
    t.shards.iter().enumerate().flat_map(move |(i, s)| {
        let slots = t.slots_of(i);
        std::iter::once((&s.primary, "primary"))
            .chain(s.replicas.iter().map(|r| (r, "replica")))
            .map(move |(n, role)| (format!("{}:{}", n.host, n.port), Some(role), Some(slots)))
    })
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `HH:MM:SS` of a Unix time in ms, UTC.
fn clock(ms: u64) -> String {
    let s = ms / 1000 % 86_400;
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// How long ago `then_ms` was: `0s`, `42s`, `3m05s`, `2h10m`.
fn ago(now_ms: u64, then_ms: u64) -> String {
    let s = now_ms.saturating_sub(then_ms) / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s / 60 % 60),
    }
}

/// A key as text: printable ASCII as is, every other byte (and `\`) as `\xNN`, at most `width`
/// characters (cut ones end in `...`).
fn show_key(key: &[u8], width: usize) -> String {
    let mut s = String::new();
    for &b in key {
        if b.is_ascii_graphic() && b != b'\\' || b == b' ' {
            s.push(char::from(b));
        } else {
            s.push_str(&format!("\\x{b:02x}"));
        }
    }
    cut(s, width)
}

fn cut(s: String, width: usize) -> String {
    if s.chars().count() <= width {
        return s;
    }
    let mut kept: String = s.chars().take(width.saturating_sub(3)).collect();
    kept.push_str("...");
    kept
}

fn rule_name(rule: &str) -> &str {
    if rule.is_empty() { "-" } else { rule }
}

/// The screen as text, `width` columns wide at most; lines end in `\n`.
fn render(screen: &Screen, width: usize) -> String {
    let mut out = String::new();
    let mut line = |l: String| {
        out.push_str(&cut(l, width));
        out.push('\n');
    };
    let every = screen
        .interval
        .map(|i| format!("  every {}  (q quits)", show_interval(i)))
        .unwrap_or_default();
    line(format!(
        "sluice top  {} UTC  {} of {} nodes answering  window {}{}{every}",
        clock(screen.at_ms),
        screen.answering(),
        screen.nodes.len(),
        screen.window,
        screen
            .rule
            .as_deref()
            .map(|r| format!("  rule {r}"))
            .unwrap_or_default(),
    ));
    if let Some(why) = &screen.stale_table {
        line(format!(
            "the table could not be read ({why}): the last one read is shown"
        ));
    }
    line(String::new());

    let rates = screen
        .rates
        .as_ref()
        .map(|r| rates_rows(r, screen.rule.as_deref()));
    line(format!(
        "{:<24} {:>11} {:>11} {:>11}   (the last complete 10 s)",
        "RULE", "ALLOWED/s", "DENIED/s", "SHADOW/s"
    ));
    match &rates {
        Some(rows) if !rows.is_empty() => {
            for (name, a, d, s) in rows.iter().take(MAX_RULES) {
                line(format!(
                    "{:<24} {a:>11.1} {d:>11.1} {s:>11.1}",
                    cut(rule_name(name).to_string(), 24)
                ));
            }
            if rows.len() > MAX_RULES {
                line(format!("({} more rules)", rows.len() - MAX_RULES));
            }
        }
        _ if screen.rule.is_some() => {
            line("(no checks under this rule in the last 15 minutes)".into())
        }
        _ => line("(no checks in the last 15 minutes)".into()),
    }

    let key_width = width.saturating_sub(20 + 10 + 9 + 12 + 4).clamp(16, 80);
    for (title, list) in [
        ("TOP DENIED", &screen.denied),
        ("TOP ALLOWED (sampled 1 in 16)", &screen.allowed),
    ] {
        line(String::new());
        line(format!("{title}, last {}", screen.window));
        line(format!(
            "{:<key_width$} {:<20} {:>10} {:>9} {:>11}",
            "KEY", "RULE", "COUNT", "±ERR", "SEEN"
        ));
        if list.is_empty() {
            line("(none)".into());
        }
        for e in list {
            line(format!(
                "{:<key_width$} {:<20} {:>10} {:>9} {:>11}",
                show_key(&e.key, key_width),
                cut(rule_name(&e.rule).to_string(), 20),
                e.count,
                e.error,
                format!("{} ago", ago(screen.at_ms, e.last_seen_ms)),
            ));
        }
    }

    line(String::new());
    line(format!(
        "{:<24} {:<8} {:<5} {:>6} {:>10} {:>9}",
        "NODE", "ROLE", "STATE", "SLOTS", "MEMORY", "REPLICAS"
    ));
    let mut problems = Vec::new();
    for n in &screen.nodes {
        let slots = n.slots.map_or("-".to_string(), |s| s.to_string());
        match &n.state {
            Ok(d) => {
                line(format!(
                    "{:<24} {:<8} {:<5} {slots:>6} {:>10} {:>9}",
                    n.addr, n.role, "up", d.memory, d.replicas
                ));
                if let Some(Err(e)) = &d.lists {
                    problems.push(format!("{e} (its keys are not counted)"));
                }
            }
            Err(e) => {
                line(format!(
                    "{:<24} {:<8} {:<5} {slots:>6} {:>10} {:>9}",
                    n.addr, n.role, "down", "-", "-"
                ));
                problems.push(e.clone());
            }
        }
    }
    for p in problems {
        line(p);
    }
    out
}

fn show_interval(i: Duration) -> String {
    if i.subsec_millis() == 0 {
        format!("{}s", i.as_secs())
    } else {
        format!("{}ms", i.as_millis())
    }
}

/// Each rule's (name, allowed/s, denied/s, shadow-denied/s) in the newest complete step (the
/// last step is still filling), the most denied first; only `rule` if given.
fn rates_rows(rates: &Rates, rule: Option<&str>) -> Vec<(String, f64, f64, f64)> {
    let secs = rates.step_ms.max(1) as f64 / 1000.0;
    let complete = |steps: &[u64]| {
        let n = steps.len();
        n.checked_sub(2).map_or(0.0, |i| steps[i] as f64 / secs)
    };
    let mut rows: Vec<_> = rates
        .rules
        .iter()
        .filter(|r| rule.is_none_or(|want| r.name == want))
        .map(|r| {
            (
                r.name.clone(),
                complete(&r.allowed),
                complete(&r.denied),
                complete(&r.shadow),
            )
        })
        .collect();
    rows.sort_by(|a, b| b.2.total_cmp(&a.2).then(b.1.total_cmp(&a.1)));
    rows
}

/// The terminal in screen mode: the alternate screen, no cursor, keys read one at a time
/// without echo. Dropping it restores everything.
struct Terminal {
    /// `stty -g` before: `None` when standard input is no terminal (no keys are read then).
    saved: Option<String>,
    /// Keeps the quit channel open while the screen runs.
    _events: Sender<()>,
}

/// Runs stty(1) on standard input, the terminal; its output.
fn stty(args: &[&str]) -> Option<String> {
    let out = Command::new("stty")
        .args(args)
        .stdin(Stdio::inherit())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

impl Terminal {
    fn enter(events: Sender<()>) -> Terminal {
        let saved = stty(&["-g"]);
        // Not -isig: Ctrl-C arrives as a key, read below, so the screen is restored before
        // the process ends.
        if saved.is_some()
            && stty(&["-icanon", "-echo", "-isig", "min", "1", "time", "0"]).is_some()
        {
            let keys = events.clone();
            std::thread::spawn(move || read_keys(keys));
        }
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(b"\x1b[?1049h\x1b[?25l");
        let _ = out.flush();
        Terminal {
            saved,
            _events: events,
        }
    }

    /// The terminal's columns (`stty size`), as it is now.
    fn width(&self) -> usize {
        self.saved
            .as_ref()
            .and_then(|_| stty(&["size"]))
            .and_then(|s| s.split_whitespace().nth(1)?.parse().ok())
            .unwrap_or(TEXT_WIDTH)
    }

    /// Draws `text` over the last screen: home, each line then clear to its end, then clear
    /// below; one write, so the screen does not flicker.
    fn draw(&self, text: &str) {
        let mut frame = String::from("\x1b[H");
        for l in text.lines() {
            frame.push_str(l);
            frame.push_str("\x1b[K\r\n");
        }
        frame.push_str("\x1b[J");
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(frame.as_bytes());
        let _ = out.flush();
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(b"\x1b[?25h\x1b[?1049l");
        let _ = out.flush();
        if let Some(saved) = &self.saved {
            stty(&[saved]);
        }
    }
}

/// Reads keys until `q`, `Q`, Ctrl-C or Ctrl-D, then says quit.
fn read_keys(quit: Sender<()>) {
    let mut stdin = std::io::stdin().lock();
    let mut buf = [0u8; 64];
    while let Ok(n @ 1..) = stdin.read(&mut buf) {
        if buf[..n]
            .iter()
            .any(|b| matches!(b, b'q' | b'Q' | 0x03 | 0x04))
        {
            let _ = quit.send(());
            return;
        }
    }
}

/// Says quit on SIGINT, SIGTERM or SIGHUP (from outside: Ctrl-C is a key here), so that the
/// terminal is restored before the process ends.
fn spawn_signal_watch(quit: Sender<()>) {
    std::thread::spawn(move || {
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        runtime.block_on(async {
            use tokio::signal::unix::{SignalKind, signal};
            let (Ok(mut int), Ok(mut term), Ok(mut hup)) = (
                signal(SignalKind::interrupt()),
                signal(SignalKind::terminate()),
                signal(SignalKind::hangup()),
            ) else {
                return;
            };
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
                _ = hup.recv() => {}
            }
        });
        let _ = quit.send(());
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &str, rule: &str, count: u64, seen: u64) -> TopEntry {
        TopEntry {
            key: key.as_bytes().to_vec(),
            rule: rule.into(),
            count,
            error: 3,
            last_seen_ms: seen,
        }
    }

    #[test]
    fn intervals_are_bounded() {
        assert_eq!(parse_interval("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_interval("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_interval("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_interval("0.5s"), Ok(Duration::from_millis(500)));
        for bad in ["0", "50ms", "2h", "", "nan", "inf", "-1", "3601"] {
            assert!(parse_interval(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn keys_are_shown_escaped_and_cut() {
        assert_eq!(show_key(b"user:42", 20), "user:42");
        assert_eq!(show_key(b"a\r\n\\b c", 40), "a\\x0d\\x0a\\x5cb c");
        assert_eq!(show_key(b"abcdefghij", 8), "abcde...");
        assert_eq!(ago(10_000, 9_500), "0s");
        assert_eq!(ago(200_000, 15_000), "3m05s");
        assert_eq!(ago(0, 5), "0s");
        assert_eq!(clock(86_400_000 + 3_723_000), "01:02:03");
    }

    #[test]
    fn the_screen_lists_rates_keys_and_nodes() {
        let rates = Rates {
            step_ms: 10_000,
            end_ms: 0,
            rules: vec![sluice_client::top::RuleRates {
                name: "api".into(),
                allowed: vec![0, 100, 7],
                denied: vec![0, 5000, 9],
                shadow: vec![0, 0, 0],
            }],
        };
        let screen = Screen {
            at_ms: 100_000,
            window: "1m".into(),
            interval: Some(Duration::from_secs(1)),
            nodes: vec![
                NodeRow {
                    addr: "127.0.0.1:7000".into(),
                    role: "primary",
                    slots: Some(16384),
                    state: Ok(NodeData {
                        role: "master".into(),
                        memory: "1.50M".into(),
                        replicas: "0".into(),
                        lists: None,
                    }),
                },
                NodeRow {
                    addr: "127.0.0.1:7001".into(),
                    role: "replica",
                    slots: Some(16384),
                    state: Err("cannot reach 127.0.0.1:7001: refused".into()),
                },
            ],
            rule: None,
            rates: Some(rates),
            denied: vec![
                entry("hot", "api", 5000, 99_000),
                entry("warm", "", 20, 40_000),
            ],
            allowed: Vec::new(),
            stale_table: None,
        };
        let text = render(&screen, 100);
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].contains("00:01:40 UTC  1 of 2 nodes answering  window 1m  every 1s"),
            "{text}"
        );
        let api = lines.iter().find(|l| l.starts_with("api ")).unwrap();
        assert_eq!(
            api.split_whitespace().collect::<Vec<_>>(),
            ["api", "10.0", "500.0", "0.0"]
        );
        let denied = lines
            .iter()
            .position(|l| l.starts_with("TOP DENIED"))
            .unwrap();
        let first: Vec<&str> = lines[denied + 2].split_whitespace().collect();
        assert_eq!(first, ["hot", "api", "5000", "3", "1s", "ago"]);
        assert!(lines[denied + 3].starts_with("warm "), "{text}");
        assert!(lines[denied + 3].contains(" - "), "{text}");
        assert!(text.contains("(none)"), "{text}");
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("127.0.0.1:7001") && l.contains("down"))
        );
        assert!(lines.last().unwrap().contains("refused"), "{text}");
        assert!(lines.iter().all(|l| l.chars().count() <= 100), "{text}");
    }
}
