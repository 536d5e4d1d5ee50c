//! `SAVE`, `BGSAVE` and `LASTSAVE` — snapshots on disk (see `persist`).
//!
//! # Format
//! - `SAVE` → `+OK` once the snapshot is on disk; `-ERR ...` naming the cause otherwise.
//! - `BGSAVE [SCHEDULE]` → `+Background saving started`; `-ERR Background save already in
//!   progress` while one runs.
//! - `LASTSAVE` → `:unix-seconds` of the last successful save (the start time before any).
//!
//! Without `--dir` SAVE and BGSAVE answer `-ERR snapshots are off ...`.

use sluice_resp::reply;

use super::{Args, CmdError, Command, Ctx};

const OFF: &str = "ERR snapshots are off: start sluice with --dir DIR";

#[derive(Debug)]
pub struct Save;

impl Command<'_> for Save {
    fn parse(args: &mut Args<'_>) -> Result<Self, CmdError> {
        args.finish()?;
        Ok(Save)
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let persist = &ctx.shared.persist;
        if !persist.enabled() {
            return Err(CmdError::msg(OFF));
        }
        persist
            .save(&ctx.shared.store, ctx.shared.clock.now(), || {
                ctx.shared.repl.origin(&ctx.shared.store)
            })
            .map_err(|e| CmdError::msg(format!("ERR snapshot not saved: {e}")))?;
        reply::simple(ctx.out, "OK");
        Ok(())
    }
}

#[derive(Debug)]
pub struct BgSave;

impl Command<'_> for BgSave {
    fn parse(args: &mut Args<'_>) -> Result<Self, CmdError> {
        if let Some(opt) = args.next()
            && !opt.eq_ignore_ascii_case(b"SCHEDULE")
        {
            return Err(CmdError::Syntax);
        }
        args.finish()?;
        Ok(BgSave)
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        let persist = &ctx.shared.persist;
        if !persist.enabled() {
            return Err(CmdError::msg(OFF));
        }
        if !persist.request_bgsave() {
            return Err(CmdError::msg("ERR Background save already in progress"));
        }
        reply::simple(ctx.out, "Background saving started");
        Ok(())
    }
}

#[derive(Debug)]
pub struct LastSave;

impl Command<'_> for LastSave {
    fn parse(args: &mut Args<'_>) -> Result<Self, CmdError> {
        args.finish()?;
        Ok(LastSave)
    }

    fn apply(self, ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
        reply::integer(ctx.out, ctx.shared.persist.last_save() as i64);
        Ok(())
    }
}
