//! ACL users: who may log in, with which passwords, and which commands each may run.
//!
//! A practical subset of Redis's ACL. A user has a name, on/off, passwords (kept as SHA-256,
//! as Redis keeps them) or `nopass`, a set of allowed commands and the keys it may touch
//! ([`keys`]: `~pattern`, `%R~`, `%W~`, `~*`). Channels are not restricted: `&*` /
//! `allchannels` are accepted, any other channel pattern is an error. The `default` user is the
//! one a connection starts as, with every command and key; `--requirepass` (and `CONFIG SET
//! requirepass`) sets its password.
//!
//! # The permission check
//! Each command has an id: its row in the command table, and after the rows one id per
//! subcommand (`rl.rule|set`, `config|get`). A user's allowed commands are a bitset over those
//! ids, in atomics so that `ACL SETUSER` reaches the connections already logged in as that
//! user. As in Redis 7, a call of a command that has subcommands is judged by its
//! subcommand's bit alone, whatever the parent's (`+@all -@admin` refuses every admin
//! subcommand, `-rl.rule|set` refuses that one, `-config +config|get` grants that one); the
//! parent's own bit judges only a call without a subcommand (`COMMAND`) or with one the
//! catalog does not name (the command then answers `unknown subcommand`). [`Acl::permits`]
//! asks one bit, and one more of the catalog, for a command without subcommands.
//!
//! This module knows nothing of the command table (it lives above, in `cmd`): the table hands
//! it a [`Catalog`] of names and categories at start.

mod catalog;
mod file;
pub mod keys;
pub mod log;
mod user;

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;

pub use catalog::{CATEGORIES, Catalog, Category, category};
pub use file::{load_file, save_file};
pub use user::{Perms, User};

/// The users and the command catalog their rules are resolved against.
#[derive(Debug)]
pub struct Acl {
    catalog: Catalog,
    users: RwLock<HashMap<String, Arc<User>>>,
    /// `--aclfile`, for ACL LOAD and ACL SAVE.
    pub file: Option<std::path::PathBuf>,
    /// `ACL LOG`: the recent refusals.
    pub log: log::AclLog,
}

/// Why a rule or a file line was refused: the text after `ERR `.
pub type AclError = String;

/// Redis's refusal of a user name with a space or a NUL byte.
const NAME_SPACES: &str = "Usernames can't contain spaces or null characters";

impl Acl {
    /// The `default` user alone: on, every command, and `requirepass` as its password, or
    /// `nopass` without one.
    pub fn new(
        catalog: Catalog,
        requirepass: Option<&str>,
        file: Option<std::path::PathBuf>,
    ) -> Acl {
        let acl = Acl {
            catalog,
            users: RwLock::new(HashMap::new()),
            file,
            log: log::AclLog::default(),
        };
        let default = Arc::new(User::new("default"));
        default.set(acl.default_perms(requirepass));
        acl.users.write().insert("default".into(), default);
        acl
    }

    /// What the `default` user is when nothing else says: on, all commands, and `requirepass`
    /// (or no password).
    fn default_perms(&self, requirepass: Option<&str>) -> Perms {
        let mut perms = Perms::new(&self.catalog);
        perms.enabled = true;
        perms.all_commands(&self.catalog, true);
        perms.keys.all = true;
        match requirepass {
            Some(p) => perms.add_password(p.as_bytes()),
            None => perms.nopass = true,
        }
        perms
    }

    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// The `default` user (always present).
    pub fn default_user(&self) -> Arc<User> {
        self.get("default")
            .expect("the default user is never removed")
    }

    pub fn get(&self, name: &str) -> Option<Arc<User>> {
        self.users.read().get(name).cloned()
    }

    /// The user `name` if `pass` is one of its passwords (or it is `nopass`) and it is on.
    pub fn authenticate(&self, name: &str, pass: &[u8]) -> Option<Arc<User>> {
        let user = self.get(name)?;
        user.accepts(pass).then_some(user)
    }

