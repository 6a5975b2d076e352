//! An urgent request's wait for an in-flight slot (see [`slot_queue`](super::slot_queue)): who
//! may wait, the [`SlotTicket`] that waits, and how a freed slot reaches it. Apart from the
//! request path but for [`Inner::hand_on_slots`], which a release calls only while urgent
//! requests wait.

use std::future::poll_fn;

use super::slot_queue::{Joined, Waiter};
use super::*;
use crate::deadline::{within_nanos, Cancel};

/// With a learned latency, a wait for a slot lasts at most this many expected latencies: longer,
/// the answer comes later than a limit told the workers would give it (in `flash-crowd`, p99 106.6
/// ms against an SLO of 100 with waits up to `request_timeout`, 96.2 with this bound).
pub(crate) const SLOT_WAIT_LATENCIES: u64 = 4;

impl<C: Clock> Inner<C> {
    /// Takes a slot for a waiting urgent request below [`HotLimits::slot_level`], not in the
    /// urgent room above the ceiling (the queue is there so that urgent work need not pile up
    /// above it), and never where memory reaches its hard ceiling; says at which count.
    fn take_slot_for_waiter(&self) -> Option<u64> {
        let ceiling = self.hot.slot_level.load(Ordering::Relaxed);
        let memory_hard = self.hot.memory_hard_cap.load(Ordering::Relaxed);
        self.turnstile
            .try_enter(ceiling.min(memory_hard))
            .then(|| self.turnstile.current())
    }

    /// Gives back a slot taken for a waiter that will not use it: the next waiter gets it.
    fn give_back_slot(&self) {
        self.turnstile.leave();
        self.hand_on_slots();
    }

    /// Hands freed slots to waiting urgent requests, newest first, while the ceiling has room.
    #[cold]
    #[inline(never)]
    pub(super) fn hand_on_slots(&self) {
        self.slots.grant(|| self.take_slot_for_waiter());
    }

    /// An urgent request refused at the in-flight ceiling (`refused`, counted as such) waits for a
    /// slot instead, if the ceiling is known ([`HotLimits::slot_waits`]), waiting is allowed
    /// (`request_timeout` and `max_waiters` above zero) and no more than `max_waiters` wait
    /// already; for `request_timeout` at most, and with a learned latency for
    /// [`SLOT_WAIT_LATENCIES`] expected latencies at most. Returns the ticket that waits, a permit
    /// if a slot came free meanwhile, or the refusal.
    pub(super) fn wait_for_slot<'g>(
        &'g self,
        request: &Request<'_>,
        refused: Rejection,
    ) -> Result<Admission<'g, C>, Rejection> {
        if refused.reason != RejectReason::InFlightCeiling
            || !self.hot.slot_waits.load(Ordering::Relaxed)
        {
            return Err(refused);
        }
        let now = self.clock.now();
        if self.classify_cached(request, now) != Some(Urgency::Urgent) {
            return Err(refused);
        }
        let hot = &self.hot;
        let mut timeout = hot.request_timeout.load(Ordering::Relaxed);
        let expected = hot.expected_latency.load(Ordering::Relaxed);
        if expected > 0 {
            timeout = timeout.min(expected.saturating_mul(SLOT_WAIT_LATENCIES));
        }
        let until = now.saturating_add(timeout).min(request.deadline_nanos());
        let max = hot.max_waiters.load(Ordering::Relaxed);
        if until <= now || max == 0 {
            return Err(refused);
        }
        match self.slots.join(max, || self.take_slot_for_waiter()) {
            Joined::Full => Err(refused),
            Joined::Entered(level) => {
                // Not refused after all.
                self.stripes.bump(Event::SlotWait);
                self.enter_granted(request.cost(), 0, level)
                    .map(Admission::Now)
            }
            Joined::Waiting(waiter) => {
                self.stripes.bump(Event::SlotWait);
                Ok(Admission::Slot(SlotTicket {
                    inner: self,
                    waiter,
                    cost: request.cost(),
                    since: now,
                    until,
                    done: false,
                }))
            }
        }
    }

    /// The permit of an urgent request whose slot was taken at `level` in flight, after a wait
    /// of `waited`: its memory cost is charged now (a refusal gives the slot back).
    fn enter_granted(
        &self,
        cost: u64,
        waited: Nanos,
        level: u64,
    ) -> Result<Permit<'_, C>, Rejection> {
        if cost > 0 {
            if let Err(rejection) = self.charge(cost) {
                self.give_back_slot();
                return Err(rejection);
            }
        }
        if waited > 0 {
            self.stripes.add_wait(waited);
        }
        let slot = self.slot_of(Urgency::Urgent);
        Ok(self.permit_at(None, waited, cost, slot, None, Some(level)))
    }
}

