//! The breaker's figures, as a config struct with the original design's defaults, and their
//! validation (an error names the key, the value and the rule it broke).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::limit::units::duration;

/// Consecutive failures that open the breaker: the original design's figure (zhenyi's
/// `threshold`), small enough to stop hammering a dead downstream within a handful of calls.
pub(crate) const CONSECUTIVE_FAILURES: u32 = 5;
/// How long the breaker stays open: the original design's 10 s cooldown, long enough for a
/// restarting downstream, short enough that a recovered one is back within seconds.
pub(crate) const OPEN_FOR: Duration = Duration::from_secs(10);
/// Probes let through half-open: three, as the original design's `halfOpenMaxAttempts`; one
/// probe is a coin toss, three make a majority.
pub(crate) const HALF_OPEN_PROBES: u32 = 3;
/// Share of failed probes that reopens the breaker: 50 %, resilience4j's failure-rate default.
pub(crate) const HALF_OPEN_FAILURE_RATE: f64 = 0.5;
/// A probe that has not reported after this long counts as failed: as long as the breaker stays
/// open, since a probe slower than the cooldown says as little as no answer.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// Calls in a count window: resilience4j's default, enough for a rate to mean something.
pub(crate) const WINDOW_CALLS: u32 = 100;
/// Span of a time window: a minute, resilience4j's `slidingWindowSize` read as seconds.
pub(crate) const WINDOW_SPAN: Duration = Duration::from_secs(60);
/// Buckets of a time window: ten, so a call leaves the window within a tenth of its span.
pub(crate) const WINDOW_BUCKETS: u32 = 10;
/// Failure rate that opens the breaker: 50 %, resilience4j's default.
pub(crate) const FAILURE_RATE: f64 = 0.5;
/// Calls a window must hold before its rate is trusted: 20, so that 10 failures of the first
/// 20 calls trip it but 1 of 2 does not.
pub(crate) const MINIMUM_CALLS: u32 = 20;
/// A call slower than this counts as slow: 1 s, a call no interactive caller waits for.
pub(crate) const SLOW_CALL_DURATION: Duration = Duration::from_secs(1);
/// Slow-call rate that opens the breaker: 100 %, resilience4j's default (only when every call
/// in the window is slow).
pub(crate) const SLOW_CALL_RATE: f64 = 1.0;
/// Backoff multiplier when backoff is enabled: each reopening doubles the open time.
pub(crate) const BACKOFF_MULTIPLIER: f64 = 2.0;
/// Longest open time under backoff: two minutes, so a recovered downstream is never ignored long.
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(120);

/// A breaker's configuration. `Default` is the original design's breaker: open after 5
/// consecutive failures, for 10 s, then 3 probes.
///
/// In TOML (for when it is plugged into the configuration file):
///
/// ```
/// use std::time::Duration;
/// use sluicegate::breaker::{BreakerConfig, PolicyConfig, WindowConfig};
///
/// let config: BreakerConfig = toml::from_str(r#"
///     open_for = "30s"
///     backoff = { multiplier = 2.0, max = "5m" }
///     half_open = { probes = 5, probe_timeout = "2s" }
///     [[policies]]
///     kind = "consecutive_failures"
///     failures = 10
///     [[policies]]
///     kind = "failure_rate"
///     threshold = 0.25
///     window = { kind = "time", span = "30s", buckets = 30 }
/// "#)?;
/// assert_eq!(config.open_for, Duration::from_secs(30));
/// assert_eq!(config.half_open.failure_rate, 0.5); // a missing key keeps its default
/// assert!(matches!(
///     config.policies[1],
///     PolicyConfig::FailureRate(ref rate) if rate.window == WindowConfig::Time { span: Duration::from_secs(30), buckets: 30 }
/// ));
/// # Ok::<(), toml::de::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BreakerConfig {
    /// What opens the breaker; several policies combine with "any of them trips it".
    pub policies: Vec<PolicyConfig>,
    /// How long the breaker stays open before letting probes through.
    #[serde(with = "duration")]
    pub open_for: Duration,
    /// Longer open times for a downstream that keeps failing its probes; `None`: always `open_for`.
    pub backoff: Option<BackoffConfig>,
    /// How the half-open state tests the downstream.
    pub half_open: HalfOpenConfig,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            policies: vec![PolicyConfig::ConsecutiveFailures(
                ConsecutiveConfig::default(),
            )],
            open_for: OPEN_FOR,
            backoff: None,
            half_open: HalfOpenConfig::default(),
        }
    }
}

