//! Sliding-window counter: the previous window's count, weighted by how much of it still
//! overlaps the last `window`, plus the current window's count.
//!
//! A call of `n` at offset `e` into window `k` is admitted iff
//! `prev·(w − e)/w + cur + n <= limit`, computed exactly in integers. It costs what a fixed window
//! costs (three numbers) and smooths its edge, but it assumes the previous window's calls were
//! spread evenly. **Bound:** every aligned window admits at most `limit`, and a span of one window
//! length starting at offset `f` into a window admits at most `limit·(1 + f/w)` (so at most
//! `2·limit`, reached only when the previous window's calls all came at its very end). For exact
//! counts use [`SlidingLog`](super::SlidingLog). `retry_after` solves the inequality for the
//! earliest `e` (in this window or the next), so it is exact.
//!
//! ```
//! use std::time::Duration;
//! use sluicegate::clock::ManualClock;
//! use sluicegate::limit::{Limiter, SlidingWindow, WindowLimitConfig};
//!
//! let clock = ManualClock::new();
//! let limiter = SlidingWindow::new(WindowLimitConfig { limit: 10, window: Duration::from_secs(1) }, clock.clone())?;
//! limiter.try_acquire(10)?;
//! clock.advance(Duration::from_secs(1));
//! // All 10 still weigh fully at the start of the next window; half of them after 500 ms.
//! assert_eq!(limiter.try_acquire(5).unwrap_err().retry_after, Some(Duration::from_millis(500)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::clock::{duration_to_nanos, Clock, MonotonicClock, Nanos};
use crate::rejection::{RejectReason, Rejection};

use super::config::{LimitConfigError, WindowLimitConfig};
use super::state::{MutexStore, StateStore};
use super::{exceeds_capacity, refused, Limiter};

/// A sliding-window counter's state: the current window, its count and the previous one's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SlidingState {
    index: u64,
    prev: u64,
    cur: u64,
}

/// A sliding-window counter (see the module docs).
#[derive(Debug)]
pub struct SlidingWindow<C: Clock = MonotonicClock, St = MutexStore<SlidingState>> {
    clock: C,
    store: St,
    limit: u64,
    window: Nanos,
}

impl<C: Clock> SlidingWindow<C> {
    /// A limiter kept in memory.
    pub fn new(config: WindowLimitConfig, clock: C) -> Result<Self, LimitConfigError> {
        Self::with_store(config, clock, MutexStore::default())
    }
}

impl<C: Clock, St: StateStore<SlidingState>> SlidingWindow<C, St> {
    /// A limiter whose state lives in `store`.
    pub fn with_store(
        config: WindowLimitConfig,
        clock: C,
        store: St,
    ) -> Result<Self, LimitConfigError> {
        config.validate()?;
        Ok(SlidingWindow {
            clock,
            store,
            limit: config.limit,
            window: duration_to_nanos(config.window),
        })
    }

    /// The state rolled forward to `now`, and the offset into its window (a clock gone back
    /// reads as the start of the window it had reached).
    fn at(&self, s: &SlidingState, now: Nanos) -> (SlidingState, Nanos) {
        let index = now / self.window;
        let rolled = if index <= s.index {
            *s
        } else if index == s.index + 1 {
            SlidingState {
                index,
                prev: s.cur,
                cur: 0,
            }
        } else {
            SlidingState {
                index,
                prev: 0,
                cur: 0,
            }
        };
        let offset = if index < s.index {
            0
        } else {
            now % self.window
        };
        (rolled, offset)
    }

    /// Whether `prev·(w − e) + total·w <= limit·w`.
    fn fits(&self, prev: u64, total: u64, e: Nanos) -> bool {
        let w = u128::from(self.window);
        u128::from(prev) * (w - u128::from(e)) + u128::from(total) * w <= u128::from(self.limit) * w
    }

    /// The earliest offset `e` into a window with counts `prev`, `cur` at which `n` fits, if
    /// one exists before the window ends.
    fn earliest(&self, prev: u64, cur: u64, n: u64) -> Option<Nanos> {
        let room = self.limit.checked_sub(cur + n)?;
        if prev == 0 {
            return Some(0);
        }
        let w = u128::from(self.window);
        // prev·(w − e) <= room·w  ⇔  e >= w − floor(room·w / prev)
        let keep = (u128::from(room) * w / u128::from(prev)).min(w);
        let e = w - keep;
        (e < w).then_some(e as Nanos)
    }
}

impl<C: Clock, St: StateStore<SlidingState>> Limiter for SlidingWindow<C, St> {
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
            let (mut cur, e) = self.at(s, now);
            if self.fits(cur.prev, cur.cur + n, e) {
                cur.cur += n;
                *s = cur;
                return Ok(());
            }
            *s = cur;
            let start = cur.index.saturating_mul(self.window);
            let at = match self.earliest(cur.prev, cur.cur, n) {
                Some(at) => start + at,
                // Next window: this one's count becomes the previous (n <= limit, so it fits
                // by the end of that window at the latest).
                None => {
                    let next = start.saturating_add(self.window);
                    next.saturating_add(self.earliest(cur.cur, 0, n).unwrap_or(self.window))
                }
            };
            Err(refused(
                RejectReason::RateLimited,
                at.saturating_sub(now).max(1),
            ))
        })
    }

    fn available(&self) -> u64 {
        let now = self.clock.now();
        let (s, e) = self.store.read(|s| self.at(s, now));
        let w = u128::from(self.window);
        let used = (u128::from(s.prev) * (w - u128::from(e))).div_ceil(w) + u128::from(s.cur);
        u64::try_from(u128::from(self.limit).saturating_sub(used)).unwrap_or(0)
    }

    fn capacity(&self) -> u64 {
        self.limit
    }
}
