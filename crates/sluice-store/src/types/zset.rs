//! A sorted set: a [`Pack`] of member, score pairs in (score, member) order while it has at most
//! [`PACK_ENTRIES`] members and none longer than [`PACK_VALUE`]; then a map from member to
//! score beside an ordered tree of (score, member) (one way, as in Redis). Scores are never NaN
//! (the commands refuse it, and no sum of scores is kept that could make one).

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap};

use super::pack::Pack;

/// Redis 7's `zset-max-listpack-entries` and `zset-max-listpack-value`.
pub const PACK_ENTRIES: usize = 128;
pub const PACK_VALUE: usize = 64;

/// A score, ordered as Redis orders them (`-0` equals `0`; never NaN).
#[derive(Clone, Copy, Debug)]
pub struct Score(pub f64);

impl PartialEq for Score {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Score {}
impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Score {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.partial_cmp(&other.0).unwrap_or(Ordering::Equal)
    }
}

#[derive(Clone, Debug)]
pub enum ZSet {
    Pack(Pack),
    Big(Box<Big>),
}

#[derive(Clone, Debug, Default)]
pub struct Big {
    dict: HashMap<Box<[u8]>, f64>,
    tree: BTreeSet<(Score, Box<[u8]>)>,
    bytes: usize,
}

impl Default for ZSet {
    fn default() -> Self {
        ZSet::Pack(Pack::new())
    }
}

/// A member's cost in a big set beyond its bytes (twice): a map slot and a tree entry.
const MEMBER: usize = 2 * size_of::<Box<[u8]>>() + 2 * size_of::<f64>() + 1;

fn score_of(bytes: &[u8]) -> f64 {
    f64::from_le_bytes(bytes.try_into().expect("a packed score takes 8 bytes"))
}

/// The order of sorted-set entries: by score, then by member's bytes.
fn order(a: (f64, &[u8]), b: (f64, &[u8])) -> Ordering {
    Score(a.0).cmp(&Score(b.0)).then_with(|| a.1.cmp(b.1))
}

impl ZSet {
    pub fn len(&self) -> usize {
        match self {
            ZSet::Pack(p) => p.count() / 2,
            ZSet::Big(b) => b.dict.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        match self {
            ZSet::Pack(p) => p.is_empty(),
            ZSet::Big(b) => b.dict.is_empty(),
        }
    }

    /// How many allocations freeing it takes (a pack is one).
    pub fn free_effort(&self) -> usize {
        match self {
            ZSet::Pack(_) => 1,
            ZSet::Big(b) => 2 * b.dict.len(),
        }
    }

    pub fn heap_bytes(&self) -> usize {
        match self {
            ZSet::Pack(p) => p.heap_bytes(),
            ZSet::Big(b) => size_of::<Big>() + b.dict.capacity() * MEMBER + b.bytes,
        }
    }

    pub fn score(&self, m: &[u8]) -> Option<f64> {
        match self {
            ZSet::Pack(p) => {
                let mut it = p.iter();
                while let (Some((_, e)), Some((_, s))) = (it.next(), it.next()) {
                    if e == m {
                        return Some(score_of(s));
                    }
                }
                None
            }
            ZSet::Big(b) => b.dict.get(m).copied(),
        }
    }

    /// Every entry in order (lowest score first).
    pub fn iter(&self) -> Box<dyn DoubleEndedIterator<Item = (f64, &[u8])> + '_> {
        match self {
            ZSet::Pack(p) => {
                let mut out = Vec::new();
                let mut it = p.iter();
                while let (Some((_, m)), Some((_, s))) = (it.next(), it.next()) {
                    out.push((score_of(s), m));
                }
                Box::new(out.into_iter())
            }
            ZSet::Big(b) => Box::new(b.tree.iter().map(|(s, m)| (s.0, &m[..]))),
        }
    }

