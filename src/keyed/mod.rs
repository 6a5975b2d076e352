//! Keyed limits: a limit per IP address, tenant, connection or any key, with a hard cap on the
//! number of keys held.
//!
//! A [`KeyedLimiter`] runs one [`KeyedRule`] (GCRA, a token bucket or a fixed window) on a state of
//! one word per key, and answers per key what the [`limit`](crate::limit) limiters answer:
//! `try_acquire(&key, n)` (admit, or refuse with the exact `retry_after`), `available(&key)`,
//! `capacity(&key)`. Some keys may have limits of their own: a table of overrides, or a resolver
//! the application gives, asked once when a key first arrives (a paying tenant gets ten times the
//! rate).
//!
//! Why it is built this way:
//! * **No lock shared by all keys.** Keys live in up to 64 shards, each a read-write lock around
//!   a slab and a `hashbrown` index; a known key's call takes its shard's read lock and changes its
//!   state with one compare-and-swap. Only a new key takes the shard's write lock.
//! * **A hard cap, and forgetting that loses nothing.** Each shard holds at most its share of
//!   `max_keys`. A key whose state is full again decides as a fresh key would, so it is dropped at
//!   no loss of correctness: when a shard is full, a scan from its CLOCK hand evicts such a key
//!   first; if it finds none, [`WhenFull`] says whether the key closest to full is evicted (it may
//!   then be admitted up to its capacity more than its limit, once per such eviction) or the new
//!   key is refused. Keys full again for `idle` are dropped as new keys arrive, or by
//!   [`KeyedLimiter::evict_idle`].
//! * **Small.** About 16 bytes per key beside the key in the slab (state word and rule number)
//!   and 10 to 23 in the index: under 64 bytes per key at a million keys, measured by
//!   `tests/keyed_memory.rs`. Memory stays flat under a churn of new keys once the cap is reached.
//!
//! [`KeyedConcurrency`] is the keyed form of a concurrency limit: how many calls of each key may
//! run at once, released exactly once by its permit, with the same hard cap on keys.
//!
//! [`KeyedConfig`] is the TOML form (`key = "ip"`, `rate = "100/s"`, `burst`, `max_keys`,
//! `idle`, `when_full`, `[overrides]`). `docs/design/keyed.md` derives the eviction bound.
//!
//! ```
//! use std::time::Duration;
//! use sluicegate::clock::ManualClock;
//! use sluicegate::keyed::KeyedLimiter;
//! use sluicegate::limit::GcraConfig;
//! use sluicegate::RejectReason;
//!
//! let per_tenant = GcraConfig { rate: 10, per: Duration::from_secs(1), burst: 2 };
//! let gold = GcraConfig { rate: 100, per: Duration::from_secs(1), burst: 20 };
//! let limiter = KeyedLimiter::<String>::builder(per_tenant)
//!     .max_keys(10_000)
//!     .override_key("gold".to_owned(), gold)
//!     .build(ManualClock::new())?;
//!
//! limiter.try_acquire("acme", 2)?;
//! let refused = limiter.try_acquire("acme", 1).unwrap_err();
//! assert_eq!(refused.reason, RejectReason::RateLimited);
//! assert_eq!(refused.retry_after, Some(Duration::from_millis(100)));
//! limiter.try_acquire("globex", 1)?; // every key has its own limit
//! limiter.try_acquire("gold", 20)?; // and some keys a bigger one
//! assert_eq!(limiter.len(), 3);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::borrow::Borrow;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::str::FromStr;

use crossbeam_utils::CachePadded;
use foldhash::fast::RandomState;
use parking_lot::RwLock;

use crate::clock::{Clock, MonotonicClock, Nanos};
use crate::limit::{exceeds_capacity, refused, AtomicStore};
use crate::rejection::{RejectReason, Rejection};

mod builder;
mod concurrency;
mod config;
mod evict;
mod overrides;
mod rule;
mod store;

pub use self::builder::KeyedBuilder;
pub use self::concurrency::{KeyedConcurrency, KeyedConcurrencyBuilder, KeyedConcurrencyPermit};
pub(crate) use self::config::{check_max_keys, IDLE, MAX_KEYS};
pub use self::config::{KeySource, KeyedConfig, KeyedConfigError, KeyedLimit, Rate, WhenFull};
pub use self::rule::{FixedWindowRule, GcraRule, KeyedRule, TokenBucketRule};

use self::evict::Place;
use self::overrides::Rules;
use self::store::{Entry, Shard};

