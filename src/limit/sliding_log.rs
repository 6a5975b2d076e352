//! Sliding log: the time of every admitted call in the last `window`; exact, at a memory cost.
//!
//! A call of `n` at `t` is admitted iff the calls logged in `(t − w, t]` plus `n` stay within
//! `limit`, so *every* span of one window length holds at most `limit` calls: the exact answer
//! the counters approximate. The log holds at most `limit` entries (one per admitted call, or per
//! batch of `n`). `retry_after` is when enough of the oldest entries leave the window: exact.
//!
//! ```
//! use std::time::Duration;
//! use sluicegate::clock::ManualClock;
//! use sluicegate::limit::{Limiter, SlidingLog, WindowLimitConfig};
//!
//! let clock = ManualClock::new();
//! let log = SlidingLog::new(WindowLimitConfig { limit: 2, window: Duration::from_secs(1) }, clock.clone())?;
//! log.try_acquire(1)?;
//! clock.advance(Duration::from_millis(400));
//! log.try_acquire(1)?;
//! assert_eq!(log.try_acquire(1).unwrap_err().retry_after, Some(Duration::from_millis(600)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::VecDeque;

use crate::clock::{duration_to_nanos, Clock, MonotonicClock, Nanos};
use crate::rejection::{RejectReason, Rejection};

use super::config::{LimitConfigError, WindowLimitConfig};
use super::state::{MutexStore, StateStore};
use super::{exceeds_capacity, refused, Limiter};

/// A sliding log's state: the admitted calls still in the window, oldest first, and their sum.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogState {
    entries: VecDeque<(Nanos, u64)>,
    sum: u64,
    /// The latest time seen: a clock gone back is read as this.
    seen: Nanos,
}

/// A sliding-log limiter (see the module docs).
#[derive(Debug)]
pub struct SlidingLog<C: Clock = MonotonicClock, St = MutexStore<LogState>> {
    clock: C,
    store: St,
    limit: u64,
    window: Nanos,
}

impl<C: Clock> SlidingLog<C> {
    /// A limiter kept in memory.
    pub fn new(config: WindowLimitConfig, clock: C) -> Result<Self, LimitConfigError> {
        Self::with_store(config, clock, MutexStore::default())
    }
}

impl<C: Clock, St: StateStore<LogState>> SlidingLog<C, St> {
    /// A limiter whose log lives in `store`.
    pub fn with_store(
        config: WindowLimitConfig,
        clock: C,
        store: St,
    ) -> Result<Self, LimitConfigError> {
        config.validate()?;
        Ok(SlidingLog {
            clock,
            store,
            limit: config.limit,
            window: duration_to_nanos(config.window),
        })
    }

    /// Drops the entries that have left the window at `now`; returns the time used.
    fn expire(&self, s: &mut LogState, now: Nanos) -> Nanos {
        let now = now.max(s.seen);
        s.seen = now;
        while let Some(&(at, n)) = s.entries.front() {
            if at.saturating_add(self.window) > now {
                break;
            }
            s.entries.pop_front();
            s.sum -= n;
        }
        now
    }
}

impl<C: Clock, St: StateStore<LogState>> Limiter for SlidingLog<C, St> {
    type Clock = C;

    fn clock(&self) -> &C {
        &self.clock
    }

    fn try_acquire(&self, n: u64) -> Result<(), Rejection> {
        if n > self.limit {
            return Err(exceeds_capacity());
        }
        if n == 0 {
            return Ok(());
        }
        let now = self.clock.now();
        self.store.update(|s| {
            let now = self.expire(s, now);
            if s.sum + n <= self.limit {
                s.entries.push_back((now, n));
                s.sum += n;
                return Ok(());
            }
            let mut left = s.sum;
            let mut at = now;
            for &(t, k) in &s.entries {
                left -= k;
                at = t.saturating_add(self.window);
                if left + n <= self.limit {
                    break;
                }
            }
            Err(refused(
                RejectReason::RateLimited,
                at.saturating_sub(now).max(1),
            ))
        })
    }

    fn available(&self) -> u64 {
        let now = self.clock.now();
        let window = self.window;
        let used = self.store.read(|s| {
            let now = now.max(s.seen);
            s.entries
                .iter()
                .filter(|(at, _)| at.saturating_add(window) > now)
                .map(|(_, k)| k)
                .sum::<u64>()
        });
        self.limit - used
    }

    fn capacity(&self) -> u64 {
        self.limit
    }
}
