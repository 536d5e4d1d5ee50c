//! # sluice-admin — `sluice cluster ...`, the admin tool, and `sluice top` ([`top`]), the live
//! screen of who is being limited. It talks RESP to the nodes (`conn`, a small synchronous
//! client over `sluice_resp::value`), computes tables with `sluice-cluster`, and drives slot
//! migrations step by step, printing each step.
//!
//! Every command checks that every node it needs answers before it changes anything. A step
//! that fails leaves the old table in force and says what to rerun.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use sluice_cluster::{Move, Node, SlotTable};

use conn::{Conn, Fallible, split_addr};

mod conn;
pub mod top;

/// `sluice cluster <command>`
#[derive(Debug, Args)]
pub struct Admin {
    /// Password of the nodes (their --requirepass, or `--user`'s).
    #[arg(long, global = true)]
    password: Option<String>,
    /// The ACL user to log in to the nodes as, with `--password` (default: `default`).
    #[arg(long, global = true, requires = "password")]
    user: Option<String>,
    /// The etcd that holds the table (the nodes' --etcd): the table is written there with
    /// compare-and-swap, then pushed to the nodes.
    #[arg(long, global = true)]
    etcd: Option<String>,
    /// The cluster's etcd key prefix (the nodes' --etcd-prefix).
    #[arg(
        long = "etcd-prefix",
        global = true,
        default_value = "/sluice/cluster/"
    )]
    etcd_prefix: String,
    /// The CA (PEM) that signs the etcd's certificate: etcd is reached over TLS.
    #[arg(long = "etcd-tls-ca-cert-file", global = true, value_name = "FILE")]
    etcd_tls_ca_cert_file: Option<std::path::PathBuf>,
    /// The client certificate (PEM) for an etcd with `--client-cert-auth`.
    #[arg(long = "etcd-tls-cert-file", global = true, value_name = "FILE", requires_all = ["etcd_tls_key_file", "etcd_tls_ca_cert_file"])]
    etcd_tls_cert_file: Option<std::path::PathBuf>,
    /// The private key of `--etcd-tls-cert-file` (PEM).
    #[arg(
        long = "etcd-tls-key-file",
        global = true,
        value_name = "FILE",
        requires = "etcd_tls_cert_file"
    )]
    etcd_tls_key_file: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: AdminCommand,
}

#[derive(Debug, Subcommand)]
enum AdminCommand {
    /// Computes a table for these nodes (consistent hashing), makes replicas follow their
    /// primaries, pushes the table to every node, and waits until every node is ok.
    Create {
        /// The nodes, each started with `--cluster yes`: primaries first, then (with
        /// `--replicas`) their replicas.
        #[arg(required = true, value_name = "HOST:PORT")]
        nodes: Vec<String>,
        /// Replicas per primary: the first nodes become primaries, the rest their replicas.
        #[arg(long, default_value_t = 0)]
        replicas: usize,
    },
    /// Adds an empty cluster node as a new primary: it takes about 1/N of the slots, with
    /// their buckets.
    AddNode {
        /// HOST:PORT of the node to add, started with `--cluster yes` and empty.
        #[arg(value_name = "NEW")]
        new: String,
        /// HOST:PORT of any node already in the cluster, to read the table from.
        #[arg(value_name = "EXISTING")]
        existing: String,
    },
    /// Removes a primary: its slots and their buckets move to the others.
    RemoveNode {
        /// HOST:PORT of the primary to remove; it can be stopped once this returns.
        #[arg(value_name = "NODE")]
        node: String,
        /// HOST:PORT of a node that stays in the cluster, to read the table from.
        #[arg(value_name = "EXISTING")]
        existing: String,
    },
    /// Prints the table, and keys and memory per node.
    Show {
        /// Any node of the cluster, to read the table from.
        #[arg(value_name = "HOST:PORT")]
        node: String,
    },
}

/// How long an old owner holds the moving slots' writes at most (`CLUSTER PAUSE`).
const PAUSE: Duration = Duration::from_millis(sluice_cluster::MAX_PAUSE_MS);
/// How long the handover may take before the table flips; well inside [`PAUSE`], so that no
/// old owner resumes writes to a slot whose new owner already serves it.
const CATCH_UP: Duration = Duration::from_secs(5);

