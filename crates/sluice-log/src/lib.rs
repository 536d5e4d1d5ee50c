//! # sluice-log — log lines as Redis writes them
//!
//! `PID:ROLE DD Mon YYYY HH:MM:SS.mmm * message`, on standard error, in UTC: the node, the
//! sidecar and the admin tool all log through [`log`], so an operator reads one format, the
//! one Redis's own logs use (`12345:M 01 Dec 2026 13:52:38.123 * Ready to accept connections`).
//!
//! The role letter is Redis's: `M` a primary, `S` a replica; the sidecar uses `P`. A node that
//! changes role says so with [`set_role`].

use std::io::Write;
use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
use std::time::{SystemTime, UNIX_EPOCH};

static ROLE: AtomicU8 = AtomicU8::new(b'M');

/// The role letter the next lines carry.
pub fn set_role(letter: u8) {
    ROLE.store(letter, Relaxed);
}

/// Writes one line to standard error.
pub fn log(msg: &str) {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let line = format!(
        "{}:{} {} * {msg}\n",
        std::process::id(),
        char::from(ROLE.load(Relaxed)),
        timestamp(since_epoch.as_millis())
    );
    // One write per line, so lines from several threads do not interleave.
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
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
}
