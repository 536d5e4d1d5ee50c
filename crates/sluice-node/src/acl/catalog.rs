//! The commands a rule may name, with their ids and categories, as the command table describes
//! them.

use std::collections::HashMap;

/// A command category, as a bit.
pub type Category = u32;

/// The categories, as bits.
pub mod category {
    use super::Category;

    pub const RATELIMIT: Category = 1;
    pub const CONNECTION: Category = 1 << 1;
    pub const ADMIN: Category = 1 << 2;
    pub const READ: Category = 1 << 3;
    pub const WRITE: Category = 1 << 4;
    pub const FAST: Category = 1 << 5;
    pub const SLOW: Category = 1 << 6;
    pub const STRING: Category = 1 << 7;
    pub const KEYSPACE: Category = 1 << 8;
    pub const LIST: Category = 1 << 9;
    pub const HASH: Category = 1 << 10;
    pub const SET: Category = 1 << 11;
    pub const SORTEDSET: Category = 1 << 12;
    pub const BLOCKING: Category = 1 << 13;
    pub const TRANSACTION: Category = 1 << 14;
    pub const SCRIPTING: Category = 1 << 15;
}

use category::*;

/// Category names, as `ACL CAT` lists them and rules spell them after `@` (`all` is every
/// command).
pub const CATEGORIES: &[(&str, Category)] = &[
    ("ratelimit", RATELIMIT),
    ("connection", CONNECTION),
    ("admin", ADMIN),
    ("read", READ),
    ("write", WRITE),
    ("fast", FAST),
    ("slow", SLOW),
    ("string", STRING),
    ("keyspace", KEYSPACE),
    ("list", LIST),
    ("hash", HASH),
    ("set", SET),
    ("sortedset", SORTEDSET),
    ("blocking", BLOCKING),
    ("transaction", TRANSACTION),
    ("scripting", SCRIPTING),
];

/// Most ids a catalog holds: the width of a user's bitset.
pub const MAX_IDS: usize = 512;

/// Every command and permission-bearing subcommand: its id (the index), name and categories.
#[derive(Debug, Default)]
pub struct Catalog {
    names: Vec<String>,
    categories: Vec<Category>,
    /// Ids every user may run whatever its rules (AUTH, HELLO, QUIT, RESET: Redis's
    /// `no-auth` commands).
    always: Vec<usize>,
    /// A command's subcommand ids, by the command's id.
    children: HashMap<usize, Vec<usize>>,
    /// The ids that have subcommands, as bits: the request path asks one bit of every command.
    containers: [u64; MAX_IDS / 64],
    by_name: HashMap<String, usize>,
}

impl Catalog {
    /// Adds a command; its id is the number of ids before it, so adding the table's rows in
    /// order makes each id its row.
    ///
    /// # Panics
    /// Past [`MAX_IDS`] ids (a test of the command table catches it).
    pub fn add(&mut self, name: &str, categories: Category, always: bool) -> usize {
        let id = self.names.len();
        assert!(
            id < MAX_IDS,
            "the ACL catalog holds at most {MAX_IDS} commands"
        );
        self.names.push(name.to_ascii_lowercase());
        self.categories.push(categories);
        self.by_name.insert(name.to_ascii_lowercase(), id);
        if always {
            self.always.push(id);
        }
        id
    }

    /// Adds `parent|sub`, a subcommand with categories of its own.
    pub fn add_subcommand(&mut self, parent: usize, sub: &str, categories: Category) -> usize {
        let name = format!("{}|{}", self.names[parent], sub.to_ascii_lowercase());
        let id = self.add(&name, categories, false);
        self.children.entry(parent).or_default().push(id);
        self.containers[parent / 64] |= 1 << (parent % 64);
        id
    }

    /// Whether the command with id `id` has subcommands with permissions of their own: one
    /// load and one shift.
    #[inline]
    pub fn has_subcommands(&self, id: usize) -> bool {
        self.containers
            .get(id / 64)
            .is_some_and(|w| w >> (id % 64) & 1 == 1)
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    pub fn name(&self, id: usize) -> &str {
        &self.names[id]
    }

    pub fn id(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    pub fn categories(&self, id: usize) -> Category {
        self.categories[id]
    }

    pub fn always(&self) -> &[usize] {
        &self.always
    }

    /// The ids of `id`'s subcommands (none for most commands).
    pub fn children(&self, id: usize) -> &[usize] {
        self.children.get(&id).map_or(&[], Vec::as_slice)
    }

    /// The id of `row`'s subcommand `sub` (any case), if it has one by that name.
    pub fn subcommand_id(&self, row: usize, sub: &[u8]) -> Option<usize> {
        let children = self.children.get(&row)?;
        let parent = self.names.get(row)?;
        let sub = std::str::from_utf8(sub).ok()?;
        children.iter().copied().find(|&c| {
            self.names[c]
                .strip_prefix(parent.as_str())
                .and_then(|s| s.strip_prefix('|'))
                .is_some_and(|s| s.eq_ignore_ascii_case(sub))
        })
    }

    /// The category named `name` (after `@`), `None` for `all` and unknown names.
    pub fn category(name: &str) -> Option<Category> {
        CATEGORIES
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|&(_, c)| c)
    }

    /// The command names in `category`, for `ACL CAT category`.
    pub fn in_category(&self, category: Category) -> impl Iterator<Item = &str> {
        (0..self.len())
            .filter(move |&id| self.categories[id] & category != 0)
            .map(|id| self.name(id))
    }
}
