//! The chain a request passes: breaker → rate → concurrency → gate, each answering with its own
//! reason; what a later refusal gives back; how an abandoned admission is counted.

use std::sync::Arc;

use crate::breaker::BreakerPermit;
use crate::clock::{Clock, Nanos};
use crate::deadline::{attribute_drop, nanos_after, within_nanos, Ended, NO_DEADLINE};
use crate::gate::{Gate, OwnedPermit};
use crate::keyed::KeyedConcurrencyPermit;
use crate::limit::ConcurrencyPermit;
use crate::rejection::{RejectReason, Rejection};
use crate::request::Request;

use super::config::RateSpec;
use super::permit::{OnDrop, PolicyPermit};
use super::route::{RateStage, Route};
use super::stats::StageKind;
use super::Policies;

/// A refusal and the stage that gave it.
#[derive(Debug, Clone)]
// The stage and the rate are read by the tower layer only.
#[cfg_attr(not(feature = "tower"), allow(dead_code))]
pub(crate) struct Refusal {
    pub(crate) rejection: Rejection,
    pub(crate) stage: StageKind,
    /// The route's rate, when the rate limit refused (for the `RateLimit-Policy` field).
    pub(crate) rate: Option<RateSpec>,
}

/// A request on its way through the chain: what it holds so far. Dropped before it is admitted
/// or refused (its future cancelled), it gives everything back and counts a cancellation, or a
/// deadline if that had passed.
struct Partial<C: Clock> {
    route: Arc<Route<C>>,
    deadline: Nanos,
    breaker: Option<BreakerPermit<C>>,
    key_slot: Option<KeyedConcurrencyPermit>,
    concurrency: Option<ConcurrencyPermit<C>>,
    done: bool,
}

impl<C: Clock> Partial<C> {
    /// Refused by `stage`: what was taken is given back (see the module docs of `policy`).
    fn refuse(mut self, stage: StageKind, rejection: Rejection) -> Refusal {
        self.done = true;
        self.give_back();
        let route = &self.route;
        route.refused(stage, rejection.reason);
        tracing::debug!(
            target: "sluicegate::policy",
            route = &*route.name,
            reason = rejection.reason.as_str(),
            retry_after = ?rejection.retry_after,
            "refused"
        );
        Refusal {
            rejection,
            stage,
            rate: (stage == StageKind::Rate)
                .then_some(route.policy.rate)
                .flatten(),
        }
    }

    /// The breaker's permit says nothing (the call never ran); the concurrency permit goes
    /// back. A rate token already taken stays spent.
    fn give_back(&mut self) {
        if let Some(breaker) = self.breaker.take() {
            breaker.ignore();
        }
        drop(self.concurrency.take());
        drop(self.key_slot.take());
    }

    fn admit(mut self, gate: Option<OwnedPermit<C>>, on_drop: OnDrop) -> PolicyPermit<C> {
        self.done = true;
        let mut breaker = self.breaker.take();
        if let Some(b) = breaker.as_mut() {
            b.start_timing();
        }
        self.route.counts.admit();
        PolicyPermit {
            gate,
            concurrency: self.concurrency.take(),
            key_slot: self.key_slot.take(),
            breaker,
            route: Arc::clone(&self.route),
            deadline: self.deadline,
            on_drop,
            settled: false,
        }
    }

    fn cancelled(self, stage: StageKind) -> Refusal {
        self.refuse(stage, Rejection::new(RejectReason::Cancelled))
    }
}

impl<C: Clock> Drop for Partial<C> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        self.give_back();
        let reason = match attribute_drop(self.deadline, self.route.clock.now()) {
            Ended::Deadline => RejectReason::DeadlineExceeded,
            Ended::Cancelled => RejectReason::Cancelled,
        };
        self.route.refused(StageKind::Arrival, reason);
    }
}

fn is_cancelled(request: &Request<'_>) -> bool {
    request.cancel().is_some_and(|c| c.is_cancelled())
}

impl<C: Clock> Policies<C> {
    /// Finds the route, sets the deadline, refuses a request already too late or cancelled, and
    /// asks the breaker.
    fn start(&self, request: &Request<'_>) -> Result<Partial<C>, Refusal> {
        let route = self.route_for(request);
        let now = route.clock.now();
        let deadline = match route.timeout {
            Some(t) => request.deadline_nanos().min(nanos_after(now, t)),
            None => request.deadline_nanos(),
        };
        let partial = Partial {
            route,
            deadline,
            breaker: None,
            key_slot: None,
            concurrency: None,
            done: false,
        };
        if deadline != NO_DEADLINE && now >= deadline {
            let late = Rejection::new(RejectReason::DeadlineExceeded);
            return Err(partial.refuse(StageKind::Arrival, late));
        }
        if is_cancelled(request) {
            return Err(partial.cancelled(StageKind::Arrival));
        }
        Self::ask_breaker(partial)
    }

    fn ask_breaker(mut partial: Partial<C>) -> Result<Partial<C>, Refusal> {
        if let Some(breaker) = &partial.route.breaker {
            match breaker.try_acquire() {
                Ok(permit) => partial.breaker = Some(permit),
                Err(rejection) => return Err(partial.refuse(StageKind::Breaker, rejection)),
            }
        }
        Ok(partial)
    }

    /// The per-key concurrency limit: a slot for the request's key now, or a refusal (a count
    /// has no time at which it will be lower, so nobody waits for it).
    fn take_key_slot(mut partial: Partial<C>, key: &str) -> Result<Partial<C>, Refusal> {
        if let Some(limiter) = &partial.route.key_concurrency {
            match limiter.try_acquire(key) {
                Ok(slot) => partial.key_slot = Some(slot),
                Err(r) => return Err(partial.refuse(StageKind::KeyConcurrency, r)),
            }
        }
        Ok(partial)
    }

