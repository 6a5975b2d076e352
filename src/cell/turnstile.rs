//! The requests in flight and the whole gate's token bucket in one atomic word.
//!
//! # Why
//! With the switch on, an admitted request needs a token of the whole gate's bucket and a slot
//! under the in-flight ceiling. Kept apart (a [`Bucket`] and an [`InFlight`]), they cost three
//! locked read-modify-writes per request: the bucket's compare-and-swap, the counter's, and the
//! release's decrement, where governor's `check()` pays one. Measured on an AMD EPYC, each costs about half of governor's
//! whole call (the rest of it is the clock), and the three made the switched-on guard 2.4 times
//! governor's `check()`. Here the bucket's schedule and the count share one 64-bit word, so
//! [`Turnstile::draw`] takes the token and the slot with one compare-and-swap, and only the
//! release's decrement remains.
//!
//! # The word
//! `[schedule: 42][fast: 1][pending: 1][count: 20]`. The count is the requests in flight, up to
//! [`MAX_COUNT`]. The schedule is the bucket's theoretical arrival time (TAT, see
//! [`crate::cell::bucket`]) modulo 2^42 ns (73 minutes), read against a clock reading: exact while the
//! TAT lies within 36 minutes of the reading. Two things keep it there:
//! * an *anchor*, a recent clock reading: the fast mode serves readings within [`FRESH`] of it,
//!   and keeps the schedule within [`WINDOW`] of it;
//! * parameters that fit: a token interval, burst tolerance and wait of at most [`FITS`] each.
//!
//! Anything else (a long idle spell, a clock that jumped, a wait or burst of minutes, the end of
//! 64-bit time) runs in *exact* mode: the schedule in a [`Bucket`] of its own, whose draws,
//! hand-backs and drains the turnstile calls, at the old cost. The request path only ever leaves
//! the fast mode; [`Turnstile::configure`], which the gate calls
//! on each tick, returns to it, anchored at the tick's time, when it can. A change of mode is
//! made under a lock, in two steps: the word is first marked *pending* (no token is taken in
//! either mode meanwhile; a request that finds the mark waits for the lock), then the schedule
//! moves across. The count goes on changing throughout.
//!
//! # Contract
//! Used from one thread, a turnstile answers as a [`Bucket`] and an [`InFlight`] counter would
//! (the unit tests in `tests.rs` drive both with the same random sequences): the same
//! admissions, waits, refusals and retry times. One
//! deviation is by design: anchoring the fast mode at `now` raises a schedule older than
//! `now - FRESH` to `now - FRESH`, a full bucket either way for every reading from there on; a
//! reservation taken after the raise holds it as its `before`, and one from before it is no
//! longer the latest, so [`Turnstile::cancel`] says `false` where the bucket says `true`, with
//! the same state after. Under concurrency a change of mode may lose a token (never give one
//! twice), and a hand-back during one is kept.
//!
//! For instance, a fast turnstile over a bucket of 10 tokens a second, 2 at once, admits two
//! requests at one instant with one compare-and-swap each, refuses the third for 100 ms, and
//! reserves that token for one that may wait so long (the first test of the word in `tests.rs`).
//!
//! [`InFlight`]: crate::cell::inflight::InFlight

use std::sync::atomic::Ordering;

use super::bucket::{schedule, Bucket, BucketParams, Reservation, Schedule};
use super::sync::{lock, AtomicU64, Mutex};
use crate::clock::Nanos;

