//! `store = "redis"`: a policy's rate kept in Redis, shared by every replica.
//!
//! A route's rate maps to a [`RedisLimitConfig`](crate::store::redis::RedisLimitConfig): its
//! `name` is `policy:<pattern>`, its figures the policy's `rate`, `algorithm` and `burst`
//! (`gcra` → GCRA with the same rate and burst, `token_bucket` → a bucket of `burst` tokens
//! refilled `limit` per `window`, `sliding_window` → the sliding-window counter), and what
//! happens while Redis is away, the fleet's size and leases come from the `[redis]` table. Every
//! replica built from the same configuration therefore decides on the same Redis key.
//!
//! The asynchronous forms of the chain ([`Policies::acquire`](super::Policies::acquire),
//! [`Policies::call`](super::Policies::call), `Gate::call`, the tower layer) ask Redis, bounded
//! by the store's `deadline` and the request's own deadline. The blocking and non-waiting forms
//! (`acquire_blocking`, `try_acquire`, `Gate::call_blocking`) never wait on the network: they
//! spend tokens this node already leased, honour a cached refusal, and otherwise decide as
//! `on_store_failure` says (by default this node's share of the limit, enforced locally), exactly
//! as while Redis is away. Blocking a thread on a Redis round trip could stall the very runtime
//! that drives the connection.

use crate::config::Violation;

use super::config::{push, RateAlgorithm, RateSpec, RateStore, RoutePolicyConfig};
use crate::config::RedisConfig;

/// The Redis store the routes of one set of policies share, and the `[redis]` table in force.
#[derive(Debug, Clone, Default)]
pub(crate) struct StoreEnv {
    #[cfg(feature = "redis")]
    pub(crate) config: Option<RedisConfig>,
    /// Made when a route keeps its rate in Redis; kept across reloads while the connection's
    /// figures are unchanged.
    #[cfg(feature = "redis")]
    pub(crate) store: Option<crate::store::redis::RedisStore>,
}

impl StoreEnv {
    /// The environment for `config`: the store of `old` if its connection's figures are the same,
    /// a new one if `needed` (some route keeps its rate in Redis), none otherwise. Also says
    /// whether the routes kept in Redis may keep their limiters (same store, same shared figures).
    #[cfg_attr(not(feature = "redis"), allow(unused_variables))]
    pub(crate) fn prepare(
        config: Option<&RedisConfig>,
        needed: bool,
        old: Option<&StoreEnv>,
    ) -> Result<(StoreEnv, bool), crate::config::ConfigError> {
        #[cfg(feature = "redis")]
        {
            let connection =
                |c: Option<&RedisConfig>| c.map(|c| c.store.clone()).unwrap_or_default();
            let limits = |c: Option<&RedisConfig>| c.map(|c| c.limits.clone()).unwrap_or_default();
            let reusable = old
                .and_then(|o| o.store.as_ref().map(|s| (o, s)))
                .filter(|(o, _)| connection(o.config.as_ref()) == connection(config));
            let (store, kept) = match (needed, reusable) {
                (false, _) => (None, false),
                (true, Some((o, store))) => (
                    Some(store.clone()),
                    limits(o.config.as_ref()) == limits(config),
                ),
                (true, None) => {
                    let store = crate::store::redis::RedisStore::new(connection(config))
                        .map_err(redis_error)?;
                    (Some(store), false)
                }
            };
            Ok((
                StoreEnv {
                    config: config.cloned(),
                    store,
                },
                kept,
            ))
        }
        #[cfg(not(feature = "redis"))]
        Ok((StoreEnv {}, false))
    }
}

