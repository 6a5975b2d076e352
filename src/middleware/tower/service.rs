//! [`SluiceService`]: the wrapped service. Readiness is the inner service's; admission happens
//! in `call`, where the gate decides without waiting: an admitted request is passed to the inner
//! service at once, a refused one answered; only a request that has to wait, or one under a route
//! policy, a deadline or a cancellation signal, goes on in a boxed exchange.

use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::Body;
use tower_service::Service;

use super::body::{Held, SluiceBody};
use super::future::{Holding, ResponseFuture, Settled};
use super::guarded::grpc_deadline;
use super::layer::{Classifier, Policy};
use super::response::{is_grpc, is_rate, refusal, Answers, Quota};
use crate::clock::{Clock, MonotonicClock, Nanos};
use crate::deadline::Cancel;
use crate::gate::{Decision, Gate, OwnedPermit, Pending};
use crate::rejection::Rejection;
use crate::request::Request;

/// A service behind a [`Gate`], made by [`super::SluiceLayer`]. Clones share the gate.
///
/// `poll_ready` forwards the inner service's readiness and takes no permit, so a service that is
/// ready but never called holds nothing. `call` decides: an admitted request goes to the inner
/// service (the instance made ready) and keeps its permit until the response body has been read
/// to its end or dropped; a refused one is answered at once, without reaching the inner service.
/// A request that has to wait for its token takes the instance made ready along (a clone stays
/// for the next call).
pub struct SluiceService<S, C: Clock = MonotonicClock> {
    inner: S,
    gate: Gate<C>,
    policy: Arc<Policy>,
}

impl<S, C: Clock> SluiceService<S, C> {
    pub(crate) fn new(inner: S, gate: Gate<C>, policy: Arc<Policy>) -> Self {
        SluiceService {
            inner,
            gate,
            policy,
        }
    }

    /// The gate this service admits requests through.
    pub fn gate(&self) -> &Gate<C> {
        &self.gate
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: Clone, C: Clock> Clone for SluiceService<S, C> {
    fn clone(&self) -> Self {
        SluiceService {
            inner: self.inner.clone(),
            gate: self.gate.clone(),
            policy: Arc::clone(&self.policy),
        }
    }
}

impl<S, C: Clock> std::fmt::Debug for SluiceService<S, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SluiceService")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl<S, B, ResBody, C> Service<http::Request<B>> for SluiceService<S, C>
where
    S: Service<http::Request<B>, Response = http::Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    B: Send + 'static,
    ResBody: Body + Send + 'static,
    ResBody::Data: From<Bytes>,
    C: Clock,
{
    type Response = http::Response<SluiceBody<ResBody, C>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, C>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let policy = &*self.policy;
        let deadline = grpc_deadline(&self.gate, policy.grpc_timeout, &request);
        if policy.classify.is_some()
            || deadline.is_some()
            || self.gate.policies().is_active()
            || request.extensions().get::<Cancel>().is_some()
        {
            return self.call_apart(request, deadline);
        }
        // The common exchange, kept small so that the request goes to the inner service without
        // being copied on the way: named by its path (borrowed), decided without waiting.
        match self.gate.decide_owned(&Request::url(request.uri().path())) {
            Decision::Admitted(permit) => self.admitted(permit, request),
            decision => self.undecided(decision, request),
        }
    }
}

impl<S, C: Clock> SluiceService<S, C> {
    /// Calls the inner service (the instance made ready) for a request admitted under `permit`.
    #[inline(always)]
    fn admitted<B, ResBody>(
        &mut self,
        mut permit: OwnedPermit<C>,
        request: http::Request<B>,
    ) -> ResponseFuture<S::Future, C>
    where
        S: Service<http::Request<B>, Response = http::Response<ResBody>>,
    {
        // Until the answer comes back, a release is a cancellation (the client went away and the
        // server dropped the exchange): not a success, no latency to learn from.
        permit.mark_cancelled();
        let future = self.inner.call(request);
        ResponseFuture::admitted(future, permit, self.policy.failure.clone())
    }

