//! The limiters' figures, as config structs with `Default`, and their validation.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::units::duration;
use crate::clock::duration_to_nanos;

/// Tokens, calls or permits per period by default: 100 per second, a figure that is easy to
/// scale from and harmless if left unchanged.
pub(crate) const LIMIT: u64 = 100;
/// The default period of the rate limiters: one second, the unit people state rates in.
pub(crate) const PER: Duration = Duration::from_secs(1);
/// The default quota period: a day.
pub(crate) const QUOTA_PERIOD: Duration = Duration::from_secs(86_400);
/// Share of a quota at which the overdraw alert fires: 80 %, early enough to act on.
pub(crate) const ALERT_AT: f64 = 0.8;
/// Calls at once by default: 64, the original design's example for an expensive operation.
pub(crate) const MAX_CONCURRENT: u64 = 64;
/// Longest wait by default: half a second, half of a typical one-second client timeout.
pub(crate) const MAX_WAIT: Duration = Duration::from_millis(500);
/// Waiters by default: 64, enough to smooth a burst without queueing a flood.
pub(crate) const MAX_WAITERS: usize = 64;

/// A figure that breaks a rule: the key, its value and the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{key}` = {value}: {rule}")]
pub struct LimitConfigError {
    /// The key, e.g. `per` or `wait.max_waiters`.
    pub key: &'static str,
    /// The offending value.
    pub value: String,
    /// What the rule demands.
    pub rule: &'static str,
}

pub(crate) fn check(
    ok: bool,
    key: &'static str,
    value: impl ToString,
    rule: &'static str,
) -> Result<(), LimitConfigError> {
    if ok {
        Ok(())
    } else {
        Err(LimitConfigError {
            key,
            value: value.to_string(),
            rule,
        })
    }
}

fn positive_duration(key: &'static str, d: Duration) -> Result<(), LimitConfigError> {
    check(
        duration_to_nanos(d) > 0,
        key,
        humantime::format_duration(d),
        "must be longer than 0",
    )
}

/// A [`TokenBucket`](super::TokenBucket): `refill` tokens every `per`, up to `capacity` banked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TokenBucketConfig {
    /// The most tokens the bucket holds, and so the largest `n` it can ever grant (default 100).
    pub capacity: u64,
    /// Tokens added every `per` (default 100).
    pub refill: u64,
    /// The refill period (default 1 s).
    #[serde(with = "duration")]
    pub per: Duration,
}

impl Default for TokenBucketConfig {
    fn default() -> Self {
        TokenBucketConfig {
            capacity: LIMIT,
            refill: LIMIT,
            per: PER,
        }
    }
}

impl TokenBucketConfig {
    pub(crate) fn validate(&self) -> Result<(), LimitConfigError> {
        check(
            self.capacity >= 1,
            "capacity",
            self.capacity,
            "must be at least 1",
        )?;
        check(
            self.refill >= 1,
            "refill",
            self.refill,
            "must be at least 1",
        )?;
        positive_duration("per", self.per)
    }
}

/// A [`Gcra`](super::Gcra): `rate` calls every `per`, `burst` of them at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GcraConfig {
    /// Calls per `per` (default 100).
    pub rate: u64,
    /// The period of the rate (default 1 s).
    #[serde(with = "duration")]
    pub per: Duration,
    /// Calls admitted at once after an idle spell, and the largest `n` (default 100).
    pub burst: u64,
}

impl Default for GcraConfig {
    fn default() -> Self {
        GcraConfig {
            rate: LIMIT,
            per: PER,
            burst: LIMIT,
        }
    }
}

impl GcraConfig {
    pub(crate) fn validate(&self) -> Result<(), LimitConfigError> {
        check(self.rate >= 1, "rate", self.rate, "must be at least 1")?;
        positive_duration("per", self.per)?;
        check(
            duration_to_nanos(self.per) >= self.rate,
            "rate",
            self.rate,
            "must be at most one call per nanosecond of `per`",
        )?;
        check(self.burst >= 1, "burst", self.burst, "must be at least 1")
    }
}

