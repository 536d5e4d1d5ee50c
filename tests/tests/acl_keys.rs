//! ACL key patterns (`~pattern`, `%R~`, `%W~`, `~*`, `resetkeys`), `ACL LOG` and `ACL GENPASS`
//! with redis-cli and redis-py (RESP3), against the real binary.

use sluice_tests::{
    Sluice, have_tool, output_text as text, python_lines, redis_cli, redis_cli_as as cli_as,
};

const ADMIN: &str = "adm1n-pass";
const APP: &str = "app-pass";

fn admin(port: u16, args: &[&str]) -> String {
    cli_as(port, "default", ADMIN, args)
}

fn app(port: u16, args: &[&str]) -> String {
    cli_as(port, "app", APP, args)
}

/// A node with a user `app` that may check `app:*` keys and read `shared:*` ones.
fn start() -> Sluice {
    let server = Sluice::start_with(&["--requirepass", ADMIN]);
    let out = admin(
        server.port,
        &[
            "ACL",
            "SETUSER",
            "app",
            "on",
            &format!(">{APP}"),
            "+@ratelimit",
            "+@connection",
            "+get",
            "~app:*",
            "%R~shared:*",
        ],
    );
    assert_eq!(out.trim(), "OK", "{out}");
    server
}

const NOPERM_KEY: &str = "NOPERM No permissions to access a key";

#[test]
fn key_patterns_grant_and_refuse_keys() {
    if !have_tool("redis-cli") {
        return;
    }
    let server = start();
    let p = server.port;
    assert_eq!(
        app(p, &["RL.CHECK", "app:1", "5", "10"]).lines().next(),
        Some("1")
    );
    assert_eq!(app(p, &["RL.CHECK", "other", "5", "10"]).trim(), NOPERM_KEY);
    // Read-only keys: a read passes, a check (which writes its bucket) does not.
    assert_eq!(app(p, &["GET", "shared:x"]).trim(), "");
    assert_eq!(
        app(p, &["RL.CHECK", "shared:x", "5", "10"]).trim(),
        NOPERM_KEY
    );
    // The refused check changed nothing.
    let dry = admin(p, &["RL.CHECK", "other", "5", "10", "DRY"]);
    assert_eq!(dry.lines().nth(2), Some("4"), "{dry}");
    // Keys known only once parsed: RL.HIT's bucket is `rule:subject`.
    let out = admin(p, &["RL.RULE", "SET", "app", "LIMIT", "3", "PERIOD", "1m"]);
    assert!(!out.contains("ERR"), "{out}");
    admin(p, &["RL.RULE", "SET", "web", "LIMIT", "3", "PERIOD", "1m"]);
    assert_eq!(app(p, &["RL.HIT", "app", "bob"]).lines().next(), Some("1"));
    assert_eq!(app(p, &["RL.HIT", "web", "bob"]).trim(), NOPERM_KEY);

    let user = admin(p, &["ACL", "GETUSER", "app"]);
    assert!(user.contains("~app:* %R~shared:*"), "{user}");
    let list = admin(p, &["ACL", "LIST"]);
    assert!(list.contains("user app on #"), "{list}");
    assert!(list.contains(" ~app:* %R~shared:* &* "), "{list}");
    assert!(
        list.contains("user default on #") && list.contains(" ~* &* +@all"),
        "{list}"
    );

    // `~*` after patterns replaces them; a pattern after `~*` is refused; resetkeys: none.
    assert_eq!(admin(p, &["ACL", "SETUSER", "app", "~*"]).trim(), "OK");
    assert!(app(p, &["RL.CHECK", "other", "5", "10"]).starts_with('1'));
    let out = admin(p, &["ACL", "SETUSER", "app", "~more:*"]);
    assert!(
        out.contains("Adding a pattern after the * pattern"),
        "{out}"
    );
    assert_eq!(
        admin(p, &["ACL", "SETUSER", "app", "resetkeys"]).trim(),
        "OK"
    );
    assert_eq!(app(p, &["RL.CHECK", "app:1", "5", "10"]).trim(), NOPERM_KEY);
    assert_eq!(app(p, &["PING"]).trim(), "PONG");
    // A new user touches no key until a rule says so, as in Redis.
    admin(p, &["ACL", "SETUSER", "new", "on", ">x", "+@ratelimit"]);
    assert_eq!(
        cli_as(p, "new", "x", &["RL.CHECK", "k", "5", "10"]).trim(),
        NOPERM_KEY
    );
    let out = admin(p, &["ACL", "SETUSER", "app", "%Q~x"]);
    assert!(out.contains("Syntax error"), "{out}");
}

