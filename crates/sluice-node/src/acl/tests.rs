use super::*;

fn catalog() -> Catalog {
    let mut c = Catalog::default();
    c.add("auth", category::CONNECTION, true);
    c.add("rl.check", category::RATELIMIT | category::WRITE, false);
    c.add("flushall", category::ADMIN | category::WRITE, false);
    let rule = c.add("rl.rule", 0, false);
    c.add_subcommand(rule, "get", category::RATELIMIT);
    c.add_subcommand(rule, "set", category::ADMIN);
    c
}

#[test]
fn a_gateway_user_runs_its_category_and_nothing_else() {
    let acl = Acl::new(catalog(), None, None);
    let rules: Vec<&[u8]> = vec![b"on", b">secret", b"+@ratelimit"];
    acl.set_user("gw", &rules).unwrap();
    let gw = acl.authenticate("gw", b"secret").expect("logs in");
    assert!(acl.authenticate("gw", b"wrong").is_none());
    assert!(gw.allows(0), "AUTH is always allowed");
    assert!(gw.allows(1));
    assert!(!gw.allows(2));
    assert!(!gw.allows(3), "RL.RULE itself is not granted");
    assert_eq!(acl.catalog().subcommand_id(3, b"GET"), Some(4));
    assert!(gw.allows(4));
    assert!(!gw.allows(5));
    assert_eq!(
        gw.describe(),
        format!(
            "user gw on #{} &* -@all +@ratelimit",
            "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"
        )
    );
}

#[test]
fn a_wrong_rule_changes_nothing() {
    let acl = Acl::new(catalog(), Some("pw"), None);
    let rules: Vec<&[u8]> = vec![b"on", b"nopass", b"+nosuch"];
    let err = acl.set_user("x", &rules).unwrap_err();
    assert_eq!(
        err,
        "Error in ACL SETUSER modifier '+nosuch': Unknown command or category name in ACL"
    );
    assert!(acl.get("x").is_none());
    let keys: Vec<&[u8]> = vec![b"~app:*"];
    assert!(acl.set_user("default", &keys).is_err());
    assert!(acl.default_user().accepts(b"pw"));
    assert!(!acl.default_user().needs_no_password());
}

#[test]
fn requirepass_and_deluser_change_live_users() {
    let acl = Acl::new(catalog(), None, None);
    let default = acl.default_user();
    assert!(default.needs_no_password());
    acl.set_requirepass(Some("new"));
    assert!(!default.needs_no_password() && default.accepts(b"new"));
    let rules: Vec<&[u8]> = vec![b"on", b"nopass", b"+rl.rule"];
    acl.set_user("ops", &rules).unwrap();
    let ops = acl.get("ops").unwrap();
    assert!(ops.allows(3) && ops.allows(5));
    assert!(acl.del_users(&["default"]).is_err());
    assert_eq!(acl.del_users(&["ops", "none"]), Ok(1));
    assert!(!ops.allows(3) && ops.allows(0));
}

#[test]
fn a_subcommand_is_judged_by_its_own_bit_as_in_redis_7() {
    let acl = Acl::new(catalog(), None, None);
    let verdicts = |rules: &[&[u8]]| {
        acl.set_user("u", &[b"reset" as &[u8]]).unwrap();
        acl.set_user("u", rules).unwrap();
        let u = acl.get("u").unwrap();
        [
            acl.permits(&u, 3, Some(b"get")),
            acl.permits(&u, 3, Some(b"SET")),
            acl.permits(&u, 3, None),
            acl.permits(&u, 3, Some(b"nosuch")),
            acl.permits(&u, 1, None),
        ]
    };
    // `+@all -@admin`: the admin subcommand is refused although RL.RULE's own bit is set.
    assert_eq!(
        verdicts(&[b"+@all", b"-@admin"]),
        [Ok(()), Err(5), Ok(()), Ok(()), Ok(())]
    );
    assert_eq!(
        verdicts(&[b"+@all", b"-rl.rule|set"]),
        [Ok(()), Err(5), Ok(()), Ok(()), Ok(())]
    );
    assert_eq!(
        verdicts(&[b"-@all", b"+rl.rule|get"]),
        [Ok(()), Err(5), Err(3), Err(3), Err(1)]
    );
    assert_eq!(
        verdicts(&[b"+@all", b"-rl.rule", b"+rl.rule|get"]),
        [Ok(()), Err(5), Err(3), Err(3), Ok(())]
    );
    assert_eq!(
        verdicts(&[b"+@all", b"-rl.rule|set", b"+rl.rule"]),
        [Ok(()), Ok(()), Ok(()), Ok(()), Ok(())]
    );
}
