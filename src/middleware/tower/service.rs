//! [`SluiceService`]: the wrapped service. Readiness is the inner service's; admission happens
//! in `call`, through the gate's own asynchronous acquisition.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body::Body;
use pin_project_lite::pin_project;
use tower_service::Service;

use super::body::SluiceBody;
use super::future::ResponseFuture;
use super::layer::{is_failure, Classifier, FailureRule, Policy};
use super::response::{is_grpc, is_rate, refusal, Answers, Quota};
use crate::clock::{Clock, MonotonicClock};
use crate::deadline::Cancel;
use crate::gate::{Gate, OwnedPermit};
use crate::rejection::Rejection;
use crate::request::Request;

/// A service behind a [`Gate`], made by [`super::SluiceLayer`]. Clones share the gate.
///
/// `poll_ready` forwards the inner service's readiness and takes no permit, so a service that is
/// ready but never called holds nothing. `call` decides: an admitted request goes to the inner
/// service (a clone of it, the one made ready being taken along) and keeps its permit until the
/// response body has been read to its end or dropped; a refused one is answered at once, without
/// reaching the inner service.
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
    type Future = ResponseFuture<Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        // The instance made ready goes with the request; this one stays for the next call.
        let fresh = self.inner.clone();
        let service = std::mem::replace(&mut self.inner, fresh);
        // With the default policy nothing here touches a reference count but the gate's.
        let policy = &*self.policy;
        let exchange = Exchange {
            gate: self.gate.clone(),
            classify: policy.classify.clone(),
            failure: policy.failure.clone(),
            answers: policy.answers,
            grpc_timeout: policy.grpc_timeout,
        };
        ResponseFuture::new(Box::pin(exchange.run(service, request)))
    }
}

/// Classifies the request (borrowing from its head) and acquires its permit; hands the request
/// back with the decision.
async fn decide<B, C: Clock>(
    gate: &Gate<C>,
    classify: &Classifier,
    request: http::Request<B>,
) -> (http::Request<B>, Result<OwnedPermit<C>, Rejection>) {
    let (parts, body) = request.into_parts();
    let decided = gate.acquire_owned(&classify(&parts)).await;
    (http::Request::from_parts(parts, body), decided)
}

/// What one request's exchange needs besides the request and the service.
pub(super) struct Exchange<C: Clock> {
    pub(super) gate: Gate<C>,
    pub(super) classify: Option<Classifier>,
    pub(super) failure: Option<FailureRule>,
    pub(super) answers: Answers,
    pub(super) grpc_timeout: bool,
}

impl<C: Clock> Exchange<C> {
    /// Decides (classifying the request by borrowing from its head), then calls the service or
    /// answers the refusal.
    async fn run<S, B, ResBody>(
        self,
        mut service: S,
        request: http::Request<B>,
    ) -> Result<http::Response<SluiceBody<ResBody, C>>, S::Error>
    where
        S: Service<http::Request<B>, Response = http::Response<ResBody>>,
    {
        // A route policy, a deadline or a cancellation signal: the guarded exchange, apart
        // (boxed), so that this one stays as small as it was measured.
        let deadline = self.grpc_deadline(&request);
        if deadline.is_some()
            || self.gate.policies().is_active()
            || request.extensions().get::<Cancel>().is_some()
        {
            return Box::pin(self.run_guarded(service, request, deadline)).await;
        }
        let (request, decided) = match &self.classify {
            None => {
                let decided = self
                    .gate
                    .acquire_owned(&Request::url(request.uri().path()))
                    .await;
                (request, decided)
            }
            // Boxed apart: inline, its state would grow every exchange's allocation past the
            // size the allocator serves from its per-thread cache (measured in benches/layer.rs).
            Some(classify) => Box::pin(decide(&self.gate, classify, request)).await,
        };
        let mut permit = match decided {
            Ok(permit) => permit,
            Err(rejection) => return Ok(self.refuse(&rejection, request.headers())),
        };
        // Until the answer comes back, a release is a cancellation (the client went away and the
        // server dropped the exchange): not a success, and no latency to learn from.
        permit.mark_cancelled();
        let future = service.call(request);
        drop(service);
        let (outcome, permit) = Holding {
            permit: Some(permit),
            future,
        }
        .await;
        match outcome {
            Ok(response) => {
                let failed = is_failure(self.failure.as_ref(), response.status());
                Ok(response.map(|body| SluiceBody::served(body, permit, failed)))
            }
            Err(error) => {
                if let Some(permit) = permit {
                    permit.failure();
                }
                Err(error)
            }
        }
    }

    /// The answer to a refused request.
    pub(super) fn refuse<ResBody>(
        &self,
        rejection: &Rejection,
        headers: &http::HeaderMap,
    ) -> http::Response<SluiceBody<ResBody, C>> {
        let quota = (self.answers.rate_limit_headers && is_rate(rejection.reason)).then(|| Quota {
            limit: self.gate.snapshot().limits.max_qps,
            window_secs: 1,
        });
        self.answer(rejection, headers, quota)
    }

    /// The answer to a refused request, with the rate in force for `RateLimit-Policy`.
    pub(super) fn answer<ResBody>(
        &self,
        rejection: &Rejection,
        headers: &http::HeaderMap,
        quota: Option<Quota>,
    ) -> http::Response<SluiceBody<ResBody, C>> {
        let grpc = is_grpc(headers);
        tracing::debug!(
            reason = rejection.reason.as_str(),
            retry_after = ?rejection.retry_after,
            grpc,
            "request refused"
        );
        refusal(&self.answers, rejection, grpc, quota).map(SluiceBody::refused)
    }
}

pin_project! {
    /// The inner service's future with the permit it runs under. Fields drop in declaration
    /// order, so a cancelled exchange releases its permit before the handler's future is dropped:
    /// whoever sees the handler gone also sees its capacity back.
    pub(super) struct Holding<F, P> {
        pub(super) permit: Option<P>,
        #[pin]
        pub(super) future: F,
    }
}

impl<F: Future, P> Future for Holding<F, P> {
    /// The inner answer, and the permit back (taken once: `None` if polled after completion).
    type Output = (F::Output, Option<P>);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let outcome = ready!(this.future.poll(cx));
        Poll::Ready((outcome, this.permit.take()))
    }
}