/// Runs `sluice cluster <command>`; returns the exit code.
impl Admin {
    /// Who the tool logs in to the nodes as: `(user, password)`, if a password was given.
    fn auth(&self) -> Option<(Option<&str>, &str)> {
        let pass = self.password.as_deref()?;
        Some((self.user.as_deref(), pass))
    }
}

pub fn main(admin: Admin) -> i32 {
    let result = match &admin.command {
        AdminCommand::Create { nodes, replicas } => create(&admin, nodes, *replicas),
        AdminCommand::AddNode { new, existing } => add_node(&admin, new, existing),
        AdminCommand::RemoveNode { node, existing } => remove_node(&admin, node, existing),
        AdminCommand::Show { node } => show(&admin, node),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("[ERR] {e}");
            1
        }
    }
}

/// For tests of an admin tool killed mid-move: with `SLUICE_ADMIN_DIE_AT` set to `point`
/// (`imports`, `copied`, `paused` or `targets`), the process ends there at once, as a
/// `kill -9` would end it: no cancel, no unpause, its connections cut by the kernel.
fn die_at(point: &str) {
    if std::env::var("SLUICE_ADMIN_DIE_AT").is_ok_and(|p| p == point) {
        eprintln!("SLUICE_ADMIN_DIE_AT={point}: stopping here");
        std::process::abort();
    }
}

fn step(msg: &str) {
    println!(">>> {msg}");
}

/// Runs `f` against the cluster's etcd key on a short-lived runtime (the admin tool is
/// synchronous); `None` when the cluster does not keep its table in etcd.
fn with_etcd<T>(
    admin: &Admin,
    f: impl AsyncFnOnce(&mut sluice_etcd::Client, &str) -> Fallible<T>,
) -> Fallible<Option<T>> {
    let Some(url) = &admin.etcd else {
        return Ok(None);
    };
    let key = sluice_etcd::table::table_key(&admin.etcd_prefix);
    sluice_etcd::use_tls(&sluice_etcd::TlsArgs {
        etcd_tls_ca_cert_file: admin.etcd_tls_ca_cert_file.clone(),
        etcd_tls_cert_file: admin.etcd_tls_cert_file.clone(),
        etcd_tls_key_file: admin.etcd_tls_key_file.clone(),
    })?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime
        .block_on(async {
            let mut client = sluice_etcd::connect(url).await?;
            f(&mut client, &key).await
        })
        .map(Some)
}

/// Writes `table` to etcd with compare-and-swap, if the cluster keeps it there.
fn store_in_etcd(admin: &Admin, table: &SlotTable) -> Fallible<()> {
    let stored = with_etcd(admin, async |client, key| {
        sluice_etcd::table::compare_and_swap(client, key, table).await
    })?;
    if stored.is_some() {
        println!(
            "    etcd {} {} holds table epoch {}",
            admin.etcd.as_deref().unwrap_or_default(),
            sluice_etcd::table::table_key(&admin.etcd_prefix),
            table.epoch
        );
    }
    Ok(())
}

/// The table etcd holds, if the cluster keeps it there.
fn etcd_table(admin: &Admin) -> Fallible<Option<SlotTable>> {
    let read = with_etcd(admin, async |client, key| {
        Ok(sluice_etcd::table::read(client, key).await?.map(|(t, _)| t))
    })?;
    Ok(read.flatten())
}

fn describe(table: &SlotTable) {
    for (i, shard) in table.shards.iter().enumerate() {
        let ranges: Vec<String> = table
            .ranges
            .iter()
            .filter(|r| r.shard == i)
            .map(|r| format!("{}-{}", r.start, r.end))
            .collect();
        println!(
            "    primary {}:{} ({}) {} slots in {} ranges: {}",
            shard.primary.host,
            shard.primary.port,
            &shard.primary.id[..8],
            table.slots_of(i),
            ranges.len(),
            ranges.join(" ")
        );
        for r in &shard.replicas {
            println!("      replica {}:{} ({})", r.host, r.port, &r.id[..8]);
        }
    }
}

/// Waits until `f` holds, up to `secs`.
fn wait_until(secs: u64, mut f: impl FnMut() -> Fallible<bool>) -> Fallible<bool> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if f()? {
            return Ok(true);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(false)
}

