//! Token bucket: `refill` tokens every `per`, at most `capacity` banked; a call takes `n`.
//!
//! The bucket decides from how much it has banked since its last call, counted exactly: credit
//! is kept in units of `1/per_ns` of a token (a `u128`), so a refill rate that does not divide
//! the period loses nothing to rounding and `retry_after` is the exact nanosecond at which `n`
//! tokens exist. In any span `t` it admits at most `capacity + refill·t/per` tokens.
//!
//! ```
//! use std::time::Duration;
//! use sluicegate::clock::ManualClock;
//! use sluicegate::limit::{Limiter, TokenBucket, TokenBucketConfig};
//!
//! let clock = ManualClock::new();
//! let config = TokenBucketConfig { capacity: 2, refill: 10, per: Duration::from_secs(1) };
//! let bucket = TokenBucket::new(config, clock.clone())?;
//! bucket.try_acquire(2)?;
//! let refused = bucket.try_acquire(1).unwrap_err();
//! assert_eq!(refused.retry_after, Some(Duration::from_millis(100)));
//! clock.advance(Duration::from_millis(100));
//! assert_eq!(bucket.available(), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::clock::{duration_to_nanos, Clock, MonotonicClock, Nanos};
use crate::rejection::{RejectReason, Rejection};

use super::config::{LimitConfigError, TokenBucketConfig};
use super::state::{MutexStore, StateStore};
use super::{exceeds_capacity, refused, Limiter};

/// A token bucket's state: the credit banked and when it was counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenState {
    /// Credit in units of `1 / per_ns` token; `None` until first used (a new bucket is full).
    credit: Option<u128>,
    at: Nanos,
}

/// A token bucket (see the module docs).
#[derive(Debug)]
pub struct TokenBucket<C: Clock = MonotonicClock, St = MutexStore<TokenState>> {
    clock: C,
    store: St,
    capacity: u64,
    refill: u128,
    per: u128,
}

impl<C: Clock> TokenBucket<C> {
    /// A full bucket kept in memory.
    pub fn new(config: TokenBucketConfig, clock: C) -> Result<Self, LimitConfigError> {
        Self::with_store(config, clock, MutexStore::default())
    }
}

impl<C: Clock, St: StateStore<TokenState>> TokenBucket<C, St> {
    /// A bucket whose state lives in `store`.
    pub fn with_store(
        config: TokenBucketConfig,
        clock: C,
        store: St,
    ) -> Result<Self, LimitConfigError> {
        config.validate()?;
        Ok(TokenBucket {
            clock,
            store,
            capacity: config.capacity,
            refill: u128::from(config.refill),
            per: u128::from(duration_to_nanos(config.per)),
        })
    }

    /// The credit at `now`, given the state (time gone backwards counts as none passed).
    fn credit(&self, s: &TokenState, now: Nanos) -> u128 {
        let full = u128::from(self.capacity) * self.per;
        match s.credit {
            None => full,
            Some(c) => {
                let elapsed = u128::from(now.saturating_sub(s.at));
                c.saturating_add(elapsed * self.refill).min(full)
            }
        }
    }
}

impl<C: Clock, St: StateStore<TokenState>> Limiter for TokenBucket<C, St> {
    type Clock = C;

    fn clock(&self) -> &C {
        &self.clock
    }

    fn try_acquire(&self, n: u64) -> Result<(), Rejection> {
        if n > self.capacity {
            return Err(exceeds_capacity());
        }
        let now = self.clock.now();
        let need = u128::from(n) * self.per;
        self.store.update(|s| {
            let credit = self.credit(s, now);
            *s = TokenState {
                credit: Some(credit),
                at: s.at.max(now),
            };
            if credit >= need {
                s.credit = Some(credit - need);
                Ok(())
            } else {
                let wait = (need - credit).div_ceil(self.refill);
                Err(refused(
                    RejectReason::RateLimited,
                    u64::try_from(wait).unwrap_or(u64::MAX),
                ))
            }
        })
    }

    fn available(&self) -> u64 {
        let now = self.clock.now();
        let credit = self.store.read(|s| self.credit(s, now));
        u64::try_from(credit / self.per).unwrap_or(u64::MAX)
    }

    fn capacity(&self) -> u64 {
        self.capacity
    }
}