/// One rule that opens the breaker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PolicyConfig {
    /// Opens after `failures` failures in a row (a success starts the count again).
    ConsecutiveFailures(ConsecutiveConfig),
    /// Opens when the share of failed calls in a window reaches a threshold.
    FailureRate(RateConfig),
    /// Opens when the share of slow calls in a window reaches a threshold.
    SlowCallRate(SlowCallConfig),
}

/// [`PolicyConfig::ConsecutiveFailures`]' figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConsecutiveConfig {
    /// Failures in a row that open the breaker (default 5).
    pub failures: u32,
}

impl Default for ConsecutiveConfig {
    fn default() -> Self {
        ConsecutiveConfig {
            failures: CONSECUTIVE_FAILURES,
        }
    }
}

/// [`PolicyConfig::FailureRate`]' figures.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RateConfig {
    /// The breaker opens when `failures / calls >= threshold` (a share in `(0, 1]`, default 0.5).
    pub threshold: f64,
    /// No verdict before the window holds this many calls (default 20).
    pub minimum_calls: u32,
    /// Which calls the rate is taken over (default: the last 100).
    pub window: WindowConfig,
}

impl Default for RateConfig {
    fn default() -> Self {
        RateConfig {
            threshold: FAILURE_RATE,
            minimum_calls: MINIMUM_CALLS,
            window: WindowConfig::default(),
        }
    }
}

/// [`PolicyConfig::SlowCallRate`]' figures.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SlowCallConfig {
    /// A call that took at least this long is slow, whatever its outcome (default 1 s).
    #[serde(with = "duration")]
    pub slow_call_duration: Duration,
    /// The breaker opens when `slow / calls >= threshold` (a share in `(0, 1]`, default 1.0).
    pub threshold: f64,
    /// No verdict before the window holds this many calls (default 20).
    pub minimum_calls: u32,
    /// Which calls the rate is taken over (default: the last 100).
    pub window: WindowConfig,
}

impl Default for SlowCallConfig {
    fn default() -> Self {
        SlowCallConfig {
            slow_call_duration: SLOW_CALL_DURATION,
            threshold: SLOW_CALL_RATE,
            minimum_calls: MINIMUM_CALLS,
            window: WindowConfig::default(),
        }
    }
}

/// Which recent calls a rate is taken over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum WindowConfig {
    /// The last `calls` calls.
    Count {
        /// How many calls the window holds.
        calls: u32,
    },
    /// The calls that ended within the last `span`, kept in `buckets` equal slices (a call leaves
    /// the window with its slice, so the span is exact to `span / buckets`).
    Time {
        /// How far back the window reaches.
        #[serde(with = "duration")]
        span: Duration,
        /// How many slices the span is cut into.
        buckets: u32,
    },
}

impl Default for WindowConfig {
    fn default() -> Self {
        WindowConfig::Count {
            calls: WINDOW_CALLS,
        }
    }
}

impl WindowConfig {
    /// A time window of `span` in the default number of slices (10).
    pub fn time(span: Duration) -> Self {
        WindowConfig::Time {
            span,
            buckets: WINDOW_BUCKETS,
        }
    }

    /// The default time window: one minute in ten slices.
    pub fn default_time() -> Self {
        Self::time(WINDOW_SPAN)
    }
}

/// Open times that grow while the downstream keeps failing its probes: the `k`-th opening in a
/// row lasts `open_for · multiplier^(k-1)`, at most `max`. A close starts the count again.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BackoffConfig {
    /// Factor between two open times in a row (at least 1; default 2).
    pub multiplier: f64,
    /// The longest open time (default 2 min).
    #[serde(with = "duration")]
    pub max: Duration,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        BackoffConfig {
            multiplier: BACKOFF_MULTIPLIER,
            max: BACKOFF_MAX,
        }
    }
}

/// How the half-open state decides.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HalfOpenConfig {
    /// Calls let through to test the downstream; callers beyond them are refused (default 3).
    pub probes: u32,
    /// The breaker reopens once this share of the probes has failed, and closes once enough have
    /// succeeded that the share can no longer be reached (default 0.5).
    pub failure_rate: f64,
    /// A probe that has not reported after this long counts as failed (default 10 s).
    #[serde(with = "duration")]
    pub probe_timeout: Duration,
}

