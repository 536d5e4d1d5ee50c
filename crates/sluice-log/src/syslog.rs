//! Syslog output (`--syslog-enabled yes`): every line written is also sent, as Redis sends
//! it, to the local syslog daemon's datagram socket (`/dev/log`), under `--syslog-ident` and
//! `--syslog-facility`.
//!
//! One datagram a line in the BSD syslog format local daemons read (rsyslog, syslog-ng,
//! journald): `<PRI>Mmm dd hh:mm:ss ident[pid]: message`, with the time in UTC. `PRI` is
//! facility × 8 + severity, Redis's levels mapping to `debug`, `info`, `notice` and `warning`.
//! A daemon that is not there, or that drops a line, loses that line and nothing else: a
//! failed send tries once to connect again, and never blocks or fails the caller.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::Level;

/// Redis's `syslog-facility` names and their codes.
const FACILITIES: [(&str, u8); 9] = [
    ("user", 1),
    ("local0", 16),
    ("local1", 17),
    ("local2", 18),
    ("local3", 19),
    ("local4", 20),
    ("local5", 21),
    ("local6", 22),
    ("local7", 23),
];

/// Parses a facility name (any case), for the flag.
///
/// # Errors
/// An unknown name, with the names that are.
pub fn parse_facility(s: &str) -> Result<String, String> {
    FACILITIES
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(s))
        .map(|(name, _)| name.to_string())
        .ok_or_else(|| format!("'{s}' is not a syslog facility (user, local0 ... local7)"))
}

#[derive(Debug)]
struct Sink {
    socket: UnixDatagram,
    path: PathBuf,
    ident: String,
    facility: u8,
}

static SINK: Mutex<Option<Sink>> = Mutex::new(None);

/// Sends every later line to the syslog socket at `path` too (`None`: stops).
///
/// # Errors
/// No datagram socket could be made; a daemon not listening yet is not an error.
pub fn configure(target: Option<(&Path, &str, &str)>) -> std::io::Result<()> {
    let sink = match target {
        None => None,
        Some((path, ident, facility)) => {
            let socket = UnixDatagram::unbound()?;
            // A daemon that is backed up drops our lines; it never holds up a thread that logs.
            socket.set_nonblocking(true)?;
            let _ = socket.connect(path);
            let facility = FACILITIES
                .iter()
                .find(|(name, _)| name.eq_ignore_ascii_case(facility))
                .map_or(16, |(_, code)| *code);
            Some(Sink {
                socket,
                path: path.to_path_buf(),
                ident: ident.to_string(),
                facility,
            })
        }
    };
    *SINK.lock().unwrap_or_else(|e| e.into_inner()) = sink;
    Ok(())
}

fn severity(level: Level) -> u8 {
    match level {
        Level::Debug => 7,
        Level::Verbose => 6,
        Level::Notice => 5,
        Level::Warning => 4,
    }
}

/// `Mmm dd hh:mm:ss`, RFC 3164's time, from the log's own `DD Mon YYYY HH:MM:SS.mmm`.
fn rfc3164_time(unix_ms: u128) -> String {
    let stamp = crate::timestamp(unix_ms);
    let mut parts = stamp.split(' ');
    let (day, month, _year, time) = (
        parts.next().unwrap_or("01"),
        parts.next().unwrap_or("Jan"),
        parts.next(),
        parts.next().unwrap_or("00:00:00.000"),
    );
    let day = day.trim_start_matches('0');
    format!("{month} {day:>2} {}", time.get(..8).unwrap_or(time))
}

/// Sends one line, if syslog is on.
pub(crate) fn send(level: Level, unix_ms: u128, msg: &str) {
    let mut guard = SINK.lock().unwrap_or_else(|e| e.into_inner());
    let Some(sink) = guard.as_mut() else {
        return;
    };
    let line = format!(
        "<{}>{} {}[{}]: {msg}",
        u16::from(sink.facility) * 8 + u16::from(severity(level)),
        rfc3164_time(unix_ms),
        sink.ident,
        std::process::id()
    );
    match sink.socket.send(line.as_bytes()) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        Err(_) => {
            // The daemon restarted (a new socket at the path): connect again, send once more.
            if sink.socket.connect(&sink.path).is_ok() {
                let _ = sink.socket.send(line.as_bytes());
            }
        }
    }
}

/// Whether syslog is on (lines are then built even if no file wants them).
pub(crate) fn enabled() -> bool {
    SINK.lock().unwrap_or_else(|e| e.into_inner()).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_facilities_read_as_syslog_wants() {
        assert_eq!(rfc3164_time(0), "Jan  1 00:00:00");
        assert_eq!(rfc3164_time(1_796_133_158_123), "Dec  1 13:52:38");
        assert_eq!(parse_facility("LOCAL3").unwrap(), "local3");
        assert!(parse_facility("kern").is_err());
        assert_eq!(
            u16::from(16u8) * 8 + u16::from(severity(Level::Warning)),
            132
        );
    }
}
