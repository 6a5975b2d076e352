//! [`PolicyPermit`]: what an admitted request holds from each stage of its policy, given back
//! exactly once.

use std::sync::Arc;
use std::time::Duration;

use crate::breaker::{BreakerPermit, Outcome};
use crate::clock::{Clock, MonotonicClock, Nanos};
use crate::deadline::{attribute_drop, Ended, NO_DEADLINE};
use crate::gate::OwnedPermit;
use crate::keyed::KeyedConcurrencyPermit;
use crate::limit::ConcurrencyPermit;

use super::route::Route;
use super::stats::Ending;

/// What a permit dropped without a report counts as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnDrop {
    /// A success (the permit was used as RAII around the work), or a failure while panicking.
    Success,
    /// The call's future was dropped while it ran: a timeout if its deadline had passed, a
    /// cancellation otherwise (or a failure while panicking).
    Abandoned,
}

/// An admitted request: it holds the breaker's permit, the concurrency limiters' permits (the
/// route's and its key's) and the gate's permit (those its policy has), and gives each back exactly once, when it is released.
///
/// Report how the call went with [`success`](PolicyPermit::success),
/// [`failure`](PolicyPermit::failure), [`ignore`](PolicyPermit::ignore) or
/// [`record`](PolicyPermit::record): the breaker counts it (an ignored call not at all), the gate
/// counts a failure, and the route's counters count each. Dropping the permit without a report
/// counts as a success, or as a failure while the thread is panicking, as the gate's
/// [`Permit`](crate::Permit) does. `Send + 'static`: it can live in a spawned task or a response
/// body.
#[must_use = "dropping the permit releases the request at once"]
pub struct PolicyPermit<C: Clock = MonotonicClock> {
    // Released in this order: the gate first (the server's slot), then the route's own.
    pub(crate) gate: Option<OwnedPermit<C>>,
    pub(crate) concurrency: Option<ConcurrencyPermit<C>>,
    pub(crate) key_slot: Option<KeyedConcurrencyPermit>,
    pub(crate) breaker: Option<BreakerPermit<C>>,
    pub(crate) route: Arc<Route<C>>,
    pub(crate) deadline: Nanos,
    pub(crate) on_drop: OnDrop,
    pub(crate) settled: bool,
}

impl<C: Clock> std::fmt::Debug for PolicyPermit<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyPermit")
            .field("route", &self.route.name)
            .field("deadline", &self.deadline())
            .field("breaker", &self.breaker.is_some())
            .field("concurrency", &self.concurrency.is_some())
            .field("gate", &self.gate.is_some())
            .finish_non_exhaustive()
    }
}

impl<C: Clock> PolicyPermit<C> {
    /// The call succeeded.
    pub fn success(mut self) {
        self.settle(Ending::Succeeded);
    }

    /// The call failed: the breaker and the gate count it.
    pub fn failure(mut self) {
        self.settle(Ending::Failed);
    }

    /// The call says nothing about the route (a caller's mistake): the breaker does not count
    /// it, the gate counts a completed call.
    pub fn ignore(mut self) {
        self.settle(Ending::Ignored);
    }

    /// Reports `outcome`.
    pub fn record(mut self, outcome: Outcome) {
        self.settle(match outcome {
            Outcome::Success => Ending::Succeeded,
            Outcome::Failure => Ending::Failed,
            Outcome::Ignored => Ending::Ignored,
        });
    }

    /// The call ran past its deadline: a failure for the breaker and the gate, counted as a
    /// timeout.
    pub fn timed_out(mut self) {
        self.settle(Ending::TimedOut);
    }

    /// The caller cancelled the call while it ran: nothing for the breaker, a cancellation for
    /// the gate.
    pub fn cancelled(mut self) {
        self.settle(Ending::Cancelled);
    }

    /// The name of the policy that admitted the request: `default` or its pattern.
    pub fn route(&self) -> &str {
        &self.route.name
    }

    /// The request's deadline in the clock's time (its own, or its policy's `timeout` from
    /// arrival, whichever is earlier), if it has one.
    pub fn deadline(&self) -> Option<Duration> {
        (self.deadline != NO_DEADLINE).then(|| Duration::from_nanos(self.deadline))
    }

    /// Whether the request holds a permit of the gate (its policy has `gate = true` and it was
    /// admitted through a gate).
    pub fn holds_gate(&self) -> bool {
        self.gate.is_some()
    }

    pub(crate) fn settle_ended(&mut self, ended: Ended) {
        self.settle(match ended {
            Ended::Deadline => Ending::TimedOut,
            Ended::Cancelled => Ending::Cancelled,
        });
    }

    pub(crate) fn settle(&mut self, ending: Ending) {
        if std::mem::replace(&mut self.settled, true) {
            return;
        }
        if let Some(gate) = self.gate.take() {
            match ending {
                Ending::Succeeded | Ending::Ignored => gate.success(),
                Ending::Failed | Ending::TimedOut => gate.failure(),
                Ending::Cancelled => gate.cancelled(),
            }
        }
        drop(self.concurrency.take());
        drop(self.key_slot.take());
        if let Some(breaker) = self.breaker.take() {
            match ending {
                Ending::Succeeded => breaker.success(),
                Ending::Failed | Ending::TimedOut => breaker.failure(),
                Ending::Ignored | Ending::Cancelled => breaker.ignore(),
            }
        }
        self.route.counts.end(ending);
        if matches!(ending, Ending::TimedOut | Ending::Cancelled) {
            tracing::debug!(
                target: "sluicegate::policy",
                route = &*self.route.name,
                ended = if ending == Ending::TimedOut { "deadline" } else { "cancelled" },
                "admitted call ended early"
            );
        }
    }
}

impl<C: Clock> Drop for PolicyPermit<C> {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let ending = if std::thread::panicking() {
            Ending::Failed
        } else {
            match self.on_drop {
                OnDrop::Success => Ending::Succeeded,
                OnDrop::Abandoned => match attribute_drop(self.deadline, self.route.clock.now()) {
                    Ended::Deadline => Ending::TimedOut,
                    Ended::Cancelled => Ending::Cancelled,
                },
            }
        };
        self.settle(ending);
    }
}