    /// The entries from the first whose score is at least `min`, in order.
    pub fn from_score(&self, min: f64) -> Box<dyn Iterator<Item = (f64, &[u8])> + '_> {
        match self {
            ZSet::Pack(_) => Box::new(self.iter().skip_while(move |(s, _)| *s < min)),
            ZSet::Big(b) => {
                let start: (Score, Box<[u8]>) = (Score(min), Box::default());
                Box::new(b.tree.range(start..).map(|(s, m)| (s.0, &m[..])))
            }
        }
    }

    /// The 0-based rank of `m` counted from the lowest score.
    pub fn rank(&self, m: &[u8]) -> Option<usize> {
        let s = self.score(m)?;
        match self {
            ZSet::Pack(_) => self.iter().position(|(_, e)| e == m),
            ZSet::Big(b) => {
                let end: (Score, Box<[u8]>) = (Score(s), m.into());
                Some(b.tree.range(..end).count())
            }
        }
    }

    /// Sets `m`'s score; the old one, if it was there.
    pub fn insert(&mut self, m: &[u8], score: f64) -> Option<f64> {
        if matches!(self, ZSet::Pack(_)) {
            let old = self.score(m);
            let fits = m.len() <= PACK_VALUE && (old.is_some() || self.len() < PACK_ENTRIES);
            if fits {
                let ZSet::Pack(p) = self else { unreachable!() };
                if old.is_some() {
                    remove_packed(p, m);
                }
                // Insert before the first entry that orders after (score, m).
                let mut start = p.byte_len();
                let mut it = p.iter();
                while let (Some((at, e)), Some((_, s))) = (it.next(), it.next()) {
                    if order((score_of(s), e), (score, m)) == Ordering::Greater {
                        start = at.start;
                        break;
                    }
                }
                p.insert(start, &score.to_le_bytes());
                p.insert(start, m);
                return old;
            }
            self.grow();
        }
        let ZSet::Big(b) = self else { unreachable!() };
        match b.dict.insert(m.into(), score) {
            Some(old) => {
                b.tree.remove(&(Score(old), m.into()));
                b.tree.insert((Score(score), m.into()));
                Some(old)
            }
            None => {
                b.tree.insert((Score(score), m.into()));
                b.bytes += 2 * m.len();
                None
            }
        }
    }

    /// Removes `m`; true if it was there.
    pub fn remove(&mut self, m: &[u8]) -> bool {
        match self {
            ZSet::Pack(p) => remove_packed(p, m),
            ZSet::Big(b) => match b.dict.remove(m) {
                Some(s) => {
                    b.tree.remove(&(Score(s), m.into()));
                    b.bytes -= 2 * m.len();
                    true
                }
                None => false,
            },
        }
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            ZSet::Pack(p) => out.extend_from_slice(p.as_bytes()),
            ZSet::Big(b) => {
                let mut p = Pack::new();
                for (s, m) in &b.tree {
                    p.push(m);
                    p.push(&s.0.to_le_bytes());
                }
                out.extend_from_slice(p.as_bytes());
            }
        }
    }

    pub fn decode(bytes: &[u8]) -> Option<ZSet> {
        let p = Pack::from_bytes(bytes)?;
        let mut z = ZSet::default();
        let mut it = p.iter();
        loop {
            match (it.next(), it.next()) {
                (Some((_, m)), Some((_, s))) if s.len() == 8 && !score_of(s).is_nan() => {
                    z.insert(m, score_of(s));
                }
                (None, None) => return Some(z),
                _ => return None,
            }
        }
    }

    fn grow(&mut self) {
        if let ZSet::Pack(_) = self {
            let mut big = Big::default();
            for (s, m) in self.iter() {
                big.dict.insert(m.into(), s);
                big.tree.insert((Score(s), m.into()));
                big.bytes += 2 * m.len();
            }
            *self = ZSet::Big(Box::new(big));
        }
    }

    pub fn encoding(&self) -> &'static str {
        match self {
            ZSet::Pack(_) => "listpack",
            ZSet::Big(_) => "skiplist",
        }
    }
}

fn remove_packed(p: &mut Pack, m: &[u8]) -> bool {
    let mut it = p.iter();
    while let (Some((ma, e)), Some((sa, _))) = (it.next(), it.next()) {
        if e == m {
            p.remove(ma, sa);
            return true;
        }
    }
    false
}
