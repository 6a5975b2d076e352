//! `[policies]`: per-route policies in the configuration file, how an override inherits from
//! `default`, and the rules their values must satisfy.
//!
//! The keys of each stage are those of its own config struct ([`BreakerConfig`],
//! [`WindowLimitConfig`] for a rate written as a table, [`WaitConfig`] for the queues), so a key
//! means the same in a policy as where the stage is used alone.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use serde::de::{self, MapAccess, Unexpected, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::breaker::BreakerConfig;
use crate::config::{RedisConfig, Violation};
use crate::keyed::{KeySource, KeyedLimit, WhenFull};
use crate::limit::{
    ConcurrencyConfig, GcraConfig, LimitConfigError, QuotaConfig, TokenBucketConfig, WaitConfig,
    WindowLimitConfig,
};

pub use super::keyed::KeySpec;

/// The name of the policy every request falls back to, and every override inherits from.
pub const DEFAULT_POLICY: &str = "default";

/// `[policies]`: the `default` policy and the overrides, by route pattern.
///
/// A pattern is written as in `[routes]`: an exact URL path or `Interface.method` name, or a
/// prefix ending in `*`. A request gets the policy of the most specific pattern that matches its
/// name (an exact one before any prefix, a longer prefix before a shorter one), or `default`.
/// An override inherits every key it does not set from `default`; a key it sets replaces
/// `default`'s value whole (a `breaker` table written in an override is that route's whole
/// breaker: the keys it leaves out take the breaker's own defaults). `"off"` (or `false`) turns
/// off a stage an override would inherit.
///
/// ```
/// use std::time::Duration;
/// use sluicegate::Config;
///
/// let config = Config::from_toml_str(r#"
///     [policies.default]
///     timeout = "2s"
///     rate = "100/s"
///
///     [policies."/pay/*"]
///     max_concurrent = 8
///     rate = { limit = 20, window = "1s" }
///
///     [policies."/health"]
///     rate = "off"
///     gate = false
/// "#)?;
/// let pay = config.policies.resolve("/pay/*").unwrap();
/// assert_eq!(pay.timeout, Some(Duration::from_secs(2))); // inherited
/// assert_eq!(pay.rate.unwrap().limit, 20); // its own
/// assert_eq!(pay.concurrency.unwrap().max_concurrent, 8);
/// let health = config.policies.resolve("/health").unwrap();
/// assert!(health.rate.is_none() && !health.gate);
/// # Ok::<(), sluicegate::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PoliciesConfig {
    /// Every table of `[policies]`, by its name: `default` or a route pattern.
    pub routes: BTreeMap<String, RoutePolicyConfig>,
}

