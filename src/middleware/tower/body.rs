//! The response body: the service's own body holding the request's permit until it has been
//! sent, or the small body of a refusal.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::breaker::Outcome;
use crate::clock::{Clock, MonotonicClock};
use crate::gate::OwnedPermit;
use crate::policy::PolicyPermit;

pin_project! {
    /// The body of every response that passes through [`super::SluiceService`]: either the
    /// wrapped service's body, which holds the request's permit until its last frame has been
    /// read (or the body is dropped: a client gone mid-stream), or the body of a refusal.
    ///
    /// It is an [`http_body::Body`] with the inner body's `Data` and `Error`, so axum, hyper and
    /// tonic serve it as they serve the inner body, without boxing.
    pub struct SluiceBody<B, C: Clock = MonotonicClock> {
        #[pin]
        kind: Kind<B, C>,
    }
}

pin_project! {
    // The permit lies beside the body it belongs to, where a refusal's data would be: a
    // response is moved several times on its way out, and every byte of it is moved each time.
    #[project = KindProj]
    enum Kind<B, C: Clock> {
        // Fields drop in declaration order: the body first, then the permit.
        Served { #[pin] body: B, release: Option<Release<C>> },
        Refused { data: Option<Bytes> },
    }
}

/// What a served request holds: the gate's permit, or (under a route policy) the policy's,
/// boxed so that the body of a request without policies stays as small as it was.
pub(crate) enum Held<C: Clock> {
    Gate(OwnedPermit<C>),
    Policy(Box<PolicyPermit<C>>),
}

/// The permit of a served request and how it will be released: a failure if its status was
/// marked as one or the body failed, a success otherwise (ignored by a policy's breaker for a
/// 4xx, the caller's own mistake). Dropping it releases the permit.
struct Release<C: Clock> {
    permit: Option<Held<C>>,
    outcome: Outcome,
}

impl<C: Clock> Held<C> {
    /// Releases the request as a failure.
    pub(crate) fn failure(self) {
        match self {
            Held::Gate(permit) => permit.failure(),
            Held::Policy(permit) => permit.failure(),
        }
    }
}

impl<C: Clock> Drop for Release<C> {
    #[inline]
    fn drop(&mut self) {
        match self.permit.take() {
            Some(Held::Gate(permit)) if self.outcome == Outcome::Failure => permit.failure(),
            Some(Held::Gate(permit)) => permit.success(),
            Some(Held::Policy(permit)) => permit.record(self.outcome),
            None => {}
        }
    }
}

impl<B, C: Clock> SluiceBody<B, C> {
    /// The service's body; `held` is released when the body ends or is dropped, with `outcome`
    /// (a failure if the body fails).
    pub(crate) fn served(body: B, held: Option<Held<C>>, outcome: Outcome) -> Self {
        SluiceBody {
            kind: Kind::Served {
                body,
                release: Some(Release {
                    permit: held,
                    outcome,
                }),
            },
        }
    }

    /// The body of a refusal (empty for none).
    pub(crate) fn refused(data: Bytes) -> Self {
        SluiceBody {
            kind: Kind::Refused {
                data: (!data.is_empty()).then_some(data),
            },
        }
    }

    /// Whether this is the body of a refusal rather than the service's own.
    pub fn is_refusal(&self) -> bool {
        matches!(self.kind, Kind::Refused { .. })
    }
}

impl<B, C: Clock> std::fmt::Debug for SluiceBody<B, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SluiceBody")
            .field("refusal", &self.is_refusal())
            .field(
                "holds_permit",
                &matches!(&self.kind, Kind::Served { release, .. } if release.is_some()),
            )
            .finish_non_exhaustive()
    }
}

impl<B, C> Body for SluiceBody<B, C>
where
    B: Body,
    B::Data: From<Bytes>,
    C: Clock,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        match self.project().kind.project() {
            KindProj::Served { mut body, release } => {
                let frame = ready!(body.as_mut().poll_frame(cx));
                match &frame {
                    Some(Ok(_)) if !body.is_end_stream() => {}
                    Some(Err(_)) => {
                        if let Some(release) = release.as_mut() {
                            release.outcome = Outcome::Failure;
                        }
                        *release = None;
                    }
                    // The last frame has been handed over: the request is done.
                    Some(Ok(_)) | None => *release = None,
                }
                Poll::Ready(frame)
            }
            KindProj::Refused { data } => {
                Poll::Ready(data.take().map(|d| Ok(Frame::data(B::Data::from(d)))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Served { body, .. } => body.is_end_stream(),
            Kind::Refused { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Served { body, .. } => body.size_hint(),
            Kind::Refused { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}
