//! The TOML form of a keyed limit, and its validation.
//!
//! ```toml
//! [keyed]
//! key = "ip"            # what a key is: "ip", "connection", "header:<name>", "query:<name>", or a name the application fills in
//! rate = "100/s"        # calls per period: "100/s", "6000/min", "5/15m"
//! burst = 20            # calls at once (default: the rate's count)
//! max_keys = 100000     # the hard cap on keys held
//! idle = "10m"          # a key full again this long is dropped as new keys arrive
//! when_full = "evict"   # or "refuse": what a new key does when no key is full again
//!
//! [keyed.overrides]     # keys with a limit of their own
//! "tenant-gold" = { rate = "1000/s", burst = 200 }
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize, Serializer};

use crate::clock::duration_to_nanos;
use crate::limit::units::duration;
use crate::limit::{GcraConfig, LimitConfigError};

/// Keys held by default: a hundred thousand, a few megabytes (under 64 bytes each beside the key).
pub(crate) const MAX_KEYS: usize = 100_000;
/// A key full again this long is dropped by default: ten minutes, as for keyed breakers.
pub(crate) const IDLE: Duration = Duration::from_secs(600);
/// The default rate: 100 calls per second, easy to scale from.
const RATE: Rate = Rate {
    count: 100,
    per: Duration::from_secs(1),
};

/// A figure of a keyed limit that breaks a rule: the key, its value and the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{key}` = {value}: {rule}")]
pub struct KeyedConfigError {
    /// The key, e.g. `max_keys` or `overrides."tenant-gold".rate`.
    pub key: String,
    /// The offending value.
    pub value: String,
    /// What the rule demands.
    pub rule: &'static str,
}

impl KeyedConfigError {
    pub(crate) fn new(key: impl Into<String>, value: impl ToString, rule: &'static str) -> Self {
        KeyedConfigError {
            key: key.into(),
            value: value.to_string(),
            rule,
        }
    }

    /// A limiter's error, its key under `prefix` (`""` for none).
    pub(crate) fn within(prefix: &str, e: LimitConfigError) -> Self {
        let key = if prefix.is_empty() {
            e.key.to_owned()
        } else {
            format!("{prefix}.{}", e.key)
        };
        KeyedConfigError {
            key,
            value: e.value,
            rule: e.rule,
        }
    }
}

impl From<LimitConfigError> for KeyedConfigError {
    fn from(e: LimitConfigError) -> Self {
        Self::within("", e)
    }
}

/// What a new key does when its shard is full and no key there is full again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WhenFull {
    /// Evict the sampled key closest to full again: the new key is served, and the evicted key,
    /// if it comes back before it would have been full, may be admitted up to its capacity more
    /// than its limit (once per such eviction).
    #[default]
    Evict,
    /// Refuse the new key's calls (`RateLimited`, `retry_after` the time until the sampled key
    /// closest to full is): no key ever exceeds its limit, but an attacker who keeps every key in
    /// debt keeps new keys out.
    Refuse,
}

/// A rate: `count` calls every `per`, written `"100/s"`, `"6000/min"` or `"5/15m"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Calls per period.
    pub count: u64,
    /// The period.
    pub per: Duration,
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.count, humantime::format_duration(self.per))
    }
}

impl FromStr for Rate {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (count, per) = s.split_once('/').ok_or_else(|| {
            format!("{s:?} is not a rate: write calls per period, e.g. \"100/s\" or \"5/15m\"")
        })?;
        let count = count
            .trim()
            .parse::<u64>()
            .map_err(|e| format!("{s:?}: the count {count:?} is not a whole number: {e}"))?;
        let per = per.trim();
        // "s", "min", "hour": one of the unit; "15m", "2s": a duration.
        let spelled = if per.starts_with(|c: char| c.is_ascii_digit()) {
            per.to_owned()
        } else {
            format!("1{per}")
        };
        let per = humantime::parse_duration(&spelled)
            .map_err(|e| format!("{s:?}: the period {per:?} is not a duration: {e}"))?;
        Ok(Rate { count, per })
    }
}

impl Serialize for Rate {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(de::Error::custom)
    }
}

/// What a key is, for the per-route policies that extract it from a request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum KeySource {
    /// The peer's IP address (`"ip"`).
    #[default]
    Ip,
    /// The connection (`"connection"`).
    Connection,
    /// A request header's value (`"header:x-tenant-id"`), the name in lower case.
    Header(String),
    /// A query parameter's value as written in the URL, not decoded (`"query:api_key"`).
    Query(String),
    /// A key the application supplies under this name (e.g. `"tenant"`).
    Named(String),
}

impl fmt::Display for KeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeySource::Ip => f.write_str("ip"),
            KeySource::Connection => f.write_str("connection"),
            KeySource::Header(h) => write!(f, "header:{h}"),
            KeySource::Query(q) => write!(f, "query:{q}"),
            KeySource::Named(n) => f.write_str(n),
        }
    }
}

