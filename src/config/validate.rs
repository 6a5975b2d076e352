//! The rules a configuration must satisfy, checked all at once so that every problem is reported.

use std::fmt::Display;
use std::time::Duration;

use super::limit::LimitValue;
use super::{Config, GateConfig, Limit, RoutesConfig, SamplerConfig, Violation};

/// Largest latency window: big enough for any real use, small enough that sorting it every tick is
/// cheap.
const MAX_WINDOW: usize = 100_000;

/// Smallest explicit memory limit: anything smaller is surely a unit mistake (`512` meant as MiB).
const MIN_MEMORY_LIMIT: u64 = 1 << 20;

const POSITIVE_RATE: &str = "must be a finite number greater than 0";
const POSITIVE_DURATION: &str = "must be greater than 0";
const AT_LEAST_ONE: &str = "must be at least 1";

/// Every broken rule of `config`, in key order.
pub(crate) fn check(config: &Config) -> Vec<Violation> {
    let mut report = Report::default();
    gate(&mut report, &config.gate);
    sampler(&mut report, &config.sampler);
    routes(&mut report, &config.routes);
    report
        .violations
        .extend(config.policies.violations(config.redis.as_ref()));
    #[cfg(feature = "redis")]
    redis(&mut report, config.redis.as_ref());
    report.violations
}

#[derive(Default)]
struct Report {
    violations: Vec<Violation>,
}

impl Report {
    fn add(&mut self, key: &str, value: impl Display, rule: impl Into<String>) {
        self.violations.push(Violation {
            key: key.to_owned(),
            value: value.to_string(),
            rule: rule.into(),
        });
    }

    fn at_least_one(&mut self, key: &str, value: u64) {
        if value < 1 {
            self.add(key, value, AT_LEAST_ONE);
        }
    }

    /// A rate in tokens per second: finite and positive. Returns whether it is.
    fn rate(&mut self, key: &str, value: f64) -> bool {
        let ok = value.is_finite() && value > 0.0;
        if !ok {
            self.add(key, float(value), POSITIVE_RATE);
        }
        ok
    }

    /// A duration: it must fit in 64-bit nanoseconds, and be positive unless `zero_allowed`.
    /// Returns whether it is valid.
    fn duration(&mut self, key: &str, value: Duration, zero_allowed: bool) -> bool {
        let before = self.violations.len();
        if value.is_zero() && !zero_allowed {
            self.add(key, duration(value), POSITIVE_DURATION);
        }
        if value.as_nanos() > u128::from(u64::MAX) {
            self.add(
                key,
                duration(value),
                "must fit in 64-bit nanoseconds (at most about 584 years)",
            );
        }
        self.violations.len() == before
    }

    /// A fixed or learned figure: a fixed value, and each bound of a learned one, must pass `rule`
    /// (called with the key to report under), and the bounds must not cross. Returns whether all
    /// is well.
    fn limit<T: LimitValue>(
        &mut self,
        key: &str,
        limit: &Limit<T>,
        rule: impl Fn(&mut Self, &str, T) -> bool,
    ) -> bool {
        match *limit {
            Limit::Fixed(v) => rule(self, key, v),
            Limit::Auto { min, max } => {
                let min_ok = min.is_none_or(|v| rule(self, &format!("{key}.min"), v));
                let max_ok = max.is_none_or(|v| rule(self, &format!("{key}.max"), v));
                if let (true, true, Some(lo), Some(hi)) = (min_ok, max_ok, min, max) {
                    if lo > hi {
                        self.add(
                            &format!("{key}.min"),
                            format!("{} (max = {})", lo.show(), hi.show()),
                            "must be at most the max bound",
                        );
                        return false;
                    }
                }
                min_ok && max_ok
            }
        }
    }
}

