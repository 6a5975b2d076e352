//! The demo's figures: requests counted by the second they were scheduled in, and a run's
//! totals.
//!
//! Every request sent is counted once, in the second it was scheduled in, as answered (a 2xx in
//! time), refused (429 or 503), timed out, or an error (a failed connection, another status, or
//! an outcome that never came back): `sent = answered + refused + timed out + errors` in every
//! second and in total. Latencies are those of the answered requests, from their scheduled time.

use std::collections::BTreeMap;
use std::time::Duration;

use super::load::{Generated, Outcome, Record};

/// The counts of one second, or of a whole run.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Counts {
    pub(crate) sent: u64,
    pub(crate) answered: u64,
    pub(crate) urgent_sent: u64,
    pub(crate) urgent_answered: u64,
    pub(crate) refused_429: u64,
    pub(crate) refused_503: u64,
    pub(crate) timed_out: u64,
    pub(crate) errors: u64,
    /// Median latency of the answered requests.
    pub(crate) p50: Option<Duration>,
    /// 99th percentile latency of the answered requests.
    pub(crate) p99: Option<Duration>,
}

impl Counts {
    /// Requests to the non-urgent route.
    pub(crate) fn non_urgent_sent(&self) -> u64 {
        self.sent - self.urgent_sent
    }

    /// Non-urgent requests answered in time.
    pub(crate) fn non_urgent_answered(&self) -> u64 {
        self.answered - self.urgent_answered
    }

    /// Share of urgent requests answered in time; `None` without urgent requests.
    pub(crate) fn urgent_success(&self) -> Option<f64> {
        ratio(self.urgent_answered, self.urgent_sent)
    }

    /// Share of non-urgent requests answered in time; `None` without any.
    pub(crate) fn non_urgent_success(&self) -> Option<f64> {
        ratio(self.non_urgent_answered(), self.non_urgent_sent())
    }

    /// Refusals, either code.
    pub(crate) fn refused(&self) -> u64 {
        self.refused_429 + self.refused_503
    }

    /// Adds one request's outcome (not its latency: see [`Counts::set_latencies`]).
    fn add(&mut self, record: &Record) {
        let answered = record.outcome == Outcome::Answered;
        self.answered += u64::from(answered);
        if record.urgent {
            self.urgent_sent += 1;
            self.urgent_answered += u64::from(answered);
        }
        match record.outcome {
            Outcome::Answered => {}
            Outcome::Refused(429, _) => self.refused_429 += 1,
            Outcome::Refused(..) => self.refused_503 += 1,
            Outcome::TimedOut => self.timed_out += 1,
            Outcome::OtherStatus(_) | Outcome::Failed => self.errors += 1,
        }
    }

    /// Sets `sent`, counting as errors the requests sent whose outcome never came back.
    fn close(&mut self, sent: u64) {
        let known = self.answered + self.refused() + self.timed_out + self.errors;
        self.sent = sent.max(known);
        self.errors += self.sent - known;
        // Unknown outcomes are non-urgent as far as the urgent counts go.
    }

    /// The percentiles of `latencies` (answered requests), sorted in place.
    fn set_latencies(&mut self, latencies: &mut [Duration]) {
        latencies.sort_unstable();
        self.p50 = percentile(latencies, 0.50);
        self.p99 = percentile(latencies, 0.99);
    }
}

/// A run's figures: one [`Counts`] per second of the schedule, and the totals.
#[derive(Debug, Clone)]
pub(crate) struct Tally {
    pub(crate) seconds: Vec<Counts>,
    pub(crate) total: Counts,
    /// The rate the generator offered: requests sent per second of sending.
    pub(crate) achieved_rate: f64,
    /// 99th percentile of how late requests left after their scheduled time.
    pub(crate) lag_p99: Option<Duration>,
    /// Refusals by class (urgent first) and the reason their answer named (`"unnamed"` for none
    /// known).
    pub(crate) reasons: BTreeMap<(Class, &'static str), u64>,
}

/// A request's class, urgent first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Class {
    Urgent,
    NonUrgent,
}

