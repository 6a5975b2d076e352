//! What an admission hands out: a [`Permit`] for a request admitted now, a [`Ticket`] for one
//! that waits for its token, and the [`Admission`] that says which; and what a permit gives back
//! on release, exactly once.

use super::*;

/// What is known of a request's urgency when it takes an in-flight slot.
#[derive(Clone, Copy)]
pub(super) enum Class<'r, 'a> {
    Known(Urgency),
    /// Classified only if it has to be (near the ceiling).
    Unknown(&'r Request<'a>),
    /// A non-urgent request that holds a token of the non-urgent floor (`non_urgent_qps`).
    Floor,
    /// A non-urgent request stopped at its cap before it drew a token of the whole gate (see
    /// `HotLimits::non_urgent_before_token`): it may get in on the non-urgent floor only.
    PastCap,
}

/// The outcome a permit reports when released.
///
/// A whole word, like the permit's other fields: stored as one byte, the permit's moves (8-byte
/// loads over that byte and its padding) stalled on store forwarding, measured as a third of
/// the switch-on path's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
pub(super) enum Outcome {
    Succeeded,
    Failed,
    Cancelled,
}

/// An admitted request. Release it with [`Permit::success`] or [`Permit::failure`]; dropping it counts
/// as a success, or as a failure while the thread is panicking.
#[must_use = "dropping the permit releases the request at once"]
// The field order is fixed to go with `Rejection`'s (see there): `outcome` holds the niche that
// tells `Ok` from `Err`, and `waited`, which release does not read, lies under the one word of a
// rejection that is written in pieces.
#[repr(C)]
pub struct Permit<'g, C: Clock = MonotonicClock> {
    pub(super) outcome: Outcome,
    pub(super) inner: &'g Inner<C>,
    /// The declared memory cost and the kind of slot, given back on release.
    pub(super) charge: Charge,
    pub(super) waited: Nanos,
    pub(super) started: Nanos,
}

/// What a permit gives back on release besides a slot: its declared memory cost, and whether its
/// slot is on the non-urgent floor or counted as urgent. One word, so that the permit stays as
/// small as measured (see `Rejection`): costs are at most [`MAX_COST`](crate::request::MAX_COST),
/// so the top two bits are free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Charge(u64);

// The flag needs a bit that no cost uses (checked at compile time).
const _: () = assert!(crate::request::MAX_COST < Charge::URGENT);

impl Charge {
    const FLOOR: u64 = 1 << 63;
    const URGENT: u64 = 1 << 62;

    #[inline]
    pub(super) fn new(cost: u64, slot: Slot) -> Self {
        match slot {
            Slot::Regular => Charge(cost),
            Slot::Urgent => Charge(cost | Self::URGENT),
            Slot::Floor => Charge(cost | Self::FLOOR),
        }
    }

    #[inline]
    pub(super) fn cost(self) -> u64 {
        self.0 & !(Self::FLOOR | Self::URGENT)
    }

    #[inline]
    pub(super) fn slot(self) -> Slot {
        if self.0 & Self::FLOOR != 0 {
            Slot::Floor
        } else if self.0 & Self::URGENT != 0 {
            Slot::Urgent
        } else {
            Slot::Regular
        }
    }
}

/// Where an admitted request holds its in-flight slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Slot {
    /// Below the ceiling (or, urgent, in its headroom).
    Regular,
    /// An urgent request counted in `Inner::urgent_in_flight` too.
    Urgent,
    /// On the non-urgent floor, above the ceiling (counted in `Inner::floor_in_flight` too).
    Floor,
}

impl<C: Clock> std::fmt::Debug for Permit<'_, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permit")
            .field("waited", &self.waited())
            .finish_non_exhaustive()
    }
}

impl<C: Clock> Permit<'_, C> {
    /// Releases the request as a success.
    pub fn success(mut self) {
        self.outcome = Outcome::Succeeded;
    }

    /// Releases the request as a failure.
    pub fn failure(mut self) {
        self.outcome = Outcome::Failed;
    }

    /// How long the request waited for its token (kept apart from the handler's latency).
    pub fn waited(&self) -> Duration {
        Duration::from_nanos(self.waited)
    }
}

impl<C: Clock> Drop for Permit<'_, C> {
    fn drop(&mut self) {
        let outcome = if std::thread::panicking() {
            Outcome::Failed
        } else {
            self.outcome
        };
        self.inner.release(self.started, outcome, self.charge);
    }
}

