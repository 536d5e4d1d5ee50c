//! Cluster mode end to end: real `sluice --cluster yes` nodes on loopback, the admin tool
//! (`sluice cluster ...`), and real clients: redis-rs `cluster-async`, `redis-cli -c` and
//! `redis-benchmark --cluster`.
//!
//! Asserted: create (exit 0, every node ok, every node's CLUSTER SLOTS the same and covering
//! every slot); MOVED to the right slot and owner, again and again for a client that ignores
//! it, and nothing consumed by it; CROSSSLOT and hash tags; exact limits with 16 concurrent
//! cluster clients; add-node and remove-node under a bounded background load (half of it on
//! connections that sent READONLY) with every bucket kept (the preloaded ones and the ones the
//! load consumed, to the unit); a node restarted with its config file; a node that was down
//! while the table changed adopting the newer table before it serves a key; bad tables refused
//! with the table unchanged; the admin tool failing before anything changes when a node is
//! unreachable; and the table kept in a real etcd.
//!
//! Every wait has a deadline; every process is stopped by its PID when its guard drops.
//! `cargo test -p sluice-tests --test cluster -- --nocapture` prints what the moves cost.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use redis::cluster_async::ClusterConnection;
use sluice_tests::{
    Etcd, SlotsEntry, Sluice, TempDir, cluster_client, cluster_client_with, cluster_info_field,
    cluster_node, cluster_rl_check, cluster_slots, covers_every_slot, have_tool, key_slot,
    owner_of, redis_benchmark, redis_cli, runtime, sluice_cluster, try_connect, wait_until,
};

/// A set of cluster nodes with their config files in one temporary directory.
/// The nodes are stopped (dropped) before their directory is removed.
struct Nodes {
    nodes: Vec<Sluice>,
    extra: Vec<String>,
    dir: TempDir,
}

impl Nodes {
    fn start(n: usize, extra: &[&str]) -> Nodes {
        let mut set = Nodes {
            nodes: Vec::new(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            dir: TempDir::new("cluster"),
        };
        for _ in 0..n {
            set.add();
        }
        set
    }

    /// Starts one more node on a free port.
    fn add(&mut self) -> usize {
        let i = self.nodes.len();
        let extra: Vec<&str> = self.extra.iter().map(String::as_str).collect();
        self.nodes.push(cluster_node(0, &self.config(i), &extra));
        i
    }

    fn config(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("nodes-{i}.conf"))
    }

    fn port(&self, i: usize) -> u16 {
        self.nodes[i].port
    }

    fn addr(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.port(i))
    }

    fn urls(&self, which: &[usize]) -> Vec<String> {
        which.iter().map(|&i| self.nodes[i].url()).collect()
    }

    /// SIGTERM, then waits for the exit (the port is free again afterwards).
    fn stop(&mut self, i: usize) {
        self.nodes[i].signal(libc::SIGTERM);
        assert!(
            self.nodes[i].wait_exit(Duration::from_secs(10)).is_some(),
            "node {} did not exit on SIGTERM",
            self.port(i)
        );
    }

    /// Starts node `i` again on its port with its config file.
    fn restart(&mut self, i: usize) {
        let extra: Vec<&str> = self.extra.iter().map(String::as_str).collect();
        let node = cluster_node(self.port(i), &self.config(i), &extra);
        self.nodes[i] = node;
    }
}

