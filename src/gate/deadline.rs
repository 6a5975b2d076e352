//! The gate's wait for a token, bounded by the request's deadline and ended by its caller's
//! cancellation (see [`crate::deadline`]). Apart from the request path: only a request that has
//! to wait comes here.

use super::*;
use crate::deadline::{within_nanos, Cancel, NO_DEADLINE};

impl<C: Clock> Inner<C> {
    /// Waits for the token `ticket` reserved and admits the request. A token that comes after
    /// the request's deadline is given back and the request refused at once
    /// (`DeadlineExceeded`); a [`Cancel`](crate::deadline::Cancel) that fires during the wait
    /// gives it back too (`Cancelled`).
    pub(super) async fn wait_for_token<'g>(
        &'g self,
        ticket: Ticket<'g, C>,
        request: &Request<'_>,
    ) -> Result<Permit<'g, C>, Rejection> {
        self.wait_for_token_until(ticket, request.deadline_nanos(), request.cancel())
            .await
    }

    /// [`Inner::wait_for_token`] for a request whose deadline (`NO_DEADLINE` for none) and
    /// cancellation signal are all that is left of it.
    pub(super) async fn wait_for_token_until<'g>(
        &'g self,
        ticket: Ticket<'g, C>,
        deadline: Nanos,
        cancel: Option<&Cancel>,
    ) -> Result<Permit<'g, C>, Rejection> {
        if ticket.until > deadline {
            return Err(ticket.refuse_past_deadline());
        }
        if !self.clock.can_sleep() {
            return Err(ticket.refuse_unable_to_wait());
        }
        let sleep = self.clock.sleep_until(ticket.until);
        match within_nanos(&self.clock, NO_DEADLINE, cancel, sleep).await {
            Ok(()) => ticket.finish(),
            Err(_) => Err(ticket.refuse_cancelled()),
        }
    }
}

impl<'g, C: Clock> Admission<'g, C> {
    /// The admission, or a refusal if it is a wait that would end after the request's deadline
    /// (the token given back).
    pub(super) fn within_deadline(self, request: &Request<'_>) -> Result<Self, Rejection> {
        match self {
            Admission::Wait(ticket) if ticket.until > request.deadline_nanos() => {
                Err(ticket.refuse_past_deadline())
            }
            admission => Ok(admission),
        }
    }
}

impl<C: Clock> Ticket<'_, C> {
    /// Refuses a waiter whose token would come after its deadline, giving the token back.
    pub(super) fn refuse_past_deadline(mut self) -> Rejection {
        self.done = true;
        self.inner.waiters.fetch_sub(1, Ordering::AcqRel);
        self.give_back();
        self.inner.refuse(RejectReason::DeadlineExceeded, None)
    }

    /// Refuses a waiter whose caller cancelled, giving the token back.
    pub(super) fn refuse_cancelled(mut self) -> Rejection {
        self.done = true;
        self.inner.waiters.fetch_sub(1, Ordering::AcqRel);
        self.give_back();
        self.inner.refuse(RejectReason::Cancelled, None)
    }
}