    /// `ACL SETUSER name rule...`: creates the user if needed, then applies every rule, or
    /// none of them if one is wrong.
    pub fn set_user(&self, name: &str, rules: &[&[u8]]) -> Result<(), AclError> {
        if name.is_empty() || has_spaces(name.as_bytes()) {
            return Err(NAME_SPACES.into());
        }
        let mut users = self.users.write();
        let existing = users.get(name).cloned();
        let mut perms = match &existing {
            Some(u) => u.perms(),
            None => Perms::new(&self.catalog),
        };
        for rule in rules {
            perms.apply(&self.catalog, rule)?;
        }
        let user = existing.unwrap_or_else(|| {
            let u = Arc::new(User::new(name));
            users.insert(name.into(), u.clone());
            u
        });
        user.set(perms);
        Ok(())
    }

    /// `ACL DELUSER`: removes the users named, returning how many existed. A removed user is
    /// left off with no commands, for any connection still running as it (the command closes
    /// them).
    pub fn del_users(&self, names: &[&str]) -> Result<usize, AclError> {
        if names.contains(&"default") {
            return Err("The 'default' user cannot be removed".into());
        }
        let mut users = self.users.write();
        let mut removed = 0;
        for name in names {
            if let Some(u) = users.remove(*name) {
                u.set(Perms::new(&self.catalog));
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// Every user, sorted by name.
    pub fn users(&self) -> Vec<Arc<User>> {
        let mut all: Vec<_> = self.users.read().values().cloned().collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// `CONFIG SET requirepass`: the `default` user's passwords become exactly this one (or
    /// `nopass` when empty), as in Redis.
    pub fn set_requirepass(&self, pass: Option<&str>) {
        let user = self.default_user();
        let mut perms = user.perms();
        perms.reset_passwords();
        match pass {
            Some(p) => perms.add_password(p.as_bytes()),
            None => perms.nopass = true,
        }
        user.set(perms);
    }

    /// Replaces every user by `lines` (an ACL file's `user ...` lines, already checked): users
    /// not named are removed, the `default` user is reset if not named.
    pub fn replace_all(&self, parsed: Vec<(String, Perms)>, requirepass: Option<&str>) {
        let mut users = self.users.write();
        let named: HashMap<String, Perms> = parsed.into_iter().collect();
        users.retain(|name, u| {
            let keep = name == "default" || named.contains_key(name);
            if !keep {
                u.set(Perms::new(&self.catalog));
            }
            keep
        });
        if !named.contains_key("default")
            && let Some(d) = users.get("default")
        {
            d.set(self.default_perms(requirepass));
        }
        for (name, perms) in named {
            let user = users
                .entry(name.clone())
                .or_insert_with(|| Arc::new(User::new(&name)))
                .clone();
            user.set(perms);
        }
    }

    /// Parses rules for a user of an ACL file, against this catalog.
    pub fn parse_rules(&self, rules: &[&[u8]]) -> Result<Perms, AclError> {
        let mut perms = Perms::new(&self.catalog);
        for rule in rules {
            perms.apply(&self.catalog, rule)?;
        }
        Ok(perms)
    }

    /// Whether `user` may run the command at table row `row`, whose first argument is `sub`;
    /// `Err` holds the id refused (`row`, or its subcommand's), for NOPERM and ACL LOG.
    ///
    /// This is the one check every front makes, with the user it authenticated.
    #[inline]
    pub fn permits(&self, user: &User, row: usize, sub: Option<&[u8]>) -> Result<(), usize> {
        if user.allows(row) && !self.catalog.has_subcommands(row) {
            return Ok(());
        }
        let id = sub
            .and_then(|sub| self.catalog.subcommand_id(row, sub))
            .unwrap_or(row);
        if user.allows(id) { Ok(()) } else { Err(id) }
    }
}

/// Whether `text` holds a space or a NUL byte, by Redis's rule for user names (C's `isspace`:
/// space, `\t`, `\n`, `\v`, `\f`, `\r`).
pub fn has_spaces(text: &[u8]) -> bool {
    text.iter()
        .any(|&b| matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r' | 0))
}

/// Whether a key or channel pattern may not be kept: a space or a NUL byte (Redis's rule,
/// which keeps one rule one word of an ACL file line) or any other control character (which
/// Redis lets through; refused here so that no pattern can alter a line it is written on).
pub fn bad_pattern(pattern: &[u8]) -> bool {
    pattern.iter().any(|&b| b == b' ' || b.is_ascii_control())
}

#[cfg(test)]
mod tests;
