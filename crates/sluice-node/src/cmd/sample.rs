//! Random picks for HRANDFIELD, SRANDMEMBER, SPOP and ZRANDMEMBER: which entries of a
//! collection of `len` a count asks for, as Redis's commands read the count (positive:
//! distinct entries, at most all; negative: that many, repeats allowed).

/// A random number below `n` (`n > 0`).
pub fn below(n: usize) -> usize {
    (crate::rand::next() % n as u64) as usize
}

/// Indexes into `len` entries: `count >= 0` distinct ones (all of them, in order, if `count`
/// reaches `len`), `count < 0` that many with repeats, drawn as the caller takes them (a
/// caller writing replies stops at the output limit, so a huge count allocates nothing).
/// Empty for an empty collection.
pub fn indexes(len: usize, count: i64) -> Box<dyn Iterator<Item = usize>> {
    if len == 0 {
        return Box::new(std::iter::empty());
    }
    if count < 0 {
        let n = count.unsigned_abs();
        return Box::new((0..n).map(move |_| below(len)));
    }
    let n = usize::try_from(count).unwrap_or(usize::MAX);
    if n >= len {
        return Box::new(0..len);
    }
    // A partial Fisher-Yates shuffle of the first `n` places.
    let mut all: Vec<usize> = (0..len).collect();
    for i in 0..n {
        let j = i + below(len - i);
        all.swap(i, j);
    }
    all.truncate(n);
    Box::new(all.into_iter())
}

/// How many entries [`indexes`] gives.
pub fn count(len: usize, count: i64) -> u64 {
    match (len, count) {
        (0, _) => 0,
        (_, c) if c < 0 => c.unsigned_abs(),
        (len, c) => (c as u64).min(len as u64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_as_redis_reads_them() {
        assert_eq!(indexes(3, 5).collect::<Vec<_>>(), vec![0, 1, 2]);
        assert_eq!(indexes(0, -5).count(), 0);
        assert_eq!(count(3, 5), 3);
        assert_eq!(count(3, -5), 5);
        let mut some: Vec<usize> = indexes(10, 4).collect();
        assert_eq!(some.len(), 4);
        some.sort_unstable();
        some.dedup();
        assert_eq!(some.len(), 4, "distinct");
        let repeats: Vec<usize> = indexes(2, -50).collect();
        assert_eq!(repeats.len(), 50);
        assert!(repeats.iter().all(|&i| i < 2));
    }
}
