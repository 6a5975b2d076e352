//! Rate policies: the share of failed calls, or of slow calls, over a window.
//!
//! resilience4j's semantics: the breaker opens when `bad / calls >= threshold`, and only once
//! the window holds at least `minimum_calls` calls, so that one failure out of the first two
//! calls of the day does not open it. Ignored calls are not counted at all.

use std::time::Duration;

use crate::clock::{duration_to_nanos, Nanos};

use super::classify::{Call, Outcome};
use super::config::WindowConfig;
use super::policy::{Policy, Trip};
use super::window::Window;

/// What makes a call bad for a rate policy.
#[derive(Debug, Clone, Copy)]
enum Bad {
    Failed,
    SlowerThan(Nanos),
}

/// Opens the breaker when the share of bad calls in a window reaches a threshold.
#[derive(Debug, Clone)]
pub struct RatePolicy {
    bad: Bad,
    threshold: f64,
    minimum_calls: u64,
    window: Window,
}

impl RatePolicy {
    /// Opens when `failures / calls >= threshold` over `window`, once it holds `minimum_calls`.
    pub fn failure_rate(threshold: f64, minimum_calls: u32, window: WindowConfig) -> Self {
        RatePolicy {
            bad: Bad::Failed,
            threshold,
            minimum_calls: u64::from(minimum_calls.max(1)),
            window: Window::new(window),
        }
    }

    /// Opens when `slow / calls >= threshold` over `window`, once it holds `minimum_calls`; a
    /// call is slow when it took at least `slow_call_duration`, whatever its outcome.
    pub fn slow_call_rate(
        slow_call_duration: Duration,
        threshold: f64,
        minimum_calls: u32,
        window: WindowConfig,
    ) -> Self {
        RatePolicy {
            bad: Bad::SlowerThan(duration_to_nanos(slow_call_duration)),
            ..Self::failure_rate(threshold, minimum_calls, window)
        }
    }

    fn name(&self) -> &'static str {
        match self.bad {
            Bad::Failed => "failure_rate",
            Bad::SlowerThan(_) => "slow_call_rate",
        }
    }

    fn is_bad(&self, call: &Call) -> bool {
        match self.bad {
            Bad::Failed => call.outcome == Outcome::Failure,
            Bad::SlowerThan(limit) => call.duration >= limit,
        }
    }
}

impl Policy for RatePolicy {
    fn record(&mut self, call: &Call) -> Option<Trip> {
        if call.outcome == Outcome::Ignored {
            return None;
        }
        let bad = self.is_bad(call);
        self.window.record(call.at, bad);
        let tally = self.window.tally(call.at);
        if tally.calls < self.minimum_calls {
            return None;
        }
        let rate = tally.bad as f64 / tally.calls as f64;
        (rate >= self.threshold).then(|| Trip {
            policy: self.name(),
            observed: rate,
            threshold: self.threshold,
            calls: tally.calls,
        })
    }

    fn probe_failed(&self, call: &Call) -> bool {
        call.outcome == Outcome::Failure || self.is_bad(call)
    }

    fn reset(&mut self) {
        self.window.clear();
    }
}
