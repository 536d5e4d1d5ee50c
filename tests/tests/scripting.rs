//! Lua scripting (issue 36), held to redis-server 7.0.15: a corpus of scripts run on both, every
//! reply compared exactly (errors with their `script: <sha>, on @user_script:<line>.` tail,
//! pcall, nil holes, KEYS/ARGV edges, globals, numbers, status and error tables, RESP3 after
//! HELLO 3); the script cache and the command rows; then what only Sluice is asked: hostile
//! scripts bounded while other clients are served, atomicity without a global lock, and a
//! failing script's writes kept and replicated.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use sluice_tests::resp::{Reply, RespConn};
use sluice_tests::{RedisServer, Sluice, have_tool, wait_until};

/// A script and its keys and arguments.
struct Case {
    script: &'static str,
    keys: &'static [&'static str],
    args: &'static [&'static str],
}

const fn case(
    script: &'static str,
    keys: &'static [&'static str],
    args: &'static [&'static str],
) -> Case {
    Case { script, keys, args }
}

/// Scripts whose replies both servers must give byte for byte (RESP2). Each runs after a
/// FLUSHALL with `a` = "1" and `s` = "text" set.
const CORPUS: &[Case] = &[
    // Values and their conversions.
    case("return 1", &[], &[]),
    case("return 3.99", &[], &[]),
    case("return -3.99", &[], &[]),
    case("return 1e20", &[], &[]),
    case("return 'x'", &[], &[]),
    case("return ''", &[], &[]),
    case("return true", &[], &[]),
    case("return false", &[], &[]),
    case("return nil", &[], &[]),
    case("return", &[], &[]),
    case("return {}", &[], &[]),
    case("return {1, 2, 3.7, nil, 5}", &[], &[]),
    case("return {1, {2, {3, 'x'}}, true, false, 'y'}", &[], &[]),
    case("return {1, {ok='st'}, {err='in'}, 'x'}", &[], &[]),
    case("return {ok='FINE'}", &[], &[]),
    case("return {err='bad thing'}", &[], &[]),
    case("return {err='x\\ny'}", &[], &[]),
    case("return {double=3.14}", &[], &[]),
    case("return {double=2}", &[], &[]),
    case("return {a=1}", &[], &[]),
    case("return redis.status_reply('a b')", &[], &[]),
    case("return redis.error_reply('My Error')", &[], &[]),
    case("return redis.error_reply('oops')", &[], &[]),
    case("return redis.error_reply('-WRONGTYPE bad')", &[], &[]),
    case("return redis.sha1hex('')", &[], &[]),
    case("return redis.sha1hex('hello')", &[], &[]),
    case("return tostring(1e20)", &[], &[]),
    case("return tostring(0.1)", &[], &[]),
    case("return type(redis.log)", &[], &[]),
    case("redis.log(redis.LOG_WARNING, 'hi') return 1", &[], &[]),
    case(
        "redis.set_repl(redis.REPL_ALL) return redis.replicate_commands()",
        &[],
        &[],
    ),
    // KEYS and ARGV.
    case("return KEYS", &["k1", "k2"], &["a1", "a2", "a3"]),
    case("return ARGV", &["k1"], &["a1", "", "a3"]),
    case("return {#KEYS, #ARGV}", &[], &[]),
    case("return KEYS[3]", &["k1"], &[]),
    case("return ARGV[1] .. KEYS[1]", &["k"], &["v"]),
    // Commands and their replies.
    case("return redis.call('get', KEYS[1])", &["a"], &[]),
    case("return redis.call('get', 'nokey')", &[], &[]),
    case("return redis.call('incr', KEYS[1])", &["a"], &[]),
    case("return redis.call('set', KEYS[1], ARGV[1])", &["n"], &["v"]),
    case("return redis.call('set', 'n', 'v', 'NX', 'GET')", &[], &[]),
    case("return redis.call('mget', 'a', 'nokey', 's')", &[], &[]),
    case(
        "redis.call('set', 'f', 0.1) return redis.call('get', 'f')",
        &[],
        &[],
    ),
    case(
        "redis.call('set', 'f', 3) return redis.call('get', 'f')",
        &[],
        &[],
    ),
    case(
        "redis.call('set', 'f', 1e20) return redis.call('get', 'f')",
        &[],
        &[],
    ),
    case("return redis.call('incrby', 'a', 2.5)", &[], &[]),
    case("return redis.call('exists', 'a', 's', 'nokey')", &[], &[]),
    case("return redis.call('ping')", &[], &[]),
    case("return redis.call('echo', 'x')", &[], &[]),
    case("return redis.call('type', 's')", &[], &[]),
    case("return redis.call('del', 'a', 's')", &[], &[]),
    case("return redis.call('ttl', 'a')", &[], &[]),
    // Errors from commands, raised and caught.
    case("return redis.call('incr', 's')", &[], &[]),
    case("return redis.pcall('incr', 's')", &[], &[]),
    case("local r = redis.pcall('incr', 's') return r.err", &[], &[]),
    case("return redis.call('nosuch')", &[], &[]),
    case("return redis.pcall('nosuch')", &[], &[]),
    case("return redis.call('get')", &[], &[]),
    case("return redis.call('get', 'a', 'b')", &[], &[]),
    case("return redis.call('multi')", &[], &[]),
    case("return redis.pcall('eval', 'return 1', 0)", &[], &[]),
    case("return redis.call('subscribe', 'c')", &[], &[]),
    case("return redis.call('config', 'get', 'maxmemory')", &[], &[]),
    case("return redis.call()", &[], &[]),
    case("return redis.pcall()", &[], &[]),
    case("return redis.call('get', {})", &[], &[]),
    case("return redis.pcall('get', {})", &[], &[]),
    case("return redis.call('set', 's', 'x', 'EX', 'no')", &[], &[]),
    case(
        "redis.call('set', 'w', '1')\nlocal x = redis.call('incr', 's')\nreturn x",
        &[],
        &[],
    ),
    case(
        "local ok = pcall(redis.call, 'incr', 's') return ok",
        &[],
        &[],
    ),
    case(
        "local ok, e = pcall(redis.call, 'incr', 's') return e.err",
        &[],
        &[],
    ),
    // Errors from Lua.
    case("error('boom')", &[], &[]),
    case("\n\nerror('on line 3')", &[], &[]),
    case("error({err='X boom'})", &[], &[]),
    case("error({err='plain'})", &[], &[]),
    case("error(42)", &[], &[]),
    case("local t = nil; return t.x", &[], &[]),
    case("return 1 + {}", &[], &[]),
    case("syntax error here", &[], &[]),
    case("return (", &[], &[]),
    case("return redis.setresp(4)", &[], &[]),
    case("return redis.setresp()", &[], &[]),
    // Redis 7's shebang.
    case("#!lua\nreturn 1", &[], &[]),
    case("#!lua\nerror('x')", &[], &[]),
    case(
        "#!lua flags=no-writes\nreturn redis.call('get', 'a')",
        &[],
        &[],
    ),
    case(
        "#!lua flags=no-writes\nreturn redis.call('set', 'a', 'b')",
        &[],
        &[],
    ),
    case("#!lua flags=no-writes,allow-stale\nreturn 2", &[], &[]),
    case("#!python\nreturn 1", &[], &[]),
    case("#!lua flags=bogus\nreturn 1", &[], &[]),
    case("#!lua other=1\nreturn 1", &[], &[]),
    // The sandbox.
    case("x = 1", &[], &[]),
    case("function f() end", &[], &[]),
    case("return x", &[], &[]),
    case("return os", &[], &[]),
    case("return io", &[], &[]),
    case("return loadfile", &[], &[]),
    case("return dofile", &[], &[]),
    case("return require", &[], &[]),
    case("_G.x = 1", &[], &[]),
    case("string.x = 1", &[], &[]),
    case("redis.x = 1", &[], &[]),
    case("math.floor = nil", &[], &[]),
    case("rawset(string, 'x', 1)", &[], &[]),
    case("rawset(_G, 'x', 1)", &[], &[]),
    case("setmetatable(string, nil)", &[], &[]),
    case("return getmetatable(string)", &[], &[]),
    case("return type(getmetatable(_G))", &[], &[]),
    case("KEYS[1] = 'x' return KEYS[1]", &["k"], &[]),
    case("local t = {} rawset(t, 'a', 1) return t.a", &[], &[]),
    case(
        "local t = setmetatable({}, {__index = function() return 5 end}) return t.z",
        &[],
        &[],
    ),
    case("return type(debug)", &[], &[]),
    case("return type(getfenv)", &[], &[]),
    case("return type(setfenv)", &[], &[]),
    case("return type(print)", &[], &[]),
    case("return type(newproxy)", &[], &[]),
    case("return type(coroutine)", &[], &[]),
    case("return type(collectgarbage)", &[], &[]),
    case("return _VERSION", &[], &[]),
    case("return ('abc'):upper()", &[], &[]),
    case("return string.len('abcd')", &[], &[]),
    case("local x = 1 return x", &[], &[]),
    case("return type(string.format)", &[], &[]),
    case("return string.format('%d-%s', 7, 'x')", &[], &[]),
    case("return math.floor(7.9)", &[], &[]),
    case("return table.concat({'a', 'b'}, ',')", &[], &[]),
    case("return tonumber('12') + 1", &[], &[]),
    case("return tostring(nil)", &[], &[]),
    case("return type(KEYS)", &[], &[]),
    // bit and cjson.
    case("return bit.band(7, 3)", &[], &[]),
    case("return bit.bor(1, 2, 4)", &[], &[]),
    case("return bit.bxor(5, 1)", &[], &[]),
    case("return bit.bnot(0)", &[], &[]),
    case("return bit.lshift(1, 31)", &[], &[]),
    case("return bit.rshift(-1, 28)", &[], &[]),
    case("return bit.arshift(-16, 2)", &[], &[]),
    case("return bit.tohex(255)", &[], &[]),
    case("return bit.tohex(-1, -4)", &[], &[]),
    case("return bit.tobit(4294967297)", &[], &[]),
    case("return cjson.encode({1, 2, 3})", &[], &[]),
    case("return cjson.encode({a=1})", &[], &[]),
    case("return cjson.encode('x\"y')", &[], &[]),
    case("return cjson.encode(1.5)", &[], &[]),
    case("return cjson.decode('[1,2,\"x\"]')", &[], &[]),
    case("return cjson.decode('{\"a\":5}').a", &[], &[]),
    case("return cjson.decode('[1,null,3]')[3]", &[], &[]),
    // Limiter-shaped scripts.
    case(
        "local c = redis.call('incr', KEYS[1]) if c == 1 then redis.call('expire', KEYS[1], ARGV[1]) end return c",
        &["rl"],
        &["60"],
    ),
    case(
        "local v = tonumber(redis.call('get', KEYS[1]) or '0') if v >= tonumber(ARGV[1]) then return 0 end redis.call('incrby', KEYS[1], 1) return 1",
        &["rl2"],
        &["10"],
    ),
    case(
        "local t = redis.call('time') return type(t[1]) .. #t",
        &[],
        &[],
    ),
    // An error the script caught leaves nothing behind for the next redis.call's own.
    case(
        "pcall(redis.setresp, 9) return redis.call('incr', KEYS[1])",
        &["s"],
        &[],
    ),
    case(
        "xpcall(function() redis.setresp(9) end, function(e) return e end) return redis.call('incr', KEYS[1])",
        &["s"],
        &[],
    ),
    // The globals' protection cannot be undone through their metatable.
    case("getmetatable(_G).__newindex = nil return 1", &[], &[]),
    case(
        "local ok = pcall(function() getmetatable(_G).__newindex = nil end) return tostring(ok)",
        &[],
        &[],
    ),
];

