//! The gate's metrics: described and registered once when the gate is built, published from the
//! sampler's tick.
//!
//! Every figure comes from the [`Snapshot`] the tick takes, so what a dashboard shows is what
//! [`crate::Gate::snapshot`] returns: counters are brought forward by what the gate's own counters
//! grew since the previous tick, gauges are set. A request's path touches none of this.

use metrics::{Counter, Gauge, Histogram, Label, Unit};

use super::names::*;
use crate::clock::Nanos;
use crate::rejection::RejectReason;
use crate::snapshot::Snapshot;

/// Reads a total from the snapshot.
type Total = fn(&Snapshot) -> u64;
/// Reads a figure from the snapshot.
type Figure = fn(&Snapshot) -> f64;

/// A counter brought forward from a total the snapshot holds.
struct Tally {
    counter: Counter,
    read: Total,
    /// The total the counter was last brought to.
    published: u64,
}

impl Tally {
    fn publish(&mut self, snapshot: &Snapshot) {
        let total = (self.read)(snapshot);
        // Successes are derived (admitted, less those in flight, failed or cancelled) and may read
        // a little low while requests come and go: the counter only ever moves forward.
        if total > self.published {
            self.counter.increment(total - self.published);
            self.published = total;
        }
    }
}

/// A gauge set from a figure of the snapshot.
struct Level {
    gauge: Gauge,
    read: Figure,
}

/// The handles of one gate's metrics, and the totals its counters were brought to.
pub(crate) struct GateMetrics {
    tallies: Vec<Tally>,
    levels: Vec<Level>,
    latency: Histogram,
    wait: Histogram,
}

impl std::fmt::Debug for GateMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GateMetrics")
            .field("counters", &self.tallies.len())
            .field("gauges", &self.levels.len())
            .finish_non_exhaustive()
    }
}

/// `value` as a gauge reads it: NaN for "not known (yet)".
fn known(value: Option<f64>) -> f64 {
    value.unwrap_or(f64::NAN)
}

fn flag(on: bool) -> f64 {
    if on {
        1.0
    } else {
        0.0
    }
}

