//! [`ResponseFuture`]: the inner service's answer under the request's permit, a refusal ready at
//! once, or the rare exchange that has to wait; in each case the permit moves into the response
//! body.
//!
//! The gate decides in `call`, without waiting, for nearly every request: admitted at once, the
//! inner service is called there and this future only holds its future and the permit; refused at
//! once, it holds the answer. Neither allocates. Only an exchange that has to wait (for a token,
//! for the urgency lookup) or that runs under a route policy, a deadline or a cancellation signal
//! is a boxed future of its own.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use pin_project_lite::pin_project;

use super::body::{Held, SluiceBody};
use super::guarded::outcome_of;
use super::layer::FailureRule;
use crate::clock::{Clock, MonotonicClock};
use crate::gate::OwnedPermit;

/// How a boxed exchange ended: the inner service's answer with what it holds, or a refusal.
pub(crate) enum Settled<T, C: Clock> {
    /// The inner service answered (or failed); `held` is released with the answer's outcome.
    Answered(T, Option<Held<C>>),
    /// Refused, or ended by its deadline or its caller: the answer.
    Refused(http::Response<Bytes>),
}

/// A boxed exchange.
type Boxed<T, C> = Pin<Box<dyn Future<Output = Settled<T, C>> + Send>>;

pin_project! {
    /// The future of [`super::SluiceService`]'s `call`, over the inner service's future `F`.
    ///
    /// A request admitted at once has been passed to the inner service in `call`; this future
    /// holds that service's future and the permit, and moves the permit into the response body.
    /// Dropped before the answer, it releases the permit (as a cancellation) before it drops the
    /// inner future. A request refused at once is answered when first polled. A request that has
    /// to wait for its token (or its urgency), or runs under a route policy, a deadline or a
    /// cancellation signal, is a boxed exchange: dropping it while the request waits abandons the
    /// wait (the token goes back).
    ///
    /// # Panics
    ///
    /// Polled again after it completed with a refusal.
    pub struct ResponseFuture<F: Future, C: Clock = MonotonicClock> {
        // Fields drop in declaration order: the permit is released before the inner future is
        // dropped, as in `Holding`.
        permit: Option<OwnedPermit<C>>,
        failure: Option<FailureRule>,
        #[pin]
        state: State<F, C>,
    }
}

pin_project! {
    // The inner future alone in its variant, the permit beside the state: the future the inner
    // service returns is written where it stays, where nested in the permit's variant it was
    // assembled apart and copied once more (measured in benches/layer.rs).
    #[project = StateProj]
    enum State<F: Future, C: Clock> {
        Admitted {
            #[pin]
            future: F,
        },
        Refused {
            answer: Option<http::Response<Bytes>>,
        },
        Boxed {
            exchange: Boxed<F::Output, C>,
        },
    }
}

impl<F: Future, C: Clock> ResponseFuture<F, C> {
    /// The inner service's `future`, admitted under `permit`.
    #[inline(always)]
    pub(crate) fn admitted(
        future: F,
        permit: OwnedPermit<C>,
        failure: Option<FailureRule>,
    ) -> Self {
        ResponseFuture {
            permit: Some(permit),
            failure,
            state: State::Admitted { future },
        }
    }

    /// A refusal's answer.
    pub(crate) fn refused(answer: http::Response<Bytes>) -> Self {
        ResponseFuture {
            permit: None,
            failure: None,
            state: State::Refused {
                answer: Some(answer),
            },
        }
    }

    /// An exchange that waits, or runs under a policy, a deadline or a cancellation signal.
    pub(crate) fn boxed(exchange: Boxed<F::Output, C>, failure: Option<FailureRule>) -> Self {
        ResponseFuture {
            permit: None,
            failure,
            state: State::Boxed { exchange },
        }
    }
}

impl<F, B, E, C> Future for ResponseFuture<F, C>
where
    F: Future<Output = Result<http::Response<B>, E>>,
    C: Clock,
{
    type Output = Result<http::Response<SluiceBody<B, C>>, E>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        match this.state.project() {
            StateProj::Admitted { future } => {
                let answer = ready!(future.poll(cx));
                let held = this.permit.take().map(Held::Gate);
                Poll::Ready(settle(answer, held, this.failure.as_ref()))
            }
            StateProj::Refused { answer } => match answer.take() {
                Some(answer) => Poll::Ready(Ok(answer.map(SluiceBody::refused))),
                None => panic!("`ResponseFuture` polled after it completed"),
            },
            StateProj::Boxed { exchange } => match ready!(exchange.as_mut().poll(cx)) {
                Settled::Answered(answer, held) => {
                    Poll::Ready(settle(answer, held, this.failure.as_ref()))
                }
                Settled::Refused(answer) => Poll::Ready(Ok(answer.map(SluiceBody::refused))),
            },
        }
    }
}

/// The inner service's answer, its permit moved into the body (released with the answer's
/// outcome when the body ends), or its error, the permit released as a failure.
#[inline]
fn settle<B, E, C: Clock>(
    answer: Result<http::Response<B>, E>,
    held: Option<Held<C>>,
    failure: Option<&FailureRule>,
) -> Result<http::Response<SluiceBody<B, C>>, E> {
    match answer {
        Ok(response) => {
            let outcome = outcome_of(failure, response.status());
            Ok(response.map(|body| SluiceBody::served(body, held, outcome)))
        }
        Err(error) => {
            if let Some(held) = held {
                held.failure();
            }
            Err(error)
        }
    }
}

impl<F: Future, C: Clock> std::fmt::Debug for ResponseFuture<F, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.state {
            State::Admitted { .. } => "admitted",
            State::Refused { .. } => "refused",
            State::Boxed { .. } => "boxed",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish_non_exhaustive()
    }
}

pin_project! {
    /// The inner service's future with the permit it runs under. Fields drop in declaration
    /// order, so a cancelled exchange releases its permit before the handler's future is dropped:
    /// whoever sees the handler gone also sees its capacity back.
    pub(crate) struct Holding<F, P> {
        pub(crate) permit: Option<P>,
        #[pin]
        pub(crate) future: F,
    }
}

impl<F: Future, P> Future for Holding<F, P> {
    /// The inner answer, and the permit back (taken once: `None` if polled after completion).
    type Output = (F::Output, Option<P>);

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let outcome = ready!(this.future.poll(cx));
        Poll::Ready((outcome, this.permit.take()))
    }
}
