//! The Redis store's figures (the connection, shared by every limit on it) and a Redis-backed
//! limit's figures, with their defaults and validation.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::breaker::{BreakerConfig, BreakerConfigError, ConsecutiveConfig, PolicyConfig};
use crate::clock::duration_to_nanos;
use crate::limit::units::duration;
use crate::limit::{GcraConfig, LimitConfigError, TokenBucketConfig, WindowLimitConfig};

/// Where Redis is by default: the local server on its standard port.
pub(crate) const URL: &str = "redis://127.0.0.1:6379";
/// Longest a decision waits for Redis: 20 ms, forty loopback round trips (p99 ≈ 0.45 ms) and
/// still small next to a request's own budget; a Redis slower than this is treated as down.
pub(crate) const DEADLINE: Duration = Duration::from_millis(20);
/// Longest one connection attempt may take: 1 s, far above a LAN's or a TLS handshake's time.
/// Attempts run in the background; a request never waits longer than `deadline` for one.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// First pause between reconnection attempts: 50 ms, so a restarted Redis is found quickly.
pub(crate) const RECONNECT_MIN_DELAY: Duration = Duration::from_millis(50);
/// Longest pause between reconnection attempts: 1 s, so Redis is back in use within about a
/// second of coming back, while a dead one costs one connection attempt a second.
pub(crate) const RECONNECT_MAX_DELAY: Duration = Duration::from_secs(1);
/// Prefix of every key the store writes, so its keys are easy to find and never collide.
pub(crate) const KEY_PREFIX: &str = "sluicegate:";
/// Failed calls in a row that open the store's breaker: 3, so a dead Redis costs at most three
/// deadlines before requests stop paying for it.
pub(crate) const BREAKER_FAILURES: u32 = 3;
/// How long the store's breaker stays open: 1 s, about one reconnection period.
pub(crate) const BREAKER_OPEN_FOR: Duration = Duration::from_secs(1);
/// How long leased tokens may be spent: 1 s; unspent tokens are then dropped (never spent late).
pub(crate) const LEASE_TTL: Duration = Duration::from_secs(1);
/// Keys whose local state (leases, cached denials, fallback limiters) is kept: 10 000, a few MB.
pub(crate) const MAX_LOCAL_KEYS: usize = 10_000;
/// The scripts compute in Lua numbers (doubles): every product they form stays below 2^53 when
/// the figures below hold. A window of `burst · T` (GCRA) or `capacity · per` (token bucket) at
/// most 2^50 µs (35 years) keeps a time plus a window below 2^53.
pub(crate) const MAX_SPAN_MICROS: u64 = 1 << 50;
/// The sliding window's exact comparison multiplies two counts: a limit of at most 2^26 keeps
/// the product below 2^53.
pub(crate) const MAX_WINDOW_LIMIT: u64 = 1 << 26;

