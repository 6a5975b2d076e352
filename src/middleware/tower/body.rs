//! The response body: the service's own body holding the request's permit until it has been
//! sent, or the small body of a refusal.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::clock::{Clock, MonotonicClock};
use crate::gate::OwnedPermit;

pin_project! {
    /// The body of every response that passes through [`super::SluiceService`]: either the
    /// wrapped service's body, which holds the request's permit until its last frame has been
    /// read (or the body is dropped: a client gone mid-stream), or the body of a refusal.
    ///
    /// It is an [`http_body::Body`] with the inner body's `Data` and `Error`, so axum, hyper and
    /// tonic serve it as they serve the inner body, without boxing.
    pub struct SluiceBody<B, C: Clock = MonotonicClock> {
        #[pin]
        kind: Kind<B>,
        release: Option<Release<C>>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Served { #[pin] body: B },
        Refused { data: Option<Bytes> },
    }
}

/// The permit of a served request and how it will be released: a failure if its status was
/// marked as one or the body failed, a success otherwise. Dropping it releases the permit.
struct Release<C: Clock> {
    permit: Option<OwnedPermit<C>>,
    failed: bool,
}

impl<C: Clock> Drop for Release<C> {
    fn drop(&mut self) {
        if let Some(permit) = self.permit.take() {
            if self.failed {
                permit.failure();
            } else {
                permit.success();
            }
        }
    }
}

impl<B, C: Clock> SluiceBody<B, C> {
    /// The service's body; `permit` is released when the body ends or is dropped, as a failure
    /// if `failed`.
    pub(crate) fn served(body: B, permit: Option<OwnedPermit<C>>, failed: bool) -> Self {
        SluiceBody {
            kind: Kind::Served { body },
            release: Some(Release { permit, failed }),
        }
    }

    /// The body of a refusal (empty for none).
    pub(crate) fn refused(data: Bytes) -> Self {
        SluiceBody {
            kind: Kind::Refused {
                data: (!data.is_empty()).then_some(data),
            },
            release: None,
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
            .field("holds_permit", &self.release.is_some())
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
        let this = self.project();
        match this.kind.project() {
            KindProj::Served { mut body } => {
                let frame = ready!(body.as_mut().poll_frame(cx));
                match &frame {
                    Some(Ok(_)) if !body.is_end_stream() => {}
                    Some(Err(_)) => {
                        if let Some(release) = this.release.as_mut() {
                            release.failed = true;
                        }
                        *this.release = None;
                    }
                    // The last frame has been handed over: the request is done.
                    Some(Ok(_)) | None => *this.release = None,
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
            Kind::Served { body } => body.is_end_stream(),
            Kind::Refused { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Served { body } => body.size_hint(),
            Kind::Refused { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}
