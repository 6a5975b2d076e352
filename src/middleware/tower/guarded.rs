//! The guarded exchange: a request under a route policy (breaker → rate → concurrency → the
//! gate), a deadline (its policy's `timeout`, or a gRPC request's `grpc-timeout`) or a
//! cancellation signal ([`Cancel`] in its extensions). Its waits and its call are bounded by the
//! deadline; a call that runs past it is answered 504 (`DEADLINE_EXCEEDED`), one its caller
//! cancels 408 (`CANCELLED`), and either way its permit is released before the handler's future
//! is dropped.

use std::future::Future;
use std::pin::pin;
use std::task::Poll;

use http::header::HeaderName;
use http::StatusCode;
use tower_service::Service;

use bytes::Bytes;

use super::body::Held;
use super::future::{Holding, Settled};
use super::key;
use super::layer::{is_failure, FailureRule};
use super::response::{is_grpc, is_rate, refusal, Quota};
use super::service::Exchange;
use crate::breaker::Outcome;
use crate::clock::{duration_to_nanos, Clock, Nanos};
use crate::deadline::{nanos_after, parse_grpc_timeout, Cancel, Ended, Listener, NO_DEADLINE};
use crate::gate::Gate;
use crate::policy::{OnDrop, Refusal, StageKind};
use crate::rejection::{RejectReason, Rejection};
use crate::request::Request;

/// The header of a gRPC request's timeout.
static GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");

/// What an answer says to a policy's breaker: a failure by the layer's rule (5xx by default),
/// nothing for any other 4xx (the caller's own mistake), a success otherwise.
#[inline]
pub(super) fn outcome_of(rule: Option<&FailureRule>, status: StatusCode) -> Outcome {
    if is_failure(rule, status) {
        Outcome::Failure
    } else if status.is_client_error() {
        Outcome::Ignored
    } else {
        Outcome::Success
    }
}

/// The deadline a gRPC request's `grpc-timeout` sets, if the layer reads it (`read`).
#[inline]
pub(super) fn grpc_deadline<C: Clock, B>(
    gate: &Gate<C>,
    read: bool,
    request: &http::Request<B>,
) -> Option<Nanos> {
    // `content-type` first: a standard header, found without hashing its name.
    if !read || !is_grpc(request.headers()) {
        return None;
    }
    grpc_timeout(gate, request.headers())
}

/// The deadline of a gRPC request's `grpc-timeout`, if it has a valid one.
#[inline(never)]
fn grpc_timeout<C: Clock>(gate: &Gate<C>, headers: &http::HeaderMap) -> Option<Nanos> {
    let value = headers.get(&GRPC_TIMEOUT)?;
    let Some(timeout) = parse_grpc_timeout(value.as_bytes()) else {
        tracing::debug!(value = ?value, "malformed grpc-timeout ignored");
        return None;
    };
    Some(nanos_after(gate.clock().now(), duration_to_nanos(timeout)))
}

impl<C: Clock> Exchange<C> {
    /// Decides through the request's policy (the gate last), then calls the service bounded by
    /// the deadline and the cancellation signal, or answers the refusal.
    pub(super) async fn run_guarded<S, B, ResBody>(
        self,
        mut service: S,
        request: http::Request<B>,
        deadline: Option<Nanos>,
    ) -> Settled<Result<http::Response<ResBody>, S::Error>, C>
    where
        S: Service<http::Request<B>, Response = http::Response<ResBody>>,
    {
        let (parts, body) = request.into_parts();
        let cancel = parts.extensions.get::<Cancel>().cloned();
        let policies = self.gate.policies();
        let extracted;
        let decided = {
            let mut gated = match &self.classify {
                None => Request::url(parts.uri.path()),
                Some(classify) => classify(&parts),
            };
            if gated.key().is_none() && policies.has_keys() {
                let route = policies.route_for(&gated);
                extracted = route
                    .policy
                    .key
                    .as_ref()
                    .and_then(|k| key::extract(&parts, &k.source));
                if let Some(key) = extracted.as_deref() {
                    gated = gated.with_key(key);
                }
            }
            if let Some(at) = deadline {
                gated = gated.with_deadline_before(at);
            }
            if let Some(cancel) = &cancel {
                gated = gated.with_cancel(cancel);
            }
            policies
                .admit(&gated, Some(&self.gate), OnDrop::Abandoned)
                .await
        };
        let request = http::Request::from_parts(parts, body);
        let grpc = is_grpc(request.headers());
        let permit = match decided {
            Ok(permit) => permit,
            Err(refused) => return Settled::Refused(self.refuse_by_policy(&refused, grpc)),
        };
        let until = permit.deadline;
        let clock = self.gate.clock().clone();
        let future = service.call(request);
        drop(service);
        let mut held = pin!(Holding {
            permit: Some(permit),
            future,
        });
        let sleep = (until != NO_DEADLINE && clock.can_sleep()).then(|| clock.sleep_until(until));
        let mut sleep = pin!(sleep);
        let mut listener = cancel.as_ref().map(Listener::new);
        let outcome = std::future::poll_fn(|cx| {
            if let Poll::Ready(done) = held.as_mut().poll(cx) {
                return Poll::Ready(Ok(done));
            }
            let ended = if until != NO_DEADLINE && clock.now() >= until {
                Some(Ended::Deadline)
            } else if listener.as_mut().is_some_and(|l| l.poll(cx).is_ready()) {
                Some(Ended::Cancelled)
            } else if sleep
                .as_mut()
                .as_pin_mut()
                .is_some_and(|s| s.poll(cx).is_ready())
            {
                Some(Ended::Deadline)
            } else {
                None
            };
            match ended {
                Some(ended) => {
                    // Released before the handler's future is dropped (with `held`, later).
                    if let Some(mut permit) = held.as_mut().project().permit.take() {
                        permit.settle_ended(ended);
                    }
                    Poll::Ready(Err(ended))
                }
                None => Poll::Pending,
            }
        })
        .await;
        match outcome {
            Ok((answer, permit)) => {
                Settled::Answered(answer, permit.map(|p| Held::Policy(Box::new(p))))
            }
            Err(ended) => {
                let reason = match ended {
                    Ended::Deadline => RejectReason::DeadlineExceeded,
                    Ended::Cancelled => RejectReason::Cancelled,
                };
                tracing::debug!(reason = reason.as_str(), grpc, "call ended early");
                Settled::Refused(refusal(&self.answers, &Rejection::new(reason), grpc, None))
            }
        }
    }

    /// The answer to a refusal by a stage of the chain: `RateLimit-Policy` names the route's rate
    /// when its rate limit refused, the gate's when the gate did.
    fn refuse_by_policy(&self, refused: &Refusal, grpc: bool) -> http::Response<Bytes> {
        let rejection = &refused.rejection;
        let quota = if self.answers.rate_limit_headers && is_rate(rejection.reason) {
            match refused.stage {
                StageKind::Rate => refused.rate.map(|r| Quota {
                    limit: r.limit as f64,
                    window_secs: r.window.as_secs() + u64::from(r.window.subsec_nanos() > 0),
                }),
                _ => Some(Quota {
                    limit: self.gate.rate_in_force(),
                    window_secs: 1,
                }),
            }
        } else {
            None
        };
        tracing::debug!(
            reason = rejection.reason.as_str(),
            retry_after = ?rejection.retry_after,
            grpc,
            "request refused by its policy"
        );
        refusal(&self.answers, rejection, grpc, quota)
    }
}
