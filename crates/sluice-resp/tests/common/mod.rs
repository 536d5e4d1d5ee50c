//! What the property tests share: cutting input into chunks, and mutating valid input.

use proptest::prelude::*;

/// `cuts` as offsets into an input of `len` bytes, in order.
pub fn sorted_cuts(len: usize, cuts: Vec<usize>) -> Vec<usize> {
    let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (len + 1)).collect();
    cuts.sort_unstable();
    cuts
}

/// One edit of an input; positions wrap around its length.
#[derive(Clone, Debug)]
pub enum Mutation {
    Set(usize, u8),
    Insert(usize, u8),
    Remove(usize),
}

pub fn mutate(input: &mut Vec<u8>, mutations: &[Mutation]) {
    for m in mutations {
        let len = input.len();
        match *m {
            Mutation::Set(at, b) if len > 0 => input[at % len] = b,
            Mutation::Insert(at, b) => input.insert(at % (len + 1), b),
            Mutation::Remove(at) if len > 0 => {
                input.remove(at % len);
            }
            _ => {}
        }
    }
}

/// Edits that write any byte, or often one of `interesting` (the protocol's own bytes).
pub fn mutation(interesting: &'static [u8]) -> impl Strategy<Value = Mutation> {
    let b = prop_oneof![prop::sample::select(interesting.to_vec()), any::<u8>()];
    prop_oneof![
        (any::<usize>(), b.clone()).prop_map(|(at, b)| Mutation::Set(at, b)),
        (any::<usize>(), b).prop_map(|(at, b)| Mutation::Insert(at, b)),
        any::<usize>().prop_map(Mutation::Remove),
    ]
}
