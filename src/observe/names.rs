//! The names of the metrics and of their labels, for dashboards, alerts and tests.
//!
//! Prometheus conventions: counters end in `_total`, durations are in seconds and end in
//! `_seconds`, every name starts with `sluicegate_`. The gate's metrics carry the label
//! [`LABEL_GATE`] when the gate was built with [`crate::GateBuilder::metrics_label`].

/// Counter: requests decided, by [`LABEL_RESULT`]: `admitted`, `refused` (with [`LABEL_REASON`],
/// [`crate::RejectReason::as_str`]: `in_flight_ceiling`, `memory_ceiling`, `rate_limited`,
/// `too_many_waiters`) or `abandoned` (the caller gave up while waiting for its token).
/// [`crate::snapshot::Counters::admitted`], `refused_*` and `abandoned`.
pub const REQUESTS: &str = "sluicegate_requests_total";

/// Counter: requests classified, by [`LABEL_URGENCY`] (`urgent`, `non_urgent`). The gate
/// classifies a request only where urgency matters (the switch on, in-flight near its ceiling,
/// or from half a learned ceiling up), so this counts those, not every request.
pub const REQUESTS_CLASSIFIED: &str = "sluicegate_requests_classified_total";

/// Counter: admitted calls released, by [`LABEL_OUTCOME`]: `succeeded`, `failed` (a failure
/// reported, or a panic) or `cancelled` (the future was dropped while the handler ran).
pub const CALLS: &str = "sluicegate_calls_total";

/// Counter: times the switch turned on or off ([`crate::Snapshot::switch_flips`]).
pub const SWITCH_FLIPS: &str = "sluicegate_switch_flips_total";

/// Counter: config reloads by the file watcher, by [`LABEL_RESULT`]: `ok` or `error` (the file
/// could not be read, parsed or validated, and the old config stays in force).
pub const CONFIG_RELOADS: &str = "sluicegate_config_reloads_total";

/// Counter: circuit breakers that changed state, of every breaker in the process, by [`LABEL_TO`]:
/// [`crate::breaker::State::as_str`] of the state entered (`open`, `half_open`, `closed`,
/// `forced_open`, `forced_closed`).
pub const BREAKER_STATE_CHANGES: &str = "sluicegate_breaker_state_changes_total";

/// Gauge: circuit breakers of the process that refuse calls now: open, half-open (which lets only
/// its probes through) or forced open.
pub const BREAKERS_OPEN: &str = "sluicegate_breakers_open";

/// Gauge: admitted requests not yet released ([`crate::Snapshot::in_flight`]).
pub const IN_FLIGHT: &str = "sluicegate_in_flight";

/// Gauge: requests waiting for a token ([`crate::Snapshot::waiters`]).
pub const WAITERS: &str = "sluicegate_waiters";

/// Gauge: 1 while the switch is on (requests draw tokens), 0 while it is off.
pub const SWITCH_ON: &str = "sluicegate_switch_on";

/// Gauge: the trimmed-mean handler latency the switch compares with `max_avg_latency`, seconds;
/// NaN until `min_samples` latencies exist ([`crate::Snapshot::trimmed_mean`]).
pub const LATENCY_TRIMMED_MEAN: &str = "sluicegate_latency_trimmed_mean_seconds";

/// Gauge: memory used ÷ memory limit; NaN while the probe cannot read it
/// ([`crate::Snapshot::memory_ratio`]).
pub const MEMORY_RATIO: &str = "sluicegate_memory_ratio";

/// Gauge: the learned capacity, completions per second the service sustains; NaN until measured
/// ([`crate::snapshot::Learned::capacity`]).
pub const LEARNED_CAPACITY: &str = "sluicegate_learned_capacity_requests_per_second";

/// Gauge: the learned latency of a request that does not queue, seconds; NaN until measured
/// ([`crate::snapshot::Learned::base_latency`]).
pub const LEARNED_BASE_LATENCY: &str = "sluicegate_learned_base_latency_seconds";

/// Gauge: the learned knee, the in-flight level at which latency starts to climb; NaN until
/// measured ([`crate::snapshot::Learned::knee`]).
pub const LEARNED_KNEE: &str = "sluicegate_learned_knee";