/// A store's error as a configuration error under `redis.`.
#[cfg(feature = "redis")]
pub(crate) fn redis_error(
    error: crate::store::redis::RedisConfigError,
) -> crate::config::ConfigError {
    use crate::store::redis::RedisConfigError;
    let (key, value, rule) = match error {
        RedisConfigError::Invalid { key, value, rule } => (key.to_owned(), value, rule.to_owned()),
        RedisConfigError::Url { url, reason } => ("url".to_owned(), url, reason),
        RedisConfigError::TlsCaFile { path, reason } => ("tls_ca_file".to_owned(), path, reason),
        RedisConfigError::Breaker(e) => ("breaker".to_owned(), String::new(), e.to_string()),
        other => (String::new(), String::new(), other.to_string()),
    };
    let key = if key.is_empty() {
        "redis".to_owned()
    } else {
        format!("redis.{key}")
    };
    crate::config::ConfigError::Invalid(vec![Violation { key, value, rule }])
}

/// Without the feature: a table that sets `store = "redis"` names the feature it needs.
#[cfg(not(feature = "redis"))]
pub(super) fn check_feature(report: &mut Vec<Violation>, at: &str, own: &RoutePolicyConfig) {
    if own.store == Some(RateStore::Redis) {
        push(
            report,
            at,
            "store",
            "\"redis\"",
            "needs the `redis` feature of sluicegate (features = [\"redis\"] in Cargo.toml); \
             this build keeps rates in the process only (`store = \"local\"`)",
        );
    }
}

/// With the feature, `store = "redis"` is checked with the rate it keeps ([`check_store`]).
#[cfg(feature = "redis")]
pub(super) fn check_feature(_: &mut Vec<Violation>, _: &str, _: &RoutePolicyConfig) {}

/// The algorithms the Redis store keeps.
pub(crate) fn redis_keeps(algorithm: RateAlgorithm) -> bool {
    matches!(
        algorithm,
        RateAlgorithm::Gcra | RateAlgorithm::TokenBucket | RateAlgorithm::SlidingWindow
    )
}

/// The rules of a rate kept in Redis: an algorithm the store keeps, no waiting for tokens, and
/// figures the store's scripts and the `[redis]` table's fleet accept.
#[cfg_attr(not(feature = "redis"), allow(unused_variables))]
pub(super) fn check_store(
    report: &mut Vec<Violation>,
    at: &str,
    name: &str,
    rate: &RateSpec,
    own: &RoutePolicyConfig,
    redis: Option<&RedisConfig>,
) {
    if rate.store != RateStore::Redis || cfg!(not(feature = "redis")) {
        return;
    }
    let key = if own.algorithm.is_some() {
        "algorithm"
    } else {
        "store"
    };
    if !redis_keeps(rate.algorithm) {
        let algorithm = format!("\"{}\"", algorithm_name(rate.algorithm));
        push(
            report,
            at,
            key,
            algorithm,
            "`store = \"redis\"` keeps the `gcra`, `token_bucket` and `sliding_window` \
             algorithms only",
        );
        return;
    }
    if rate.wait.is_some() {
        let key = if own.rate_wait.is_some() {
            "rate_wait"
        } else {
            "store"
        };
        push(
            report,
            at,
            key,
            "(set)",
            "requests do not wait for a rate kept in Redis (`store = \"redis\"`): a refusal \
             is at once, with the exact `retry_after`; remove `rate_wait`",
        );
    }
    #[cfg(feature = "redis")]
    redis::check(report, at, name, rate, own, redis);
}

fn algorithm_name(algorithm: RateAlgorithm) -> &'static str {
    match algorithm {
        RateAlgorithm::Gcra => "gcra",
        RateAlgorithm::TokenBucket => "token_bucket",
        RateAlgorithm::SlidingWindow => "sliding_window",
        RateAlgorithm::FixedWindow => "fixed_window",
        RateAlgorithm::SlidingLog => "sliding_log",
        RateAlgorithm::Quota => "quota",
    }
}

#[cfg(feature = "redis")]
pub(crate) use self::redis::RedisStage;

#[cfg(feature = "redis")]
mod redis {
    use super::*;
    use crate::policy::config::LimiterConfig;
    use crate::store::redis::{
        LimitKind, RedisConfigError, RedisLimitConfig, RedisLimiter, RedisStore,
    };

