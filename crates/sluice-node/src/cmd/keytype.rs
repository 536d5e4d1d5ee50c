//! `TYPE key` — `string`, `none` if missing, and `ratelimit` for a limiter's key (as a module's
//! type answers its own name); `PERSIST key` — 1 if a timeout was removed.

use sluice_resp::reply;
use sluice_store::Kind;

use super::{Args, CmdError, Command, Ctx};

#[derive(Debug)]
pub struct Type<'a>(&'a [u8]);

impl<'a> Command<'a> for Type<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(Type(args.key()?))
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let name = ctx
            .shared
            .store
            .kind(self.0, ctx.now)
            .map_or("none", Kind::name);
        reply::simple(ctx.out, name);
        Ok(())
    }
}

#[derive(Debug)]
pub struct Persist<'a>(&'a [u8]);

impl<'a> Command<'a> for Persist<'a> {
    fn parse(args: &mut Args<'a>) -> Result<Self, CmdError> {
        Ok(Persist(args.key()?))
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let removed = ctx.shared.store.persist(self.0, ctx.now);
        reply::integer(ctx.out, i64::from(removed));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::{Config, Executor};

    /// The string and key commands against a limiter's key: the data ones answer WRONGTYPE and
    /// change nothing (MGET answers nil, as Redis does for another type), the key ones work.
    #[test]
    fn string_commands_on_a_limiter_key() {
        let mut e = Executor::new(Config::default_for_tests());
        let mut run = |args: &[&str]| e.text_at(1_000_000, args);
        let wrongtype = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";
        assert!(run(&["RL.CHECK", "b", "10", "60"]).starts_with('*'));
        assert_eq!(run(&["TYPE", "b"]), "+ratelimit\r\n");
        assert_eq!(run(&["TYPE", "nothing"]), "+none\r\n");
        for args in [
            &["GETSET", "b", "1"][..],
            &["GETDEL", "b"],
            &["GETEX", "b", "PERSIST"],
            &["APPEND", "b", "x"],
            &["STRLEN", "b"],
            &["GETRANGE", "b", "0", "-1"],
            &["SETRANGE", "b", "0", "x"],
            &["SET", "b", "1", "GET"],
        ] {
            assert_eq!(run(args), wrongtype, "{args:?}");
        }
        assert_eq!(run(&["MGET", "b", "nothing"]), "*2\r\n$-1\r\n$-1\r\n");
        assert_eq!(run(&["TYPE", "b"]), "+ratelimit\r\n");
        assert!(run(&["PEXPIRETIME", "b"]).starts_with(":1"));
        assert_eq!(run(&["TOUCH", "b", "nothing", "b"]), ":2\r\n");
        assert_eq!(run(&["PERSIST", "b"]), ":1\r\n");
        assert_eq!(run(&["PERSIST", "b"]), ":0\r\n");
        assert_eq!(run(&["TTL", "b"]), ":-1\r\n");
        // SET without GET overwrites any type, as Redis's does.
        assert_eq!(run(&["SET", "b", "v"]), "+OK\r\n");
        assert_eq!(run(&["TYPE", "b"]), "+string\r\n");
        assert_eq!(run(&["UNLINK", "b", "b"]), ":1\r\n");
    }
}
