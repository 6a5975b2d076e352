//! Configuration: the figures that tell the gate when to act and how hard.
//!
//! # Why the whole configuration is validated up front
//!
//! A protection layer is only exercised in earnest when the service is already in trouble, so a bad
//! figure would stay hidden until the worst possible moment: `max_qps = nan` admits nothing once the
//! switch turns on, `trim = 0.5` leaves no latency sample to average, a hard ceiling below its soft
//! threshold refuses work before the switch has had a chance to act. That is why every rule is checked
//! when a configuration is loaded ([`Config::from_toml_str`], [`Config::from_file`]) and can be checked
//! again for configurations built in code ([`Config::validate`]; the gate calls it before applying one).
//! Every broken rule is reported at once, each naming the key, the offending value and the rule, so a
//! single edit fixes the file.
//!
//! # Format
//!
//! TOML with five optional tables, `[gate]`, `[sampler]`, `[routes]`, `[policies]` (see
//! [`crate::policy`]) and `[redis]` (see [`RedisConfig`]); every key is optional and
//! falls back to its default (the original design's figures, see [`Config::default`] and the shipped
//! `config/sluicegate.toml`, also available as [`Config::default_toml`]). Unknown tables and keys are
//! errors, so a misspelt key can never silently leave a default in place. Durations are strings with
//! a unit, parsed by `humantime` (`"2500ms"`, `"3s"`, `"5m"`, `"1h 30m"`); a bare number is refused
//! because nobody can tell whether `3` meant seconds or milliseconds. `memory_limit` is a whole number
//! of bytes or a string with a unit (`"512MiB"`, `"1.5GB"`).
//!
//! ```
//! use std::time::Duration;
//! use sluicegate::config::Config;
//! use sluicegate::request::Urgency;
//!
//! let config = Config::from_toml_str(
//!     r#"
//!     [gate]
//!     max_qps = 400
//!     request_timeout = "1s"
//!     memory_limit = "2GiB"
//!
//!     [routes]
//!     non_urgent = ["/report/*", "ReportService.export"]
//!     "#,
//! )?;
//! assert_eq!(config.gate.max_qps, 400.0);
//! assert_eq!(config.gate.request_timeout, Duration::from_secs(1));
//! assert_eq!(config.gate.memory_limit, Some(2 * 1024 * 1024 * 1024));
//! assert!(config.gate.max_running.is_auto()); // missing keys keep their defaults
//! assert_eq!(config.routes.default_urgency, Urgency::Urgent);
//!
//! // A broken rule names the key, the value and the rule.
//! let err = Config::from_toml_str("[gate]\nmax_qps = -5").unwrap_err();
//! assert_eq!(err.to_string(), "`gate.max_qps` = -5: must be a finite number greater than 0");
//! # Ok::<(), sluicegate::config::ConfigError>(())
//! ```

mod error;
mod limit;
mod parse;
mod redis;
mod units;
mod validate;
mod warning;

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::policy::PoliciesConfig;
use crate::request::Urgency;
use crate::switch::SwitchMode;

pub use error::{ConfigError, Violation};
pub use limit::{Limit, LimitValue};
#[cfg(feature = "sim")]
pub(crate) use parse::closest;
pub use redis::RedisConfig;
#[cfg(feature = "sim")]
pub(crate) use units::parse_byte_size;
pub(crate) use units::{no_unit_message, parse_duration};
pub use warning::ConfigWarning;

/// The complete configuration of a gate: one field per TOML table.
///
/// `Deserialize` is implemented so that the configuration can be embedded in a larger document; it
/// applies the defaults and the unit parsing but not the rules, so call [`Config::validate`] on a
/// configuration obtained that way ([`Config::from_toml_str`] and [`Config::from_file`] do it for you).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `[gate]`: when the switch turns on, how fast each class is admitted, and the hard ceilings.
    pub gate: GateConfig,
    /// `[sampler]`: how latency is measured and how often the switch and the probes run.
    pub sampler: SamplerConfig,
    /// `[routes]`: which requests are urgent.
    pub routes: RoutesConfig,
    /// `[policies]`: per-route breakers, rate and concurrency limits, timeouts, and whether the
    /// gate applies (see [`crate::policy`]). Empty by default: no policy, the gate alone.
    #[serde(skip_serializing_if = "PoliciesConfig::is_empty")]
    pub policies: PoliciesConfig,
    /// `[redis]`: the Redis store of the policies with `store = "redis"` (see [`RedisConfig`]).
    /// `None` when the table is not written: such policies then use the store's defaults
    /// (`redis://127.0.0.1:6379`, one node).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis: Option<RedisConfig>,
}