/// Runs the admin tool and asserts it exits 0; returns its standard output.
fn admin_ok(args: &[&str]) -> String {
    let out = sluice_cluster(args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "sluice cluster {args:?} failed ({:?}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Runs the admin tool and asserts it fails with exit 1 and an `[ERR]` line; returns it.
fn admin_fails(args: &[&str]) -> String {
    let out = sluice_cluster(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(1),
        "sluice cluster {args:?} should fail:\n{}\n{stderr}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(stderr.contains("[ERR]"), "{stderr}");
    stderr
}

/// The figures of the admin tool's `[OK] N slots moved in X ms; longest write pause of a
/// moving slot: Y ms` line.
fn moved_figures(stdout: &str) -> (u64, u64, u64) {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("[OK]") && l.contains("slots moved"))
        .unwrap_or_else(|| panic!("no [OK] line:\n{stdout}"));
    let nums: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    (nums[0], nums[1], nums[2])
}

fn current_epoch(port: u16) -> Option<u64> {
    cluster_info_field(port, "cluster_current_epoch")?
        .parse()
        .ok()
}

/// Waits until every node in `ports` shows the same CLUSTER SLOTS, covering every slot, at
/// `epoch`; returns it.
fn agreed_slots(ports: &[u16], epoch: u64) -> Vec<SlotsEntry> {
    wait_until(Duration::from_secs(10), || {
        let first = cluster_slots(ports[0])?;
        let same = ports
            .iter()
            .all(|&p| current_epoch(p) == Some(epoch) && cluster_slots(p).as_ref() == Some(&first));
        (same && covers_every_slot(&first)).then_some(first)
    })
    .unwrap_or_else(|| {
        let seen: Vec<_> = ports
            .iter()
            .map(|&p| (p, current_epoch(p), cluster_slots(p)))
            .collect();
        panic!("the nodes do not agree on table epoch {epoch}: {seen:#?}")
    })
}

/// `CODE detail` of an error reply, as it came over the wire.
fn err_line(e: &redis::RedisError) -> String {
    format!("{} {}", e.code().unwrap_or("?"), e.detail().unwrap_or(""))
}

fn raw_check(port: u16, args: &[&str]) -> Result<Vec<i64>, String> {
    let mut c = try_connect(port).ok_or("no connection")?;
    let mut cmd = redis::cmd("RL.CHECK");
    for a in args {
        cmd.arg(*a);
    }
    cmd.query(&mut c).map_err(|e| err_line(&e))
}

#[test]
fn create_moved_crossslot_exact_limits_and_bad_tables() {
    let started = Instant::now();
    let set = Nodes::start(3, &[]);
    let ports: Vec<u16> = (0..3).map(|i| set.port(i)).collect();
    let addrs: Vec<String> = (0..3).map(|i| set.addr(i)).collect();

    // Before create: no slot served.
    assert_eq!(
        raw_check(ports[0], &["k", "10", "1d"]),
        Err("CLUSTERDOWN Hash slot not served".into())
    );

    // The admin tool against an unreachable node fails before anything changes.
    let dead = format!("127.0.0.1:{}", sluice_tests::free_port());
    let mut args = vec!["create"];
    args.extend(addrs.iter().map(String::as_str));
    args.push(&dead);
    let err = admin_fails(&args);
    assert!(
        err.contains("cannot reach") && err.contains("nothing changed"),
        "{err}"
    );
    for &p in &ports {
        assert_eq!(current_epoch(p), Some(0), "node {p} took a table");
    }

    // create: exit 0, every node ok and agreeing.
    args.pop();
    let out = admin_ok(&args);
    assert!(out.contains("[OK] All 16384 slots covered"), "{out}");
    for &p in &ports {
        assert_eq!(
            cluster_info_field(p, "cluster_state").as_deref(),
            Some("ok")
        );
        assert_eq!(
            cluster_info_field(p, "cluster_known_nodes").as_deref(),
            Some("3")
        );
    }
    let slots = agreed_slots(&ports, 1);
    let owners: BTreeSet<u16> = slots.iter().map(|e| e.primary).collect();
    assert_eq!(owners, ports.iter().copied().collect(), "{slots:?}");
    // A rerun (what a failed create says to do) computes the same table and changes nothing;
    // another node list with members of this cluster is refused.
    let again = admin_ok(&args);
    assert!(again.contains("[OK]"), "{again}");
    let err = admin_fails(&["create", &addrs[0], &addrs[1]]);
    assert!(err.contains("already belongs to a cluster"), "{err}");
    assert_eq!(agreed_slots(&ports, 1), slots);

    moved_redirects_and_consumes_nothing(&ports, &slots);
    crossslot_on_the_wire(&ports);
    let rt = runtime();
    let urls = set.urls(&[0, 1, 2]);
    hash_tags_keep_keys_together(&rt, &urls);
    exact_limits_over_the_cluster(&rt, &urls, &slots);
    redis_tools_follow_moved(&ports, &slots);
    bad_tables_are_refused(ports[2]);

    assert_eq!(agreed_slots(&ports, 1), slots);
    println!("test took {:?}", started.elapsed());
}

/// MOVED: the right slot and owner, again and again for a client that ignores it, and the
/// redirected request consumed nothing.
fn moved_redirects_and_consumes_nothing(ports: &[u16], slots: &[SlotsEntry]) {
    let mut moved_seen = 0;
    for i in 0..30 {
        let key = format!("moved:{i}");
        let slot = key_slot(key.as_bytes());
        let mut c = try_connect(ports[0]).unwrap();
        let told: i64 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(&key)
            .query(&mut c)
            .unwrap();
        assert_eq!(told, i64::from(slot), "CLUSTER KEYSLOT {key}");
        let owner = owner_of(slots, slot).unwrap();
        let wrong = *ports.iter().find(|&&p| p != owner).unwrap();
        for _ in 0..3 {
            assert_eq!(
                raw_check(wrong, &[&key, "10", "1d"]),
                Err(format!("MOVED {slot} 127.0.0.1:{owner}")),
                "{key} on :{wrong}"
            );
            moved_seen += 1;
        }
        let fresh = raw_check(owner, &[&key, "10", "1d", "DRY"]).unwrap();
        assert_eq!(
            fresh[2], 9,
            "{key}: a MOVED request consumed something: {fresh:?}"
        );
    }
    assert_eq!(moved_seen, 90);
}

/// CROSSSLOT on the wire.
fn crossslot_on_the_wire(ports: &[u16]) {
    assert_ne!(key_slot(b"a"), key_slot(b"b"));
    for &p in ports {
        let mut c = try_connect(p).unwrap();
        let r: redis::RedisResult<i64> = redis::cmd("DEL").arg("a").arg("b").query(&mut c);
        assert_eq!(
            err_line(&r.unwrap_err()),
            "CROSSSLOT Keys in request don't hash to the same slot"
        );
    }
    assert_eq!(key_slot(b"{u}a"), key_slot(b"{u}b"));
}

/// Hash tags keep keys together: a multi-key DEL over one tag works through a cluster client.
fn hash_tags_keep_keys_together(rt: &tokio::runtime::Runtime, urls: &[String]) {
    rt.block_on(async {
        let mut c = cluster_client(urls.to_vec()).await;
        let () = redis::cmd("SET")
            .arg("{u}a")
            .arg(1)
            .query_async(&mut c)
            .await
            .unwrap();
        let () = redis::cmd("SET")
            .arg("{u}b")
            .arg(2)
            .query_async(&mut c)
            .await
            .unwrap();
        let n: i64 = redis::cmd("DEL")
            .arg("{u}a")
            .arg("{u}b")
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(n, 2, "DEL {{u}}a {{u}}b");
    });
}

/// Exact limits: 16 concurrent cluster clients, 50 keys spread over the three nodes, each
/// key tried 64 times: exactly LIMIT allowed per key.
fn exact_limits_over_the_cluster(
    rt: &tokio::runtime::Runtime,
    urls: &[String],
    slots: &[SlotsEntry],
) {
    const LIMIT: i64 = 40;
    const KEYS: usize = 50;
    const TASKS: usize = 16;
    const TRIES: usize = 4;
    let key = |k: usize| format!("exact:{k}");
    let spread: BTreeSet<u16> = (0..KEYS)
        .map(|k| owner_of(slots, key_slot(key(k).as_bytes())).unwrap())
        .collect();
    assert_eq!(spread.len(), 3, "the keys should live on every node");
    let allowed: Vec<i64> = rt.block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        for t in 0..TASKS {
            let urls = urls.to_vec();
            tasks.spawn(async move {
                let mut c = cluster_client(urls).await;
                let mut allowed = vec![0i64; KEYS];
                for n in 0..KEYS * TRIES {
                    let k = (n + t * 3) % KEYS;
                    let r = cluster_rl_check(&mut c, &[&key(k), &LIMIT.to_string(), "1d"])
                        .await
                        .unwrap();
                    allowed[k] += r[0];
                }
                allowed
            });
        }
        let mut total = vec![0i64; KEYS];
        while let Some(r) = tasks.join_next().await {
            for (t, a) in total.iter_mut().zip(r.unwrap()) {
                *t += a;
            }
        }
        total
    });
    for (k, a) in allowed.iter().enumerate() {
        assert_eq!(
            *a,
            LIMIT,
            "{}: {a} allowed of {} tries",
            key(k),
            TASKS * TRIES
        );
    }
}

