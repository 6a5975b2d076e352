//! Token bucket: `refill` tokens every `per`, at most `capacity` banked; a call takes `n`.
//!
//! The bucket is counted exactly: time is measured in units of `1/s` of a nanosecond, with
//! `s = refill / gcd(refill, per_ns)`, in which one token takes a whole number of units
//! (`per_ns / gcd`) whatever the rate, so a refill that does not divide the period loses nothing
//! to rounding and `retry_after` is the exact nanosecond at which `n` tokens exist (when the
//! refill divides the period, as 100 a second does, the units are nanoseconds). The whole state
//! is one number in those units, the moment the bucket is full again (GCRA's theoretical arrival
//! time, at a finer grain): a call of `n` at `t` takes `n` tokens' units and is admitted iff the
//! bucket is then full again no later than `capacity` tokens' units after `t`. In any span `t` it
//! admits at most `capacity + refill·t/per` tokens. By default the state lives in a
//! [`TokenStore`]: one word when the units are nanoseconds, two otherwise, and either way one
//! compare-and-swap per admission and none on a refusal. Counted in nanoseconds, a call also does
//! its arithmetic in one word, and a refusal's wait is a subtraction.
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

use portable_atomic::AtomicU128;
use std::sync::atomic::Ordering;
use strength_reduce::StrengthReducedU64;

use crate::clock::{duration_to_nanos, Clock, MonotonicClock, Nanos};
use crate::rejection::{RejectReason, Rejection};

use super::config::{LimitConfigError, TokenBucketConfig};
use super::state::{AtomicStore, StateStore};
use super::{exceeds_capacity, refused, Limiter};

/// A token bucket's state: the moment it is full again, in the bucket's units of time (0, the
/// default, is a full bucket).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenState {
    full_at: u128,
}

/// A token bucket (see the module docs).
#[derive(Debug)]
pub struct TokenBucket<C: Clock = MonotonicClock, St = TokenStore> {
    clock: C,
    store: St,
    capacity: u64,
    /// Units of time per nanosecond: `refill / gcd(refill, per)` (1 when the refill divides the
    /// period, as 100 a second does), as a divisor that multiplies.
    scale: StrengthReducedU64,
    /// Units one token takes: `per / gcd(refill, per)`, `per` in ns.
    token: u64,
    /// `capacity · token`: the units a full bucket holds.
    full: u128,
    /// The state never reaches this: `u64::MAX` when the units are nanoseconds (so that the
    /// state fits one word; 584 years, as GCRA's), `u128::MAX` otherwise.
    ceiling: u128,
    /// `full` in one word (saturated), for the arithmetic of a bucket counted in nanoseconds.
    full_ns: u64,
}

impl<C: Clock> TokenBucket<C> {
    /// A full bucket kept in memory, in one word when its units are nanoseconds.
    pub fn new(config: TokenBucketConfig, clock: C) -> Result<Self, LimitConfigError> {
        let mut bucket = Self::with_store(config, clock, TokenStore::default())?;
        if bucket.ceiling <= u128::from(u64::MAX) {
            bucket.store = TokenStore(Repr::Word(AtomicStore::default()));
        }
        Ok(bucket)
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
        let per = duration_to_nanos(config.per);
        let common = gcd(config.refill, per);
        let (scale, token) = (config.refill / common, per / common);
        Ok(TokenBucket {
            clock,
            store,
            capacity: config.capacity,
            scale: StrengthReducedU64::new(scale),
            token,
            full: u128::from(config.capacity) * u128::from(token),
            ceiling: if scale == 1 {
                u128::from(u64::MAX)
            } else {
                u128::MAX
            },
            full_ns: config.capacity.saturating_mul(token),
        })
    }

    /// Whether the units are nanoseconds (the refill divides the period): the state then stays
    /// below `u64::MAX` and one word of arithmetic decides.
    #[inline]
    fn in_nanos(&self) -> bool {
        self.scale.get() == 1
    }

    /// [`TokenBucket::take`] for a bucket counted in nanoseconds, in one word: the same state
    /// and the same moment of admission. `full_at` is below `u64::MAX` (the bucket's ceiling);
    /// a take that would reach it is decided by [`TokenBucket::take`].
    #[inline]
    fn take_ns(&self, full_at: u64, t: Nanos, n: u64) -> Result<u64, u128> {
        let after = n
            .checked_mul(self.token)
            .and_then(|cost| full_at.max(t).checked_add(cost));
        match after {
            Some(after) if after < u64::MAX => {
                // `full_ns` saturates where `full` exceeds a word, which `after` never reaches:
                // the subtraction gives 0 either way.
                let admitted_at = after.saturating_sub(self.full_ns);
                if admitted_at <= t {
                    Ok(after)
                } else {
                    Err(u128::from(admitted_at))
                }
            }
            _ => self.take_past_a_word(full_at, t, n),
        }
    }

    /// A take at `t` that would carry the state to `u64::MAX` or past it: refused (the state
    /// never reaches its ceiling), with the moment the wide arithmetic names.
    #[cold]
    #[inline(never)]
    fn take_past_a_word(&self, full_at: u64, t: Nanos, n: u64) -> Result<u64, u128> {
        let state = TokenState {
            full_at: u128::from(full_at),
        };
        match self.take(state, u128::from(t), n) {
            Ok(s) => Ok(u64::try_from(s.full_at).unwrap_or(u64::MAX)),
            Err(at) => Err(at),
        }
    }