/// One table of `[policies]`, as written: every key is optional (an override inherits what it
/// leaves out from `default`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RoutePolicyConfig {
    /// A rate limit: `"100/s"`, `"20/100ms"`, `{ limit = 100, window = "1s" }`, or `"off"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<Stage<WindowLimitConfig>>,
    /// The rate limit's algorithm (default `gcra`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub algorithm: Option<RateAlgorithm>,
    /// Calls admitted at once after an idle spell, for `gcra` (its burst) and `token_bucket` (its
    /// capacity); default: the rate's `limit`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub burst: Option<u64>,
    /// Calls running at once through this policy, or `"off"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_concurrent: Option<Stage<u64>>,
    /// The deadline of a request from its arrival (`"2s"`), or `"off"`: bounds its waits and its
    /// call (see [`crate::deadline`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Stage<Duration>>,
    /// Whether the gate admits the request after the policy's stages (default `true`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gate: Option<bool>,
    /// A circuit breaker: a table of [`BreakerConfig`]'s keys (`breaker = {}` for its defaults:
    /// 5 failures in a row, 10 s open), or `"off"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub breaker: Option<Stage<BreakerConfig>>,
    /// How requests wait for the rate's tokens ([`WaitConfig`]'s keys). Not set: they do not
    /// wait, a refusal is at once with the exact `retry_after`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_wait: Option<WaitConfig>,
    /// How requests queue for `max_concurrent` ([`WaitConfig`]'s keys; default up to 500 ms, 64
    /// waiters, first come first served).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency_wait: Option<WaitConfig>,
    /// Where the rate limit keeps its state: `"local"` (this process, the default) or `"redis"`
    /// (shared by every replica through the `[redis]` store, feature `redis`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store: Option<RateStore>,
    /// Makes the rate (and `max_concurrent_per_key`) per key: what a key is, as
    /// [`KeySource`] writes it (`"header:x-tenant"`, `"query:api_key"`, `"ip"`, or a name the
    /// application fills in with [`Request::with_key`](crate::Request::with_key)), or `"off"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<Stage<KeySource>>,
    /// The most keys held at once (default 100 000; see [`crate::keyed`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_keys: Option<usize>,
    /// A key whose rate is full again this long is dropped as new keys arrive (default 10 min).
    #[serde(
        default,
        with = "super::keyed::optional_duration",
        skip_serializing_if = "Option::is_none"
    )]
    pub idle: Option<Duration>,
    /// What a new key does when no key can be dropped without loss (default `"evict"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub when_full: Option<WhenFull>,
    /// Keys with a rate of their own: `{ "gold" = { rate = "1000/s", burst = 200 } }`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overrides: Option<BTreeMap<String, KeyedLimit>>,
    /// Calls of one key running at once, or `"off"` (needs `key`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_concurrent_per_key: Option<Stage<u64>>,
}

/// Where a policy's rate limit keeps its state.
///
/// `redis` makes the rate cluster-wide: every replica built from the same configuration decides
/// on one state per route (and key) in Redis, through the `[redis]` store
/// ([`crate::config::RedisConfig`]), with its fallback while Redis is away. It keeps `gcra`,
/// `token_bucket` and `sliding_window` rates, and needs the feature `redis`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RateStore {
    /// In this process: each replica enforces the whole rate.
    #[default]
    Local,
    /// In Redis: the replicas share the rate (feature `redis`).
    Redis,
}

impl RateStore {
    /// `"local"` or `"redis"`, as written in a policy.
    pub fn as_str(&self) -> &'static str {
        match self {
            RateStore::Local => "local",
            RateStore::Redis => "redis",
        }
    }
}

/// A stage a policy table sets: on with its figures, or off (so that an override can drop what it
/// would inherit from `default`). Written `"off"` or `false` for [`Stage::Off`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage<T> {
    /// No such stage for this route.
    Off,
    /// The stage, with these figures.
    On(T),
}

impl<T> Stage<T> {
    /// The figures, if on.
    pub fn on(&self) -> Option<&T> {
        match self {
            Stage::On(t) => Some(t),
            Stage::Off => None,
        }
    }
}

/// Which algorithm a policy's rate limit uses (see [`crate::limit`] for what each guarantees).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RateAlgorithm {
    /// [`Gcra`](crate::limit::Gcra): `limit` per `window`, `burst` at once; one atomic word.
    #[default]
    Gcra,
    /// [`TokenBucket`](crate::limit::TokenBucket): `limit` tokens every `window`, `burst` banked.
    TokenBucket,
    /// [`SlidingWindow`](crate::limit::SlidingWindow): the weighted sliding-window counter.
    SlidingWindow,
    /// [`FixedWindow`](crate::limit::FixedWindow): `limit` per aligned window.
    FixedWindow,
    /// [`SlidingLog`](crate::limit::SlidingLog): exactly `limit` in any span of one window.
    SlidingLog,
    /// [`Quota`](crate::limit::Quota): `limit` per fixed period of `window` (refusals say
    /// `QuotaExhausted`).
    Quota,
}