/// What [`Gate::begin`] decided.
#[derive(Debug)]
pub enum Admission<'g, C: Clock = MonotonicClock> {
    /// Admitted now.
    Now(Permit<'g, C>),
    /// A token is reserved; wait until [`Ticket::ready_at`], then [`Ticket::admit`].
    Wait(Ticket<'g, C>),
    /// Urgent, at the in-flight ceiling: waiting for a freed slot; call [`SlotTicket::admit`] once
    /// [`SlotTicket::is_ready`], or at [`SlotTicket::until`] at the latest.
    Slot(SlotTicket<'g, C>),
}

/// A request that holds a reserved token and waits for it. It counts against `max_waiters` until it
/// is admitted or dropped; dropping it (cancellation) abandons the wait and hands the token back where
/// that is safe (when no later reservation waits behind it).
#[must_use = "dropping the ticket abandons the wait"]
pub struct Ticket<'g, C: Clock = MonotonicClock> {
    pub(super) inner: &'g Inner<C>,
    /// The request's declared memory cost.
    pub(super) cost: u64,
    pub(super) reservation: Reservation,
    pub(super) urgent_bucket: bool,
    pub(super) urgency: Urgency,
    pub(super) until: Nanos,
    pub(super) done: bool,
}

impl<C: Clock> std::fmt::Debug for Ticket<'_, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticket")
            .field("ready_at", &self.ready_at())
            .finish_non_exhaustive()
    }
}

impl<'g, C: Clock> Ticket<'g, C> {
    /// The gate clock's time at which the token exists.
    pub fn ready_at(&self) -> Duration {
        Duration::from_nanos(self.until)
    }

    /// How long the request has to wait from when it was decided.
    pub fn wait(&self) -> Duration {
        Duration::from_nanos(self.reservation.wait)
    }

    /// Admits the request (subject to the in-flight ceiling). Called before [`Ticket::ready_at`], it
    /// refuses the request instead (`RateLimited`, with the time still to wait as `retry_after`):
    /// letting it in early would break the bucket's rate.
    pub fn admit(self) -> Result<Permit<'g, C>, Rejection> {
        let now = self.inner.clock.now();
        if now < self.until {
            let remaining = self.until - now;
            let mut rejection = self.refuse_unable_to_wait();
            rejection.retry_after = Some(Duration::from_nanos(remaining));
            return Err(rejection);
        }
        self.finish()
    }

    pub(super) fn finish(mut self) -> Result<Permit<'g, C>, Rejection> {
        let hot = &self.inner.hot;
        let expected = hot.expected_latency.load(Ordering::Relaxed);
        let timeout = hot.request_timeout.load(Ordering::Relaxed);
        if expected > 0 && self.reservation.wait.saturating_add(expected) > timeout {
            // Latency has grown while it waited: served now, it would answer after its deadline.
            // Its token is spent either way; the slot goes to a request that can still make it.
            self.done = true;
            self.inner.waiters.fetch_sub(1, Ordering::AcqRel);
            return Err(self.inner.refuse(RejectReason::RateLimited, None));
        }
        self.done = true;
        self.inner.waiters.fetch_sub(1, Ordering::AcqRel);
        self.inner.stripes.add_wait(self.reservation.wait);
        #[cfg(feature = "metrics")]
        self.inner
            .wait_seconds
            .record(self.reservation.wait as f64 / 1e9);
        let class = if self.urgent_bucket {
            Class::Known(self.urgency)
        } else {
            Class::Floor
        };
        self.inner
            .enter(None, self.reservation.wait, class, self.cost, None)
    }

    pub(super) fn refuse_unable_to_wait(mut self) -> Rejection {
        self.done = true;
        self.inner.waiters.fetch_sub(1, Ordering::AcqRel);
        self.give_back();
        self.inner.stripes.bump(Event::RefusedRate);
        Rejection {
            reason: RejectReason::RateLimited,
            retry_after: Some(Duration::from_nanos(self.reservation.wait)),
        }
    }

    pub(super) fn give_back(&self) {
        self.inner.cancel_in(
            self.urgent_bucket,
            &self.reservation,
            self.inner.clock.now(),
        );
    }
}

/// What a caller of the gate's decision core gets back: a [`Permit`] alone, or an [`Admission`] that
/// may be a [`Ticket`] to wait with.
pub(super) trait Decided<'g, C: Clock>: Sized {
    /// A request admitted at once.
    fn admitted(permit: Permit<'g, C>) -> Self;
    /// Any decision, from the slow path.
    fn settle(admission: Admission<'g, C>) -> Result<Self, Rejection>;
}

impl<'g, C: Clock> Decided<'g, C> for Admission<'g, C> {
    #[inline]
    fn admitted(permit: Permit<'g, C>) -> Self {
        Admission::Now(permit)
    }

    fn settle(admission: Admission<'g, C>) -> Result<Self, Rejection> {
        Ok(admission)
    }
}

/// For [`Gate::try_acquire`]: a request that would have to wait is refused, its token given back.
impl<'g, C: Clock> Decided<'g, C> for Permit<'g, C> {
    #[inline]
    fn admitted(permit: Permit<'g, C>) -> Self {
        permit
    }

    fn settle(admission: Admission<'g, C>) -> Result<Self, Rejection> {
        match admission {
            Admission::Now(permit) => Ok(permit),
            Admission::Wait(ticket) => Err(ticket.refuse_unable_to_wait()),
            Admission::Slot(ticket) => ticket.admit(),
        }
    }
}

impl<C: Clock> Drop for Ticket<'_, C> {
    fn drop(&mut self) {
        if !self.done {
            self.inner.waiters.fetch_sub(1, Ordering::AcqRel);
            self.give_back();
            self.inner.stripes.bump(Event::Abandoned);
        }
    }
}