/// redis-cli -c follows MOVED; redis-benchmark --cluster runs RL.CHECK with {tag}.
fn redis_tools_follow_moved(ports: &[u16], slots: &[SlotsEntry]) {
    if have_tool("redis-cli") {
        let cli_key = "cli:key";
        let owner = owner_of(slots, key_slot(cli_key.as_bytes())).unwrap();
        let wrong = *ports.iter().find(|&&p| p != owner).unwrap();
        let out = redis_cli(wrong, &["-c", "RL.CHECK", cli_key, "10", "1d", "COST", "3"]);
        let text = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[..4], ["1", "10", "7", "-1"], "redis-cli -c: {text}");
        assert_eq!(
            raw_check(owner, &[cli_key, "10", "1d", "DRY"]).unwrap()[2],
            6
        );
    }
    if have_tool("redis-benchmark") {
        let out = redis_benchmark(
            ports[1],
            &[
                "--cluster",
                "-n",
                "20000",
                "-r",
                "1000",
                "-P",
                "16",
                "-c",
                "8",
                "-q",
                "RL.CHECK",
                "bench:{tag}:__rand_int__",
                "100",
                "1d",
            ],
        );
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "redis-benchmark --cluster: {text}");
        assert!(text.contains("requests per second"), "{text}");
        assert!(!text.to_lowercase().contains("error"), "{text}");
        let keys: i64 = ports
            .iter()
            .map(|&p| {
                let mut c = try_connect(p).unwrap();
                redis::cmd("DBSIZE").query::<i64>(&mut c).unwrap()
            })
            .sum();
        assert!(keys > 1000, "the benchmark's buckets: {keys} keys");
        println!(
            "redis-benchmark --cluster: {}",
            text.rsplit('\r')
                .find(|l| !l.trim().is_empty())
                .unwrap_or("")
                .trim()
        );
    }
}

/// Bad tables are refused and the table stays.
fn bad_tables_are_refused(port: u16) {
    let mut c = try_connect(port).unwrap();
    let table: String = redis::cmd("CLUSTER").arg("GETTABLE").query(&mut c).unwrap();
    let with = |epoch: u64, f: &dyn Fn(&str) -> Option<String>| -> String {
        let mut out = String::new();
        for l in table.lines() {
            let l = if l.starts_with("epoch ") {
                format!("epoch {epoch}")
            } else {
                l.to_string()
            };
            if let Some(l) = f(&l) {
                out.push_str(&l);
                out.push('\n');
            }
        }
        out
    };
    let first_range = table
        .lines()
        .find(|l| l.starts_with("range "))
        .unwrap()
        .to_string();
    let some_id = table
        .lines()
        .find_map(|l| l.strip_prefix("shard ")?.split_whitespace().next())
        .unwrap()
        .to_string();
    let bad = [
        (
            "gap",
            with(2, &|l| (l != first_range).then(|| l.to_string())),
            "ERR invalid table: gap at slot",
        ),
        (
            "overlap",
            format!("{}range 100 200 0\n", with(2, &|l| Some(l.to_string()))),
            "ERR invalid table: overlap at slot",
        ),
        (
            "unknown shard in a range",
            with(2, &|l| {
                Some(if l == first_range {
                    let f: Vec<&str> = l.split_whitespace().collect();
                    format!("range {} {} 9", f[1], f[2])
                } else {
                    l.to_string()
                })
            }),
            "ERR invalid table: unknown shard index 9",
        ),
        (
            "unknown shard of a replica",
            format!(
                "{}replica 7 {} 127.0.0.1 1\n",
                with(2, &|l| Some(l.to_string())),
                "f".repeat(40)
            ),
            "ERR invalid table: unknown shard index 7",
        ),
        (
            "a node twice",
            format!(
                "{}replica 0 {some_id} 127.0.0.1 1\n",
                with(2, &|l| Some(l.to_string()))
            ),
            "ERR invalid table: duplicate node id",
        ),
        (
            "lower epoch",
            with(0, &|l| Some(l.to_string())),
            "ERR table epoch 0 is not newer than this node's epoch 1",
        ),
        (
            "same epoch",
            with(1, &|l| Some(l.to_string())),
            "ERR table epoch 1 is not newer than this node's epoch 1",
        ),
    ];
    for (what, text, expected) in bad {
        let r: redis::RedisResult<String> = redis::cmd("CLUSTER")
            .arg("SETTABLE")
            .arg(&text)
            .query(&mut c);
        let e = r.expect_err(what);
        let line = format!("{} {}", e.code().unwrap_or("?"), e.detail().unwrap_or(""));
        assert!(line.starts_with(expected), "{what}: {line}");
        let now: String = redis::cmd("CLUSTER").arg("GETTABLE").query(&mut c).unwrap();
        assert_eq!(now, table, "{what}: the table changed");
    }
}

