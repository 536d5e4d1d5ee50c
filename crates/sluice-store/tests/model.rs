//! The store against a reference model: a `BTreeMap<key, (value, deadline)>` that forgets a key
//! the moment its deadline is reached. Random operations, random time steps (from nanoseconds to
//! hours, so every wheel level and the overflow list are crossed) and `expire_due` at random
//! points must never change an answer, and `len` must always match.

use std::collections::BTreeMap;

use bytes::Bytes;
use proptest::prelude::*;
use sluice_core::{Nanos, State};
use sluice_store::{SetCond, SetTtl, Store, StoreConfig, StoreError, Ttl};

const T0: Nanos = Nanos(1_700_000_000_000_000_000);

const KEYS: [&[u8]; 6] = [
    b"a",
    b"b",
    b"",
    b"user:\x00\xff",
    b"a key that is longer than the inline twenty-two bytes",
    b"another long key, also on the heap......",
];

const VALUES: [&[u8]; 7] = [
    b"0",
    b"41",
    b"-5",
    b"9223372036854775806",
    b"007",
    b"text",
    b"a string value longer than fourteen bytes",
];

#[derive(Clone, Debug)]
enum Op {
    Set(usize, usize, SetCond, TtlArg),
    Get(usize),
    Incr(usize, i64),
    /// Expire at now + ms (0 deletes).
    Expire(usize, u64),
    Ttl(usize),
    Del(usize),
    Exists(usize),
    /// A limiter write that keeps the key for `ms` (0 = back to fresh, drop it).
    Touch(usize, u64),
    /// A limiter read.
    Peek(usize),
    Len,
    ExpiresCount,
    Advance(u64),
    /// Moves time to exactly the next deadline in the model (or 1 ns before it).
    ToDeadline(bool),
    ExpireDue(usize),
    /// One bounded housekeeping step: shard, budget.
    ExpireSome(usize, usize),
    Flush,
}

#[derive(Clone, Copy, Debug)]
enum TtlArg {
    Clear,
    Keep,
    InMs(u64),
}

fn ms_span() -> impl Strategy<Value = u64> {
    prop_oneof![0..5u64, 0..200u64, 0..70_000u64, 0..20_000_000u64]
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0..KEYS.len();
    let cond = prop_oneof![Just(SetCond::Always), Just(SetCond::Nx), Just(SetCond::Xx)];
    let ttl = prop_oneof![
        Just(TtlArg::Clear),
        Just(TtlArg::Keep),
        ms_span().prop_map(TtlArg::InMs)
    ];
    prop_oneof![
        3 => (key.clone(), 0..VALUES.len(), cond, ttl).prop_map(|(k, v, c, t)| Op::Set(k, v, c, t)),
        2 => key.clone().prop_map(Op::Get),
        2 => (key.clone(), prop_oneof![-3..3i64, Just(i64::MAX), Just(i64::MIN)]).prop_map(|(k, d)| Op::Incr(k, d)),
        2 => (key.clone(), ms_span()).prop_map(|(k, ms)| Op::Expire(k, ms)),
        1 => key.clone().prop_map(Op::Ttl),
        1 => key.clone().prop_map(Op::Del),
        1 => key.clone().prop_map(Op::Exists),
        3 => (key.clone(), ms_span()).prop_map(|(k, ms)| Op::Touch(k, ms)),
        1 => key.prop_map(Op::Peek),
        1 => Just(Op::Len),
        1 => Just(Op::ExpiresCount),
        4 => prop_oneof![0..3u64, 0..2_000_000u64, 0..5_000_000_000u64, 0..20_000_000_000_000u64].prop_map(Op::Advance),
        2 => any::<bool>().prop_map(Op::ToDeadline),
        2 => (0..8usize).prop_map(Op::ExpireDue),
        2 => (0..8usize, 1..4usize).prop_map(|(s, b)| Op::ExpireSome(s, b)),
        1 => Just(Op::Flush),
    ]
}

