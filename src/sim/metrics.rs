//! What a simulation run measured: the figures per strategy and a timeline in 100 ms slices.

use serde::Serialize;

/// Length of one timeline slice, in milliseconds.
pub const SLICE_MS: u64 = 100;

/// The result of simulating one scenario with every strategy on the same arrivals.
///
/// Serialised (`--json`) as `{"scenario", "seed", "capacity_rps", "strategies": [{"name", ...}]}`;
/// the timelines are left out of the JSON and written as CSV instead.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// The scenario's name.
    pub scenario: String,
    /// The seed the arrivals and service times were drawn from.
    pub seed: u64,
    /// Backend capacity C = workers ÷ mean service time, in requests per second.
    pub capacity_rps: f64,
    /// The clients' latency objective, in milliseconds.
    pub slo_ms: f64,
    /// One entry per strategy, in the order they ran.
    pub strategies: Vec<StrategyReport>,
}

/// The figures of one strategy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StrategyReport {
    /// The strategy's name: `unprotected`, `token-bucket`, `concurrency-limit`, `sluicegate`, ...
    pub name: String,
    /// Successful responses (admitted and answered before the client timeout) during the phases whose
    /// load is ≥ 1, divided by C × their total duration.
    pub goodput_ratio: f64,
    /// Share of offered urgent requests answered in time (retries of one request count as one).
    pub urgent_success: f64,
    /// Share of offered non-urgent requests answered in time.
    pub non_urgent_success: f64,
    /// Median time from arrival to answer of the requests answered in time (token wait included).
    pub p50_ms: Option<f64>,
    /// 99th percentile of the same.
    pub p99_ms: Option<f64>,
    /// Share of backend busy time spent on answers nobody waited for any more (client timed out).
    pub wasted_work: f64,
    /// How many times the strategy's switch turned on or off (0 for strategies without one).
    pub switch_flips: u64,
    /// Time from the first overload onset (a phase with load > 1 begins) to the strategy's first
    /// protective act (a refusal or a wait); `None` if it never acted or there is no overload.
    pub reaction_ms: Option<f64>,
    /// Time from the end of the last overload phase until the strategy stops refusing and its switch is
    /// off (for good); `None` if it never recovered before the run ended or there is no overload.
    pub recovery_ms: Option<f64>,
    /// Highest backend memory use ÷ memory limit seen.
    pub peak_memory_ratio: f64,
    /// The run in 100 ms slices (not part of the JSON).
    #[serde(skip)]
    pub timeline: Vec<TimelineSample>,
}

/// One 100 ms slice of a strategy's run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TimelineSample {
    /// Start of the slice, milliseconds since the run began.
    pub t_ms: u64,
    /// The offered load at that time, as a multiple of capacity.
    pub load: f64,
    /// Urgent requests that arrived (retries included).
    pub offered_urgent: u32,
    /// Non-urgent requests that arrived (retries included).
    pub offered_non_urgent: u32,
    /// Urgent requests answered in time.
    pub answered_urgent: u32,
    /// Non-urgent requests answered in time.
    pub answered_non_urgent: u32,
    /// Requests refused by the strategy.
    pub refused: u32,
    /// Requests given up by their client (answered too late, or abandoned while queued or waiting).
    pub timed_out: u32,
    /// Requests in the backend (in service or in its queue) at the end of the slice.
    pub in_flight: u32,
    /// Requests waiting for a token at the end of the slice.
    pub waiting: u32,
    /// Mean arrival-to-answer latency of the requests answered in time in the slice.
    pub mean_latency_ms: Option<f64>,
    /// 99th percentile of the arrival-to-answer latency of the requests answered in time in the slice:
    /// the ⌈0.99·n⌉-th smallest of those n latencies, exact (not from a histogram); `None` if none was
    /// answered in time in the slice.
    pub p99_ms: Option<f64>,
    /// Requests answered in time (counted above) but slower than the clients' SLO. Unlike
    /// percentiles, these counts add up: slices pooled into a longer window have a p99 within the
    /// SLO exactly when at most 1 % of their answers are late.
    pub late: u32,
    /// Whether the strategy's switch was on at the end of the slice (always false without a switch).
    pub switch_on: bool,
    /// Backend memory use ÷ limit at the end of the slice.
    pub memory_ratio: f64,
}

impl TimelineSample {
    /// Requests answered in time in the slice, urgent and non-urgent.
    pub fn answered(&self) -> u64 {
        u64::from(self.answered_urgent) + u64::from(self.answered_non_urgent)
    }
}

/// Whether `answered` requests of which `late` were slower than the SLO have a p99 within it: the
/// ⌈0.99·n⌉-th fastest answer (the p99 of [`TimelineSample::p99_ms`]) is not late. Counts of slices
/// add up, so this holds for any window of them.
///
/// ```
/// use sluicegate::sim::metrics::p99_within_slo;
///
/// assert!(p99_within_slo(500, 5));
/// assert!(!p99_within_slo(500, 6));
/// assert!(!p99_within_slo(50, 1)); // with fewer than 100 answers, the p99 is the slowest
/// ```
pub fn p99_within_slo(answered: u64, late: u64) -> bool {
    answered.saturating_sub(late) >= answered.saturating_mul(99).div_ceil(100)
}

/// Standard deviations of a window's count of late answers that [`tail_within_slo_or_noise`]
/// allows above 1 % of its answers.
pub const TAIL_NOISE_SIGMAS: f64 = 3.0;

/// Whether a window of `answered` requests of which `late` were slower than the SLO is consistent
/// with a p99 within it: at most 1 % of its answers late, plus [`TAIL_NOISE_SIGMAS`] standard
/// deviations of the late count of a service whose p99 sits exactly at the SLO (binomial:
/// √(n · 0.01 · 0.99)).
///
/// Why not [`p99_within_slo`] on a short window: the count of late answers is noise too. A
/// service whose own p99 sits at 0.93 of the SLO (exponential times, SLO five means: 0.67 % late)
/// shows more than 10 late answers in a window of 1,000 about one window in eleven, so over a 5 s
/// step a static limit told the workers, right from the first request, failed the test somewhere
/// on 36 of 64 runs of the backend grid (seeds 1 to 8), and its convergence read as "never". A
/// transient that makes a window late (a queue a latency long) exceeds this allowance many times
/// over; the p99 of a whole step, thousands of answers, is judged by [`p99_within_slo`].
///
/// ```
/// use sluicegate::sim::metrics::tail_within_slo_or_noise;
///
/// assert!(tail_within_slo_or_noise(1000, 19)); // 10 + 3 x 3.15
/// assert!(!tail_within_slo_or_noise(1000, 20));
/// assert!(!tail_within_slo_or_noise(1000, 100)); // a transient
/// assert!(tail_within_slo_or_noise(0, 0));
/// ```
pub fn tail_within_slo_or_noise(answered: u64, late: u64) -> bool {
    let n = answered as f64;
    late as f64 <= 0.01 * n + TAIL_NOISE_SIGMAS * (n * 0.01 * 0.99).sqrt()
}

impl Report {
    /// The figures of the strategy called `name`, if it ran.
    pub fn strategy(&self, name: &str) -> Option<&StrategyReport> {
        self.strategies.iter().find(|s| s.name == name)
    }

    /// The names of the strategies that ran, in order, joined by `, ` (for error messages).
    pub fn strategy_names(&self) -> String {
        self.strategies
            .iter()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}