/// What the background load saw: per key, how many checks were allowed.
#[derive(Debug, Default)]
struct LoadStats {
    allowed: BTreeMap<usize, i64>,
    ops: u64,
    errors: Vec<String>,
    slowest: Duration,
}

/// Cluster clients checking `LOAD_KEYS` keys (limit 1,000,000 per 1000 days: the refill during
/// the test is below one unit) until stopped, bounded in count and time. Stopped and joined on
/// drop.
struct Load {
    stop: Arc<AtomicBool>,
    stats: Arc<Mutex<LoadStats>>,
    handle: Option<JoinHandle<()>>,
}

const LOAD_KEYS: usize = 64;
const LOAD_LIMIT: i64 = 1_000_000;
/// A bound the time bound reaches first: a test's load must still flow at its end, and a fast
/// host runs 400,000 checks in the 40 s of the longest test.
const LOAD_MAX_OPS: u64 = 4_000_000;
const LOAD_MAX_TIME: Duration = Duration::from_secs(80);

fn load_key(k: usize) -> String {
    format!("load:{k}")
}

impl Load {
    fn start(urls: Vec<String>, tasks: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(Mutex::new(LoadStats::default()));
        let (s, st) = (stop.clone(), stats.clone());
        let handle = std::thread::spawn(move || {
            runtime().block_on(async move {
                let end = Instant::now() + LOAD_MAX_TIME;
                let mut set = tokio::task::JoinSet::new();
                for t in 0..tasks {
                    let (urls, stop, stats) = (urls.clone(), s.clone(), st.clone());
                    set.spawn(async move {
                        // Every other task's connections sent READONLY: their checks are
                        // writes all the same, paused and moved with their slots.
                        let mut c = cluster_client_with(urls, t % 2 == 1).await;
                        let limit = LOAD_LIMIT.to_string();
                        for n in 0..LOAD_MAX_OPS / tasks as u64 {
                            if stop.load(Ordering::Relaxed) || Instant::now() >= end {
                                break;
                            }
                            let k = (n as usize * 7 + t) % LOAD_KEYS;
                            let at = Instant::now();
                            let r =
                                cluster_rl_check(&mut c, &[&load_key(k), &limit, "1000d"]).await;
                            let took = at.elapsed();
                            let mut s = stats.lock().unwrap();
                            s.ops += 1;
                            s.slowest = s.slowest.max(took);
                            match r {
                                Ok(r) => *s.allowed.entry(k).or_default() += r[0],
                                Err(e) => s.errors.push(format!("{}: {e}", load_key(k))),
                            }
                        }
                    });
                }
                while set.join_next().await.is_some() {}
            });
        });
        Load {
            stop,
            stats,
            handle: Some(handle),
        }
    }

    fn ops(&self) -> u64 {
        self.stats.lock().unwrap().ops
    }

