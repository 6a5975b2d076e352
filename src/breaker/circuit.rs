//! [`Breaker`], its permits, and the `call` helpers.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use crate::clock::{Clock, MonotonicClock, Nanos};
use crate::rejection::{RejectReason, Rejection};

use super::classify::{Classifier, DefaultClassifier, Outcome};
use super::config::{BreakerConfig, BreakerConfigError};
use super::machine::{Admit, Machine, Ticket};
use super::policy::{build_all, Policy};
use super::State;

/// Bits of the state word that hold the state; the epoch is above them.
const STATE_BITS: u32 = 3;

/// What every clone of a breaker shares.
#[derive(Debug)]
struct Shared<C> {
    clock: C,
    /// `epoch << STATE_BITS | state`, mirrored from the machine after every change.
    word: AtomicU64,
    /// The machine's `open_until`, mirrored with `word`.
    open_until: AtomicU64,
    machine: Mutex<Machine>,
}

impl<C> Shared<C> {
    /// Mirrors the machine's state in the atomics the lock-free paths read.
    fn publish(&self, machine: &Machine) {
        self.open_until
            .store(machine.open_until(), Ordering::Release);
        self.word.store(
            machine.epoch() << STATE_BITS | machine.state().code(),
            Ordering::Release,
        );
    }
}

fn circuit_open(retry_after: Option<Nanos>) -> Rejection {
    Rejection {
        reason: RejectReason::CircuitOpen,
        retry_after: retry_after.map(Duration::from_nanos),
    }
}

/// A circuit breaker around one downstream (see the [module docs](super)).
///
/// Cheap to clone: clones share the same state. `Send + Sync`.
#[derive(Debug)]
pub struct Breaker<C: Clock = MonotonicClock> {
    shared: Arc<Shared<C>>,
}

impl<C: Clock> Clone for Breaker<C> {
    fn clone(&self) -> Self {
        Breaker {
            shared: self.shared.clone(),
        }
    }
}

impl<C: Clock> Breaker<C> {
    /// A closed breaker with `config`'s policies, on `clock`; fails if a figure breaks a rule.
    pub fn new(config: BreakerConfig, clock: C) -> Result<Self, BreakerConfigError> {
        config.validate()?;
        let policy = build_all(&config.policies);
        Ok(Self::from_parts(
            &config,
            policy,
            clock,
            Arc::from("breaker"),
        ))
    }

    /// A closed breaker with a policy of your own instead of `config.policies` (which may then
    /// be empty); the rest of `config` as in [`Breaker::new`].
    pub fn with_policy(
        config: BreakerConfig,
        policy: impl Policy + 'static,
        clock: C,
    ) -> Result<Self, BreakerConfigError> {
        // The rest of the figures are checked as if the default policy stood in for `policy`.
        BreakerConfig {
            policies: BreakerConfig::default().policies,
            ..config.clone()
        }
        .validate()?;
        Ok(Self::from_parts(
            &config,
            Box::new(policy),
            clock,
            Arc::from("breaker"),
        ))
    }

    /// A breaker from figures already validated.
    pub(crate) fn from_parts(
        config: &BreakerConfig,
        policy: Box<dyn Policy>,
        clock: C,
        name: Arc<str>,
    ) -> Self {
        let machine = Machine::new(config, policy, name);
        let shared = Shared {
            clock,
            word: AtomicU64::new(0),
            open_until: AtomicU64::new(0),
            machine: Mutex::new(machine),
        };
        shared.publish(&shared.machine.lock());
        Breaker {
            shared: Arc::new(shared),
        }
    }

    /// Names the breaker in its `tracing` events (default `"breaker"`), e.g. after the downstream.
    pub fn with_name(self, name: impl Into<Arc<str>>) -> Self {
        self.shared.machine.lock().name = name.into();
        self
    }

    /// The clock the breaker runs on.
    pub fn clock(&self) -> &C {
        &self.shared.clock
    }

    /// Asks to make a call. Closed: a permit, at the cost of two atomic reads. Open: refused with
    /// [`RejectReason::CircuitOpen`] and the time until probing starts. Half-open: a permit for
    /// one of the probes, or refused (with no `retry_after`: when the probes decide is unknown).
    pub fn try_acquire(&self) -> Result<BreakerPermit<C>, Rejection> {
        let now = self.shared.clock.now();
        let word = self.shared.word.load(Ordering::Acquire);
        let epoch = word >> STATE_BITS;
        let grant = |counted| {
            Ok(self.permit(Ticket {
                epoch,
                probe: None,
                started: now,
                counted,
            }))
        };
        match State::from_code(word & ((1 << STATE_BITS) - 1)) {
            State::Closed => return grant(true),
            State::ForcedClosed => return grant(false),
            State::ForcedOpen => return Err(circuit_open(None)),
            State::Open => {
                let until = self.shared.open_until.load(Ordering::Acquire);
                if now < until {
                    return Err(circuit_open(Some(until - now)));
                }
            }
            State::HalfOpen => {}
        }
        let admit = self.with_machine(|m| m.admit(now));
        match admit {
            Admit::Granted(ticket) => Ok(self.permit(ticket)),
            Admit::Refused(retry_after) => Err(circuit_open(retry_after)),
        }
    }

    fn permit(&self, ticket: Ticket) -> BreakerPermit<C> {
        BreakerPermit {
            shared: self.shared.clone(),
            ticket,
            settled: false,
        }
    }

    /// Runs `f` on the machine under the lock, then mirrors any change of state.
    fn with_machine<T>(&self, f: impl FnOnce(&mut Machine) -> T) -> T {
        with_machine(&self.shared, f)
    }

