//! Service integration for the node and the sidecar: the pid file (`--pidfile`) and
//! systemd's readiness protocol (`--supervised systemd`).
//!
//! systemd's `Type=notify` waits for `READY=1` on the datagram socket named by
//! `$NOTIFY_SOCKET` (a path, or `@name` for an abstract socket) before it calls the unit
//! started, and reads `STOPPING=1` when the server begins to stop. The message is one datagram,
//! so a Unix datagram socket from std does it; no library is needed.

use std::io;
use std::os::unix::net::UnixDatagram;
use std::path::Path;

/// The service flags the node and the sidecar both take, flattened into each one's flags.
#[derive(clap::Args, Debug, Clone)]
pub struct ServiceArgs {
    /// `systemd`: tell the service manager over `$NOTIFY_SOCKET` when the server is ready
    /// (`READY=1`) and when it stops (`STOPPING=1`), for `Type=notify` units; `auto`: when
    /// `$NOTIFY_SOCKET` is set. `no`: don't.
    #[arg(long, default_value = "no", value_parser = ["no", "systemd", "auto"])]
    pub supervised: String,

    /// Write the process id to this file once ready; removed at a clean exit.
    #[arg(long, value_name = "FILE")]
    pub pidfile: Option<std::path::PathBuf>,
}

/// Whether this server talks to systemd: `--supervised systemd`, or `auto` when
/// `$NOTIFY_SOCKET` is set, as Redis decides.
fn supervised(args: &ServiceArgs) -> bool {
    match args.supervised.as_str() {
        "systemd" => true,
        "auto" => std::env::var_os("NOTIFY_SOCKET").is_some(),
        _ => false,
    }
}

/// Sends `state` (`READY=1`, `STOPPING=1`) to `$NOTIFY_SOCKET`, if supervised.
pub fn notify(args: &ServiceArgs, state: &str) {
    if !supervised(args) {
        return;
    }
    let Some(target) = std::env::var_os("NOTIFY_SOCKET") else {
        crate::warn("--supervised systemd but NOTIFY_SOCKET is not set: not notifying");
        return;
    };
    if let Err(e) = send(&target.to_string_lossy(), state) {
        crate::warn(&format!(
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
pub fn write_pidfile(args: &ServiceArgs) -> io::Result<()> {
    match &args.pidfile {
        Some(path) => std::fs::write(path, format!("{}\n", std::process::id())),
        None => Ok(()),
    }
}

/// Removes `--pidfile` at a clean exit, if it still holds this process's id.
pub fn remove_pidfile(args: &ServiceArgs) {
    if let Some(path) = &args.pidfile
        && holds_this_pid(path)
    {
        let _ = std::fs::remove_file(path);
    }
}

fn holds_this_pid(path: &Path) -> bool {
    std::fs::read_to_string(path).is_ok_and(|t| t.trim() == std::process::id().to_string())
}