/// Where the Redis store connects and how long it waits: shared by every limit on one Redis.
///
/// In TOML (e.g. a `[redis]` table):
///
/// ```
/// use std::time::Duration;
/// use sluicegate::store::redis::RedisStoreConfig;
///
/// let config: RedisStoreConfig = toml::from_str(r#"
///     url = "redis://limiter:secret@10.0.0.5:6379/2"
///     deadline = "15ms"
/// "#)?;
/// assert_eq!(config.deadline, Duration::from_millis(15));
/// assert!(!format!("{config:?}").contains("secret")); // the password never reaches a log
/// # Ok::<(), toml::de::Error>(())
/// ```
///
/// A Redis behind TLS whose certificate a private CA signed (the usual case inside a VPC or a
/// cluster) names that CA's certificate:
///
/// ```toml
/// url = "rediss://redis.internal:6380"
/// tls_ca_file = "/etc/ssl/private-ca.pem"
/// ```
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisStoreConfig {
    /// `redis://[user][:password@]host[:port][/db]` or `rediss://…` (TLS, feature `redis-tls`;
    /// the server's certificate is always checked, see `tls_ca_file`). A password and an ACL
    /// user are taken from the URL (default `redis://127.0.0.1:6379`).
    pub url: String,
    /// The longest a decision waits for Redis, connection included (default 20 ms). A call that
    /// runs out of time is never retried (it may have been applied) and counts as a failure.
    #[serde(with = "duration")]
    pub deadline: Duration,
    /// The longest one connection attempt may take, in the background (default 1 s).
    #[serde(with = "duration")]
    pub connect_timeout: Duration,
    /// First pause between reconnection attempts; it doubles up to `reconnect_max_delay`
    /// (default 50 ms).
    #[serde(with = "duration")]
    pub reconnect_min_delay: Duration,
    /// Longest pause between reconnection attempts (default 1 s).
    #[serde(with = "duration")]
    pub reconnect_max_delay: Duration,
    /// Prefix of every key written (default `"sluicegate:"`).
    pub key_prefix: String,
    /// The breaker around the Redis client (default: open after 3 failed calls in a row, for
    /// 1 s, then 3 probes). While it is open no request waits for Redis.
    #[serde(default = "store_breaker")]
    pub breaker: BreakerConfig,
    /// A PEM file of the certificate authorities that sign the Redis server's certificate, for a
    /// `rediss://` URL: when set, these are trusted instead of the system's roots (a private
    /// CA, as a Redis inside a VPC or a cluster usually has). The file is read and checked when
    /// the configuration is checked and when the store is built: it must hold at least one
    /// PEM certificate (`-----BEGIN CERTIFICATE-----`), and the URL must be `rediss://`
    /// (default: unset, the system's roots).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_ca_file: Option<PathBuf>,
}

/// The store breaker's defaults: 3 failures in a row, open 1 s.
fn store_breaker() -> BreakerConfig {
    BreakerConfig {
        policies: vec![PolicyConfig::ConsecutiveFailures(ConsecutiveConfig {
            failures: BREAKER_FAILURES,
        })],
        open_for: BREAKER_OPEN_FOR,
        ..BreakerConfig::default()
    }
}

impl Default for RedisStoreConfig {
    fn default() -> Self {
        RedisStoreConfig {
            url: URL.to_owned(),
            deadline: DEADLINE,
            connect_timeout: CONNECT_TIMEOUT,
            reconnect_min_delay: RECONNECT_MIN_DELAY,
            reconnect_max_delay: RECONNECT_MAX_DELAY,
            key_prefix: KEY_PREFIX.to_owned(),
            breaker: store_breaker(),
            tls_ca_file: None,
        }
    }
}

impl fmt::Debug for RedisStoreConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStoreConfig")
            .field("url", &redact(&self.url))
            .field("deadline", &self.deadline)
            .field("connect_timeout", &self.connect_timeout)
            .field("reconnect_min_delay", &self.reconnect_min_delay)
            .field("reconnect_max_delay", &self.reconnect_max_delay)
            .field("key_prefix", &self.key_prefix)
            .field("breaker", &self.breaker)
            .field("tls_ca_file", &self.tls_ca_file)
            .finish()
    }
}

/// The URL with its password replaced, for logs and errors.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
            let hidden = if userinfo.contains(':') { ":***" } else { "" };
            format!("{scheme}://{user}{hidden}@{host}")
        }
        None => url.to_owned(),
    }
}