#[derive(Clone, Debug, PartialEq)]
enum MValue {
    Counter(Vec<u8>),
    Limiter(State),
}

#[derive(Default)]
struct Model {
    map: BTreeMap<Vec<u8>, (MValue, Option<Nanos>)>,
}

impl Model {
    fn purge(&mut self, now: Nanos) {
        self.map.retain(|_, (_, d)| d.is_none_or(|d| d > now));
    }

    fn live(&mut self, key: &[u8], now: Nanos) -> Option<&mut (MValue, Option<Nanos>)> {
        self.purge(now);
        self.map.get_mut(key)
    }

    /// SET: whether it sets.
    fn set(&mut self, key: &[u8], value: &[u8], cond: SetCond, ttl: SetTtl, now: Nanos) -> bool {
        let existing = self.live(key, now).map(|e| e.1);
        let want = !matches!(
            (cond, existing.is_some()),
            (SetCond::Nx, true) | (SetCond::Xx, false)
        );
        if want {
            let deadline = match ttl {
                SetTtl::Clear => None,
                SetTtl::Keep => existing.flatten(),
                SetTtl::At(at) => Some(at),
            };
            self.map
                .insert(key.to_vec(), (MValue::Counter(value.to_vec()), deadline));
        }
        want
    }

    /// INCRBY: the new value, or the store's error.
    fn incr_by(&mut self, key: &[u8], delta: i64, now: Nanos) -> Result<i64, StoreError> {
        match self.live(key, now) {
            None => {
                let v = delta.to_string().into_bytes();
                self.map.insert(key.to_vec(), (MValue::Counter(v), None));
                Ok(delta)
            }
            Some((MValue::Limiter(_), _)) => Err(StoreError::WrongType),
            Some((MValue::Counter(v), _)) => match canonical_int(v) {
                None => Err(StoreError::NotInteger),
                Some(n) => match n.checked_add(delta) {
                    None => Err(StoreError::Overflow),
                    Some(m) => {
                        *v = m.to_string().into_bytes();
                        Ok(m)
                    }
                },
            },
        }
    }

    /// A limiter write of `state` kept `ms` (0: deleted): the state before it.
    fn touch(
        &mut self,
        key: &[u8],
        state: &State,
        ms: u64,
        now: Nanos,
    ) -> Result<Option<State>, StoreError> {
        match self.live(key, now) {
            Some((MValue::Counter(_), _)) => Err(StoreError::WrongType),
            found => {
                let before = found.map(|e| e.0.clone());
                if ms == 0 {
                    self.map.remove(key);
                } else {
                    let deadline = now.saturating_add(Nanos::from_millis(ms));
                    let value = MValue::Limiter(state.clone());
                    self.map.insert(key.to_vec(), (value, Some(deadline)));
                }
                Ok(before.map(|v| match v {
                    MValue::Limiter(s) => s,
                    MValue::Counter(_) => unreachable!(),
                }))
            }
        }
    }
}