fn create(admin: &Admin, addrs: &[String], replicas: usize) -> Fallible<()> {
    step(&format!("Checking {} nodes", addrs.len()));
    let mut conns = addrs
        .iter()
        .map(|a| Conn::open(admin.auth(), a))
        .collect::<Fallible<Vec<_>>>()
        .map_err(|e| format!("{e}; nothing changed"))?;
    let found = conns
        .iter_mut()
        .map(Conn::cluster_node)
        .collect::<Fallible<Vec<_>>>()
        .map_err(|e| format!("{e}; nothing changed"))?;
    let nodes: Vec<Node> = found.iter().map(|(n, _)| n.clone()).collect();
    let primaries = (nodes.len() / (replicas + 1)).max(1);
    let mut shards: Vec<(Node, Vec<Node>)> = nodes[..primaries]
        .iter()
        .map(|n| (n.clone(), Vec::new()))
        .collect();
    for (i, n) in nodes[primaries..].iter().enumerate() {
        shards[i % primaries].1.push(n.clone());
    }
    let table =
        sluice_cluster::try_create(1, shards).map_err(|e| format!("{e}; nothing changed"))?;
    // Placement is a function of the node list, so a rerun after a failed step computes the
    // same table: a node that already holds exactly it is fine, any other member of a cluster
    // is refused.
    for (c, (node, held)) in conns.iter().zip(&found) {
        if let Some(t) = held
            && t.shard_of(&node.id).is_some()
            && *t != table
        {
            return Err(format!(
                "{} already belongs to a cluster (table epoch {}); nothing changed",
                c.addr, t.epoch
            ));
        }
    }
    step(&format!(
        "Placement by consistent hashing ({} primaries, {} replicas, epoch 1):",
        primaries,
        nodes.len() - primaries
    ));
    describe(&table);
    let rerun = format!("rerun `sluice cluster create {}`", addrs.join(" "));
    if admin.etcd.is_some() {
        step("Storing the table in etcd");
        if let Err(e) = store_in_etcd(admin, &table) {
            if etcd_table(admin)?.as_ref() != Some(&table) {
                return Err(format!("{e}; nothing changed"));
            }
            println!("    etcd holds this table already");
        }
    }
    for shard in &table.shards {
        for r in &shard.replicas {
            let c = conns
                .iter_mut()
                .find(|c| c.port == r.port && c.host == r.host)
                .ok_or("internal: replica not connected")?;
            // A replica with `--tls-replication yes` reaches its primary's TLS port.
            let tls = c.setting("tls-replication")?.as_deref() == Some("yes");
            let port = match shard.primary.tls_port {
                Some(p) if tls => p,
                _ => shard.primary.port,
            };
            step(&format!(
                "{} replicates {}:{port}",
                c.addr, shard.primary.host
            ));
            let port = port.to_string();
            c.query::<String>(&["REPLICAOF", &shard.primary.host, &port])
                .map_err(|e| format!("{e}; {rerun} once the node is back"))?;
        }
    }
    step("Pushing the table to every node");
    for c in &mut conns {
        if let Err(e) = c.push(&table) {
            // A rerun, or (with etcd) the node read the table there first.
            if c.table().ok().flatten().as_ref() != Some(&table) {
                return Err(format!(
                    "{e}; {rerun} once the node is back (nodes that took the table keep it)"
                ));
            }
        }
        println!("    {} holds table epoch 1", c.addr);
    }
    step("Waiting for every node to report cluster_state:ok and every replica link up");
    for c in &mut conns {
        let ok = wait_until(60, || {
            let state = c.cluster_field("cluster_state")?;
            let role = c.field("replication", "role")?;
            let link = c.field("replication", "master_link_status")?;
            Ok(state.as_deref() == Some("ok")
                && (role.as_deref() == Some("master") || link.as_deref() == Some("up")))
        })?;
        if !ok {
            return Err(format!("{} did not become ok within 60 s", c.addr));
        }
    }
    println!(
        "[OK] All 16384 slots covered; {} nodes agree on epoch 1.",
        conns.len()
    );
    Ok(())
}

/// Connects to every node of `table`.
fn connect_all(admin: &Admin, table: &SlotTable) -> Fallible<BTreeMap<String, Conn>> {
    let mut all = BTreeMap::new();
    for n in table
        .shards
        .iter()
        .flat_map(|s| std::iter::once(&s.primary).chain(&s.replicas))
    {
        let c = Conn::open(admin.auth(), &format!("{}:{}", n.host, n.port))
            .map_err(|e| format!("{e}; nothing changed"))?;
        all.insert(n.id.clone(), c);
    }
    Ok(all)
}