impl RateAlgorithm {
    fn takes_burst(self) -> bool {
        matches!(self, RateAlgorithm::Gcra | RateAlgorithm::TokenBucket)
    }
}

/// A policy with `default`'s keys filled in: what a route gets.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct EffectivePolicy {
    /// The breaker, if any.
    pub breaker: Option<BreakerConfig>,
    /// The rate limit, if any.
    pub rate: Option<RateSpec>,
    /// The concurrency limit and its queue, if any.
    pub concurrency: Option<ConcurrencyConfig>,
    /// The deadline from arrival, if any.
    pub timeout: Option<Duration>,
    /// Whether the gate admits the request after the policy's stages.
    pub gate: bool,
    /// The key that makes the rate and `max_concurrent_per_key` per key, if any.
    pub key: Option<KeySpec>,
}

impl EffectivePolicy {
    /// No stage, no timeout, the gate on: `default` when nothing is written.
    pub(crate) fn bare() -> Self {
        EffectivePolicy {
            breaker: None,
            rate: None,
            concurrency: None,
            timeout: None,
            gate: true,
            key: None,
        }
    }
}

/// A policy's rate limit.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct RateSpec {
    /// Calls per window.
    pub limit: u64,
    /// The window.
    pub window: Duration,
    /// The algorithm.
    pub algorithm: RateAlgorithm,
    /// The burst (`gcra`) or capacity (`token_bucket`); `None`: `limit`.
    pub burst: Option<u64>,
    /// How requests wait for tokens; `None`: they do not.
    pub wait: Option<WaitConfig>,
    /// Where the rate's state is kept.
    pub store: RateStore,
}

/// A rate limiter's own config, built from a [`RateSpec`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum LimiterConfig {
    Gcra(GcraConfig),
    TokenBucket(TokenBucketConfig),
    Window(RateAlgorithm, WindowLimitConfig),
    Quota(QuotaConfig),
}

impl RateSpec {
    /// The limiter's config, as the algorithm's own struct.
    pub(crate) fn limiter(&self) -> LimiterConfig {
        let burst = self.burst.unwrap_or(self.limit);
        match self.algorithm {
            RateAlgorithm::Gcra => LimiterConfig::Gcra(GcraConfig {
                rate: self.limit,
                per: self.window,
                burst,
            }),
            RateAlgorithm::TokenBucket => LimiterConfig::TokenBucket(TokenBucketConfig {
                capacity: burst,
                refill: self.limit,
                per: self.window,
            }),
            RateAlgorithm::Quota => LimiterConfig::Quota(QuotaConfig {
                limit: self.limit,
                period: self.window,
                ..QuotaConfig::default()
            }),
            a => LimiterConfig::Window(
                a,
                WindowLimitConfig {
                    limit: self.limit,
                    window: self.window,
                },
            ),
        }
    }

    /// The rate as written in a policy: `"limit/window"`.
    pub fn to_rate_string(&self) -> String {
        rate_string(&WindowLimitConfig {
            limit: self.limit,
            window: self.window,
        })
    }
}

