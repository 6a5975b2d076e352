//! [`RedisLimiter`]: one limit kept in Redis, with leases, a negative cache and a fallback.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::clock::{duration_to_nanos, Clock, MonotonicClock, Nanos};
use crate::rejection::{RejectReason, Rejection};

use super::config::{LimitKind, Micros, OnStoreFailure, RedisConfigError, RedisLimitConfig};
use super::local::{LocalKeys, LocalLimiter};
use super::script::Verdict;
use super::store::{RedisStore, StoreFailure};

/// How a limiter's decisions were taken since it was built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LimiterStats {
    /// Admitted by Redis (each of these was a round trip, alone or in a pipeline).
    pub remote_admitted: u64,
    /// Refused by Redis.
    pub remote_refused: u64,
    /// Admitted from a lease, with no round trip.
    pub lease_admitted: u64,
    /// Refused from the negative cache, with no round trip.
    pub cached_refusals: u64,
    /// Admitted by `on_store_failure` while Redis could not decide.
    pub fallback_admitted: u64,
    /// Refused by `on_store_failure` while Redis could not decide.
    pub fallback_refused: u64,
}

impl LimiterStats {
    /// Every decision counted.
    pub fn decisions(&self) -> u64 {
        self.remote_admitted
            + self.remote_refused
            + self.lease_admitted
            + self.cached_refusals
            + self.fallback_admitted
            + self.fallback_refused
    }
}

#[derive(Debug, Default)]
struct Counters {
    remote_admitted: AtomicU64,
    remote_refused: AtomicU64,
    lease_admitted: AtomicU64,
    cached_refusals: AtomicU64,
    fallback_admitted: AtomicU64,
    fallback_refused: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

#[derive(Debug)]
struct Inner {
    store: RedisStore,
    config: RedisLimitConfig,
    micros: Micros,
    share: LimitKind,
    clock: MonotonicClock,
    keys: LocalKeys,
    counters: Counters,
}

/// One limit kept in Redis, decided per key for the whole cluster (cheap to clone).
///
/// `try_acquire(key, n)` admits `n` for `key`, or refuses with the exact `retry_after`, with the
/// same semantics as the local limiter of the same kind. Refused keys stay refused locally until
/// their `retry_after` (no round trip); with `lease = k` a node takes up to `k` tokens per round
/// trip and spends them locally. While Redis cannot decide, `on_store_failure` does.
#[derive(Debug, Clone)]
pub struct RedisLimiter {
    inner: Arc<Inner>,
}

/// What the local state said before asking Redis.
enum First {
    Decided(Result<(), Rejection>),
    /// Ask Redis for at least `n`, at most `want`; `refill`: this call takes the key's lease.
    Remote {
        want: u64,
        refill: bool,
    },
}

/// Clears a key's `refilling` flag if the refill ends without doing so (an error, a cancelled
/// future).
struct RefillGuard<'a> {
    keys: &'a LocalKeys,
    key: &'a str,
    armed: bool,
}

impl Drop for RefillGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.keys.with(self.key, |state| state.refilling = false);
        }
    }
}

impl RedisLimiter {
    /// A limit on `store` with `config`'s figures; checks them, and does not connect.
    pub fn new(store: &RedisStore, config: RedisLimitConfig) -> Result<Self, RedisConfigError> {
        let micros = config.validate()?;
        Ok(RedisLimiter {
            inner: Arc::new(Inner {
                store: store.clone(),
                share: config.limit.share(config.nodes),
                keys: LocalKeys::new(config.max_local_keys),
                config,
                micros,
                clock: MonotonicClock::new(),
                counters: Counters::default(),
            }),
        })
    }

    /// The store the limit is kept on.
    pub fn store(&self) -> &RedisStore {
        &self.inner.store
    }

    /// The limit's figures.
    pub fn config(&self) -> &RedisLimitConfig {
        &self.inner.config
    }

    /// The largest `n` ever admitted at once.
    pub fn capacity(&self) -> u64 {
        self.inner.config.limit.capacity()
    }

    /// The key Redis holds for `key`: `{key_prefix}{name}:{key}`.
    pub fn redis_key(&self, key: &str) -> String {
        self.inner.store.key(&self.inner.config.name, key)
    }

    /// One decision in Redis for `key`, taking at least `n` and at most `want`, bypassing the
    /// local state (leases, negative cache) and the fallback: for diagnostics, tests and
    /// benchmarks. The [`Verdict`] carries Redis' time of the decision.
    pub async fn decide_in_redis(
        &self,
        key: &str,
        n: u64,
        want: u64,
    ) -> Result<Verdict, StoreFailure> {
        let full = self.redis_key(key);
        self.inner
            .store
            .decide(&self.inner.micros, &full, n, want)
            .await
    }

    /// The Lua source of this limit's script and its arguments after the key for a decision
    /// taking at least `n`, at most `want` (`EVALSHA sha 1 key args…`): to inspect the script or
    /// run it by hand.
    pub fn script(&self, n: u64, want: u64) -> (String, Vec<u64>) {
        super::script::source_and_args(&self.inner.micros, n, want)
    }

