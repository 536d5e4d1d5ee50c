//! A rule's interned id, the number the check counters (`stats`) and the heavy hitters (`top`)
//! record a check under; `stats` keeps the names. Imports nothing of the node.

/// Rule ids: the unnamed rule, up to `MAX_RULES - 2` names, and `other`.
pub const MAX_RULES: usize = 256;

/// A rule's interned id: 0 is "no rule" (a plain RL.CHECK).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RuleId(pub u16);

impl RuleId {
    pub const UNNAMED: RuleId = RuleId(0);
    /// Every rule past the registry's bound.
    pub const OTHER: RuleId = RuleId(MAX_RULES as u16 - 1);
}
