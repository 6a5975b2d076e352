//! `key = ...` in a policy: the route's rate and `max_concurrent_per_key` per key (a tenant, an
//! API key, a client's address), held in the keyed limiters of [`crate::keyed`].
//!
//! The key is the request's own ([`Request::with_key`](crate::Request::with_key)); the tower layer
//! fills it in as the policy's `key` says (`"header:<name>"`, `"query:<name>"`, `"ip"`). A request
//! without one shares the empty key with every other keyless request, so leaving the key out
//! never escapes the limit.
//!
//! A per-key rate runs `gcra`, `token_bucket` or `fixed_window` on one word per key
//! ([`crate::keyed`]'s rules), with `max_keys`, `idle`, `when_full` and per-key `overrides` as
//! [`KeyedConfig`](crate::keyed::KeyedConfig) writes them; with `store = "redis"` it is a key of
//! the Redis-kept limit instead (which also keeps `sliding_window`). Requests do not wait for a
//! per-key token: a refusal is at once, with the exact `retry_after`.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::clock::Clock;
use crate::config::{ConfigError, Violation};

use crate::keyed::{
    check_max_keys, FixedWindowRule, GcraRule, KeySource, KeyedConcurrency, KeyedLimit,
    KeyedLimiter, KeyedRule, TokenBucketRule, WhenFull,
};
use crate::limit::{GcraConfig, TokenBucketConfig, WindowLimitConfig};
use crate::rejection::Rejection;

use super::config::{push, EffectivePolicy, RateAlgorithm, RateStore, RoutePolicyConfig};

/// A policy's key: what it is, and how the keys are held.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct KeySpec {
    /// What a key is.
    pub source: KeySource,
    /// The most keys held at once.
    pub max_keys: usize,
    /// A key whose rate is full again this long is dropped as new keys arrive.
    pub idle: Duration,
    /// What a new key does when no key can be dropped without loss.
    pub when_full: WhenFull,
    /// Keys with a rate of their own.
    pub overrides: BTreeMap<String, KeyedLimit>,
    /// Calls of one key running at once, if limited.
    pub max_concurrent: Option<u64>,
}

/// `Option<Duration>` as a `humantime` string.
pub(super) mod optional_duration {
    use std::time::Duration;

    use serde::{Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(v: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(d) => crate::limit::units::duration::serialize(d, s),
            None => s.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        crate::limit::units::duration::deserialize(d).map(Some)
    }
}

/// The rules of a policy's key, reported under the table that sets the key concerned.
pub(super) fn check_key(
    report: &mut Vec<Violation>,
    at: &str,
    resolved: &EffectivePolicy,
    own: &RoutePolicyConfig,
    is_default: bool,
) {
    let set = [
        ("key", own.key.is_some()),
        (
            "max_concurrent_per_key",
            own.max_concurrent_per_key.is_some(),
        ),
        ("max_keys", own.max_keys.is_some()),
        ("idle", own.idle.is_some()),
        ("when_full", own.when_full.is_some()),
        ("overrides", own.overrides.is_some()),
    ];
    let first_set = set.iter().find(|(_, s)| *s).map(|(k, _)| *k);
    let Some(key) = &resolved.key else {
        if let (false, Some(first)) = (is_default, first_set) {
            if first != "key" {
                push(report, at, first, "(set)", "has no effect without `key`");
            }
        }
        return;
    };
    // Inherited figures are reported by the table that writes them.
    let sets_rate = own.rate.is_some() || own.algorithm.is_some() || own.store.is_some();
    if !is_default && first_set.is_none() && !sets_rate {
        return;
    }
    if resolved.rate.is_none() && key.max_concurrent.is_none() && !is_default && own.key.is_some() {
        push(
            report,
            at,
            "key",
            format!("\"{}\"", key.source),
            "has no effect without a `rate` or `max_concurrent_per_key`",
        );
    }
    if let Err(e) = check_max_keys(key.max_keys) {
        push(report, at, "max_keys", e.value, e.rule);
    }
    if key.max_concurrent == Some(0) {
        push(
            report,
            at,
            "max_concurrent_per_key",
            0,
            "must be at least 1",
        );
    }
    let Some(rate) = &resolved.rate else {
        return;
    };
    let where_ = if own.algorithm.is_some() {
        "algorithm"
    } else {
        "key"
    };
    if rate.wait.is_some() {
        let k = if own.rate_wait.is_some() {
            "rate_wait"
        } else {
            "key"
        };
        push(
            report,
            at,
            k,
            "(set)",
            "requests do not wait for a per-key rate: a refusal is at once, with the exact \
             `retry_after`; remove `rate_wait`",
        );
    }
    check_key_store(report, at, own, key, rate, where_);
}

/// The rules of a per-key rate that depend on where it is kept.
fn check_key_store(
    report: &mut Vec<Violation>,
    at: &str,
    own: &RoutePolicyConfig,
    key: &crate::policy::KeySpec,
    rate: &crate::policy::RateSpec,
    where_: &str,
) {
    match rate.store {
        RateStore::Redis if !key.overrides.is_empty() => push(
            report,
            at,
            "overrides",
            "(set)",
            "per-key overrides are kept in this process only (`store = \"local\"`)",
        ),
        RateStore::Redis => {
            let local_only = [
                ("max_keys", own.max_keys.is_some()),
                ("idle", own.idle.is_some()),
                ("when_full", own.when_full.is_some()),
            ];
            if let Some((k, _)) = local_only.iter().find(|(_, set)| *set) {
                push(
                    report,
                    at,
                    k,
                    "(set)",
                    "has no effect on a rate kept in Redis (`store = \"redis\"`): Redis keeps \
                     every key with a TTL, and this node's state per key is bounded by \
                     `redis.max_local_keys`",
                );
            }
        }
        RateStore::Local => {
            if !matches!(
                rate.algorithm,
                RateAlgorithm::Gcra | RateAlgorithm::TokenBucket | RateAlgorithm::FixedWindow
            ) {
                push(
                    report,
                    at,
                    where_,
                    "(per key)",
                    "a per-key rate runs `gcra`, `token_bucket` or `fixed_window` (and \
                     `sliding_window` with `store = \"redis\"`)",
                );
                return;
            }
            let defaults = KeyedLimit {
                rate: crate::keyed::Rate {
                    count: rate.limit,
                    per: rate.window,
                },
                burst: rate.burst,
            };
            for (name, limit) in std::iter::once((None, &defaults))
                .chain(key.overrides.iter().map(|(k, l)| (Some(k), l)))
            {
                if let Err(rule) =
                    KeyedRate::<crate::clock::MonotonicClock>::rule_ok(rate.algorithm, limit)
                {
                    if let Some(name) = name {
                        let k = format!("overrides.{}", super::config::toml_key(name));
                        push(report, at, &k, limit.rate, &rule);
                    }
                }
            }
        }
    }
}

/// A route's rate per key, in this process: one of the keyed rules.
#[derive(Debug)]
pub(crate) enum KeyedRate<C: Clock> {
    Gcra(KeyedLimiter<String, GcraRule, C>),
    TokenBucket(KeyedLimiter<String, TokenBucketRule, C>),
    FixedWindow(KeyedLimiter<String, FixedWindowRule, C>),
}

fn gcra(limit: &KeyedLimit) -> GcraConfig {
    limit.gcra()
}

fn bucket(limit: &KeyedLimit) -> TokenBucketConfig {
    TokenBucketConfig {
        capacity: limit.burst.unwrap_or(limit.rate.count),
        refill: limit.rate.count,
        per: limit.rate.per,
    }
}

fn window(limit: &KeyedLimit) -> Result<WindowLimitConfig, String> {
    match limit.burst {
        Some(_) => Err("`burst` applies to the `gcra` and `token_bucket` algorithms only".into()),
        None => Ok(WindowLimitConfig {
            limit: limit.rate.count,
            window: limit.rate.per,
        }),
    }
}

impl<C: Clock> KeyedRate<C> {
    /// Whether `limit` makes a valid rule of `algorithm`; the rule it breaks otherwise.
    fn rule_ok(algorithm: RateAlgorithm, limit: &KeyedLimit) -> Result<(), String> {
        let checked = match algorithm {
            RateAlgorithm::Gcra => GcraRule::new(&gcra(limit)).map(drop),
            RateAlgorithm::TokenBucket => TokenBucketRule::new(&bucket(limit)).map(drop),
            _ => FixedWindowRule::new(&window(limit)?).map(drop),
        };
        checked.map_err(|e| e.to_string())
    }

