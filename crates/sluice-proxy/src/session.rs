//! What the sidecar answers itself, as a node would: the connection handshake of every client
//! (`HELLO 2|3 [AUTH user pass] [SETNAME name]`, `AUTH`, `CLIENT SETNAME|GETNAME|SETINFO|ID|INFO|
//! NO-EVICT|NO-TOUCH`, `SELECT 0`, `READONLY`, `READWRITE`), and `PING`, `ECHO`, `QUIT`,
//! `RESET`, `COMMAND`, `CONFIG GET`. Replies use the connection's protocol (RESP3 maps, nulls
//! and verbatim strings after `HELLO 3`), as a node's do.
//!
//! # Invariants
//! - Until the connection authenticates (only when `--requirepass` is set), every command but
//!   `AUTH`, `HELLO`, `QUIT` and `RESET` answers `-NOAUTH`, as Redis does.
//! - A bad argument is an error reply naming it; the connection goes on.

use bytes::BytesMut;
use sluice_resp::Request;
use sluice_resp::reply::{self, Proto};

/// The Redis version the sidecar reports in `HELLO`: the one a node reports, so a client that
/// reads it treats both alike.
const REDIS_COMPAT_VERSION: &str = "7.0.15";

/// One client connection's state.
#[derive(Debug)]
pub struct Session {
    pub proto: Proto,
    pub authenticated: bool,
    pub name: Option<String>,
    pub id: u64,
}

impl Session {
    pub fn new(id: u64, requirepass: Option<&str>) -> Session {
        Session {
            proto: Proto::Resp2,
            authenticated: requirepass.is_none(),
            name: None,
            id,
        }
    }
}

/// What a handshake command did.
pub enum Local {
    /// Answered into the output.
    Done,
    /// Not one of these commands.
    NotMine,
}

const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";

/// Answers `req` if it is a handshake or connection command. `name` is the upper-cased name.
pub fn answer(
    name: &[u8],
    req: &Request,
    s: &mut Session,
    requirepass: Option<&str>,
    out: &mut BytesMut,
) -> Local {
    let argc = req.len();
    match name {
        b"HELLO" => hello(req, s, requirepass, out),
        b"AUTH" if (2..=3).contains(&argc) => {
            let pass = req.arg(argc - 1).unwrap_or_default();
            let user = (argc == 3).then(|| req.arg(1).unwrap_or_default());
            match auth(requirepass, user, pass) {
                Ok(()) => {
                    s.authenticated = true;
                    reply::simple(out, "OK");
                }
                Err(e) => reply::error(out, e),
            }
        }
        b"QUIT" => reply::simple(out, "OK"),
        b"RESET" => {
            *s = Session::new(s.id, requirepass);
            reply::simple(out, "RESET");
        }
        _ if !s.authenticated => reply::error(out, "NOAUTH Authentication required."),
        b"PING" if argc <= 2 => match req.arg(1) {
            Some(m) => reply::bulk(out, m),
            None => reply::simple(out, "PONG"),
        },
        b"ECHO" if argc == 2 => reply::bulk(out, req.arg(1).unwrap_or_default()),
        b"SELECT" if argc == 2 => match req.arg(1) {
            Some(b"0") => reply::simple(out, "OK"),
            _ => reply::error(out, "ERR DB index is out of range"),
        },
        // Cluster clients send READONLY to read from replicas; the sidecar routes by itself.
        b"READONLY" | b"READWRITE" if argc == 1 => reply::simple(out, "OK"),
        b"CLIENT" if argc >= 2 => client(req, s, out),
        b"COMMAND" => match req.arg(1).map(<[u8]>::to_ascii_uppercase).as_deref() {
            Some(b"COUNT") => reply::integer(out, 0),
            _ => reply::array(out, 0),
        },
        b"CONFIG" if req.arg(1).is_some_and(|a| a.eq_ignore_ascii_case(b"GET")) => {
            // What redis-benchmark asks at start; nothing else is configurable here.
            let wanted = req.arg(2).unwrap_or_default().to_ascii_lowercase();
            match wanted.as_slice() {
                b"save" | b"appendonly" => {
                    reply::map(out, s.proto, 1);
                    reply::bulk(out, &wanted);
                    reply::bulk(out, if wanted == b"save" { b"" } else { b"no" });
                }
                _ => reply::map(out, s.proto, 0),
            }
        }
        _ => return Local::NotMine,
    }
    Local::Done
}

