//! What each route's policy has decided, counted: admissions, refusals by stage, the outcomes of
//! admitted calls, and deadlines apart from cancellations.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::breaker::State;
use crate::rejection::RejectReason;

/// Which stage of the chain answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StageKind {
    /// Before any stage: the deadline had passed or the caller had cancelled on arrival.
    Arrival,
    Breaker,
    Rate,
    /// The per-key concurrency limit (`max_concurrent_per_key`).
    KeyConcurrency,
    Concurrency,
    Gate,
}

impl StageKind {
    /// Its number among the stages of `observe`'s refusal counters (the order of the chain).
    #[cfg(feature = "metrics")]
    pub(crate) fn index(self) -> usize {
        match self {
            StageKind::Arrival => 0,
            StageKind::Breaker => 1,
            StageKind::Rate => 2,
            StageKind::KeyConcurrency => 3,
            StageKind::Concurrency => 4,
            StageKind::Gate => 5,
        }
    }
}

/// How an admitted call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    Succeeded,
    Failed,
    Ignored,
    /// It ran past its deadline.
    TimedOut,
    /// Its caller cancelled it while it ran.
    Cancelled,
}

/// The live counters of one route.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    admitted: AtomicU64,
    in_flight: AtomicU64,
    circuit_open: AtomicU64,
    rate_limited: AtomicU64,
    concurrency_limited: AtomicU64,
    too_many_waiters: AtomicU64,
    gate_refused: AtomicU64,
    deadline_exceeded: AtomicU64,
    cancelled_waiting: AtomicU64,
    succeeded: AtomicU64,
    failed: AtomicU64,
    ignored: AtomicU64,
    timed_out: AtomicU64,
    cancelled_running: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl Counts {
    pub(crate) fn admit(&self) {
        bump(&self.admitted);
        self.in_flight.fetch_add(1, Ordering::AcqRel);
    }

    /// Counts a refusal by `stage` for `reason`: a deadline or a cancellation by what it is,
    /// anything else by the stage that refused.
    pub(crate) fn refuse(&self, stage: StageKind, reason: RejectReason) {
        bump(match (reason, stage) {
            (RejectReason::DeadlineExceeded, _) => &self.deadline_exceeded,
            (RejectReason::Cancelled, _) => &self.cancelled_waiting,
            (RejectReason::TooManyWaiters, StageKind::Rate | StageKind::Concurrency) => {
                &self.too_many_waiters
            }
            (_, StageKind::Breaker) => &self.circuit_open,
            (_, StageKind::Rate) => &self.rate_limited,
            (_, StageKind::Concurrency | StageKind::KeyConcurrency) => &self.concurrency_limited,
            (_, StageKind::Gate | StageKind::Arrival) => &self.gate_refused,
        });
    }

    pub(crate) fn end(&self, ending: Ending) {
        bump(match ending {
            Ending::Succeeded => &self.succeeded,
            Ending::Failed => &self.failed,
            Ending::Ignored => &self.ignored,
            Ending::TimedOut => &self.timed_out,
            Ending::Cancelled => &self.cancelled_running,
        });
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
    }

    pub(crate) fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Acquire)
    }

    pub(crate) fn read(&self) -> PolicyCounts {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        PolicyCounts {
            admitted: get(&self.admitted),
            circuit_open: get(&self.circuit_open),
            rate_limited: get(&self.rate_limited),
            concurrency_limited: get(&self.concurrency_limited),
            too_many_waiters: get(&self.too_many_waiters),
            gate_refused: get(&self.gate_refused),
            deadline_exceeded: get(&self.deadline_exceeded),
            cancelled_waiting: get(&self.cancelled_waiting),
            succeeded: get(&self.succeeded),
            failed: get(&self.failed),
            ignored: get(&self.ignored),
            timed_out: get(&self.timed_out),
            cancelled_running: get(&self.cancelled_running),
        }
    }
}

/// What a route's policy (or all of them, [`super::Policies::totals`]) has decided so far.
///
/// A request whose deadline ends it is counted as `deadline_exceeded` (refused: it passed, or
/// would have, before its turn came) or `timed_out` (admitted: its call ran past it); one its
/// caller ended, as `cancelled_waiting` or `cancelled_running`. Which came first decides (see
/// [`crate::deadline`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PolicyCounts {
    /// Requests admitted by every stage.
    pub admitted: u64,
    /// Refused by the breaker (`CircuitOpen`).
    pub circuit_open: u64,
    /// Refused by the rate limit (`RateLimited`, `QuotaExhausted`, `ExceedsCapacity`).
    pub rate_limited: u64,
    /// Refused by the concurrency limit, the route's or its key's (`ConcurrencyLimited`).
    pub concurrency_limited: u64,
    /// Refused because the rate's or the concurrency's queue was full (`TooManyWaiters`).
    pub too_many_waiters: u64,
    /// Refused by the gate, for any reason of its own.
    pub gate_refused: u64,
    /// Refused because the deadline passed, or would have, before admission.
    pub deadline_exceeded: u64,
    /// Refused because the caller cancelled (or dropped the request) before admission.
    pub cancelled_waiting: u64,
    /// Admitted calls that succeeded.
    pub succeeded: u64,
    /// Admitted calls that failed (a panic included).
    pub failed: u64,
    /// Admitted calls that said nothing about the route (a caller's mistake, by the classifier).
    pub ignored: u64,
    /// Admitted calls that ran past their deadline.
    pub timed_out: u64,
    /// Admitted calls whose caller cancelled (or dropped) them while they ran.
    pub cancelled_running: u64,
}

impl PolicyCounts {
    /// Refusals of every kind.
    pub fn refused(&self) -> u64 {
        self.circuit_open
            + self.rate_limited
            + self.concurrency_limited
            + self.too_many_waiters
            + self.gate_refused
            + self.deadline_exceeded
            + self.cancelled_waiting
    }

    /// Admitted calls that have ended, however.
    pub fn ended(&self) -> u64 {
        self.succeeded + self.failed + self.ignored + self.timed_out + self.cancelled_running
    }

    pub(crate) fn add(&mut self, other: &PolicyCounts) {
        self.admitted += other.admitted;
        self.circuit_open += other.circuit_open;
        self.rate_limited += other.rate_limited;
        self.concurrency_limited += other.concurrency_limited;
        self.too_many_waiters += other.too_many_waiters;
        self.gate_refused += other.gate_refused;
        self.deadline_exceeded += other.deadline_exceeded;
        self.cancelled_waiting += other.cancelled_waiting;
        self.succeeded += other.succeeded;
        self.failed += other.failed;
        self.ignored += other.ignored;
        self.timed_out += other.timed_out;
        self.cancelled_running += other.cancelled_running;
    }
}

/// One route's policy as it stands: its counts and what its stages hold now.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RouteStats {
    /// The policy's name: `default` or its pattern.
    pub route: Arc<str>,
    /// Calls admitted and not yet ended.
    pub in_flight: u64,
    /// Permits of the concurrency limit out now, if it has one.
    pub concurrency_in_use: Option<u64>,
    /// Requests waiting for the rate's tokens or the concurrency's permits now.
    pub waiting: u64,
    /// Where the breaker stands, if it has one.
    pub breaker: Option<State>,
    /// Keys held by the per-key rate kept in this process, or else by the per-key concurrency
    /// limit, if the policy has a `key`.
    pub keys: Option<usize>,
    /// What it has decided so far.
    pub counts: PolicyCounts,
}
