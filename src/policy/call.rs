//! Running a call under a policy: the chain, then the call bounded by its deadline, its outcome
//! to the breaker; and the same inside the gate's `call`.

use std::future::Future;

use crate::breaker::{Classifier, DefaultClassifier};
use crate::clock::Clock;
use crate::deadline::{within_nanos, Ended};
use crate::gate::Gate;
use crate::rejection::{RejectReason, Rejection};
use crate::request::Request;

use super::permit::{OnDrop, PolicyPermit};
use super::stats::Ending;
use super::Policies;

/// Why [`Policies::call`] did not return the call's value.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError<E> {
    /// A stage refused the request; the call did not run.
    #[error("{0}")]
    Rejected(Rejection),
    /// The call ran and returned this error.
    #[error("call failed: {0}")]
    Failed(E),
    /// The call ran past its deadline and was dropped there (a timeout: HTTP 504, gRPC
    /// `DEADLINE_EXCEEDED`).
    #[error("the call ran past its deadline")]
    TimedOut,
    /// The caller cancelled the call while it ran (HTTP 408, gRPC `CANCELLED`).
    #[error("the caller cancelled the call")]
    Cancelled,
}

impl<E> PolicyError<E> {
    /// The refusal, if the request was refused before its call ran.
    pub fn rejection(&self) -> Option<&Rejection> {
        match self {
            PolicyError::Rejected(r) => Some(r),
            _ => None,
        }
    }
}

impl<C: Clock> Policies<C> {
    /// Runs `f` if the request's policy admits it, bounded by its deadline, and reports its
    /// result to the breaker (`Ok` a success, `Err` a failure). The call is dropped where it
    /// stands if the deadline passes ([`PolicyError::TimedOut`], a failure for the breaker) or
    /// the request's [`Cancel`](crate::deadline::Cancel) fires ([`PolicyError::Cancelled`],
    /// nothing for the breaker); so it is if this future is dropped (counted the same way, by
    /// which came first). A panic in `f` counts as a failure and goes on to the caller.
    pub async fn call<F, Fut, T, E>(&self, request: &Request<'_>, f: F) -> Result<T, PolicyError<E>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.call_with(&DefaultClassifier, request, f).await
    }

    /// [`Policies::call`] with your own reading of the result (e.g. a 4xx is ignored).
    pub async fn call_with<K, F, Fut, T, E>(
        &self,
        classifier: &K,
        request: &Request<'_>,
        f: F,
    ) -> Result<T, PolicyError<E>>
    where
        K: Classifier<T, E>,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let permit = self
            .admit(request, None, OnDrop::Abandoned)
            .await
            .map_err(|r| PolicyError::Rejected(r.rejection))?;
        run(permit, request, classifier, f).await
    }

    /// [`Policies::call`] with the gate as the chain's last stage (for a route whose policy has
    /// `gate = true`).
    pub async fn call_with_gate<K, F, Fut, T, E>(
        &self,
        gate: &Gate<C>,
        classifier: &K,
        request: &Request<'_>,
        f: F,
    ) -> Result<T, PolicyError<E>>
    where
        K: Classifier<T, E>,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let permit = self
            .admit(request, Some(gate), OnDrop::Abandoned)
            .await
            .map_err(|r| PolicyError::Rejected(r.rejection))?;
        run(permit, request, classifier, f).await
    }
}

async fn run<C, K, F, Fut, T, E>(
    mut permit: PolicyPermit<C>,
    request: &Request<'_>,
    classifier: &K,
    f: F,
) -> Result<T, PolicyError<E>>
where
    C: Clock,
    K: Classifier<T, E>,
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let clock = permit.route.clock.clone();
    let deadline = permit.deadline;
    match within_nanos(&clock, deadline, request.cancel(), f()).await {
        Ok(result) => {
            permit.record(classifier.classify(&result));
            result.map_err(PolicyError::Failed)
        }
        Err(ended) => {
            permit.settle_ended(ended);
            Err(match ended {
                Ended::Deadline => PolicyError::TimedOut,
                Ended::Cancelled => PolicyError::Cancelled,
            })
        }
    }
}

/// [`Gate::call`] for a gate with policies, or a request with a deadline or a cancellation
/// signal: the chain (the gate last, where the route's policy says so), then `success` bounded
/// by the deadline. A refusal, a timeout and a cancellation all go to `fail`, with
/// `RejectReason::DeadlineExceeded` or `Cancelled` for the last two.
pub(crate) async fn gate_call<C, T, S, SFut, F, FFut>(
    gate: &Gate<C>,
    request: Request<'_>,
    success: S,
    fail: F,
) -> T
where
    C: Clock,
    S: FnOnce() -> SFut,
    SFut: Future<Output = T>,
    F: FnOnce(Rejection) -> FFut,
    FFut: Future<Output = T>,
{
    let mut permit = match gate
        .policies()
        .admit(&request, Some(gate), OnDrop::Abandoned)
        .await
    {
        Ok(permit) => permit,
        Err(refusal) => return fail(refusal.rejection).await,
    };
    let clock = permit.route.clock.clone();
    match within_nanos(&clock, permit.deadline, request.cancel(), success()).await {
        Ok(reply) => {
            permit.settle(Ending::Succeeded);
            reply
        }
        Err(ended) => {
            permit.settle_ended(ended);
            fail(Rejection::new(match ended {
                Ended::Deadline => RejectReason::DeadlineExceeded,
                Ended::Cancelled => RejectReason::Cancelled,
            }))
            .await
        }
    }
}

/// [`Gate::call_blocking`] under the request's policy: the chain, then `success`. A blocking call
/// cannot be stopped at its deadline; one that returns after it is counted as a timeout (a
/// failure for the breaker and the gate), and its value is still returned.
pub(crate) fn gate_call_blocking<C: Clock, T>(
    gate: &Gate<C>,
    request: Request<'_>,
    success: impl FnOnce() -> T,
    fail: impl FnOnce(Rejection) -> T,
) -> T {
    let mut permit = match gate
        .policies()
        .admit_blocking(&request, Some(gate), OnDrop::Success)
    {
        Ok(permit) => permit,
        Err(refusal) => return fail(refusal.rejection),
    };
    let reply = success();
    let late = permit.deadline().is_some() && permit.route.clock.now() >= permit.deadline;
    permit.settle(if late {
        Ending::TimedOut
    } else {
        Ending::Succeeded
    });
    reply
}
