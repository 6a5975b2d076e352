//! [`KeyedConcurrency`]: how many calls of each key may run at once, with a hard cap on the keys
//! (the mechanism is on the type; the reasoning in `docs/design/keyed.md`).

use std::borrow::Borrow;
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_utils::CachePadded;
use foldhash::fast::RandomState;
use parking_lot::RwLock;

use super::config::{check_max_keys, KeyedConfigError, MAX_KEYS};
use super::{MAX_SHARDS, MIN_KEYS_PER_SHARD};
use crate::rejection::{RejectReason, Rejection};

/// One key's count of calls in flight and its maximum.
#[derive(Debug)]
struct Slot {
    in_flight: AtomicU64,
    max: u64,
}

impl Slot {
    /// Raises the count if it is below the maximum.
    fn enter(&self) -> bool {
        self.in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .is_ok()
    }

    fn is_idle(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) == 0
    }
}

/// One shard: its keys and its share of the cap.
struct Shard<K> {
    keys: HashMap<K, Arc<Slot>, RandomState>,
    cap: usize,
}

/// Builds a [`KeyedConcurrency`]: `KeyedConcurrency::<K>::builder(max)...build()`.
#[derive(Debug)]
pub struct KeyedConcurrencyBuilder<K> {
    max_concurrent: u64,
    max_keys: usize,
    overrides: Vec<(K, u64)>,
}

impl<K: Hash + Eq> KeyedConcurrencyBuilder<K> {
    /// The most keys held at once (default 100 000; at most 2³² − 1).
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// `key` may run `max_concurrent` calls at once instead of the default.
    pub fn override_key(mut self, key: K, max_concurrent: u64) -> Self {
        self.overrides.push((key, max_concurrent));
        self
    }

    /// The limiter; fails, changing nothing, if a figure breaks a rule (the error names it).
    pub fn build(self) -> Result<KeyedConcurrency<K>, KeyedConfigError> {
        check_max_keys(self.max_keys)?;
        if self.max_concurrent == 0 {
            return Err(KeyedConfigError::new(
                "max_concurrent",
                0,
                "must be at least 1",
            ));
        }
        let mut overrides = HashMap::with_hasher(RandomState::default());
        for (i, (key, max)) in self.overrides.into_iter().enumerate() {
            if max == 0 {
                return Err(KeyedConfigError::new(
                    format!("overrides[{i}]"),
                    0,
                    "must be at least 1",
                ));
            }
            overrides.insert(key, max);
        }
        let wanted = (self.max_keys / MIN_KEYS_PER_SHARD).clamp(1, MAX_SHARDS);
        let count = 1usize << wanted.ilog2();
        let (share, extra) = (self.max_keys / count, self.max_keys % count);
        let shards = (0..count)
            .map(|i| {
                CachePadded::new(RwLock::new(Shard {
                    keys: HashMap::with_hasher(RandomState::default()),
                    cap: share + usize::from(i < extra),
                }))
            })
            .collect();
        Ok(KeyedConcurrency {
            hasher: RandomState::default(),
            shards,
            mask: count - 1,
            max_concurrent: self.max_concurrent,
            overrides,
            max_keys: self.max_keys,
        })
    }
}

/// How many calls of each key may run at once, with a hard cap on the keys held.
///
/// A rate limits how often a key may call; a concurrency limit how many of its calls may run at
/// the same time (a tenant's slow reports must not take every worker). Each key holds a count of
/// calls in flight; [`KeyedConcurrency::try_acquire`] raises it if it is below the key's maximum
/// and returns a [`KeyedConcurrencyPermit`] that lowers it exactly once, when it is released or
/// dropped (a panic and a cancelled future included). A refusal is at once
/// ([`RejectReason::ConcurrencyLimited`]): a count has no time at which it will be lower, so there
/// is no `retry_after`.
///
/// Keys live in shards, each a read-write lock around a map: a known key takes its shard's read
/// lock and one compare-and-swap on its own count, and a release takes no lock at all. A key with
/// no call in flight is idle: forgetting it loses nothing, so a full shard drops its idle keys to
/// make room. A key with calls in flight is never dropped (its permits count on it): when a shard
/// is full of busy keys, a new key is refused until one of them is idle, so the cap on keys is
/// hard and no key ever runs more than its maximum.
///
/// ```
/// use sluicegate::keyed::KeyedConcurrency;
/// use sluicegate::RejectReason;
///
/// let per_tenant = KeyedConcurrency::<String>::builder(2)
///     .max_keys(10_000)
///     .override_key("gold".to_owned(), 8)
///     .build()?;
/// let first = per_tenant.try_acquire("acme")?;
/// let second = per_tenant.try_acquire("acme")?;
/// let refused = per_tenant.try_acquire("acme").unwrap_err();
/// assert_eq!(refused.reason, RejectReason::ConcurrencyLimited);
/// assert_eq!(per_tenant.in_flight("acme"), 2);
/// drop(first); // released exactly once
/// let third = per_tenant.try_acquire("acme")?;
/// assert_eq!(per_tenant.in_flight("acme"), 2);
/// second.release();
/// drop(third);
/// assert_eq!(per_tenant.in_flight("acme"), 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// `K` is the key (a `String`, an `IpAddr`, a tuple...); calls take any borrowed form of it (`&str`
/// for a `String` key), so a known key costs no allocation. `Send + Sync`; share it in an `Arc`.
pub struct KeyedConcurrency<K> {
    hasher: RandomState,
    shards: Box<[CachePadded<RwLock<Shard<K>>>]>,
    /// Shard count − 1 (a power of two).
    mask: usize,
    max_concurrent: u64,
    overrides: HashMap<K, u64, RandomState>,
    max_keys: usize,
}