fn gate(report: &mut Report, gate: &GateConfig) {
    report.limit("gate.max_running", &gate.max_running, |r, k, v| {
        r.at_least_one(k, v);
        v >= 1
    });
    report.limit("gate.max_avg_latency", &gate.max_avg_latency, |r, k, v| {
        r.duration(k, v, false)
    });
    let urgent_ok = report.limit("gate.max_qps", &gate.max_qps, |r, k, v| r.rate(k, v));
    let non_urgent_ok = report.rate("gate.non_urgent_qps", gate.non_urgent_qps);
    // A learned max_qps may not be bounded below the non-urgent floor either.
    let urgent_ceiling = match gate.max_qps {
        Limit::Fixed(v) => Some(("max_qps", v)),
        Limit::Auto { max, .. } => max.map(|v| ("max_qps.max", v)),
    };
    if let (true, true, Some((name, ceiling))) = (urgent_ok, non_urgent_ok, urgent_ceiling) {
        if gate.non_urgent_qps > ceiling {
            report.add(
                "gate.non_urgent_qps",
                float(gate.non_urgent_qps),
                format!(
                    "must be at most {name} ({}): the non-urgent floor cannot exceed the rate \
                     of the whole gate",
                    float(ceiling)
                ),
            );
        }
    }
    report.duration("gate.request_timeout", gate.request_timeout, true);
    report.limit("gate.max_in_flight", &gate.max_in_flight, |r, k, v| {
        r.at_least_one(k, v);
        v >= 1
    });
    if let (Limit::Fixed(ceiling), Limit::Fixed(running)) = (gate.max_in_flight, gate.max_running) {
        if ceiling >= 1 && ceiling < running {
            report.add(
                "gate.max_in_flight",
                format!("{ceiling} (max_running = {running})"),
                "must be at least max_running: a ceiling below its soft threshold would refuse \
                 work before the switch could act",
            );
        }
    }
    let ratio = gate.max_memory_ratio;
    if !(ratio.is_finite() && ratio > 0.0 && ratio <= 1.0) {
        report.add(
            "gate.max_memory_ratio",
            float(ratio),
            "must be a finite number greater than 0 and at most 1",
        );
    }
    let soft = gate.memory_soft_ratio;
    if !(soft.is_finite() && soft > 0.0 && soft <= 1.0) {
        report.add(
            "gate.memory_soft_ratio",
            float(soft),
            "must be a finite number greater than 0 and at most 1",
        );
    }
    if let Some(limit) = gate.memory_limit {
        if limit < MIN_MEMORY_LIMIT {
            report.add(
                "gate.memory_limit",
                limit,
                "must be at least 1 MiB (1048576 bytes); leave it out to use the cgroup or physical \
                 memory limit",
            );
        }
    }
    report.duration("gate.burst", gate.burst, false);
}

fn sampler(report: &mut Report, sampler: &SamplerConfig) {
    let window = sampler.window;
    let window_ok = (1..=MAX_WINDOW).contains(&window);
    if !window_ok {
        report.add(
            "sampler.window",
            window,
            format!("must be between 1 and {MAX_WINDOW}"),
        );
    }
    let trim = sampler.trim;
    let trim_ok = trim.is_finite() && (0.0..0.5).contains(&trim);
    if !trim_ok {
        report.add(
            "sampler.trim",
            float(trim),
            "must be a finite number with 0 <= trim < 0.5 (it is cut at each end; at 0.5 nothing \
             would remain)",
        );
    } else if window_ok {
        // `window * trim < window / 2` in exact arithmetic, but the float product can round up.
        let cut = (window as f64 * trim).floor() as usize;
        if window.saturating_sub(cut.saturating_mul(2)) < 1 {
            report.add(
                "sampler.trim",
                float(trim),
                format!("must leave at least one of the {window} samples after trimming both ends"),
            );
        }
    }
    let min_samples = sampler.min_samples;
    if min_samples < 1 {
        report.add("sampler.min_samples", min_samples, AT_LEAST_ONE);
    } else if window_ok && min_samples > window {
        report.add(
            "sampler.min_samples",
            min_samples,
            format!(
                "must be at most window ({window}): min_samples > window would never be reached"
            ),
        );
    }
    report.duration("sampler.tick", sampler.tick, false);
    report.duration("sampler.probe_interval", sampler.probe_interval, false);
}

