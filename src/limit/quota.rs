//! Quota: at most `limit` calls per fixed period (a day, a month of a given length), with an
//! overdraw alert once a share of it is used.
//!
//! Periods are fixed slices `[k·p, (k+1)·p)` of the limiter's clock (its origin is period 0's
//! start; with [`MonotonicClock`] that is when the clock was made), counted like a fixed window.
//! Once the period's use reaches `alert_at · limit` (rounded up), the limiter logs a `tracing`
//! warning, sets the flag [`Quota::alerted`] and calls the callback given to [`Quota::on_alert`],
//! once per period. A refusal says [`RejectReason::QuotaExhausted`], and its `retry_after` is the
//! start of the next period (exact).
//!
//! ```
//! use std::time::Duration;
//! use sluicegate::clock::ManualClock;
//! use sluicegate::limit::{Limiter, Quota, QuotaConfig};
//! use sluicegate::RejectReason;
//!
//! let clock = ManualClock::new();
//! let day = Duration::from_secs(86_400);
//! let quota = Quota::new(QuotaConfig { limit: 10, period: day, alert_at: 0.8 }, clock)?;
//! quota.try_acquire(7)?;
//! assert!(!quota.alerted());
//! quota.try_acquire(1)?; // 8 of 10: the alert fires
//! assert!(quota.alerted());
//! quota.try_acquire(2)?;
//! let refused = quota.try_acquire(1).unwrap_err();
//! assert_eq!((refused.reason, refused.retry_after), (RejectReason::QuotaExhausted, Some(day)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::sync::Arc;

use crate::clock::{duration_to_nanos, Clock, MonotonicClock, Nanos};
use crate::rejection::{RejectReason, Rejection};

use super::config::{LimitConfigError, QuotaConfig};
use super::state::{MutexStore, StateStore};
use super::{exceeds_capacity, refused, Limiter};

/// A quota's state: the period, its use, and whether its alert has fired.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QuotaState {
    index: u64,
    used: u64,
    alerted: bool,
}

/// What the overdraw callback is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaAlert {
    /// The period's number (0 is the first).
    pub period: u64,
    /// Calls used in it so far.
    pub used: u64,
    /// The quota.
    pub limit: u64,
}

type AlertFn = Arc<dyn Fn(QuotaAlert) + Send + Sync>;

/// A quota per period (see the module docs).
pub struct Quota<C: Clock = MonotonicClock, St = MutexStore<QuotaState>> {
    clock: C,
    store: St,
    limit: u64,
    period: Nanos,
    alert_at: u64,
    on_alert: Option<AlertFn>,
}

impl<C: Clock, St> fmt::Debug for Quota<C, St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Quota")
            .field("limit", &self.limit)
            .field("period", &self.period)
            .field("alert_at", &self.alert_at)
            .finish_non_exhaustive()
    }
}

impl<C: Clock> Quota<C> {
    /// A quota kept in memory.
    pub fn new(config: QuotaConfig, clock: C) -> Result<Self, LimitConfigError> {
        Self::with_store(config, clock, MutexStore::default())
    }
}

impl<C: Clock, St: StateStore<QuotaState>> Quota<C, St> {
    /// A quota whose state lives in `store`.
    pub fn with_store(config: QuotaConfig, clock: C, store: St) -> Result<Self, LimitConfigError> {
        config.validate()?;
        let alert_at = (config.alert_at * config.limit as f64 - 1e-9)
            .ceil()
            .max(1.0) as u64;
        Ok(Quota {
            clock,
            store,
            limit: config.limit,
            period: duration_to_nanos(config.period),
            alert_at: alert_at.min(config.limit),
            on_alert: None,
        })
    }

    /// Calls `callback` (besides the warning) when a period's use crosses the alert share.
    pub fn on_alert(mut self, callback: impl Fn(QuotaAlert) + Send + Sync + 'static) -> Self {
        self.on_alert = Some(Arc::new(callback));
        self
    }

    /// Whether the current period's use has crossed the alert share.
    pub fn alerted(&self) -> bool {
        let now = self.clock.now();
        self.store.read(|s| self.current(s, now).alerted)
    }

    /// Calls used in the current period.
    pub fn used(&self) -> u64 {
        let now = self.clock.now();
        self.store.read(|s| self.current(s, now).used)
    }

    fn current(&self, s: &QuotaState, now: Nanos) -> QuotaState {
        let index = now / self.period;
        if index > s.index {
            QuotaState {
                index,
                ..QuotaState::default()
            }
        } else {
            *s
        }
    }
}

impl<C: Clock, St: StateStore<QuotaState>> Limiter for Quota<C, St> {
    type Clock = C;

    fn clock(&self) -> &C {
        &self.clock
    }

    fn try_acquire(&self, n: u64) -> Result<(), Rejection> {
        if n > self.limit {
            return Err(exceeds_capacity());
        }
        let now = self.clock.now();
        let (result, alert) = self.store.update(|s| {
            *s = self.current(s, now);
            if s.used + n > self.limit {
                let next = (s.index + 1).saturating_mul(self.period);
                let r = refused(
                    RejectReason::QuotaExhausted,
                    next.saturating_sub(now).max(1),
                );
                return (Err(r), None);
            }
            s.used += n;
            let crossed = !s.alerted && s.used >= self.alert_at;
            s.alerted |= crossed;
            let alert = crossed.then_some(QuotaAlert {
                period: s.index,
                used: s.used,
                limit: self.limit,
            });
            (Ok(()), alert)
        });
        if let Some(alert) = alert {
            tracing::warn!(target: "sluicegate::limit", period = alert.period, used = alert.used,
                limit = alert.limit, "quota {} of {} used this period", alert.used, alert.limit);
            if let Some(callback) = &self.on_alert {
                callback(alert);
            }
        }
        result
    }

    fn available(&self) -> u64 {
        self.limit - self.used()
    }

    fn capacity(&self) -> u64 {
        self.limit
    }
}
