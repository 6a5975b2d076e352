//! Limiters: how many calls to let through per span of time, or at once.
//!
//! Each limiter decides from a small state and the clock: a token bucket or GCRA (a rate with a
//! burst), a fixed window, a sliding-window counter or a sliding log (a count per window, from
//! cheapest to exact), a quota per period (a day, a month, with an overdraw alert), and a
//! concurrency limiter (permits out at once). Every rate limiter answers the same three questions
//! through [`Limiter`]: `try_acquire(n)` (admit `n` now, or refuse with the exact time at which `n`
//! would be admitted if nothing else happens), `available()`, `capacity()`. A request for more
//! than the capacity is refused with [`RejectReason::ExceedsCapacity`] and never admitted.
//!
//! Why it is built this way:
//! * **Algorithm apart from storage.** Each algorithm is a pure step on its state, applied by a
//!   [`StateStore`] ([`AtomicStore`]: one word and a compare-and-swap; [`TokenStore`]: the token
//!   bucket's, one or two words and a compare-and-swap; [`MutexStore`]: a short lock), so a keyed
//!   store or Redis can hold the state later, as in governor.
//! * **Waiting sleeps until a computed time.** [`Waiting`] (and the concurrency limiter's own
//!   queue) bounds waits in time and in number, serves FIFO or newest first, and sleeps on the
//!   [`Clock`] until the moment the limiter named, or until a permit is
//!   released: no polling, and under a [`ManualClock`](crate::clock::ManualClock) exact.
//!
//! Refusals say [`RejectReason::RateLimited`], [`RejectReason::QuotaExhausted`],
//! [`RejectReason::ConcurrencyLimited`] or [`RejectReason::TooManyWaiters`].
//!
//! ```
//! use std::time::Duration;
//! use sluicegate::clock::ManualClock;
//! use sluicegate::limit::{Limiter, SlidingLog, WindowLimitConfig};
//! use sluicegate::RejectReason;
//!
//! let clock = ManualClock::new();
//! let limiter = SlidingLog::new(WindowLimitConfig { limit: 3, window: Duration::from_secs(1) }, clock.clone())?;
//! limiter.try_acquire(3)?;
//! let refused = limiter.try_acquire(1).unwrap_err();
//! assert_eq!((refused.reason, refused.retry_after), (RejectReason::RateLimited, Some(Duration::from_secs(1))));
//! assert_eq!(limiter.try_acquire(4).unwrap_err().reason, RejectReason::ExceedsCapacity);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::time::Duration;

use crate::clock::{Clock, Nanos};
use crate::rejection::{RejectReason, Rejection};

mod concurrency;
mod config;
mod fixed_window;
pub(crate) mod gcra;
mod quota;
mod sliding_log;
mod sliding_window;
mod state;
mod token_bucket;
pub(crate) mod units;
mod wait;

pub use self::concurrency::{ConcurrencyLimiter, ConcurrencyPermit};
pub(crate) use self::config::check;
pub use self::config::{
    ConcurrencyConfig, GcraConfig, LimitConfigError, QuotaConfig, TokenBucketConfig, WaitConfig,
    WaitOrder, WindowLimitConfig,
};
pub use self::fixed_window::{FixedWindow, WindowState};
pub use self::gcra::Gcra;
pub use self::quota::{Quota, QuotaAlert, QuotaState};
pub use self::sliding_log::{LogState, SlidingLog};
pub use self::sliding_window::{SlidingState, SlidingWindow};
pub use self::state::{AtomicStore, MutexStore, StateStore};
pub use self::token_bucket::{TokenBucket, TokenState, TokenStore};
pub use self::wait::Waiting;

/// What every rate limiter answers.
pub trait Limiter: Send + Sync {
    /// The clock it runs on.
    type Clock: Clock;

    /// The clock it runs on.
    fn clock(&self) -> &Self::Clock;

    /// Admits `n` now, or refuses: with the exact time until `n` would be admitted if nothing
    /// else happens, or with [`RejectReason::ExceedsCapacity`] if `n` is above the capacity.
    fn try_acquire(&self, n: u64) -> Result<(), Rejection>;

    /// How many would be admitted now.
    fn available(&self) -> u64;

    /// The most ever admitted at once (the largest `n` that can succeed).
    fn capacity(&self) -> u64;
}

/// A refusal that would succeed `wait` nanoseconds from now.
#[inline]
pub(crate) fn refused(reason: RejectReason, wait: Nanos) -> Rejection {
    // `Duration::from_nanos` divides by 10^9 (a multiply and shifts on the refusal path); a wait
    // under a second, what most refusals of a rate limiter name, needs no division.
    let retry_after = match u32::try_from(wait) {
        Ok(ns) if ns < 1_000_000_000 => Duration::new(0, ns),
        _ => Duration::from_nanos(wait),
    };
    Rejection {
        reason,
        retry_after: Some(retry_after),
    }
}

/// The refusal of a request above the capacity.
pub(crate) fn exceeds_capacity() -> Rejection {
    Rejection::new(RejectReason::ExceedsCapacity)
}