/// The most shards: 64, several per core on any machine this runs on; each costs a cache line
/// for its lock and its own table.
pub(crate) const MAX_SHARDS: usize = 64;
/// The fewest keys a shard is made for: 256, so that each shard's scan for a victim chooses
/// among enough keys to approximate the whole table.
pub(crate) const MIN_KEYS_PER_SHARD: usize = 256;

/// What a keyed limiter holds and has dropped, summed over its shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct KeyedStats {
    /// Keys held now.
    pub keys: usize,
    /// Keys dropped while full again (idle, or to make room): no decision changed.
    pub dropped_full: u64,
    /// Keys evicted while in use, to make room under [`WhenFull::Evict`].
    pub evicted_in_debt: u64,
    /// Calls of new keys refused for want of room under [`WhenFull::Refuse`].
    pub refused_new_keys: u64,
}

/// A limit per key, with a hard cap on the number of keys (see the module docs).
///
/// `K` is the key (an `IpAddr`, a `String`, a tuple...); calls take any borrowed form of it
/// (`&str` for a `String` key), so a known key costs no allocation. `R` is the rule each key runs
/// ([`GcraRule`] by default), `C` the clock.
pub struct KeyedLimiter<K, R: KeyedRule = GcraRule, C: Clock = MonotonicClock> {
    clock: C,
    hasher: RandomState,
    shards: Box<[CachePadded<RwLock<Shard<K>>>]>,
    /// Shard count − 1 (a power of two).
    mask: usize,
    rules: Rules<K, R>,
    max_keys: usize,
    idle: Nanos,
    when_full: WhenFull,
}

impl<K, R: KeyedRule, C: Clock> fmt::Debug for KeyedLimiter<K, R, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedLimiter")
            .field("shards", &self.shards.len())
            .field("max_keys", &self.max_keys)
            .field("idle", &self.idle)
            .field("when_full", &self.when_full)
            .finish_non_exhaustive()
    }
}

impl<K: Hash + Eq, R: KeyedRule> KeyedLimiter<K, R> {
    /// A builder for a limiter whose keys run `config` (unless overridden).
    pub fn builder(config: R::Config) -> KeyedBuilder<K, R> {
        KeyedBuilder::new(config)
    }
}

impl<K: Hash + Eq + FromStr, C: Clock> KeyedLimiter<K, GcraRule, C>
where
    K::Err: fmt::Display,
{
    /// The limiter a [`KeyedConfig`] describes; the keys of `[overrides]` are parsed as `K`.
    pub fn from_config(config: &KeyedConfig, clock: C) -> Result<Self, KeyedConfigError> {
        config.validate()?;
        let mut builder = KeyedBuilder::new(config.gcra())
            .max_keys(config.max_keys)
            .idle(config.idle)
            .when_full(config.when_full);
        for (name, limit) in &config.overrides {
            let key = name.parse::<K>().map_err(|_| {
                KeyedConfigError::new(
                    format!("overrides.{name:?}"),
                    format!("{name:?}"),
                    "is not a key of this limiter's kind",
                )
            })?;
            builder = builder.named_override(key, limit.gcra(), format!("overrides.{name:?}"));
        }
        builder.build(clock)
    }
}

impl<K: Hash + Eq, R: KeyedRule, C: Clock> KeyedLimiter<K, R, C> {
    pub(crate) fn from_parts(
        rules: Rules<K, R>,
        max_keys: usize,
        idle: Nanos,
        when_full: WhenFull,
        clock: C,
    ) -> Self {
        let wanted = (max_keys / MIN_KEYS_PER_SHARD).clamp(1, MAX_SHARDS);
        let count = 1usize << wanted.ilog2();
        let (share, extra) = (max_keys / count, max_keys % count);
        let shards = (0..count)
            .map(|i| CachePadded::new(RwLock::new(Shard::new(share + usize::from(i < extra)))))
            .collect();
        KeyedLimiter {
            clock,
            hasher: RandomState::default(),
            shards,
            mask: count - 1,
            rules,
            max_keys,
            idle,
            when_full,
        }
    }

    #[inline]
    fn shard(&self, hash: u64) -> &RwLock<Shard<K>> {
        &self.shards[(hash >> 32) as usize & self.mask]
    }

