//! A sorted set: a [`Pack`] of member, score pairs in (score, member) order while it has at most
//! [`PACK_ENTRIES`] members and none longer than [`PACK_VALUE`]; then a map from member to
//! score beside an ordered tree of (score, member) (one way, as in Redis). Scores are never NaN
//! (the commands refuse it, and no sum of scores is kept that could make one).
//!
//! In a pack, a score that is a whole number below 2^53 (a timestamp, a counter) takes the
//! fewest little-endian bytes that hold it as an integer (none for 0), any other score its 8
//! bytes of `f64`: the entry's length tells them apart, and a ten-member set of whole scores
//! costs no more than Redis's listpack, which stores them as integers too. The replication and
//! snapshot form keeps every score in 8 bytes, as it always has.

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

/// Largest magnitude packed as an integer: every whole `f64` up to it is exact as an `i64`.
const EXACT: f64 = (1u64 << 53) as f64;

/// A score as a pack stores it: a whole number in the fewest bytes that hold it as a signed
/// integer, anything else (`-0` included, whose sign an integer would lose) as its `f64` bytes.
fn packed_score(score: f64, buf: &mut [u8; 8]) -> &[u8] {
    *buf = score.to_le_bytes();
    if score.fract() != 0.0 || score.abs() > EXACT || (score == 0.0 && score.is_sign_negative()) {
        return buf;
    }
    let n = score as i64;
    *buf = n.to_le_bytes();
    // The fewest bytes that give n back sign-extended (at most 7: |n| <= 2^53).
    let k = match n {
        0 => 0,
        _ => (1..8)
            .find(|&k| sign_extend(n, k) == n)
            .expect("a whole score up to 2^53 fits in 7 bytes"),
    };
    &buf[..k]
}

/// `n`'s low `k` bytes (1 to 7) as a signed integer.
fn sign_extend(n: i64, k: usize) -> i64 {
    let shift = 64 - 8 * k as u32;
    (n << shift) >> shift
}

/// The score a packed entry holds (see [`packed_score`]).
fn score_of(bytes: &[u8]) -> f64 {
    match bytes.len() {
        8 => f64::from_le_bytes(bytes.try_into().expect("8 bytes")),
        0 => 0.0,
        k => {
            let mut word = [0u8; 8];
            word[..k].copy_from_slice(bytes);
            sign_extend(i64::from_le_bytes(word), k) as f64
        }
    }
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
            ZSet::Pack(p) => Box::new(packed_entries(p).collect::<Vec<_>>().into_iter()),
            ZSet::Big(b) => Box::new(b.tree.iter().map(|(s, m)| (s.0, &m[..]))),
        }
    }

    /// The entries from the first whose score is at least `min`, in order. A pack is walked as
    /// it is read, with nothing collected: ZREMRANGEBYSCORE and ZCOUNT on a sliding log come
    /// here once a request.
    pub fn from_score(&self, min: f64) -> Box<dyn Iterator<Item = (f64, &[u8])> + '_> {
        match self {
            ZSet::Pack(p) => Box::new(packed_entries(p).skip_while(move |(s, _)| *s < min)),
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
                p.insert(start, packed_score(score, &mut [0; 8]));
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

    /// The entries as one pack's bytes, each score in its 8 bytes of `f64` (the replication and
    /// snapshot form, whatever the form in memory).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut p = Pack::new();
        for (s, m) in self.iter() {
            p.push(m);
            p.push(&s.to_le_bytes());
        }
        out.extend_from_slice(p.as_bytes());
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

/// A pack's (score, member) entries, in its order.
fn packed_entries(p: &Pack) -> impl Iterator<Item = (f64, &[u8])> {
    let mut it = p.iter();
    std::iter::from_fn(move || match (it.next(), it.next()) {
        (Some((_, m)), Some((_, s))) => Some((score_of(s), m)),
        _ => None,
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packed_score_reads_back_exactly() {
        let two53 = EXACT;
        let cases = [
            (0.0, 0),
            (-0.0, 8),
            (1.0, 1),
            (-1.0, 1),
            (127.0, 1),
            (128.0, 2),
            (-128.0, 1),
            (-129.0, 2),
            (1_733_356_800.0, 4),
            (1_733_356_800_123.0, 6),
            (two53, 7),
            (-two53, 7),
            (two53 + 2.0, 8),
            (0.5, 8),
            (-2.25, 8),
            (1e300, 8),
            (f64::INFINITY, 8),
            (f64::NEG_INFINITY, 8),
            (f64::MIN_POSITIVE, 8),
        ];
        for (score, len) in cases {
            let mut buf = [0; 8];
            let packed = packed_score(score, &mut buf);
            assert_eq!(packed.len(), len, "{score}");
            assert_eq!(score_of(packed).to_bits(), score.to_bits(), "{score}");
        }
    }

    #[test]
    fn mixed_scores_keep_their_order_and_their_wire_form() {
        let scores = [
            3.5,
            -2.0,
            0.0,
            1e20,
            EXACT,
            -0.0,
            7.0,
            -300.25,
            1_733_356_800.0,
        ];
        let mut z = ZSet::default();
        for (i, s) in scores.iter().enumerate() {
            assert_eq!(z.insert(format!("m{i}").as_bytes(), *s), None);
        }
        assert_eq!(z.insert(b"m6", 8.0), Some(7.0));
        assert!(matches!(z, ZSet::Pack(_)));
        let got: Vec<f64> = z.iter().map(|(s, _)| s).collect();
        let mut want: Vec<f64> = scores.to_vec();
        want[6] = 8.0;
        want.sort_by_key(|a| Score(*a));
        assert_eq!(got, want);
        assert_eq!(z.score(b"m5").map(f64::to_bits), Some((-0.0f64).to_bits()));
        assert_eq!(z.rank(b"m1"), Some(1));
        let from_zero = want.iter().copied().filter(|s| *s >= 0.0);
        assert!(z.from_score(0.0).map(|(s, _)| s).eq(from_zero));
        assert_eq!(z.from_score(1e21).count(), 0);

        // The wire keeps 8-byte scores, and a packed set encodes as its big form does.
        let mut wire = Vec::new();
        z.encode(&mut wire);
        let p = Pack::from_bytes(&wire).unwrap();
        assert_eq!(p.count(), 2 * scores.len());
        assert!(p.iter().skip(1).step_by(2).all(|(_, s)| s.len() == 8));
        let mut big = z.clone();
        big.grow();
        let mut big_wire = Vec::new();
        big.encode(&mut big_wire);
        assert_eq!(wire, big_wire);
        let back = ZSet::decode(&wire).unwrap();
        assert!(matches!(back, ZSet::Pack(_)));
        assert!(back.iter().eq(z.iter()));
    }

    #[test]
    fn ten_whole_scores_take_a_byte_or_two_each() {
        let mut z = ZSet::default();
        for i in 0..10 {
            z.insert(format!("m{i}").as_bytes(), f64::from(i));
        }
        // Each member: "mN" (1 + 2 bytes) and its score (1 + at most 1 byte), beside the
        // block's 16-byte header.
        assert!(z.heap_bytes() <= 16 + 10 * 5, "{}", z.heap_bytes());
        assert!(
            z.from_score(5.0)
                .map(|(s, _)| s)
                .eq([5.0, 6.0, 7.0, 8.0, 9.0])
        );
    }
}
