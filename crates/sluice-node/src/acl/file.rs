//! The ACL file (`--aclfile`): one `user NAME rule...` line per user, as `ACL LIST` prints
//! them. Blank lines and `#` comments are skipped. Loading is all or nothing: one wrong line
//! leaves the users as they were. Saving writes a temporary file beside it and renames it over,
//! so a crash never leaves half a file; the file keeps its mode and owner (it holds password
//! hashes), and a new one is made 0600.

use std::fs::{File, OpenOptions, Permissions};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt, fchown};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::{Acl, AclError, Perms};

/// Reads and checks `path`, then replaces every user with its users (`ACL LOAD`, and at
/// start). Returns how many users it named.
pub fn load_file(acl: &Acl, path: &Path, requirepass: Option<&str>) -> Result<usize, AclError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("Error loading ACLs, opening file '{}': {e}", path.display()))?;
    let parsed =
        parse(acl, &text).map_err(|(line, why)| format!("{}:{line}: {why}. ", path.display()))?;
    let n = parsed.len();
    acl.replace_all(parsed, requirepass);
    Ok(n)
}

fn parse(acl: &Acl, text: &str) -> Result<Vec<(String, Perms)>, (usize, String)> {
    let mut users: Vec<(String, Perms)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split_ascii_whitespace();
        if words.next() != Some("user") {
            return Err((i + 1, "line should start with user keyword".into()));
        }
        let Some(name) = words.next() else {
            return Err((i + 1, "user name missing".into()));
        };
        if super::has_spaces(name.as_bytes()) {
            return Err((i + 1, super::NAME_SPACES.into()));
        }
        if users.iter().any(|(n, _)| n == name) {
            return Err((i + 1, format!("Duplicate user '{name}' found")));
        }
        let rules: Vec<&[u8]> = words.map(str::as_bytes).collect();
        let perms = acl.parse_rules(&rules).map_err(|e| (i + 1, e))?;
        users.push((name.to_string(), perms));
    }
    Ok(users)
}

/// Writes every user to `path` (`ACL SAVE`).
pub fn save_file(acl: &Acl, path: &Path) -> Result<(), AclError> {
    let mut text = String::new();
    for user in acl.users() {
        text.push_str(&user.describe());
        text.push('\n');
    }
    let tmp = temp_path(path);
    replace(path, &tmp, text.as_bytes()).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("There was an error trying to save the ACLs. Please check the server logs for more information: {e}")
    })
}

/// A name beside `path` that no other save uses: `path.tmp-PID-N`.
fn temp_path(path: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut name = path.as_os_str().to_owned();
    name.push(format!(
        ".tmp-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Relaxed)
    ));
    PathBuf::from(name)
}

/// Writes `bytes` to `tmp` and renames it over `path`. `tmp` is created new (never a file or
/// a link already there) readable by its owner alone, then given `path`'s owner and mode if
/// `path` exists, before a byte is written: the rename never widens who may read the file.
fn replace(path: &Path, tmp: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let old = match std::fs::metadata(path) {
        Ok(meta) => Some(meta),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    let mut file: File = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(tmp)?;
    if let Some(old) = old {
        let new = file.metadata()?;
        // The owner first: a change of owner may clear set-id bits the mode then restores.
        if (new.uid(), new.gid()) != (old.uid(), old.gid()) {
            fchown(&file, Some(old.uid()), Some(old.gid()))?;
        }
        file.set_permissions(Permissions::from_mode(old.mode() & 0o7777))?;
    }
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(tmp, path)
}