impl Default for HalfOpenConfig {
    fn default() -> Self {
        HalfOpenConfig {
            probes: HALF_OPEN_PROBES,
            failure_rate: HALF_OPEN_FAILURE_RATE,
            probe_timeout: PROBE_TIMEOUT,
        }
    }
}

/// A breaker figure that breaks a rule: the key, its value and the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{key}` = {value}: {rule}")]
pub struct BreakerConfigError {
    /// The dotted path of the key, e.g. `half_open.probes` or `policies[1].threshold`.
    pub key: String,
    /// The offending value.
    pub value: String,
    /// What the rule demands.
    pub rule: &'static str,
}

fn check(
    ok: bool,
    key: impl Into<String>,
    value: impl ToString,
    rule: &'static str,
) -> Result<(), BreakerConfigError> {
    if ok {
        Ok(())
    } else {
        Err(BreakerConfigError {
            key: key.into(),
            value: value.to_string(),
            rule,
        })
    }
}

const SHARE_RULE: &str = "must be a share greater than 0 and at most 1";

fn is_share(v: f64) -> bool {
    v > 0.0 && v <= 1.0
}

impl BreakerConfig {
    /// Checks every figure; the first that breaks a rule is reported.
    pub fn validate(&self) -> Result<(), BreakerConfigError> {
        check(
            !self.policies.is_empty(),
            "policies",
            "[]",
            "must name at least one policy",
        )?;
        for (i, policy) in self.policies.iter().enumerate() {
            policy.validate(&format!("policies[{i}]"))?;
        }
        check(
            !self.open_for.is_zero(),
            "open_for",
            humantime::format_duration(self.open_for),
            "must be longer than 0",
        )?;
        if let Some(b) = &self.backoff {
            check(
                b.multiplier.is_finite() && b.multiplier >= 1.0,
                "backoff.multiplier",
                b.multiplier,
                "must be a finite number of at least 1",
            )?;
            check(
                b.max >= self.open_for,
                "backoff.max",
                humantime::format_duration(b.max),
                "must be at least `open_for`",
            )?;
        }
        let h = &self.half_open;
        check(
            h.probes >= 1,
            "half_open.probes",
            h.probes,
            "must be at least 1",
        )?;
        check(
            is_share(h.failure_rate),
            "half_open.failure_rate",
            h.failure_rate,
            SHARE_RULE,
        )?;
        check(
            !h.probe_timeout.is_zero(),
            "half_open.probe_timeout",
            humantime::format_duration(h.probe_timeout),
            "must be longer than 0",
        )
    }
}

impl PolicyConfig {
    fn validate(&self, at: &str) -> Result<(), BreakerConfigError> {
        match self {
            PolicyConfig::ConsecutiveFailures(c) => check(
                c.failures >= 1,
                format!("{at}.failures"),
                c.failures,
                "must be at least 1",
            ),
            PolicyConfig::FailureRate(r) => {
                validate_rate(at, r.threshold, r.minimum_calls, &r.window)
            }
            PolicyConfig::SlowCallRate(s) => {
                check(
                    !s.slow_call_duration.is_zero(),
                    format!("{at}.slow_call_duration"),
                    humantime::format_duration(s.slow_call_duration),
                    "must be longer than 0",
                )?;
                validate_rate(at, s.threshold, s.minimum_calls, &s.window)
            }
        }
    }
}

fn validate_rate(
    at: &str,
    threshold: f64,
    minimum_calls: u32,
    window: &WindowConfig,
) -> Result<(), BreakerConfigError> {
    check(
        is_share(threshold),
        format!("{at}.threshold"),
        threshold,
        SHARE_RULE,
    )?;
    check(
        minimum_calls >= 1,
        format!("{at}.minimum_calls"),
        minimum_calls,
        "must be at least 1",
    )?;
    match *window {
        WindowConfig::Count { calls } => {
            check(
                calls >= 1,
                format!("{at}.window.calls"),
                calls,
                "must be at least 1",
            )?;
            check(
                minimum_calls <= calls,
                format!("{at}.minimum_calls"),
                minimum_calls,
                "must not exceed `window.calls` (the window could never hold that many)",
            )
        }
        WindowConfig::Time { span, buckets } => {
            check(
                buckets >= 1,
                format!("{at}.window.buckets"),
                buckets,
                "must be at least 1",
            )?;
            check(
                u128::from(buckets) <= span.as_nanos(),
                format!("{at}.window.span"),
                humantime::format_duration(span),
                "must be at least one nanosecond per bucket",
            )
        }
    }
}
