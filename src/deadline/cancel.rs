//! [`Cancel`]: a caller's way to say "I no longer want this", heard by whoever waits for it.

use std::future::Future;
use std::hash::{Hash, Hasher};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;

#[derive(Debug, Default)]
struct Shared {
    cancelled: AtomicBool,
    next_id: AtomicU64,
    /// The wakers of the waits listening, by the listener's number.
    wakers: Mutex<Vec<(u64, Waker)>>,
}

/// A cancellation signal: [`Cancel::cancel`] ends every wait that listens to it (a request that
/// carries it through [`Request::with_cancel`](crate::Request::with_cancel), a
/// [`within`](super::within)). Cheap to clone: clones share the signal. Once cancelled, it stays
/// cancelled.
///
/// Dropping a future is Rust's own cancellation and needs no signal; this one is for a caller who
/// must still be answered after cancelling (a proxy that relays a client's cancellation, a
/// framework that learns of a disconnect before it drops the request): the wait ends with
/// [`Ended::Cancelled`](super::Ended::Cancelled), or a refusal with
/// [`RejectReason::Cancelled`](crate::RejectReason::Cancelled), which the tower layer answers
/// with 408 (gRPC `CANCELLED`).
///
/// ```
/// use sluicegate::deadline::Cancel;
///
/// let cancel = Cancel::new();
/// let seen_by_a_task = cancel.clone();
/// assert!(!seen_by_a_task.is_cancelled());
/// cancel.cancel();
/// assert!(seen_by_a_task.is_cancelled());
/// ```
#[derive(Debug, Clone, Default)]
pub struct Cancel {
    shared: Arc<Shared>,
}

impl Cancel {
    /// A signal not yet cancelled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels: every wait listening ends (the first time; later calls do nothing).
    pub fn cancel(&self) {
        if self.shared.cancelled.swap(true, Ordering::AcqRel) {
            return;
        }
        let wakers = std::mem::take(&mut *self.shared.wakers.lock());
        for (_, waker) in wakers {
            waker.wake();
        }
    }

    /// Whether [`Cancel::cancel`] has been called.
    pub fn is_cancelled(&self) -> bool {
        self.shared.cancelled.load(Ordering::Acquire)
    }

    /// A future that completes once the signal is cancelled.
    pub fn cancelled(&self) -> Cancelled<'_> {
        Cancelled {
            listener: Listener::new(self),
        }
    }
}

impl PartialEq for Cancel {
    /// The same signal (clones of one another).
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }
}

impl Eq for Cancel {}

impl Hash for Cancel {
    fn hash<H: Hasher>(&self, state: &mut H) {
        Arc::as_ptr(&self.shared).hash(state);
    }
}

/// One wait's registration with a [`Cancel`]: it is woken when the signal fires, and leaves the
/// signal's list when dropped.
#[derive(Debug)]
pub(crate) struct Listener<'a> {
    cancel: &'a Cancel,
    id: Option<u64>,
}

impl<'a> Listener<'a> {
    pub(crate) fn new(cancel: &'a Cancel) -> Self {
        Listener { cancel, id: None }
    }

    /// Ready once cancelled; otherwise registers `cx`'s waker (replacing an earlier one).
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let shared = &self.cancel.shared;
        if shared.cancelled.load(Ordering::Acquire) {
            return Poll::Ready(());
        }
        let mut wakers = shared.wakers.lock();
        // Checked again under the lock: `cancel` sets the flag before it takes the list.
        if shared.cancelled.load(Ordering::Acquire) {
            return Poll::Ready(());
        }
        let id = *self
            .id
            .get_or_insert_with(|| shared.next_id.fetch_add(1, Ordering::Relaxed));
        match wakers.iter_mut().find(|(i, _)| *i == id) {
            Some((_, w)) => {
                if !w.will_wake(cx.waker()) {
                    w.clone_from(cx.waker());
                }
            }
            None => wakers.push((id, cx.waker().clone())),
        }
        Poll::Pending
    }
}

impl Drop for Listener<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            let mut wakers = self.cancel.shared.wakers.lock();
            if let Some(at) = wakers.iter().position(|(i, _)| *i == id) {
                wakers.swap_remove(at);
            }
        }
    }
}

/// The future of [`Cancel::cancelled`].
#[derive(Debug)]
#[must_use = "futures do nothing unless polled"]
pub struct Cancelled<'a> {
    listener: Listener<'a>,
}

impl Future for Cancelled<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.listener.poll(cx)
    }
}
