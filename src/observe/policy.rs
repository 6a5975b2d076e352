//! Refusals by the per-route policies, counted by route, stage and reason.
//!
//! A route registers, when it is built, the counters of the refusals its stages give (its
//! breaker's `circuit_open`, its rate's `rate_limited`, its concurrency's `concurrency_limited`,
//! ...), and keeps the handles: a refusal then adds one to a handle it already holds, with no
//! registry lookup and no lock. A refusal of a kind the route did not expect (a reason a later
//! version adds) is counted through the `metrics` macro, which looks its series up. Admissions are
//! not counted here: an admitted request's path touches no metric (the route's own counts are in
//! [`crate::policy::Policies::stats`]).

use metrics::{Counter, Label, Unit};

use super::names::{LABEL_GATE, LABEL_REASON, LABEL_ROUTE, LABEL_STAGE, POLICY_REFUSED};
use crate::rejection::RejectReason;

/// Stages of the chain, as [`LABEL_STAGE`] names them.
pub(crate) const STAGES: [&str; 6] = [
    "arrival",
    "breaker",
    "rate",
    "key_concurrency",
    "concurrency",
    "gate",
];

/// The refusal counters of one route: a handle per (stage, reason) it registered.
pub(crate) struct RouteMetrics {
    labels: Vec<Label>,
    /// Indexed by stage, then by reason (`reason as usize`, its place in `RejectReason::ALL`).
    counters: [[Option<Counter>; RejectReason::ALL.len()]; STAGES.len()],
}

impl std::fmt::Debug for RouteMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let registered = self.counters.iter().flatten().flatten().count();
        f.debug_struct("RouteMetrics")
            .field("registered", &registered)
            .finish_non_exhaustive()
    }
}

impl RouteMetrics {
    /// Nothing registered: every refusal goes through the macro (a route that refuses nothing
    /// of its own, such as `default` without stages).
    pub(crate) fn none(route: &str, gate: Option<&str>) -> Self {
        RouteMetrics {
            labels: base_labels(route, gate),
            counters: Default::default(),
        }
    }

    /// Describes the metric and registers, with the recorder in force, the counters of `expected`
    /// (stage number in [`STAGES`], reasons), labelled `route` (and `gate`, if labelled).
    pub(crate) fn register(
        route: &str,
        gate: Option<&str>,
        expected: &[(usize, &[RejectReason])],
    ) -> Self {
        metrics::describe_counter!(
            POLICY_REFUSED,
            Unit::Count,
            "Requests refused by a per-route policy, by route, stage and reason"
        );
        let mut metrics = Self::none(route, gate);
        for &(stage, reasons) in expected {
            for &reason in reasons {
                let labels = metrics.labels_of(stage, reason);
                metrics.counters[stage][reason as usize] =
                    Some(metrics::counter!(POLICY_REFUSED, labels));
            }
        }
        metrics
    }

    fn labels_of(&self, stage: usize, reason: RejectReason) -> Vec<Label> {
        let mut labels = self.labels.clone();
        labels.push(Label::new(LABEL_STAGE, STAGES[stage]));
        labels.push(Label::new(LABEL_REASON, reason.as_str()));
        labels
    }

    /// Counts a refusal by `stage` (its number in [`STAGES`]) for `reason`.
    #[inline]
    pub(crate) fn refused(&self, stage: usize, reason: RejectReason) {
        match &self.counters[stage][reason as usize] {
            Some(counter) => counter.increment(1),
            None => metrics::counter!(POLICY_REFUSED, self.labels_of(stage, reason)).increment(1),
        }
    }
}

fn base_labels(route: &str, gate: Option<&str>) -> Vec<Label> {
    let mut labels: Vec<Label> = gate
        .map(|g| Label::new(LABEL_GATE, g.to_owned()))
        .into_iter()
        .collect();
    labels.push(Label::new(LABEL_ROUTE, route.to_owned()));
    labels
}
