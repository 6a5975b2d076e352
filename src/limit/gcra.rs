//! GCRA (the generic cell rate algorithm): `rate` calls every `per`, `burst` at once.
//!
//! The whole state is one word, the theoretical arrival time (TAT) of the next conforming call,
//! updated with a compare-and-swap through an [`AtomicStore`]: lock-free. A call of `n` at `t`
//! conforms iff `max(TAT, t) + n·T <= t + burst·T`, with `T = ceil(per / rate)` (rounded up, so
//! it never runs faster than its rate); so in any span `d` it admits at most `burst + d/T` calls,
//! and `retry_after` is the exact moment the call would conform. Same arithmetic as the gate's
//! token bucket, with `n` and a pluggable store.
//!
//! ```
//! use std::time::Duration;
//! use sluicegate::clock::ManualClock;
//! use sluicegate::limit::{Gcra, GcraConfig, Limiter};
//!
//! let clock = ManualClock::new();
//! let gcra = Gcra::new(GcraConfig { rate: 10, per: Duration::from_secs(1), burst: 3 }, clock.clone())?;
//! gcra.try_acquire(3)?;
//! assert_eq!(gcra.try_acquire(2).unwrap_err().retry_after, Some(Duration::from_millis(200)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::clock::{duration_to_nanos, Clock, MonotonicClock, Nanos};
use crate::rejection::{RejectReason, Rejection};

use super::config::{GcraConfig, LimitConfigError};
use super::state::{AtomicStore, StateStore};
use super::{exceeds_capacity, refused, Limiter};

/// A GCRA limiter (see the module docs).
#[derive(Debug)]
pub struct Gcra<C: Clock = MonotonicClock, St = AtomicStore> {
    clock: C,
    store: St,
    step: GcraStep,
    /// `burst · interval`, saturating: worked out once rather than on every call.
    window: Nanos,
}

/// GCRA's arithmetic on a TAT, apart from where the TAT is kept: shared by [`Gcra`] and the
/// keyed limiters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GcraStep {
    /// Nanoseconds per call (at least 1).
    pub(crate) interval: Nanos,
    /// Calls at once.
    pub(crate) burst: u64,
}

impl GcraStep {
    /// The step of a validated configuration.
    pub(crate) fn new(config: &GcraConfig) -> Self {
        GcraStep {
            interval: duration_to_nanos(config.per).div_ceil(config.rate).max(1),
            burst: config.burst,
        }
    }

    /// The TAT after admitting `n` at `now`, or the refusal with the exact wait. `n` must not
    /// exceed the burst.
    pub(crate) fn take(&self, tat: Nanos, now: Nanos, n: u64) -> Result<Nanos, Rejection> {
        self.advance(tat, now, n, self.window())
            .map_err(|conforms_at| rate_limited(conforms_at, now))
    }

    /// `burst · interval`, saturating: how far ahead of now the TAT may run.
    fn window(&self) -> Nanos {
        self.burst.saturating_mul(self.interval)
    }

    /// The TAT after admitting `n` at `now`, or the moment at which the call would conform
    /// (`window` is [`GcraStep::window`]). Kept apart from [`GcraStep::take`] so that a
    /// compare-and-swap loop carries one word out and the refusal is built once, after the loop.
    #[inline]
    fn advance(&self, tat: Nanos, now: Nanos, n: u64, window: Nanos) -> Result<Nanos, Nanos> {
        let after = tat.max(now).saturating_add(n.saturating_mul(self.interval));
        let conforms_at = after.saturating_sub(window);
        if conforms_at <= now && after < u64::MAX {
            Ok(after)
        } else {
            Err(conforms_at)
        }
    }

    /// Calls that `take` would admit at `now`.
    pub(crate) fn available(&self, tat: Nanos, now: Nanos) -> u64 {
        let ahead = tat.saturating_sub(now);
        self.window().saturating_sub(ahead) / self.interval
    }
}

/// The refusal of a call that would conform at `conforms_at` (at least a nanosecond from now).
#[inline]
fn rate_limited(conforms_at: Nanos, now: Nanos) -> Rejection {
    refused(
        RejectReason::RateLimited,
        conforms_at.saturating_sub(now).max(1),
    )
}

impl<C: Clock> Gcra<C> {
    /// A limiter kept in one atomic word, idle (a full burst available).
    pub fn new(config: GcraConfig, clock: C) -> Result<Self, LimitConfigError> {
        Self::with_store(config, clock, AtomicStore::default())
    }
}

impl<C: Clock, St: StateStore<u64>> Gcra<C, St> {
    /// A limiter whose TAT lives in `store`.
    pub fn with_store(config: GcraConfig, clock: C, store: St) -> Result<Self, LimitConfigError> {
        config.validate()?;
        let step = GcraStep::new(&config);
        Ok(Gcra {
            clock,
            store,
            window: step.window(),
            step,
        })
    }

    /// Nanoseconds between two calls at the sustained rate.
    pub fn interval(&self) -> Nanos {
        self.step.interval
    }
}

impl<C: Clock, St: StateStore<u64>> Limiter for Gcra<C, St> {
    type Clock = C;

    fn clock(&self) -> &C {
        &self.clock
    }

    fn try_acquire(&self, n: u64) -> Result<(), Rejection> {
        if n > self.step.burst {
            return Err(exceeds_capacity());
        }
        let now = self.clock.now();
        self.store
            .update(|tat| {
                *tat = self.step.advance(*tat, now, n, self.window)?;
                Ok(())
            })
            .map_err(|conforms_at| rate_limited(conforms_at, now))
    }

    fn available(&self) -> u64 {
        let now = self.clock.now();
        self.store.read(|tat| self.step.available(*tat, now))
    }

    fn capacity(&self) -> u64 {
        self.step.burst
    }
}
