//! Waiting for a limiter, bounded in time (`max_wait`) and in number (`max_waiters`).
//!
//! Waiters stand in one queue, served first come first served or newest first. Only the waiter
//! being served asks the limiter; it then sleeps on the [`Clock`] until the moment the limiter
//! named (`retry_after`), never polling, or, for a concurrency limiter, until a permit is
//! released. The others sleep until they are served. The waiter being served also wakes at the
//! earliest deadline of the queue, so a waiter whose `max_wait` runs out is refused on time. A
//! caller whose wait would exceed `max_wait` is refused at once with the exact `retry_after`.
//!
//! Blocking waits run the same queue: outside a tokio runtime, on the clock's own async sleep
//! (so a [`ManualClock`](crate::clock::ManualClock) drives them exactly); on a clock that cannot
//! sleep there (the wall clocks outside a runtime) or inside a runtime (e.g. in
//! `spawn_blocking`), on a timed condition variable in wall time. Do not call them on a
//! runtime's own worker threads.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Poll, Waker};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::clock::{duration_to_nanos, Clock, Nanos};
use crate::deadline::NO_DEADLINE;
use crate::rejection::{RejectReason, Rejection};

use super::config::{check, LimitConfigError, WaitConfig, WaitOrder};
use super::Limiter;

/// What one try of the limiter gave.
#[derive(Debug)]
pub(crate) enum Attempt<T> {
    Done(T),
    /// Not now; the same try succeeds at this time if nothing else happens.
    RetryAt(Nanos, Rejection),
    /// Not now; worth trying again when capacity is released.
    OnRelease(Rejection),
    /// Never (or not knowably): give up.
    Refuse(Rejection),
}

#[derive(Debug)]
struct Entry {
    id: u64,
    /// The end of its wait: `max_wait` after it came, or its own deadline if that is earlier.
    deadline: Nanos,
    /// Whether `deadline` is the caller's own (a refusal there is `DeadlineExceeded`).
    by_deadline: bool,
    /// Set when someone else decided for this waiter (evicted, or its time ran out).
    verdict: Option<Rejection>,
    waker: Option<Waker>,
}

#[derive(Debug, Default)]
struct Queue {
    entries: VecDeque<Entry>,
    next_id: u64,
}

enum Step<T> {
    Done(Result<T, Rejection>),
    /// Sleep until this time (or until woken), or only until woken.
    Wait(Option<Nanos>),
}

/// The queue of waiters (see the module docs).
#[derive(Debug)]
pub(crate) struct WaitQueue {
    max_wait: Nanos,
    max_waiters: usize,
    order: WaitOrder,
    /// The reason given to a waiter whose `max_wait` ran out.
    reason: RejectReason,
    queue: Mutex<Queue>,
    moved: Condvar,
}

impl WaitQueue {
    pub(crate) fn new(config: &WaitConfig, reason: RejectReason) -> Self {
        WaitQueue {
            max_wait: duration_to_nanos(config.max_wait),
            max_waiters: config.max_waiters,
            order: config.order,
            reason,
            queue: Mutex::new(Queue::default()),
            moved: Condvar::new(),
        }
    }

    /// How many callers are waiting.
    pub(crate) fn len(&self) -> usize {
        let q = self.queue.lock();
        q.entries.iter().filter(|e| e.verdict.is_none()).count()
    }

    /// Wakes the waiter being served (capacity was released).
    pub(crate) fn notify(&self) {
        let q = self.queue.lock();
        self.wake(&q);
    }