/// Moves `moves` (old table → `new`) with their buckets, then installs `new` everywhere.
/// Importing nodes pull from the old owners; then each old owner pauses the moving slots'
/// writes, waits until its feeds acked everything, and the table flips.
fn migrate(
    admin: &Admin,
    conns: &mut BTreeMap<String, Conn>,
    old: &SlotTable,
    new: &SlotTable,
    moves: &[Move],
    rerun: &str,
) -> Fallible<()> {
    let started = Instant::now();
    let mut run = Migration::plan(admin, old, new, moves, rerun);
    run.count_earlier_imports(conns)?;
    run.start_imports(conns)?;
    die_at("imports");
    run.copy_buckets(conns, started)?;
    die_at("copied");

    step("Handing over: pause the moving slots' writes, send the last changes, flip the table");
    let pause_start = Instant::now();
    let (waiting, paused_at) = run.pause_sources(conns)?;
    die_at("paused");
    run.wait_for_acks(conns, waiting, pause_start)?;
    run.confirm_handover(conns, pause_start)?;
    run.push_to_targets(conns)?;
    die_at("targets");
    let (pause_ms, stale_sources) = run.push_to_the_rest(conns, &paused_at)?;
    println!(
        "[OK] {} slots moved in {} ms; longest write pause of a moving slot: {pause_ms} ms; table epoch {}",
        moves
            .iter()
            .map(|m| usize::from(m.end - m.start) + 1)
            .sum::<usize>(),
        started.elapsed().as_millis(),
        new.epoch
    );
    if !stale_sources.is_empty() {
        return Err(format!(
            "{} kept the old table: its writes to the moved slots resume when its pause ends \
             ({} s); stop it, or push it the table with `CLUSTER SETTABLE` (text: `CLUSTER GETTABLE` \
             on any node)",
            stale_sources.join(", "),
            PAUSE.as_secs()
        ));
    }
    Ok(())
}

/// One run of [`migrate`]: who imports which slots from whom, and which imports are this run's.
struct Migration<'a> {
    admin: &'a Admin,
    old: &'a SlotTable,
    new: &'a SlotTable,
    moves: &'a [Move],
    rerun: &'a str,
    /// (target id, source id) -> ranges
    plan: BTreeMap<(String, String), Vec<(u16, u16)>>,
    /// Each target, once, with how many imports it listed before this run: IMPORT-STATUS keeps
    /// every import since the node started, and only this run's may decide the outcome.
    targets: Vec<(String, usize)>,
    /// How many imports each target runs.
    imports_of: BTreeMap<String, usize>,
    /// How many feeds each source serves (one per target).
    feeds_of: BTreeMap<String, i64>,
}

/// An old owner's pause, until its feeds acked every write before it.
struct Handover {
    from: String,
    args: Vec<String>,
    offset: i64,
    second: bool,
}

/// What each target's IMPORT-STATUS lists for this run, by target address.
type ImportLines = Vec<(String, Vec<String>)>;

impl<'a> Migration<'a> {
    fn plan(
        admin: &'a Admin,
        old: &'a SlotTable,
        new: &'a SlotTable,
        moves: &'a [Move],
        rerun: &'a str,
    ) -> Self {
        let mut plan: BTreeMap<(String, String), Vec<(u16, u16)>> = BTreeMap::new();
        for m in moves {
            plan.entry((m.to.clone(), m.from.clone()))
                .or_default()
                .push((m.start, m.end));
        }
        let mut imports_of: BTreeMap<String, usize> = BTreeMap::new();
        let mut feeds_of: BTreeMap<String, i64> = BTreeMap::new();
        for (to, from) in plan.keys() {
            *imports_of.entry(to.clone()).or_default() += 1;
            *feeds_of.entry(from.clone()).or_default() += 1;
        }
        Migration {
            admin,
            old,
            new,
            moves,
            rerun,
            plan,
            targets: Vec::new(),
            imports_of,
            feeds_of,
        }
    }

    /// Resumes the old owners' writes and ends their feeds.
    fn cancel(&self, conns: &mut BTreeMap<String, Conn>) {
        for (_, source) in self.plan.keys() {
            if let Some(c) = conns.get_mut(source) {
                let _: Fallible<String> = c.query(&["CLUSTER", "UNPAUSE"]);
                let _: Fallible<String> = c.query(&["CLUSTER", "MIGRATE-CANCEL"]);
            }
        }
    }