/// Bits of the count: about a million requests in flight, far above any ceiling a process holds,
/// and 42 bits left for the schedule (73 minutes of nanoseconds).
const COUNT_BITS: u32 = 20;
/// The most requests a turnstile counts in flight: a ceiling above it counts as this.
pub(crate) const MAX_COUNT: u64 = (1 << COUNT_BITS) - 1;
const PENDING: u64 = 1 << COUNT_BITS;
const FAST: u64 = 1 << (COUNT_BITS + 1);
const MODE: u64 = FAST | PENDING;
/// The schedule takes the top of the word, so that it wraps modulo its own range by itself.
const SCHEDULE_SHIFT: u32 = COUNT_BITS + 2;
const SCHEDULE_BITS: u32 = 64 - SCHEDULE_SHIFT;
/// The count and the mode: everything below the schedule.
const BELOW_SCHEDULE: u64 = (1 << SCHEDULE_SHIFT) - 1;
/// The fast mode serves clock readings within this of its anchor (about 4.6 minutes): the gate's
/// ticks re-anchor it [`REANCHOR`] away, so only a clock that jumped or a gate idle for minutes
/// (no request, no tick) reads further.
pub(crate) const FRESH: Nanos = 1 << 38;
/// The fast mode keeps the schedule within this of its anchor (about 18 minutes): room for a
/// fresh reading plus three of the longest intervals, waits or bursts that fit (asserted below).
pub(crate) const WINDOW: Nanos = 1 << 40;
/// The fast mode serves token intervals, burst tolerances and waits of at most this (about
/// 2 minutes 17 seconds): all bits below one, so that a single test of the three together says
/// whether they fit.
pub(crate) const FITS: Nanos = (1 << 37) - 1;
/// [`Turnstile::configure`] re-anchors once the clock is this far from the anchor (about 69 s):
/// a quarter of [`FRESH`], so a tick re-anchors long before a reading goes stale.
const REANCHOR: Nanos = 1 << 36;
/// The fast mode keeps clear of the end of 64-bit time.
const LATEST_ANCHOR: Nanos = u64::MAX - (1 << 42);

// The bounds that make a fast schedule exact (see the module docs): a write at a fresh reading
// stays in the window; a fresh reading lies within half the schedule's range of anything in the
// window; raising an old schedule to `anchor - FRESH` leaves a full bucket full.
const _: () = assert!(FRESH + 3 * FITS <= WINDOW);
const _: () = assert!(WINDOW + FRESH < 1 << (SCHEDULE_BITS - 1));
const _: () = assert!(FITS <= FRESH && REANCHOR < FRESH && (FITS + 1).is_power_of_two());

/// The TAT a word's schedule stands for, read against `reference`, which must lie within half
/// the schedule's range (2^41 ns) of it: the difference, computed in the schedule's place at the
/// top of the word, comes out sign-extended from an arithmetic shift.
#[inline]
fn decode(word: u64, reference: Nanos) -> Nanos {
    let diff = (word & !BELOW_SCHEDULE).wrapping_sub(reference << SCHEDULE_SHIFT);
    reference.wrapping_add(((diff as i64) >> SCHEDULE_SHIFT) as u64)
}

/// `word` with its schedule replaced by `tat`'s (modulo the schedule's range).
#[inline]
fn encode(word: u64, tat: Nanos) -> u64 {
    (word & BELOW_SCHEDULE) | (tat << SCHEDULE_SHIFT)
}

/// Whether a draw with these parameters may run in the fast mode.
#[inline]
fn fits(params: &BucketParams, max_wait: Nanos) -> bool {
    (params.interval() | params.tolerance() | max_wait) <= FITS
}

/// Whether `now` lies closer than `distance` to `anchor`, either side (not across the end of
/// 64-bit time).
#[inline]
fn near(now: Nanos, anchor: Nanos, distance: Nanos) -> bool {
    now.abs_diff(anchor) < distance
}

/// What [`Turnstile::draw`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Drawn {
    /// A token at once and a slot: the request is in (the token is spent).
    Admitted(Reservation),
    /// A token, at once or after [`Reservation::wait`], and no slot.
    Reserved(Reservation),
    /// No token within the longest wait; the same call would succeed this much later.
    Refused(Nanos),
}

impl Drawn {
    fn new(slot: bool, token: Reservation) -> Self {
        if slot {
            Drawn::Admitted(token)
        } else {
            Drawn::Reserved(token)
        }
    }
}

/// Why the fast path could not serve a draw.
enum Miss {
    /// The word is no longer in the fast mode: look again.
    Moved,
    /// The reading or the parameters are beyond the fast mode: leave it.
    Unfit,
}

/// A token bucket (the whole gate's) and an in-flight counter in one word; see the module docs.
pub(crate) struct Turnstile {
    word: AtomicU64,
    /// The clock reading the fast mode is anchored at.
    anchor: AtomicU64,
    /// The schedule in exact mode, and in either mode the latest time a refusal or a hand-back
    /// saw (see [`Bucket::cancel`]).
    exact: Bucket,
    /// Held while the mode changes.
    mode: Mutex<()>,
}

