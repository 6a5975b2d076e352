//! Concurrency limiter: at most `max_concurrent` permits out at once, with a bounded queue.
//!
//! What it decides from is the number of permits out, one atomic word; a permit gives its share
//! back when dropped and wakes the waiter being served, which then takes it (no polling, no
//! timer but its deadline). When the call will end is unknown, so a refusal has no
//! `retry_after`; it says [`RejectReason::ConcurrencyLimited`], or `TooManyWaiters` when the
//! queue was full.
//!
//! ```
//! use sluicegate::clock::ManualClock;
//! use sluicegate::limit::{ConcurrencyConfig, ConcurrencyLimiter};
//! use sluicegate::RejectReason;
//!
//! let limiter = ConcurrencyLimiter::new(
//!     ConcurrencyConfig { max_concurrent: 2, ..Default::default() },
//!     ManualClock::new(),
//! )?;
//! let a = limiter.try_acquire(2)?;
//! assert_eq!(limiter.try_acquire(1).unwrap_err().reason, RejectReason::ConcurrencyLimited);
//! drop(a);
//! assert_eq!(limiter.available(), 2);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use std::time::Duration;

use crate::clock::{duration_to_nanos, Clock, MonotonicClock, Nanos};
use crate::deadline::NO_DEADLINE;
use crate::rejection::{RejectReason, Rejection};

use super::config::{check, ConcurrencyConfig, LimitConfigError};
use super::exceeds_capacity;
use super::wait::{Attempt, WaitQueue};

#[derive(Debug)]
struct Shared<C> {
    clock: C,
    max: u64,
    out: AtomicU64,
    queue: WaitQueue,
}

impl<C> Shared<C> {
    fn take(&self, n: u64) -> bool {
        self.out
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |out| {
                (out + n <= self.max).then_some(out + n)
            })
            .is_ok()
    }
}

/// A concurrency limiter (see the module docs). Cheap to clone: clones share the permits.
#[derive(Debug)]
pub struct ConcurrencyLimiter<C: Clock = MonotonicClock> {
    shared: Arc<Shared<C>>,
}

impl<C: Clock> Clone for ConcurrencyLimiter<C> {
    fn clone(&self) -> Self {
        ConcurrencyLimiter {
            shared: self.shared.clone(),
        }
    }
}

impl<C: Clock> ConcurrencyLimiter<C> {
    /// A limiter with every permit free.
    pub fn new(config: ConcurrencyConfig, clock: C) -> Result<Self, LimitConfigError> {
        config.validate()?;
        check(
            config.wait.max_waiters == 0 || !config.wait.max_wait.is_zero(),
            "wait.max_wait",
            humantime::format_duration(config.wait.max_wait),
            "must be longer than 0 when `wait.max_waiters` is above 0",
        )?;
        Ok(ConcurrencyLimiter {
            shared: Arc::new(Shared {
                clock,
                max: config.max_concurrent,
                out: AtomicU64::new(0),
                queue: WaitQueue::new(&config.wait, RejectReason::ConcurrencyLimited),
            }),
        })
    }

    /// `n` permits at once, or refused.
    pub fn try_acquire(&self, n: u64) -> Result<ConcurrencyPermit<C>, Rejection> {
        if n > self.shared.max {
            return Err(exceeds_capacity());
        }
        if self.shared.take(n) {
            Ok(self.permit(n))
        } else {
            Err(Rejection::new(RejectReason::ConcurrencyLimited))
        }
    }

    /// `n` permits, waiting for them up to `max_wait` if there is room among the waiters.
    pub async fn acquire(&self, n: u64) -> Result<ConcurrencyPermit<C>, Rejection> {
        self.acquire_before(n, NO_DEADLINE).await
    }

    /// [`ConcurrencyLimiter::acquire`], blocking the thread.
    pub fn acquire_blocking(&self, n: u64) -> Result<ConcurrencyPermit<C>, Rejection> {
        self.acquire_blocking_before(n, NO_DEADLINE)
    }

    /// [`ConcurrencyLimiter::acquire`] for a caller with a deadline (the clock's time, see
    /// [`crate::deadline`]): a caller still waiting at its deadline (before `max_wait`) is
    /// refused there with [`RejectReason::DeadlineExceeded`].
    pub async fn acquire_with_deadline(
        &self,
        n: u64,
        deadline: Duration,
    ) -> Result<ConcurrencyPermit<C>, Rejection> {
        self.acquire_before(n, duration_to_nanos(deadline)).await
    }

    /// [`ConcurrencyLimiter::acquire_with_deadline`], blocking the thread.
    pub fn acquire_blocking_with_deadline(
        &self,
        n: u64,
        deadline: Duration,
    ) -> Result<ConcurrencyPermit<C>, Rejection> {
        self.acquire_blocking_before(n, duration_to_nanos(deadline))
    }

    pub(crate) async fn acquire_before(
        &self,
        n: u64,
        deadline: Nanos,
    ) -> Result<ConcurrencyPermit<C>, Rejection> {
        if n > self.shared.max {
            return Err(exceeds_capacity());
        }
        let shared = &self.shared;
        let n = shared
            .queue
            .wait(&shared.clock, deadline, |_| self.attempt(n))
            .await?;
        Ok(self.permit(n))
    }

    pub(crate) fn acquire_blocking_before(
        &self,
        n: u64,
        deadline: Nanos,
    ) -> Result<ConcurrencyPermit<C>, Rejection> {
        if n > self.shared.max {
            return Err(exceeds_capacity());
        }
        let shared = &self.shared;
        let n = shared
            .queue
            .wait_blocking(&shared.clock, deadline, |_| self.attempt(n))?;
        Ok(self.permit(n))
    }

    fn attempt(&self, n: u64) -> Attempt<u64> {
        if self.shared.take(n) {
            Attempt::Done(n)
        } else {
            Attempt::OnRelease(Rejection::new(RejectReason::ConcurrencyLimited))
        }
    }

    fn permit(&self, n: u64) -> ConcurrencyPermit<C> {
        ConcurrencyPermit {
            shared: self.shared.clone(),
            n,
        }
    }

    /// Permits free now.
    pub fn available(&self) -> u64 {
        self.shared.max - self.shared.out.load(Ordering::Acquire)
    }

    /// Permits out now.
    pub fn in_use(&self) -> u64 {
        self.shared.out.load(Ordering::Acquire)
    }

    /// The most permits out at once.
    pub fn capacity(&self) -> u64 {
        self.shared.max
    }

    /// How many callers are waiting now.
    pub fn waiters(&self) -> usize {
        self.shared.queue.len()
    }
}

/// Permits from a [`ConcurrencyLimiter`], given back when dropped. `Send + 'static`.
#[derive(Debug)]
#[must_use = "dropping the permit gives it back at once"]
pub struct ConcurrencyPermit<C: Clock = MonotonicClock> {
    shared: Arc<Shared<C>>,
    n: u64,
}

impl<C: Clock> ConcurrencyPermit<C> {
    /// How many permits this holds.
    pub fn count(&self) -> u64 {
        self.n
    }
}

impl<C: Clock> Drop for ConcurrencyPermit<C> {
    fn drop(&mut self) {
        if self.n > 0 {
            self.shared.out.fetch_sub(self.n, Ordering::AcqRel);
            self.shared.queue.notify();
        }
    }
}