/// Counts `generated` over `seconds` whole seconds.
pub(crate) fn tally(generated: &Generated, seconds: u64) -> Tally {
    let slots = usize::try_from(seconds.max(1)).unwrap_or(usize::MAX);
    let slot_of = |at: Duration| {
        usize::try_from(at.as_secs())
            .unwrap_or(usize::MAX)
            .min(slots - 1)
    };
    let mut per_second = vec![Counts::default(); slots];
    let mut latencies: Vec<Vec<Duration>> = vec![Vec::new(); slots];
    let mut total = Counts::default();
    let mut all_latencies = Vec::new();
    let mut lags = Vec::with_capacity(generated.records.len());
    let mut reasons = BTreeMap::new();
    for record in &generated.records {
        if let Outcome::Refused(_, reason) = record.outcome {
            let class = if record.urgent {
                Class::Urgent
            } else {
                Class::NonUrgent
            };
            *reasons
                .entry((class, reason.unwrap_or("unnamed")))
                .or_insert(0) += 1;
        }
        let slot = slot_of(record.scheduled);
        per_second[slot].add(record);
        total.add(record);
        lags.push(record.lag);
        if record.outcome == Outcome::Answered {
            latencies[slot].push(record.latency);
            all_latencies.push(record.latency);
        }
    }
    for ((counts, latencies), &sent) in per_second
        .iter_mut()
        .zip(latencies.iter_mut())
        .zip(&generated.sent_per_second)
    {
        counts.close(sent);
        counts.set_latencies(latencies);
    }
    total.close(generated.sent);
    total.set_latencies(&mut all_latencies);
    lags.sort_unstable();
    let span = generated
        .sending_span
        .max(Duration::from_secs(seconds.max(1)));
    Tally {
        seconds: per_second,
        achieved_rate: generated.sent as f64 / span.as_secs_f64(),
        lag_p99: percentile(&lags, 0.99),
        reasons,
        total,
    }
}

/// `part / whole`, or `None` when `whole` is 0.
pub(crate) fn ratio(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64)
}

/// The nearest-rank percentile `q` of sorted `values`.
fn percentile(sorted: &[Duration], q: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len()) - 1).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(at_ms: u64, urgent: bool, outcome: Outcome) -> Record {
        Record {
            scheduled: Duration::from_millis(at_ms),
            urgent,
            outcome,
            latency: Duration::from_millis(10),
            lag: Duration::ZERO,
        }
    }

    #[test]
    fn every_request_sent_is_counted_once_and_missing_outcomes_are_errors() {
        let generated = Generated {
            sent: 6,
            sent_per_second: vec![4, 2],
            sending_span: Duration::from_millis(1900),
            records: vec![
                record(10, true, Outcome::Answered),
                record(20, false, Outcome::Refused(429, Some("rate_limited"))),
                record(30, false, Outcome::Refused(503, None)),
                record(1100, true, Outcome::TimedOut),
                record(1200, false, Outcome::Failed),
            ],
        };
        let tally = tally(&generated, 2);
        let sum = |c: &Counts| c.answered + c.refused() + c.timed_out + c.errors;
        assert_eq!(tally.total.sent, 6);
        assert_eq!(sum(&tally.total), 6);
        for second in &tally.seconds {
            assert_eq!(sum(second), second.sent);
        }
        assert_eq!(
            tally.seconds[0].errors, 1,
            "the request whose outcome is missing"
        );
        assert_eq!(tally.total.urgent_success(), Some(0.5));
        assert_eq!(tally.total.p99, Some(Duration::from_millis(10)));
        assert_eq!(tally.achieved_rate, 3.0);
        assert_eq!(tally.reasons.get(&(Class::NonUrgent, "unnamed")), Some(&1));
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let values: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&values, 0.5), Some(Duration::from_millis(50)));
        assert_eq!(percentile(&values, 0.99), Some(Duration::from_millis(99)));
        assert_eq!(percentile(&[], 0.99), None);
    }
}
