//! Service integration: the pid file (`--pidfile`) and systemd's readiness protocol
//! (`--supervised systemd`).
//!
//! systemd's `Type=notify` waits for `READY=1` on the datagram socket named by
//! `$NOTIFY_SOCKET` (a path, or `@name` for an abstract socket) before it calls the unit
//! started, and reads `STOPPING=1` when the server begins to stop. The message is one datagram,
//! so a Unix datagram socket from std does it; no library is needed.

use std::io;
use std::os::unix::net::UnixDatagram;
use std::path::Path;

use crate::config::Config;

/// Whether this server talks to systemd: `--supervised systemd`, or `auto` when
/// `$NOTIFY_SOCKET` is set, as Redis decides.
fn supervised(config: &Config) -> bool {
    match config.supervised.as_str() {
        "systemd" => true,
        "auto" => std::env::var_os("NOTIFY_SOCKET").is_some(),
        _ => false,
    }
}

/// Sends `state` (`READY=1`, `STOPPING=1`) to `$NOTIFY_SOCKET`, if supervised.
pub fn notify(config: &Config, state: &str) {
    if !supervised(config) {
        return;
    }
    let Some(target) = std::env::var_os("NOTIFY_SOCKET") else {
        sluice_log::warn("--supervised systemd but NOTIFY_SOCKET is not set: not notifying");
        return;
    };
    if let Err(e) = send(&target.to_string_lossy(), state) {
        sluice_log::warn(&format!(
            "cannot notify systemd at {}: {e}",
            target.to_string_lossy()
        ));
    }
}

fn send(target: &str, state: &str) -> io::Result<()> {
    let socket = UnixDatagram::unbound()?;
    match target.strip_prefix('@') {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
            socket.send_to_addr(state.as_bytes(), &addr)?;
        }
        None => {
            socket.send_to(state.as_bytes(), target)?;
        }
    }
    Ok(())
}

/// Writes this process's id to `--pidfile`.
///
/// # Errors
/// The file cannot be written.
pub fn write_pidfile(config: &Config) -> io::Result<()> {
    match &config.pidfile {
        Some(path) => std::fs::write(path, format!("{}\n", std::process::id())),
        None => Ok(()),
    }
}

/// Removes `--pidfile` at a clean exit, if it still holds this process's id.
pub fn remove_pidfile(config: &Config) {
    if let Some(path) = &config.pidfile
        && holds_this_pid(path)
    {
        let _ = std::fs::remove_file(path);
    }
}

fn holds_this_pid(path: &Path) -> bool {
    std::fs::read_to_string(path).is_ok_and(|t| t.trim() == std::process::id().to_string())
}