    /// The per-key rate of `policy` (which has a key and a local rate).
    pub(crate) fn build(policy: &EffectivePolicy, key: &KeySpec, clock: C) -> Result<Self, String> {
        let Some(rate) = &policy.rate else {
            return Err("no rate".to_owned());
        };
        let defaults = KeyedLimit {
            rate: crate::keyed::Rate {
                count: rate.limit,
                per: rate.window,
            },
            burst: rate.burst,
        };
        macro_rules! keyed {
            ($rule:ty, $config:expr, $variant:ident) => {{
                let mut builder = KeyedLimiter::<String, $rule>::builder($config(&defaults)?)
                    .max_keys(key.max_keys)
                    .idle(key.idle)
                    .when_full(key.when_full);
                for (name, limit) in &key.overrides {
                    builder = builder.override_key(name.clone(), $config(limit)?);
                }
                builder
                    .build(clock)
                    .map(KeyedRate::$variant)
                    .map_err(|e| e.to_string())
            }};
        }
        let ok_gcra = |l: &KeyedLimit| Ok::<_, String>(gcra(l));
        let ok_bucket = |l: &KeyedLimit| Ok::<_, String>(bucket(l));
        match rate.algorithm {
            RateAlgorithm::Gcra => keyed!(GcraRule, ok_gcra, Gcra),
            RateAlgorithm::TokenBucket => keyed!(TokenBucketRule, ok_bucket, TokenBucket),
            RateAlgorithm::FixedWindow => keyed!(FixedWindowRule, window, FixedWindow),
            other => Err(format!("{other:?} is not offered per key")),
        }
    }

    /// Admits one call of `key` now, or refuses with the exact `retry_after`.
    pub(crate) fn try_acquire(&self, key: &str) -> Result<(), Rejection> {
        match self {
            KeyedRate::Gcra(l) => l.try_acquire(key, 1),
            KeyedRate::TokenBucket(l) => l.try_acquire(key, 1),
            KeyedRate::FixedWindow(l) => l.try_acquire(key, 1),
        }
    }

    /// Keys held now.
    pub(crate) fn keys(&self) -> usize {
        match self {
            KeyedRate::Gcra(l) => l.len(),
            KeyedRate::TokenBucket(l) => l.len(),
            KeyedRate::FixedWindow(l) => l.len(),
        }
    }
}

/// The per-key concurrency limit of `key`, if it has one.
pub(crate) fn key_concurrency(
    key: &KeySpec,
    fail: impl Fn(&str, &dyn std::fmt::Display) -> ConfigError,
) -> Result<Option<KeyedConcurrency<String>>, ConfigError> {
    let Some(max) = key.max_concurrent else {
        return Ok(None);
    };
    KeyedConcurrency::builder(max)
        .max_keys(key.max_keys)
        .build()
        .map(Some)
        .map_err(|e| fail("max_concurrent_per_key", &e))
}
