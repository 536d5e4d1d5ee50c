//! Envoy's rate limit service end to end: a tonic client built from the same vendored protos
//! calls `ShouldRateLimit` on a real `sluice --grpc-port`, whose `--envoy-config` directory
//! holds envoyproxy/ratelimit's own README examples, unchanged (tests/fixtures/envoy). Each
//! example's documented behaviour is checked; blocks of one example that share a domain are
//! loaded one after the other by rewriting the file, which exercises the reload.

use std::time::Duration;

use sluice_envoy::pb::rate_limit_response::{Code, DescriptorStatus};
use sluice_envoy::pb::{RateLimitRequest, RateLimitResponse, RateLimitServiceClient};
use sluice_tests::{
    Sluice, TempDir, cluster_node, cluster_slots, covers_every_slot, envoy_descriptor, free_port,
    http_get, key_slot, owner_of, runtime, sluice_cluster, wait_until,
};
use tonic::transport::Channel;

/// One descriptor of a request: its entries and its own `hits_addend`, if any.
type Desc<'a> = (&'a [(&'a str, &'a str)], Option<u64>);

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;
/// `RateLimit.Unit` values.
const SECOND: i32 = 1;
const MINUTE: i32 = 2;

fn fixture(name: &str) -> String {
    let path = format!("{}/fixtures/envoy/{name}.yaml", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

struct Rls {
    rt: tokio::runtime::Runtime,
    client: RateLimitServiceClient<Channel>,
}

impl Rls {
    /// A node serving gRPC with the Envoy config in `dir` (and `extra` flags), and a client
    /// connected to it.
    fn serve(dir: &TempDir, extra: &[&str]) -> (Sluice, Rls) {
        let grpc = free_port().to_string();
        let mut args = vec![
            "--grpc-port",
            grpc.as_str(),
            "--envoy-config",
            dir.path().to_str().expect("utf-8"),
        ];
        args.extend_from_slice(extra);
        let server = Sluice::start_with(&args);
        let rls = Rls::connect(grpc.parse().expect("a port"));
        (server, rls)
    }

    fn connect(port: u16) -> Rls {
        let rt = runtime();
        let client = wait_until(Duration::from_secs(10), || {
            rt.block_on(RateLimitServiceClient::connect(format!(
                "http://127.0.0.1:{port}"
            )))
            .ok()
        })
        .expect("gRPC connects");
        Rls { rt, client }
    }

    fn call_with(&mut self, request: RateLimitRequest) -> Result<RateLimitResponse, tonic::Status> {
        self.rt
            .block_on(self.client.should_rate_limit(request))
            .map(tonic::Response::into_inner)
    }

    /// One request: `(entries, descriptor hits_addend)` per descriptor.
    fn call(&mut self, domain: &str, descriptors: &[Desc<'_>]) -> RateLimitResponse {
        self.call_with(request(domain, descriptors, 0))
            .unwrap_or_else(|s| panic!("{domain}: {s}"))
    }

    /// The status of a one-descriptor request of `hits`.
    fn one(&mut self, domain: &str, entries: &[(&str, &str)], hits: u64) -> DescriptorStatus {
        let r = self.call(domain, &[(entries, Some(hits))]);
        assert_eq!(r.statuses.len(), 1);
        assert_eq!(
            r.overall_code, r.statuses[0].code,
            "one descriptor: overall = its code"
        );
        r.statuses.into_iter().next().expect("a status")
    }
}

fn request(domain: &str, descriptors: &[Desc<'_>], hits_addend: u32) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors: descriptors
            .iter()
            .map(|(entries, hits)| envoy_descriptor(entries, None, *hits))
            .collect(),
        hits_addend,
    }
}

/// `(requests_per_unit, unit)` of a status's current limit.
fn limit(s: &DescriptorStatus) -> Option<(u32, i32)> {
    s.current_limit
        .as_ref()
        .map(|l| (l.requests_per_unit, l.unit))
}

/// Runs `f` until it holds inside one window of a per-second limit (a window that ends between
/// two calls resets the count; five tries make that vanishingly unlikely every time).
fn within_one_second(mut f: impl FnMut() -> bool) {
    assert!((0..5).any(|_| f()), "never held inside one second's window");
}

/// Rewrites `file` in `dir` and waits until `applied` says the reload took.
fn reload(dir: &TempDir, file: &str, text: &str, mut applied: impl FnMut() -> bool) {
    std::fs::write(dir.path().join(file), text).expect("write config");
    assert!(
        wait_until(Duration::from_secs(10), || applied().then_some(())).is_some(),
        "{file} was not reloaded"
    );
}

#[test]
fn readme_examples_behave_as_documented() {
    let dir = TempDir::new("envoy-config");
    for (file, fixture_name) in [
        ("example01.yaml", "example01"),
        ("example02.yaml", "example02"),
        ("example03.yaml", "example03"),
        ("example04.yaml", "example04a"),
        ("example05.yaml", "example05"),
        ("example06.yaml", "example06"),
        ("example07.yaml", "example07"),
        ("example08.yaml", "example08"),
        ("example09.yaml", "example09a"),
        ("example10a.yaml", "example10a"),
        ("example10b.yaml", "example10b"),
        ("example11a.yaml", "example11a"),
        ("example11b.yaml", "example11b"),
    ] {
        std::fs::write(dir.path().join(file), fixture(fixture_name)).expect("copy fixture");
    }
    let metrics = free_port();
    let (server, mut rls) = Rls::serve(
        &dir,
        &[
            "--metrics-port",
            &metrics.to_string(),
            "--envoy-headers",
            "x-ratelimit",
        ],
    );

    readme_examples_1_to_5(&mut rls);
    readme_examples_6_to_11(&mut rls);
    readme_examples_reloaded(&dir, &mut rls);

    // A config that does not load leaves the previous one serving.
    std::fs::write(
        dir.path().join("broken.yaml"),
        "domain: broken\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n",
    )
    .expect("write");
    assert!(
        wait_until(Duration::from_secs(10), || server
            .log()
            .contains("Envoy config not reloaded")
            .then_some(()))
        .is_some()
    );
    assert_eq!(
        limit(&rls.one("internal", &[("azure", "x")], 1)),
        Some((100, MINUTE))
    );

    // The shadow-mode denial is counted as such, under the rule's name.
    let body = http_get(metrics, "/metrics").expect("metrics");
    assert!(
        body.lines().any(|l| l.starts_with("sluice_checks_total{")
            && l.contains("rule=\"example6.service.user_user-a\"")
            && l.contains("result=\"shadow_denied\"")),
        "{body}"
    );
    drop(server);
}

/// Example 4's two-entry descriptor.
const DEEP: &[(&str, &str)] = &[("key", "value"), ("subkey", "subvalue")];

/// The README's examples 1 to 5 (example 4's first block).
fn readme_examples_1_to_5(rls: &mut Rls) {
    // 1: database=users, 500 per second; other values have no limit.
    within_one_second(|| {
        let full = rls.one("mongo_cps", &[("database", "users")], 500);
        let next = rls.one("mongo_cps", &[("database", "users")], 1);
        assert_eq!(limit(&full), Some((500, SECOND)));
        full.code == OK && full.limit_remaining == 0 && next.code == OVER
    });
    let other = rls.one("mongo_cps", &[("database", "other")], 1);
    assert_eq!((other.code, limit(&other)), (OK, None));

    // 2: 5 marketing messages a day per number, 100 messages a day per number.
    let number = format!("206{}", std::process::id());
    let marketing: &[(&str, &str)] = &[("message_type", "marketing"), ("to_number", &number)];
    let to_number: &[(&str, &str)] = &[("to_number", &number)];
    for i in 0..5 {
        let s = rls.one("messaging", marketing, 1);
        assert_eq!((s.code, s.limit_remaining), (OK, 4 - i));
    }
    let both = rls.call("messaging", &[(marketing, None), (to_number, None)]);
    assert_eq!(both.overall_code, OVER, "a logical OR of the descriptors");
    assert_eq!(both.statuses[0].code, OVER);
    assert_eq!(
        (both.statuses[1].code, both.statuses[1].limit_remaining),
        (OK, 99)
    );
    assert_eq!(rls.one("messaging", to_number, 1).limit_remaining, 98);
    // The headers describe the descriptor closest to its limit: the over-limit one.
    let h: Vec<String> = both
        .response_headers_to_add
        .iter()
        .map(|h| format!("{}={}", h.key, h.value))
        .collect();
    assert_eq!(&h[..2], ["X-RateLimit-Limit=5", "X-RateLimit-Remaining=0"]);

    // 3: 10 per second per address; 50.0.0.5 is blacklisted (0 per second).
    let black = rls.one("edge_proxy_per_ip", &[("remote_address", "50.0.0.5")], 1);
    assert_eq!((black.code, limit(&black)), (OVER, Some((0, SECOND))));
    within_one_second(|| {
        let ten = rls.one("edge_proxy_per_ip", &[("remote_address", "50.0.0.1")], 10);
        let more = rls.one("edge_proxy_per_ip", &[("remote_address", "50.0.0.1")], 1);
        ten.code == OK && more.code == OVER
    });

    // 4, first block: a two-entry descriptor does not match a one-level config.
    assert_eq!(limit(&rls.one("example4", DEEP, 1)), None);
    assert_eq!(
        limit(&rls.one("example4", &[("key", "value")], 1)),
        Some((300, SECOND))
    );

    // 5: ldap is unlimited (OK, remaining u32::MAX); azure 100 per minute.
    let ldap = rls.one("internal", &[("ldap", "x")], 1);
    assert_eq!(
        (ldap.code, ldap.limit_remaining, limit(&ldap)),
        (OK, u32::MAX, None)
    );
    let azure = rls.one("internal", &[("azure", "x")], 1);
    assert_eq!((azure.code, limit(&azure)), (OK, Some((100, MINUTE))));
}

/// The README's examples 6 to 11 (example 9's first block).
fn readme_examples_6_to_11(rls: &mut Rls) {
    // 6: user-a's 10 per second is in shadow mode: never limited; user-b's 20 is enforced.
    let user_a: &[(&str, &str)] = &[("service", "auth-service"), ("user", "user-a")];
    let shadow = rls.one("example6", user_a, 11);
    assert_eq!((shadow.code, shadow.limit_remaining), (OK, 0));
    let user_b = rls.one(
        "example6",
        &[("service", "auth-service"), ("user", "user-b")],
        21,
    );
    assert_eq!(user_b.code, OVER);

    // 7: with both rules matched, specific_limit (5/s) is replaced by the 10/s one and not
    // touched: 6 hits pass, and the 5/s limit still has all of its 5 afterwards.
    let k1: &[(&str, &str)] = &[("key_1", "value_1"), ("user", "bkthomps")];
    let k2: &[(&str, &str)] = &[("key_2", "value_2"), ("user", "bkthomps")];
    within_one_second(|| {
        let r = rls.call("example7", &[(k1, Some(6)), (k2, Some(6))]);
        let alone = rls.one("example7", k1, 5);
        assert_eq!(limit(&r.statuses[0]), None, "replaced");
        assert_eq!(limit(&r.statuses[1]), Some((10, SECOND)));
        r.overall_code == OK && r.statuses[1].limit_remaining == 4 && alone.limit_remaining == 0
    });

    // 8: key1 defaults to 10 per minute, key1=value1 gets 20.
    assert_eq!(
        limit(&rls.one("example8", &[("key1", "value1")], 1)),
        Some((20, MINUTE))
    );
    assert_eq!(
        limit(&rls.one("example8", &[("key1", "unspecified")], 1)),
        Some((10, MINUTE))
    );

    // 9, first block: a trailing wildcard.
    assert_eq!(
        limit(&rls.one("example9", &[("key1", "valueXYZ")], 1)),
        Some((20, MINUTE))
    );
    assert_eq!(limit(&rls.one("example9", &[("key1", "valu")], 1)), None);

    // 10: value_to_metric changes metric names only; the limits apply.
    let r10 = rls.one(
        "example10",
        &[
            ("route", "api"),
            ("http_method", "GET"),
            ("subject_id", "123"),
        ],
        1,
    );
    assert_eq!(limit(&r10), Some((60, MINUTE)));
    let read = [
        ("user", "alice"),
        ("action", "readfile"),
        ("resource", "documents"),
    ];
    assert_eq!(
        limit(&rls.one("example10_wildcard", &read, 1)),
        Some((100, MINUTE))
    );
    let write = [
        ("user", "alice"),
        ("action", "writefile"),
        ("resource", "documents"),
    ];
    assert_eq!(limit(&rls.one("example10_wildcard", &write, 1)), None);

    // 11: files/* share one threshold of 10 per hour; files_no_share/* have one each.
    assert_eq!(
        rls.one("example11", &[("files", "files/a.pdf")], 5).code,
        OK
    );
    assert_eq!(
        rls.one("example11", &[("files", "files/b.csv")], 5).code,
        OK
    );
    assert_eq!(
        rls.one("example11", &[("files", "files/c.txt")], 1).code,
        OVER
    );
    let own = rls.one(
        "example11",
        &[("files_no_share", "files_no_share/a.pdf")],
        10,
    );
    assert_eq!((own.code, own.limit_remaining), (OK, 0));
    let other = rls.one(
        "example11",
        &[("files_no_share", "files_no_share/b.csv")],
        10,
    );
    assert_eq!((other.code, other.limit_remaining), (OK, 0));
    let r11 = rls.one(
        "example11_metrics",
        &[("route", "api/v1"), ("method", "GET")],
        1,
    );
    assert_eq!(limit(&r11), Some((60, MINUTE)));
}

/// The second blocks of examples 4 and 9, each loaded over the one before.
fn readme_examples_reloaded(dir: &TempDir, rls: &mut Rls) {
    // 4, second block, loaded over the first: now the two-entry descriptor matches.
    reload(dir, "example04.yaml", &fixture("example04b"), || {
        limit(&rls.one("example4", DEEP, 0)).is_some()
    });
    assert_eq!(limit(&rls.one("example4", DEEP, 1)), Some((300, SECOND)));
    assert_eq!(limit(&rls.one("example4", &[("key", "value")], 1)), None);

    // 9, second and third blocks: middle and multiple wildcards.
    reload(dir, "example09.yaml", &fixture("example09b"), || {
        limit(&rls.one("example9", &[("key1", "valueXYZ")], 0)).is_none()
    });
    assert_eq!(
        limit(&rls.one("example9", &[("path", "/api/123/action")], 1)),
        Some((20, MINUTE))
    );
    assert_eq!(
        limit(&rls.one("example9", &[("path", "/api/123/other")], 1)),
        None
    );
    reload(dir, "example09.yaml", &fixture("example09c"), || {
        limit(&rls.one("example9", &[("path", "/api/123/action")], 0)).is_none()
    });
    let multi = [("route", "/api/v2/resource/456/action")];
    assert_eq!(limit(&rls.one("example9", &multi, 1)), Some((20, MINUTE)));
    assert_eq!(
        limit(&rls.one("example9", &[("route", "/api/v2/resource/456")], 1)),
        None
    );
}

#[test]
fn bad_requests_and_a_failing_store() {
    let dir = TempDir::new("envoy-bad");
    std::fs::write(dir.path().join("example05.yaml"), fixture("example05")).expect("copy");
    let (server, mut rls) = Rls::serve(&dir, &[]);
    let azure: &[(&str, &str)] = &[("azure", "x")];

    let empty = rls.call_with(request("", &[(azure, None)], 1)).unwrap_err();
    assert_eq!(empty.code(), tonic::Code::InvalidArgument, "{empty}");
    let none = rls.call_with(request("internal", &[], 1)).unwrap_err();
    assert_eq!(none.code(), tonic::Code::InvalidArgument, "{none}");
    // Unknown descriptors and unknown domains are allowed, as in the reference.
    let unknown = rls.call("internal", &[(&[("nosuch", "x")], None)]);
    assert_eq!(
        (unknown.overall_code, limit(&unknown.statuses[0])),
        (OK, None)
    );
    assert_eq!(rls.call("nosuch", &[(azure, None)]).overall_code, OK);
    // Huge hits: over the limit, and nothing taken.
    let huge = rls
        .call_with(request("internal", &[(azure, None)], u32::MAX))
        .expect("answer");
    assert_eq!(huge.overall_code, OVER);
    let huge = rls.one("internal", azure, u64::MAX);
    assert_eq!((huge.code, huge.limit_remaining), (OVER, 0));
    assert_eq!(rls.one("internal", azure, 1).limit_remaining, 99);
    drop(server);

    // A store that cannot take the key answers UNAVAILABLE: Envoy's failure_mode_deny decides.
    let (full, mut rls) = Rls::serve(&dir, &["--maxmemory", "1", "--maxmemory-policy", "reject"]);
    let down = rls
        .call_with(request("internal", &[(azure, None)], 1))
        .unwrap_err();
    assert_eq!(down.code(), tonic::Code::Unavailable, "{down}");
    drop(full);
}

/// A token bucket checked through gRPC leaves the tokens gateways hold on lease (RL.LEASE on
/// its store key), as RL.CHECK does: with 25 of 100 out, 100 more are over the limit.
#[test]
fn a_token_limit_sees_the_tokens_out_on_lease() {
    let dir = TempDir::new("envoy-lease");
    std::fs::write(
        dir.path().join("leased.yaml"),
        "domain: leased\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 100\n      algorithm: token\n",
    )
    .expect("write the config");
    let (server, mut rls) = Rls::serve(&dir, &[]);
    let mut c = server.client();
    let held: Vec<i64> = redis::cmd("RL.LEASE")
        .arg(&[
            "envoy:leased|k_v",
            "100",
            "1s",
            "HOLDER",
            "gw",
            "WANT",
            "25",
            "TTL",
            "1h",
        ])
        .query(&mut c)
        .expect("RL.LEASE");
    assert_eq!(held[1], 25, "{held:?}");
    // The bucket alone would be full again a second later.
    std::thread::sleep(Duration::from_millis(1100));
    let k: &[(&str, &str)] = &[("k", "v")];
    assert_eq!(
        rls.one("leased", k, 100).code,
        OVER,
        "100 admitted with 25 on lease"
    );
    assert_eq!(rls.one("leased", k, 75).code, OK, "the 75 not on lease");
}

#[test]
fn a_cluster_node_checks_its_own_keys_and_forwards_the_others_to_their_owner() {
    let dir = TempDir::new("envoy-cluster-config");
    // Example 5's domain with a day-long window, so that no window ends during the test.
    std::fs::write(
        dir.path().join("internal.yaml"),
        "domain: internal\ndescriptors:\n  - key: azure\n    rate_limit:\n      unit: day\n      requests_per_unit: 100\n",
    )
    .expect("write the config");
    let nodes = TempDir::new("envoy-cluster-nodes");
    let grpc = free_port();
    let a = cluster_node(
        0,
        &nodes.path().join("a.conf"),
        &[
            "--grpc-port",
            &grpc.to_string(),
            "--envoy-config",
            dir.path().to_str().expect("utf-8"),
        ],
    );
    let b = cluster_node(0, &nodes.path().join("b.conf"), &[]);
    let created = sluice_cluster(&[
        "create",
        &format!("127.0.0.1:{}", a.port),
        &format!("127.0.0.1:{}", b.port),
    ]);
    assert!(created.status.success(), "{created:?}");
    let slots = wait_until(Duration::from_secs(10), || {
        cluster_slots(a.port).filter(|s| covers_every_slot(s))
    })
    .expect("node a has the table");
    // The store key of descriptor (azure, v) in domain internal (under envoy:).
    let owner = |v: &String| {
        owner_of(
            &slots,
            key_slot(format!("envoy:internal|azure_{v}").as_bytes()),
        )
    };
    let values = || (0..1000).map(|i| i.to_string());
    let mine = values()
        .find(|v| owner(v) == Some(a.port))
        .expect("a key of a");
    let theirs = values()
        .find(|v| owner(v) == Some(b.port))
        .expect("a key of b");

    let mut rls = Rls::connect(grpc);
    let here = rls.one("internal", &[("azure", mine.as_str())], 1);
    assert_eq!((here.code, here.limit_remaining), (OK, 99));
    // A key node b owns is forwarded to b and counted there, not on a.
    let there = rls.one("internal", &[("azure", theirs.as_str())], 1);
    assert_eq!((there.code, there.limit_remaining), (OK, 99));
    let there = rls.one("internal", &[("azure", theirs.as_str())], 2);
    assert_eq!((there.code, there.limit_remaining), (OK, 97));
    let key = format!("envoy:internal|azure_{theirs}");
    let mut on_b = b.client();
    let exists: i64 = redis::cmd("EXISTS")
        .arg(&key)
        .query(&mut on_b)
        .expect("EXISTS on b");
    assert_eq!(
        exists, 1,
        "the forwarded check made its bucket on the owner"
    );
    let mut on_a = a.client();
    let dbsize: i64 = redis::cmd("DBSIZE").query(&mut on_a).expect("DBSIZE on a");
    assert_eq!(dbsize, 1, "node a holds only its own key");
    // The owner gone: the forwarded check answers UNAVAILABLE (Envoy's failure_mode_deny
    // decides), and a's own keys are still checked.
    drop(b);
    let gone = rls
        .call_with(request(
            "internal",
            &[(&[("azure", theirs.as_str())], None)],
            1,
        ))
        .unwrap_err();
    assert_eq!(gone.code(), tonic::Code::Unavailable, "{gone}");
    let here = rls.one("internal", &[("azure", mine.as_str())], 1);
    assert_eq!((here.code, here.limit_remaining), (OK, 98));
    drop(a);
}