    /// The waiter being served: the oldest (FIFO) or newest (LIFO) still undecided.
    fn served(&self, q: &Queue) -> Option<usize> {
        let mut active = q
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.verdict.is_none());
        match self.order {
            WaitOrder::Fifo => active.next(),
            WaitOrder::Lifo => active.next_back(),
        }
        .map(|(i, _)| i)
    }

    /// Wakes the waiter being served and every waiter decided for.
    fn wake(&self, q: &Queue) {
        let served = self.served(q);
        for (i, e) in q.entries.iter().enumerate() {
            if Some(i) == served || e.verdict.is_some() {
                if let Some(w) = &e.waker {
                    w.wake_by_ref();
                }
            }
        }
        self.moved.notify_all();
    }

    /// Tries at once if nobody waits; otherwise (or if the try says wait) joins the queue, until
    /// `max_wait` from now or the caller's `deadline`, whichever is earlier. `Ok` is the final
    /// answer, `Err` the number of the caller's place in the queue.
    fn begin<T>(
        &self,
        now: Nanos,
        can_wait: bool,
        deadline: Nanos,
        attempt: &mut impl FnMut(Nanos) -> Attempt<T>,
    ) -> Result<Result<T, Rejection>, u64> {
        let mut q = self.queue.lock();
        let waiting = q.entries.iter().filter(|e| e.verdict.is_none()).count();
        let own_end = now.saturating_add(self.max_wait);
        if waiting == 0 {
            let ready_at = match attempt(now) {
                Attempt::Done(t) => return Ok(Ok(t)),
                Attempt::Refuse(r) => return Ok(Err(r)),
                Attempt::RetryAt(at, r) if at.saturating_sub(now) > self.max_wait => {
                    return Ok(Err(r))
                }
                Attempt::RetryAt(at, r) => (at, r),
                Attempt::OnRelease(r) => (now.saturating_add(1), r),
            };
            if !can_wait || self.max_waiters == 0 || self.max_wait == 0 {
                return Ok(Err(ready_at.1));
            }
            // A turn that would come after the caller's deadline is refused now, not at it.
            if ready_at.0 > deadline {
                return Ok(Err(deadline_exceeded()));
            }
        } else if !can_wait || self.max_wait == 0 {
            return Ok(Err(Rejection::new(self.reason)));
        } else if deadline <= now {
            return Ok(Err(deadline_exceeded()));
        }
        if waiting >= self.max_waiters {
            let too_many = Rejection::new(RejectReason::TooManyWaiters);
            let oldest = q.entries.iter_mut().find(|e| e.verdict.is_none());
            match (self.order, oldest) {
                (WaitOrder::Lifo, Some(oldest)) => oldest.verdict = Some(too_many),
                _ => return Ok(Err(too_many)),
            }
        }
        q.next_id += 1;
        let id = q.next_id;
        q.entries.push_back(Entry {
            id,
            deadline: own_end.min(deadline),
            by_deadline: deadline < own_end,
            verdict: None,
            waker: None,
        });
        self.wake(&q);
        Err(id)
    }

    /// The refusal of a waiter whose wait ended at its `deadline`.
    fn expired(&self, by_deadline: bool) -> Rejection {
        if by_deadline {
            deadline_exceeded()
        } else {
            Rejection::new(self.reason)
        }
    }

    /// One look at the queue for waiter `id` at `now`.
    fn step<T>(
        &self,
        q: &mut Queue,
        id: u64,
        now: Nanos,
        attempt: &mut impl FnMut(Nanos) -> Attempt<T>,
        waker: Option<&Waker>,
    ) -> Step<T> {
        // The waiter being served gets its try at its deadline; the others' time is up at theirs.
        let served = self.served(q);
        let mut changed = false;
        for (i, e) in q.entries.iter_mut().enumerate() {
            if Some(i) != served && e.verdict.is_none() && e.deadline <= now {
                e.verdict = Some(self.expired(e.by_deadline));
                changed = true;
            }
        }
        let Some(pos) = q.entries.iter().position(|e| e.id == id) else {
            return Step::Done(Err(Rejection::new(self.reason)));
        };
        let leave = |q: &mut Queue, r: Result<T, Rejection>| {
            q.entries.remove(pos);
            self.wake(q);
            Step::Done(r)
        };
        if let Some(r) = q.entries[pos].verdict {
            return leave(q, Err(r));
        }
        if changed {
            self.wake(q);
        }
        if let Some(w) = waker {
            let slot = &mut q.entries[pos].waker;
            if !slot.as_ref().is_some_and(|old| old.will_wake(w)) {
                *slot = Some(w.clone());
            }
        }
        if self.served(q) != Some(pos) {
            return Step::Wait(None);
        }
        let deadline = q.entries[pos].deadline;
        let by_deadline = q.entries[pos].by_deadline;
        let others = q
            .entries
            .iter()
            .filter(|e| e.verdict.is_none() && e.id != id)
            .map(|e| e.deadline)
            .min()
            .unwrap_or(Nanos::MAX);
        match attempt(now) {
            Attempt::Done(t) => leave(q, Ok(t)),
            Attempt::Refuse(r) => leave(q, Err(r)),
            Attempt::RetryAt(at, r) if at > deadline => {
                leave(q, Err(if by_deadline { self.expired(true) } else { r }))
            }
            Attempt::OnRelease(r) if now >= deadline => {
                leave(q, Err(if by_deadline { self.expired(true) } else { r }))
            }
            // Every other deadline is later than now (those that were not have just expired),
            // so the sleep is always into the future.
            Attempt::RetryAt(at, _) => Step::Wait(Some(at.min(others).max(now + 1))),
            Attempt::OnRelease(_) => Step::Wait(Some(deadline.min(others))),
        }
    }

    fn leave(&self, id: u64) {
        let mut q = self.queue.lock();
        if let Some(pos) = q.entries.iter().position(|e| e.id == id) {
            q.entries.remove(pos);
            self.wake(&q);
        }
    }

    /// Waits (asynchronously) until `attempt` succeeds, gives up, or the wait is over: at
    /// `max_wait`, or at the caller's `deadline` ([`NO_DEADLINE`] for none) if that is earlier.
    pub(crate) async fn wait<C: Clock, T>(
        &self,
        clock: &C,
        deadline: Nanos,
        mut attempt: impl FnMut(Nanos) -> Attempt<T>,
    ) -> Result<T, Rejection> {
        let id = match self.begin(clock.now(), clock.can_sleep(), deadline, &mut attempt) {
            Ok(answer) => return answer,
            Err(id) => id,
        };
        let _leave = Leave { queue: self, id };
        let mut sleep: Option<(Nanos, Pin<Box<C::Sleep>>)> = None;
        std::future::poll_fn(|cx| loop {
            let step = self.step(
                &mut self.queue.lock(),
                id,
                clock.now(),
                &mut attempt,
                Some(cx.waker()),
            );
            match step {
                Step::Done(answer) => return Poll::Ready(answer),
                Step::Wait(None) => {
                    sleep = None;
                    return Poll::Pending;
                }
                Step::Wait(Some(at)) => {
                    if sleep.as_ref().map(|s| s.0) != Some(at) {
                        sleep = Some((at, Box::pin(clock.sleep_until(at))));
                    }
                    if let Some((_, s)) = sleep.as_mut() {
                        if s.as_mut().poll(cx).is_pending() {
                            return Poll::Pending;
                        }
                    }
                    sleep = None;
                }
            }
        })
        .await
    }

    /// [`WaitQueue::wait`], blocking the thread (see the module docs for how it sleeps).
    pub(crate) fn wait_blocking<C: Clock, T>(
        &self,
        clock: &C,
        deadline: Nanos,
        mut attempt: impl FnMut(Nanos) -> Attempt<T>,
    ) -> Result<T, Rejection> {
        if clock.can_sleep() && tokio::runtime::Handle::try_current().is_err() {
            return futures_executor::block_on(self.wait(clock, deadline, attempt));
        }
        let id = match self.begin(clock.now(), true, deadline, &mut attempt) {
            Ok(answer) => return answer,
            Err(id) => id,
        };
        let _leave = Leave { queue: self, id };
        let mut q = self.queue.lock();
        loop {
            match self.step(&mut q, id, clock.now(), &mut attempt, None) {
                Step::Done(answer) => return answer,
                Step::Wait(None) => self.moved.wait(&mut q),
                Step::Wait(Some(at)) => {
                    let wait = Duration::from_nanos(at.saturating_sub(clock.now()));
                    let _ = self.moved.wait_for(&mut q, wait);
                }
            }
        }
    }
}

