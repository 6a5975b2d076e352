//! The algorithms a keyed limiter runs on each key's state: one 64-bit word per key.
//!
//! A rule is the pure step of a limiter ("state at `now`, request `n` → new state or refusal"),
//! as in [`limit`](crate::limit), restricted to states of one word so that every key's state is an
//! [`AtomicStore`](crate::limit::AtomicStore) updated with a compare-and-swap under the shard's
//! read lock. The state `0` is a fresh key (everything available), and [`KeyedRule::full_at`]
//! says from when a state is indistinguishable from a fresh one: such a key can be forgotten
//! without changing any later decision.
//!
//! | rule | state | guarantee per key |
//! | --- | --- | --- |
//! | [`GcraRule`] | the TAT | at most `burst + t/T` in any span `t`, `T = ceil(per/rate)` |
//! | [`TokenBucketRule`] | the time the bucket is full again | at most `capacity + t/T`, `T = ceil(per/refill)` |
//! | [`FixedWindowRule`] | window number (40 bits) and count (24 bits) | at most `limit` per aligned window |
//!
//! The token bucket and GCRA are the same arithmetic in one word (the bucket's "full at" time is
//! GCRA's TAT): a refill that does not divide `per` in whole nanoseconds is rounded to one token
//! every `ceil(per/refill)` ns, never faster than the rate. The sliding-window counter, the
//! sliding log and the quota keep more than one word and are not offered keyed.

use std::fmt;

use crate::clock::{duration_to_nanos, Nanos};
use crate::limit::gcra::GcraStep;
use crate::limit::{
    check, refused, GcraConfig, LimitConfigError, TokenBucketConfig, WindowLimitConfig,
};
use crate::rejection::{RejectReason, Rejection};

/// A limiter's step on a state of one word (see the module docs).
///
/// Contract: the state `0` is a fresh key; `try_take` is pure (it may be retried with another
/// state when a compare-and-swap loses); after [`KeyedRule::full_at`] the state decides exactly as
/// `0` does; `n` is never above [`KeyedRule::capacity`] (the keyed limiter refuses it first).
pub trait KeyedRule: Send + Sync + Sized + 'static {
    /// The figures the rule is built from.
    type Config: Clone + PartialEq + fmt::Debug + Send + Sync + 'static;

    /// The rule for `config`; fails if a figure breaks a rule.
    fn new(config: &Self::Config) -> Result<Self, LimitConfigError>;

    /// The state after admitting `n` at `now`, or the refusal with the exact time until `n`
    /// would be admitted.
    fn try_take(&self, state: u64, now: Nanos, n: u64) -> Result<u64, Rejection>;

    /// How many `try_take` would admit at `now`.
    fn available(&self, state: u64, now: Nanos) -> u64;

    /// From when `state` decides as a fresh key does: a key whose `full_at` has passed can be
    /// forgotten without changing any decision.
    fn full_at(&self, state: u64) -> Nanos;

    /// The largest `n` ever admitted at once.
    fn capacity(&self) -> u64;
}

/// GCRA on one word, the TAT: `rate` calls every `per`, `burst` at once (see
/// [`Gcra`](crate::limit::Gcra), which it shares its arithmetic with).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcraRule(GcraStep);

impl KeyedRule for GcraRule {
    type Config = GcraConfig;

    fn new(config: &GcraConfig) -> Result<Self, LimitConfigError> {
        config.validate()?;
        Ok(GcraRule(GcraStep::new(config)))
    }

    #[inline]
    fn try_take(&self, state: u64, now: Nanos, n: u64) -> Result<u64, Rejection> {
        self.0.take(state, now, n)
    }

    fn available(&self, state: u64, now: Nanos) -> u64 {
        self.0.available(state, now)
    }

    fn full_at(&self, state: u64) -> Nanos {
        state
    }

    fn capacity(&self) -> u64 {
        self.0.burst
    }
}