    /// `now` in units.
    #[inline]
    fn units(&self, now: Nanos) -> u128 {
        u128::from(now) * u128::from(self.scale.get())
    }

    /// The state after taking `n` at `t` (in units), or the moment (in units) at which the take
    /// would be admitted.
    #[inline]
    fn take(&self, s: TokenState, t: u128, n: u64) -> Result<TokenState, u128> {
        let full_at = s
            .full_at
            .max(t)
            .saturating_add(u128::from(n) * u128::from(self.token));
        let admitted_at = full_at.saturating_sub(self.full);
        if admitted_at <= t && full_at < self.ceiling {
            Ok(TokenState { full_at })
        } else {
            Err(admitted_at)
        }
    }

    /// The refusal of a take admitted at `at` units, `t` units being now: the wait rounded up to
    /// the next whole nanosecond (a division by the scale, 1 for most rates).
    fn rate_limited(&self, at: u128, t: u128) -> Rejection {
        let missing = at.saturating_sub(t);
        let wait = match u64::try_from(missing) {
            Ok(missing) => {
                let (whole, part) = StrengthReducedU64::div_rem(missing, self.scale);
                whole + u64::from(part > 0)
            }
            Err(_) => {
                let scale = u128::from(self.scale.get());
                u64::try_from(missing.div_ceil(scale)).unwrap_or(u64::MAX)
            }
        };
        refused(RejectReason::RateLimited, wait.max(1))
    }
}

impl<C: Clock, St: StateStore<TokenState>> Limiter for TokenBucket<C, St> {
    type Clock = C;

    fn clock(&self) -> &C {
        &self.clock
    }

    #[inline]
    fn try_acquire(&self, n: u64) -> Result<(), Rejection> {
        if n > self.capacity {
            return Err(exceeds_capacity());
        }
        let now = self.clock.now();
        if self.in_nanos() {
            // One word of arithmetic, and a refusal's wait without a division.
            return self
                .store
                .update(move |s| {
                    // Below `u64::MAX` in this form (see `take_ns`).
                    let full_at = u64::try_from(s.full_at).unwrap_or(u64::MAX);
                    s.full_at = u128::from(self.take_ns(full_at, now, n)?);
                    Ok(())
                })
                .map_err(move |at: u128| {
                    let wait = u64::try_from(at).map_or(u64::MAX, |at| at.saturating_sub(now));
                    refused(RejectReason::RateLimited, wait.max(1))
                });
        }
        let t = self.units(now);
        self.store
            .update(|s| {
                *s = self.take(*s, t, n)?;
                Ok(())
            })
            .map_err(|at| self.rate_limited(at, t))
    }

    fn available(&self) -> u64 {
        let t = self.units(self.clock.now());
        let ahead = self.store.read(|s| s.full_at.saturating_sub(t));
        let credit = self.full.saturating_sub(ahead);
        u64::try_from(credit / u128::from(self.token)).unwrap_or(u64::MAX)
    }

    fn capacity(&self) -> u64 {
        self.capacity
    }
}

/// The greatest common divisor (both at least 1).
fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Where a [`TokenBucket`] keeps its state by default: lock-free either way.
///
/// A bucket whose refill divides its period (100 a second, 1 an hour) counts in nanoseconds and
/// its state is one word, swapped with a compare-and-swap as GCRA's is. Any other bucket counts
/// in finer units and its state is two words, swapped with a 128-bit compare-and-swap
/// (`cmpxchg16b` on x86-64, through `portable-atomic`, which falls back to a lock on a CPU without
/// one). [`TokenBucket::new`] picks the form; `TokenStore::default()` is the two-word form, which
/// holds any bucket's state.
#[derive(Debug)]
pub struct TokenStore(Repr);

#[derive(Debug)]
enum Repr {
    /// The state of a bucket whose state never exceeds `u64::MAX` (its `ceiling`).
    Word(AtomicStore),
    Wide(AtomicU128),
}

impl Default for TokenStore {
    fn default() -> Self {
        TokenStore(Repr::Wide(AtomicU128::new(0)))
    }
}

impl StateStore<TokenState> for TokenStore {
    #[inline]
    fn update<T>(&self, mut step: impl FnMut(&mut TokenState) -> T) -> T {
        match &self.0 {
            Repr::Word(word) => word.update(|full_at| {
                let mut s = TokenState {
                    full_at: u128::from(*full_at),
                };
                let out = step(&mut s);
                // Below the bucket's ceiling, `u64::MAX`, whenever this form is chosen.
                *full_at = u64::try_from(s.full_at).unwrap_or(u64::MAX);
                out
            }),
            Repr::Wide(wide) => {
                let mut current = wide.load(Ordering::Acquire);
                loop {
                    let mut s = TokenState { full_at: current };
                    let out = step(&mut s);
                    if s.full_at == current {
                        return out;
                    }
                    match wide.compare_exchange_weak(
                        current,
                        s.full_at,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    ) {
                        Ok(_) => return out,
                        Err(actual) => current = actual,
                    }
                }
            }
        }
    }

    fn read<T>(&self, look: impl FnOnce(&TokenState) -> T) -> T {
        let full_at = match &self.0 {
            Repr::Word(word) => word.read(|full_at| u128::from(*full_at)),
            Repr::Wide(wide) => wide.load(Ordering::Acquire),
        };
        look(&TokenState { full_at })
    }
}