impl PoliciesConfig {
    /// Whether there are no policies at all.
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }

    /// The policy of the table `name` (a pattern, or `default`) with `default`'s keys filled in;
    /// `None` if there is no such table. `default` itself resolves even when it is not written
    /// (to the empty policy: no stage, the gate on).
    pub fn resolve(&self, name: &str) -> Option<EffectivePolicy> {
        let fallback = RoutePolicyConfig::default();
        let default = self.routes.get(DEFAULT_POLICY).unwrap_or(&fallback);
        if name == DEFAULT_POLICY {
            return Some(resolve(default, default));
        }
        self.routes.get(name).map(|own| resolve(own, default))
    }

    /// Every broken rule, keyed `policies.<name>.<key>` (or `redis.<key>` for a figure of the
    /// `[redis]` table that a policy's limit breaks), all at once.
    pub(crate) fn violations(&self, redis: Option<&RedisConfig>) -> Vec<Violation> {
        let fallback = RoutePolicyConfig::default();
        let default = self.routes.get(DEFAULT_POLICY).unwrap_or(&fallback);
        let mut report = Vec::new();
        for (name, own) in &self.routes {
            let is_default = name == DEFAULT_POLICY;
            let at = format!("policies.{}", toml_key(name));
            if !is_default {
                check_pattern(&mut report, &at, name);
            }
            let resolved = resolve(own, default);
            let sets = |set: bool| is_default || set;
            if sets(own.breaker.is_some()) {
                if let Some(b) = &resolved.breaker {
                    if let Err(e) = b.validate() {
                        push(
                            &mut report,
                            &at,
                            &format!("breaker.{}", e.key),
                            e.value,
                            e.rule,
                        );
                    }
                }
            }
            let rate_keys = [
                ("rate", own.rate.is_some()),
                ("algorithm", own.algorithm.is_some()),
                ("burst", own.burst.is_some()),
                ("rate_wait", own.rate_wait.is_some()),
                ("store", own.store.is_some()),
            ];
            super::store::check_feature(&mut report, &at, own);
            if let Some(first) = rate_keys.iter().find(|(_, set)| *set) {
                if resolved.rate.is_none() && !is_default && first.0 != "rate" {
                    push(
                        &mut report,
                        &at,
                        first.0,
                        "(set)",
                        "has no effect without a rate: set `rate` here or in `policies.default`",
                    );
                }
            }
            if sets(rate_keys.iter().any(|(_, set)| *set)) {
                if let Some(rate) = &resolved.rate {
                    check_rate(&mut report, &at, rate, own, is_default);
                    super::store::check_store(&mut report, &at, name, rate, own, redis);
                }
            }
            if sets(own.max_concurrent.is_some() || own.concurrency_wait.is_some()) {
                match &resolved.concurrency {
                    Some(c) => check_concurrency(&mut report, &at, c),
                    None if own.concurrency_wait.is_some() && !is_default => push(
                        &mut report,
                        &at,
                        "concurrency_wait",
                        "(set)",
                        "has no effect without `max_concurrent`",
                    ),
                    None => {}
                }
            }
            if let (true, Some(t)) = (sets(own.timeout.is_some()), resolved.timeout) {
                check_duration(&mut report, &at, "timeout", t);
            }
            super::keyed::check_key(&mut report, &at, &resolved, own, is_default);
        }
        report
    }
}

/// `own` with what it leaves out taken from `default`.
fn resolve(own: &RoutePolicyConfig, default: &RoutePolicyConfig) -> EffectivePolicy {
    fn pick<T: Clone>(own: &Option<T>, default: &Option<T>) -> Option<T> {
        own.as_ref().or(default.as_ref()).cloned()
    }
    fn on<T>(stage: Option<Stage<T>>) -> Option<T> {
        match stage {
            Some(Stage::On(t)) => Some(t),
            _ => None,
        }
    }
    let rate = on(pick(&own.rate, &default.rate)).map(|w: WindowLimitConfig| RateSpec {
        limit: w.limit,
        window: w.window,
        algorithm: pick(&own.algorithm, &default.algorithm).unwrap_or_default(),
        burst: pick(&own.burst, &default.burst),
        wait: pick(&own.rate_wait, &default.rate_wait),
        store: pick(&own.store, &default.store).unwrap_or_default(),
    });
    let concurrency =
        on(pick(&own.max_concurrent, &default.max_concurrent)).map(|n| ConcurrencyConfig {
            max_concurrent: n,
            wait: pick(&own.concurrency_wait, &default.concurrency_wait).unwrap_or_default(),
        });
    let key = on(pick(&own.key, &default.key)).map(|source| KeySpec {
        source,
        max_keys: pick(&own.max_keys, &default.max_keys).unwrap_or(crate::keyed::MAX_KEYS),
        idle: pick(&own.idle, &default.idle).unwrap_or(crate::keyed::IDLE),
        when_full: pick(&own.when_full, &default.when_full).unwrap_or_default(),
        overrides: pick(&own.overrides, &default.overrides).unwrap_or_default(),
        max_concurrent: on(pick(
            &own.max_concurrent_per_key,
            &default.max_concurrent_per_key,
        )),
    });
    EffectivePolicy {
        breaker: on(pick(&own.breaker, &default.breaker)),
        rate,
        concurrency,
        timeout: on(pick(&own.timeout, &default.timeout)),
        gate: pick(&own.gate, &default.gate).unwrap_or(true),
        key,
    }
}