fn eval_args(c: &Case) -> Vec<String> {
    let mut args = vec![
        "EVAL".to_string(),
        c.script.to_string(),
        c.keys.len().to_string(),
    ];
    args.extend(c.keys.iter().map(|k| k.to_string()));
    args.extend(c.args.iter().map(|a| a.to_string()));
    args
}

fn reset(conn: &mut RespConn) {
    conn.call(&["FLUSHALL"]);
    conn.call(&["SET", "a", "1"]);
    conn.call(&["SET", "s", "text"]);
}

#[test]
fn the_corpus_answers_as_redis_does() {
    if !have_tool("redis-server") {
        eprintln!("skipped: no redis-server");
        return;
    }
    let redis = RedisServer::start(&[]);
    let sluice = Sluice::start();
    let mut theirs = RespConn::connect(redis.port);
    let mut ours = RespConn::connect(sluice.port);
    let mut differ = Vec::new();
    for c in CORPUS {
        reset(&mut theirs);
        reset(&mut ours);
        let args = eval_args(c);
        let (want, got) = (theirs.call(&args), ours.call(&args));
        if want != got {
            differ.push(format!(
                "{:?} keys {:?} args {:?}\n  redis:  {want:?}\n  sluice: {got:?}",
                c.script, c.keys, c.args
            ));
        }
        // What the script left behind, too.
        let probe = ["MGET", "a", "s", "n", "f", "w", "rl", "rl2"];
        let (want, got) = (theirs.call(&probe), ours.call(&probe));
        if want != got {
            differ.push(format!(
                "{:?}: keys after\n  redis:  {want:?}\n  sluice: {got:?}",
                c.script
            ));
        }
    }
    assert!(
        differ.is_empty(),
        "{} of {} differ:\n{}",
        differ.len(),
        CORPUS.len(),
        differ.join("\n")
    );
}

