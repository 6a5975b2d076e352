//! The in-flight counter and its hard ceiling.
//!
//! One shared atomic is unavoidable for an exact ceiling: a request takes a slot with a
//! compare-and-swap that refuses at the ceiling (so the count never exceeds it, even for a moment, and
//! a refused request leaves no trace), and gives it back with one decrement. The gate counts its
//! requests in flight in the word of its [`Turnstile`](crate::cell::turnstile::Turnstile), which holds
//! the whole gate's token bucket beside the count, and uses this counter for the share of them
//! on the non-urgent floor.

use std::sync::atomic::Ordering;

use super::sync::AtomicU64;

/// Requests admitted and not yet released.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    count: AtomicU64,
}

impl InFlight {
    /// No request in flight.
    pub(crate) fn new() -> Self {
        InFlight {
            count: AtomicU64::new(0),
        }
    }

    /// Takes a slot if fewer than `max` are taken; returns whether it did.
    #[inline]
    // Tests only: the gate's floor count mirrors one whose ceiling the turnstile holds.
    #[cfg(test)]
    pub(crate) fn try_enter(&self, max: u64) -> bool {
        self.count
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok()
    }

    /// Takes a slot whatever the count: for a count that mirrors part of another, which holds the
    /// ceiling (the gate's requests on the non-urgent floor).
    #[inline]
    pub(crate) fn enter(&self) {
        self.count.fetch_add(1, Ordering::AcqRel);
    }

    /// Gives a slot back. Call exactly once per successful [`InFlight::try_enter`] or
    /// [`InFlight::enter`].
    #[inline]
    pub(crate) fn leave(&self) {
        self.count.fetch_sub(1, Ordering::AcqRel);
    }

    /// How many slots are taken.
    #[inline]
    pub(crate) fn current(&self) -> u64 {
        self.count.load(Ordering::Acquire)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_refused_at_the_ceiling_unless_entered_whatever_the_ceiling() {
        let in_flight = InFlight::new();
        assert!(in_flight.try_enter(1));
        assert!(!in_flight.try_enter(1)); // at the ceiling
        in_flight.leave();
        assert_eq!(in_flight.current(), 0);
        in_flight.enter(); // whatever the ceiling
        assert_eq!(in_flight.current(), 1);
    }
}
