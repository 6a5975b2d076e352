//! Cells: the lock-free state the request path touches to decide.
//!
//! A cell is a few atomics and the arithmetic that reads and writes them with compare-and-swap:
//! no lock on the request path, no allocation, no system call. An admission's whole decision (is
//! there a token? is there a slot under the ceiling?) is made on cells. What the cells are asked
//! with (the rates, the ceilings, how long a request may wait, whether the switch is on) is the
//! policy's, decided elsewhere, off the request path (the gate's tick, the capacity estimator,
//! the switch), and handed in as parameters on every call.
//!
//! Why apart from the policy:
//! * a reload or a newly learned figure changes the parameters without touching what a cell has
//!   banked or owes;
//! * a cell is small enough to be checked on its own: model-checked under loom (every
//!   interleaving of two or three threads, `loom_tests`), and compared one against another on
//!   random sequences (the turnstile against a bucket and a counter);
//! * the cost of the request path is the cost of its cells, and nothing else grows into them.
//!
//! The cells: [`bucket`] (a GCRA token bucket, one atomic, that knows exactly when its next token
//! exists), [`inflight`] (the in-flight count under an exact ceiling) and [`turnstile`] (the whole
//! gate's bucket and the in-flight count in one word, so an admission is one compare-and-swap).
//! Their atomics come from [`sync`], which swaps them for loom's under `--cfg loom`.

// Under loom only the models are built, and they leave parts of the bucket to the unit tests.
#[cfg_attr(loom, allow(dead_code))]
pub(crate) mod bucket;
pub(crate) mod inflight;
mod sync;
pub(crate) mod turnstile;

/// The model-checked interleavings (run with `--cfg loom`, see `scripts/test`).
#[cfg(all(test, loom))]
mod loom_tests;
/// The documented bucket figures and the exact check of the admission bound, shared with the
/// integration tests of the gate.
#[cfg(all(test, not(loom)))]
#[path = "../../tests/common/invariants.rs"]
mod support;