impl std::fmt::Debug for Turnstile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Turnstile")
            .field("in_flight", &self.current())
            .field("fast", &self.is_fast())
            .finish_non_exhaustive()
    }
}

impl Default for Turnstile {
    fn default() -> Self {
        Self::new()
    }
}

impl Turnstile {
    /// Nothing in flight and a full bucket (as if idle forever), in exact mode until
    /// [`Turnstile::configure`] is called.
    pub(crate) fn new() -> Self {
        Turnstile {
            word: AtomicU64::new(0),
            anchor: AtomicU64::new(0),
            exact: Bucket::new(),
            mode: Mutex::new(()),
        }
    }

    /// Whether the fast mode is in force.
    pub(crate) fn is_fast(&self) -> bool {
        self.word.load(Ordering::Acquire) & MODE == FAST
    }

    /// Chooses the mode for draws with `params` waiting up to `max_wait` from `now` on: the fast
    /// one, anchored at `now`, if they fit and the schedule can be moved into its window; exact
    /// otherwise. Takes the lock: for ticks and reconfigurations, not for requests.
    pub(crate) fn configure(&self, now: Nanos, params: &BucketParams, max_wait: Nanos) {
        let _guard = lock(&self.mode);
        let wanted = fits(params, max_wait) && now <= LATEST_ANCHOR;
        if self.word.load(Ordering::Acquire) & FAST != 0 {
            if wanted && near(now, self.anchor.load(Ordering::Acquire), REANCHOR) {
                return;
            }
            self.to_exact_locked();
        }
        if wanted {
            self.to_fast_locked(now);
        }
    }

    /// Draws a token for a request at `now` that may wait up to `max_wait`, and with a token at
    /// once also a slot if fewer than `cap` requests (at most [`MAX_COUNT`]) are in flight, both
    /// in one compare-and-swap. The token is as [`Bucket::reserve`]
    /// would give it; without the slot ([`Drawn::Reserved`]) the caller takes one its own way or
    /// hands the token back ([`Turnstile::cancel`]).
    #[inline(always)]
    pub(crate) fn draw(
        &self,
        now: Nanos,
        max_wait: Nanos,
        params: &BucketParams,
        cap: u64,
    ) -> Drawn {
        let word = self.word.load(Ordering::Acquire);
        if word & MODE == FAST {
            if let Ok(drawn) = self.draw_fast(word, now, max_wait, params, cap) {
                return drawn;
            }
        }
        self.draw_slow(now, max_wait, params, cap)
    }

    /// Reserves the next token if it will exist within `max_wait` of `now`, as
    /// [`Bucket::reserve`] does; takes no slot.
    pub(crate) fn reserve(
        &self,
        now: Nanos,
        max_wait: Nanos,
        params: &BucketParams,
    ) -> Result<Reservation, Nanos> {
        match self.draw(now, max_wait, params, 0) {
            Drawn::Reserved(token) => Ok(token),
            Drawn::Refused(retry_after) => Err(retry_after),
            // No slot lies below a cap of 0, so this does not happen; were it to, the slot goes
            // back and the token stands.
            Drawn::Admitted(token) => {
                self.leave();
                Ok(token)
            }
        }
    }

    /// [`Turnstile::draw`] in the fast mode, from `word`.
    #[inline(always)]
    fn draw_fast(
        &self,
        mut word: u64,
        now: Nanos,
        max_wait: Nanos,
        params: &BucketParams,
        cap: u64,
    ) -> Result<Drawn, Miss> {
        let cap = cap.min(MAX_COUNT);
        loop {
            if word & MODE != FAST {
                return Err(Miss::Moved);
            }
            if !near(now, self.anchor.load(Ordering::Acquire), FRESH) {
                return Err(Miss::Unfit);
            }
            let tat = decode(word, now);
            match schedule(tat, now, max_wait, params) {
                Schedule::Take { wait, after } => {
                    // Only a write must stay in the window; a refusal reads the schedule alone.
                    if !fits(params, max_wait) {
                        return Err(Miss::Unfit);
                    }
                    let slot = wait == 0 && word & MAX_COUNT < cap;
                    let next = encode(word, after) + u64::from(slot);
                    match self.word.compare_exchange_weak(
                        word,
                        next,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    ) {
                        Ok(_) => return Ok(Drawn::new(slot, Reservation::new(wait, tat, after))),
                        Err(current) => word = current,
                    }
                }
                Schedule::Refuse { retry_after } => {
                    // A refusal writes nothing; it stands if the schedule it read is still the
                    // word's (the anchor, read after the word, may be a newer one's).
                    let current = self.word.load(Ordering::Acquire);
                    if (current ^ word) & !MAX_COUNT != 0 {
                        word = current;
                        continue;
                    }
                    self.exact.note_refusal(now);
                    return Ok(Drawn::Refused(retry_after));
                }
                // Not in the fast mode's window; as the bucket does, without a time seen.
                Schedule::Exhausted { retry_after } => return Ok(Drawn::Refused(retry_after)),
            }
        }
    }