    /// Where the breaker stands now (an open breaker whose time is up reads half-open, and
    /// probes past their timeout are counted as failed first).
    pub fn state(&self) -> State {
        let now = self.shared.clock.now();
        self.with_machine(|m| {
            m.refresh(now);
            m.state()
        })
    }

    /// When an open breaker will let probes through, from now: `None` unless it is open.
    pub fn retry_after(&self) -> Option<Duration> {
        let now = self.shared.clock.now();
        self.with_machine(|m| {
            m.refresh(now);
            (m.state() == State::Open).then(|| Duration::from_nanos(m.open_until() - now))
        })
    }

    /// Holds the breaker open, refusing every call, until [`Breaker::reset`] or
    /// [`Breaker::force_closed`]. Calls in flight no longer count.
    pub fn force_open(&self) {
        let now = self.shared.clock.now();
        self.with_machine(|m| m.force(State::ForcedOpen, now));
    }

    /// Holds the breaker closed, letting every call through and counting none, until
    /// [`Breaker::reset`] or [`Breaker::force_open`].
    pub fn force_closed(&self) {
        let now = self.shared.clock.now();
        self.with_machine(|m| m.force(State::ForcedClosed, now));
    }

    /// Back to closed with nothing counted (and the backoff forgotten). Calls in flight no
    /// longer count.
    pub fn reset(&self) {
        let now = self.shared.clock.now();
        self.with_machine(|m| m.reset(now));
    }

    /// Runs `f` if the breaker lets it, and counts its result (`Ok` a success, `Err` a failure).
    /// If the future is dropped before it finishes, the call counts as failed.
    pub async fn call<F, Fut, T, E>(&self, f: F) -> Result<T, CallError<E>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.call_with(&DefaultClassifier, f).await
    }

    /// [`Breaker::call`] with your own reading of the result (e.g. 4xx ignored).
    pub async fn call_with<K, F, Fut, T, E>(&self, classifier: &K, f: F) -> Result<T, CallError<E>>
    where
        K: Classifier<T, E>,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let permit = self.try_acquire().map_err(CallError::Rejected)?;
        let result = f().await;
        permit.record(classifier.classify(&result));
        result.map_err(CallError::Failed)
    }

    /// [`Breaker::call`] for a synchronous `f`. A panic in `f` counts as a failure.
    pub fn call_blocking<F, T, E>(&self, f: F) -> Result<T, CallError<E>>
    where
        F: FnOnce() -> Result<T, E>,
    {
        let permit = self.try_acquire().map_err(CallError::Rejected)?;
        let result = f();
        permit.record(DefaultClassifier.classify(&result));
        result.map_err(CallError::Failed)
    }

    /// Where the breaker stands for eviction: state and end of open time, without refreshing.
    pub(crate) fn peek(&self) -> (State, Nanos) {
        let word = self.shared.word.load(Ordering::Acquire);
        (
            State::from_code(word & ((1 << STATE_BITS) - 1)),
            self.shared.open_until.load(Ordering::Acquire),
        )
    }
}

fn with_machine<C, T>(shared: &Shared<C>, f: impl FnOnce(&mut Machine) -> T) -> T {
    let mut machine = shared.machine.lock();
    let before = machine.epoch();
    let out = f(&mut machine);
    if machine.epoch() != before {
        shared.publish(&machine);
    }
    out
}

/// Why [`Breaker::call`] did not return the call's value.
#[derive(Debug, thiserror::Error)]
pub enum CallError<E> {
    /// The breaker refused the call; `f` did not run.
    #[error("{0}")]
    Rejected(Rejection),
    /// `f` ran and returned this error.
    #[error("call failed: {0}")]
    Failed(E),
}

/// Leave to make one call through a [`Breaker`]. Report its outcome with
/// [`success`](BreakerPermit::success), [`failure`](BreakerPermit::failure),
/// [`ignore`](BreakerPermit::ignore) or [`record`](BreakerPermit::record); a permit dropped
/// without a report counts as a failure (an abandoned call, a panic, a cancelled future are no
/// evidence that the downstream is healthy). The outcome is recorded exactly once, and only if
/// the breaker is still in the state the permit was granted in.
#[derive(Debug)]
#[must_use = "a permit dropped without a report counts as a failure"]
pub struct BreakerPermit<C: Clock = MonotonicClock> {
    shared: Arc<Shared<C>>,
    ticket: Ticket,
    settled: bool,
}

impl<C: Clock> BreakerPermit<C> {
    /// The call succeeded.
    pub fn success(self) {
        self.record(Outcome::Success);
    }

    /// The call failed (an error, a timeout).
    pub fn failure(self) {
        self.record(Outcome::Failure);
    }

    /// The call says nothing about the downstream (the caller's own mistake, a cancellation).
    pub fn ignore(self) {
        self.record(Outcome::Ignored);
    }

    /// Reports `outcome`; the call's duration is measured from the grant to now.
    pub fn record(mut self, outcome: Outcome) {
        self.settle(outcome);
    }

    /// Whether this permit is one of the half-open probes.
    pub fn is_probe(&self) -> bool {
        self.ticket.probe.is_some()
    }

    /// Times the call from now rather than from the grant: a policy that took the permit before
    /// its request queued for a limiter calls this when the call starts, so that the wait does
    /// not count as slowness of the downstream.
    pub(crate) fn start_timing(&mut self) {
        self.ticket.started = self.shared.clock.now();
    }

    fn settle(&mut self, outcome: Outcome) {
        if std::mem::replace(&mut self.settled, true) || !self.ticket.counted {
            return;
        }
        let now = self.shared.clock.now();
        let ticket = self.ticket;
        with_machine(&self.shared, |m| m.report(&ticket, outcome, now));
    }
}

impl<C: Clock> Drop for BreakerPermit<C> {
    fn drop(&mut self) {
        self.settle(Outcome::Failure);
    }
}