/// Scripts under RESP3 (HELLO 3), with and without `redis.setresp(3)`: replies compared as raw
/// bytes.
const RESP3_CORPUS: &[&str] = &[
    "return nil",
    "return false",
    "return true",
    "return {1, false, 'x'}",
    "redis.setresp(3) return true",
    "redis.setresp(3) return false",
    "redis.setresp(3) return nil",
    "redis.setresp(3) return {double=1.5}",
    "return {double=1.5}",
    "redis.setresp(3) return {map={a=1}}",
    "return {map={b='x'}}",
    "redis.setresp(3) return {set={z=true}}",
    "return {set={z=true}}",
    "redis.setresp(3) return redis.call('get', 'nokey')",
    "redis.setresp(3) return type(redis.call('get', 'nokey'))",
    "return type(redis.call('get', 'nokey'))",
    "redis.setresp(3) return redis.call('get', 'a')",
    "redis.setresp(3) return redis.call('incr', 'a')",
    "redis.setresp(3) return {big_number='123456789012345678901234567890'}",
    "return {big_number='12345'}",
    "redis.setresp(3) return {verbatim_string={format='txt', string='hi'}}",
    "redis.setresp(2) return redis.call('get', 'nokey')",
];

#[test]
fn resp3_replies_match_redis() {
    if !have_tool("redis-server") {
        eprintln!("skipped: no redis-server");
        return;
    }
    let redis = RedisServer::start(&[]);
    let sluice = Sluice::start();
    let mut theirs = Raw::connect(redis.port);
    let mut ours = Raw::connect(sluice.port);
    theirs.call(&["HELLO", "3"]);
    ours.call(&["HELLO", "3"]);
    theirs.call(&["SET", "a", "1"]);
    ours.call(&["SET", "a", "1"]);
    let mut differ = Vec::new();
    for script in RESP3_CORPUS {
        let args = ["EVAL", script, "0"];
        let (want, got) = (theirs.call(&args), ours.call(&args));
        if want != got {
            differ.push(format!(
                "{script:?}\n  redis:  {:?}\n  sluice: {:?}",
                String::from_utf8_lossy(&want),
                String::from_utf8_lossy(&got)
            ));
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

/// A raw connection that reads one whole RESP2/RESP3 value as its bytes.
struct Raw {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Raw {
    fn connect(port: u16) -> Raw {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Raw {
            reader: BufReader::new(s.try_clone().unwrap()),
            writer: s,
        }
    }

    fn call(&mut self, args: &[&str]) -> Vec<u8> {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
        }
        self.writer.write_all(&out).unwrap();
        let mut reply = Vec::new();
        self.value(&mut reply);
        reply
    }

    fn value(&mut self, into: &mut Vec<u8>) {
        let mut line = Vec::new();
        self.reader.read_until(b'\n', &mut line).unwrap();
        into.extend_from_slice(&line);
        let head = String::from_utf8_lossy(&line[1..line.len() - 2]).into_owned();
        let n: i64 = head.parse().unwrap_or(0);
        match line[0] {
            b'$' | b'=' | b'!' if n >= 0 => {
                let mut body = vec![0; n as usize + 2];
                self.reader.read_exact(&mut body).unwrap();
                into.extend_from_slice(&body);
            }
            b'*' | b'~' | b'>' => (0..n).for_each(|_| self.value(into)),
            b'%' | b'|' => (0..2 * n).for_each(|_| self.value(into)),
            _ => {}
        }
    }
}

#[test]
fn the_script_cache_answers_as_redis_does() {
    if !have_tool("redis-server") {
        eprintln!("skipped: no redis-server");
        return;
    }
    let redis = RedisServer::start(&[]);
    let sluice = Sluice::start_with(&["--threads", "2"]);
    let mut theirs = RespConn::connect(redis.port);
    let mut ours = RespConn::connect(sluice.port);
    // A second connection: SCRIPT LOAD on one serves EVALSHA on the other, whatever threads
    // they are on.
    let mut ours_too = RespConn::connect(sluice.port);
    let sha = "e0e1f9fabfc9d4800c877a703b823ac0578ff8db";
    let steps: &[&[&str]] = &[
        &["SCRIPT", "FLUSH"],
        &["EVALSHA", sha, "0"],
        &["SCRIPT", "EXISTS", sha, "abc"],
        &["SCRIPT", "LOAD", "return 1"],
        &["SCRIPT", "EXISTS", sha, "abc"],
        &["EVALSHA", sha, "0"],
        &["EVALSHA", "E0E1F9FABFC9D4800C877A703B823AC0578FF8DB", "0"],
        &["EVALSHA_RO", sha, "0"],
        &["EVALSHA", "abc", "0"],
        &["SCRIPT", "LOAD", "return ("],
        // A body that does not compile is not cached.
        &["EVAL", "return (", "0"],
        &["EVALSHA", "728acb63e2aaef0ee859ece5db586bff5d800d1e", "0"],
        &[
            "SCRIPT",
            "EXISTS",
            "728acb63e2aaef0ee859ece5db586bff5d800d1e",
        ],
        &["SCRIPT", "LOAD"],
        &["SCRIPT", "EXISTS"],
        &["SCRIPT", "FLUSH", "ASYNC"],
        &["SCRIPT", "FLUSH", "foo"],
        &["SCRIPT", "FLUSH", "SYNC", "x"],
        &["SCRIPT", "KILL"],
        &["SCRIPT", "foo"],
        &["EVALSHA", sha, "0"],
        &["EVAL", "return 1", "0"],
        &["EVALSHA", sha, "0"],
        &["EVAL", "return 1", "-1"],
        &["EVAL", "return 1", "2", "a"],
        &["EVAL", "return 1", "abc"],
        &["EVAL", "return 1"],
        &["EVAL_RO", "return redis.call('set', 'a', 'b')", "0"],
        &["EVAL_RO", "return redis.call('get', 'a')", "0"],
        &["EVAL_RO", "return redis.pcall('incr', 'a')", "0"],
    ];
    for (i, step) in steps.iter().enumerate() {
        let want = theirs.call(step);
        let got = if i % 2 == 0 {
            ours.call(step)
        } else {
            ours_too.call(step)
        };
        assert_eq!(want, got, "{step:?}");
    }
}

#[test]
fn command_rows_match_redis() {
    if !have_tool("redis-server") {
        eprintln!("skipped: no redis-server");
        return;
    }
    let redis = RedisServer::start(&[]);
    let sluice = Sluice::start();
    let mut theirs = RespConn::connect(redis.port);
    let mut ours = RespConn::connect(sluice.port);
    for name in [
        "eval",
        "evalsha",
        "eval_ro",
        "evalsha_ro",
        "fcall",
        "fcall_ro",
    ] {
        let head = |r: Reply| match r {
            Reply::Array(mut rows) => match rows.remove(0) {
                Reply::Array(fields) => fields.into_iter().take(6).collect::<Vec<_>>(),
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        };
        let want = head(theirs.call(&["COMMAND", "INFO", name]));
        let got = head(ours.call(&["COMMAND", "INFO", name]));
        assert_eq!(want, got, "{name}");
    }
    let cat = |c: &mut RespConn| match c.call(&["ACL", "CAT", "scripting"]) {
        Reply::Array(names) => {
            let mut names: Vec<String> = names
                .into_iter()
                .map(|n| match n {
                    Reply::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
                    other => format!("{other:?}"),
                })
                .filter(|n| n.starts_with("eval") || n == "script")
                .collect();
            names.sort();
            names
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(cat(&mut theirs), cat(&mut ours));
}

/// Sends each of `steps` to a fresh redis-server and a fresh Sluice, one connection each, and
/// asserts the replies are the same.
fn same_steps_as_redis(steps: &[&[&str]]) {
    if !have_tool("redis-server") {
        eprintln!("skipped: no redis-server");
        return;
    }
    let redis = RedisServer::start(&[]);
    let sluice = Sluice::start();
    let mut theirs = RespConn::connect(redis.port);
    let mut ours = RespConn::connect(sluice.port);
    for step in steps {
        assert_eq!(ours.call(step), theirs.call(step), "{step:?}");
    }
}

#[test]
fn scripts_run_inside_multi_exec() {
    same_steps_as_redis(&[
        &["MULTI"],
        &["EVAL", "return redis.call('incr', KEYS[1])", "1", "m"],
        &["INCR", "m"],
        &["EVAL", "return redis.call('incr', 'nan')", "0"],
        &["SET", "nan", "x"],
        &["EVAL", "return redis.call('incr', 'nan')", "0"],
        &["EXEC"],
        &["GET", "m"],
    ]);
}

/// Many clients run a read-modify-write script on one key (and on two keys on different
/// shards): no increment is lost, and nothing deadlocks.
#[test]
fn scripts_are_atomic_over_their_keys() {
    let sluice = Sluice::start_with(&["--threads", "4"]);
    let port = sluice.port;
    let rmw = "local v = tonumber(redis.call('get', KEYS[1]) or '0') \
               redis.call('set', KEYS[1], v + 1) return v + 1";
    let pair = "local a = tonumber(redis.call('get', KEYS[1]) or '0') \
                local b = tonumber(redis.call('get', KEYS[2]) or '0') \
                redis.call('set', KEYS[1], a + 1) redis.call('set', KEYS[2], b + 1) \
                return a + b";
    let clients = 8;
    let rounds = 300;
    let workers: Vec<_> = (0..clients)
        .map(|i| {
            std::thread::spawn(move || {
                let mut c = RespConn::connect(port);
                for _ in 0..rounds {
                    let r = c.call(&["EVAL", rmw, "1", "counter"]);
                    assert!(matches!(r, Reply::Int(_)), "{r:?}");
                    // Keys in both orders: the shards are taken in one order whatever the
                    // declared order.
                    let (k1, k2) = if i % 2 == 0 { ("x", "y") } else { ("y", "x") };
                    let r = c.call(&["EVAL", pair, "2", k1, k2]);
                    assert!(matches!(r, Reply::Int(_)), "{r:?}");
                    // A plain command on the same key meanwhile.
                    c.call(&["INCR", "plain"]);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("a client failed");
    }
    let mut c = RespConn::connect(port);
    let total = (clients * rounds).to_string();
    assert_eq!(
        c.call(&["GET", "counter"]),
        Reply::Bulk(total.clone().into())
    );
    assert_eq!(c.call(&["GET", "x"]), Reply::Bulk(total.clone().into()));
    assert_eq!(c.call(&["GET", "y"]), Reply::Bulk(total.clone().into()));
    assert_eq!(c.call(&["GET", "plain"]), Reply::Bulk(total.into()));
}

/// Redis's replies about busy scripts (redis-server 7.0.15's words).
const BUSY: &str =
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";
const UNKILLABLE: &str = "UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command.";

/// A connection on another worker thread than a busy script's: one whose PING is answered at
/// once (a connection on the script's thread waits for the script).
fn on_another_thread(port: u16) -> Raw {
    let found = wait_until(Duration::from_secs(20), || {
        let s = TcpStream::connect(("127.0.0.1", port)).ok()?;
        s.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
        let mut raw = Raw {
            reader: BufReader::new(s.try_clone().ok()?),
            writer: s,
        };
        raw.writer.write_all(b"*1\r\n$4\r\nPING\r\n").ok()?;
        let mut line = Vec::new();
        raw.reader.read_until(b'\n', &mut line).ok()?;
        (line == b"+PONG\r\n").then_some(raw)
    });
    let raw = found.expect("no connection landed on another thread than the script's");
    raw.writer
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    raw
}

/// Waits until the server has logged `n` slow scripts (it logs each as it goes busy).
fn wait_busy(sluice: &Sluice, n: usize) {
    let busy = wait_until(Duration::from_secs(20), || {
        (sluice.log().matches("Slow script detected").count() >= n).then_some(())
    });
    assert!(busy.is_some(), "no script went busy:\n{}", sluice.log());
}

/// An infinite loop runs on past `busy-reply-threshold`, as in Redis: the other threads answer
/// commands on its shard `-BUSY` and serve the other keys; SCRIPT KILL stops it (its caller
/// gets Redis's error) unless it has written (`-UNKILLABLE`), and then SHUTDOWN NOSAVE ends the
/// node. An allocation bomb, a deep recursion and a 100 MB script each end in an error, the
/// node serving other clients and the connection usable after.
#[test]
fn hostile_scripts_are_bounded() {
    let mut sluice = Sluice::start_with(&["--threads", "4"]);
    let port = sluice.port;
    let mut c = RespConn::connect(port);
    assert_eq!(
        c.call(&["CONFIG", "SET", "lua-time-limit", "4000"]),
        Reply::Status("OK".into())
    );
    assert_eq!(
        c.call(&["CONFIG", "GET", "busy-reply-threshold"]),
        Reply::Array(vec![
            Reply::Bulk(b"busy-reply-threshold".to_vec()),
            Reply::Bulk(b"4000".to_vec())
        ])
    );
    assert_eq!(
        c.call(&["SCRIPT", "KILL"]),
        Reply::Error("NOTBUSY No scripts in execution right now.".into())
    );
    c.call(&["SET", "k", "v"]);

    // A loop that only reads: killable.
    let looping = std::thread::spawn(move || {
        let mut c = Raw::connect(port);
        c.writer
            .set_read_timeout(Some(Duration::from_secs(120)))
            .unwrap();
        let r = c.call(&["EVAL", "while true do end", "1", "k"]);
        (r, c.call(&["EVAL", "return 7", "0"]))
    });
    // Before the threshold, a command on its shard from another thread waits (outside the
    // shard's lock), then is answered -BUSY when the script goes busy. The script runs once a
    // connection's PING is not answered at once (it is on the script's thread); then one
    // whose PING is answered is on another thread.
    let started = wait_until(Duration::from_secs(30), || {
        let mut raw = Raw::connect(port);
        raw.writer
            .set_read_timeout(Some(Duration::from_millis(300)))
            .ok()?;
        try_call(&mut raw, &["PING"]).is_none().then_some(())
    });
    assert!(started.is_some(), "the looping script did not start");
    let early = wait_until(Duration::from_secs(30), || {
        let mut raw = Raw::connect(port);
        raw.writer
            .set_read_timeout(Some(Duration::from_millis(300)))
            .ok()?;
        try_call(&mut raw, &["PING"]).filter(|r| r == b"+PONG\r\n")?;
        raw.writer
            .set_read_timeout(Some(Duration::from_secs(10)))
            .ok()?;
        let busy_before = sluice.log().contains("Slow script detected");
        let sent = Instant::now();
        let r = try_call(&mut raw, &["GET", "k"])?;
        Some((r, busy_before, sent.elapsed(), raw))
    });
    let (r, busy_before, waited, mut other) = early.expect("no connection saw the script run");
    eprintln!(
        "a GET sent before the threshold waited {waited:?}, then: {}",
        String::from_utf8_lossy(&r).trim_end()
    );
    assert_eq!(r, format!("-{BUSY}\r\n").into_bytes());
    assert!(
        !busy_before,
        "the script went busy before the test could ask (waited {waited:?})"
    );
    wait_busy(&sluice, 1);
    assert_eq!(
        other.call(&["EVAL", "return redis.call('get', KEYS[1])", "1", "k"]),
        format!("-{BUSY}\r\n").into_bytes()
    );
    // Keys on the other shards are served.
    let served = (0..32)
        .filter(|i| other.call(&["GET", &format!("other:{i}")]) == b"$-1\r\n")
        .count();
    assert!(
        served > 0,
        "no other key was served while a script was busy"
    );
    assert_eq!(other.call(&["PING"]), b"+PONG\r\n");
    assert_eq!(
        other.call(&["SHUTDOWN"]),
        format!("-{BUSY}\r\n").into_bytes()
    );
    assert_eq!(other.call(&["SCRIPT", "KILL"]), b"+OK\r\n");
    let (r, after) = looping.join().unwrap();
    let r = String::from_utf8_lossy(&r);
    assert!(
        r.starts_with("-ERR Script killed by user with SCRIPT KILL... script: ")
            && r.ends_with(", on @user_script:1.\r\n"),
        "{r}"
    );
    assert_eq!(after, b":7\r\n");
    assert_eq!(
        other.call(&["SCRIPT", "KILL"]),
        b"-NOTBUSY No scripts in execution right now.\r\n"
    );
    assert_eq!(other.call(&["GET", "k"]), b"$1\r\nv\r\n");

    assert_eq!(
        other.call(&["CONFIG", "SET", "busy-reply-threshold", "200"]),
        b"+OK\r\n"
    );
    // A pcall does not catch the kill.
    let looping = std::thread::spawn(move || {
        let mut c = RespConn::connect(port);
        c.call(&[
            "EVAL",
            "while true do pcall(function() while true do end end) end",
            "0",
        ])
    });
    wait_busy(&sluice, 2);
    let mut other = on_another_thread(port);
    assert_eq!(other.call(&["SCRIPT", "KILL"]), b"+OK\r\n");
    match looping.join().unwrap() {
        Reply::Error(e) => assert!(e.contains("Script killed by user"), "{e}"),
        other => panic!("{other:?}"),
    }

    let bomb = "local t = {} for i = 1, 1e9 do t[i] = string.rep('x', 1e6) .. i end return #t";
    match c.call(&["EVAL", bomb, "0"]) {
        Reply::Error(e) => assert!(e.contains("memory"), "{e}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(c.call(&["EVAL", "return 8", "0"]), Reply::Int(8));
    let deep = "local function f(n) return f(n + 1) + 1 end return f(1)";
    match c.call(&["EVAL", deep, "0"]) {
        Reply::Error(e) => assert!(e.contains("stack overflow"), "{e}"),
        other => panic!("{other:?}"),
    }
    let string_bomb = "local s = 'x' while true do s = s .. s end";
    match c.call(&["EVAL", string_bomb, "0"]) {
        Reply::Error(e) => assert!(e.contains("memory"), "{e}"),
        other => panic!("{other:?}"),
    }
    // A 100 MB script: past the cache's bound, and past what one request may carry; the
    // request is refused (an error, or the connection closed as an oversized request is) and
    // the node goes on.
    let huge = format!("return '{}'", "x".repeat(100 << 20));
    let mut raw = TcpStream::connect(("127.0.0.1", port)).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let frame = format!(
        "*3\r\n$6\r\nSCRIPT\r\n$4\r\nLOAD\r\n${}\r\n{huge}\r\n",
        huge.len()
    );
    if raw.write_all(frame.as_bytes()).is_ok() {
        let mut first = [0u8; 1];
        let n = raw.read(&mut first).unwrap_or(0);
        assert!(n == 0 || first[0] == b'-', "a 100 MB script was accepted");
    }
    assert_eq!(c.call(&["PING"]), Reply::Status("PONG".into()));
    assert_eq!(c.call(&["EVAL", "return 9", "0"]), Reply::Int(9));

    // A loop that has written cannot be killed; SHUTDOWN NOSAVE ends the node.
    let writing = std::thread::spawn(move || {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let script = "redis.call('incr', KEYS[1]) while true do end";
        let frame = format!(
            "*4\r\n$4\r\nEVAL\r\n${}\r\n{script}\r\n$1\r\n1\r\n$1\r\nw\r\n",
            script.len()
        );
        s.write_all(frame.as_bytes()).unwrap();
        let mut reply = Vec::new();
        let _ = s.read_to_end(&mut reply);
        String::from_utf8_lossy(&reply).into_owned()
    });
    wait_busy(&sluice, 3);
    let mut other = on_another_thread(port);
    assert_eq!(
        other.call(&["SCRIPT", "KILL"]),
        format!("-{UNKILLABLE}\r\n").into_bytes()
    );
    assert_eq!(
        other.call(&["GET", "w"]),
        format!("-{BUSY}\r\n").into_bytes()
    );
    other
        .writer
        .write_all(b"*2\r\n$8\r\nSHUTDOWN\r\n$6\r\nNOSAVE\r\n")
        .unwrap();
    let mut rest = Vec::new();
    let closed = other.reader.read_to_end(&mut rest);
    assert!(
        closed.is_ok() && rest.is_empty(),
        "SHUTDOWN NOSAVE answered {rest:?}"
    );
    let status = sluice.wait_exit(Duration::from_secs(20));
    assert!(
        status.is_some_and(|s| s.success()),
        "the node did not exit: {status:?}\n{}",
        sluice.log()
    );
    // The writing script's caller sees its connection end, or the stop's error.
    let reply = writing.join().unwrap();
    assert!(
        reply.is_empty() || reply.starts_with("-ERR Script stopped"),
        "{reply}"
    );
}

/// A script that fails half way keeps what it wrote, as Redis does, and a replica gets those
/// writes (the commands' effects replicate, never the script).
#[test]
fn a_failing_script_keeps_and_replicates_its_writes() {
    let primary = Sluice::start();
    let to = format!("127.0.0.1:{}", primary.port);
    let replica = Sluice::start_with(&["--replicaof", &to]);
    let mut c = RespConn::connect(primary.port);
    let script = "redis.call('set', KEYS[1], 'kept') redis.call('incr', KEYS[2]) \
                  redis.call('incr', 'text') redis.call('set', KEYS[1], 'never')";
    c.call(&["SET", "text", "abc"]);
    match c.call(&["EVAL", script, "2", "w", "n"]) {
        Reply::Error(e) => assert!(e.starts_with("ERR value is not an integer"), "{e}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(c.call(&["GET", "w"]), Reply::Bulk(b"kept".to_vec()));
    assert_eq!(c.call(&["GET", "n"]), Reply::Bulk(b"1".to_vec()));
    let mut r = RespConn::connect(replica.port);
    let replicated = wait_until(Duration::from_secs(10), || {
        (r.call(&["GET", "w"]) == Reply::Bulk(b"kept".to_vec())
            && r.call(&["GET", "n"]) == Reply::Bulk(b"1".to_vec()))
        .then_some(())
    });
    assert!(
        replicated.is_some(),
        "the replica did not get the script's writes"
    );
}

/// A million distinct SCRIPT LOADs, pipelined: the cache stops at its bound in bytes (the
/// loads past it are refused with an error), the scripts loaded first still run, and another
/// client is served throughout.
#[test]
fn a_million_script_loads_are_bounded() {
    const LOADS: usize = 1_000_000;
    const CHUNK: usize = 20_000;
    let sluice = Sluice::start_with(&["--threads", "2"]);
    let port = sluice.port;
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut reader = BufReader::with_capacity(1 << 20, s.try_clone().unwrap());
    let mut probe = RespConn::connect(port);
    let (mut loaded, mut refused) = (0usize, 0usize);
    let mut first_sha = None;
    let mut line = Vec::new();
    let started = Instant::now();
    for chunk in 0..LOADS / CHUNK {
        let mut frames = Vec::with_capacity(CHUNK * 48);
        for i in chunk * CHUNK..(chunk + 1) * CHUNK {
            let body = format!("return {i}");
            frames.extend_from_slice(
                format!(
                    "*3\r\n$6\r\nSCRIPT\r\n$4\r\nLOAD\r\n${}\r\n{body}\r\n",
                    body.len()
                )
                .as_bytes(),
            );
        }
        s.write_all(&frames).unwrap();
        for _ in 0..CHUNK {
            line.clear();
            reader.read_until(b'\n', &mut line).unwrap();
            match line.first() {
                Some(b'$') => {
                    line.clear();
                    reader.read_until(b'\n', &mut line).unwrap();
                    first_sha
                        .get_or_insert_with(|| String::from_utf8_lossy(&line[..40]).into_owned());
                    loaded += 1;
                }
                Some(b'-') => {
                    assert!(
                        line.starts_with(b"-ERR script cache is full"),
                        "{}",
                        String::from_utf8_lossy(&line)
                    );
                    refused += 1;
                }
                _ => panic!("{}", String::from_utf8_lossy(&line)),
            }
        }
        // Served meanwhile, whatever thread the probe is on (at worst it waits for one
        // chunk's loads).
        let t = Instant::now();
        assert_eq!(probe.call(&["PING"]), Reply::Status("PONG".into()));
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    }
    eprintln!(
        "{LOADS} SCRIPT LOADs in {:?}: {loaded} cached, {refused} refused; RSS {} MB",
        started.elapsed(),
        sluice.rss() >> 20
    );
    assert_eq!(loaded + refused, LOADS);
    assert!(refused > 0, "the cache took a million scripts: no bound");
    assert!(sluice.rss() < 1 << 30, "RSS {} MB", sluice.rss() >> 20);
    let sha = first_sha.unwrap();
    assert_eq!(probe.call(&["EVALSHA", &sha, "0"]), Reply::Int(0));
    assert_eq!(probe.call(&["SCRIPT", "FLUSH"]), Reply::Status("OK".into()));
    assert_eq!(
        probe.call(&["SCRIPT", "LOAD", "return 1"]),
        Reply::Bulk(b"e0e1f9fabfc9d4800c877a703b823ac0578ff8db".to_vec())
    );
}

/// `busy-reply-threshold` and its old name `lua-time-limit` answer CONFIG GET and SET as
/// redis-server's do, bad values included.
#[test]
fn busy_reply_threshold_is_configured_as_in_redis() {
    same_steps_as_redis(&[
        &["CONFIG", "GET", "busy-reply-threshold"],
        &["CONFIG", "GET", "lua-time-limit"],
        &["CONFIG", "SET", "busy-reply-threshold", "-1"],
        &["CONFIG", "SET", "lua-time-limit", "abc"],
        &[
            "CONFIG",
            "SET",
            "busy-reply-threshold",
            "9223372036854775808",
        ],
        &["CONFIG", "SET", "lua-time-limit", "250"],
        &["CONFIG", "GET", "busy-reply-threshold"],
        &["CONFIG", "SET", "busy-reply-threshold", "0"],
        &["CONFIG", "GET", "lua-time-limit"],
        &["CONFIG", "SET", "busy-reply-threshold", "5000"],
        &["SCRIPT", "KILL"],
    ]);
}

/// One call on `raw` of a command with a simple reply; `None` if no whole reply came within
/// the connection's read timeout.
fn try_call(raw: &mut Raw, args: &[&str]) -> Option<Vec<u8>> {
    let mut frame = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        frame.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    raw.writer.write_all(&frame).ok()?;
    let mut reply = Vec::new();
    raw.reader.read_until(b'\n', &mut reply).ok()?;
    if reply.first() == Some(&b'$') {
        let n: i64 = String::from_utf8_lossy(&reply[1..reply.len() - 2])
            .parse()
            .ok()?;
        if n >= 0 {
            let mut body = vec![0; n as usize + 2];
            raw.reader.read_exact(&mut body).ok()?;
            reply.extend_from_slice(&body);
        }
    }
    Some(reply)
}