pub(super) fn push(
    report: &mut Vec<Violation>,
    at: &str,
    key: &str,
    value: impl ToString,
    rule: &str,
) {
    report.push(Violation {
        key: format!("{at}.{key}"),
        value: value.to_string(),
        rule: rule.to_owned(),
    });
}

fn check_pattern(report: &mut Vec<Violation>, at: &str, name: &str) {
    let rule = if name.trim().is_empty() {
        "a pattern must not be empty or blank"
    } else if name.find('*').is_some_and(|i| i + 1 != name.len()) {
        "`*` is allowed only as the last character (a prefix pattern)"
    } else {
        return;
    };
    report.push(Violation {
        key: at.to_owned(),
        value: format!("{name:?}"),
        rule: rule.to_owned(),
    });
}

/// A duration: positive, and within 64-bit nanoseconds.
fn check_duration(report: &mut Vec<Violation>, at: &str, key: &str, d: Duration) {
    let value = format!("\"{}\"", humantime::format_duration(d));
    if d.is_zero() {
        push(report, at, key, value, "must be greater than 0");
    } else if d.as_nanos() > u128::from(u64::MAX) {
        push(
            report,
            at,
            key,
            value,
            "must fit in 64-bit nanoseconds (at most about 584 years)",
        );
    }
}

fn check_wait(report: &mut Vec<Violation>, at: &str, key: &str, w: &WaitConfig) {
    let before = report.len();
    check_duration(report, at, &format!("{key}.max_wait"), w.max_wait);
    // A zero wait is allowed when nobody waits anyway.
    if w.max_wait.is_zero() && w.max_waiters == 0 {
        report.truncate(before);
    }
}

fn check_rate(
    report: &mut Vec<Violation>,
    at: &str,
    rate: &RateSpec,
    own: &RoutePolicyConfig,
    is_default: bool,
) {
    let written = format!("\"{}\"", rate.to_rate_string());
    if rate.window.as_nanos() > u128::from(u64::MAX) {
        push(
            report,
            at,
            "rate",
            &written,
            "the window must fit in 64-bit nanoseconds (at most about 584 years)",
        );
        return;
    }
    if let Some(burst) = rate.burst {
        if !rate.algorithm.takes_burst() {
            let key = if own.burst.is_some() || is_default {
                "burst"
            } else {
                "algorithm"
            };
            push(
                report,
                at,
                key,
                burst,
                "`burst` applies to the `gcra` and `token_bucket` algorithms only",
            );
        }
    }
    let checked = match rate.limiter() {
        LimiterConfig::Gcra(c) => c.validate(),
        LimiterConfig::TokenBucket(c) => c.validate(),
        LimiterConfig::Window(_, c) => c.validate(),
        LimiterConfig::Quota(c) => c.validate(),
    };
    if let Err(LimitConfigError { key, value, rule }) = checked {
        let (key, value, what) = match key {
            "burst" | "capacity" if rate.burst.is_some() => ("burst", value, "the burst"),
            "burst" | "capacity" | "rate" | "refill" | "limit" => ("rate", written, "the count"),
            _ => ("rate", written, "the window"),
        };
        // Named where this table breaks it: the key itself, or the key of the rate it sets.
        let set_here = [
            ("rate", own.rate.is_some()),
            ("burst", own.burst.is_some()),
            ("algorithm", own.algorithm.is_some()),
            ("rate_wait", own.rate_wait.is_some()),
        ];
        let key = match set_here.iter().find(|(k, _)| *k == key) {
            Some((_, true)) => key,
            _ if is_default => key,
            _ => set_here
                .iter()
                .find(|(_, set)| *set)
                .map_or(key, |(k, _)| *k),
        };
        let rule = format!("{what} {}", rule.replace("`per`", "the window"));
        push(report, at, key, value, &rule);
    }
    if let Some(w) = &rate.wait {
        check_wait(report, at, "rate_wait", w);
    }
}