impl<K> fmt::Debug for KeyedConcurrency<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedConcurrency")
            .field("shards", &self.shards.len())
            .field("max_concurrent", &self.max_concurrent)
            .field("overrides", &self.overrides.len())
            .field("max_keys", &self.max_keys)
            .finish_non_exhaustive()
    }
}

/// A call of one key in flight: lowers its key's count exactly once, when released or dropped.
#[must_use = "dropping the permit ends the call's turn at once"]
#[derive(Debug)]
pub struct KeyedConcurrencyPermit {
    slot: Arc<Slot>,
}

impl KeyedConcurrencyPermit {
    /// Ends the call's turn (as dropping the permit does).
    pub fn release(self) {}
}

impl Drop for KeyedConcurrencyPermit {
    fn drop(&mut self) {
        self.slot.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl<K: Hash + Eq> KeyedConcurrency<K> {
    /// A builder for a limiter letting each key run `max_concurrent` calls at once (unless
    /// overridden).
    pub fn builder(max_concurrent: u64) -> KeyedConcurrencyBuilder<K> {
        KeyedConcurrencyBuilder {
            max_concurrent,
            max_keys: MAX_KEYS,
            overrides: Vec::new(),
        }
    }

    #[inline]
    fn shard(&self, hash: u64) -> &RwLock<Shard<K>> {
        &self.shards[(hash >> 32) as usize & self.mask]
    }

    /// Admits one more call of `key` if fewer than its maximum run now; otherwise refuses at once
    /// ([`RejectReason::ConcurrencyLimited`]). A new key is added, dropping idle keys to make room;
    /// if its shard holds only keys with calls in flight, the new key is refused the same way.
    pub fn try_acquire<Q>(&self, key: &Q) -> Result<KeyedConcurrencyPermit, Rejection>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let shard = self.shard(hash);
        if let Some(slot) = shard.read().keys.get(key) {
            return Self::enter(slot);
        }
        self.acquire_new(shard, key)
    }

    fn enter(slot: &Arc<Slot>) -> Result<KeyedConcurrencyPermit, Rejection> {
        if slot.enter() {
            Ok(KeyedConcurrencyPermit {
                slot: Arc::clone(slot),
            })
        } else {
            Err(Rejection::new(RejectReason::ConcurrencyLimited))
        }
    }

    /// The path of a key not found under the read lock.
    #[cold]
    fn acquire_new<Q>(
        &self,
        shard: &RwLock<Shard<K>>,
        key: &Q,
    ) -> Result<KeyedConcurrencyPermit, Rejection>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let mut held = shard.write();
        if let Some(slot) = held.keys.get(key) {
            return Self::enter(slot);
        }
        if held.keys.len() >= held.cap {
            // No permit can be taken on a key under the write lock, so an idle key stays idle
            // while it is dropped; a permit out on it keeps its slot alive and counts only there.
            held.keys.retain(|_, slot| !slot.is_idle());
            if held.keys.len() >= held.cap {
                return Err(Rejection::new(RejectReason::ConcurrencyLimited));
            }
        }
        let max = self.max_of(key);
        let slot = Arc::new(Slot {
            in_flight: AtomicU64::new(1),
            max,
        });
        held.keys.insert(key.to_owned(), Arc::clone(&slot));
        Ok(KeyedConcurrencyPermit { slot })
    }

    fn max_of<Q>(&self, key: &Q) -> u64
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.overrides
            .get(key)
            .copied()
            .unwrap_or(self.max_concurrent)
    }

    /// Calls of `key` running now.
    pub fn in_flight<Q>(&self, key: &Q) -> u64
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        self.shard(hash)
            .read()
            .keys
            .get(key)
            .map_or(0, |slot| slot.in_flight.load(Ordering::Acquire))
    }

    /// The most calls of `key` that may run at once.
    pub fn max_concurrent<Q>(&self, key: &Q) -> u64
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.max_of(key)
    }

    /// Drops every idle key (no call in flight); returns how many. No decision changes.
    pub fn evict_idle(&self) -> usize {
        let mut dropped = 0;
        for shard in self.shards.iter() {
            let mut held = shard.write();
            let before = held.keys.len();
            held.keys.retain(|_, slot| !slot.is_idle());
            dropped += before - held.keys.len();
        }
        dropped
    }

    /// Keys held now (idle ones included, until they are dropped).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.read().keys.len()).sum()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most keys ever held at once.
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }
}