/// A token bucket on one word: `refill` tokens every `per`, at most `capacity` banked, kept as the
/// time at which the bucket is full again (GCRA's TAT, with `T = ceil(per/refill)`, `burst =
/// capacity`). For the exact fractional refill of [`TokenBucket`](crate::limit::TokenBucket), whose
/// state is larger, use it unkeyed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucketRule(GcraStep);

impl KeyedRule for TokenBucketRule {
    type Config = TokenBucketConfig;

    fn new(config: &TokenBucketConfig) -> Result<Self, LimitConfigError> {
        config.validate()?;
        Ok(TokenBucketRule(GcraStep {
            interval: duration_to_nanos(config.per).div_ceil(config.refill).max(1),
            burst: config.capacity,
        }))
    }

    #[inline]
    fn try_take(&self, state: u64, now: Nanos, n: u64) -> Result<u64, Rejection> {
        self.0.take(state, now, n)
    }

    fn available(&self, state: u64, now: Nanos) -> u64 {
        self.0.available(state, now)
    }

    fn full_at(&self, state: u64) -> Nanos {
        state
    }

    fn capacity(&self) -> u64 {
        self.0.burst
    }
}

/// Bits of a fixed window's state that hold the count.
const COUNT_BITS: u32 = 24;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
/// The largest window number the state holds (2⁴⁰ − 1: 34 years of 1 ms windows).
const MAX_INDEX: u64 = (1 << (64 - COUNT_BITS)) - 1;
/// The shortest window keyed: 1 ms, so that 40 bits of window number last 34 years of uptime.
pub(crate) const MIN_WINDOW: Nanos = 1_000_000;

/// A fixed window on one word: at most `limit` calls in each window `[k·w, (k+1)·w)` of the
/// clock (see [`FixedWindow`](crate::limit::FixedWindow); up to `2·limit` across an edge). The
/// word holds the window number in 40 bits and the count in 24, so `limit` is at most 16 777 215
/// and `window` at least 1 ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedWindowRule {
    limit: u64,
    window: Nanos,
}

impl FixedWindowRule {
    /// The count in the window of `now` (a clock gone back stays in the window it had reached).
    fn current(&self, state: u64, now: Nanos) -> (u64, u64) {
        let index = (now / self.window).min(MAX_INDEX);
        let (held, count) = (state >> COUNT_BITS, state & COUNT_MASK);
        if index > held {
            (index, 0)
        } else {
            (held, count)
        }
    }
}

impl KeyedRule for FixedWindowRule {
    type Config = WindowLimitConfig;

    fn new(config: &WindowLimitConfig) -> Result<Self, LimitConfigError> {
        config.validate()?;
        check(
            config.limit <= COUNT_MASK,
            "limit",
            config.limit,
            "must be at most 16777215 for a keyed fixed window (its count has 24 bits)",
        )?;
        let window = duration_to_nanos(config.window);
        check(
            window >= MIN_WINDOW,
            "window",
            humantime::format_duration(config.window),
            "must be at least 1ms for a keyed fixed window",
        )?;
        Ok(FixedWindowRule {
            limit: config.limit,
            window,
        })
    }

    fn try_take(&self, state: u64, now: Nanos, n: u64) -> Result<u64, Rejection> {
        let (index, count) = self.current(state, now);
        if count + n <= self.limit {
            Ok(index << COUNT_BITS | (count + n))
        } else {
            let next = (index + 1).saturating_mul(self.window);
            Err(refused(
                RejectReason::RateLimited,
                next.saturating_sub(now).max(1),
            ))
        }
    }

    fn available(&self, state: u64, now: Nanos) -> u64 {
        self.limit - self.current(state, now).1
    }

    fn full_at(&self, state: u64) -> Nanos {
        let (index, count) = (state >> COUNT_BITS, state & COUNT_MASK);
        if count == 0 {
            0
        } else {
            (index + 1).saturating_mul(self.window)
        }
    }

    fn capacity(&self) -> u64 {
        self.limit
    }
}