/// A window limiter ([`FixedWindow`](super::FixedWindow), [`SlidingWindow`](super::SlidingWindow),
/// [`SlidingLog`](super::SlidingLog)): at most `limit` calls per `window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WindowLimitConfig {
    /// Calls per window, and the largest `n` (default 100).
    pub limit: u64,
    /// The window's length (default 1 s).
    #[serde(with = "duration")]
    pub window: Duration,
}

impl Default for WindowLimitConfig {
    fn default() -> Self {
        WindowLimitConfig {
            limit: LIMIT,
            window: PER,
        }
    }
}

impl WindowLimitConfig {
    pub(crate) fn validate(&self) -> Result<(), LimitConfigError> {
        check(self.limit >= 1, "limit", self.limit, "must be at least 1")?;
        positive_duration("window", self.window)
    }
}

/// A [`Quota`](super::Quota): `limit` calls per fixed `period`, with an alert at `alert_at`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QuotaConfig {
    /// Calls per period (default 100).
    pub limit: u64,
    /// The period's length: a day is `"1day"`, a month of 30 days `"30days"` (default 1 day).
    #[serde(with = "duration")]
    pub period: Duration,
    /// Share of the quota whose use fires the overdraw alert, in `(0, 1]` (default 0.8).
    pub alert_at: f64,
}

impl Default for QuotaConfig {
    fn default() -> Self {
        QuotaConfig {
            limit: LIMIT,
            period: QUOTA_PERIOD,
            alert_at: ALERT_AT,
        }
    }
}

impl QuotaConfig {
    pub(crate) fn validate(&self) -> Result<(), LimitConfigError> {
        check(self.limit >= 1, "limit", self.limit, "must be at least 1")?;
        positive_duration("period", self.period)?;
        check(
            self.alert_at > 0.0 && self.alert_at <= 1.0,
            "alert_at",
            self.alert_at,
            "must be a share greater than 0 and at most 1",
        )
    }
}

/// Which waiter is served first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitOrder {
    /// First come, first served; a waiter beyond `max_waiters` is refused.
    #[default]
    Fifo,
    /// Newest first; a waiter beyond `max_waiters` evicts the oldest (young requests still have
    /// a caller waiting for them).
    Lifo,
}

/// How callers wait for a limiter: bounded in time and in number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WaitConfig {
    /// The longest a caller waits; one whose turn would come later is refused at once, with the
    /// time it would have needed (default 500 ms).
    #[serde(with = "duration")]
    pub max_wait: Duration,
    /// The most callers waiting at once; 0 means nobody waits (default 64).
    pub max_waiters: usize,
    /// Who is served first (default FIFO).
    pub order: WaitOrder,
}

impl Default for WaitConfig {
    fn default() -> Self {
        WaitConfig {
            max_wait: MAX_WAIT,
            max_waiters: MAX_WAITERS,
            order: WaitOrder::Fifo,
        }
    }
}

/// A [`ConcurrencyLimiter`](super::ConcurrencyLimiter): at most `max_concurrent` permits out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConcurrencyConfig {
    /// Permits out at once, and the largest `n` (default 64).
    pub max_concurrent: u64,
    /// How callers wait for a permit.
    pub wait: WaitConfig,
}

impl Default for ConcurrencyConfig {
    fn default() -> Self {
        ConcurrencyConfig {
            max_concurrent: MAX_CONCURRENT,
            wait: WaitConfig::default(),
        }
    }
}

impl ConcurrencyConfig {
    pub(crate) fn validate(&self) -> Result<(), LimitConfigError> {
        check(
            self.max_concurrent >= 1,
            "max_concurrent",
            self.max_concurrent,
            "must be at least 1",
        )
    }
}