    /// How many keys have local state (leases, cached refusals, fallback limiters).
    pub fn local_keys(&self) -> usize {
        self.inner.keys.len()
    }

    /// How decisions were taken since the limiter was built.
    pub fn stats(&self) -> LimiterStats {
        let c = &self.inner.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        LimiterStats {
            remote_admitted: get(&c.remote_admitted),
            remote_refused: get(&c.remote_refused),
            lease_admitted: get(&c.lease_admitted),
            cached_refusals: get(&c.cached_refusals),
            fallback_admitted: get(&c.fallback_admitted),
            fallback_refused: get(&c.fallback_refused),
        }
    }

    /// Admits `n` for `key`, or refuses: [`RejectReason::RateLimited`] with the exact time until
    /// `n` would be admitted, [`RejectReason::ExceedsCapacity`] for `n` above the capacity, or,
    /// while Redis cannot decide, whatever `on_store_failure` says. Never waits longer than the
    /// store's deadline.
    pub async fn try_acquire(&self, key: &str, n: u64) -> Result<(), Rejection> {
        let now = self.inner.clock.now();
        let (want, refill) = match self.first(key, n, now) {
            First::Decided(result) => return result,
            First::Remote { want, refill } => (want, refill),
        };
        let mut guard = RefillGuard {
            keys: &self.inner.keys,
            key,
            armed: refill,
        };
        let full = self.redis_key(key);
        let verdict = self
            .inner
            .store
            .decide(&self.inner.micros, &full, n, want)
            .await;
        guard.armed = false;
        self.finish(key, n, now, refill, verdict)
    }

    /// Decides without a round trip to Redis: tokens this node has leased, a refusal it has
    /// cached, and otherwise what `on_store_failure` says, as while Redis is away. For callers
    /// that must not wait on the network (a blocking thread, a decision that may not wait).
    pub fn try_acquire_local(&self, key: &str, n: u64) -> Result<(), Rejection> {
        let now = self.inner.clock.now();
        match self.first(key, n, now) {
            First::Decided(result) => result,
            First::Remote { refill, .. } => {
                if refill {
                    self.inner.keys.with(key, |state| state.refilling = false);
                }
                self.fallback(key, n, now)
            }
        }
    }

    /// Decides every `(key, n)` as [`try_acquire`](Self::try_acquire) would, in one round trip
    /// to Redis for all those that need one (a pipeline). Each decision is independent: a
    /// refusal of one does not give back what the others took.
    pub async fn try_acquire_many(&self, requests: &[(&str, u64)]) -> Vec<Result<(), Rejection>> {
        let checks: Vec<(&RedisLimiter, &str, u64)> =
            requests.iter().map(|&(key, n)| (self, key, n)).collect();
        try_acquire_each(&checks).await
    }

    /// The local part of a decision: trivial requests, the negative cache, the lease.
    fn first(&self, key: &str, n: u64, now: Nanos) -> First {
        let inner = &*self.inner;
        if n == 0 {
            return First::Decided(Ok(()));
        }
        if n > self.capacity() {
            return First::Decided(Err(Rejection::new(RejectReason::ExceedsCapacity)));
        }
        let lease = inner.config.lease;
        let leasing = lease >= 2;
        let cache = inner.config.negative_cache;
        let local = |state: &mut super::local::KeyState| {
            if cache && now < state.denied_until && n >= state.denied_n {
                bump(&inner.counters.cached_refusals);
                return First::Decided(Err(rate_limited(state.denied_until - now)));
            }
            if state.lease >= n && now < state.lease_until {
                state.lease -= n;
                bump(&inner.counters.lease_admitted);
                return First::Decided(Ok(()));
            }
            if leasing && !state.refilling {
                state.refilling = true;
                return First::Remote {
                    want: lease.max(n),
                    refill: true,
                };
            }
            First::Remote {
                want: n,
                refill: false,
            }
        };
        if leasing {
            inner.keys.with_entry(key, now, local)
        } else {
            inner.keys.with(key, local).unwrap_or(First::Remote {
                want: n,
                refill: false,
            })
        }
    }

