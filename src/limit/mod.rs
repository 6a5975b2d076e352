//! Limiters: how many calls to let through per span of time, or at once.
pub(crate) mod units;