    /// The Redis-backed limit of the route `name` with `rate`, the `[redis]` table's shared
    /// figures filled in; `None` for an algorithm the store does not keep.
    pub(crate) fn limit_config(
        name: &str,
        rate: &RateSpec,
        redis: Option<&RedisConfig>,
    ) -> Option<RedisLimitConfig> {
        let limit = match rate.limiter() {
            LimiterConfig::Gcra(c) => LimitKind::Gcra(c),
            LimiterConfig::TokenBucket(c) => LimitKind::TokenBucket(c),
            LimiterConfig::Window(RateAlgorithm::SlidingWindow, c) => LimitKind::SlidingWindow(c),
            _ => return None,
        };
        let shared = redis.map(|r| r.limits.clone()).unwrap_or_default();
        Some(RedisLimitConfig {
            name: format!("policy:{name}"),
            limit,
            ..shared
        })
    }

    /// The figures of the route's limit against the store's rules: those of the `[redis]` table
    /// reported there (once), those of the rate under the route.
    pub(super) fn check(
        report: &mut Vec<Violation>,
        at: &str,
        name: &str,
        rate: &RateSpec,
        own: &RoutePolicyConfig,
        redis: Option<&RedisConfig>,
    ) {
        let Some(config) = limit_config(name, rate, redis) else {
            return;
        };
        let Err(error) = config.validate() else {
            return;
        };
        let (key, value, rule) = match error {
            RedisConfigError::Invalid { key, value, rule } => (key, value, rule.to_owned()),
            RedisConfigError::Limit(e) => (e.key, e.value, e.rule.to_owned()),
            other => ("rate", String::new(), other.to_string()),
        };
        if matches!(key, "nodes" | "lease" | "lease_ttl" | "max_local_keys") {
            let full = format!("redis.{key}");
            if !report.iter().any(|v| v.key == full) {
                let rule = format!("{rule} (for the rate of `{at}`)");
                report.push(Violation {
                    key: full,
                    value,
                    rule,
                });
            }
            return;
        }
        let route_key = match key {
            "burst" | "capacity" if own.burst.is_some() => "burst",
            _ if own.rate.is_some() => "rate",
            _ => "store",
        };
        let written = format!("\"{}\"", rate.to_rate_string());
        let value = if route_key == "burst" { value } else { written };
        push(
            report,
            at,
            route_key,
            value,
            &format!("for the Redis store, `{key}` {rule}"),
        );
    }

    /// A route's rate kept in Redis.
    #[derive(Debug)]
    pub(crate) struct RedisStage {
        pub(crate) limiter: RedisLimiter,
    }

    impl RedisStage {
        /// The limit of route `name` on `store`.
        pub(crate) fn new(
            store: &RedisStore,
            name: &str,
            rate: &RateSpec,
            redis: Option<&RedisConfig>,
        ) -> Result<Self, RedisConfigError> {
            let config = limit_config(name, rate, redis).ok_or(RedisConfigError::Invalid {
                key: "algorithm",
                value: algorithm_name(rate.algorithm).to_owned(),
                rule: "the Redis store keeps gcra, token_bucket and sliding_window only",
            })?;
            Ok(RedisStage {
                limiter: RedisLimiter::new(store, config)?,
            })
        }
    }
}

#[cfg(all(test, not(feature = "redis")))]
mod tests {
    use crate::Config;

    #[test]
    fn store_redis_without_the_feature_names_the_route_the_key_and_the_feature() {
        let err = Config::from_toml_str(
            r#"
            [policies."/api/*"]
            rate = "100/s"
            store = "redis"
            "#,
        )
        .unwrap_err();
        let violation = &err.violations()[0];
        assert_eq!(violation.key, r#"policies."/api/*".store"#);
        assert!(violation.rule.contains("`redis` feature"), "{violation}");
        // `local` is fine, and a `[redis]` table alone is only a warning.
        let config = Config::from_toml_str(
            "[redis]\nurl = \"redis://x\"\n[policies.\"/api/*\"]\nrate = \"1/s\"\nstore = \"local\"",
        )
        .expect("valid without the feature");
        assert_eq!(config.warnings()[0].key, "redis");
    }
}
