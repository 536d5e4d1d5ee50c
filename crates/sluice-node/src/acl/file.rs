//! The ACL file (`--aclfile`): one `user NAME rule...` line per user, as `ACL LIST` prints
//! them. Blank lines and `#` comments are skipped. Loading is all or nothing: one wrong line
//! leaves the users as they were. Saving writes a temporary file beside it and renames it over,
//! so a crash never leaves half a file.

use std::io::Write;
use std::path::Path;

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
    let tmp = path.with_extension("tmp-acl");
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("There was an error trying to save the ACLs. Please check the server logs for more information: {e}")
    })
}