    /// [`Turnstile::draw`] outside the fast path: in the exact mode, during a change of mode, or
    /// for a reading or parameters the fast mode cannot serve (which it then leaves).
    #[cold]
    #[inline(never)]
    fn draw_slow(&self, now: Nanos, max_wait: Nanos, params: &BucketParams, cap: u64) -> Drawn {
        loop {
            let word = self.word.load(Ordering::Acquire);
            if word & PENDING != 0 {
                // A change of mode is under way: wait for it.
                drop(lock(&self.mode));
            } else if word & FAST != 0 {
                match self.draw_fast(word, now, max_wait, params, cap) {
                    Ok(drawn) => return drawn,
                    Err(Miss::Unfit) => self.leave_fast(),
                    Err(Miss::Moved) => {}
                }
            } else if let Some(drawn) = self.draw_exact(now, max_wait, params, cap) {
                return drawn;
            }
        }
    }

    /// [`Turnstile::draw`] in the exact mode: the bucket's own draw, then the word's confirmation
    /// (with the slot); `None` if the mode changed under it.
    fn draw_exact(
        &self,
        now: Nanos,
        max_wait: Nanos,
        params: &BucketParams,
        cap: u64,
    ) -> Option<Drawn> {
        match self.exact.reserve(now, max_wait, params) {
            Ok(token) => {
                let slot = self.confirm_exact(token.wait == 0, cap)?;
                Some(Drawn::new(slot, token))
            }
            Err(retry_after) => (self.word.load(Ordering::Acquire) & MODE == 0)
                .then_some(Drawn::Refused(retry_after)),
        }
    }

    /// Whether the exact mode is still in force, by a read-modify-write of the word that also
    /// takes a slot below `cap` if `slot` asks for one: `Some(whether it took one)`, or `None`
    /// if the mode changed. A change of mode marks the word first, so either it follows this
    /// (and finds the token just taken in the exact schedule it moves across) or this fails (and
    /// the token spent in the old schedule is lost, never given twice).
    fn confirm_exact(&self, slot: bool, cap: u64) -> Option<bool> {
        let cap = cap.min(MAX_COUNT);
        let mut word = self.word.load(Ordering::Acquire);
        loop {
            if word & MODE != 0 {
                return None;
            }
            let take = slot && word & MAX_COUNT < cap;
            match self.word.compare_exchange_weak(
                word,
                word + u64::from(take),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(take),
                Err(current) => word = current,
            }
        }
    }

    /// Leaves the fast mode for a reading or parameters it cannot serve.
    #[cold]
    fn leave_fast(&self) {
        let _guard = lock(&self.mode);
        self.to_exact_locked();
    }

    /// Hands an unused reservation back, as [`Bucket::cancel`]
    /// does: only while it is still the latest, and never to before the latest time seen.
    /// During a change of mode it is kept (erring on the side of the service).
    pub(crate) fn cancel(&self, reservation: &Reservation, now: Nanos) -> bool {
        let restored = reservation.restored(self.exact.see(now));
        let mut word = self.word.load(Ordering::Acquire);
        loop {
            if word & PENDING != 0 {
                return false;
            }
            if word & FAST == 0 {
                return self.exact.cancel(reservation, now);
            }
            if !near(now, self.anchor.load(Ordering::Acquire), FRESH) {
                self.leave_fast();
                word = self.word.load(Ordering::Acquire);
                continue;
            }
            if decode(word, now) != reservation.after() {
                return false;
            }
            match self.word.compare_exchange_weak(
                word,
                encode(word, restored),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(current) => word = current,
            }
        }
    }