fn routes(report: &mut Report, routes: &RoutesConfig) {
    for (key, patterns) in [
        ("routes.urgent", &routes.urgent),
        ("routes.non_urgent", &routes.non_urgent),
    ] {
        for pattern in patterns {
            if pattern.trim().is_empty() {
                report.add(key, quoted(pattern), "a pattern must not be empty or blank");
            } else if pattern.find('*').is_some_and(|at| at + 1 != pattern.len()) {
                report.add(
                    key,
                    quoted(pattern),
                    "`*` is allowed only as the last character (a prefix pattern)",
                );
            }
        }
    }
    // Sets, not list scans: a route table may hold many thousands of patterns.
    let urgent: std::collections::HashSet<&str> =
        routes.urgent.iter().map(String::as_str).collect();
    let mut reported: std::collections::HashSet<&str> = std::collections::HashSet::new();
    for pattern in &routes.non_urgent {
        if urgent.contains(pattern.as_str()) && reported.insert(pattern.as_str()) {
            report.add(
                "routes.non_urgent",
                quoted(pattern),
                "the pattern is also in routes.urgent: a route cannot be both urgent and non-urgent",
            );
        }
    }
    report.at_least_one(
        "routes.lookup_cache_entries",
        u64::try_from(routes.lookup_cache_entries).unwrap_or(u64::MAX),
    );
    report.duration("routes.lookup_cache_ttl", routes.lookup_cache_ttl, false);
}

/// A float as TOML writes it (`nan`, `inf`, `-inf`, `0.5`, `-5`).
pub(super) fn float(value: f64) -> String {
    if value.is_nan() {
        "nan".to_owned()
    } else if value.is_infinite() {
        if value > 0.0 { "inf" } else { "-inf" }.to_owned()
    } else {
        value.to_string()
    }
}

/// A duration as the configuration file writes it.
fn duration(value: Duration) -> String {
    format!("\"{}\"", humantime::format_duration(value))
}

/// A route pattern, quoted and escaped.
fn quoted(pattern: &str) -> String {
    format!("{pattern:?}")
}

/// `[redis]`: the connection's figures, and those every Redis-kept limit shares (a figure that
/// only a policy's rate breaks, such as a `lease` above its burst, is reported with the policy's
/// checks, under the same key).
#[cfg(feature = "redis")]
fn redis(report: &mut Report, redis: Option<&super::RedisConfig>) {
    use crate::store::redis::{RedisConfigError, RedisLimitConfig};
    let Some(redis) = redis else {
        return;
    };
    let named = |error: RedisConfigError| match error {
        RedisConfigError::Invalid { key, value, rule } => {
            (format!("redis.{key}"), value, rule.to_owned())
        }
        RedisConfigError::Url { url, reason } => ("redis.url".to_owned(), url, reason),
        RedisConfigError::TlsCaFile { path, reason } => {
            ("redis.tls_ca_file".to_owned(), path, reason)
        }
        other => ("redis".to_owned(), String::new(), other.to_string()),
    };
    let mut found = Vec::new();
    if let Err(e) = redis.store.validate() {
        found.push(named(e));
    }
    // Leases are checked against each policy's capacity, with the policy.
    let shared = RedisLimitConfig {
        lease: 0,
        ..redis.limits.clone()
    };
    if let Err(e) = shared.validate() {
        found.push(named(e));
    }
    if let Err(e) = redis.store.breaker.validate() {
        found.push((
            format!("redis.breaker.{}", e.key),
            e.value,
            e.rule.to_owned(),
        ));
    }
    for (key, value, rule) in found {
        if !report.violations.iter().any(|v| v.key == key) {
            report.add(&key, value, rule);
        }
    }
}