/// Takes a waiter out of the queue however its wait ends (a cancelled future included).
struct Leave<'a> {
    queue: &'a WaitQueue,
    id: u64,
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.queue.leave(self.id);
    }
}

/// A rate limiter callers can wait for: `acquire(n).await` and `acquire_blocking(n)`, bounded
/// by a [`WaitConfig`]. Waiters are served in order; [`Waiting::try_acquire`] does not wait and
/// does not queue (it may take capacity ahead of the waiters).
///
/// ```
/// use std::time::Duration;
/// use sluicegate::clock::ManualClock;
/// use sluicegate::limit::{Gcra, GcraConfig, Limiter, WaitConfig, Waiting};
///
/// let clock = ManualClock::new();
/// let gcra = Gcra::new(GcraConfig { rate: 10, per: Duration::from_secs(1), burst: 1 }, clock.clone())?;
/// let limiter = Waiting::new(gcra, WaitConfig::default())?; // up to 500 ms
/// limiter.try_acquire(1)?;
/// let waiter = std::thread::spawn(move || limiter.acquire_blocking(1));
/// clock.wait_for_sleepers(1); // it sleeps until the next token, 100 ms on
/// clock.advance(Duration::from_millis(100));
/// assert!(waiter.join().unwrap().is_ok());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Waiting<L> {
    limiter: L,
    queue: WaitQueue,
}

