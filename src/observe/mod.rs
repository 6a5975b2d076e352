//! Metrics through the [`metrics`](https://docs.rs/metrics) facade (feature `metrics`): what the
//! gate counts, sees and learned, with Prometheus names, for any exporter the service installs.
//!
//! Install a recorder (e.g. `metrics-exporter-prometheus`) **before building the gate**: the gate
//! registers its metrics once, when it is built, and keeps the handles, so a gate built before
//! the recorder publishes to no one. Without a recorder every handle is a no-op.
//!
//! ```
//! use metrics_exporter_prometheus::PrometheusBuilder;
//! use sluicegate::{clock::ManualClock, Config, Gate, Request};
//! use std::time::Duration;
//!
//! // A service installs its recorder globally (`install_recorder()`); here, for this thread only.
//! let recorder = PrometheusBuilder::new().build_recorder();
//! let prometheus = recorder.handle();
//! let clock = ManualClock::new();
//! let gate = metrics::with_local_recorder(&recorder, || {
//!     Gate::builder(Config::default())
//!         .clock(clock.clone())
//!         .without_memory_probe()
//!         .metrics_label("api") // every metric of this gate carries gate="api"
//!         .build()
//! })?;
//! drop(gate.try_acquire(&Request::url("/pay")));
//! clock.advance(Duration::from_millis(100));
//! gate.snapshot(); // the tick is due: it runs, and publishes
//! let text = prometheus.render();
//! assert!(text.contains(r#"sluicegate_requests_total{gate="api",result="admitted"} 1"#));
//! # Ok::<(), sluicegate::ConfigError>(())
//! ```
//!
//! # Nothing on the request path
//! The gate's counters and figures are published from the sampler's tick (every
//! `sampler.tick`, 100 ms by default, on the first request that finds it due, or on
//! [`crate::Gate::snapshot`]), from the [`crate::Snapshot`] it takes: counters are brought
//! forward by what the gate's own per-thread counters grew since the previous tick, gauges are
//! set, and the latencies the sampler recorded since then go to the latency histogram. A request
//! that is admitted and released touches no metric: a `counter!` there would cost a registry
//! lookup or a shared atomic per request, the very contention the gate's striped counters avoid.
//! The one exception is the wait histogram, recorded by a request that waited for its token, after
//! its sleep. So the figures are as fresh as the last tick: a gate that gets no request publishes
//! nothing new until one comes, or until something calls [`crate::Gate::snapshot`] (an exporter's
//! scrape handler may, before it renders). Breaker state changes and config reloads are rare, and
//! recorded where they happen. Refusals by a per-route policy are counted where they happen too,
//! on handles each route registered when it was built (a refusal is not the hot path the gate's
//! admissions are, and a handle costs one atomic add, no lookup and no lock); a policy built by a
//! gate carries its `gate` label. Why: `docs/design/metrics.md`.
//!
//! # The metrics
//! Names are constants of [`names`]. Every metric of a gate carries `gate="<label>"` if the gate
//! was built with [`crate::GateBuilder::metrics_label`]; without one, two gates of a process
//! share their series (counters add up, gauges show whichever ticked last), so label each gate
//! where a process has several.
//!
//! | name | type | labels | meaning |
//! | --- | --- | --- | --- |
//! | `sluicegate_requests_total` | counter | `result` = `admitted`, `refused` (+ `reason`), `abandoned` | requests decided; `reason` = [`crate::RejectReason::as_str`]: `in_flight_ceiling`, `memory_ceiling`, `rate_limited`, `too_many_waiters` |
//! | `sluicegate_requests_classified_total` | counter | `urgency` = `urgent`, `non_urgent` | requests classified (only where urgency matters) |
//! | `sluicegate_calls_total` | counter | `outcome` = `succeeded`, `failed`, `cancelled` | admitted calls released |
//! | `sluicegate_switch_flips_total` | counter | | times the switch turned on or off |
//! | `sluicegate_in_flight` | gauge | | admitted requests not yet released |
//! | `sluicegate_waiters` | gauge | | requests waiting for a token |
//! | `sluicegate_switch_on` | gauge | | 1 while the switch is on, 0 while off |
//! | `sluicegate_latency_trimmed_mean_seconds` | gauge | | the switch's latency figure (NaN until `min_samples`) |
//! | `sluicegate_memory_ratio` | gauge | | memory used ÷ limit (NaN while unknown) |
//! | `sluicegate_learned_capacity_requests_per_second` | gauge | | learned capacity (NaN until measured) |
//! | `sluicegate_learned_base_latency_seconds` | gauge | | learned latency without queue (NaN until measured) |
//! | `sluicegate_learned_knee`, `sluicegate_learned_ceiling` | gauge | | learned in-flight levels (NaN until measured) |
//! | `sluicegate_learned_confirmed` | gauge | | 0/1: a knee shows (the service was seen queueing) |
//! | `sluicegate_limit_max_in_flight`, `_max_running`, `_max_qps`, `_shared_in_flight` | gauge | | the limits in force ([`crate::snapshot::Limits`]) |
//! | `sluicegate_limit_max_avg_latency_seconds`, `sluicegate_limit_max_wait_seconds` | gauge | | the latency threshold and the longest wait in force |
//! | `sluicegate_wait_seconds` | histogram | | wait of each request that waited for its token |
//! | `sluicegate_latency_seconds` | histogram | | handler latency of the calls the sampler times (a sample at high rates) |
//! | `sluicegate_breaker_state_changes_total` | counter | `to` = [`crate::breaker::State::as_str`] | breaker state changes, all breakers of the process |
//! | `sluicegate_breakers_open` | gauge | | breakers refusing calls now (open, half-open, forced open) |
//! | `sluicegate_config_reloads_total` | counter | `result` = `ok`, `error` | reloads by the config file watcher |
//! | `sluicegate_policy_refused_total` | counter | `route`, `stage` = `arrival`, `breaker`, `rate`, `key_concurrency`, `concurrency`, `gate`; `reason` | requests refused by a per-route policy ([`crate::policy`]), counted where refused |

mod events;
mod gate;
pub mod names;
mod policy;

#[cfg(feature = "reload")]
pub(crate) use events::reload_outcome;
pub(crate) use events::{breaker_dropped, breaker_state_changed};
pub(crate) use gate::GateMetrics;
pub(crate) use policy::RouteMetrics;