    /// The chain, waiting asynchronously where a stage makes it wait (bounded by the deadline,
    /// and ended by the request's [`Cancel`](crate::deadline::Cancel)).
    pub(crate) async fn admit(
        &self,
        request: &Request<'_>,
        gate: Option<&Gate<C>>,
        on_drop: OnDrop,
    ) -> Result<PolicyPermit<C>, Refusal> {
        let mut p = self.start(request)?;
        let route = Arc::clone(&p.route);
        let cancel = request.cancel();
        let key = route.key_of(request);
        match &route.rate {
            None => {}
            Some(RateStage::Local(rate)) => {
                let wait = rate.acquire_before(1, p.deadline);
                match within_nanos(&route.clock, NO_DEADLINE, cancel, wait).await {
                    Ok(Ok(())) => {}
                    Ok(Err(r)) => return Err(p.refuse(StageKind::Rate, r)),
                    Err(_) => return Err(p.cancelled(StageKind::Rate)),
                }
            }
            #[cfg(feature = "redis")]
            Some(RateStage::Redis(stage)) => {
                // Bounded by the store's deadline, and by the request's own.
                let ask = stage.limiter.try_acquire(key, 1);
                match within_nanos(&route.clock, p.deadline, cancel, ask).await {
                    Ok(Ok(())) => {}
                    Ok(Err(r)) => return Err(p.refuse(StageKind::Rate, r)),
                    Err(Ended::Deadline) => {
                        let late = Rejection::new(RejectReason::DeadlineExceeded);
                        return Err(p.refuse(StageKind::Rate, late));
                    }
                    Err(Ended::Cancelled) => return Err(p.cancelled(StageKind::Rate)),
                }
            }
            Some(RateStage::Keyed(rate)) => {
                if let Err(r) = rate.try_acquire(key) {
                    return Err(p.refuse(StageKind::Rate, r));
                }
            }
        }
        p = Self::take_key_slot(p, key)?;
        if let Some(limiter) = &route.concurrency {
            let wait = limiter.acquire_before(1, p.deadline);
            match within_nanos(&route.clock, NO_DEADLINE, cancel, wait).await {
                Ok(Ok(permit)) => p.concurrency = Some(permit),
                Ok(Err(r)) => return Err(p.refuse(StageKind::Concurrency, r)),
                Err(_) => return Err(p.cancelled(StageKind::Concurrency)),
            }
        }
        let held = match gate {
            Some(gate) if route.gate => {
                let request = request.with_deadline_before(p.deadline);
                match gate.acquire_owned(&request).await {
                    Ok(permit) => Some(permit),
                    Err(r) => return Err(p.refuse(StageKind::Gate, r)),
                }
            }
            _ => None,
        };
        Ok(p.admit(held, on_drop))
    }

    /// The chain, blocking the thread where a stage makes it wait (bounded by the deadline; a
    /// [`Cancel`](crate::deadline::Cancel) is looked at before each stage, not during a wait).
    pub(crate) fn admit_blocking(
        &self,
        request: &Request<'_>,
        gate: Option<&Gate<C>>,
        on_drop: OnDrop,
    ) -> Result<PolicyPermit<C>, Refusal> {
        self.admit_sync(request, gate, on_drop, true)
    }

    /// The chain without any waiting: each stage admits now or refuses.
    pub(crate) fn admit_now(
        &self,
        request: &Request<'_>,
        gate: Option<&Gate<C>>,
    ) -> Result<PolicyPermit<C>, Refusal> {
        self.admit_sync(request, gate, OnDrop::Success, false)
    }

    /// The synchronous chain: `blocking`, a stage may block the thread until its deadline and a
    /// cancellation is looked at before each stage; otherwise every stage decides now.
    fn admit_sync(
        &self,
        request: &Request<'_>,
        gate: Option<&Gate<C>>,
        on_drop: OnDrop,
        blocking: bool,
    ) -> Result<PolicyPermit<C>, Refusal> {
        let mut p = self.start(request)?;
        let route = Arc::clone(&p.route);
        let key = route.key_of(request);
        if let Some(rate) = &route.rate {
            let taken = match rate {
                RateStage::Local(rate) if blocking => rate.acquire_blocking_before(1, p.deadline),
                RateStage::Local(rate) => rate.try_acquire(1),
                RateStage::Keyed(rate) => rate.try_acquire(key),
                #[cfg(feature = "redis")]
                RateStage::Redis(stage) => stage.limiter.try_acquire_local(key, 1),
            };
            if let Err(r) = taken {
                return Err(p.refuse(StageKind::Rate, r));
            }
        }
        p = Self::take_key_slot(p, key)?;
        if let Some(limiter) = &route.concurrency {
            if blocking && is_cancelled(request) {
                return Err(p.cancelled(StageKind::Concurrency));
            }
            let taken = if blocking {
                limiter.acquire_blocking_before(1, p.deadline)
            } else {
                limiter.try_acquire(1)
            };
            match taken {
                Ok(permit) => p.concurrency = Some(permit),
                Err(r) => return Err(p.refuse(StageKind::Concurrency, r)),
            }
        }
        let held = match gate {
            Some(gate) if route.gate => {
                if blocking && is_cancelled(request) {
                    return Err(p.cancelled(StageKind::Gate));
                }
                let taken = if blocking {
                    gate.acquire_blocking_owned(&request.with_deadline_before(p.deadline))
                } else {
                    gate.try_acquire_owned(request)
                };
                match taken {
                    Ok(permit) => Some(permit),
                    Err(r) => return Err(p.refuse(StageKind::Gate, r)),
                }
            }
            _ => None,
        };
        Ok(p.admit(held, on_drop))
    }
}
