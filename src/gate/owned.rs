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
