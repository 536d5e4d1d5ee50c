//! What the front-door targets (`http_request`, `grpc_request`) share: a runtime to call the
//! fronts on, and a node locked to one ACL user.

use sluice_node::{Config, Executor};

/// A current-thread runtime, as the fronts' own threads run.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// A node whose `default` user is off and whose one user `gw` (password `gw-secret`) has
/// `rules`; `setup` runs first, as `default`.
pub fn locked_node(rules: &[&str], setup: &[&[&str]]) -> Executor {
    let mut node = Executor::new(Config::default_for_tests());
    let user: Vec<&str> = ["ACL", "SETUSER", "gw", "on", ">gw-secret"]
        .into_iter()
        .chain(rules.iter().copied())
        .collect();
    let last: &[&str] = &["ACL", "SETUSER", "default", "off"];
    for cmd in std::iter::once(&user[..])
        .chain(setup.iter().copied())
        .chain(std::iter::once(last))
    {
        let args: Vec<&[u8]> = cmd.iter().map(|a| a.as_bytes()).collect();
        let reply = node.exec(&args);
        assert!(
            reply.starts_with(b"+OK") || reply.starts_with(b":"),
            "{cmd:?}: {reply:?}"
        );
    }
    node
}
