//! What a node keeps about each key of a Redis-backed limit: leased tokens, a cached refusal,
//! and the local limiter that stands in while Redis is away. Bounded in number of keys.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;

use parking_lot::Mutex;

use crate::clock::{MonotonicClock, Nanos};
use crate::limit::{Gcra, Limiter, SlidingWindow, TokenBucket};
use crate::rejection::Rejection;

use super::config::LimitKind;

/// Shards of the key map: 16, so that requests on different keys rarely share a lock, at the
/// cost of 16 small maps.
pub(crate) const SHARDS: usize = 16;

/// A local limiter of one of the three kinds.
#[derive(Debug)]
pub(crate) enum LocalLimiter {
    Gcra(Gcra<MonotonicClock>),
    TokenBucket(TokenBucket<MonotonicClock>),
    SlidingWindow(SlidingWindow<MonotonicClock>),
}

impl LocalLimiter {
    /// A full limiter of `kind` (validated before).
    pub(crate) fn new(kind: &LimitKind, clock: MonotonicClock) -> Option<Self> {
        Some(match *kind {
            LimitKind::Gcra(c) => LocalLimiter::Gcra(Gcra::new(c, clock).ok()?),
            LimitKind::TokenBucket(c) => {
                LocalLimiter::TokenBucket(TokenBucket::new(c, clock).ok()?)
            }
            LimitKind::SlidingWindow(c) => {
                LocalLimiter::SlidingWindow(SlidingWindow::new(c, clock).ok()?)
            }
        })
    }

    pub(crate) fn try_acquire(&self, n: u64) -> Result<(), Rejection> {
        match self {
            LocalLimiter::Gcra(l) => l.try_acquire(n),
            LocalLimiter::TokenBucket(l) => l.try_acquire(n),
            LocalLimiter::SlidingWindow(l) => l.try_acquire(n),
        }
    }

    fn is_full(&self) -> bool {
        let (available, capacity) = match self {
            LocalLimiter::Gcra(l) => (l.available(), l.capacity()),
            LocalLimiter::TokenBucket(l) => (l.available(), l.capacity()),
            LocalLimiter::SlidingWindow(l) => (l.available(), l.capacity()),
        };
        available >= capacity
    }
}

/// One key's local state.
#[derive(Debug, Default)]
pub(crate) struct KeyState {
    /// Tokens leased from Redis and not spent yet.
    pub(crate) lease: u64,
    /// When the lease ends (local clock).
    pub(crate) lease_until: Nanos,
    /// Whether a call is taking a new lease (only one at a time per key).
    pub(crate) refilling: bool,
    /// Until when a request of at least `denied_n` is refused without asking Redis.
    pub(crate) denied_until: Nanos,
    pub(crate) denied_n: u64,
    /// The stand-in while Redis is away, made on first need.
    pub(crate) fallback: Option<LocalLimiter>,
}

impl KeyState {
    /// Whether forgetting this key loses nothing.
    fn is_idle(&self, now: Nanos) -> bool {
        (self.lease == 0 || self.lease_until <= now)
            && !self.refilling
            && self.denied_until <= now
            && self.fallback.as_ref().is_none_or(LocalLimiter::is_full)
    }
}

/// Keys' local states, sharded, at most `max_keys` of them.
#[derive(Debug)]
pub(crate) struct LocalKeys {
    shards: Vec<Mutex<HashMap<Box<str>, KeyState>>>,
    hasher: RandomState,
    per_shard: usize,
}

impl LocalKeys {
    pub(crate) fn new(max_keys: usize) -> Self {
        LocalKeys {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: RandomState::new(),
            per_shard: max_keys.div_ceil(SHARDS).max(1),
        }
    }

    fn shard(&self, key: &str) -> &Mutex<HashMap<Box<str>, KeyState>> {
        let i = self.hasher.hash_one(key) as usize % SHARDS;
        &self.shards[i]
    }

    /// Runs `f` on `key`'s state if there is one.
    pub(crate) fn with<T>(&self, key: &str, f: impl FnOnce(&mut KeyState) -> T) -> Option<T> {
        self.shard(key).lock().get_mut(key).map(f)
    }

    /// Runs `f` on `key`'s state, made if missing. A full shard first forgets its idle keys;
    /// if all are busy, it forgets a quarter of them (a lease or a cached refusal lost costs a
    /// round trip; a fallback limiter lost starts full again).
    pub(crate) fn with_entry<T>(
        &self,
        key: &str,
        now: Nanos,
        f: impl FnOnce(&mut KeyState) -> T,
    ) -> T {
        let mut shard = self.shard(key).lock();
        if let Some(state) = shard.get_mut(key) {
            return f(state);
        }
        if shard.len() >= self.per_shard {
            shard.retain(|_, state| !state.is_idle(now));
            if shard.len() >= self.per_shard {
                let keep = self.per_shard - self.per_shard.div_ceil(4);
                let excess = shard.len() - keep;
                let doomed: Vec<Box<str>> = shard
                    .iter()
                    .filter(|(_, state)| !state.refilling)
                    .map(|(k, _)| k.clone())
                    .take(excess)
                    .collect();
                for k in doomed {
                    shard.remove(&k);
                }
            }
        }
        f(shard.entry(Box::from(key)).or_default())
    }

    /// How many keys are kept.
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }
}
