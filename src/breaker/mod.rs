//! Circuit breakers: stop calling a downstream that keeps failing, and find out when it is back.
//!
//! A [`Breaker`] decides, per call, whether a downstream is worth trying, from what the calls
//! before it reported. While **closed** every call goes through and its outcome feeds a
//! [`Policy`]: failures in a row (the original design: 5), or the share of failed or slow calls
//! over a window of calls or of time (resilience4j's semantics: a rate counts once the window
//! holds `minimum_calls`, and trips at `rate >= threshold`). When a policy trips the breaker
//! **opens**: calls are refused at once with [`RejectReason::CircuitOpen`] and a `retry_after`
//! that says when probing starts (the original design: 10 s; optionally longer with each reopening,
//! [`BackoffConfig`]). Then it is **half-open**: a bounded number of probes go through and everyone
//! else is refused; the probes' failure rate reopens or closes it.
//!
//! Why it is built this way:
//! * **It cannot stick half-open.** A probe permit that is dropped without a verdict counts as a
//!   failure, and a probe that has not reported within `probe_timeout` counts as failed too, so
//!   the verdict always comes.
//! * **Only the current state's calls move it.** Every change of state starts a new epoch and a
//!   permit carries its own: a call that started closed and ends after the breaker opened, or a
//!   probe that reports after its timeout, is not counted (each outcome is recorded at most once).
//! * **The closed path is cheap.** The state and the end of the open time are mirrored in two
//!   atomics, so granting a permit closed (or refusing one open) reads them and takes no lock.
//!   Reporting an outcome takes the breaker's `parking_lot` mutex once: the windowed policies are
//!   plain counters behind it, which is fine because a breaker guards one downstream (for many,
//!   see [`KeyedBreaker`]).
//!
//! Events: every change of state is a `tracing` `info` event (target `sluicegate::breaker`)
//! with the figures behind it (the policy, its rate and threshold, the probes' results).
//!
//! ```
//! use std::time::Duration;
//! use sluicegate::breaker::{Breaker, BreakerConfig, State};
//! use sluicegate::clock::ManualClock;
//! use sluicegate::RejectReason;
//!
//! let clock = ManualClock::new();
//! let breaker = Breaker::new(BreakerConfig::default(), clock.clone())?; // 5 failures, 10 s
//! for _ in 0..5 {
//!     breaker.try_acquire()?.failure();
//! }
//! let refused = breaker.try_acquire().unwrap_err();
//! assert_eq!(refused.reason, RejectReason::CircuitOpen);
//! assert_eq!(refused.retry_after, Some(Duration::from_secs(10)));
//!
//! clock.advance(Duration::from_secs(10));
//! assert_eq!(breaker.state(), State::HalfOpen);
//! let probes: Vec<_> = (0..3).map(|_| breaker.try_acquire()).collect::<Result<_, _>>()?;
//! assert!(breaker.try_acquire().is_err()); // only 3 probes
//! for probe in probes {
//!     probe.success();
//! }
//! assert_eq!(breaker.state(), State::Closed);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`RejectReason::CircuitOpen`]: crate::RejectReason::CircuitOpen

mod circuit;
mod classify;
mod config;
mod keyed;
mod machine;
mod policy;
mod rate;
mod window;

pub use self::circuit::{Breaker, BreakerPermit, CallError};
pub use self::classify::{Call, Classifier, DefaultClassifier, Outcome};
pub use self::config::{
    BackoffConfig, BreakerConfig, BreakerConfigError, ConsecutiveConfig, HalfOpenConfig,
    PolicyConfig, RateConfig, SlowCallConfig, WindowConfig,
};
pub use self::keyed::{KeyedBreaker, KeyedBreakerConfig};
pub use self::policy::{AnyOf, ConsecutiveFailures, Policy, Trip};
pub use self::rate::RatePolicy;

/// Where a breaker stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// Calls go through; their outcomes are counted.
    Closed,
    /// Calls are refused until the open time is over.
    Open,
    /// A bounded number of probes go through; the rest are refused.
    HalfOpen,
    /// Held open by [`Breaker::force_open`] until [`Breaker::reset`].
    ForcedOpen,
    /// Held closed by [`Breaker::force_closed`] until [`Breaker::reset`]; nothing is counted.
    ForcedClosed,
}

impl State {
    /// A short, stable, snake_case name, for logs and metrics labels.
    pub fn as_str(&self) -> &'static str {
        match self {
            State::Closed => "closed",
            State::Open => "open",
            State::HalfOpen => "half_open",
            State::ForcedOpen => "forced_open",
            State::ForcedClosed => "forced_closed",
        }
    }

    fn code(self) -> u64 {
        match self {
            State::Closed => 0,
            State::Open => 1,
            State::HalfOpen => 2,
            State::ForcedOpen => 3,
            State::ForcedClosed => 4,
        }
    }

    fn from_code(code: u64) -> State {
        match code {
            0 => State::Closed,
            1 => State::Open,
            2 => State::HalfOpen,
            3 => State::ForcedOpen,
            _ => State::ForcedClosed,
        }
    }
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