fn canonical_int(v: &[u8]) -> Option<i64> {
    let n: i64 = std::str::from_utf8(v).ok()?.parse().ok()?;
    (n.to_string().as_bytes() == v).then_some(n)
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let store = Store::new(StoreConfig {
        shards: 8,
        ..StoreConfig::default()
    });
    let mut model = Model::default();
    let mut now = T0;
    for op in ops {
        match op {
            Op::Set(k, v, cond, ttl) => {
                let (key, value) = (KEYS[k], VALUES[v]);
                let ttl = match ttl {
                    TtlArg::Clear => SetTtl::Clear,
                    TtlArg::Keep => SetTtl::Keep,
                    TtlArg::InMs(ms) => SetTtl::At(now.saturating_add(Nanos::from_millis(ms))),
                };
                let want = model.set(key, value, cond, ttl, now);
                prop_assert_eq!(store.set(key, value, cond, ttl, now), want, "{:?}", op);
            }
            Op::Get(k) => {
                let want = match model.live(KEYS[k], now) {
                    None => Ok(None),
                    Some((MValue::Counter(v), _)) => Ok(Some(Bytes::from(v.clone()))),
                    Some((MValue::Limiter(_), _)) => Err(StoreError::WrongType),
                };
                prop_assert_eq!(store.get(KEYS[k], now), want, "{:?}", op);
            }
            Op::Incr(k, delta) => {
                let key = KEYS[k];
                let want = model.incr_by(key, delta, now);
                prop_assert_eq!(store.incr_by(key, delta, now), want, "{:?}", op);
            }
            Op::Expire(k, ms) => {
                let key = KEYS[k];
                let at = now.saturating_add(Nanos::from_millis(ms));
                let want = match model.live(key, now) {
                    None => false,
                    Some(e) => {
                        e.1 = Some(at);
                        true
                    }
                };
                model.purge(now);
                prop_assert_eq!(store.expire_at(key, at, now), want, "{:?}", op);
            }
            Op::Ttl(k) => {
                let want = match model.live(KEYS[k], now) {
                    None => Ttl::Missing,
                    Some((_, None)) => Ttl::Persistent,
                    Some((_, Some(d))) => Ttl::Remaining(d.saturating_sub(now)),
                };
                prop_assert_eq!(store.ttl(KEYS[k], now), want, "{:?}", op);
            }
            Op::Del(k) => {
                model.purge(now);
                let want = model.map.remove(KEYS[k]).is_some();
                prop_assert_eq!(store.del(KEYS[k], now), want, "{:?}", op);
            }
            Op::Exists(k) => {
                let want = model.live(KEYS[k], now).is_some();
                prop_assert_eq!(store.exists(KEYS[k], now), want, "{:?}", op);
            }
            Op::Touch(k, ms) => {
                let key = KEYS[k];
                let state = State::Token { tat: now };
                let want = model.touch(key, &state, ms, now);
                let got = store.limiter(key, now, |slot| {
                    let before = slot.clone();
                    *slot = (ms > 0).then_some(state);
                    Ok((before, Some(Nanos::from_millis(ms))))
                });
                prop_assert_eq!(got, want, "{:?}", op);
            }
            Op::Peek(k) => {
                let want = match model.live(KEYS[k], now) {
                    None => Ok(None),
                    Some((MValue::Counter(_), _)) => Err(StoreError::WrongType),
                    Some((MValue::Limiter(s), _)) => Ok(Some(s.clone())),
                };
                let got = store.limiter(KEYS[k], now, |slot| Ok((slot.clone(), None)));
                prop_assert_eq!(got, want, "{:?}", op);
            }
            Op::Len => {
                model.purge(now);
                prop_assert_eq!(store.len(now), model.map.len());
            }
            Op::ExpiresCount => {
                model.purge(now);
                let want = model.map.values().filter(|e| e.1.is_some()).count();
                prop_assert_eq!(store.expires_count(now), want);
            }
            Op::Advance(ns) => now = now.saturating_add(Nanos(ns)),
            Op::ToDeadline(before) => {
                model.purge(now);
                if let Some(d) = model.map.values().filter_map(|e| e.1).min() {
                    now = if before { Nanos(d.0 - 1) } else { d };
                }
            }
            Op::ExpireDue(shard) => {
                store.expire_due(shard % store.shard_count(), now);
            }
            Op::ExpireSome(shard, budget) => {
                store.expire_some(shard % store.shard_count(), now, budget);
            }
            Op::Flush => {
                store.flush();
                model.map.clear();
            }
        }
    }
    model.purge(now);
    prop_assert_eq!(store.len(now), model.map.len());
    // Far in the future every key with a deadline is gone, and the wheel agrees.
    let end = now.saturating_add(Nanos::from_secs(400_000));
    for i in 0..store.shard_count() {
        store.expire_due(i, end);
    }
    model.purge(end);
    prop_assert_eq!(store.len(end), model.map.len());
    prop_assert_eq!(store.expires_count(end), 0);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn store_matches_model(ops in proptest::collection::vec(op(), 1..200)) {
        run(ops)?;
    }
}