    /// Cancels the handover; the error that says so.
    fn resume(&self, conns: &mut BTreeMap<String, Conn>, why: &str) -> String {
        self.cancel(conns);
        format!(
            "{why}; writes resumed on the old owners, the old table is in force; rerun `{}`",
            self.rerun
        )
    }

    fn count_earlier_imports(&mut self, conns: &mut BTreeMap<String, Conn>) -> Fallible<()> {
        for (to, _) in self.plan.keys() {
            if self.targets.iter().all(|(t, _)| t != to) {
                let c = conns.get_mut(to).ok_or("internal: target not connected")?;
                let earlier: Vec<String> = c
                    .query(&["CLUSTER", "IMPORT-STATUS"])
                    .map_err(|e| format!("{e}; nothing changed"))?;
                self.targets.push((to.clone(), earlier.len()));
            }
        }
        Ok(())
    }

    /// Each target starts pulling its ranges from each source.
    fn start_imports(&self, conns: &mut BTreeMap<String, Conn>) -> Fallible<()> {
        for ((to, from), ranges) in &self.plan {
            let src = self
                .old
                .shards
                .iter()
                .map(|s| &s.primary)
                .find(|p| &p.id == from)
                .ok_or("internal: source not in the old table")?;
            let listed: Vec<String> = ranges.iter().map(|(a, b)| format!("{a}-{b}")).collect();
            let slots: usize = ranges.iter().map(|(a, b)| usize::from(b - a) + 1).sum();
            let t = conns.get_mut(to).ok_or("internal: target not connected")?;
            step(&format!(
                "{} imports {slots} slots ({} ranges) from {}:{}",
                t.addr,
                ranges.len(),
                src.host,
                src.port
            ));
            let port = src.port.to_string();
            let mut args = vec!["CLUSTER", "IMPORT", src.host.as_str(), port.as_str()];
            // A target with `--tls-cluster yes` reaches the source on its TLS port.
            let tls_port = src.tls_port.map(|p| p.to_string());
            if let Some(tls_port) = &tls_port {
                args.extend(["TLS-PORT", tls_port.as_str()]);
            }
            args.extend(listed.iter().map(String::as_str));
            if let Err(e) = t.query::<String>(&args) {
                self.cancel(conns);
                return Err(format!(
                    "{e}; the old table is still in force; rerun `{}`",
                    self.rerun
                ));
            }
        }
        Ok(())
    }

    /// This run's imports, as IMPORT-STATUS lines per target; an import the target has not
    /// started yet is not listed, so "all streaming" also needs the count.
    fn this_run(&self, conns: &mut BTreeMap<String, Conn>) -> Fallible<ImportLines> {
        let mut out = Vec::new();
        for (to, earlier) in &self.targets {
            let c = conns.get_mut(to).ok_or("internal: target not connected")?;
            let lines: Vec<String> = c.query(&["CLUSTER", "IMPORT-STATUS"])?;
            out.push((c.addr.clone(), lines.into_iter().skip(*earlier).collect()));
        }
        Ok(out)
    }

    fn all_streaming(&self, lines: &[(String, Vec<String>)]) -> Fallible<bool> {
        let mut streaming = true;
        for ((addr, lines), (to, _)) in lines.iter().zip(&self.targets) {
            if let Some(l) = lines
                .iter()
                .find(|l| l.contains("state=failed") || l.contains("state=closed"))
            {
                return Err(format!("import on {addr} ended ({l})"));
            }
            streaming &= lines.len() == self.imports_of[to]
                && lines.iter().all(|l| l.contains("state=streaming"));
        }
        Ok(streaming)
    }