/// Gauge: the learned in-flight ceiling; NaN until measured
/// ([`crate::snapshot::Learned::ceiling`]).
pub const LEARNED_CEILING: &str = "sluicegate_learned_ceiling";

/// Gauge: 1 once a knee shows (the service was seen queueing), 0 while the learned ceiling is
/// still growing ([`crate::snapshot::Learned::confirmed`]).
pub const LEARNED_CONFIRMED: &str = "sluicegate_learned_confirmed";

/// Gauge: the hard in-flight ceiling in force, fixed or learned
/// ([`crate::snapshot::Limits::max_in_flight`]).
pub const LIMIT_MAX_IN_FLIGHT: &str = "sluicegate_limit_max_in_flight";

/// Gauge: the switch's in-flight threshold in force ([`crate::snapshot::Limits::max_running`]).
pub const LIMIT_MAX_RUNNING: &str = "sluicegate_limit_max_running";

/// Gauge: the whole gate's rate while the switch is on, requests per second
/// ([`crate::snapshot::Limits::max_qps`]).
pub const LIMIT_MAX_QPS: &str = "sluicegate_limit_max_qps";

/// Gauge: the switch's latency threshold in force, seconds
/// ([`crate::snapshot::Limits::max_avg_latency`]).
pub const LIMIT_MAX_AVG_LATENCY: &str = "sluicegate_limit_max_avg_latency_seconds";

/// Gauge: the longest a request may wait for a token now, seconds
/// ([`crate::snapshot::Limits::max_wait`]).
pub const LIMIT_MAX_WAIT: &str = "sluicegate_limit_max_wait_seconds";

/// Gauge: the in-flight level up to which requests enter without being classified
/// ([`crate::snapshot::Limits::shared_in_flight`]).
pub const LIMIT_SHARED_IN_FLIGHT: &str = "sluicegate_limit_shared_in_flight";

/// Histogram: how long each request that waited for its token waited, seconds (its count is
/// [`crate::snapshot::Counters::waited`]).
pub const WAIT: &str = "sluicegate_wait_seconds";

/// Histogram: handler latency of completed admitted calls, seconds: the calls the sampler times,
/// which at high rates are a sample of them (count calls with [`CALLS`], not with this).
pub const LATENCY: &str = "sluicegate_latency_seconds";

/// Counter: requests refused by a per-route policy ([`crate::policy`]), by [`LABEL_ROUTE`],
/// [`LABEL_STAGE`] (`arrival` (a deadline passed or a cancellation before any stage), `breaker`,
/// `rate` (the route's, its key's, or the Redis-kept one), `key_concurrency`, `concurrency`,
/// `gate`) and [`LABEL_REASON`] ([`crate::RejectReason::as_str`]). Counted where the refusal
/// happens, through handles each route registers when it is built.
pub const POLICY_REFUSED: &str = "sluicegate_policy_refused_total";

/// Label of [`POLICY_REFUSED`]: the policy's name, `default` or its route pattern.
pub const LABEL_ROUTE: &str = "route";

/// Label of [`POLICY_REFUSED`]: the stage of the chain that refused.
pub const LABEL_STAGE: &str = "stage";

/// Label: the gate's name, from [`crate::GateBuilder::metrics_label`]; absent without one.
pub const LABEL_GATE: &str = "gate";

/// Label of [`REQUESTS`] and [`CONFIG_RELOADS`]: what became of the request or the reload.
pub const LABEL_RESULT: &str = "result";

/// Label of refused [`REQUESTS`] and of [`POLICY_REFUSED`]: why ([`crate::RejectReason::as_str`]).
pub const LABEL_REASON: &str = "reason";

/// Label of [`REQUESTS_CLASSIFIED`]: `urgent` or `non_urgent`.
pub const LABEL_URGENCY: &str = "urgency";

/// Label of [`CALLS`]: `succeeded`, `failed` or `cancelled`.
pub const LABEL_OUTCOME: &str = "outcome";

/// Label of [`BREAKER_STATE_CHANGES`]: the state entered.
pub const LABEL_TO: &str = "to";