/// `AUTH [user] pass` against `--requirepass`, with Redis's answers: the only user is
/// `default`, and without a password any password passes only as `AUTH default x`.
fn auth(requirepass: Option<&str>, user: Option<&[u8]>, pass: &[u8]) -> Result<(), &'static str> {
    if user.is_some_and(|u| u != b"default") {
        return Err(WRONGPASS);
    }
    match requirepass {
        None if user.is_none() => Err(
            "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
        ),
        None => Ok(()),
        Some(p) if constant_time_eq(p.as_bytes(), pass) => Ok(()),
        Some(_) => Err(WRONGPASS),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Redis's rule for client names and library names: printable, no spaces.
fn valid_name(name: &[u8]) -> bool {
    name.iter().all(|&c| (b'!'..=b'~').contains(&c))
}

/// `HELLO [protover [AUTH user pass] [SETNAME name]]`: checks everything before it changes
/// anything, then replies with the server's identity (a map in RESP3).
fn hello(req: &Request, s: &mut Session, requirepass: Option<&str>, out: &mut BytesMut) {
    let mut proto = None;
    let mut creds = None;
    let mut name = None;
    if let Some(ver) = req.arg(1) {
        proto = match ver {
            b"2" => Some(Proto::Resp2),
            b"3" => Some(Proto::Resp3),
            _ if sluice_resp::string2ll(ver).is_some() => {
                return reply::error(out, "NOPROTO unsupported protocol version");
            }
            _ => {
                return reply::error(
                    out,
                    "ERR Protocol version is not an integer or out of range",
                );
            }
        };
    }
    let mut i = 2;
    while let Some(opt) = req.arg(i) {
        let left = req.len() - i - 1;
        match opt.to_ascii_uppercase().as_slice() {
            b"AUTH" if left >= 2 => {
                creds = Some((
                    req.arg(i + 1).unwrap_or_default(),
                    req.arg(i + 2).unwrap_or_default(),
                ));
                i += 3;
            }
            b"SETNAME" if left >= 1 => {
                let n = req.arg(i + 1).unwrap_or_default();
                if !valid_name(n) {
                    return reply::error(
                        out,
                        "ERR Client names cannot contain spaces, newlines or special characters.",
                    );
                }
                name = Some(String::from_utf8_lossy(n).into_owned());
                i += 2;
            }
            _ => {
                return reply::error(
                    out,
                    &format!(
                        "ERR Syntax error in HELLO option '{}'",
                        String::from_utf8_lossy(opt)
                    ),
                );
            }
        }
    }
    if let Some((user, pass)) = creds {
        if let Err(e) = auth(requirepass, Some(user), pass) {
            return reply::error(out, e);
        }
        s.authenticated = true;
    }
    if !s.authenticated {
        return reply::error(
            out,
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time",
        );
    }
    if let Some(p) = proto {
        s.proto = p;
    }
    if name.is_some() {
        s.name = name;
    }
    let p = s.proto;
    reply::map(out, p, 7);
    for (k, v) in [("server", "redis"), ("version", REDIS_COMPAT_VERSION)] {
        reply::bulk(out, k.as_bytes());
        reply::bulk(out, v.as_bytes());
    }
    reply::bulk(out, b"proto");
    reply::integer(out, if p == Proto::Resp3 { 3 } else { 2 });
    reply::bulk(out, b"id");
    reply::integer(out, s.id as i64);
    for (k, v) in [("mode", "standalone"), ("role", "master")] {
        reply::bulk(out, k.as_bytes());
        reply::bulk(out, v.as_bytes());
    }
    reply::bulk(out, b"modules");
    reply::array(out, 0);
}

/// `CLIENT SETNAME|GETNAME|SETINFO|ID|INFO|NO-EVICT|NO-TOUCH`.
fn client(req: &Request, s: &mut Session, out: &mut BytesMut) {
    let sub = req.arg(1).unwrap_or_default().to_ascii_uppercase();
    let argc = req.len();
    match (sub.as_slice(), argc) {
        (b"SETNAME", 3) => {
            let n = req.arg(2).unwrap_or_default();
            if !valid_name(n) {
                return reply::error(
                    out,
                    "ERR Client names cannot contain spaces, newlines or special characters.",
                );
            }
            s.name = (!n.is_empty()).then(|| String::from_utf8_lossy(n).into_owned());
            reply::simple(out, "OK");
        }
        (b"GETNAME", 2) => match &s.name {
            Some(n) => reply::bulk(out, n.as_bytes()),
            None => reply::null(out, s.proto),
        },
        (b"SETINFO", 4) => {
            let attr = req.arg(2).unwrap_or_default().to_ascii_uppercase();
            if attr != b"LIB-NAME" && attr != b"LIB-VER" {
                return reply::error(
                    out,
                    &format!(
                        "ERR Unrecognized option '{}'",
                        String::from_utf8_lossy(req.arg(2).unwrap_or_default())
                    ),
                );
            }
            if !valid_name(req.arg(3).unwrap_or_default()) {
                return reply::error(
                    out,
                    "ERR LIB-NAME and LIB-VER cannot contain spaces, newlines or special characters.",
                );
            }
            reply::simple(out, "OK");
        }
        (b"ID", 2) => reply::integer(out, s.id as i64),
        (b"INFO", 2) => {
            let line = format!(
                "id={} name={} resp={}\n",
                s.id,
                s.name.as_deref().unwrap_or(""),
                if s.proto == Proto::Resp3 { 3 } else { 2 }
            );
            reply::verbatim(out, s.proto, "txt", line.as_bytes());
        }
        (b"NO-EVICT" | b"NO-TOUCH", 3) => reply::simple(out, "OK"),
        _ => reply::error(
            out,
            &format!(
                "ERR unknown subcommand or wrong number of arguments for '{}'. Try CLIENT SETNAME, GETNAME, SETINFO, ID, INFO, NO-EVICT or NO-TOUCH.",
                String::from_utf8_lossy(req.arg(1).unwrap_or_default())
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(s: &mut Session, pass: Option<&str>, args: &[&str]) -> String {
        let req = Request::from_args(args);
        let name = args[0].to_ascii_uppercase();
        let mut out = BytesMut::new();
        match answer(name.as_bytes(), &req, s, pass, &mut out) {
            Local::Done => String::from_utf8_lossy(&out).into_owned(),
            Local::NotMine => "not mine".into(),
        }
    }

    #[test]
    fn hello_switches_protocol_and_authenticates() {
        let mut s = Session::new(7, None);
        let r = run(&mut s, None, &["HELLO", "3"]);
        assert!(r.starts_with("%7\r\n"), "{r}");
        assert!(r.contains("$5\r\nproto\r\n:3\r\n"), "{r}");
        assert_eq!(s.proto, Proto::Resp3);
        assert_eq!(run(&mut s, None, &["CLIENT", "GETNAME"]), "_\r\n");
        assert!(run(&mut s, None, &["HELLO", "2"]).starts_with("*14\r\n"));
        assert_eq!(s.proto, Proto::Resp2);
        assert!(run(&mut s, None, &["HELLO", "4"]).starts_with("-NOPROTO"));
        assert!(run(&mut s, None, &["HELLO", "x"]).starts_with("-ERR Protocol"));
        assert!(run(&mut s, None, &["HELLO", "3", "BOGUS"]).starts_with("-ERR Syntax"));
        assert_eq!(s.proto, Proto::Resp2, "a refused HELLO changes nothing");
        // No password set: AUTH default x passes, AUTH x is Redis's error.
        assert!(run(&mut s, None, &["HELLO", "3", "AUTH", "default", "x"]).starts_with('%'));
        assert!(run(&mut s, None, &["AUTH", "x"]).starts_with("-ERR AUTH <password>"));

        let pass = Some("sekret");
        let mut s = Session::new(8, pass);
        assert!(run(&mut s, pass, &["PING"]).starts_with("-NOAUTH"));
        assert!(run(&mut s, pass, &["HELLO", "3"]).starts_with("-NOAUTH HELLO"));
        assert!(
            run(&mut s, pass, &["HELLO", "3", "AUTH", "default", "no"]).starts_with("-WRONGPASS")
        );
        assert!(
            run(
                &mut s,
                pass,
                &["HELLO", "3", "AUTH", "default", "sekret", "SETNAME", "gw"]
            )
            .starts_with('%')
        );
        assert_eq!(run(&mut s, pass, &["CLIENT", "GETNAME"]), "$2\r\ngw\r\n");
        assert_eq!(run(&mut s, pass, &["PING"]), "+PONG\r\n");
    }

    #[test]
    fn connect_time_commands_answer_as_a_node_does() {
        let mut s = Session::new(1, None);
        for ok in [
            &["CLIENT", "SETINFO", "LIB-NAME", "redis-py"][..],
            &["CLIENT", "SETINFO", "lib-ver", "8.1.0"],
            &["CLIENT", "SETNAME", "me"],
            &["SELECT", "0"],
            &["READONLY"],
        ] {
            assert_eq!(run(&mut s, None, ok), "+OK\r\n", "{ok:?}");
        }
        assert!(run(&mut s, None, &["SELECT", "1"]).starts_with("-ERR DB index"));
        assert!(
            run(&mut s, None, &["CLIENT", "SETINFO", "X", "y"]).starts_with("-ERR Unrecognized")
        );
        assert!(run(&mut s, None, &["CLIENT", "SETNAME", "a b"]).starts_with("-ERR Client names"));
        assert!(
            run(&mut s, None, &["CLIENT", "MAINT_NOTIFICATIONS", "ON"])
                .starts_with("-ERR unknown subcommand")
        );
        assert_eq!(run(&mut s, None, &["GET", "k"]), "not mine");
    }
}
