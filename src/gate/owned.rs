//! Owned permits: an admitted request whose permit owns a handle to its gate.
//!
//! A [`Permit`] borrows its [`Gate`], which is the cheapest thing on the request path but ties the
//! permit to the gate's scope: it cannot move into `tokio::spawn`, into a response future that a
//! framework polls after the handler returns, or into any other `'static` owner. An
//! [`OwnedPermit`] holds a clone of the gate (one reference count) instead, and is `Send +
//! 'static`. Admission is the same decision, made by the same code; only the permit's handle
//! differs, so the borrowed path is unchanged by its existence.
//!
//! Release is the same too, exactly once: on [`OwnedPermit::success`] or
//! [`OwnedPermit::failure`], or when the permit is dropped (a success, or a failure while the
//! thread is panicking).
//!
//! ```
//! use sluicegate::{Config, Gate, Request};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), sluicegate::Rejection> {
//! let gate = Gate::new(Config::default()).expect("the shipped defaults are valid");
//! let request = Request::url("/reports/monthly");
//! let permit = gate.acquire_owned(&request).await?;
//! let worker = tokio::spawn(async move {
//!     // ... the work, on another task; the permit goes with it ...
//!     permit.success();
//! });
//! worker.await.expect("the task ran");
//! assert_eq!(gate.snapshot().in_flight, 0);
//! # Ok(())
//! # }
//! ```

use std::mem::ManuallyDrop;
use std::time::Duration;

use super::{Charge, Gate, Outcome, Permit};
use crate::clock::{Clock, MonotonicClock, Nanos};
use crate::rejection::Rejection;
use crate::request::Request;

#[cfg(feature = "tower")]
pub(crate) use decision::{Decision, Pending};

/// An admitted request that owns a handle to its gate: `Send + 'static`, for spawned tasks and
/// futures that outlive the borrow of the gate. Release it with [`OwnedPermit::success`] or
/// [`OwnedPermit::failure`]; dropping it counts as a success, or as a failure while the thread is
/// panicking.
#[must_use = "dropping the permit releases the request at once"]
pub struct OwnedPermit<C: Clock = MonotonicClock> {
    gate: Gate<C>,
    outcome: Outcome,
    charge: Charge,
    waited: Nanos,
    started: Nanos,
}

impl<C: Clock> std::fmt::Debug for OwnedPermit<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedPermit")
            .field("waited", &self.waited())
            .finish_non_exhaustive()
    }
}

impl<C: Clock> OwnedPermit<C> {
    /// Takes over what `permit` would release, so that it is released once, by the owned permit.
    #[inline]
    fn of(permit: Permit<'_, C>, gate: &Gate<C>) -> Self {
        let permit = ManuallyDrop::new(permit);
        OwnedPermit {
            gate: gate.clone(),
            outcome: permit.outcome,
            charge: permit.charge,
            waited: permit.waited,
            started: permit.started,
        }
    }

    /// Releases the request as a success.
    pub fn success(mut self) {
        self.outcome = Outcome::Succeeded;
    }

    /// Releases the request as a failure.
    pub fn failure(mut self) {
        self.outcome = Outcome::Failed;
    }

    /// Marks the request as cancelled unless released otherwise later: counted as such, its
    /// latency not recorded.
    pub(crate) fn mark_cancelled(&mut self) {
        self.outcome = Outcome::Cancelled;
    }

    /// Releases the request as cancelled by its caller (a policy's call that was cancelled or
    /// timed out while it ran).
    pub(crate) fn cancelled(mut self) {
        self.mark_cancelled();
    }

    /// How long the request waited for its token (kept apart from the handler's latency).
    pub fn waited(&self) -> Duration {
        Duration::from_nanos(self.waited)
    }

    /// The gate that admitted the request.
    pub fn gate(&self) -> &Gate<C> {
        &self.gate
    }
}

