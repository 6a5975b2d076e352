//! What the gate sees, at one moment.
//!
//! A [`Snapshot`] serializes (serde) for admin endpoints and logs: durations as seconds
//! (floating point), everything else as it reads.
//!
//! ```
//! use sluicegate::{Config, Gate};
//!
//! let gate = Gate::builder(Config::default()).without_memory_probe().build()?;
//! let json = serde_json::to_value(gate.snapshot())?;
//! assert_eq!(json["in_flight"], 0);
//! assert_eq!(json["switch"]["on"], false);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::time::Duration;

use serde::{Serialize, Serializer};

use crate::switch::SwitchStatus;

pub use crate::capacity::Learned;
pub use crate::signal::counters::Counters;

/// The gate's vital signs and counters, from [`crate::Gate::snapshot`]. Figures computed by the
/// sampler (latency, rates) are those of its latest tick; in-flight, waiters, memory, the switch and
/// the counters are read live.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Snapshot {
    /// The gate clock's time of the snapshot.
    #[serde(serialize_with = "seconds")]
    pub at: Duration,
    /// Admitted requests not yet released.
    pub in_flight: u64,
    /// Of those, the non-urgent requests admitted on their floor above the ceiling.
    pub floor_in_flight: u64,
    /// Of those, the urgent requests counted: with a learned ceiling, those admitted while at
    /// least half the working level was in flight (where urgent requests get room of their own).
    pub urgent_in_flight: u64,
    /// Requests waiting for a token.
    pub waiters: u64,
    /// Declared memory costs ([`crate::Request::with_cost`]) of the requests in flight, bytes.
    pub declared_bytes: u64,
    /// Trimmed mean of the handler latency of the last `window` timed calls; `None` until
    /// `min_samples` exist. Token waits are not part of it (see `mean_wait`).
    #[serde(serialize_with = "optional_seconds")]
    pub trimmed_mean: Option<Duration>,
    /// How many latencies the trimmed mean was taken over.
    pub latency_samples: usize,
    /// Median handler latency over the last 5 to 10 seconds.
    #[serde(serialize_with = "optional_seconds")]
    pub p50: Option<Duration>,
    /// 99th-percentile handler latency over the last 5 to 10 seconds.
    #[serde(serialize_with = "optional_seconds")]
    pub p99: Option<Duration>,
    /// Little's law: in-flight ÷ trimmed-mean latency, requests per second.
    pub little_qps: Option<f64>,
    /// Measured completions per second over the last tick.
    pub completion_rate: f64,
    /// Requests per second that asked over the last tick, counted when they asked: admitted,
    /// refused (at a hard ceiling or by a token bucket), given up, or waiting still. The demand
    /// the switch compares with `max_qps` before it turns off, and with a learned capacity before
    /// it turns on.
    pub demand_rate: f64,
    /// Mean time admitted requests waited for their token over the last tick, if any waited.
    #[serde(serialize_with = "optional_seconds")]
    pub mean_wait: Option<Duration>,
    /// Memory used ÷ memory limit, or `None` when the probe cannot read it (the memory ceiling is then open).
    pub memory_ratio: Option<f64>,
    /// The switch.
    pub switch: SwitchStatus,
    /// How many times the switch has turned on or off since the gate was built.
    pub switch_flips: u64,
    /// Everything counted since the gate was built.
    pub counters: Counters,
    /// What the gate has learned of the service's capacity.
    pub learned: Learned,
    /// The limits in force: the config's fixed values, or the learned ones within their bounds.
    pub limits: Limits,
}

/// The limits in force at a snapshot: fixed in the config, or learned.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Limits {
    /// In-flight threshold of the switch (`max_running`).
    pub max_running: u64,
    /// Latency threshold of the switch (`max_avg_latency`).
    #[serde(serialize_with = "seconds")]
    pub max_avg_latency: Duration,
    /// Rate of the whole gate while the switch is on, requests per second: `max_qps`, or with a
    /// learned `max_qps` twice the learned capacity (the switch compares demand with the
    /// capacity itself, [`Learned::capacity`]).
    pub max_qps: f64,
    /// Hard in-flight ceiling (`max_in_flight`); urgent requests may use all of it.
    pub max_in_flight: u64,
    /// Non-urgent requests admitted on their floor (`non_urgent_qps`) may go this far above
    /// `max_in_flight`: room for the floor's own count in flight.
    pub floor_slots: u64,
    /// How many requests on the non-urgent floor urgent requests do not count against
    /// `max_in_flight`: the floor's slots (room for its bursts) times the share of the working
    /// level urgent demand leaves (0 once urgent demand alone fills it, or with a fixed
    /// `max_in_flight`). So the floor takes its slots beside the urgent headroom, not out of it.
    pub floor_credit: u64,
    /// In-flight level up to which requests enter without being classified: the ceiling less the
    /// share kept for urgent requests, and below the soft memory mark; 0 while urgent demand alone
    /// fills a learned ceiling (non-urgent requests then get only their floor).
    pub shared_in_flight: u64,
    /// Longest a request may wait for a token now.
    #[serde(serialize_with = "seconds")]
    pub max_wait: Duration,
    /// In-flight level at which memory is projected to reach `memory_soft_ratio`; `u64::MAX` while
    /// memory is unknown.
    pub memory_soft_in_flight: u64,
    /// In-flight level at which memory is projected to reach `max_memory_ratio`; `u64::MAX` while
    /// memory is unknown.
    pub memory_hard_in_flight: u64,
    /// Declared bytes in flight at which requests with a cost are refused: `max_memory_ratio` of
    /// the limit less the memory the latest reading holds besides declared costs; `u64::MAX`
    /// while the limit is unknown.
    pub memory_declared_room: u64,
}

/// A duration as seconds, for the serialized snapshot.
pub(crate) fn seconds<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// An optional duration as seconds (or none), for the serialized snapshot.
pub(crate) fn optional_seconds<S: Serializer>(
    d: &Option<Duration>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_some(&d.as_secs_f64()),
        None => s.serialize_none(),
    }
}
