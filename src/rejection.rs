//! Why a request was refused, and when to try again.

use std::time::Duration;

/// Why the gate refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
// A whole word, so that a `Rejection` has no padding byte beside it: see `Rejection`.
#[repr(u64)]
pub enum RejectReason {
    /// In-flight requests had reached `max_in_flight` (the hard ceiling, switch or not).
    InFlightCeiling,
    /// Memory use had reached `max_memory_ratio` of the limit (the hard ceiling, switch or not).
    MemoryCeiling,
    /// The switch is on and no token would exist within `request_timeout`.
    RateLimited,
    /// The switch is on, the request would have had to wait, and `max_waiters` were already waiting.
    TooManyWaiters,
    /// A circuit breaker is open (or half-open with every probe taken): the downstream it guards
    /// failed too often, so calls are refused without trying it. `retry_after` is the time until
    /// the breaker lets probes through, when that is known.
    CircuitOpen,
    /// A quota for the current period (a day, a month, ...) is used up; `retry_after` is the time
    /// until the next period starts.
    QuotaExhausted,
    /// A concurrency limiter had every permit taken (and no room or time to wait for one).
    ConcurrencyLimited,
    /// The request asked for more than the limiter can ever grant at once (`n` above its
    /// capacity): it is never admitted, so there is no `retry_after`.
    ExceedsCapacity,
    /// The request's deadline ([`Request::with_deadline`](crate::Request::with_deadline), or the
    /// `timeout` of its policy) had passed, or would pass before its turn came: it was refused
    /// rather than kept waiting in vain. No `retry_after`: the same request would be too late
    /// again; the caller may retry with a new deadline.
    DeadlineExceeded,
    /// The caller cancelled the request ([`Cancel`](crate::deadline::Cancel)) before it was
    /// admitted.
    Cancelled,
}

impl RejectReason {
    /// Every reason, in declaration order: `RejectReason::ALL[r as usize] == r`.
    pub const ALL: [RejectReason; 10] = [
        RejectReason::InFlightCeiling,
        RejectReason::MemoryCeiling,
        RejectReason::RateLimited,
        RejectReason::TooManyWaiters,
        RejectReason::CircuitOpen,
        RejectReason::QuotaExhausted,
        RejectReason::ConcurrencyLimited,
        RejectReason::ExceedsCapacity,
        RejectReason::DeadlineExceeded,
        RejectReason::Cancelled,
    ];

    /// A short, stable, snake_case name, for metrics labels and logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            RejectReason::InFlightCeiling => "in_flight_ceiling",
            RejectReason::MemoryCeiling => "memory_ceiling",
            RejectReason::RateLimited => "rate_limited",
            RejectReason::TooManyWaiters => "too_many_waiters",
            RejectReason::CircuitOpen => "circuit_open",
            RejectReason::QuotaExhausted => "quota_exhausted",
            RejectReason::ConcurrencyLimited => "concurrency_limited",
            RejectReason::ExceedsCapacity => "exceeds_capacity",
            RejectReason::DeadlineExceeded => "deadline_exceeded",
            RejectReason::Cancelled => "cancelled",
        }
    }
}

impl std::fmt::Display for RejectReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refusal: the caller's `fail` path receives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
// The layout is fixed for the request path: a `Result<Permit, Rejection>` is moved word by word
// over the union of both variants, and a word written in pieces (the padding around a one-byte
// field) and then read whole stalls the CPU on store forwarding. With `reason` a whole word and
// this order, the one word written in pieces (the nanoseconds of `retry_after` and their padding)
// lies over the permit's `waited`, which releasing a permit does not read. Measured with
// `benches/interleaved.rs`: the switch-on path went from 2.06x to 1.93x governor's `check()`.
#[repr(C)]
#[error("request refused: {reason}{}", match .retry_after { Some(d) => format!(" (retry after {d:?})"), None => String::new() })]
pub struct Rejection {
    /// Why.
    pub reason: RejectReason,
    /// When the same request would be admitted, where the gate can know it: for `RateLimited`, the
    /// earliest moment at which the bucket would accept it (waiting no longer than `request_timeout`),
    /// if nobody else takes tokens meanwhile. Suitable for an HTTP `Retry-After`.
    pub retry_after: Option<Duration>,
}

impl Rejection {
    /// A refusal without a retry hint.
    pub fn new(reason: RejectReason) -> Self {
        Rejection {
            reason,
            retry_after: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_has_its_own_index() {
        for (i, reason) in RejectReason::ALL.iter().enumerate() {
            assert_eq!(*reason as usize, i);
        }
    }
}