/// `[gate]`: thresholds of the auto switch, rates of the two token buckets, waiting limits and hard
/// ceilings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GateConfig {
    /// Requests in flight above which the auto switch may turn on (together with `max_avg_latency`).
    /// Learned: the in-flight level at which latency starts to climb (capacity × base latency).
    /// Original design: `sys_max_running_thread` (500). Default auto.
    pub max_running: Limit<u64>,
    /// Trimmed-mean latency above which the auto switch may turn on (together with `max_running`).
    /// Learned: 1.5 × the service's base latency. Original design: `max_avg_handle_date` (3 s). Default auto.
    pub max_avg_latency: Limit<Duration>,
    /// Rate of the whole gate while the switch is on, in requests per second: urgent requests may use
    /// all of it. Learned: the completion rate the service sustains. Original design: `sys_max_qps` (250).
    /// Default auto.
    pub max_qps: Limit<f64>,
    /// The rate non-urgent requests are guaranteed while the switch is on, in tokens per second; they
    /// also get whatever urgent requests leave unused. At most `max_qps`; with a learned `max_qps`,
    /// the floor in force is at most 2 % of the learned capacity.
    /// Original design: `non_worry_token_speed`. Default 30.
    pub non_urgent_qps: f64,
    /// Longest a request may wait for a token; a request that could not be served within it is refused
    /// at once. Zero means never wait. Also the longest an urgent request that finds the in-flight
    /// ceiling full waits for a freed slot (with a learned latency, at most four times it).
    /// Original design: `request_timeout`. Default 2500 ms.
    #[serde(with = "units::duration")]
    pub request_timeout: Duration,
    /// Most requests waiting for a token at once; one more is refused at once. Zero means nobody waits.
    /// Urgent requests waiting for an in-flight slot are bounded by the same number, counted apart.
    /// Original design: `max_await_thread_length`. Default 500.
    pub max_waiters: u64,
    /// Hard ceiling on requests in flight: at or above it a request is refused at once, whatever the
    /// switch says. At least `max_running`. Learned: a little above `max_running`, so that the
    /// service stays busy with a short queue. Original design: 1000. Default auto.
    pub max_in_flight: Limit<u64>,
    /// Hard ceiling on memory used divided by the memory limit, in `(0, 1]`: at or above it a request
    /// is refused at once. Default 0.95.
    pub max_memory_ratio: f64,
    /// Soft memory mark, in `(0, 1]`: from here to `max_memory_ratio` the share of non-urgent
    /// requests admitted shrinks smoothly to zero. A mark at or above `max_memory_ratio` leaves no
    /// graded band (the original design's behaviour). Default 0.8.
    pub memory_soft_ratio: f64,
    /// The memory limit in bytes that `max_memory_ratio` refers to; `None` means the cgroup limit where
    /// there is one, else physical memory. In TOML an integer (bytes) or a string with a unit
    /// (`"512MiB"`, `"1.5GB"`). At least 1 MiB. Default `None`.
    #[serde(with = "units::memory_limit", skip_serializing_if = "Option::is_none")]
    pub memory_limit: Option<u64>,
    /// How much of its rate each token bucket may bank: a bucket holds `max(1, rate × burst)` tokens,
    /// the non-urgent floor's at least two (with one, requests that come a little after each token
    /// would get less than `non_urgent_qps`). A learned `max_qps` banks at least one base latency
    /// of itself (it is headroom above the capacity; the in-flight ceiling holds the service).
    /// Default 100 ms.
    #[serde(with = "units::duration")]
    pub burst: Duration,
    /// The initial switch mode. Default `auto`.
    pub switch: SwitchMode,
    /// How long requests may wait for a token while the service is saturated, when any figure is
    /// learned. Default `adaptive`.
    pub waiting: Waiting,
}

/// How long a request may wait for a token while the service is saturated.
///
/// In both modes a request waits only if its token comes in time for its wait plus the expected
/// latency to fit in `request_timeout`, and a waiter whose expected latency has grown past that
/// meanwhile is refused when its token comes (with any learned figure).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Waiting {
    /// CoDel's idea: a burst may queue, a standing queue may not. While the switch is on (or the
    /// ceiling is lowered for a probe), a request waits at most a quarter of the expected latency,
    /// so that admitted requests stay young. Measured in the simulator against `fifo`: as many
    /// requests answered within the clients' timeout (to within 0.7 %), and p99 at the SLO where
    /// `fifo` reaches twice it (see the crate's user guide).
    #[default]
    Adaptive,
    /// First come, first served, up to `request_timeout` less the expected latency, whatever the
    /// load: the original design's waiting.
    Fifo,
}

/// `[sampler]`: the latency window and the periods of the background work.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SamplerConfig {
    /// Number of latency samples kept for the trimmed mean, `1..=100_000`. Default 100.
    pub window: usize,
    /// Share of the samples cut at each end before averaging, `0 <= trim < 0.5`. Default 0.1.
    pub trim: f64,
    /// The trimmed mean is valid once this many samples exist, `1..=window`. Default 50.
    pub min_samples: usize,
    /// How often the auto switch is evaluated; greater than zero. Default 100 ms.
    #[serde(with = "units::duration")]
    pub tick: Duration,
    /// How often the memory probe refreshes, off the request path; greater than zero. Default 100 ms:
    /// a reading costs microseconds, and the memory ceilings are only as good as the latest one.
    #[serde(with = "units::duration")]
    pub probe_interval: Duration,
}

