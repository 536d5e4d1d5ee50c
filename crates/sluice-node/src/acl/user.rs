//! One user: its rules ([`Perms`], changed by `ACL SETUSER` rule by rule) and the bitset of
//! commands the request path reads ([`User::allows`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use parking_lot::{Mutex, RwLock};

use super::catalog::{Catalog, MAX_IDS};
use super::keys::{KeyPattern, KeyPerms};

const WORDS: usize = MAX_IDS / 64;

/// A user's settings, as rules build them: on/off, passwords and allowed commands.
#[derive(Clone, Debug)]
pub struct Perms {
    pub enabled: bool,
    pub nopass: bool,
    /// SHA-256 of each password.
    passwords: Vec<[u8; 32]>,
    bits: [u64; WORDS],
    /// Ids allowed whatever the rules say.
    always: [u64; WORDS],
    /// The command rules applied since the last `+@all`/`-@all`, as `ACL LIST` shows them.
    rules: Vec<String>,
    /// The keys this user may touch.
    pub keys: KeyPerms,
}

fn sha256(data: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, data);
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

fn hex(bytes: &[u8; 32]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

impl Perms {
    /// A new user's settings, as Redis's: off, no password, no commands.
    pub fn new(catalog: &Catalog) -> Perms {
        let mut always = [0u64; WORDS];
        for &id in catalog.always() {
            always[id / 64] |= 1 << (id % 64);
        }
        Perms {
            enabled: false,
            nopass: false,
            passwords: Vec::new(),
            bits: [0; WORDS],
            always,
            rules: vec!["-@all".into()],
            keys: KeyPerms::default(),
        }
    }

    pub fn add_password(&mut self, pass: &[u8]) {
        let hash = sha256(pass);
        if !self.passwords.contains(&hash) {
            self.passwords.push(hash);
        }
        self.nopass = false;
    }

    pub fn reset_passwords(&mut self) {
        self.passwords.clear();
        self.nopass = false;
    }

    pub fn all_commands(&mut self, catalog: &Catalog, on: bool) {
        self.bits = [0; WORDS];
        if on {
            for id in 0..catalog.len() {
                self.set_bit(id, true);
            }
        }
        self.rules = vec![if on { "+@all" } else { "-@all" }.into()];
    }

    fn set_bit(&mut self, id: usize, on: bool) {
        if on {
            self.bits[id / 64] |= 1 << (id % 64);
        } else {
            self.bits[id / 64] &= !(1 << (id % 64));
        }
    }

    /// Applies one `ACL SETUSER` rule; the error is Redis's text after `ERR `.
    pub fn apply(&mut self, catalog: &Catalog, rule: &[u8]) -> Result<(), String> {
        let text = String::from_utf8_lossy(rule);
        self.apply_text(catalog, &text)
            .map_err(|why| format!("Error in ACL SETUSER modifier '{text}': {why}"))
    }

    fn apply_text(&mut self, catalog: &Catalog, rule: &str) -> Result<(), &'static str> {
        let lower = rule.to_ascii_lowercase();
        match lower.as_str() {
            "on" => self.enabled = true,
            "off" => self.enabled = false,
            "nopass" => {
                self.passwords.clear();
                self.nopass = true;
            }
            "resetpass" => self.reset_passwords(),
            "allcommands" | "+@all" => self.all_commands(catalog, true),
            "nocommands" | "-@all" => self.all_commands(catalog, false),
            "&*"
            | "allchannels"
            | "resetchannels"
            | "sanitize-payload"
            | "skip-sanitize-payload" => {}
            "reset" => {
                self.reset_passwords();
                self.enabled = false;
                self.all_commands(catalog, false);
                self.keys = KeyPerms::default();
            }
            _ => match self.keys.apply(rule) {
                Some(done) => return done,
                None => return self.apply_other(catalog, rule, &lower),
            },
        }
        Ok(())
    }

    fn apply_other(
        &mut self,
        catalog: &Catalog,
        rule: &str,
        lower: &str,
    ) -> Result<(), &'static str> {
        if let Some(pass) = rule.strip_prefix('>') {
            self.add_password(pass.as_bytes());
        } else if let Some(pass) = rule.strip_prefix('<') {
            self.remove_hash(&sha256(pass.as_bytes()))?;
        } else if let Some(hash) = rule.strip_prefix('#') {
            let hash = unhex(hash).ok_or("The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters")?;
            if !self.passwords.contains(&hash) {
                self.passwords.push(hash);
            }
            self.nopass = false;
        } else if let Some(hash) = rule.strip_prefix('!') {
            let hash = unhex(hash).ok_or("The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters")?;
            self.remove_hash(&hash)?;
        } else if rule.starts_with('%') {
            return Err("Syntax error");
        } else if rule.starts_with('&') {
            return Err("only &* (all channels) is supported");
        } else if let Some(name) = lower.strip_prefix("+@") {
            self.category(catalog, name, true)?;
        } else if let Some(name) = lower.strip_prefix("-@") {
            self.category(catalog, name, false)?;
        } else if let Some(name) = lower.strip_prefix('+') {
            self.command(catalog, name, true)?;
        } else if let Some(name) = lower.strip_prefix('-') {
            self.command(catalog, name, false)?;
        } else {
            return Err("Syntax error");
        }
        Ok(())
    }

    fn remove_hash(&mut self, hash: &[u8; 32]) -> Result<(), &'static str> {
        let before = self.passwords.len();
        self.passwords.retain(|h| h != hash);
        if self.passwords.len() == before {
            return Err("no such password");
        }
        Ok(())
    }

    fn category(&mut self, catalog: &Catalog, name: &str, on: bool) -> Result<(), &'static str> {
        let category = Catalog::category(name).ok_or("Unknown command or category name in ACL")?;
        for id in 0..catalog.len() {
            if catalog.categories(id) & category != 0 {
                self.set_bit(id, on);
            }
        }
        self.rules
            .push(format!("{}@{name}", if on { '+' } else { '-' }));
        Ok(())
    }

    fn command(&mut self, catalog: &Catalog, name: &str, on: bool) -> Result<(), &'static str> {
        let id = catalog
            .id(name)
            .ok_or("Unknown command or category name in ACL")?;
        self.set_bit(id, on);
        for &child in catalog.children(id) {
            self.set_bit(child, on);
        }
        self.rules
            .push(format!("{}{name}", if on { '+' } else { '-' }));
        Ok(())
    }

    /// The user as one `ACL LIST` line (and ACL file line).
    pub fn describe(&self, name: &str) -> String {
        let mut line = format!("user {name} {}", if self.enabled { "on" } else { "off" });
        if self.nopass {
            line.push_str(" nopass");
        }
        for h in &self.passwords {
            line.push_str(" #");
            line.push_str(&hex(h));
        }
        let keys = self.keys.describe();
        if !keys.is_empty() {
            line.push(' ');
            line.push_str(&keys);
        }
        line.push_str(" &* ");
        line.push_str(&self.rules.join(" "));
        line
    }

    /// The `flags`, `passwords` and `commands` fields of `ACL GETUSER`.
    pub fn flags(&self) -> Vec<&'static str> {
        let mut flags = vec![if self.enabled { "on" } else { "off" }];
        if self.nopass {
            flags.push("nopass");
        }
        flags
    }

    pub fn password_hashes(&self) -> Vec<String> {
        self.passwords.iter().map(hex).collect()
    }

    pub fn command_rules(&self) -> String {
        self.rules.join(" ")
    }
}

