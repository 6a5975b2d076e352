//! The atomics the lock-free parts are built on, swapped for loom's under `--cfg loom` so that the
//! model checker can explore every interleaving of the bucket and the in-flight counter (as tokio
//! does with its own loom facade). Nothing else in the crate should import `std::sync::atomic`
//! for state that the loom tests cover.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::AtomicU64;
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::AtomicU64;