#[test]
fn acl_log_keeps_the_refusals() {
    if !have_tool("redis-cli") {
        return;
    }
    let server = start();
    let p = server.port;
    app(p, &["RL.CHECK", "other", "5", "10"]);
    app(p, &["RL.CHECK", "other", "5", "10"]);
    app(p, &["FLUSHALL"]);
    cli_as(p, "app", "wrong", &["PING"]);
    let log = admin(p, &["ACL", "LOG"]);
    let lines: Vec<&str> = log.lines().collect();
    // Newest first: the failed login, the command, then the key refused twice.
    let field = |entry: usize, name: &str| -> String {
        let at = lines
            .iter()
            .enumerate()
            .filter(|(_, l)| **l == name)
            .nth(entry)
            .map(|(i, _)| i)
            .unwrap_or_else(|| panic!("no {name} in entry {entry}:\n{log}"));
        lines[at + 1].to_string()
    };
    assert_eq!(field(0, "reason"), "auth", "{log}");
    assert_eq!(field(0, "object"), "AUTH");
    assert_eq!(field(0, "username"), "app");
    assert_eq!(field(1, "reason"), "command");
    assert_eq!(field(1, "object"), "flushall");
    assert_eq!(field(2, "reason"), "key");
    assert_eq!(field(2, "object"), "other");
    assert_eq!(field(2, "count"), "2");
    assert_eq!(field(2, "context"), "toplevel");
    assert!(field(2, "client-info").contains("user=app"), "{log}");
    let one = admin(p, &["ACL", "LOG", "1"]);
    assert_eq!(one.lines().filter(|l| *l == "reason").count(), 1, "{one}");
    assert_eq!(admin(p, &["ACL", "LOG", "RESET"]).trim(), "OK");
    assert_eq!(admin(p, &["ACL", "LOG"]).trim(), "");
    let out = admin(p, &["ACL", "LOG", "-1"]);
    assert!(out.contains("ERR"), "{out}");
}

#[test]
fn acl_genpass() {
    if !have_tool("redis-cli") {
        return;
    }
    let server = Sluice::start();
    let p = server.port;
    let a = text(&redis_cli(p, &["ACL", "GENPASS"])).trim().to_string();
    let b = text(&redis_cli(p, &["ACL", "GENPASS"])).trim().to_string();
    assert_eq!(a.len(), 64, "{a}");
    assert!(
        a.bytes()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    );
    assert_ne!(a, b);
    assert_eq!(
        text(&redis_cli(p, &["ACL", "GENPASS", "5"])).trim().len(),
        2
    );
    for bad in ["0", "4097", "x"] {
        let out = text(&redis_cli(p, &["ACL", "GENPASS", bad]));
        assert!(out.contains("ACL GENPASS argument must be"), "{out}");
    }
}

#[test]
fn key_patterns_and_acl_log_with_redis_py() {
    if !have_tool("python3") {
        return;
    }
    let server = start();
    let script = r#"
import sys, redis
port, app_pw, admin_pw = int(sys.argv[1]), sys.argv[2], sys.argv[3]
app = redis.Redis(host="127.0.0.1", port=port, username="app", password=app_pw, protocol=3)
print(app.execute_command("HELLO")[b"proto"])
print(app.execute_command("RL.CHECK", "app:py", 5, 10)[0])
try:
    app.execute_command("RL.CHECK", "nope", 5, 10)
    print("allowed")
except redis.exceptions.NoPermissionError as e:
    print("NOPERM", e)
adm = redis.Redis(host="127.0.0.1", port=port, username="default", password=admin_pw, protocol=3)
entry = adm.execute_command("ACL", "LOG", "1")[0]
print(entry[b"reason"].decode(), entry[b"object"].decode(), entry[b"username"].decode(),
      type(entry[b"age-seconds"]).__name__)
print(len(adm.acl_genpass()))
"#;
    let (lines, all) = python_lines(script, &[&server.port.to_string(), APP, ADMIN]);
    assert_eq!(
        lines,
        [
            "3",
            "1",
            "NOPERM No permissions to access a key",
            "key nope app float",
            "64"
        ],
        "{all}"
    );
}
