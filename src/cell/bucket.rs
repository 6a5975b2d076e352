//! A lock-free token bucket that knows exactly when its next token will exist.
//!
//! The bucket is the generic cell rate algorithm (GCRA, "virtual scheduling"): its whole state is one
//! 64-bit number, the theoretical arrival time (TAT) of the next request that would conform, updated
//! with a compare-and-swap. That makes it lock-free, makes "when will a token exist?" a subtraction, and
//! lets a request *reserve* a future token: it then waits exactly until that moment and no longer,
//! instead of polling.
//!
//! Definitions (the crate's documented meaning of *burst*): a bucket with rate `r` and capacity `b`
//! emits one token every `T = ceil(1e9 / r)` nanoseconds and admits a request at time `t` iff
//! `TAT - (b - 1)·T <= t`. So after an idle spell of at least `b·T` it admits exactly `b` requests at
//! once, then one every `T`, and in any span of length `d` it admits at most `b + d/T <= b + r·d`.
//! `T` is rounded up, so a bucket never runs faster than its rate.
//!
//! A bucket of 10 tokens a second, 2 at once, admits two requests at one instant and tells the
//! third that its token is 100 ms away (the first unit test in `tests.rs`).

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::sync::AtomicU64;
use crate::clock::Nanos;

/// Fewest tokens a bucket of a promised rate holds: two keep a token's lateness, which one drops.
pub(crate) const PROMISED_TOKENS: u64 = 2;

/// A bucket's rate and capacity, in the form the algorithm uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BucketParams {
    /// Nanoseconds between tokens (at least 1).
    interval: Nanos,
    /// How far ahead of now the TAT may run with a request still admitted at once: `(b - 1)·T`.
    tolerance: Nanos,
    capacity: u64,
}

impl BucketParams {
    /// `rate` tokens per second (finite and positive, else the bucket admits one token per 584 years),
    /// up to `capacity` at once (at least 1).
    pub(crate) fn new(rate: f64, capacity: u64) -> Self {
        let interval = if rate.is_finite() && rate > 0.0 {
            let ns = (1e9 / rate).ceil();
            if ns >= u64::MAX as f64 {
                u64::MAX
            } else {
                (ns as u64).max(1)
            }
        } else {
            u64::MAX
        };
        let capacity = capacity.max(1);
        BucketParams {
            interval,
            tolerance: (capacity - 1).saturating_mul(interval),
            capacity,
        }
    }

    /// A bucket at `rate` tokens per second that may bank `burst` worth of its rate: capacity
    /// `max(1, floor(rate·burst))`.
    pub(crate) fn with_burst(rate: f64, burst: Duration) -> Self {
        let tokens = rate * burst.as_secs_f64();
        let capacity = if tokens.is_finite() && tokens >= 1.0 {
            if tokens >= u64::MAX as f64 {
                u64::MAX
            } else {
                tokens as u64
            }
        } else {
            1
        };
        Self::new(rate, capacity)
    }

    /// A bucket whose rate is promised (the non-urgent floor): [`BucketParams::with_burst`], but
    /// holding at least [`PROMISED_TOKENS`]. A bucket of one token drops the time a request comes
    /// after its token: evenly spaced arrivals then get the rate rounded down to a whole number
    /// of their spacings (a floor of 19.9 a second gave 15 to requests every 16.7 ms).
    pub(crate) fn promised(rate: f64, burst: Duration) -> Self {
        let banked = Self::with_burst(rate, burst).capacity;
        Self::new(rate, banked.max(PROMISED_TOKENS))
    }

    /// Rebuilds parameters from [`BucketParams::interval`] and [`BucketParams::tolerance`], e.g. after
    /// keeping them in atomics.
    // Tests only: the gate keeps the capacity beside the parts (`from_stored`).
    #[cfg(test)]
    pub(crate) fn from_parts(interval: Nanos, tolerance: Nanos) -> Self {
        let interval = interval.max(1);
        BucketParams {
            interval,
            tolerance,
            capacity: (tolerance / interval).saturating_add(1),
        }
    }

    /// Parameters kept part by part (see the gate's `BucketCell`), without recomputing the
    /// capacity: a 64-bit division costs more than the rest of a draw.
    #[inline]
    pub(crate) fn from_stored(interval: Nanos, tolerance: Nanos, capacity: u64) -> Self {
        BucketParams {
            interval: interval.max(1),
            tolerance,
            capacity: capacity.max(1),
        }
    }