/// An urgent request that met the in-flight ceiling and waits for a slot, from
/// [`Gate::begin`](super::Gate::begin). A slot freed by a release goes to the newest waiting
/// urgent request before any new request can take it. Once [`SlotTicket::is_ready`], or at
/// [`SlotTicket::until`] at the latest, call [`SlotTicket::admit`]; dropping the ticket
/// abandons the wait (a slot already handed to it goes on to the next waiter).
#[must_use = "dropping the ticket abandons the wait"]
pub struct SlotTicket<'g, C: Clock = MonotonicClock> {
    inner: &'g Inner<C>,
    waiter: Arc<Waiter>,
    cost: u64,
    since: Nanos,
    until: Nanos,
    done: bool,
}

impl<C: Clock> std::fmt::Debug for SlotTicket<'_, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotTicket")
            .field("until", &self.until())
            .field("ready", &self.is_ready())
            .finish_non_exhaustive()
    }
}

impl<'g, C: Clock> SlotTicket<'g, C> {
    /// The gate clock's time at which the wait ends without a slot: `request_timeout` after it
    /// began (with a learned latency, four expected latencies if that is sooner), or the
    /// request's deadline if that comes first.
    pub fn until(&self) -> Duration {
        Duration::from_nanos(self.until)
    }

    /// Whether a slot has been handed to the request: [`SlotTicket::admit`] now admits it.
    pub fn is_ready(&self) -> bool {
        self.waiter.granted()
    }

    /// Admits the request if a slot has been handed to it; otherwise ends its wait and refuses it
    /// (`InFlightCeiling`).
    pub fn admit(mut self) -> Result<Permit<'g, C>, Rejection> {
        self.done = true;
        let inner = self.inner;
        if inner.slots.leave(&self.waiter) {
            let waited = inner.clock.now().saturating_sub(self.since);
            inner.stripes.bump(Event::Waited);
            return inner.enter_granted(self.cost, waited, self.waiter.level());
        }
        Err(inner.refuse(RejectReason::InFlightCeiling, None))
    }

    /// Waits until a slot is handed to the request, [`SlotTicket::until`] passes or `cancel`
    /// fires, and then admits or refuses it as [`SlotTicket::admit`] would (`Cancelled` if
    /// cancelled). Waiting needs a clock that can sleep (a tokio runtime with time for the
    /// default clock).
    pub(super) async fn wait(self, cancel: Option<&Cancel>) -> Result<Permit<'g, C>, Rejection> {
        let waiter = Arc::clone(&self.waiter);
        let granted = poll_fn(|cx| waiter.poll_granted(cx));
        match within_nanos(&self.inner.clock, self.until, cancel, granted).await {
            Err(crate::deadline::Ended::Cancelled) => {
                let mut ticket = self;
                ticket.withdraw();
                Err(ticket.inner.refuse(RejectReason::Cancelled, None))
            }
            _ => self.admit(),
        }
    }

    /// Ends the wait unused: out of the queue, and a slot handed to it meanwhile given back.
    fn withdraw(&mut self) {
        self.done = true;
        if self.inner.slots.leave(&self.waiter) {
            self.inner.give_back_slot();
        }
    }
}

/// A [`SlotTicket`] apart from the gate it borrows, for a ticket that owns a handle to its gate.
#[cfg(feature = "tower")]
pub(super) struct SlotParts {
    waiter: Arc<Waiter>,
    cost: u64,
    since: Nanos,
    until: Nanos,
}

#[cfg(feature = "tower")]
impl<'g, C: Clock> SlotTicket<'g, C> {
    /// The wait, without the gate: [`SlotTicket::from_parts`] must take it up again (parts
    /// dropped alone leave the waiter queued, and a slot handed to it taken).
    pub(super) fn into_parts(mut self) -> SlotParts {
        self.done = true;
        SlotParts {
            waiter: Arc::clone(&self.waiter),
            cost: self.cost,
            since: self.since,
            until: self.until,
        }
    }

    /// The ticket again, on `inner`, the gate it came from.
    pub(super) fn from_parts(inner: &'g Inner<C>, parts: SlotParts) -> Self {
        SlotTicket {
            inner,
            waiter: parts.waiter,
            cost: parts.cost,
            since: parts.since,
            until: parts.until,
            done: false,
        }
    }
}

impl<C: Clock> Drop for SlotTicket<'_, C> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        self.withdraw();
        self.inner.stripes.bump(Event::Abandoned);
    }
}
