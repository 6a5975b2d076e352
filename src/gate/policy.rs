//! The gate with the per-route policies of its configuration (see [`crate::policy`]): built with
//! the gate, rebuilt on reload, applied by `call`, `call_blocking` and `acquire_with_policy`.

use super::*;
use crate::deadline::NO_DEADLINE;
use crate::policy::{Policies, PolicyPermit};

impl<C: Clock> Gate<C> {
    /// The per-route policies of the gate's configuration (`[policies]`; empty if it has none).
    /// Usable as they are, e.g. [`Policies::stats`].
    pub fn policies(&self) -> &Policies<C> {
        &self.inner.policies
    }

    /// Admits the request through its policy (breaker → rate → concurrency), then through the
    /// gate if the policy says so (`gate = true`, the default), each stage refusing with its own
    /// reason, every wait bounded by the request's deadline. The permit holds what each stage
    /// gave; report the call's outcome on it ([`PolicyPermit::failure`], ...). Without policies
    /// this is [`Gate::acquire_owned`] in a [`PolicyPermit`].
    pub async fn acquire_with_policy(
        &self,
        request: &Request<'_>,
    ) -> Result<PolicyPermit<C>, Rejection> {
        self.inner.policies.acquire_with_gate(self, request).await
    }

    /// [`Gate::acquire_with_policy`], blocking the thread where a stage makes it wait.
    pub fn acquire_with_policy_blocking(
        &self,
        request: &Request<'_>,
    ) -> Result<PolicyPermit<C>, Rejection> {
        self.inner
            .policies
            .acquire_blocking_with_gate(self, request)
    }

    /// Whether `call` goes through the policy chain: the gate has policies, or the request a
    /// deadline or a cancellation signal that bounds its call.
    #[inline]
    pub(super) fn calls_through_policy(&self, request: &Request<'_>) -> bool {
        self.inner.policies.is_active()
            || request.deadline_nanos() != NO_DEADLINE
            || request.cancel().is_some()
    }
}