impl RedisStoreConfig {
    /// Checks the figures, the URL's scheme and `tls_ca_file`; returns the certificates of
    /// `tls_ca_file` (PEM) when it is set.
    pub(crate) fn validate(&self) -> Result<Option<Vec<u8>>, RedisConfigError> {
        let positive = |key, d: Duration| {
            check(
                !d.is_zero(),
                key,
                humantime::format_duration(d),
                "must be longer than 0",
            )
        };
        positive("deadline", self.deadline)?;
        positive("connect_timeout", self.connect_timeout)?;
        positive("reconnect_min_delay", self.reconnect_min_delay)?;
        check(
            self.reconnect_max_delay >= self.reconnect_min_delay,
            "reconnect_max_delay",
            humantime::format_duration(self.reconnect_max_delay),
            "must be at least `reconnect_min_delay`",
        )?;
        let scheme = self.url.split_once("://").map(|(scheme, _)| scheme);
        check(
            matches!(scheme, Some("redis" | "rediss")),
            "url",
            redact(&self.url),
            "must start with `redis://` or `rediss://`",
        )?;
        check(
            scheme != Some("rediss") || cfg!(feature = "redis-tls"),
            "url",
            redact(&self.url),
            "`rediss://` (TLS) needs the `redis-tls` feature",
        )?;
        check(
            self.url.split_once('#').map(|(_, fragment)| fragment) != Some("insecure"),
            "url",
            redact(&self.url),
            "`#insecure` (TLS without checking the server's certificate) is not supported: name \
             the CA that signs the server's certificate in `tls_ca_file`",
        )?;
        // The breaker's own figures are checked when it is built.
        let Some(path) = &self.tls_ca_file else {
            return Ok(None);
        };
        check(
            scheme == Some("rediss"),
            "tls_ca_file",
            path.display(),
            "is for a `rediss://` URL (TLS) only",
        )?;
        read_ca_file(path)
            .map(Some)
            .map_err(|reason| RedisConfigError::TlsCaFile {
                path: path.display().to_string(),
                reason,
            })
    }
}

/// The PEM of a CA file: readable, and every certificate in it usable as a trust anchor (at
/// least one).
#[cfg(feature = "redis-tls")]
fn read_ca_file(path: &Path) -> Result<Vec<u8>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;

    let pem = std::fs::read(path).map_err(|e| format!("cannot be read: {e}"))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| format!("is not valid PEM: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("holds a certificate that is not a usable CA certificate: {e}"))?;
    }
    if roots.is_empty() {
        return Err("holds no PEM certificate (a `-----BEGIN CERTIFICATE-----` block)".to_owned());
    }
    Ok(pem)
}

/// Without TLS there is no `rediss://` URL, so no CA file gets this far.
#[cfg(not(feature = "redis-tls"))]
fn read_ca_file(_path: &Path) -> Result<Vec<u8>, String> {
    Err("`rediss://` (TLS) needs the `redis-tls` feature".to_owned())
}

/// What a limit does while Redis cannot decide (its breaker is open, or a call failed or ran
/// out of time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnStoreFailure {
    /// Enforce this node's share of the limit locally (`1 / nodes` of it), with a local limiter
    /// of the same kind: the whole service stays near the limit while Redis is away.
    #[default]
    Local,
    /// Admit everything: the limit protects something that can take the extra load.
    Allow,
    /// Refuse everything ([`RejectReason::CircuitOpen`](crate::RejectReason::CircuitOpen)): the
    /// limit must never be exceeded, even at the price of an outage.
    Deny,
}

/// The algorithm and figures of a limit kept in Redis: the same as the local limiters'.
///
/// In TOML it is a table with an `algorithm` key:
///
/// ```
/// use sluicegate::store::redis::LimitKind;
///
/// let kind: LimitKind = toml::from_str(r#"
///     algorithm = "gcra"
///     rate = 100
///     per = "1s"
///     burst = 20
/// "#)?;
/// assert!(matches!(kind, LimitKind::Gcra(c) if c.burst == 20));
/// # Ok::<(), toml::de::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "algorithm", rename_all = "snake_case")]
pub enum LimitKind {
    /// GCRA: `rate` calls every `per`, `burst` at once (as [`Gcra`](crate::limit::Gcra)).
    Gcra(GcraConfig),
    /// A token bucket (as [`TokenBucket`](crate::limit::TokenBucket)).
    TokenBucket(TokenBucketConfig),
    /// A sliding-window counter (as [`SlidingWindow`](crate::limit::SlidingWindow)).
    SlidingWindow(WindowLimitConfig),
}

impl Default for LimitKind {
    fn default() -> Self {
        LimitKind::Gcra(GcraConfig::default())
    }
}

impl LimitKind {
    /// The largest `n` ever admitted at once.
    pub fn capacity(&self) -> u64 {
        match self {
            LimitKind::Gcra(c) => c.burst,
            LimitKind::TokenBucket(c) => c.capacity,
            LimitKind::SlidingWindow(c) => c.limit,
        }
    }