impl FromStr for KeySource {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let token = |t: &str| {
            !t.is_empty()
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        };
        match s {
            "ip" => Ok(KeySource::Ip),
            "connection" => Ok(KeySource::Connection),
            _ => match (s.strip_prefix("header:"), s.strip_prefix("query:")) {
                (Some(h), _) if token(h) => Ok(KeySource::Header(h.to_ascii_lowercase())),
                (Some(h), _) => Err(format!(
                    "{h:?} is not a header name (letters, digits, `-`, `_`, `.`)"
                )),
                (_, Some(q)) if token(q) => Ok(KeySource::Query(q.to_owned())),
                (_, Some(q)) => Err(format!(
                    "{q:?} is not a query parameter name (letters, digits, `-`, `_`, `.`)"
                )),
                _ if token(s) => Ok(KeySource::Named(s.to_owned())),
                _ => Err(format!(
                    "{s:?} is not a key: write \"ip\", \"connection\", \"header:<name>\", \"query:<name>\" or a name of letters, digits, `-`, `_`, `.`"
                )),
            },
        }
    }
}

impl Serialize for KeySource {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for KeySource {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(de::Error::custom)
    }
}

/// One key's own limit in `[keyed.overrides]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyedLimit {
    /// Calls per period.
    pub rate: Rate,
    /// Calls at once (default: the rate's count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u64>,
}

impl KeyedLimit {
    /// The GCRA figures: `rate` over `per`, `burst` (or the rate's count) at once.
    pub fn gcra(&self) -> GcraConfig {
        GcraConfig {
            rate: self.rate.count,
            per: self.rate.per,
            burst: self.burst.unwrap_or(self.rate.count),
        }
    }
}

/// A keyed limit as written in TOML (see the module docs): a GCRA (the token bucket everybody
/// means by "rate and burst") per key, with a hard cap on the keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KeyedConfig {
    /// What a key is (default `"ip"`).
    pub key: KeySource,
    /// Calls per period for every key (default `"100/s"`).
    pub rate: Rate,
    /// Calls at once (default: the rate's count).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub burst: Option<u64>,
    /// The most keys held at once (default 100 000).
    pub max_keys: usize,
    /// A key full again this long is dropped as new keys arrive (default 10 min).
    #[serde(with = "duration")]
    pub idle: Duration,
    /// What a new key does when no key can be dropped without loss (default `"evict"`).
    pub when_full: WhenFull,
    /// Keys with a limit of their own, by the key as written.
    pub overrides: BTreeMap<String, KeyedLimit>,
}

impl Default for KeyedConfig {
    fn default() -> Self {
        KeyedConfig {
            key: KeySource::Ip,
            rate: RATE,
            burst: None,
            max_keys: MAX_KEYS,
            idle: IDLE,
            when_full: WhenFull::Evict,
            overrides: BTreeMap::new(),
        }
    }
}

impl KeyedConfig {
    /// Parses the body of a `[keyed]` table.
    pub fn from_toml_str(text: &str) -> Result<Self, toml::de::Error> {
        toml::from_str(text)
    }

    /// The GCRA figures every key gets (unless overridden).
    pub fn gcra(&self) -> GcraConfig {
        KeyedLimit {
            rate: self.rate,
            burst: self.burst,
        }
        .gcra()
    }

    /// Checks every figure; the error names the first key that breaks a rule.
    pub fn validate(&self) -> Result<(), KeyedConfigError> {
        validate_limit("", &self.gcra())?;
        check_max_keys(self.max_keys)?;
        for (key, limit) in &self.overrides {
            validate_limit(&format!("overrides.{key:?}"), &limit.gcra())?;
        }
        Ok(())
    }
}

/// GCRA's rules, with the keys of this table (`rate` for `rate` and `per`).
fn validate_limit(prefix: &str, gcra: &GcraConfig) -> Result<(), KeyedConfigError> {
    let key = |k: &str| {
        if prefix.is_empty() {
            k.to_owned()
        } else {
            format!("{prefix}.{k}")
        }
    };
    let rate = Rate {
        count: gcra.rate,
        per: gcra.per,
    };
    let rate_ok = gcra.rate >= 1
        && duration_to_nanos(gcra.per) > 0
        && duration_to_nanos(gcra.per) >= gcra.rate;
    if !rate_ok {
        return Err(KeyedConfigError::new(
            key("rate"),
            format!("{rate:?}", rate = rate.to_string()),
            "must be at least 1 call per period, at most one per nanosecond",
        ));
    }
    if gcra.burst == 0 {
        return Err(KeyedConfigError::new(key("burst"), 0, "must be at least 1"));
    }
    Ok(())
}

pub(crate) fn check_max_keys(max_keys: usize) -> Result<(), KeyedConfigError> {
    if max_keys == 0 || max_keys > u32::MAX as usize {
        return Err(KeyedConfigError::new(
            "max_keys",
            max_keys,
            "must be at least 1 and at most 4294967295",
        ));
    }
    Ok(())
}
