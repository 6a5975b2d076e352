//! Signals: what the request path leaves behind for the gate to read.
//!
//! The request path only records: a completed call writes its latency into a ring of atomics
//! ([`sampler`]), and every decision bumps a counter of its own thread ([`counters`]). Neither
//! takes a lock or allocates, and neither is read on the request path: the gate's tick reads them
//! once per tick (the trimmed mean, the percentiles, the rates) and turns them into the figures
//! the switch and the capacity estimator decide on, and [`crate::Gate::snapshot`] sums the
//! counters for the user.
//!
//! The memory reading is a signal too, read off the request path by a probe thread. Its file,
//! `probe.rs`, lives here, but it is declared at the crate root as the public [`crate::probe`]: a
//! service may plug a probe of its own in, and `sluicegate::probe` stays its path and the target
//! of its log events.

pub(crate) mod counters;
pub(crate) mod sampler;
