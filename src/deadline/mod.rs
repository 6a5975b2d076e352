//! Deadlines: how long a request may take, and who gave up on it when it did not make it.
//!
//! A request may carry an absolute deadline in the gate clock's time
//! ([`Request::with_deadline`](crate::Request::with_deadline); [`after`] computes one from a
//! timeout), or get one from the `timeout` of its [policy](crate::policy) (the earlier of the
//! two holds); the tower layer reads a gRPC request's `grpc-timeout` header
//! ([`parse_grpc_timeout`]). Every wait on the request's way is bounded by it: the gate's wait
//! for a token, a rate limiter's queue ([`Waiting`](crate::limit::Waiting)), a concurrency
//! limiter's queue. A wait that the deadline would end is refused at once where its end is known
//! (a token reserved for later than the deadline) and at the deadline itself otherwise (a queue
//! for a permit), with [`RejectReason::DeadlineExceeded`](crate::RejectReason::DeadlineExceeded).
//! A policy with a `timeout` also bounds the call it admits: a handler still running at the
//! deadline is dropped there, and the call is a timeout.
//!
//! Two things can end a request early, and they are told apart and counted apart: **the
//! deadline** (our timeout: HTTP 504, gRPC `DEADLINE_EXCEEDED`) and **the caller** (a
//! cancellation: HTTP 408, gRPC `CANCELLED`), whichever fired first ([`Ended`]). A caller
//! cancels by dropping the future, or, when it must still be answered, through a [`Cancel`]
//! signal carried by the request ([`Request::with_cancel`](crate::Request::with_cancel)).
//!
//! Why: work whose caller has gone is the purest waste an overloaded service can do. A request
//! that waits past its deadline is answered by nobody; one that runs past it holds a slot that a
//! live request needs. Refusing early also keeps the reason honest: a timeout is ours, a
//! cancellation is the caller's, and the two mean different things on a dashboard.
//! See `docs/design/deadline.md`.
//!
//! ```
//! use std::time::Duration;
//! use sluicegate::clock::ManualClock;
//! use sluicegate::limit::{ConcurrencyConfig, ConcurrencyLimiter};
//! use sluicegate::{deadline, RejectReason};
//!
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let clock = ManualClock::new();
//! let limiter = ConcurrencyLimiter::new(ConcurrencyConfig { max_concurrent: 1, ..Default::default() }, clock.clone())?;
//! let busy = limiter.try_acquire(1)?;
//! // Queue for the one permit, but only until 50 ms from now (the queue itself allows 500 ms).
//! let at = deadline::after(&clock, Duration::from_millis(50));
//! let waiter = limiter.clone();
//! let wait = tokio::spawn(async move { waiter.acquire_with_deadline(1, at).await.map(drop) });
//! clock.wait_for_sleepers(1);
//! clock.advance(Duration::from_millis(50));
//! assert_eq!(wait.await?.unwrap_err().reason, RejectReason::DeadlineExceeded);
//! drop(busy);
//! # Ok(())
//! # }
//! ```

use std::time::Duration;

use crate::clock::{duration_to_nanos, Clock, Nanos};

mod cancel;
mod grpc;
mod within;

#[cfg(feature = "tower")]
pub(crate) use self::cancel::Listener;
pub use self::cancel::{Cancel, Cancelled};
pub use self::grpc::parse_grpc_timeout;
pub(crate) use self::within::{attribute_drop, within_nanos};
pub use self::within::{within, Ended};

/// "No deadline", in the clock's nanoseconds: the end of time (584 years from the origin).
pub(crate) const NO_DEADLINE: Nanos = u64::MAX;

/// The deadline `timeout` from now on `clock`, for [`Request::with_deadline`](crate::Request::with_deadline).
/// Saturates at the end of the clock's time.
pub fn after<C: Clock>(clock: &C, timeout: Duration) -> Duration {
    Duration::from_nanos(clock.now().saturating_add(duration_to_nanos(timeout)))
}

/// The deadline `timeout` from `now`, in nanoseconds, saturating below [`NO_DEADLINE`].
pub(crate) fn nanos_after(now: Nanos, timeout: Nanos) -> Nanos {
    now.saturating_add(timeout).min(NO_DEADLINE - 1)
}