impl GateMetrics {
    /// Describes the gate's metrics to the recorder in force and registers their handles, labelled
    /// `gate = label` if a label is given. The handles stay bound to that recorder.
    pub(crate) fn register(label: Option<&str>) -> Self {
        describe();
        let base: Vec<Label> = label
            .map(|l| Label::new(LABEL_GATE, l.to_owned()))
            .into_iter()
            .collect();
        let with = |pairs: &[(&'static str, &'static str)]| -> Vec<Label> {
            let mut labels = base.clone();
            labels.extend(pairs.iter().map(|&(k, v)| Label::new(k, v)));
            labels
        };
        let refused = |reason: RejectReason| {
            with(&[(LABEL_RESULT, "refused"), (LABEL_REASON, reason.as_str())])
        };
        let tallies: [(&'static str, Vec<Label>, Total); 12] = [
            (REQUESTS, with(&[(LABEL_RESULT, "admitted")]), |s| {
                s.counters.admitted
            }),
            (REQUESTS, refused(RejectReason::InFlightCeiling), |s| {
                s.counters.refused_in_flight
            }),
            (REQUESTS, refused(RejectReason::MemoryCeiling), |s| {
                s.counters.refused_memory
            }),
            (REQUESTS, refused(RejectReason::RateLimited), |s| {
                s.counters.refused_rate
            }),
            (REQUESTS, refused(RejectReason::TooManyWaiters), |s| {
                s.counters.refused_waiters
            }),
            (REQUESTS, with(&[(LABEL_RESULT, "abandoned")]), |s| {
                s.counters.abandoned
            }),
            (
                REQUESTS_CLASSIFIED,
                with(&[(LABEL_URGENCY, "urgent")]),
                |s| s.counters.classified_urgent,
            ),
            (
                REQUESTS_CLASSIFIED,
                with(&[(LABEL_URGENCY, "non_urgent")]),
                |s| s.counters.classified_non_urgent,
            ),
            (CALLS, with(&[(LABEL_OUTCOME, "succeeded")]), |s| {
                s.counters.succeeded
            }),
            (CALLS, with(&[(LABEL_OUTCOME, "failed")]), |s| {
                s.counters.failed
            }),
            (CALLS, with(&[(LABEL_OUTCOME, "cancelled")]), |s| {
                s.counters.cancelled
            }),
            (SWITCH_FLIPS, with(&[]), |s| s.switch_flips),
        ];
        let tallies = tallies
            .into_iter()
            .map(|(name, labels, read)| Tally {
                counter: metrics::counter!(name, labels),
                read,
                published: 0,
            })
            .collect();
        let levels: [(&'static str, Figure); 16] = [
            (IN_FLIGHT, |s| s.in_flight as f64),
            (WAITERS, |s| s.waiters as f64),
            (SWITCH_ON, |s| flag(s.switch.on)),
            (LATENCY_TRIMMED_MEAN, |s| {
                known(s.trimmed_mean.map(|d| d.as_secs_f64()))
            }),
            (MEMORY_RATIO, |s| known(s.memory_ratio)),
            (LEARNED_CAPACITY, |s| known(s.learned.capacity)),
            (LEARNED_BASE_LATENCY, |s| {
                known(s.learned.base_latency.map(|d| d.as_secs_f64()))
            }),
            (LEARNED_KNEE, |s| known(s.learned.knee.map(|k| k as f64))),
            (LEARNED_CEILING, |s| {
                known(s.learned.ceiling.map(|c| c as f64))
            }),
            (LEARNED_CONFIRMED, |s| flag(s.learned.confirmed)),
            (LIMIT_MAX_IN_FLIGHT, |s| s.limits.max_in_flight as f64),
            (LIMIT_MAX_RUNNING, |s| s.limits.max_running as f64),
            (LIMIT_MAX_QPS, |s| s.limits.max_qps),
            (LIMIT_MAX_AVG_LATENCY, |s| {
                s.limits.max_avg_latency.as_secs_f64()
            }),
            (LIMIT_MAX_WAIT, |s| s.limits.max_wait.as_secs_f64()),
            (LIMIT_SHARED_IN_FLIGHT, |s| s.limits.shared_in_flight as f64),
        ];
        let levels = levels
            .into_iter()
            .map(|(name, read)| Level {
                gauge: metrics::gauge!(name, with(&[])),
                read,
            })
            .collect();
        GateMetrics {
            tallies,
            levels,
            latency: metrics::histogram!(LATENCY, with(&[])),
            wait: metrics::histogram!(WAIT, with(&[])),
        }
    }

    /// The wait histogram, for the waiting path to record into (a waiter has slept already; the
    /// record is small beside that).
    pub(crate) fn wait_histogram(&self) -> Histogram {
        self.wait.clone()
    }

    /// Publishes what the tick saw: the snapshot's counters and figures, and the latencies (in
    /// nanoseconds) the sampler recorded since the previous tick.
    pub(crate) fn publish(&mut self, snapshot: &Snapshot, latencies: &[Nanos]) {
        for tally in &mut self.tallies {
            tally.publish(snapshot);
        }
        for level in &self.levels {
            level.gauge.set((level.read)(snapshot));
        }
        for &latency in latencies {
            self.latency.record(latency as f64 / 1e9);
        }
    }
}

/// Tells the recorder in force the unit and meaning of every metric of a gate.
fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        REQUESTS,
        Unit::Count,
        "Requests decided by the gate, by result (admitted, refused with a reason, abandoned while waiting)."
    );
    describe_counter!(
        REQUESTS_CLASSIFIED,
        Unit::Count,
        "Requests classified by urgency (only where urgency matters: switch on, near the in-flight ceiling, or from half a learned ceiling up)."
    );
    describe_counter!(
        CALLS,
        Unit::Count,
        "Admitted calls released, by outcome (succeeded, failed, cancelled)."
    );
    describe_counter!(
        SWITCH_FLIPS,
        Unit::Count,
        "Times the switch turned on or off."
    );
    describe_gauge!(
        IN_FLIGHT,
        Unit::Count,
        "Admitted requests not yet released."
    );
    describe_gauge!(WAITERS, Unit::Count, "Requests waiting for a token.");
    describe_gauge!(
        SWITCH_ON,
        "1 while the switch is on (requests draw tokens), 0 while off."
    );
    describe_gauge!(
        LATENCY_TRIMMED_MEAN,
        Unit::Seconds,
        "Trimmed-mean handler latency the switch compares with max_avg_latency (NaN until min_samples exist)."
    );
    describe_gauge!(
        MEMORY_RATIO,
        "Memory used divided by the memory limit (NaN while unknown)."
    );
    describe_gauge!(
        LEARNED_CAPACITY,
        "Learned capacity: completions per second the service sustains (NaN until measured)."
    );
    describe_gauge!(
        LEARNED_BASE_LATENCY,
        Unit::Seconds,
        "Learned latency of a request that does not queue (NaN until measured)."
    );
    describe_gauge!(
        LEARNED_KNEE,
        Unit::Count,
        "Learned in-flight level at which latency starts to climb (NaN until measured)."
    );
    describe_gauge!(
        LEARNED_CEILING,
        Unit::Count,
        "Learned in-flight ceiling (NaN until measured)."
    );
    describe_gauge!(
        LEARNED_CONFIRMED,
        "1 once a knee shows (the service was seen queueing), 0 while the learned ceiling grows."
    );
    describe_gauge!(
        LIMIT_MAX_IN_FLIGHT,
        Unit::Count,
        "Hard in-flight ceiling in force (max_in_flight, fixed or learned)."
    );
    describe_gauge!(
        LIMIT_MAX_RUNNING,
        Unit::Count,
        "In-flight threshold of the switch in force (max_running)."
    );
    describe_gauge!(
        LIMIT_MAX_QPS,
        "Rate of the whole gate while the switch is on, requests per second (max_qps)."
    );
    describe_gauge!(
        LIMIT_MAX_AVG_LATENCY,
        Unit::Seconds,
        "Latency threshold of the switch in force (max_avg_latency)."
    );
    describe_gauge!(
        LIMIT_MAX_WAIT,
        Unit::Seconds,
        "Longest a request may wait for a token now."
    );
    describe_gauge!(
        LIMIT_SHARED_IN_FLIGHT,
        Unit::Count,
        "In-flight level up to which requests enter without being classified."
    );
    describe_histogram!(
        WAIT,
        Unit::Seconds,
        "Time each admitted request that waited for its token waited."
    );
    describe_histogram!(
        LATENCY,
        Unit::Seconds,
        "Handler latency of completed admitted calls (the calls the sampler times: a sample at high rates)."
    );
}