/// `[routes]`: the route table that classifies requests, and the cache in front of the pluggable
/// lookup.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RoutesConfig {
    /// Patterns of urgent requests: exact URL paths or `Interface.method` names, or prefixes ending in
    /// `*`. Default empty.
    pub urgent: Vec<String>,
    /// Patterns of non-urgent requests, in the same form; a pattern may not also be urgent.
    /// Default empty.
    pub non_urgent: Vec<String>,
    /// Urgency of a request that nothing else classifies. Default `urgent`, as in the original design.
    pub default_urgency: Urgency,
    /// Most answers of the pluggable urgency lookup kept in its cache; at least 1. Default 1000.
    pub lookup_cache_entries: usize,
    /// Longest a cached lookup answer is trusted; greater than zero. Default 5 minutes.
    #[serde(with = "units::duration")]
    pub lookup_cache_ttl: Duration,
}

impl Default for GateConfig {
    fn default() -> Self {
        Self {
            max_running: Limit::AUTO,
            max_avg_latency: Limit::AUTO,
            max_qps: Limit::AUTO,
            non_urgent_qps: 30.0,
            request_timeout: Duration::from_millis(2500),
            max_waiters: 500,
            max_in_flight: Limit::AUTO,
            max_memory_ratio: 0.95,
            memory_soft_ratio: 0.8,
            memory_limit: None,
            burst: Duration::from_millis(100),
            switch: SwitchMode::Auto,
            waiting: Waiting::Adaptive,
        }
    }
}

impl Default for SamplerConfig {
    fn default() -> Self {
        Self {
            window: 100,
            trim: 0.1,
            min_samples: 50,
            tick: Duration::from_millis(100),
            probe_interval: Duration::from_millis(100),
        }
    }
}

impl Default for RoutesConfig {
    fn default() -> Self {
        Self {
            urgent: Vec::new(),
            non_urgent: Vec::new(),
            default_urgency: Urgency::Urgent,
            lookup_cache_entries: 1000,
            lookup_cache_ttl: Duration::from_secs(5 * 60),
        }
    }
}

impl Config {
    /// Parses a TOML document and validates the result.
    ///
    /// Missing tables and keys keep their defaults. A syntax error, a value of the wrong type or
    /// without a unit, or an unknown key is a [`ConfigError::Syntax`] naming the key and its position;
    /// broken rules are a [`ConfigError::Invalid`] listing every one of them.
    pub fn from_toml_str(text: &str) -> Result<Config, ConfigError> {
        let config = parse::parse(text)?;
        config.validate()?;
        Ok(config)
    }

    /// Reads a TOML file and parses and validates it as [`Config::from_toml_str`] does.
    ///
    /// A file that cannot be read, or that is not UTF-8 text, is a [`ConfigError::Io`] naming the path.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
        let path = path.as_ref();
        let io_error = |source| ConfigError::Io {
            path: path.to_path_buf(),
            source,
        };
        let bytes = std::fs::read(path).map_err(io_error)?;
        let text = String::from_utf8(bytes).map_err(|e| {
            io_error(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("the file is not UTF-8 text ({})", e.utf8_error()),
            ))
        })?;
        let config = Self::from_toml_str(&text)?;
        tracing::debug!(path = %path.display(), "configuration loaded");
        Ok(config)
    }

    /// Checks every rule and reports all broken ones at once, in key order, as
    /// [`ConfigError::Invalid`].
    ///
    /// Use it on configurations built or changed in code; the loaders call it already.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let violations = validate::check(self);
        if violations.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid(violations))
        }
    }

    /// The configuration as a TOML document that [`Config::from_toml_str`] parses back to an equal
    /// configuration (if it is valid).
    ///
    /// Every key is written, durations as `humantime` strings (`"2s 500ms"`), `memory_limit` in the
    /// largest binary unit that divides it exactly; `memory_limit` is left out when it is `None`.
    pub fn to_toml_string(&self) -> String {
        match toml::to_string(self) {
            Ok(text) => text,
            // Every field has a TOML representation, so this is not expected to happen; if it does, the
            // output still parses (as a comment) rather than panicking.
            Err(error) => {
                tracing::error!(%error, "the configuration could not be written as TOML");
                format!("# the configuration could not be written as TOML: {error}\n")
            }
        }
    }

    /// The shipped, fully commented configuration file (`config/sluicegate.toml`), equal to
    /// [`Config::default`].
    pub fn default_toml() -> &'static str {
        include_str!("../../config/sluicegate.toml")
    }
}
