//! Urgent requests that meet the in-flight ceiling wait here for a slot instead of being refused.
//!
//! # What it decides, and why
//! A ceiling that refuses whoever comes when it is full refuses urgent work as readily as any
//! other: a service slowed for a moment by a few long requests, or a gate still learning its
//! ceiling, then loses urgent requests that the service would have answered in time a moment
//! later. Letting them in above the ceiling instead piles them into the service's own queue,
//! where they slow everything further (on a congested service, without end). So an urgent request
//! that finds the ceiling full joins this queue, and a slot freed by a release goes to a waiting
//! urgent request before any new request can take it: the service sees no more than the ceiling,
//! and urgent work gets the slots first.
//!
//! The newest waiter gets the next slot (last in, first out): under a flood of urgent work the
//! queue stands, and serving its oldest first would answer only requests whose clients are about
//! to give up; the newest still have their whole timeout ahead. A wait lasts at most
//! `request_timeout` (with a learned latency, four times it at most; never past the request's
//! deadline); at most `max_waiters` wait at once.
//!
//! # The request path
//! A release reads one word (the queue's length) and does nothing more while nobody waits. Only
//! while urgent requests wait does a release take the queue's lock, to hand the slot on; the
//! sampler's tick does the same, since a raised ceiling frees slots too. A waiter that joins
//! tries for a slot once more after it is counted, so that a slot freed meanwhile by a release
//! that saw an empty queue is not lost. (Where the processor may still order a release's look at
//! the queue before its own leaving, a slot freed at that very instant waits for the next release
//! or tick: never lost, at worst late by one.)

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;

/// Waiting for a slot.
const WAITING: u8 = 0;
/// A slot was taken on the waiter's behalf: it is the waiter's to use or give back.
const GRANTED: u8 = 1;
/// The waiter left (its wait ended or it was dropped) without a slot.
const GONE: u8 = 2;

/// One urgent request waiting for a slot.
#[derive(Debug, Default)]
pub(super) struct Waiter {
    state: AtomicU8,
    /// The count in flight once its slot was taken: slots handed on together are taken at
    /// successive levels, which the capacity estimator must see as they were.
    level: AtomicU64,
    waker: Mutex<Option<Waker>>,
}

impl Waiter {
    /// The count in flight once its slot was taken (meaningful once granted).
    pub(super) fn level(&self) -> u64 {
        self.level.load(Ordering::Acquire)
    }

    /// Whether a slot has been taken for it.
    pub(super) fn granted(&self) -> bool {
        self.state.load(Ordering::Acquire) == GRANTED
    }

    /// Ready once granted; otherwise wakes `cx` when it is.
    pub(super) fn poll_granted(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.granted() {
            return Poll::Ready(());
        }
        *self.waker.lock() = Some(cx.waker().clone());
        // Granted between the first look and the waker's registration: the grant found no
        // waker to wake.
        if self.granted() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

/// How a request's joining the queue went.
pub(super) enum Joined {
    /// A slot was free after all: taken at this count in flight, nothing to wait for.
    Entered(u64),
    /// `max_waiters` wait already.
    Full,
    /// Waiting.
    Waiting(Arc<Waiter>),
}

/// The urgent requests waiting for a slot, newest on top.
#[derive(Debug, Default)]
pub(super) struct SlotQueue {
    /// How many wait: the one word a release reads.
    len: AtomicU64,
    stack: Mutex<Vec<Arc<Waiter>>>,
}

impl SlotQueue {
    /// Whether nobody waits (a release's only look at the queue).
    #[inline(always)]
    pub(super) fn is_empty(&self) -> bool {
        self.len.load(Ordering::SeqCst) == 0
    }

    /// How many wait.
    pub(super) fn len(&self) -> u64 {
        self.len.load(Ordering::Relaxed)
    }

    /// Joins the queue unless `max` wait already; `try_enter` takes a slot below the ceiling and
    /// says at which count in flight. It is tried again once the waiter is counted: a release
    /// that looked before then found the queue empty and handed its slot to nobody.
    pub(super) fn join(&self, max: u64, mut try_enter: impl FnMut() -> Option<u64>) -> Joined {
        let mut stack = self.stack.lock();
        if stack.len() as u64 >= max {
            return Joined::Full;
        }
        stack.push(Arc::new(Waiter::default()));
        self.len.store(stack.len() as u64, Ordering::SeqCst);
        if let Some(level) = try_enter() {
            stack.pop();
            self.len.store(stack.len() as u64, Ordering::SeqCst);
            return Joined::Entered(level);
        }
        match stack.last() {
            Some(waiter) => Joined::Waiting(Arc::clone(waiter)),
            None => Joined::Full,
        }
    }

    /// Hands slots to the newest waiters while `try_enter` takes one below the ceiling.
    pub(super) fn grant(&self, mut try_enter: impl FnMut() -> Option<u64>) {
        let mut stack = self.stack.lock();
        while let Some(waiter) = stack.pop() {
            let Some(level) = try_enter() else {
                stack.push(waiter);
                break;
            };
            waiter.level.store(level, Ordering::Relaxed);
            waiter.state.store(GRANTED, Ordering::Release);
            if let Some(waker) = waiter.waker.lock().take() {
                waker.wake();
            }
        }
        self.len.store(stack.len() as u64, Ordering::SeqCst);
    }

    /// Takes `waiter` out of the queue. Returns whether it had been granted a slot meanwhile,
    /// which is then its to use or give back.
    pub(super) fn leave(&self, waiter: &Arc<Waiter>) -> bool {
        let mut stack = self.stack.lock();
        if waiter
            .state
            .compare_exchange(WAITING, GONE, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return true;
        }
        if let Some(at) = stack.iter().rposition(|w| Arc::ptr_eq(w, waiter)) {
            stack.remove(at);
        }
        self.len.store(stack.len() as u64, Ordering::SeqCst);
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_waiter_gets_the_first_slot() {
        let queue = SlotQueue::default();
        let Joined::Waiting(old) = queue.join(8, || None) else {
            panic!("nothing free: it waits");
        };
        let Joined::Waiting(new) = queue.join(8, || None) else {
            panic!("nothing free: it waits");
        };
        let mut free = 1;
        queue.grant(|| {
            let took = free > 0;
            free -= took as i32;
            took.then_some(1)
        });
        assert!(new.granted() && !old.granted());
        assert_eq!(queue.len(), 1);
        assert!(!queue.leave(&old));
        assert!(queue.is_empty());
    }

    #[test]
    fn a_full_queue_turns_the_next_away_and_a_free_slot_is_taken_at_once() {
        let queue = SlotQueue::default();
        assert!(matches!(queue.join(1, || None), Joined::Waiting(_)));
        assert!(matches!(queue.join(1, || None), Joined::Full));
        let queue = SlotQueue::default();
        assert!(matches!(queue.join(1, || Some(1)), Joined::Entered(1)));
        assert!(queue.is_empty());
    }

    #[test]
    fn a_waiter_granted_before_it_leaves_keeps_its_slot() {
        let queue = SlotQueue::default();
        let Joined::Waiting(waiter) = queue.join(8, || None) else {
            panic!("nothing free: it waits");
        };
        queue.grant(|| Some(1));
        assert!(queue.leave(&waiter));
        assert!(queue.is_empty());
    }
}