    fn stop(&mut self) -> LoadStats {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.join().expect("load thread");
        }
        std::mem::take(&mut *self.stats.lock().unwrap())
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// The preloaded buckets: `pre:i` took `cost(i)` of 100 per day.
const PRELOAD: usize = 3000;

fn pre_cost(i: usize) -> i64 {
    1 + (i % 7) as i64
}

/// DRY on every preloaded bucket through a cluster client: `remaining` is what would be left
/// after one more request, so 100 - cost - 1 for a bucket that kept its state (the refill of
/// 100 per day adds a unit only after 864 s). Returns the buckets that came back wrong.
async fn wrong_buckets(c: &mut ClusterConnection) -> Vec<(String, i64, i64)> {
    let mut wrong = Vec::new();
    for i in 0..PRELOAD {
        let key = format!("pre:{i}");
        let r = cluster_rl_check(c, &[&key, "100", "1d", "DRY"])
            .await
            .unwrap();
        let expected = 100 - pre_cost(i) - 1;
        if r[2] != expected {
            wrong.push((key, expected, r[2]));
        }
    }
    wrong
}

#[test]
fn add_and_remove_node_under_load_keep_every_bucket() {
    let started = Instant::now();
    let mut set = Nodes::start(4, &[]);
    let addrs: Vec<String> = (0..4).map(|i| set.addr(i)).collect();
    admin_ok(&["create", &addrs[0], &addrs[1], &addrs[2]]);
    let before = agreed_slots(&[set.port(0), set.port(1), set.port(2)], 1);

    let rt = runtime();
    let urls = set.urls(&[0, 1, 2]);
    preload_buckets(&rt, &urls);

    let mut load = Load::start(urls.clone(), 16);
    assert!(
        wait_until(Duration::from_secs(20), || (load.ops() >= 2000)
            .then_some(()))
        .is_some(),
        "the load did not start"
    );

    // add-node: about a quarter of the slots, all onto the new node, with their buckets.
    let ops_before = load.ops();
    let out = admin_ok(&["add-node", &addrs[3], &addrs[0]]);
    let (moved, ms, pause) = moved_figures(&out);
    println!(
        "add-node: {moved} slots moved in {ms} ms, longest write pause {pause} ms, {} checks of the load meanwhile",
        load.ops() - ops_before
    );
    assert!((3500..=4700).contains(&moved), "{out}");
    let ports4: Vec<u16> = (0..4).map(|i| set.port(i)).collect();
    let after_add = agreed_slots(&ports4, 2);
    let mut changed = 0;
    for slot in 0..16384u16 {
        let (was, is) = (owner_of(&before, slot), owner_of(&after_add, slot));
        if was != is {
            assert_eq!(is, Some(set.port(3)), "slot {slot} moved between old nodes");
            changed += 1;
        }
    }
    assert_eq!(changed, moved);
    let moved_buckets = (0..PRELOAD)
        .filter(|i| {
            owner_of(&after_add, key_slot(format!("pre:{i}").as_bytes())) == Some(set.port(3))
        })
        .count();
    assert!(moved_buckets > PRELOAD / 8, "{moved_buckets} buckets moved");
    let wrong = rt.block_on(async {
        let mut c = cluster_client(set.urls(&[3])).await;
        wrong_buckets(&mut c).await
    });
    assert_eq!(wrong, vec![], "buckets reset or changed by add-node");

    // remove-node of an original node: its slots go to the others (the new node among them).
    let ops_before = load.ops();
    let out = admin_ok(&["remove-node", &addrs[0], &addrs[1]]);
    let (moved, ms, pause) = moved_figures(&out);
    println!(
        "remove-node: {moved} slots moved in {ms} ms, longest write pause {pause} ms, {} checks of the load meanwhile",
        load.ops() - ops_before
    );
    let gone: usize = after_add
        .iter()
        .filter(|e| e.primary == set.port(0))
        .map(|e| usize::from(e.end - e.start) + 1)
        .sum();
    assert_eq!(moved as usize, gone, "{out}");
    // Every node, the removed one too, shows the same table without it.
    let after_remove = agreed_slots(&ports4, 3);
    assert!(after_remove.iter().all(|e| e.primary != set.port(0)));
    for slot in 0..16384u16 {
        let (was, is) = (owner_of(&after_add, slot), owner_of(&after_remove, slot));
        assert!(
            was == is || was == Some(set.port(0)),
            "slot {slot} moved needlessly"
        );
    }
    let stats = load.stop();
    let wrong = rt.block_on(async {
        let mut c = cluster_client(set.urls(&[1])).await;
        wrong_buckets(&mut c).await
    });
    assert_eq!(wrong, vec![], "buckets reset or changed by remove-node");

    // The load's own buckets: every allowed check counted, to the unit, across both moves.
    load_buckets_count_every_allowed_check(&rt, set.urls(&[2]), &stats);
    // The removed node dropped what it handed over.
    let removed = set.port(0);
    assert!(
        wait_until(Duration::from_secs(10), || {
            let n: i64 = redis::cmd("DBSIZE")
                .query(&mut try_connect(removed)?)
                .ok()?;
            (n == 0).then_some(())
        })
        .is_some(),
        "the removed node kept keys"
    );
    set.stop(0);
    println!("test took {:?}", started.elapsed());
}

/// Preloads `PRELOAD` buckets, `pre:{i}` with cost `pre_cost(i)`, from 8 cluster clients;
/// then every one reads back as written.
fn preload_buckets(rt: &tokio::runtime::Runtime, urls: &[String]) {
    rt.block_on(async {
        let mut c = cluster_client(urls.to_vec()).await;
        let mut tasks = tokio::task::JoinSet::new();
        for t in 0..8 {
            let mut c = c.clone();
            tasks.spawn(async move {
                for i in (t..PRELOAD).step_by(8) {
                    let cost = pre_cost(i).to_string();
                    let r = cluster_rl_check(
                        &mut c,
                        &[&format!("pre:{i}"), "100", "1d", "COST", &cost],
                    )
                    .await
                    .unwrap();
                    assert_eq!(r[0], 1);
                }
            });
        }
        while let Some(r) = tasks.join_next().await {
            r.unwrap();
        }
        assert_eq!(wrong_buckets(&mut c).await, vec![]);
    });
}

/// The load's own buckets: it saw no error, and what remains of each is its limit less every
/// check the load saw allowed, to the unit.
fn load_buckets_count_every_allowed_check(
    rt: &tokio::runtime::Runtime,
    urls: Vec<String>,
    stats: &LoadStats,
) {
    println!(
        "load: {} checks, {} errors, slowest {:?}",
        stats.ops,
        stats.errors.len(),
        stats.slowest
    );
    assert!(stats.errors.is_empty(), "load errors: {:?}", stats.errors);
    rt.block_on(async {
        let mut c = cluster_client(urls).await;
        for k in 0..LOAD_KEYS {
            let allowed = stats.allowed.get(&k).copied().unwrap_or(0);
            let r = cluster_rl_check(
                &mut c,
                &[&load_key(k), &LOAD_LIMIT.to_string(), "1000d", "DRY"],
            )
            .await
            .unwrap();
            assert_eq!(
                r[2],
                LOAD_LIMIT - allowed - 1,
                "{}: {allowed} checks allowed by the load",
                load_key(k)
            );
        }
    });
}

/// A hand-assigned table (no tokens) from `table`: epoch `epoch`, the ranges of shards `a` and
/// `b` swapped.
fn swapped(table: &str, epoch: u64, a: usize, b: usize) -> String {
    let mut out = String::new();
    for l in table.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        let line = match f.as_slice() {
            ["epoch", _] => format!("epoch {epoch}"),
            ["shard", id, host, port, "tokens", _] => format!("shard {id} {host} {port} tokens -"),
            ["range", s, e, i] => {
                let i: usize = i.parse().unwrap();
                let i = if i == a {
                    b
                } else if i == b {
                    a
                } else {
                    i
                };
                format!("range {s} {e} {i}")
            }
            _ => l.to_string(),
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

#[test]
fn restart_keeps_the_table_and_a_stale_node_adopts_the_newer_one() {
    let started = Instant::now();
    let mut set = Nodes::start(3, &[]);
    let ports: Vec<u16> = (0..3).map(|i| set.port(i)).collect();
    let addrs: Vec<String> = (0..3).map(|i| set.addr(i)).collect();
    admin_ok(&["create", &addrs[0], &addrs[1], &addrs[2]]);
    let slots = agreed_slots(&ports, 1);

    // Restart (SIGTERM, same port, same config file): same id, same table, serving.
    let myid = |p: u16| -> String {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut try_connect(p).unwrap())
            .unwrap()
    };
    let id1 = myid(ports[1]);
    set.stop(1);
    set.restart(1);
    assert_eq!(myid(ports[1]), id1);
    assert_eq!(agreed_slots(&ports, 1), slots);
    let key = (0..10_000)
        .map(|i| format!("restart:{i}"))
        .find(|k| owner_of(&slots, key_slot(k.as_bytes())) == Some(ports[1]))
        .unwrap();
    let served = wait_until(Duration::from_secs(10), || {
        raw_check(ports[1], &[&key, "10", "1d"]).ok()
    });
    assert_eq!(
        served.map(|r| r[2]),
        Some(9),
        "the restarted node serves its slots"
    );

    // Node 2 goes down; the admin tool cannot reach it and changes nothing.
    set.stop(2);
    let err = admin_fails(&["remove-node", &addrs[0], &addrs[1]]);
    assert!(
        err.contains("cannot reach") && err.contains("nothing changed"),
        "{err}"
    );
    let err = admin_fails(&["add-node", &addrs[2], &addrs[0]]);
    assert!(err.contains("cannot reach"), "{err}");
    assert_eq!(agreed_slots(&ports[..2], 1), slots);

    // Meanwhile the table changes: shards 0 and 1 (nodes 0 and 1, not node 2) swap their
    // ranges under epoch 2, pushed to the two live nodes.
    let mut c = try_connect(ports[0]).unwrap();
    let table: String = redis::cmd("CLUSTER").arg("GETTABLE").query(&mut c).unwrap();
    let index_of = |port: u16| {
        table
            .lines()
            .filter(|l| l.starts_with("shard "))
            .position(|l| l.split_whitespace().nth(3) == Some(&port.to_string()))
            .unwrap()
    };
    let newer = swapped(&table, 2, index_of(ports[0]), index_of(ports[1]));
    for &p in &ports[..2] {
        let ok: String = redis::cmd("CLUSTER")
            .arg("SETTABLE")
            .arg(&newer)
            .query(&mut try_connect(p).unwrap())
            .unwrap();
        assert_eq!(ok, "OK");
    }
    let new_slots = agreed_slots(&ports[..2], 2);
    // A key node 2 would redirect to node 0 under its stale table, to node 1 under the new one.
    let (probe, slot) = (0..10_000)
        .map(|i| format!("stale:{i}"))
        .map(|k| {
            let s = key_slot(k.as_bytes());
            (k, s)
        })
        .find(|(_, s)| owner_of(&slots, *s) == Some(ports[0]))
        .unwrap();
    assert_eq!(owner_of(&new_slots, slot), Some(ports[1]));

    // Node 2 comes back with its stale file: it asks its peers before it serves, so it never
    // redirects by the old table, not even in its first answers.
    set.restart(2);
    let mut answers = BTreeMap::<String, u32>::new();
    let adopted = wait_until(Duration::from_secs(10), || {
        let a = match raw_check(ports[2], &[&probe, "10", "1d"]) {
            Ok(r) => format!("served {r:?}"),
            Err(e) => e,
        };
        *answers.entry(a.clone()).or_default() += 1;
        (a == format!("MOVED {slot} 127.0.0.1:{}", ports[1])).then_some(())
    });
    assert!(adopted.is_some(), "node 2's answers: {answers:?}");
    let fresh = format!("MOVED {slot} 127.0.0.1:{}", ports[1]);
    assert!(
        answers
            .keys()
            .all(|a| *a == fresh || a.starts_with("CLUSTERDOWN")),
        "node 2 answered from its stale table: {answers:?}"
    );
    assert_eq!(agreed_slots(&ports, 2), new_slots);
    assert!(set.nodes[2].wait_for_log("Adopted a newer table (epoch 2) from a peer"));
    println!("test took {:?}", started.elapsed());
}

#[test]
fn etcd_holds_the_table() {
    if !have_tool("etcd") {
        return;
    }
    let started = Instant::now();
    let etcd = Etcd::start();
    let url = etcd.url();
    let prefix = format!("/sluice-test-{}/", std::process::id());
    let mut set = Nodes::start(4, &["--etcd", &url, "--etcd-prefix", &prefix]);
    let ports: Vec<u16> = (0..4).map(|i| set.port(i)).collect();
    let addrs: Vec<String> = (0..4).map(|i| set.addr(i)).collect();
    let etcd_args = ["--etcd", url.as_str(), "--etcd-prefix", prefix.as_str()];

    let mut args = vec!["create", &addrs[0], &addrs[1], &addrs[2]];
    args.extend(etcd_args);
    let out = admin_ok(&args);
    assert!(out.contains("holds table epoch 1"), "{out}");
    let slots = agreed_slots(&ports[..3], 1);
    // The fourth node, outside the table, read it from etcd too.
    assert!(
        wait_until(Duration::from_secs(10), || (current_epoch(ports[3])
            == Some(1))
        .then_some(()))
        .is_some()
    );

    // Buckets consumed before the move keep their state.
    let rt = runtime();
    rt.block_on(async {
        let mut c = cluster_client(set.urls(&[0])).await;
        for i in 0..300 {
            let cost = pre_cost(i).to_string();
            cluster_rl_check(&mut c, &[&format!("pre:{i}"), "100", "1d", "COST", &cost])
                .await
                .unwrap();
        }
    });
    // Node 0's config file as it is now (epoch 1), to bring it back stale later.
    let stale_file = std::fs::read_to_string(set.config(0)).unwrap();
    assert!(stale_file.contains("\nepoch 1\n"), "{stale_file}");

    let mut args = vec!["add-node", &addrs[3], &addrs[0]];
    args.extend(etcd_args);
    let out = admin_ok(&args);
    assert!(out.contains("holds table epoch 2"), "{out}");
    let (moved, _, _) = moved_figures(&out);
    let after = agreed_slots(&ports, 2);
    let check = |c: &mut ClusterConnection| {
        let mut c = c.clone();
        async move {
            for i in 0..300 {
                let r = cluster_rl_check(&mut c, &[&format!("pre:{i}"), "100", "1d", "DRY"])
                    .await
                    .unwrap();
                assert_eq!(r[2], 100 - pre_cost(i) - 1, "pre:{i} after add-node");
            }
        }
    };
    rt.block_on(async {
        let mut c = cluster_client(set.urls(&[1])).await;
        check(&mut c).await;
    });

    // Node 0 stops and comes back with its epoch-1 file: it reads the table from etcd before
    // it serves, and never serves a slot it handed over.
    set.stop(0);
    std::fs::write(set.config(0), &stale_file).unwrap();
    let (probe, slot) = (0..10_000)
        .map(|i| format!("etcd:{i}"))
        .map(|k| {
            let s = key_slot(k.as_bytes());
            (k, s)
        })
        .find(|(_, s)| {
            owner_of(&slots, *s) == Some(ports[0]) && owner_of(&after, *s) == Some(ports[3])
        })
        .unwrap();
    set.restart(0);
    let moved_to_new = format!("MOVED {slot} 127.0.0.1:{}", ports[3]);
    let mut answers = BTreeMap::<String, u32>::new();
    let adopted = wait_until(Duration::from_secs(10), || {
        let a = match raw_check(ports[0], &[&probe, "10", "1d"]) {
            Ok(r) => format!("served {r:?}"),
            Err(e) => e,
        };
        *answers.entry(a.clone()).or_default() += 1;
        (a == moved_to_new).then_some(())
    });
    assert!(adopted.is_some(), "node 0's answers: {answers:?}");
    assert!(
        answers
            .keys()
            .all(|a| *a == moved_to_new || a.starts_with("CLUSTERDOWN")),
        "node 0 answered from its stale table: {answers:?}"
    );
    assert!(set.nodes[0].wait_for_log("Read the cluster table from etcd"));
    assert_eq!(agreed_slots(&ports, 2), after);
    println!(
        "etcd: create, add-node ({moved} slots), a stale restart read epoch 2 from etcd; test took {:?}",
        started.elapsed()
    );
    drop(set);
    drop(etcd);
}

/// A replica serves its shard's reads to a READONLY connection: GET, and RL.CHECK with DRY or
/// COST 0, which only read (a replica outside cluster mode serves those too).
#[test]
fn readonly_replica_serves_dry_checks() {
    let set = Nodes::start(4, &[]);
    let addrs: Vec<String> = (0..4).map(|i| set.addr(i)).collect();
    admin_ok(&[
        "create",
        &addrs[0],
        &addrs[1],
        &addrs[2],
        &addrs[3],
        "--replicas",
        "1",
    ]);
    let slots = agreed_slots(&[set.port(0), set.port(1)], 1);
    // Node 2 replicates node 0.
    let key = (0..10_000)
        .map(|i| format!("ro:{i}"))
        .find(|k| owner_of(&slots, key_slot(k.as_bytes())) == Some(set.port(0)))
        .unwrap();
    raw_check(set.port(0), &[&key, "10", "1d", "COST", "3"]).unwrap();
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query(&mut try_connect(set.port(0)).unwrap())
        .unwrap();
    assert_eq!(acked, 1);
    let mut c = try_connect(set.port(2)).unwrap();
    let () = redis::cmd("READONLY").query(&mut c).unwrap();
    for extra in [&["DRY"][..], &["COST", "0"]] {
        let mut cmd = redis::cmd("RL.CHECK");
        cmd.arg(&key).arg(10).arg("1d").arg(extra);
        let r: redis::RedisResult<Vec<i64>> = cmd.query(&mut c);
        let r = r.unwrap_or_else(|e| panic!("RL.CHECK {key} 10 1d {extra:?}: {}", err_line(&e)));
        assert_eq!(
            r[2],
            if extra[0] == "DRY" { 6 } else { 7 },
            "{extra:?}: {r:?}"
        );
    }
}

/// Runs `sluice cluster add-node` told to die at `point` (`SLUICE_ADMIN_DIE_AT`), as a
/// `kill -9` would stop it; asserts it did die there.
fn admin_killed_at(point: &str, args: &[&str]) {
    let out = std::process::Command::new("timeout")
        .arg("120")
        .arg(sluice_tests::binary())
        .arg("cluster")
        .args(args)
        .env("SLUICE_ADMIN_DIE_AT", point)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run sluice cluster");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains(&format!("SLUICE_ADMIN_DIE_AT={point}")),
        "the admin tool did not die at {point} ({:?}):\n{}\n{stderr}",
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Keys held by the node on `port` (DBSIZE).
fn dbsize(port: u16) -> Option<i64> {
    redis::cmd("DBSIZE").query(&mut try_connect(port)?).ok()
}

/// The admin tool killed at each step of add-node, under a load that counts every allowed
/// check:
/// - before the table flips (`imports`, `copied`, `paused`), the old table stays in force, the
///   old owner's pause is lifted as soon as the tool's connection drops, and the new node
///   drops the copies it took; a rerun then succeeds at once;
/// - after the new owner took the table (`targets`), the old owners learn it from their
///   peers, and the new owner holds the slots until the old owner's feed closes;
/// - through all of it every allowed check is counted, to the unit.
#[test]
fn an_admin_tool_killed_at_each_step_of_add_node_loses_nothing() {
    let started = Instant::now();
    let set = Nodes::start(5, &[]);
    let addrs: Vec<String> = (0..5).map(|i| set.addr(i)).collect();
    admin_ok(&["create", &addrs[0], &addrs[1], &addrs[2]]);
    let rt = runtime();
    let urls = set.urls(&[0, 1, 2]);
    let mut load = Load::start(urls.clone(), 8);
    assert!(
        wait_until(Duration::from_secs(20), || (load.ops() >= 1000)
            .then_some(()))
        .is_some(),
        "the load did not start"
    );
    let old_ports = [set.port(0), set.port(1), set.port(2)];
    for point in ["imports", "copied", "paused"] {
        admin_killed_at(point, &["add-node", &addrs[3], &addrs[0]]);
        // The old table stays: epoch 1 everywhere, the new node outside it.
        let slots = agreed_slots(&old_ports, 1);
        assert!(
            slots.iter().all(|e| e.primary != set.port(3)),
            "the new node serves slots after a kill at {point}"
        );
        if point == "paused" {
            let lifted = set.nodes[..3]
                .iter()
                .any(|n| n.wait_for_log("Pause lifted: the connection that asked for it closed"));
            assert!(
                lifted,
                "no old owner lifted the pause of a killed admin tool"
            );
        }
        // The new node gives back what it copied (the import abandoned with its asker).
        let dropped = wait_until(Duration::from_secs(25), || {
            (dbsize(set.port(3))? == 0).then_some(())
        });
        assert!(
            dropped.is_some(),
            "the new node kept {:?} copied keys after a kill at {point}; its log:\n{}",
            dbsize(set.port(3)),
            set.nodes[3].log()
        );
        let ops = load.ops();
        assert!(
            wait_until(Duration::from_secs(10), || (load.ops() > ops + 200)
                .then_some(()))
            .is_some(),
            "the load stalled after a kill at {point}"
        );
        println!("killed at {point}: old table kept, copies dropped, load flowing");
    }
    // A rerun succeeds the first time.
    let out = admin_ok(&["add-node", &addrs[3], &addrs[0]]);
    let (moved, _, _) = moved_figures(&out);
    assert!(moved > 3000, "{out}");
    // Killed right after the new owner took the table: the rest learn it from their peers.
    admin_killed_at("targets", &["add-node", &addrs[4], &addrs[0]]);
    let all: Vec<u16> = (0..5).map(|i| set.port(i)).collect();
    let flipped = wait_until(Duration::from_secs(20), || {
        all.iter()
            .all(|&p| current_epoch(p) == Some(3))
            .then_some(())
    });
    assert!(
        flipped.is_some(),
        "the table of a killed tool did not reach every node"
    );
    let ops = load.ops();
    assert!(
        wait_until(Duration::from_secs(10), || (load.ops() > ops + 200)
            .then_some(()))
        .is_some(),
        "the load stalled after a kill at targets"
    );
    let stats = load.stop();
    load_buckets_count_every_allowed_check(&rt, set.urls(&[1]), &stats);
    println!("test took {:?}", started.elapsed());
}

/// A million-member sorted set and a hash move with their slot: the node that owned it is
/// removed, and through a Redis Cluster client both read back whole on their new node (the
/// same size, members, scores and TTL), and CROSSSLOT still refuses keys of two slots.
#[test]
fn a_million_member_sorted_set_moves_with_its_slot() {
    const MEMBERS: usize = 1_000_000;
    let mut set = Nodes::start(3, &[]);
    let addrs: Vec<String> = (0..3).map(|i| set.addr(i)).collect();
    admin_ok(&["create", &addrs[0], &addrs[1], &addrs[2]]);
    let slots = agreed_slots(&[set.port(0), set.port(1), set.port(2)], 1);
    let owner = owner_of(&slots, key_slot(b"{big}z")).expect("an owner");
    let i = (0..3).find(|&i| set.port(i) == owner).unwrap();
    let mut c = try_connect(owner).expect("connect");
    for start in (0..MEMBERS).step_by(20_000) {
        let mut cmd = redis::cmd("ZADD");
        cmd.arg("{big}z");
        for m in start..start + 20_000 {
            cmd.arg(m * 3).arg(format!("m{m}"));
        }
        let _: i64 = cmd.query(&mut c).unwrap();
    }
    let _: i64 = redis::cmd("EXPIRE")
        .arg("{big}z")
        .arg(3600)
        .query(&mut c)
        .unwrap();
    let _: i64 = redis::cmd("HSET")
        .arg("{big}h")
        .arg("a")
        .arg(1)
        .arg("b")
        .arg("two")
        .query(&mut c)
        .unwrap();
    drop(c);

    let other = (i + 1) % 3;
    admin_ok(&["remove-node", &addrs[i], &addrs[other]]);
    let rt = runtime();
    let survivors: Vec<usize> = (0..3).filter(|&n| n != i).collect();
    rt.block_on(async {
        let mut c = cluster_client(set.urls(&survivors)).await;
        let n: usize = redis::cmd("ZCARD")
            .arg("{big}z")
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(n, MEMBERS, "the sorted set lost members in the move");
        for m in [0, 1, 499_999, MEMBERS - 1] {
            let score: f64 = redis::cmd("ZSCORE")
                .arg("{big}z")
                .arg(format!("m{m}"))
                .query_async(&mut c)
                .await
                .unwrap();
            assert_eq!(score, (m * 3) as f64);
        }
        let rank: usize = redis::cmd("ZRANK")
            .arg("{big}z")
            .arg("m123456")
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(rank, 123_456);
        let ttl: i64 = redis::cmd("TTL")
            .arg("{big}z")
            .query_async(&mut c)
            .await
            .unwrap();
        assert!((3000..=3600).contains(&ttl), "TTL {ttl}");
        let h: Vec<(String, String)> = redis::cmd("HGETALL")
            .arg("{big}h")
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(h.len(), 2);
    });
    // A command naming keys of two slots is refused as in Redis Cluster.
    let mut c = try_connect(set.port(other)).expect("connect");
    let err = redis::cmd("ZRANGESTORE")
        .arg("{big}copy")
        .arg("{other}z")
        .arg(0)
        .arg(-1)
        .query::<i64>(&mut c)
        .unwrap_err();
    assert_eq!(err.code(), Some("CROSSSLOT"), "{err}");
    set.stop(i);
}