impl<L: Limiter> Waiting<L> {
    /// Waiting for `limiter` as `config` says.
    pub fn new(limiter: L, config: WaitConfig) -> Result<Self, LimitConfigError> {
        check(
            config.max_waiters == 0 || !config.max_wait.is_zero(),
            "max_wait",
            humantime::format_duration(config.max_wait),
            "must be longer than 0 when `max_waiters` is above 0",
        )?;
        Ok(Waiting {
            limiter,
            queue: WaitQueue::new(&config, RejectReason::RateLimited),
        })
    }

    /// The limiter waited for.
    pub fn limiter(&self) -> &L {
        &self.limiter
    }

    /// How many callers are waiting now.
    pub fn waiters(&self) -> usize {
        self.queue.len()
    }

    /// [`Limiter::try_acquire`]: no waiting.
    pub fn try_acquire(&self, n: u64) -> Result<(), Rejection> {
        self.limiter.try_acquire(n)
    }

    /// Takes `n`, waiting for them up to `max_wait` if there is room among the waiters.
    pub async fn acquire(&self, n: u64) -> Result<(), Rejection> {
        self.acquire_before(n, NO_DEADLINE).await
    }

    /// [`Waiting::acquire`], blocking the thread.
    pub fn acquire_blocking(&self, n: u64) -> Result<(), Rejection> {
        self.acquire_blocking_before(n, NO_DEADLINE)
    }

    /// [`Waiting::acquire`] for a caller with a deadline (the clock's time, see
    /// [`crate::deadline`]): a wait that would end after it is refused with
    /// [`RejectReason::DeadlineExceeded`], at once when the limiter says the tokens come later.
    pub async fn acquire_with_deadline(&self, n: u64, deadline: Duration) -> Result<(), Rejection> {
        self.acquire_before(n, duration_to_nanos(deadline)).await
    }

    /// [`Waiting::acquire_with_deadline`], blocking the thread.
    pub fn acquire_blocking_with_deadline(
        &self,
        n: u64,
        deadline: Duration,
    ) -> Result<(), Rejection> {
        self.acquire_blocking_before(n, duration_to_nanos(deadline))
    }

    pub(crate) async fn acquire_before(&self, n: u64, deadline: Nanos) -> Result<(), Rejection> {
        self.queue
            .wait(self.limiter.clock(), deadline, |now| {
                attempt(&self.limiter, n, now)
            })
            .await
    }

    pub(crate) fn acquire_blocking_before(&self, n: u64, deadline: Nanos) -> Result<(), Rejection> {
        self.queue
            .wait_blocking(self.limiter.clock(), deadline, |now| {
                attempt(&self.limiter, n, now)
            })
    }
}

/// The refusal of a caller whose deadline ends its wait.
fn deadline_exceeded() -> Rejection {
    Rejection::new(RejectReason::DeadlineExceeded)
}

fn attempt<L: Limiter>(limiter: &L, n: u64, now: Nanos) -> Attempt<()> {
    match limiter.try_acquire(n) {
        Ok(()) => Attempt::Done(()),
        Err(r) => match r.retry_after {
            Some(d) if r.reason != RejectReason::ExceedsCapacity => {
                Attempt::RetryAt(now.saturating_add(duration_to_nanos(d)), r)
            }
            _ => Attempt::Refuse(r),
        },
    }
}
