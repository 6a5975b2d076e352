//! Where a limiter keeps its state: one small trait between the algorithms and the storage.
//!
//! Every algorithm in this module is a pure step "state at `now` → decision and new state"; the
//! [`StateStore`] applies that step atomically. In memory that is a compare-and-swap on one word
//! ([`AtomicStore`], for GCRA) or a short `parking_lot` lock ([`MutexStore`], for states of
//! several fields); a keyed store or a Redis script can implement the same trait later without
//! touching the algorithms (governor's split between its rate limiter and its `StateStore`).

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

/// Applies a limiter's step to its state atomically.
pub trait StateStore<S>: Send + Sync {
    /// Runs `step` on the state as one atomic change and returns its result. `step` may be run
    /// more than once (a store built on compare-and-swap retries when another thread got there
    /// first), so it must not have effects beyond the state it is given.
    fn update<T>(&self, step: impl FnMut(&mut S) -> T) -> T;

    /// Runs `look` on the state without changing it.
    fn read<T>(&self, look: impl FnOnce(&S) -> T) -> T;
}

/// A state of one 64-bit word, updated with a compare-and-swap: lock-free.
#[derive(Debug, Default)]
pub struct AtomicStore(AtomicU64);

impl AtomicStore {
    /// A store holding `value`.
    pub fn new(value: u64) -> Self {
        AtomicStore(AtomicU64::new(value))
    }
}

impl StateStore<u64> for AtomicStore {
    fn update<T>(&self, mut step: impl FnMut(&mut u64) -> T) -> T {
        let mut current = self.0.load(Ordering::Acquire);
        loop {
            let mut next = current;
            let out = step(&mut next);
            if next == current {
                return out;
            }
            match self
                .0
                .compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return out,
                Err(actual) => current = actual,
            }
        }
    }

    fn read<T>(&self, look: impl FnOnce(&u64) -> T) -> T {
        look(&self.0.load(Ordering::Acquire))
    }
}

/// Any state behind a `parking_lot` mutex, held for the length of one step.
#[derive(Debug, Default)]
pub struct MutexStore<S>(Mutex<S>);

impl<S> MutexStore<S> {
    /// A store holding `state`.
    pub fn new(state: S) -> Self {
        MutexStore(Mutex::new(state))
    }
}

impl<S: Send> StateStore<S> for MutexStore<S> {
    fn update<T>(&self, mut step: impl FnMut(&mut S) -> T) -> T {
        step(&mut self.0.lock())
    }

    fn read<T>(&self, look: impl FnOnce(&S) -> T) -> T {
        look(&self.0.lock())
    }
}