    /// Applies Redis' verdict (or its failure) to the local state and answers.
    fn finish(
        &self,
        key: &str,
        n: u64,
        now: Nanos,
        refill: bool,
        verdict: Result<Verdict, StoreFailure>,
    ) -> Result<(), Rejection> {
        let inner = &*self.inner;
        let verdict = match verdict {
            Ok(verdict) => verdict,
            Err(_) => {
                if refill {
                    inner.keys.with(key, |state| state.refilling = false);
                }
                return self.fallback(key, n, now);
            }
        };
        if verdict.granted >= n {
            bump(&inner.counters.remote_admitted);
            if refill {
                let ttl = duration_to_nanos(inner.config.lease_ttl);
                let valid = match verdict.valid_micros {
                    0 => ttl,
                    us => ttl.min(us.saturating_mul(1000)),
                };
                inner.keys.with_entry(key, now, |state| {
                    let kept = if now < state.lease_until {
                        state.lease
                    } else {
                        0
                    };
                    state.lease = (kept + (verdict.granted - n)).min(inner.config.lease);
                    state.lease_until = now.saturating_add(valid);
                    state.refilling = false;
                    state.denied_until = 0;
                });
            }
            return Ok(());
        }
        bump(&inner.counters.remote_refused);
        let wait = verdict.retry_after_micros.saturating_mul(1000).max(1);
        if inner.config.negative_cache || refill {
            inner.keys.with_entry(key, now, |state| {
                state.refilling = false;
                if inner.config.negative_cache {
                    let active = now < state.denied_until;
                    state.denied_n = if active { state.denied_n.min(n) } else { n };
                    state.denied_until = state.denied_until.max(now.saturating_add(wait));
                }
            });
        }
        Err(rate_limited(wait))
    }

    /// The decision `on_store_failure` takes while Redis cannot.
    fn fallback(&self, key: &str, n: u64, now: Nanos) -> Result<(), Rejection> {
        let inner = &*self.inner;
        let result = match inner.config.on_store_failure {
            OnStoreFailure::Allow => Ok(()),
            OnStoreFailure::Deny => Err(Rejection {
                reason: RejectReason::CircuitOpen,
                retry_after: inner.store.breaker().retry_after(),
            }),
            OnStoreFailure::Local => inner.keys.with_entry(key, now, |state| {
                if state.fallback.is_none() {
                    state.fallback = LocalLimiter::new(&inner.share, inner.clock);
                }
                match &state.fallback {
                    Some(limiter) => limiter.try_acquire(n).map_err(|r| match r.reason {
                        // Above this node's share, but not above the limit: refused while
                        // Redis is away, not forever.
                        RejectReason::ExceedsCapacity => Rejection::new(RejectReason::RateLimited),
                        _ => r,
                    }),
                    None => Err(Rejection::new(RejectReason::RateLimited)),
                }
            }),
        };
        bump(if result.is_ok() {
            &inner.counters.fallback_admitted
        } else {
            &inner.counters.fallback_refused
        });
        result
    }
}

fn rate_limited(wait: Nanos) -> Rejection {
    Rejection {
        reason: RejectReason::RateLimited,
        retry_after: Some(Duration::from_nanos(wait)),
    }
}

/// Decides every `(limiter, key, n)` as [`RedisLimiter::try_acquire`] would, with one round
/// trip per Redis store for all the checks that need one (a pipeline), e.g. a request checked
/// against a per-user and a per-tenant limit. Each decision is independent: a refusal of one
/// does not give back what the others took. The answers are in the order of `checks`.
pub async fn try_acquire_each(checks: &[(&RedisLimiter, &str, u64)]) -> Vec<Result<(), Rejection>> {
    let mut answers: Vec<Option<Result<(), Rejection>>> = vec![None; checks.len()];
    // (index, now, refill) of the checks that need Redis, grouped by store below.
    let mut remote: Vec<(usize, Nanos, u64, bool)> = Vec::new();
    for (i, &(limiter, key, n)) in checks.iter().enumerate() {
        let now = limiter.inner.clock.now();
        match limiter.first(key, n, now) {
            First::Decided(result) => answers[i] = Some(result),
            First::Remote { want, refill } => remote.push((i, now, want, refill)),
        }
    }
    let mut guards: Vec<RefillGuard<'_>> = remote
        .iter()
        .map(|&(i, _, _, refill)| RefillGuard {
            keys: &checks[i].0.inner.keys,
            key: checks[i].1,
            armed: refill,
        })
        .collect();
    let mut done = vec![false; remote.len()];
    for first in 0..remote.len() {
        if done[first] {
            continue;
        }
        let store = &checks[remote[first].0].0.inner.store;
        let group: Vec<usize> = (first..remote.len())
            .filter(|&j| !done[j] && checks[remote[j].0].0.inner.store.same(store))
            .collect();
        let calls: Vec<(Micros, String, u64, u64)> = group
            .iter()
            .map(|&j| {
                let (i, _, want, _) = remote[j];
                let (limiter, key, n) = checks[i];
                (limiter.inner.micros, limiter.redis_key(key), n, want)
            })
            .collect();
        let verdicts = store.decide_many(&calls).await;
        for (slot, &j) in group.iter().enumerate() {
            done[j] = true;
            guards[j].armed = false;
            let (i, now, _, refill) = remote[j];
            let (limiter, key, n) = checks[i];
            let verdict = match &verdicts {
                Ok(all) => all
                    .get(slot)
                    .copied()
                    .ok_or_else(|| StoreFailure::BadReply("too few replies".to_owned())),
                Err(e) => Err(e.clone()),
            };
            answers[i] = Some(limiter.finish(key, n, now, refill, verdict));
        }
    }
    answers
        .into_iter()
        .map(|a| a.unwrap_or(Err(Rejection::new(RejectReason::RateLimited))))
        .collect()
}