    /// How far ahead of now the bucket's schedule may run with a request still admitted at once:
    /// `(capacity − 1) × interval` nanoseconds.
    pub(crate) fn tolerance(&self) -> Nanos {
        self.tolerance
    }

    /// Nanoseconds between two tokens.
    pub(crate) fn interval(&self) -> Nanos {
        self.interval
    }

    /// How many requests the bucket admits at once after an idle spell.
    pub(crate) fn capacity(&self) -> u64 {
        self.capacity
    }
}

/// A reserved token: when it becomes usable, and what the bucket looked like before, so that a
/// reservation nobody uses can be handed back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reservation {
    /// How long the holder must wait before using the token (0: at once).
    pub(crate) wait: Nanos,
    before: Nanos,
    after: Nanos,
}

/// What the algorithm makes of a request at `now` against the schedule `tat`, before anything is
/// written: the one definition of the bucket's arithmetic, shared by [`Bucket`] and the gate's
/// [`Turnstile`](crate::cell::turnstile::Turnstile).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Schedule {
    /// A token within `max_wait`: wait `wait`, and the schedule moves to `after`.
    Take { wait: Nanos, after: Nanos },
    /// No token within `max_wait`; the same call would succeed `retry_after` later.
    Refuse { retry_after: Nanos },
    /// The schedule has run into the end of 64-bit time: no more tokens, ever.
    Exhausted { retry_after: Nanos },
}

/// The bucket's arithmetic (see the module docs): a token for a request at `now` that may wait
/// up to `max_wait`, given the theoretical arrival time `tat`.
#[inline]
pub(crate) fn schedule(tat: Nanos, now: Nanos, max_wait: Nanos, params: &BucketParams) -> Schedule {
    let conforms_at = tat.saturating_sub(params.tolerance);
    let wait = conforms_at.saturating_sub(now);
    if wait > max_wait {
        return Schedule::Refuse {
            retry_after: wait - max_wait,
        };
    }
    // A schedule that has run into the end of 64-bit time is exhausted: no more tokens.
    if tat == u64::MAX {
        return Schedule::Exhausted {
            retry_after: (u64::MAX - now).max(1),
        };
    }
    // A clock that went backwards reads as "no time has passed": max() keeps the later TAT.
    Schedule::Take {
        wait,
        after: tat.max(now).saturating_add(params.interval),
    }
}

impl Reservation {
    /// A reservation that moved a schedule from `before` to `after`.
    pub(crate) fn new(wait: Nanos, before: Nanos, after: Nanos) -> Self {
        Reservation {
            wait,
            before,
            after,
        }
    }

    /// The schedule the reservation left.
    pub(crate) fn after(&self) -> Nanos {
        self.after
    }

    /// The schedule a hand-back restores, given the latest time the bucket has seen (`seen`): the
    /// reservation's own slot, but never one before `seen` (see [`Bucket::cancel`]).
    pub(crate) fn restored(&self, seen: Nanos) -> Nanos {
        self.before.max(seen).min(self.after)
    }
}

/// Records that a refusal saw `now` in `seen` (see [`Bucket::cancel`]), with a plain store rather
/// than a locked maximum: a refusal is what a flood asks of the gate most, and the locked
/// instruction cost as much as the rest of it (AMD EPYC: a rate refusal 1.50x governor's denial
/// with it). Two refusals racing may leave the earlier of their two times; the hand-back's own
/// reading covers any clock that does not go back, and for one that does the guarantee then
/// holds to within the two refusals' difference. Alone on a thread it is exact.
#[inline]
fn note_seen(seen: &AtomicU64, now: Nanos) {
    if seen.load(Ordering::Relaxed) < now {
        seen.store(now, Ordering::Relaxed);
    }
}

/// The bucket's state: one atomic. Parameters are passed in on each call, so a reload can change the
/// rate without losing what the bucket has banked or owes.
#[derive(Debug, Default)]
pub(crate) struct Bucket {
    tat: AtomicU64,
    /// The latest `now` a refusal or a hand-back saw (see [`Bucket::cancel`]).
    seen: AtomicU64,
}

impl Bucket {
    /// A full bucket (as if idle forever).
    pub(crate) fn new() -> Self {
        Bucket {
            tat: AtomicU64::new(0),
            seen: AtomicU64::new(0),
        }
    }

