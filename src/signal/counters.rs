//! What the gate has done, counted without a shared hot spot.
//!
//! Every request bumps a few counters. One shared atomic per counter would make every core fight for
//! the same cache line on every request, and even uncontended, a locked read-modify-write costs
//! several nanoseconds. Counters are therefore kept per thread (the `thread_local` crate's
//! `ThreadLocal`, which readers can iterate): each thread is the only writer of its own cache-padded
//! slot, so a bump is a plain load and store, and readers sum the slots. A slot outlives its thread
//! (a new thread may take it over), so totals never lose counts.

use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;
use thread_local::ThreadLocal;

/// Totals of everything the gate has counted since it was built (reloads keep them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counters {
    /// Requests admitted to their handler.
    pub admitted: u64,
    /// Refused because in-flight had reached `max_in_flight` (an urgent request that waited for a
    /// slot and got none within `request_timeout` counts here once its wait ends).
    pub refused_in_flight: u64,
    /// Urgent requests that met the in-flight ceiling and waited for a freed slot instead of being
    /// refused at once (admitted once a slot came: then counted in `waited` too).
    pub slot_waits: u64,
    /// Refused because memory use had reached `max_memory_ratio`.
    pub refused_memory: u64,
    /// Refused because no token would exist within `request_timeout`.
    pub refused_rate: u64,
    /// Refused because `max_waiters` requests were already waiting for a token.
    pub refused_waiters: u64,
    /// Gave up while waiting for a token (the caller dropped the future).
    pub abandoned: u64,
    /// Admitted requests that waited for their token or, urgent, for a slot.
    pub waited: u64,
    /// Admitted requests released as a success (returned, or the permit was dropped): the
    /// admitted ones no longer in flight that neither failed nor were cancelled.
    pub succeeded: u64,
    /// Admitted requests released as a failure (`Permit::failure`, or the handler panicked).
    pub failed: u64,
    /// Admitted requests whose future was dropped while the handler ran.
    pub cancelled: u64,
    /// Total time admitted requests spent waiting for their token or a slot, in nanoseconds.
    pub wait_nanos: u64,
    /// Requests classified as urgent (classification happens only where urgency matters: while the
    /// switch is on, near the in-flight ceiling, or, with a learned ceiling, from half of it up
    /// where the urgency is known without a lookup).
    pub classified_urgent: u64,
    /// Requests classified as non-urgent (see `classified_urgent`).
    pub classified_non_urgent: u64,
}

impl Counters {
    /// Every refusal, whatever the reason.
    pub fn refused(&self) -> u64 {
        self.refused_in_flight + self.refused_memory + self.refused_rate + self.refused_waiters
    }

    /// Admitted requests that have been released (succeeded, failed or cancelled).
    pub fn released(&self) -> u64 {
        self.succeeded + self.failed + self.cancelled
    }

    /// Requests that got a decision: `admitted + refused + abandoned`. Requests still waiting for a
    /// token are not in it yet.
    pub fn decided(&self) -> u64 {
        self.admitted + self.refused() + self.abandoned
    }
}

/// Which counter to bump.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Event {
    RefusedInFlight,
    RefusedMemory,
    RefusedRate,
    RefusedWaiters,
    Abandoned,
    Waited,
    Failed,
    Cancelled,
    ClassifiedUrgent,
    ClassifiedNonUrgent,
    /// An urgent request refused at the in-flight ceiling waits for a slot instead: the refusal
    /// counted before is taken back.
    SlotWait,
}

const EVENTS: usize = 11;

#[derive(Debug, Default)]
struct Stripe {
    admitted: AtomicU64,
    events: [AtomicU64; EVENTS],
    wait_nanos: AtomicU64,
}

/// Adds `n` to a counter only the current thread writes: no locked instruction needed.
#[inline]
fn add(counter: &AtomicU64, n: u64) -> u64 {
    let before = counter.load(Ordering::Relaxed);
    counter.store(before.wrapping_add(n), Ordering::Relaxed);
    before
}

/// The per-thread counters.
#[derive(Debug, Default)]
pub(crate) struct Stripes {
    stripes: ThreadLocal<CachePadded<Stripe>>,
}

impl Stripes {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// This thread's slot. The first call on a thread allocates it, once per thread and gate.
    #[inline]
    fn mine(&self) -> &Stripe {
        match self.stripes.get() {
            Some(stripe) => stripe,
            None => self.first_on_this_thread(),
        }
    }

    /// Allocates this thread's slot. Out of line: the slot is built on the stack, aligned to a
    /// cache line, and inlined that frame would be set up on every call of every caller.
    #[cold]
    #[inline(never)]
    fn first_on_this_thread(&self) -> &Stripe {
        self.stripes.get_or_default()
    }

    /// Counts an admission, and `event` with it if given (the request's class, on the same lookup
    /// of this thread's slot); returns this thread's admission count before it, which the gate
    /// uses to decide deterministically which calls to time.
    #[inline]
    pub(crate) fn admit(&self, event: Option<Event>) -> u64 {
        let s = self.mine();
        if let Some(event) = event {
            add(&s.events[event as usize], 1);
        }
        add(&s.admitted, 1)
    }

    #[inline]
    pub(crate) fn bump(&self, event: Event) {
        add(&self.mine().events[event as usize], 1);
    }

    #[inline]
    pub(crate) fn add_wait(&self, nanos: u64) {
        let s = self.mine();
        add(&s.events[Event::Waited as usize], 1);
        add(&s.wait_nanos, nanos);
    }

    /// The sums over every thread's counters, with `in_flight` the requests in flight now.
    ///
    /// Successes are not counted as they happen (a release, most of them, then touches no
    /// counter of its own): they are the admitted requests no longer in flight that did not fail
    /// and were not cancelled. Exact when nothing is admitted or released while the sums are
    /// taken; meanwhile the figure may be off by the requests admitted or released in between.
    pub(crate) fn totals(&self, in_flight: u64) -> Counters {
        let mut sum = [0u64; EVENTS];
        let mut admitted = 0u64;
        let mut wait_nanos = 0u64;
        for s in self.stripes.iter() {
            let s: &Stripe = s;
            admitted = admitted.wrapping_add(s.admitted.load(Ordering::Relaxed));
            wait_nanos = wait_nanos.wrapping_add(s.wait_nanos.load(Ordering::Relaxed));
            for (acc, c) in sum.iter_mut().zip(s.events.iter()) {
                *acc = acc.wrapping_add(c.load(Ordering::Relaxed));
            }
        }
        let get = |e: Event| sum[e as usize];
        Counters {
            admitted,
            refused_in_flight: get(Event::RefusedInFlight).saturating_sub(get(Event::SlotWait)),
            slot_waits: get(Event::SlotWait),
            refused_memory: get(Event::RefusedMemory),
            refused_rate: get(Event::RefusedRate),
            refused_waiters: get(Event::RefusedWaiters),
            abandoned: get(Event::Abandoned),
            waited: get(Event::Waited),
            succeeded: admitted
                .saturating_sub(in_flight)
                .saturating_sub(get(Event::Failed))
                .saturating_sub(get(Event::Cancelled)),
            failed: get(Event::Failed),
            cancelled: get(Event::Cancelled),
            classified_urgent: get(Event::ClassifiedUrgent),
            classified_non_urgent: get(Event::ClassifiedNonUrgent),
            wait_nanos,
        }
    }
}
