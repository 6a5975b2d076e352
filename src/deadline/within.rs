//! [`within`]: a future run until it completes, its deadline passes, or its caller cancels.

use std::future::Future;
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use crate::clock::{duration_to_nanos, Clock, Nanos};

use super::cancel::{Cancel, Listener};
use super::NO_DEADLINE;

/// What ended a wait or a call before it finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Ended {
    /// The deadline passed first: a timeout (HTTP 504, gRPC `DEADLINE_EXCEEDED`).
    #[error("the deadline passed")]
    Deadline,
    /// The caller cancelled first (HTTP 408, gRPC `CANCELLED`).
    #[error("the caller cancelled")]
    Cancelled,
}

/// Runs `future` until it completes, `deadline` (the clock's time, see
/// [`Request::with_deadline`](crate::Request::with_deadline)) passes, or `cancel` fires, and says
/// which came first. The future is dropped where it stands when it loses.
///
/// Attribution: the future is polled first, so work that completes is never thrown away; then a
/// deadline that has passed (`now >= deadline`) is a timeout, whether or not the signal has fired
/// since, and otherwise a fired signal is a cancellation. The wait sleeps on the clock until the
/// deadline (exact under a [`ManualClock`](crate::clock::ManualClock)) and is woken by the signal:
/// nothing polls. On a clock that cannot sleep here (the wall clocks outside a tokio runtime) the
/// deadline is checked each time the future wakes, but does not wake it.
///
/// ```
/// use std::time::Duration;
/// use sluicegate::clock::ManualClock;
/// use sluicegate::deadline::{self, within, Ended};
///
/// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
/// # async fn main() {
/// let clock = ManualClock::new();
/// let at = deadline::after(&clock, Duration::from_millis(100));
/// let slow = std::future::pending::<()>();
/// let timer = clock.clone();
/// let run = tokio::spawn(async move { within(&timer, Some(at), None, slow).await });
/// clock.wait_for_sleepers(1);
/// clock.advance(Duration::from_millis(100));
/// assert_eq!(run.await.unwrap(), Err(Ended::Deadline));
/// # }
/// ```
pub async fn within<C: Clock, F: Future>(
    clock: &C,
    deadline: Option<Duration>,
    cancel: Option<&Cancel>,
    future: F,
) -> Result<F::Output, Ended> {
    let deadline = deadline.map_or(NO_DEADLINE, duration_to_nanos);
    within_nanos(clock, deadline, cancel, future).await
}

/// [`within`] with the deadline in the clock's nanoseconds ([`NO_DEADLINE`] for none).
pub(crate) async fn within_nanos<C: Clock, F: Future>(
    clock: &C,
    deadline: Nanos,
    cancel: Option<&Cancel>,
    future: F,
) -> Result<F::Output, Ended> {
    if deadline == NO_DEADLINE && cancel.is_none() {
        return Ok(future.await);
    }
    let mut future = pin!(future);
    let sleep = (deadline != NO_DEADLINE && clock.can_sleep()).then(|| clock.sleep_until(deadline));
    let mut sleep = pin!(sleep);
    let mut listener = cancel.map(Listener::new);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(output) = future.as_mut().poll(cx) {
            return Poll::Ready(Ok(output));
        }
        if deadline != NO_DEADLINE && clock.now() >= deadline {
            return Poll::Ready(Err(Ended::Deadline));
        }
        if let Some(listener) = listener.as_mut() {
            if listener.poll(cx).is_ready() {
                return Poll::Ready(Err(Ended::Cancelled));
            }
        }
        if let Some(sleep) = sleep.as_mut().as_pin_mut() {
            // The clock's own sleep says the deadline has come (a timer may run on a time of its
            // own, as tokio's paused clock does): it is the authority.
            if sleep.poll(cx).is_ready() {
                return Poll::Ready(Err(Ended::Deadline));
            }
        }
        Poll::Pending
    })
    .await
}

/// Who ended a wait that a dropped future abandoned: a deadline already passed at `now` is a
/// timeout; anything earlier is the caller's cancellation.
pub(crate) fn attribute_drop(deadline: Nanos, now: Nanos) -> Ended {
    if deadline != NO_DEADLINE && now >= deadline {
        Ended::Deadline
    } else {
        Ended::Cancelled
    }
}
