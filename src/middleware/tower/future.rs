//! [`ResponseFuture`]: the gate's decision, then the inner service's answer, with the permit
//! moved into the response body.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The future of [`super::SluiceService`]'s `call`: the gate's decision, then the inner service's
/// answer. Dropping it while the request waits for a token abandons the wait (the token goes
/// back); dropping it while the inner service works releases the permit (before the inner future
/// is dropped).
///
/// The whole exchange lives in one allocation, because the gate's request borrows the request's
/// head while the gate decides; one box for everything moved the least memory per request of
/// the layouts measured (`benches/layer.rs`).
pub struct ResponseFuture<T> {
    inner: Pin<Box<dyn Future<Output = T> + Send>>,
}

impl<T> ResponseFuture<T> {
    pub(crate) fn new(inner: Pin<Box<dyn Future<Output = T> + Send>>) -> Self {
        ResponseFuture { inner }
    }
}

impl<T> Future for ResponseFuture<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        self.inner.as_mut().poll(cx)
    }
}

impl<T> std::fmt::Debug for ResponseFuture<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