/// One user as connections see it: the bitset read per command, whether it may touch every
/// key, and the rules behind them.
#[derive(Debug)]
pub struct User {
    pub name: String,
    bits: [AtomicU64; WORDS],
    all_keys: AtomicBool,
    /// The key patterns, read only for a user without `all_keys`.
    keys: RwLock<Arc<[KeyPattern]>>,
    perms: Mutex<Perms>,
}

impl User {
    pub(super) fn new(name: &str) -> User {
        User {
            name: name.into(),
            bits: Default::default(),
            all_keys: AtomicBool::new(false),
            keys: RwLock::new(Arc::from(Vec::new())),
            perms: Mutex::new(Perms::new(&Catalog::default())),
        }
    }

    /// Whether this user may run the command with id `id`: one load and one shift.
    #[inline]
    pub fn allows(&self, id: usize) -> bool {
        self.bits
            .get(id / 64)
            .is_some_and(|w| w.load(Relaxed) >> (id % 64) & 1 == 1)
    }

    /// Whether this user may touch every key (`~*`): one load, the whole check for most users.
    #[inline]
    pub fn all_keys(&self) -> bool {
        self.all_keys.load(Relaxed)
    }

    /// Whether one of this user's key patterns grants a call that does or does not `write`
    /// on `key` (see [`super::keys`]).
    pub fn may_touch(&self, key: &[u8], write: bool) -> bool {
        self.all_keys() || self.keys.read().iter().any(|p| p.grants(key, write))
    }

    /// Whether `pass` logs in as this user: on, and `nopass` or one of its passwords.
    pub fn accepts(&self, pass: &[u8]) -> bool {
        let perms = self.perms.lock();
        perms.enabled && (perms.nopass || perms.passwords.contains(&sha256(pass)))
    }

    /// Whether a new connection is logged in as this user without AUTH (`nopass` and on).
    pub fn needs_no_password(&self) -> bool {
        let perms = self.perms.lock();
        perms.enabled && perms.nopass
    }

    pub fn perms(&self) -> Perms {
        self.perms.lock().clone()
    }

    /// Installs new settings; connections logged in as this user see them at their next
    /// command.
    pub(super) fn set(&self, perms: Perms) {
        let mut current = self.perms.lock();
        for (i, word) in self.bits.iter().enumerate() {
            word.store(perms.bits[i] | perms.always[i], Relaxed);
        }
        *self.keys.write() = Arc::from(perms.keys.patterns.clone());
        self.all_keys.store(perms.keys.all, Relaxed);
        *current = perms;
    }

    pub fn describe(&self) -> String {
        self.perms.lock().describe(&self.name)
    }
}
