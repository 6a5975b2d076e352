//! A breaker per target: per downstream host, or per sender × target as in the original design
//! (one failing target must not cut off calls to the others).
//!
//! The number of keys is bounded (`max_keys`), so a caller that invents targets cannot grow
//! memory without limit. When a new key finds the table full, idle breakers (unused for
//! `idle_after`, and not open) are dropped first; if none is idle, one breaker is evicted, chosen
//! in this order: the least recently used closed one, then a half-open one, then the open one whose
//! open time ends soonest, and a forced-open one last. So an open breaker is evicted before its open
//! time ends only when every key is open: then the one that protects for the shortest time left
//! goes, and a `tracing` warning says so. An evicted key starts again closed.
//!
//! The table is one `parking_lot` mutex around a hash map, taken once per lookup; the breaker's own
//! work happens after it is released.

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::clock::{duration_to_nanos, Clock, MonotonicClock, Nanos};
use crate::limit::units::duration;
use crate::rejection::Rejection;

use super::circuit::{Breaker, BreakerPermit};
use super::config::{BreakerConfig, BreakerConfigError};
use super::policy::build_all;
use super::State;

/// Keys a keyed breaker holds by default: ten thousand, hosts or actor pairs a service talks to,
/// a few hundred kilobytes of breakers with count windows.
pub(crate) const MAX_KEYS: usize = 10_000;
/// A closed breaker unused this long is dropped: ten minutes, long past any open time.
pub(crate) const IDLE_AFTER: Duration = Duration::from_secs(600);

/// A [`KeyedBreaker`]'s configuration: the breaker each key gets, and the table's bounds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KeyedBreakerConfig {
    /// The breaker every key gets.
    pub breaker: BreakerConfig,
    /// The most keys held at once (default 10 000).
    pub max_keys: usize,
    /// A breaker unused this long, and not open, is dropped when room is needed (default 10 min).
    #[serde(with = "duration")]
    pub idle_after: Duration,
}

impl Default for KeyedBreakerConfig {
    fn default() -> Self {
        KeyedBreakerConfig {
            breaker: BreakerConfig::default(),
            max_keys: MAX_KEYS,
            idle_after: IDLE_AFTER,
        }
    }
}

#[derive(Debug)]
struct Entry<C: Clock> {
    breaker: Breaker<C>,
    last_used: Nanos,
}

/// A breaker per key, with a hard bound on the number of keys (see the module docs).
///
/// ```
/// use sluicegate::breaker::{KeyedBreaker, KeyedBreakerConfig};
/// use sluicegate::clock::ManualClock;
///
/// let breakers = KeyedBreaker::new(KeyedBreakerConfig::default(), ManualClock::new())?;
/// for _ in 0..5 {
///     breakers.try_acquire(&("orders", "db-1"))?.failure();
/// }
/// assert!(breakers.try_acquire(&("orders", "db-1")).is_err()); // this target is cut off
/// assert!(breakers.try_acquire(&("orders", "db-2")).is_ok()); // the others are not
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct KeyedBreaker<K, C: Clock = MonotonicClock> {
    config: KeyedBreakerConfig,
    clock: C,
    idle_after: Nanos,
    table: Mutex<HashMap<K, Entry<C>>>,
}

impl<K, C> KeyedBreaker<K, C>
where
    K: Eq + Hash + Clone + fmt::Debug,
    C: Clock,
{
    /// An empty table; fails if a figure breaks a rule.
    pub fn new(config: KeyedBreakerConfig, clock: C) -> Result<Self, BreakerConfigError> {
        config.breaker.validate()?;
        if config.max_keys == 0 {
            return Err(BreakerConfigError {
                key: "max_keys".into(),
                value: "0".into(),
                rule: "must be at least 1",
            });
        }
        Ok(KeyedBreaker {
            idle_after: duration_to_nanos(config.idle_after),
            config,
            clock,
            table: Mutex::new(HashMap::new()),
        })
    }

    /// [`Breaker::try_acquire`] on `key`'s breaker (created closed if the key is new).
    pub fn try_acquire(&self, key: &K) -> Result<BreakerPermit<C>, Rejection> {
        self.breaker(key).try_acquire()
    }

    /// `key`'s breaker, created closed if the key is new (which may evict another key).
    pub fn breaker(&self, key: &K) -> Breaker<C> {
        let now = self.clock.now();
        let mut table = self.table.lock();
        if let Some(entry) = table.get_mut(key) {
            entry.last_used = entry.last_used.max(now);
            return entry.breaker.clone();
        }
        if table.len() >= self.config.max_keys {
            self.sweep(&mut table, now);
        }
        if table.len() >= self.config.max_keys {
            self.evict_one(&mut table, now);
        }
        let breaker = Breaker::from_parts(
            &self.config.breaker,
            build_all(&self.config.breaker.policies),
            self.clock.clone(),
            Arc::from(format!("{key:?}")),
        );
        table.insert(
            key.clone(),
            Entry {
                breaker: breaker.clone(),
                last_used: now,
            },
        );
        breaker
    }

    /// `key`'s breaker, if the table holds one.
    pub fn get(&self, key: &K) -> Option<Breaker<C>> {
        self.table.lock().get(key).map(|e| e.breaker.clone())
    }

    /// Forgets `key`'s breaker; returns whether there was one.
    pub fn remove(&self, key: &K) -> bool {
        self.table.lock().remove(key).is_some()
    }

    /// How many keys the table holds.
    pub fn len(&self) -> usize {
        self.table.lock().len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every idle breaker (unused for `idle_after` and not open) now; returns how many.
    pub fn evict_idle(&self) -> usize {
        let now = self.clock.now();
        self.sweep(&mut self.table.lock(), now)
    }

    fn sweep(&self, table: &mut HashMap<K, Entry<C>>, now: Nanos) -> usize {
        let before = table.len();
        table.retain(|_, e| {
            let idle = now.saturating_sub(e.last_used) >= self.idle_after;
            let (state, until) = e.breaker.peek();
            let open = match state {
                State::Open => now < until,
                State::ForcedOpen => true,
                _ => false,
            };
            !idle || open
        });
        before - table.len()
    }

    fn evict_one(&self, table: &mut HashMap<K, Entry<C>>, now: Nanos) {
        let rank = |e: &Entry<C>| {
            let (state, until) = e.breaker.peek();
            match state {
                State::Closed | State::ForcedClosed => (0, e.last_used),
                State::Open if now >= until => (1, e.last_used),
                State::HalfOpen => (1, e.last_used),
                State::Open => (2, until),
                State::ForcedOpen => (3, e.last_used),
            }
        };
        let Some((key, (class, _))) = table
            .iter()
            .map(|(k, e)| (k, rank(e)))
            .min_by_key(|&(_, r)| r)
            .map(|(k, r)| (k.clone(), r))
        else {
            return;
        };
        if class >= 2 {
            tracing::warn!(target: "sluicegate::breaker", key = ?key, max_keys = self.config.max_keys,
                "every keyed breaker is open: evicting the one whose open time ends soonest");
        }
        table.remove(&key);
    }
}
