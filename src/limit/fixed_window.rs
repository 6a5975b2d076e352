//! Fixed window: at most `limit` calls in each window `[k·w, (k+1)·w)` of the clock.
//!
//! The cheapest count there is (a window number and a counter), and exact about its own windows;
//! the price is the edge: up to `2·limit` calls can pass in a span of one window that straddles
//! two. `retry_after` is the start of the next window (exact: the count starts again there).
//!
//! ```
//! use std::time::Duration;
//! use sluicegate::clock::ManualClock;
//! use sluicegate::limit::{FixedWindow, Limiter, WindowLimitConfig};
//!
//! let clock = ManualClock::new();
//! clock.advance(Duration::from_millis(700));
//! let limiter = FixedWindow::new(WindowLimitConfig { limit: 2, window: Duration::from_secs(1) }, clock)?;
//! limiter.try_acquire(2)?;
//! assert_eq!(limiter.try_acquire(1).unwrap_err().retry_after, Some(Duration::from_millis(300)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::clock::{duration_to_nanos, Clock, MonotonicClock, Nanos};
use crate::rejection::{RejectReason, Rejection};

use super::config::{LimitConfigError, WindowLimitConfig};
use super::state::{MutexStore, StateStore};
use super::{exceeds_capacity, refused, Limiter};

/// A fixed window's state: which window, and how many calls it has counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WindowState {
    index: u64,
    count: u64,
}

/// A fixed-window limiter (see the module docs).
#[derive(Debug)]
pub struct FixedWindow<C: Clock = MonotonicClock, St = MutexStore<WindowState>> {
    clock: C,
    store: St,
    limit: u64,
    window: Nanos,
}

impl<C: Clock> FixedWindow<C> {
    /// A limiter kept in memory.
    pub fn new(config: WindowLimitConfig, clock: C) -> Result<Self, LimitConfigError> {
        Self::with_store(config, clock, MutexStore::default())
    }
}

impl<C: Clock, St: StateStore<WindowState>> FixedWindow<C, St> {
    /// A limiter whose state lives in `store`.
    pub fn with_store(
        config: WindowLimitConfig,
        clock: C,
        store: St,
    ) -> Result<Self, LimitConfigError> {
        config.validate()?;
        Ok(FixedWindow {
            clock,
            store,
            limit: config.limit,
            window: duration_to_nanos(config.window),
        })
    }

    /// The count at `now` (a clock gone back stays in the window it had reached).
    fn current(&self, s: &WindowState, now: Nanos) -> WindowState {
        let index = now / self.window;
        if index > s.index {
            WindowState { index, count: 0 }
        } else {
            *s
        }
    }
}

impl<C: Clock, St: StateStore<WindowState>> Limiter for FixedWindow<C, St> {
    type Clock = C;

    fn clock(&self) -> &C {
        &self.clock
    }

    fn try_acquire(&self, n: u64) -> Result<(), Rejection> {
        if n > self.limit {
            return Err(exceeds_capacity());
        }
        let now = self.clock.now();
        self.store.update(|s| {
            *s = self.current(s, now);
            if s.count + n <= self.limit {
                s.count += n;
                Ok(())
            } else {
                let next = (s.index + 1).saturating_mul(self.window);
                Err(refused(
                    RejectReason::RateLimited,
                    next.saturating_sub(now).max(1),
                ))
            }
        })
    }

    fn available(&self) -> u64 {
        let now = self.clock.now();
        self.limit - self.store.read(|s| self.current(s, now).count)
    }

    fn capacity(&self) -> u64 {
        self.limit
    }
}