impl<C: Clock> Drop for OwnedPermit<C> {
    #[inline]
    fn drop(&mut self) {
        let outcome = if std::thread::panicking() {
            Outcome::Failed
        } else {
            self.outcome
        };
        self.gate.inner.release(self.started, outcome, self.charge);
    }
}

impl<C: Clock> Gate<C> {
    /// [`Gate::acquire`], returning a permit that owns a handle to the gate (see
    /// [`OwnedPermit`]). Dropping the future while it waits for a token gives the token back, as
    /// [`Gate::acquire`] does.
    pub async fn acquire_owned(&self, request: &Request<'_>) -> Result<OwnedPermit<C>, Rejection> {
        let permit = self.acquire(request).await?;
        Ok(OwnedPermit::of(permit, self))
    }

    /// [`Gate::acquire_blocking`], returning an [`OwnedPermit`].
    pub fn acquire_blocking_owned(
        &self,
        request: &Request<'_>,
    ) -> Result<OwnedPermit<C>, Rejection> {
        let permit = self.acquire_blocking(request)?;
        Ok(OwnedPermit::of(permit, self))
    }

    /// [`Gate::try_acquire`], returning an [`OwnedPermit`]: admits the request only if it needs no
    /// wait for a token.
    pub fn try_acquire_owned(&self, request: &Request<'_>) -> Result<OwnedPermit<C>, Rejection> {
        let permit = self.try_acquire(request)?;
        Ok(OwnedPermit::of(permit, self))
    }
}

/// The decision of [`Gate::acquire_owned`] apart from its wait, for the tower layer.
#[cfg(feature = "tower")]
mod decision {
    use std::mem::ManuallyDrop;

    use super::super::slot_ticket::SlotParts;
    use super::super::{Admission, Inner, SlotTicket, Ticket};
    use super::OwnedPermit;
    use crate::cell::bucket::Reservation;
    use crate::clock::{Clock, Nanos};
    use crate::deadline::Cancel;
    use crate::gate::Gate;
    use crate::rejection::{RejectReason, Rejection};
    use crate::request::{Request, Target, Urgency};
    use crate::switch::SwitchBits;

    /// What [`Gate::decide_owned`] found without waiting.
    pub(crate) enum Decision<C: Clock> {
        /// Admitted now.
        Admitted(OwnedPermit<C>),
        /// Refused now.
        Refused(Rejection),
        /// The request has to wait: for its token, or for its urgency from the lookup.
        Pending(Pending<C>),
    }

    /// A decision that takes a wait; [`Pending::wait`] ends it as [`Gate::acquire_owned`] would
    /// have. Dropping it abandons the wait (a reserved token goes back, as a dropped [`Ticket`]'s).
    pub(crate) enum Pending<C: Clock> {
        /// A token reserved (counted among the waiters).
        Token(OwnedTicket<C>),
        /// Urgent, waiting for an in-flight slot.
        Slot(OwnedSlotTicket<C>),
        /// The urgency must come from the lookup; nothing taken yet.
        Lookup {
            gate: Gate<C>,
            request: Box<NamedRequest>,
        },
    }

    impl<C: Clock> Pending<C> {
        /// Waits, then admits or refuses the request.
        pub(crate) async fn wait(self) -> Result<OwnedPermit<C>, Rejection> {
            match self {
                Pending::Token(ticket) => ticket.wait().await,
                Pending::Slot(ticket) => ticket.wait().await,
                Pending::Lookup { gate, request } => gate.acquire_owned(&request.request()).await,
            }
        }
    }

    /// A [`Ticket`] that owns a handle to its gate, with what the wait needs of its request.
    pub(crate) struct OwnedTicket<C: Clock> {
        gate: Gate<C>,
        reserved: Reserved,
        /// Whether the reservation is still this ticket's to give back.
        live: bool,
        deadline: Nanos,
        cancel: Option<Cancel>,
    }

    /// A ticket's reservation, apart from the gate it borrows.
    #[derive(Clone, Copy)]
    struct Reserved {
        cost: u64,
        reservation: Reservation,
        urgent_bucket: bool,
        urgency: Urgency,
        until: Nanos,
    }

