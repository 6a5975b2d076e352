//! The atomics and the lock the lock-free parts are built on, swapped for loom's under
//! `--cfg loom` so that the model checker can explore every interleaving of the bucket, the
//! in-flight counter and the turnstile (as tokio does with its own loom facade). Nothing else in
//! the crate should import `std::sync::atomic` for state that the loom tests cover.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::AtomicU64;
#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::AtomicU64;
#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};

/// Locks `mutex`, taking over a lock whose holder panicked: what it guards is `()` (the lock
/// only orders cold-path changes), so a panic leaves nothing half-done behind it.
pub(crate) fn lock(mutex: &Mutex<()>) -> MutexGuard<'_, ()> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