    /// The same limit cut to one node's share of `nodes`: rates divided exactly (by stretching
    /// the period), bursts and window limits divided rounding down, but at least 1.
    pub fn share(&self, nodes: u32) -> LimitKind {
        let n = u64::from(nodes.max(1));
        let stretch = |d: Duration| d.saturating_mul(nodes.max(1));
        match *self {
            LimitKind::Gcra(c) => LimitKind::Gcra(GcraConfig {
                rate: c.rate,
                per: stretch(c.per),
                burst: (c.burst / n).max(1),
            }),
            LimitKind::TokenBucket(c) => LimitKind::TokenBucket(TokenBucketConfig {
                capacity: (c.capacity / n).max(1),
                refill: c.refill,
                per: stretch(c.per),
            }),
            LimitKind::SlidingWindow(c) => LimitKind::SlidingWindow(WindowLimitConfig {
                limit: (c.limit / n).max(1),
                window: c.window,
            }),
        }
    }

    /// The figures in whole microseconds, as the scripts take them (rounded up: never faster).
    pub(crate) fn micros(&self) -> Result<Micros, RedisConfigError> {
        let us = |d: Duration| duration_to_nanos(d).div_ceil(1000);
        match *self {
            LimitKind::Gcra(c) => {
                c.validate()?;
                let interval = duration_to_nanos(c.per).div_ceil(c.rate).div_ceil(1000);
                check(
                    c.burst.saturating_mul(interval) <= MAX_SPAN_MICROS,
                    "burst",
                    c.burst,
                    "times `per / rate` must be at most 2^50 µs (35 years) for the Redis store",
                )?;
                Ok(Micros::Gcra {
                    interval,
                    burst: c.burst,
                })
            }
            LimitKind::TokenBucket(c) => {
                c.validate()?;
                let per = us(c.per);
                check(
                    c.capacity.saturating_mul(per) <= MAX_SPAN_MICROS,
                    "capacity",
                    c.capacity,
                    "times `per` must be at most 2^50 µs (35 years) for the Redis store",
                )?;
                Ok(Micros::TokenBucket {
                    capacity: c.capacity,
                    refill: c.refill,
                    per,
                })
            }
            LimitKind::SlidingWindow(c) => {
                c.validate()?;
                check(
                    c.limit <= MAX_WINDOW_LIMIT,
                    "limit",
                    c.limit,
                    "must be at most 2^26 (67108864) for the Redis store",
                )?;
                let window = us(c.window);
                check(
                    window <= MAX_SPAN_MICROS,
                    "window",
                    humantime::format_duration(c.window),
                    "must be at most 2^50 µs (35 years) for the Redis store",
                )?;
                Ok(Micros::SlidingWindow {
                    limit: c.limit,
                    window,
                })
            }
        }
    }
}

/// A limit's figures in whole microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Micros {
    Gcra {
        interval: u64,
        burst: u64,
    },
    TokenBucket {
        capacity: u64,
        refill: u64,
        per: u64,
    },
    SlidingWindow {
        limit: u64,
        window: u64,
    },
}

/// One limit kept in Redis: its name (part of every key), algorithm, and what happens while
/// Redis cannot decide.
///
/// The figures a per-route policy with `store = "redis"` maps to:
///
/// ```
/// use sluicegate::store::redis::{LimitKind, OnStoreFailure, RedisLimitConfig};
///
/// let config: RedisLimitConfig = toml::from_str(r#"
///     name = "api"
///     limit = { algorithm = "token_bucket", capacity = 50, refill = 100, per = "1s" }
///     on_store_failure = "local"   # or "allow", "deny"
///     nodes = 4                    # this node enforces 1/4 of the limit while Redis is away
///     lease = 10                   # take 10 tokens per round trip (over-admission <= nodes * lease)
/// "#)?;
/// assert_eq!(config.on_store_failure, OnStoreFailure::Local);
/// assert!(config.negative_cache); // a missing key keeps its default
/// # Ok::<(), toml::de::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisLimitConfig {
    /// The limit's name: keys are `{key_prefix}{name}:{key}` (default `"limit"`).
    pub name: String,
    /// The algorithm and its figures (default GCRA, 100 per second, burst 100).
    pub limit: LimitKind,
    /// What happens while Redis cannot decide (default `local`).
    pub on_store_failure: OnStoreFailure,
    /// How many nodes share the limit; under `local`, each enforces `1 / nodes` of it
    /// (default 1).
    pub nodes: u32,
    /// Tokens taken per round trip and spent locally; 0 or 1: none (default 0). All nodes
    /// together admit at most `nodes · lease` more than the limit.
    pub lease: u64,
    /// How long leased tokens may be spent (default 1 s; a sliding window's lease also ends
    /// with its window).
    #[serde(with = "duration")]
    pub lease_ttl: Duration,
    /// Whether a refused key stays refused locally until its `retry_after` (default true).
    pub negative_cache: bool,
    /// Keys whose local state is kept, at most (default 10 000).
    pub max_local_keys: usize,
}