    /// Waits until every import streams (its snapshot loaded), printing progress.
    fn copy_buckets(&self, conns: &mut BTreeMap<String, Conn>, started: Instant) -> Fallible<()> {
        step("Copying buckets (snapshot of the moving slots, then their changes as they happen)");
        let deadline = Instant::now() + Duration::from_secs(600);
        let mut last_print = Instant::now();
        loop {
            let status = self
                .this_run(conns)
                .and_then(|lines| Ok((self.all_streaming(&lines)?, lines)));
            let (done, lines) = match status {
                Ok(s) => s,
                Err(e) => {
                    self.cancel(conns);
                    return Err(format!(
                        "{e}; the old table is still in force; rerun `{}`",
                        self.rerun
                    ));
                }
            };
            if done {
                let loaded: u64 = lines
                    .iter()
                    .flat_map(|(_, l)| l)
                    .filter_map(|l| {
                        l.split_whitespace()
                            .find_map(|w| w.strip_prefix("entries="))
                            .and_then(|n| n.parse::<u64>().ok())
                    })
                    .sum();
                println!(
                    "    {loaded} buckets copied in {} ms",
                    started.elapsed().as_millis()
                );
                return Ok(());
            }
            if last_print.elapsed() > Duration::from_secs(1) {
                println!("    ... {} s, still copying", started.elapsed().as_secs());
                last_print = Instant::now();
            }
            if Instant::now() > deadline {
                self.cancel(conns);
                return Err(format!(
                    "copying took over 10 minutes; rerun `{}`",
                    self.rerun
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Every source pauses first, then all are waited for together ([`Self::wait_for_acks`]):
    /// the pauses overlap instead of adding up. Each source is paused twice: a write that
    /// passed the pause check on another of the source's threads just before the first PAUSE
    /// lands in the stream after its offset; once the targets acked that offset, the second
    /// PAUSE's offset covers it. That narrows the window to a thread stalled between its check
    /// and its write for a whole round trip; closing it takes the node waiting for writes in
    /// flight when it pauses.
    fn pause_sources(
        &self,
        conns: &mut BTreeMap<String, Conn>,
    ) -> Fallible<(Vec<Handover>, BTreeMap<String, Instant>)> {
        let pause_ms = PAUSE.as_millis().to_string();
        let mut waiting: Vec<Handover> = Vec::new();
        let mut paused_at: BTreeMap<String, Instant> = BTreeMap::new();
        for from in self.feeds_of.keys() {
            let mut args = vec!["CLUSTER".to_string(), "PAUSE".into(), pause_ms.clone()];
            args.extend(
                self.moves
                    .iter()
                    .filter(|m| &m.from == from)
                    .map(|m| format!("{}-{}", m.start, m.end)),
            );
            let c = conns.get_mut(from).ok_or("internal")?;
            paused_at.insert(from.clone(), Instant::now());
            let argv: Vec<&str> = args.iter().map(String::as_str).collect();
            match c.query::<i64>(&argv) {
                Ok(offset) => waiting.push(Handover {
                    from: from.clone(),
                    args,
                    offset,
                    second: false,
                }),
                Err(e) => return Err(self.resume(conns, &e)),
            }
        }
        Ok((waiting, paused_at))
    }

    /// Waits until every feed of each source (one per target) acked up to its pause's offset,
    /// pausing each source the second time once its first offset is acked.
    fn wait_for_acks(
        &self,
        conns: &mut BTreeMap<String, Conn>,
        mut waiting: Vec<Handover>,
        pause_start: Instant,
    ) -> Fallible<()> {
        while !waiting.is_empty() {
            let mut failed = None;
            for h in &mut waiting {
                let Some(c) = conns.get_mut(&h.from) else {
                    continue;
                };
                let acked = c
                    .query::<(i64, i64)>(&["CLUSTER", "MIGRATE-STATUS"])
                    .map(|(feeds, acked)| feeds == self.feeds_of[&h.from] && acked >= h.offset);
                match acked {
                    Ok(true) if !h.second => {
                        let argv: Vec<&str> = h.args.iter().map(String::as_str).collect();
                        match c.query::<i64>(&argv) {
                            Ok(offset) => {
                                h.offset = offset;
                                h.second = true;
                            }
                            Err(e) => failed = Some(e),
                        }
                    }
                    Ok(true) => h.from.clear(),
                    Ok(false) => {}
                    Err(e) => failed = Some(e),
                }
                if failed.is_some() {
                    break;
                }
            }
            waiting.retain(|h| !h.from.is_empty());
            if failed.is_none() && !waiting.is_empty() && pause_start.elapsed() > CATCH_UP {
                let addrs: Vec<&str> = waiting
                    .iter()
                    .filter_map(|h| conns.get(&h.from).map(|c| c.addr.as_str()))
                    .collect();
                failed = Some(format!(
                    "the new owners did not confirm the last changes of {} in time",
                    addrs.join(", ")
                ));
            }
            if let Some(why) = failed {
                return Err(self.resume(conns, &why));
            }
            if !waiting.is_empty() {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        Ok(())
    }

    /// The feeds all acked; no import may have ended meanwhile (its last changes would be
    /// lost), and every pause must still hold while the new owners take the table. With etcd,
    /// the table is committed there now.
    fn confirm_handover(
        &self,
        conns: &mut BTreeMap<String, Conn>,
        pause_start: Instant,
    ) -> Fallible<()> {
        let still = self
            .this_run(conns)
            .and_then(|lines| self.all_streaming(&lines));
        if !matches!(still, Ok(true)) || pause_start.elapsed() > CATCH_UP {
            let why = match still {
                Err(e) => e,
                Ok(_) => format!("the handover took {} ms", pause_start.elapsed().as_millis()),
            };
            return Err(self.resume(conns, &why));
        }
        if self.admin.etcd.is_some()
            && let Err(e) = store_in_etcd(self.admin, self.new)
        {
            return Err(self.resume(conns, &e));
        }
        Ok(())
    }

    /// The new owners take the table first (they hold everything). With etcd the table is
    /// committed once stored there and the nodes also learn it from their watch, so "not
    /// newer" only means the watch was faster.
    fn push_to_targets(&self, conns: &mut BTreeMap<String, Conn>) -> Fallible<()> {
        let mut took: Vec<&str> = Vec::new();
        for (id, _) in &self.targets {
            let c = conns.get_mut(id).ok_or("internal")?;
            match c.push(self.new) {
                Ok(()) => took.push(id),
                Err(e) if self.admin.etcd.is_some() => {
                    if !e.contains("not newer") {
                        println!(
                            "    {} did not take the table ({e}); it reads it from etcd",
                            c.addr
                        );
                    }
                }
                Err(e) => {
                    // Without etcd, a new owner that took the table serves its slots: give
                    // every node the old placement under a newer epoch, so no slot has two
                    // owners.
                    let back = self.old.with_epoch(self.new.epoch + 1);
                    if !took.is_empty() {
                        for c in conns.values_mut() {
                            if let Err(e) = c.push(&back) {
                                println!(
                                    "    {} did not take the old placement back ({e})",
                                    c.addr
                                );
                            }
                        }
                    }
                    self.cancel(conns);
                    let restored = if took.is_empty() {
                        "the old table is still in force".to_string()
                    } else {
                        format!("table epoch {} restores the old placement", back.epoch)
                    };
                    return Err(format!("{e}; {restored}; rerun `{}`", self.rerun));
                }
            }
        }
        Ok(())
    }

    /// Then the old owners (which stop serving), then everyone else. Returns the longest
    /// write pause of a moving slot, in ms, and the old owners that kept the old table.
    fn push_to_the_rest(
        &self,
        conns: &mut BTreeMap<String, Conn>,
        paused_at: &BTreeMap<String, Instant>,
    ) -> Fallible<(u128, Vec<String>)> {
        let etcd = self.admin.etcd.is_some();
        let mut order: Vec<String> = self.feeds_of.keys().cloned().collect();
        order.extend(conns.keys().cloned());
        let mut seen: std::collections::BTreeSet<String> =
            self.targets.iter().map(|(to, _)| to.clone()).collect();
        order.retain(|id| seen.insert(id.clone()));
        let mut pause_ms = 0;
        let mut stale_sources = Vec::new();
        for id in &order {
            let c = conns.get_mut(id).ok_or("internal")?;
            let mut pushed = c.push(self.new);
            // An old owner that keeps the old table serves the moved slots again once its
            // pause ends: try it on fresh connections before giving up on it.
            for _ in 0..3 {
                if pushed.is_ok() || !paused_at.contains_key(id) || etcd {
                    break;
                }
                std::thread::sleep(Duration::from_millis(200));
                pushed = Conn::open(self.admin.auth(), &c.addr.clone()).and_then(|mut fresh| {
                    fresh.push(self.new)?;
                    *c = fresh;
                    Ok(())
                });
            }
            match pushed {
                Ok(()) => {}
                Err(e) if e.contains("not newer") && etcd => {}
                Err(e) => {
                    println!(
                        "    {} did not take the table ({e}); it learns it from its peers when it restarts",
                        c.addr
                    );
                    if paused_at.contains_key(id) && !etcd {
                        stale_sources.push(c.addr.clone());
                    }
                    continue;
                }
            }
            // A source's moving slots were paused from its PAUSE until it took the table.
            if let Some(at) = paused_at.get(id) {
                pause_ms = pause_ms.max(at.elapsed().as_millis());
            }
        }
        Ok((pause_ms, stale_sources))
    }
}

fn add_node(admin: &Admin, new_addr: &str, existing: &str) -> Fallible<()> {
    step(&format!("Reading the table from {existing}"));
    let old = Conn::open(admin.auth(), existing)?
        .table()?
        .ok_or_else(|| format!("{existing} has no table yet: run `sluice cluster create` first"))?;
    let mut conns = connect_all(admin, &old)?;
    let mut newc =
        Conn::open(admin.auth(), new_addr).map_err(|e| format!("{e}; nothing changed"))?;
    let node = newc
        .empty_node()
        .map_err(|e| format!("{e}; nothing changed"))?;
    let new = sluice_cluster::try_add_shard(&old, node.clone(), Vec::new())
        .map_err(|e| format!("{e}; nothing changed"))?;
    let moves = sluice_cluster::moves(&old, &new);
    let moved: usize = moves.iter().map(|m| usize::from(m.end - m.start) + 1).sum();
    step(&format!(
        "{new_addr} takes {moved} of 16384 slots ({:.1}%), all from existing primaries:",
        moved as f64 * 100.0 / 16384.0
    ));
    describe(&new);
    conns.insert(node.id.clone(), newc);
    migrate(
        admin,
        &mut conns,
        &old,
        &new,
        &moves,
        &format!("sluice cluster add-node {new_addr} {existing}"),
    )
}

fn remove_node(admin: &Admin, addr: &str, existing: &str) -> Fallible<()> {
    step(&format!("Reading the table from {existing}"));
    let old = Conn::open(admin.auth(), existing)?
        .table()?
        .ok_or_else(|| format!("{existing} has no table"))?;
    let mut conns = connect_all(admin, &old)?;
    let (host, port) = split_addr(addr)?;
    let id = old
        .shards
        .iter()
        .map(|s| &s.primary)
        .find(|p| p.host == host && p.port == port)
        .map(|p| p.id.clone())
        .ok_or_else(|| format!("{addr} is not a primary of this cluster; nothing changed"))?;
    let new = sluice_cluster::remove_shard(&old, &id)
        .ok_or_else(|| format!("{addr} is the last primary; nothing changed"))?;
    let moves = sluice_cluster::moves(&old, &new);
    step(&format!(
        "{addr}'s {} slots go to the other primaries:",
        moves
            .iter()
            .map(|m| usize::from(m.end - m.start) + 1)
            .sum::<usize>()
    ));
    describe(&new);
    migrate(
        admin,
        &mut conns,
        &old,
        &new,
        &moves,
        &format!("sluice cluster remove-node {addr} {existing}"),
    )?;
    println!("    {addr} serves no slot now; stop it when you like (its replicas too).");
    Ok(())
}

fn show(admin: &Admin, addr: &str) -> Fallible<()> {
    let table = Conn::open(admin.auth(), addr)?
        .table()?
        .ok_or_else(|| format!("{addr} has no table"))?;
    println!("Table epoch {}:", table.epoch);
    describe(&table);
    println!(
        "{:<22} {:>8} {:>7} {:>12} {:>12}",
        "node", "role", "slots", "keys", "memory"
    );
    for (i, shard) in table.shards.iter().enumerate() {
        for (n, role) in std::iter::once((&shard.primary, "primary"))
            .chain(shard.replicas.iter().map(|r| (r, "replica")))
        {
            let a = format!("{}:{}", n.host, n.port);
            let (keys, mem) = match Conn::open(admin.auth(), &a) {
                Ok(mut c) => (
                    c.query::<i64>(&["DBSIZE"])
                        .map_or("?".into(), |k| k.to_string()),
                    c.field("memory", "used_memory_human")
                        .ok()
                        .flatten()
                        .unwrap_or_else(|| "?".into()),
                ),
                Err(_) => ("down".into(), "down".into()),
            };
            println!(
                "{a:<22} {role:>8} {:>7} {keys:>12} {mem:>12}",
                table.slots_of(i)
            );
        }
    }
    Ok(())
}