fn check_concurrency(report: &mut Vec<Violation>, at: &str, c: &ConcurrencyConfig) {
    if let Err(e) = c.validate() {
        push(report, at, "max_concurrent", e.value, e.rule);
    }
    check_wait(report, at, "concurrency_wait", &c.wait);
}

/// A table name as TOML writes it in a dotted key: bare if it can be, quoted otherwise.
pub(crate) fn toml_key(name: &str) -> String {
    let bare = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        name.to_owned()
    } else {
        format!("{name:?}")
    }
}

/// `"limit/window"`, the rate as a policy writes it.
fn rate_string(w: &WindowLimitConfig) -> String {
    format!("{}/{}", w.limit, humantime::format_duration(w.window))
}

/// Parses `"100/s"`, `"100/1s"`, `"20/250ms"`, `"5000/1h"`.
fn parse_rate(text: &str) -> Result<WindowLimitConfig, String> {
    let explain = |why: &str| {
        format!(
            "{text:?} is not a rate: {why}; write a count per duration, e.g. \"100/s\", \
             \"20/100ms\" or \"5000/1h\" (or `{{ limit = 100, window = \"1s\" }}`, or \"off\")"
        )
    };
    let (count, per) = text
        .split_once('/')
        .ok_or_else(|| explain("there is no `/`"))?;
    let limit = count
        .trim()
        .parse::<u64>()
        .map_err(|_| explain("the count is not a whole number"))?;
    let per = per.trim();
    let window = if per.starts_with(|c: char| c.is_ascii_digit()) {
        crate::config::parse_duration(per)
    } else {
        crate::config::parse_duration(&format!("1{per}"))
    }
    .map_err(|_| explain("the duration after `/` is not one"))?;
    Ok(WindowLimitConfig { limit, window })
}

/// What a [`Stage`] of each kind accepts besides `"off"` and `false`.
trait StageValue: Sized {
    const EXPECTING: &'static str;

    fn from_str<E: de::Error>(v: &str) -> Result<Self, E> {
        Err(E::invalid_value(Unexpected::Str(v), &Self::EXPECTING))
    }
    fn from_u64<E: de::Error>(v: u64) -> Result<Self, E> {
        Err(E::invalid_type(Unexpected::Unsigned(v), &Self::EXPECTING))
    }
    fn from_i64<E: de::Error>(v: i64) -> Result<Self, E> {
        Err(E::invalid_type(Unexpected::Signed(v), &Self::EXPECTING))
    }
    fn from_f64<E: de::Error>(v: f64) -> Result<Self, E> {
        Err(E::invalid_type(Unexpected::Float(v), &Self::EXPECTING))
    }
    fn from_true<E: de::Error>() -> Result<Self, E> {
        Err(E::invalid_type(Unexpected::Bool(true), &Self::EXPECTING))
    }
    fn from_map<'de, A: MapAccess<'de>>(_map: A) -> Result<Self, A::Error> {
        Err(de::Error::invalid_type(Unexpected::Map, &Self::EXPECTING))
    }
}

impl StageValue for BreakerConfig {
    const EXPECTING: &'static str =
        "a table of breaker keys, `true` for the default breaker, or \"off\"";