impl Default for RedisLimitConfig {
    fn default() -> Self {
        RedisLimitConfig {
            name: "limit".to_owned(),
            limit: LimitKind::default(),
            on_store_failure: OnStoreFailure::Local,
            nodes: 1,
            lease: 0,
            lease_ttl: LEASE_TTL,
            negative_cache: true,
            max_local_keys: MAX_LOCAL_KEYS,
        }
    }
}

impl RedisLimitConfig {
    pub(crate) fn validate(&self) -> Result<Micros, RedisConfigError> {
        let micros = self.limit.micros()?;
        check(self.nodes >= 1, "nodes", self.nodes, "must be at least 1")?;
        check(
            self.lease <= self.limit.capacity(),
            "lease",
            self.lease,
            "must be at most the limit's capacity (burst, capacity or limit)",
        )?;
        check(
            self.lease < 2 || !self.lease_ttl.is_zero(),
            "lease_ttl",
            humantime::format_duration(self.lease_ttl),
            "must be longer than 0 when leases are on",
        )?;
        check(
            self.max_local_keys >= 1,
            "max_local_keys",
            self.max_local_keys,
            "must be at least 1",
        )?;
        // The local share must be a valid limiter too.
        self.limit.share(self.nodes).micros()?;
        Ok(micros)
    }
}

/// A figure of the Redis store or of a Redis-backed limit that breaks a rule.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RedisConfigError {
    /// A figure of the store or of the limit: the key, its value and the rule.
    #[error("`{key}` = {value}: {rule}")]
    Invalid {
        /// The key, e.g. `deadline`.
        key: &'static str,
        /// The offending value (a URL without its password).
        value: String,
        /// What the rule demands.
        rule: &'static str,
    },
    /// The limit's figures.
    #[error("limit: {0}")]
    Limit(#[from] LimitConfigError),
    /// The breaker's figures.
    #[error("breaker: {0}")]
    Breaker(#[from] BreakerConfigError),
    /// The URL could not be parsed.
    #[error("`url` = {url}: {reason}")]
    Url {
        /// The URL, without its password.
        url: String,
        /// What the Redis client said.
        reason: String,
    },
    /// `tls_ca_file` cannot be read, or holds no usable CA certificate.
    #[error("`tls_ca_file` = {path}: {reason}")]
    TlsCaFile {
        /// The file, as configured.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
}

pub(crate) fn check(
    ok: bool,
    key: &'static str,
    value: impl ToString,
    rule: &'static str,
) -> Result<(), RedisConfigError> {
    if ok {
        Ok(())
    } else {
        Err(RedisConfigError::Invalid {
            key,
            value: value.to_string(),
            rule,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_hides_the_password_only() {
        assert_eq!(redact("redis://u:p@h:1/2"), "redis://u:***@h:1/2");
        assert_eq!(redact("redis://:p@h"), "redis://:***@h");
        assert_eq!(redact("redis://h:1"), "redis://h:1");
        assert_eq!(redact("rediss://u@h"), "rediss://u@h");
    }

    #[test]
    fn share_divides_rates_exactly_and_bursts_down() {
        let kind = LimitKind::Gcra(GcraConfig {
            rate: 10,
            per: Duration::from_secs(1),
            burst: 5,
        });
        assert_eq!(
            kind.share(4),
            LimitKind::Gcra(GcraConfig {
                rate: 10,
                per: Duration::from_secs(4),
                burst: 1
            })
        );
    }
}