    /// Takes a token at `now` if one exists; otherwise says how long until one does.
    // For the tests and the simulator's plain token bucket: the gate reserves, or draws from
    // its turnstile.
    #[cfg(any(test, feature = "sim"))]
    #[inline]
    pub(crate) fn try_acquire(&self, now: Nanos, params: &BucketParams) -> Result<(), Nanos> {
        self.reserve(now, 0, params).map(|_| ())
    }

    /// Reserves the next token if it will exist within `max_wait` of `now`. On refusal, returns the
    /// shortest delay after which the same call would succeed (if nobody else takes tokens meanwhile).
    /// A schedule that reaches the end of 64-bit time (a rate so low, or a clock so late, that the
    /// next token cannot be represented) admits that one last request and then refuses for good,
    /// rather than saturate and admit without limit.
    #[inline]
    pub(crate) fn reserve(
        &self,
        now: Nanos,
        max_wait: Nanos,
        params: &BucketParams,
    ) -> Result<Reservation, Nanos> {
        let mut tat = self.tat.load(Ordering::Acquire);
        loop {
            let (wait, after) = match schedule(tat, now, max_wait, params) {
                Schedule::Take { wait, after } => (wait, after),
                Schedule::Refuse { retry_after } => {
                    // Remember the latest time a refusal saw: a reservation handed back later must
                    // not reopen a slot that time has passed, even if the clock has gone back
                    // meanwhile.
                    self.note_refusal(now);
                    return Err(retry_after);
                }
                Schedule::Exhausted { retry_after } => return Err(retry_after),
            };
            match self
                .tat
                .compare_exchange_weak(tat, after, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    return Ok(Reservation {
                        wait,
                        before: tat,
                        after,
                    })
                }
                Err(current) => tat = current,
            }
        }
    }

    /// Hands an unused reservation back. This succeeds only while it is still the latest reservation:
    /// handing back a token that later reservations were scheduled behind would let two of them share
    /// one slot, so in that case the token is left unused (erring on the side of protecting the
    /// service). Returns whether the token was returned.
    ///
    /// `now` is the time of the hand-back. The schedule is never rolled back to before the latest
    /// time the bucket has seen a caller give up or be refused, so a clock that has gone backwards
    /// meanwhile cannot reopen a slot that time has already passed. (A refusal records its time
    /// with a plain store: of two refusals racing, the later time may go unrecorded, and the
    /// guarantee then holds to within their difference.)
    pub(crate) fn cancel(&self, reservation: &Reservation, now: Nanos) -> bool {
        let restored = reservation.restored(self.see(now));
        self.tat
            .compare_exchange(
                reservation.after,
                restored,
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// Empties the bucket at `now` (keeps one token), so that a switch that has just turned on paces
    /// requests from the start instead of letting a banked burst into a service that is already drowning.
    pub(crate) fn drain(&self, now: Nanos, params: &BucketParams) {
        let empty = now.saturating_add(params.tolerance);
        self.tat.fetch_max(empty, Ordering::AcqRel);
    }

    /// Records `now` as a time a refusal saw (see [`note_seen`]), for a refusal decided outside
    /// [`Bucket::reserve`] (the turnstile's fast mode) against the same guard.
    #[inline]
    pub(crate) fn note_refusal(&self, now: Nanos) {
        note_seen(&self.seen, now);
    }

    /// Raises the latest time seen to `now` and returns it, as a hand-back does first.
    pub(crate) fn see(&self, now: Nanos) -> Nanos {
        self.seen.fetch_max(now, Ordering::AcqRel).max(now)
    }

    /// The schedule (TAT) as it stands.
    pub(crate) fn tat(&self) -> Nanos {
        self.tat.load(Ordering::Acquire)
    }

    /// Replaces the schedule, for a caller that has kept it elsewhere meanwhile (the turnstile
    /// moving to its exact mode).
    pub(crate) fn set_tat(&self, tat: Nanos) {
        self.tat.store(tat, Ordering::Release);
    }

    /// How long from `now` until the bucket would admit a request at once.
    // Tests only: the gate asks its turnstile, which asks its bucket only then.
    #[cfg(test)]
    pub(crate) fn time_to_token(&self, now: Nanos, params: &BucketParams) -> Nanos {
        self.tat
            .load(Ordering::Acquire)
            .saturating_sub(params.tolerance)
            .saturating_sub(now)
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