    fn from_true<E: de::Error>() -> Result<Self, E> {
        Ok(BreakerConfig::default())
    }
    fn from_map<'de, A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
        BreakerConfig::deserialize(de::value::MapAccessDeserializer::new(map))
    }
}

impl StageValue for WindowLimitConfig {
    const EXPECTING: &'static str =
        "a rate such as \"100/s\", a table `{ limit, window }`, or \"off\"";

    fn from_str<E: de::Error>(v: &str) -> Result<Self, E> {
        parse_rate(v).map_err(E::custom)
    }
    fn from_map<'de, A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
        WindowLimitConfig::deserialize(de::value::MapAccessDeserializer::new(map))
    }
}

impl StageValue for KeySource {
    const EXPECTING: &'static str =
        "a key such as \"header:x-tenant\", \"query:api_key\", \"ip\" or a name, or \"off\"";

    fn from_str<E: de::Error>(v: &str) -> Result<Self, E> {
        v.parse().map_err(E::custom)
    }
}

impl StageValue for u64 {
    const EXPECTING: &'static str = "a whole number, or \"off\"";

    fn from_u64<E: de::Error>(v: u64) -> Result<Self, E> {
        Ok(v)
    }
    fn from_i64<E: de::Error>(v: i64) -> Result<Self, E> {
        u64::try_from(v).map_err(|_| E::invalid_value(Unexpected::Signed(v), &Self::EXPECTING))
    }
}

impl StageValue for Duration {
    const EXPECTING: &'static str = "a duration string with a unit such as \"2s\", or \"off\"";

    fn from_str<E: de::Error>(v: &str) -> Result<Self, E> {
        crate::config::parse_duration(v).map_err(E::custom)
    }
    fn from_u64<E: de::Error>(v: u64) -> Result<Self, E> {
        Err(E::custom(crate::config::no_unit_message(v)))
    }
    fn from_i64<E: de::Error>(v: i64) -> Result<Self, E> {
        Err(E::custom(crate::config::no_unit_message(v)))
    }
    fn from_f64<E: de::Error>(v: f64) -> Result<Self, E> {
        Err(E::custom(crate::config::no_unit_message(v)))
    }
}

struct StageVisitor<T>(PhantomData<T>);

impl<'de, T: StageValue> Visitor<'de> for StageVisitor<T> {
    type Value = Stage<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(T::EXPECTING)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Stage<T>, E> {
        if v {
            T::from_true().map(Stage::On)
        } else {
            Ok(Stage::Off)
        }
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Stage<T>, E> {
        if v == "off" {
            Ok(Stage::Off)
        } else {
            T::from_str(v).map(Stage::On)
        }
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Stage<T>, E> {
        T::from_u64(v).map(Stage::On)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Stage<T>, E> {
        T::from_i64(v).map(Stage::On)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Stage<T>, E> {
        T::from_f64(v).map(Stage::On)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Stage<T>, A::Error> {
        T::from_map(map).map(Stage::On)
    }
}

macro_rules! stage_serde {
    ($t:ty, |$s:ident, $v:ident| $on:expr) => {
        impl<'de> Deserialize<'de> for Stage<$t> {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_any(StageVisitor::<$t>(PhantomData))
            }
        }

        impl Serialize for Stage<$t> {
            fn serialize<S: Serializer>(&self, $s: S) -> Result<S::Ok, S::Error> {
                match self {
                    Stage::Off => $s.serialize_str("off"),
                    Stage::On($v) => $on,
                }
            }
        }
    };
}

stage_serde!(BreakerConfig, |s, b| b.serialize(s));
stage_serde!(WindowLimitConfig, |s, w| s.collect_str(&rate_string(w)));
stage_serde!(u64, |s, n| s.serialize_u64(*n));
stage_serde!(KeySource, |s, k| s.collect_str(k));
stage_serde!(Duration, |s, d| s
    .collect_str(&humantime::format_duration(*d)));
