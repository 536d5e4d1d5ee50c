//! # sluice-log — log lines as Redis writes them
//!
//! `PID:ROLE DD Mon YYYY HH:MM:SS.mmm * message`, in UTC: the node, the sidecar and the admin
//! tool all log through this crate, so an operator reads one format, the one Redis's own logs
//! use (`12345:M 01 Dec 2026 13:52:38.123 * Ready to accept connections`).
//!
//! The role letter is Redis's: `M` a primary, `S` a replica; the sidecar uses `P`. A node that
//! changes role says so with [`set_role`]. The level mark is Redis's too: `.` debug,
//! `-` verbose, `*` notice, `#` warning.
//!
//! # Settings
//! Process-wide, set once at start ([`configure`]) and the level again by `CONFIG SET
//! loglevel`: lines under the level are dropped before they are formatted; lines go to standard
//! error or are appended to a file; `json` writes one object a line instead, with the same
//! fields: `{"time":"01 Dec 2026 13:52:38.123","ts":1796133158.123,"pid":12345,"role":"M",
//! "level":"notice","msg":"..."}`.
//! With `--syslog-enabled yes`, every line is also sent to syslog ([`syslog`]).
//!
//! # Also here
//! The rest of a server's service plumbing that the node and the sidecar share: the pid file
//! and systemd's readiness messages ([`service`]).

pub mod service;
pub mod syslog;

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering::Relaxed};
use std::time::{SystemTime, UNIX_EPOCH};

static ROLE: AtomicU8 = AtomicU8::new(b'M');
static LEVEL: AtomicU8 = AtomicU8::new(Level::Notice as u8);
static JSON: AtomicBool = AtomicBool::new(false);
/// The log file, when there is one; standard error otherwise.
static FILE: Mutex<Option<File>> = Mutex::new(None);

/// The log flags the node and the sidecar both take (`--loglevel`, `--logfile`,
/// `--log-format`), flattened into each one's flags.
#[derive(clap::Args, Debug, Clone)]
pub struct LogArgs {
    /// Which log lines are written: `debug`, `verbose`, `notice` (default) or `warning`
    /// (on a node also `CONFIG SET loglevel`).
    #[arg(long, default_value = "notice", value_parser = ["debug", "verbose", "notice", "warning"])]
    pub loglevel: String,

    /// Append log lines to this file instead of standard error (empty: standard error).
    #[arg(long, value_name = "FILE")]
    pub logfile: Option<std::path::PathBuf>,

    /// `text`, Redis's line format, or `json`: one object a line with `time`, `ts`, `pid`,
    /// `role`, `level` and `msg`.
    #[arg(long = "log-format", default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,

    /// `yes`: send every log line to the system's syslog too (`/dev/log`), as Redis's
    /// `syslog-enabled`.
    #[arg(long = "syslog-enabled", default_value = "no", value_parser = ["yes", "no"])]
    pub syslog_enabled: String,

    /// The program name syslog lines carry.
    #[arg(long = "syslog-ident", default_value = "sluice")]
    pub syslog_ident: String,

    /// The syslog facility: `user` or `local0` to `local7`.
    #[arg(long = "syslog-facility", default_value = "local0", value_parser = syslog::parse_facility)]
    pub syslog_facility: String,

    /// The syslog daemon's datagram socket (for tests).
    #[arg(long = "syslog-socket", default_value = "/dev/log", hide = true)]
    pub syslog_socket: std::path::PathBuf,
}

impl LogArgs {
    /// Turns syslog on or off as these flags say.
    ///
    /// # Errors
    /// No datagram socket could be made.
    pub fn configure_syslog(&self) -> std::io::Result<()> {
        let target = (self.syslog_enabled == "yes").then_some((
            self.syslog_socket.as_path(),
            self.syslog_ident.as_str(),
            self.syslog_facility.as_str(),
        ));
        syslog::configure(target)
    }
}

/// How much a line matters, least first (Redis's `loglevel` names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Debug = 0,
    Verbose = 1,
    Notice = 2,
    Warning = 3,
}

impl Level {
    const ALL: [Level; 4] = [Level::Debug, Level::Verbose, Level::Notice, Level::Warning];

    pub fn name(self) -> &'static str {
        ["debug", "verbose", "notice", "warning"][self as usize]
    }

    /// Redis's mark for the level in a text line.
    fn mark(self) -> char {
        ['.', '-', '*', '#'][self as usize]
    }

    /// Parses a level name (any case).
    ///
    /// # Errors
    /// An unknown name, in words for CONFIG SET.
    pub fn parse(s: &str) -> Result<Level, String> {
        Level::ALL
            .into_iter()
            .find(|l| l.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("'{s}' is not a log level (debug, verbose, notice, warning)"))
    }
}

