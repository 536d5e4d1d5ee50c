//! `sluice_client::Client::allow`: `RL.ALLOW` through the gateway library against a real
//! two-node cluster, split by node when the request's buckets sit on both (a dry call per slot
//! first, then the consuming calls), and the rules' fail modes when no node answers.

use std::time::Duration;

use sluice_client::rules::RuleBook;
use sluice_client::{AllowRequest, Client, Config, Source, Topology};
use sluice_tests::{
    TempDir, cluster_slots, key_slot, owner_of, primaries, runtime, wait_cluster_ok,
};

fn request(user: &str, ip: &str) -> AllowRequest {
    AllowRequest {
        user: Some(user.as_bytes().to_vec()),
        ip: Some(ip.as_bytes().to_vec()),
        ..AllowRequest::default()
    }
}

/// `RL.HIT rule subject COST 0` on `port`: the bucket's remaining, consuming nothing.
fn remaining(port: u16, rule: &str, subject: &str) -> i64 {
    let mut c = sluice_tests::try_connect(port).expect("connect");
    let hit: Vec<i64> = redis::cmd("RL.HIT")
        .arg(rule)
        .arg(subject)
        .arg("COST")
        .arg(0)
        .query(&mut c)
        .expect("RL.HIT");
    hit[2]
}

#[test]
fn allow_splits_a_check_across_nodes_dry_first_and_fails_by_each_rules_mode() {
    let dir = TempDir::new("client-allow");
    let nodes = primaries(&dir, "n", &[&[], &[]]);
    wait_cluster_ok(&nodes);
    // Rules live on each node: both learn them.
    for n in &nodes {
        let mut c = n.client();
        for spec in [
            "u LIMIT 2 PERIOD 1m SCOPE user FAILMODE closed",
            "i LIMIT 5 PERIOD 1m SCOPE ip FAILMODE open",
        ] {
            let mut cmd = redis::cmd("RL.RULE");
            cmd.arg("SET");
            for w in spec.split(' ') {
                cmd.arg(w);
            }
            let _: i64 = cmd.query(&mut c).expect("RL.RULE SET");
        }
    }
    // A user and an address whose buckets sit on different nodes.
    let slots = cluster_slots(nodes[0].port).expect("CLUSTER SLOTS");
    let owner = |key: String| owner_of(&slots, key_slot(key.as_bytes())).expect("owned");
    let ip = (0..1000)
        .map(|n| format!("10.0.0.{n}"))
        .find(|ip| owner(format!("i:{ip}")) != owner("u:alice".into()))
        .expect("an address on the other node");
    let (u_port, i_port) = (owner("u:alice".into()), owner(format!("i:{ip}")));

    let rt = runtime();
    let (client, book) = rt.block_on(async {
        let client = Client::connect(Config::new(Topology::Cluster(vec![format!(
            "127.0.0.1:{}",
            nodes[0].port
        )])))
        .await;
        let book = RuleBook::default();
        for _ in 0..100 {
            book.refresh(&client).await;
            if book.len() == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(book.len(), 2, "the client learned both rules");
        let req = request("alice", &ip);
        // Two allowed (the user rule is the tighter), each consuming in both buckets.
        for left in [1, 0] {
            let a = client.allow(&book, &req).await.expect("allow");
            assert!(a.decision.allowed, "{a:?}");
            assert_eq!(
                (a.decision.remaining, a.rule.as_deref()),
                (left, Some(&b"u"[..]))
            );
            assert!(matches!(a.decision.source, Source::Node(_)), "{a:?}");
        }
        // The third: the dry pass finds the user rule spent, and nothing is consumed.
        let a = client.allow(&book, &req).await.expect("allow");
        assert!(!a.decision.allowed, "{a:?}");
        assert_eq!(a.rule.as_deref(), Some(&b"u"[..]));
        assert!(a.decision.retry_after_ms > 0);
        assert_eq!(
            remaining(i_port, "i", &ip),
            3,
            "the ip bucket paid twice only"
        );
        assert_eq!(remaining(u_port, "u", "alice"), 0);
        // A request one rule applies to goes in one call; a node's refusal is an Err.
        let only_ip = AllowRequest {
            ip: Some(ip.as_bytes().to_vec()),
            ..AllowRequest::default()
        };
        let a = client.allow(&book, &only_ip).await.expect("allow");
        assert_eq!(
            (a.decision.remaining, a.rule.as_deref()),
            (2, Some(&b"i"[..]))
        );
        let costly = AllowRequest {
            cost: Some(50),
            ..only_ip.clone()
        };
        let e = client.allow(&book, &costly).await.unwrap_err();
        assert!(e.0.contains("exceeds the capacity"), "{e}");
        assert_eq!(remaining(i_port, "i", &ip), 2);
        (client, book)
    });
    // Both nodes gone: each rule's own fail mode, combined as the node combines them.
    drop(nodes);
    rt.block_on(async {
        let a = client
            .allow(&book, &request("bob", "10.9.9.9"))
            .await
            .unwrap();
        assert_eq!(
            (
                a.decision.allowed,
                a.decision.source.clone(),
                a.rule.as_deref()
            ),
            (false, Source::FailClosed, Some(&b"u"[..])),
            "the closed user rule decides: {a:?}"
        );
        let ip_only = AllowRequest {
            ip: Some(b"10.9.9.9".to_vec()),
            ..AllowRequest::default()
        };
        let a = client.allow(&book, &ip_only).await.unwrap();
        assert_eq!(
            (a.decision.allowed, a.decision.source),
            (true, Source::FailOpen)
        );
    });
}