    impl Reserved {
        /// The ticket again, owning the reservation.
        fn ticket<C: Clock>(self, inner: &Inner<C>) -> Ticket<'_, C> {
            Ticket {
                inner,
                cost: self.cost,
                reservation: self.reservation,
                urgent_bucket: self.urgent_bucket,
                urgency: self.urgency,
                until: self.until,
                done: false,
            }
        }
    }

    impl<C: Clock> OwnedTicket<C> {
        /// Takes over `ticket`'s reservation, and the deadline and cancellation signal of `request`.
        fn of(ticket: Ticket<'_, C>, gate: &Gate<C>, request: &Request<'_>) -> Self {
            let ticket = ManuallyDrop::new(ticket);
            OwnedTicket {
                gate: gate.clone(),
                reserved: Reserved {
                    cost: ticket.cost,
                    reservation: ticket.reservation,
                    urgent_bucket: ticket.urgent_bucket,
                    urgency: ticket.urgency,
                    until: ticket.until,
                },
                live: !ticket.done,
                deadline: request.deadline_nanos(),
                cancel: request.cancel().cloned(),
            }
        }

        /// [`Gate::acquire`]'s wait for the token: bounded by the deadline, ended by the signal.
        async fn wait(mut self) -> Result<OwnedPermit<C>, Rejection> {
            self.live = false;
            let inner = &*self.gate.inner;
            let ticket = self.reserved.ticket(inner);
            let permit = inner
                .wait_for_token_until(ticket, self.deadline, self.cancel.as_ref())
                .await?;
            Ok(OwnedPermit::of(permit, &self.gate))
        }
    }

    /// A [`SlotTicket`] that owns a handle to its gate, with the request's cancellation signal.
    pub(crate) struct OwnedSlotTicket<C: Clock> {
        gate: Gate<C>,
        /// `None` once its wait began.
        parts: Option<SlotParts>,
        cancel: Option<Cancel>,
    }

    impl<C: Clock> OwnedSlotTicket<C> {
        fn of(ticket: SlotTicket<'_, C>, gate: &Gate<C>, request: &Request<'_>) -> Self {
            OwnedSlotTicket {
                gate: gate.clone(),
                parts: Some(ticket.into_parts()),
                cancel: request.cancel().cloned(),
            }
        }

        /// [`Gate::acquire`]'s wait for a slot.
        async fn wait(mut self) -> Result<OwnedPermit<C>, Rejection> {
            let inner = &*self.gate.inner;
            let Some(parts) = self.parts.take() else {
                return Err(inner.refuse(RejectReason::InFlightCeiling, None));
            };
            let permit = SlotTicket::from_parts(inner, parts)
                .wait(self.cancel.as_ref())
                .await?;
            Ok(OwnedPermit::of(permit, &self.gate))
        }
    }

    impl<C: Clock> Drop for OwnedSlotTicket<C> {
        fn drop(&mut self) {
            if let Some(parts) = self.parts.take() {
                // Dropped before its wait began: the ticket abandons it.
                drop(SlotTicket::from_parts(&self.gate.inner, parts));
            }
        }
    }

    impl<C: Clock> Drop for OwnedTicket<C> {
        fn drop(&mut self) {
            if self.live {
                // Dropped before its wait began: the ticket abandons it.
                drop(self.reserved.ticket(&self.gate.inner));
            }
        }
    }

    /// A request that waits for the lookup, owning what it names.
    pub(crate) struct NamedRequest {
        target: NamedTarget,
        urgency: Option<Urgency>,
        cost: u64,
        deadline: Nanos,
        cancel: Option<Cancel>,
    }

    enum NamedTarget {
        Url(String),
        Method(String, String),
    }

    impl NamedRequest {
        fn of(request: &Request<'_>) -> Self {
            NamedRequest {
                target: match request.target() {
                    Target::Url(path) => NamedTarget::Url(path.to_owned()),
                    Target::Method { interface, method } => {
                        NamedTarget::Method(interface.to_owned(), method.to_owned())
                    }
                },
                urgency: request.urgency(),
                cost: request.cost(),
                deadline: request.deadline_nanos(),
                cancel: request.cancel().cloned(),
            }
        }

        /// The request again, borrowing from this one.
        fn request(&self) -> Request<'_> {
            let mut request = match &self.target {
                NamedTarget::Url(path) => Request::url(path),
                NamedTarget::Method(interface, method) => Request::method(interface, method),
            }
            .with_cost(self.cost)
            .with_deadline_before(self.deadline);
            if let Some(urgency) = self.urgency {
                request = request.with_urgency(urgency);
            }
            if let Some(cancel) = &self.cancel {
                request = request.with_cancel(cancel);
            }
            request
        }
    }

    impl<C: Clock> Gate<C> {
        /// [`Gate::acquire_owned`]'s decision without its wait, for a caller that keeps the wait
        /// apart from the common path (the tower layer): a request admitted or refused at once costs
        /// no future and no allocation. The same decision, by the same code, as `acquire_owned`'s.
        #[inline(always)]
        pub(crate) fn decide_owned(&self, request: &Request<'_>) -> Decision<C> {
            let inner = &*self.inner;
            let status = match inner.check_ceilings() {
                Ok(status) => status,
                Err(rejection) => return self.refused_owned(request, rejection),
            };
            if !status.on() {
                return match inner.enter_unpaced(request) {
                    Ok(permit) => Decision::Admitted(OwnedPermit::of(permit, self)),
                    Err(rejection) => self.refused_owned(request, rejection),
                };
            }
            self.decide_owned_paced(status, request)
        }

        /// A refusal, unless it is an urgent request's at the in-flight ceiling that may wait for
        /// a slot (as [`Gate::acquire`] would).
        #[cold]
        #[inline(never)]
        fn refused_owned(&self, request: &Request<'_>, rejection: Rejection) -> Decision<C> {
            let inner = &*self.inner;
            if !inner.clock.can_sleep() {
                return Decision::Refused(rejection);
            }
            match inner.wait_for_slot(request, rejection) {
                Ok(Admission::Now(permit)) => Decision::Admitted(OwnedPermit::of(permit, self)),
                Ok(Admission::Slot(ticket)) => {
                    Decision::Pending(Pending::Slot(OwnedSlotTicket::of(ticket, self, request)))
                }
                Ok(Admission::Wait(ticket)) => {
                    Decision::Pending(Pending::Token(OwnedTicket::of(ticket, self, request)))
                }
                Err(rejection) => Decision::Refused(rejection),
            }
        }

        /// [`Gate::decide_owned`] with the switch on: a token drawn, or the lookup asked first.
        #[inline(never)]
        fn decide_owned_paced(&self, status: SwitchBits, request: &Request<'_>) -> Decision<C> {
            let inner = &*self.inner;
            let now = inner.clock.now();
            inner.maybe_tick(now);
            let Some(urgency) = inner.classify_cached(request, now) else {
                // `acquire_owned` asks the lookup and decides then, as if called now.
                return Decision::Pending(Pending::Lookup {
                    gate: self.clone(),
                    request: Box::new(NamedRequest::of(request)),
                });
            };
            match inner.draw::<Admission<'_, C>>(status, urgency, request.cost(), now) {
                Ok(Admission::Now(permit)) => Decision::Admitted(OwnedPermit::of(permit, self)),
                Ok(Admission::Wait(ticket)) => {
                    Decision::Pending(Pending::Token(OwnedTicket::of(ticket, self, request)))
                }
                // The draw itself never waits for a slot.
                Ok(Admission::Slot(ticket)) => match ticket.admit() {
                    Ok(permit) => Decision::Admitted(OwnedPermit::of(permit, self)),
                    Err(rejection) => Decision::Refused(rejection),
                },
                Err(rejection) => self.refused_owned(request, rejection),
            }
        }
    }
}
