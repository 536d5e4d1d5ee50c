//! TEMPORARY: stands in for sluice-store's maxmemory API until it lands (removed in the same change).
#![allow(dead_code)]
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvictionPolicy {
    EvictSoonest,
    Reject,
}

static MAX: AtomicUsize = AtomicUsize::new(0);

pub trait StoreMemExt {
    fn maxmemory(&self) -> usize {
        MAX.load(Relaxed)
    }
    fn set_maxmemory(&self, n: usize) {
        MAX.store(n, Relaxed)
    }
    fn policy(&self) -> EvictionPolicy {
        EvictionPolicy::EvictSoonest
    }
    fn set_policy(&self, _p: EvictionPolicy) {}
    fn evicted_total(&self) -> u64 {
        0
    }
    fn rejected_total(&self) -> u64 {
        0
    }
}
impl StoreMemExt for sluice_store::Store {}
