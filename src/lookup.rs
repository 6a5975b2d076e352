//! Urgency from the user's own source, and the cache in front of it.
//!
//! Some services keep the list of urgent endpoints in a database (the original design's `DBCall`). Asking the
//! database on every request would put a query on the request path, exactly when the service is
//! drowning; so answers are cached, bounded in number of entries and in age (1000 entries and 5 minutes
//! by default, as in the original design). The cache is sharded: a request locks one shard out of many, never a lock
//! every request shares. Time comes from the gate's clock, so expiry is exact under a manual clock.
//!
//! A lookup that fails counts as urgent: when in doubt, serve. Failures are cached only briefly (at
//! most a second) so that a failing database is not asked again by every request, yet recovers fast.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;

use parking_lot::Mutex;

use crate::clock::Nanos;
use crate::request::Urgency;

/// The error a lookup may return; any error type will do.
pub type LookupError = Box<dyn std::error::Error + Send + Sync>;

/// The future [`UrgencyLookup::lookup`] returns.
pub type LookupFuture<'a> = Pin<Box<dyn Future<Output = Result<Urgency, LookupError>> + Send + 'a>>;

/// A user-supplied source of urgency, consulted (through the cache) for requests that carry no
/// explicit urgency and match no route.
///
/// `name` is the request's name: its URL path or `Interface.method`.
///
/// ```
/// use sluicegate::lookup::{LookupFuture, UrgencyLookup};
/// use sluicegate::request::Urgency;
///
/// struct FromDatabase;
/// impl UrgencyLookup for FromDatabase {
///     fn lookup<'a>(&'a self, name: &'a str) -> LookupFuture<'a> {
///         Box::pin(async move {
///             // e.g. SELECT urgent FROM routes WHERE name = $1
///             Ok(if name.starts_with("/pay") { Urgency::Urgent } else { Urgency::NonUrgent })
///         })
///     }
/// }
/// ```
pub trait UrgencyLookup: Send + Sync + 'static {
    /// Looks the urgency of `name` up.
    fn lookup<'a>(&'a self, name: &'a str) -> LookupFuture<'a>;

    /// The same from a plain thread ([`crate::Gate::call_blocking`]). The default drives
    /// [`UrgencyLookup::lookup`] to completion on the calling thread; override it when the future
    /// needs a runtime (a tokio-based database client, say).
    fn lookup_blocking(&self, name: &str) -> Result<Urgency, LookupError> {
        futures_executor::block_on(self.lookup(name))
    }
}

/// How long a failed lookup is remembered as "urgent" before the source is asked again.
const FAILURE_TTL_NANOS: Nanos = 1_000_000_000;

const SHARDS: usize = 16;

/// A bounded, expiring cache of lookup answers.
#[derive(Debug)]
pub struct LookupCache {
    shards: Box<[Mutex<Shard>]>,
    per_shard: usize,
    ttl: Nanos,
}

#[derive(Debug, Default)]
struct Shard {
    entries: HashMap<String, Entry>,
    /// Insertion order, for evicting the oldest entry when the shard is full.
    order: VecDeque<String>,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    urgency: Urgency,
    expires: Nanos,
}

impl LookupCache {
    /// A cache holding at most `capacity` entries (at least one per shard is kept, so the real bound is
    /// `max(capacity, 16)` rounded up to a multiple of 16), each for at most `ttl_nanos`.
    pub fn new(capacity: usize, ttl_nanos: Nanos) -> Self {
        let per_shard = capacity.div_ceil(SHARDS).max(1);
        LookupCache {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            per_shard,
            ttl: ttl_nanos,
        }
    }

    /// The most entries the cache will ever hold.
    pub fn capacity(&self) -> usize {
        self.per_shard * SHARDS
    }

    /// How many entries the cache holds now (expired ones included until they are evicted).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().entries.len()).sum()
    }

    /// Whether the cache holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn shard(&self, name: &str) -> &Mutex<Shard> {
        // FNV-1a: cheap, and good enough to spread names over 16 shards.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in name.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        &self.shards[(h as usize) % SHARDS]
    }

    /// The cached urgency of `name`, if present and not older than the ttl at `now`.
    pub fn get(&self, name: &str, now: Nanos) -> Option<Urgency> {
        let shard = self.shard(name).lock();
        shard
            .entries
            .get(name)
            .filter(|e| now < e.expires)
            .map(|e| e.urgency)
    }

    /// Records a lookup's answer for `name` at `now`. A failed lookup is recorded as urgent, for at
    /// most a second.
    pub fn insert(&self, name: &str, answer: &Result<Urgency, LookupError>, now: Nanos) {
        let (urgency, ttl) = match answer {
            Ok(u) => (*u, self.ttl),
            Err(_) => (Urgency::Urgent, self.ttl.min(FAILURE_TTL_NANOS)),
        };
        let entry = Entry {
            urgency,
            expires: now.saturating_add(ttl),
        };
        let mut shard = self.shard(name).lock();
        if let Some(existing) = shard.entries.get_mut(name) {
            *existing = entry;
            return;
        }
        while shard.entries.len() >= self.per_shard {
            // First in, first out: the oldest entry is the nearest to expiry anyway.
            let Some(oldest) = shard.order.pop_front() else {
                break;
            };
            shard.entries.remove(&oldest);
        }
        shard.order.push_back(name.to_owned());
        shard.entries.insert(name.to_owned(), entry);
    }
}