/// The role letter the next lines carry.
pub fn set_role(letter: u8) {
    ROLE.store(letter, Relaxed);
}

/// The lowest level written.
pub fn set_level(level: Level) {
    LEVEL.store(level as u8, Relaxed);
}

pub fn level() -> Level {
    Level::ALL[usize::from(LEVEL.load(Relaxed)).min(3)]
}

/// Whether a line at `level` would be written (to skip building one that would not).
pub fn enabled(level: Level) -> bool {
    level as u8 >= LEVEL.load(Relaxed)
}

/// Sets the level, the file (`None`: standard error) and the format (`json` or text).
///
/// # Errors
/// The file cannot be opened for appending.
pub fn configure(level: Level, file: Option<&Path>, json: bool) -> std::io::Result<()> {
    set_level(level);
    JSON.store(json, Relaxed);
    let file = match file.filter(|p| !p.as_os_str().is_empty()) {
        Some(path) => Some(File::options().create(true).append(true).open(path)?),
        None => None,
    };
    *FILE.lock().unwrap_or_else(|e| e.into_inner()) = file;
    Ok(())
}

/// Writes one line at the notice level.
pub fn log(msg: &str) {
    log_at(Level::Notice, msg);
}

/// Writes one line at the warning level.
pub fn warn(msg: &str) {
    log_at(Level::Warning, msg);
}

/// Writes one line at the verbose level.
pub fn verbose(msg: &str) {
    log_at(Level::Verbose, msg);
}

/// Writes one line at `level`, if the level is on.
pub fn log_at(level: Level, msg: &str) {
    if !enabled(level) {
        return;
    }
    let unix_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    if syslog::enabled() {
        syslog::send(level, unix_ms, msg);
    }
    let role = char::from(ROLE.load(Relaxed));
    let line = if JSON.load(Relaxed) {
        json_line(unix_ms, role, level, msg)
    } else {
        format!(
            "{}:{role} {} {} {msg}\n",
            std::process::id(),
            timestamp(unix_ms),
            level.mark()
        )
    };
    // One write per line, so lines from several threads do not interleave.
    match FILE.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        Some(f) => {
            let _ = f.write_all(line.as_bytes());
        }
        None => {
            let _ = std::io::stderr().lock().write_all(line.as_bytes());
        }
    }
}

fn json_line(unix_ms: u128, role: char, level: Level, msg: &str) -> String {
    let mut line = format!(
        "{{\"time\":\"{}\",\"ts\":{}.{:03},\"pid\":{},\"role\":\"{role}\",\"level\":\"{}\",\"msg\":\"",
        timestamp(unix_ms),
        unix_ms / 1000,
        unix_ms % 1000,
        std::process::id(),
        level.name()
    );
    escape_json(&mut line, msg);
    line.push_str("\"}\n");
    line
}

/// Appends `s` as the inside of a JSON string.
fn escape_json(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// `DD Mon YYYY HH:MM:SS.mmm` (UTC) for milliseconds since the Unix epoch.
pub fn timestamp(unix_ms: u128) -> String {
    let secs = unix_ms / 1000;
    let (days, of_day) = ((secs / 86_400) as i64, secs % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{day:02} {} {year} {:02}:{:02}:{:02}.{:03}",
        MONTHS[(month - 1) as usize],
        of_day / 3600,
        of_day / 60 % 60,
        of_day % 60,
        unix_ms % 1000
    )
}

/// The proleptic Gregorian date of a count of days since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`): eras of 400 years, years starting in March so the leap day comes last.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_read_like_redis() {
        assert_eq!(timestamp(0), "01 Jan 1970 00:00:00.000");
        // 2026-12-01 13:52:38.123 UTC.
        assert_eq!(timestamp(1_796_133_158_123), "01 Dec 2026 13:52:38.123");
        // A leap day, and the last millisecond of a leap year.
        assert_eq!(timestamp(951_782_400_000), "29 Feb 2000 00:00:00.000");
        assert_eq!(timestamp(1_735_689_599_999), "31 Dec 2024 23:59:59.999");
    }

    #[test]
    fn json_lines_escape_their_message() {
        let line = json_line(1_796_133_158_123, 'S', Level::Warning, "a \"b\"\n\u{1}");
        assert!(
            line.starts_with(
                "{\"time\":\"01 Dec 2026 13:52:38.123\",\"ts\":1796133158.123,\"pid\":"
            )
        );
        assert!(line.ends_with(
            "\"role\":\"S\",\"level\":\"warning\",\"msg\":\"a \\\"b\\\"\\n\\u0001\"}\n"
        ));
    }

    #[test]
    fn levels_parse_and_order() {
        assert_eq!(Level::parse("VERBOSE"), Ok(Level::Verbose));
        assert!(Level::parse("loud").is_err());
        assert!(Level::Warning > Level::Notice);
    }
}
