//! What opens a breaker: the [`Policy`] trait, consecutive failures, and "any of several".
//!
//! A policy sees every call that finished while the breaker was closed (calls from an earlier
//! state are filtered out before) and says when the downstream has failed enough; the breaker
//! owns the states and the timing. Policies are plain single-threaded state: the breaker calls
//! them under its lock.

use std::fmt;

use super::classify::{Call, Outcome};
use super::config::PolicyConfig;
use super::rate::RatePolicy;

/// Why a policy opened the breaker: the figures behind the decision, for the `tracing` event.
#[derive(Debug, Clone, PartialEq)]
pub struct Trip {
    /// The policy's name (`consecutive_failures`, `failure_rate`, `slow_call_rate`, or a custom
    /// policy's own).
    pub policy: &'static str,
    /// What it measured: failures in a row, or a rate.
    pub observed: f64,
    /// The threshold the measure reached.
    pub threshold: f64,
    /// The calls the measure was taken over.
    pub calls: u64,
}

impl fmt::Display for Trip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} reached {} (threshold {}) over {} calls",
            self.policy, self.observed, self.threshold, self.calls
        )
    }
}

/// A rule that decides when a closed breaker opens.
pub trait Policy: Send + fmt::Debug {
    /// Takes note of a call that finished while the breaker was closed; returns why the breaker
    /// must open now, if it must.
    fn record(&mut self, call: &Call) -> Option<Trip>;

    /// Whether a half-open probe that ended as `call` failed by this policy's standard. The
    /// default: only a [`Outcome::Failure`]; a slow-call policy also fails a slow probe.
    fn probe_failed(&self, call: &Call) -> bool {
        call.outcome == Outcome::Failure
    }

    /// Forgets every call (the breaker has closed again).
    fn reset(&mut self);
}

/// Opens after `threshold` failures in a row; a success starts the count again, an ignored call
/// leaves it as it is.
#[derive(Debug, Clone)]
pub struct ConsecutiveFailures {
    threshold: u32,
    count: u32,
}

impl ConsecutiveFailures {
    /// Opens after `threshold` failures in a row (at least 1).
    pub fn new(threshold: u32) -> Self {
        ConsecutiveFailures {
            threshold: threshold.max(1),
            count: 0,
        }
    }
}

impl Policy for ConsecutiveFailures {
    fn record(&mut self, call: &Call) -> Option<Trip> {
        match call.outcome {
            Outcome::Success => self.count = 0,
            Outcome::Ignored => {}
            Outcome::Failure => {
                self.count = self.count.saturating_add(1);
                if self.count >= self.threshold {
                    return Some(Trip {
                        policy: "consecutive_failures",
                        observed: f64::from(self.count),
                        threshold: f64::from(self.threshold),
                        calls: u64::from(self.count),
                    });
                }
            }
        }
        None
    }

    fn reset(&mut self) {
        self.count = 0;
    }
}

/// Several policies at once: each sees every call, and the breaker opens when any of them
/// trips (the first in order is reported). A probe fails if it fails by any policy's standard.
#[derive(Debug, Default)]
pub struct AnyOf {
    policies: Vec<Box<dyn Policy>>,
}

impl AnyOf {
    /// Combines `policies`.
    pub fn new(policies: Vec<Box<dyn Policy>>) -> Self {
        AnyOf { policies }
    }

    /// Adds a policy.
    pub fn with(mut self, policy: impl Policy + 'static) -> Self {
        self.policies.push(Box::new(policy));
        self
    }
}

impl Policy for AnyOf {
    fn record(&mut self, call: &Call) -> Option<Trip> {
        let mut trip = None;
        for policy in &mut self.policies {
            let t = policy.record(call);
            trip = trip.or(t);
        }
        trip
    }

    fn probe_failed(&self, call: &Call) -> bool {
        self.policies.iter().any(|p| p.probe_failed(call))
    }

    fn reset(&mut self) {
        for policy in &mut self.policies {
            policy.reset();
        }
    }
}

impl PolicyConfig {
    /// The policy these figures describe.
    pub fn build(&self) -> Box<dyn Policy> {
        match self {
            PolicyConfig::ConsecutiveFailures(c) => Box::new(ConsecutiveFailures::new(c.failures)),
            PolicyConfig::FailureRate(r) => Box::new(RatePolicy::failure_rate(
                r.threshold,
                r.minimum_calls,
                r.window,
            )),
            PolicyConfig::SlowCallRate(s) => Box::new(RatePolicy::slow_call_rate(
                s.slow_call_duration,
                s.threshold,
                s.minimum_calls,
                s.window,
            )),
        }
    }
}

/// The policy of a list of figures: the one policy itself, or all of them under [`AnyOf`].
pub(crate) fn build_all(configs: &[PolicyConfig]) -> Box<dyn Policy> {
    match configs {
        [one] => one.build(),
        many => Box::new(AnyOf::new(many.iter().map(PolicyConfig::build).collect())),
    }
}
