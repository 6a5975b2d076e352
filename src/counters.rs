//! What the gate has done, counted without a shared hot spot.
//!
//! Every request bumps a few counters. One shared atomic per counter would make every core fight for
//! the same cache line on every request, the cost that makes many limiters slow down as cores are
//! added. Counters are therefore striped (as Java's `LongAdder`): each thread adds to one of several
//! cache-line-padded stripes, picked from the address of a thread-local, and readers sum the stripes.

use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

/// Totals of everything the gate has counted since it was built (reloads keep them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Requests admitted to their handler.
    pub admitted: u64,
    /// Refused because in-flight had reached `max_in_flight`.
    pub refused_in_flight: u64,
    /// Refused because memory use had reached `max_memory_ratio`.
    pub refused_memory: u64,
    /// Refused because no token would exist within `request_timeout`.
    pub refused_rate: u64,
    /// Refused because `max_waiters` requests were already waiting for a token.
    pub refused_waiters: u64,
    /// Gave up while waiting for a token (the caller dropped the future).
    pub abandoned: u64,
    /// Admitted requests that waited for their token.
    pub waited: u64,
    /// Admitted requests released as a success (returned, or the permit was dropped).
    pub succeeded: u64,
    /// Admitted requests released as a failure (`Permit::failure`, or the handler panicked).
    pub failed: u64,
    /// Admitted requests whose future was dropped while the handler ran.
    pub cancelled: u64,
    /// Total time admitted requests spent waiting for their token, in nanoseconds.
    pub wait_nanos: u64,
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
    Succeeded,
    Failed,
    Cancelled,
}

const EVENTS: usize = 9;

#[derive(Debug, Default)]
struct Stripe {
    admitted: AtomicU64,
    events: [AtomicU64; EVENTS],
    wait_nanos: AtomicU64,
}

/// The striped counters.
#[derive(Debug)]
pub(crate) struct Stripes {
    stripes: Box<[CachePadded<Stripe>]>,
    mask: usize,
}

thread_local! {
    // Only its address matters: distinct for each live thread, free to take.
    static STRIPE_KEY: u8 = const { 0 };
}

impl Stripes {
    pub(crate) fn new() -> Self {
        let cores = std::thread::available_parallelism().map_or(4, |n| n.get());
        let n = (cores * 2).next_power_of_two().clamp(2, 64);
        Stripes {
            stripes: (0..n)
                .map(|_| CachePadded::new(Stripe::default()))
                .collect(),
            mask: n - 1,
        }
    }

    #[inline]
    fn mine(&self) -> &Stripe {
        let addr = STRIPE_KEY.with(|k| k as *const u8 as usize);
        // Thread-locals of different threads sit at least a page apart; mix the bits above that.
        let h = (addr >> 12) ^ (addr >> 20);
        &self.stripes[h & self.mask]
    }

    /// Counts an admission and returns this stripe's admission count before it, which the gate uses to
    /// decide deterministically which calls to time.
    #[inline]
    pub(crate) fn admit(&self) -> u64 {
        self.mine().admitted.fetch_add(1, Ordering::Relaxed)
    }

    #[inline]
    pub(crate) fn bump(&self, event: Event) {
        self.mine().events[event as usize].fetch_add(1, Ordering::Relaxed);
    }

    #[inline]
    pub(crate) fn add_wait(&self, nanos: u64) {
        let s = self.mine();
        s.events[Event::Waited as usize].fetch_add(1, Ordering::Relaxed);
        s.wait_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    pub(crate) fn totals(&self) -> Counters {
        let mut sum = [0u64; EVENTS];
        let mut admitted = 0u64;
        let mut wait_nanos = 0u64;
        for s in self.stripes.iter() {
            admitted = admitted.wrapping_add(s.admitted.load(Ordering::Relaxed));
            wait_nanos = wait_nanos.wrapping_add(s.wait_nanos.load(Ordering::Relaxed));
            for (acc, c) in sum.iter_mut().zip(s.events.iter()) {
                *acc = acc.wrapping_add(c.load(Ordering::Relaxed));
            }
        }
        let get = |e: Event| sum[e as usize];
        Counters {
            admitted,
            refused_in_flight: get(Event::RefusedInFlight),
            refused_memory: get(Event::RefusedMemory),
            refused_rate: get(Event::RefusedRate),
            refused_waiters: get(Event::RefusedWaiters),
            abandoned: get(Event::Abandoned),
            waited: get(Event::Waited),
            succeeded: get(Event::Succeeded),
            failed: get(Event::Failed),
            cancelled: get(Event::Cancelled),
            wait_nanos,
        }
    }
}