    /// Empties the bucket at `now` (keeps one token), as
    /// [`Bucket::drain`] does. Takes the lock: for the switch's
    /// flips, not for requests.
    pub(crate) fn drain(&self, now: Nanos, params: &BucketParams) {
        let _guard = lock(&self.mode);
        let empty = now.saturating_add(params.tolerance());
        let mut word = self.word.load(Ordering::Acquire);
        loop {
            if word & FAST == 0 {
                self.exact.drain(now, params);
                return;
            }
            if !fits(params, 0) || !near(now, self.anchor.load(Ordering::Acquire), FRESH) {
                self.to_exact_locked();
                word = self.word.load(Ordering::Acquire);
                continue;
            }
            if decode(word, now) >= empty {
                return;
            }
            match self.word.compare_exchange_weak(
                word,
                encode(word, empty),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return,
                Err(current) => word = current,
            }
        }
    }

    /// How long from `now` until the bucket would admit a request at once. Takes the lock.
    // Tests only: they read the schedule with it; the gate never asks.
    #[cfg(test)]
    pub(crate) fn time_to_token(&self, now: Nanos, params: &BucketParams) -> Nanos {
        let _guard = lock(&self.mode);
        let word = self.word.load(Ordering::Acquire);
        if word & FAST == 0 {
            return self.exact.time_to_token(now, params);
        }
        decode(word, self.anchor.load(Ordering::Acquire))
            .saturating_sub(params.tolerance())
            .saturating_sub(now)
    }

    /// Takes a slot if fewer than `max` requests (at most [`MAX_COUNT`]) are in flight.
    #[inline]
    pub(crate) fn try_enter(&self, max: u64) -> bool {
        let max = max.min(MAX_COUNT);
        self.word
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |word| {
                (word & MAX_COUNT < max).then_some(word + 1)
            })
            .is_ok()
    }

    /// Gives a slot back. Call it once for each slot taken.
    #[inline]
    pub(crate) fn leave(&self) {
        self.word.fetch_sub(1, Ordering::AcqRel);
    }

    /// The requests in flight.
    #[inline]
    pub(crate) fn current(&self) -> u64 {
        self.word.load(Ordering::Acquire) & MAX_COUNT
    }

    /// Marks the word pending if its mode is `fast`'s; returns the word as marked.
    fn mark_pending(&self, fast: bool) -> Option<u64> {
        let mut word = self.word.load(Ordering::Acquire);
        loop {
            if (word & FAST != 0) != fast || word & PENDING != 0 {
                return None;
            }
            match self.word.compare_exchange_weak(
                word,
                word | PENDING,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(word | PENDING),
                Err(current) => word = current,
            }
        }
    }

    /// Rewrites the word with `f`, keeping whatever count it holds when the write lands.
    fn settle(&self, f: impl Fn(u64) -> u64) {
        let mut word = self.word.load(Ordering::Acquire);
        while let Err(current) =
            self.word
                .compare_exchange_weak(word, f(word), Ordering::AcqRel, Ordering::Acquire)
        {
            word = current;
        }
    }

    /// From fast to exact mode; the lock is held.
    fn to_exact_locked(&self) {
        let Some(word) = self.mark_pending(true) else {
            return;
        };
        // While the word is marked, nothing but the count changes: its schedule is final.
        let tat = decode(word, self.anchor.load(Ordering::Acquire));
        self.exact.set_tat(tat);
        self.settle(|w| w & MAX_COUNT);
    }

    /// From exact to fast mode, anchored at `now`, if the schedule fits the window; the lock is
    /// held.
    fn to_fast_locked(&self, now: Nanos) {
        if self.mark_pending(false).is_none() {
            return;
        }
        // A schedule before `now - FRESH` is a full bucket for every reading the fast mode serves.
        let tat = self.exact.tat().max(now.saturating_sub(FRESH));
        if tat > now.saturating_add(WINDOW / 2) {
            self.settle(|w| w & !PENDING);
            return;
        }
        self.anchor.store(now, Ordering::Release);
        self.settle(|w| encode(w & MAX_COUNT, tat) | FAST);
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