    /// A request the gate refused, or one that has to wait: answered, or a boxed exchange.
    #[inline(never)]
    fn undecided<B, ResBody>(
        &mut self,
        decision: Decision<C>,
        request: http::Request<B>,
    ) -> ResponseFuture<S::Future, C>
    where
        S: Service<http::Request<B>, Response = http::Response<ResBody>> + Clone + Send + 'static,
        S::Future: Send,
        S::Error: Send,
        B: Send + 'static,
        ResBody: Send + 'static,
    {
        let policy = &*self.policy;
        match decision {
            Decision::Admitted(permit) => self.admitted(permit, request),
            Decision::Refused(rejection) => {
                // The instance made ready is let go, as any refused request's.
                drop(take_ready(&mut self.inner));
                let answer = refuse(&self.gate, &policy.answers, &rejection, request.headers());
                ResponseFuture::refused(answer)
            }
            Decision::Pending(pending) => {
                let exchange = Exchange::new(&self.gate, policy);
                let service = take_ready(&mut self.inner);
                ResponseFuture::boxed(
                    Box::pin(exchange.run_waiting(pending, service, request)),
                    policy.failure.clone(),
                )
            }
        }
    }

    /// A request under a route policy, a deadline or a cancellation signal (the guarded exchange,
    /// boxed), or one named by the layer's classifier.
    #[inline(never)]
    fn call_apart<B, ResBody>(
        &mut self,
        request: http::Request<B>,
        deadline: Option<Nanos>,
    ) -> ResponseFuture<S::Future, C>
    where
        S: Service<http::Request<B>, Response = http::Response<ResBody>> + Clone + Send + 'static,
        S::Future: Send,
        S::Error: Send,
        B: Send + 'static,
        ResBody: Send + 'static,
    {
        let policy = &*self.policy;
        let guarded = deadline.is_some()
            || self.gate.policies().is_active()
            || request.extensions().get::<Cancel>().is_some();
        match &policy.classify {
            Some(classify) if !guarded => {
                let (parts, body) = request.into_parts();
                let decision = self.gate.decide_owned(&classify(&parts));
                let request = http::Request::from_parts(parts, body);
                match decision {
                    Decision::Admitted(permit) => self.admitted(permit, request),
                    decision => self.undecided(decision, request),
                }
            }
            _ => {
                let exchange = Exchange::new(&self.gate, policy);
                let service = take_ready(&mut self.inner);
                ResponseFuture::boxed(
                    Box::pin(exchange.run_guarded(service, request, deadline)),
                    policy.failure.clone(),
                )
            }
        }
    }
}

/// The instance of the service made ready, for a request served later; a clone of it stays for
/// the next call.
fn take_ready<S: Clone>(service: &mut S) -> S {
    let fresh = service.clone();
    std::mem::replace(service, fresh)
}

/// The answer to a refused request by the gate.
pub(super) fn refuse<C: Clock>(
    gate: &Gate<C>,
    answers: &Answers,
    rejection: &Rejection,
    headers: &http::HeaderMap,
) -> http::Response<Bytes> {
    let quota = (answers.rate_limit_headers && is_rate(rejection.reason)).then(|| Quota {
        limit: gate.rate_in_force(),
        window_secs: 1,
    });
    let grpc = is_grpc(headers);
    tracing::debug!(
        reason = rejection.reason.as_str(),
        retry_after = ?rejection.retry_after,
        grpc,
        "request refused"
    );
    refusal(answers, rejection, grpc, quota)
}

/// What an exchange that waits, or runs under a policy, needs besides the request and the
/// service: it outlives the call, so it owns its handles.
pub(super) struct Exchange<C: Clock> {
    pub(super) gate: Gate<C>,
    pub(super) classify: Option<Classifier>,
    pub(super) answers: Answers,
}

impl<C: Clock> Exchange<C> {
    fn new(gate: &Gate<C>, policy: &Policy) -> Self {
        Exchange {
            gate: gate.clone(),
            classify: policy.classify.clone(),
            answers: policy.answers,
        }
    }

    /// Waits for the gate's decision (a token, the urgency lookup), then calls the service or
    /// answers the refusal.
    async fn run_waiting<S, B, ResBody>(
        self,
        pending: Pending<C>,
        mut service: S,
        request: http::Request<B>,
    ) -> Settled<Result<http::Response<ResBody>, S::Error>, C>
    where
        S: Service<http::Request<B>, Response = http::Response<ResBody>>,
    {
        let mut permit = match pending.wait().await {
            Ok(permit) => permit,
            Err(rejection) => {
                let answer = refuse(&self.gate, &self.answers, &rejection, request.headers());
                return Settled::Refused(answer);
            }
        };
        permit.mark_cancelled();
        let future = service.call(request);
        drop(service);
        let (answer, permit) = Holding {
            permit: Some(permit),
            future,
        }
        .await;
        Settled::Answered(answer, permit.map(Held::Gate))
    }
}