    /// Admits `n` calls of `key` now, or refuses: with the exact time until `n` would be admitted
    /// if nothing else happens, or with [`RejectReason::ExceedsCapacity`] if `n` is above the
    /// key's capacity. A new key is added (which may drop another, see the module docs).
    #[inline]
    pub fn try_acquire<Q>(&self, key: &Q, n: u64) -> Result<(), Rejection>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let shard = self.shard(hash);
        {
            let held = shard.read();
            if let Some(entry) = held.get(hash, key) {
                return self.take(entry, n);
            }
        }
        self.take_new(shard, hash, key, n)
    }

    #[inline]
    fn take(&self, entry: &Entry<K>, n: u64) -> Result<(), Rejection> {
        let rule = self.rules.get(entry.rule);
        if n > rule.capacity() {
            return Err(exceeds_capacity());
        }
        entry.take(rule, self.clock.now(), n)
    }

    /// The path of a key not found under the read lock.
    #[cold]
    fn take_new<Q>(
        &self,
        shard: &RwLock<Shard<K>>,
        hash: u64,
        key: &Q,
        n: u64,
    ) -> Result<(), Rejection>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let owned = key.to_owned();
        let number = self.rules.resolve(&owned);
        let rule = self.rules.get(number);
        if n > rule.capacity() {
            return Err(exceeds_capacity());
        }
        let mut held = shard.write();
        if let Some(entry) = held.get(hash, key) {
            return self.take(entry, n);
        }
        // Read under the write lock: a key dropped as full again at time t is re-created at a
        // time no earlier than t, so it decides as it would have.
        let now = self.clock.now();
        let state = rule.try_take(0, now, n)?;
        if rule.full_at(state) <= now {
            return Ok(()); // nothing to remember (n = 0)
        }
        held.sweep_some(&self.rules, now, self.idle, &self.hasher);
        let entry = Entry {
            key: owned,
            state: AtomicStore::new(state),
            rule: number,
        };
        if held.entries.len() < held.cap {
            held.push(entry, hash, &self.hasher);
            return Ok(());
        }
        match held.place(&self.rules, now, self.when_full) {
            Place::Replace(at) => {
                held.replace(at, entry, hash, &self.hasher);
                Ok(())
            }
            Place::RefuseUntil(at) => Err(refused(
                RejectReason::RateLimited,
                at.saturating_sub(now).max(1),
            )),
        }
    }

    /// How many calls of `key` would be admitted now (its capacity for a key not held).
    pub fn available<Q>(&self, key: &Q) -> u64
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        {
            let held = self.shard(hash).read();
            if let Some(entry) = held.get(hash, key) {
                let rule = self.rules.get(entry.rule);
                return rule.available(entry.state(), self.clock.now());
            }
        }
        self.rule_of_new(key).capacity()
    }

    /// The most calls of `key` ever admitted at once.
    pub fn capacity<Q>(&self, key: &Q) -> u64
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        if let Some(entry) = self.shard(hash).read().get(hash, key) {
            return self.rules.get(entry.rule).capacity();
        }
        self.rule_of_new(key).capacity()
    }

    fn rule_of_new<Q>(&self, key: &Q) -> &R
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let number = match self.rules.listed(key) {
            Some(n) => n,
            None => self.rules.resolve(&key.to_owned()),
        };
        self.rules.get(number)
    }

    /// Forgets `key` (it starts again fresh); returns whether it was held.
    pub fn remove<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let mut held = self.shard(hash).write();
        match held.position(hash, key) {
            Some(at) => {
                held.remove_at(at, &self.hasher);
                true
            }
            None => false,
        }
    }

    /// Drops every key that has been full again for at least `idle` (all keys full again with an
    /// `idle` of 0: governor's `retain_recent`); returns how many. No decision changes.
    pub fn evict_idle(&self) -> usize {
        let mut dropped = 0;
        for shard in self.shards.iter() {
            let mut held = shard.write();
            let now = self.clock.now();
            dropped += held.sweep_all(&self.rules, now, self.idle, &self.hasher);
        }
        dropped
    }

    /// Gives back the memory of dropped keys (the table keeps its size otherwise, so that a
    /// churn of keys never reallocates).
    pub fn shrink_to_fit(&self) {
        for shard in self.shards.iter() {
            shard.write().shrink_to_fit(&self.hasher);
        }
    }

    /// Keys held now.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.read().entries.len()).sum()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most keys ever held at once.
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// What the limiter holds and has dropped.
    pub fn stats(&self) -> KeyedStats {
        let mut stats = KeyedStats::default();
        for shard in self.shards.iter() {
            let held = shard.read();
            stats.keys += held.entries.len();
            stats.dropped_full += held.tally.dropped_full;
            stats.evicted_in_debt += held.tally.evicted_in_debt;
            stats.refused_new_keys += held.tally.refused_new;
        }
        stats
    }

    /// The clock it runs on.
    pub fn clock(&self) -> &C {
        &self.clock
    }
}
