//! A deterministic overload simulator: the real [`Gate`](crate::Gate) against a modelled backend and
//! modelled clients, in virtual time, next to no protection, the static limits in use today and two
//! published adaptive limiters.
//!
//! # The model
//! * **Backend** ([`Backend`]): W workers, a service-time distribution with mean S, so capacity
//!   C = W ÷ S. Requests beyond W wait in a FIFO queue. Past W in flight (in service plus queued) a
//!   request starting service takes `S·draw·(1 + γ·(in_flight − W)/W)` (`congestion` γ), so an
//!   unprotected backend *loses* throughput as it drowns. Memory is a base plus a payload per request
//!   in flight, against a limit; it feeds the gate's memory probe. A queued request is served even if
//!   its client has given up: that is wasted work.
//! * **Clients** ([`Clients`], [`Phase`]): open-loop arrivals (Poisson, or evenly spaced for
//!   hand-checked tests) phase by phase, each phase with a load (a multiple of C) and a share of
//!   urgent requests. A client gives up on an attempt `timeout` after sending it: an attempt still
//!   waiting for a token is abandoned (the ticket dropped); one in the backend keeps using it. Clients
//!   may retry ([`Retry`]); a retry is a new attempt of the same logical request.
//! * **Strategies** ([`Strategy`], [`STRATEGIES`], run in this order):
//!   * `unprotected` ([`Unprotected`]): everything goes to the backend.
//!   * `token-bucket` ([`TokenBucket`]): one bucket at a fixed rate, default C with 100 ms of burst,
//!     refusing when empty.
//!   * `concurrency-limit` ([`ConcurrencyLimit`]): a static in-flight cap, default W.
//!   * `gradient2` ([`Gradient2`]): Netflix concurrency-limits' adaptive `Gradient2Limit` with the
//!     library's defaults ([`peers`]).
//!   * `bbr` ([`Bbr`]): the BBR check of Sentinel's adaptive system protection as go-kratos
//!     implements it, with kratos' defaults and worker utilisation standing in for CPU ([`peers`]).
//!   * `sluicegate` ([`Sluicegate`]): the real `Gate<ManualClock>` with the base configuration
//!     overlaid with the scenario's `[gate]` and `[sampler]` tables.
//!   * `sluicegate-auto`: the real gate built from [`Config::default()`] alone, the shipped
//!     defaults, with nothing from the scenario or the base configuration ([`run_gate`]).
//!
//! Every strategy runs on the same arrivals: the same seed gives the same arrival times, urgency
//! flags and payloads, whatever the strategy does, and the same service times in the order the
//! workers start (the k-th request any strategy starts takes as long as every other's k-th): two
//! strategies that keep the workers busy do the same work, so a difference between them is one
//! of strategies, not of the draws each happened to admit. A run never sleeps, and the
//! same scenario and seed give the same [`Report`], byte for byte once serialised.
//!
//! # The figures ([`StrategyReport`])
//! A run lasts the phases plus one client timeout (rounded up to a 100 ms slice), so that every
//! attempt sent during the phases is answered or given up; new requests arrive only during the
//! phases, retries may come later. An attempt is *answered in time* when the backend answers it
//! strictly before its arrival + the client timeout. A phase's load is taken relative to what the
//! backend can serve in it: `load × service_factor` ([`Phase::effective_load`]).
//! * `goodput_ratio`: attempts answered in time whose answer came during a phase with load ≥ 1,
//!   divided by C × the total duration of those phases (0 if there are none).
//! * `urgent_success`, `non_urgent_success`: logical requests of the class answered in time (by any
//!   attempt) ÷ logical requests of the class that arrived (1 when none arrived).
//! * `p50_ms`, `p99_ms`: quantiles (HdrHistogram, 3 significant digits) of arrival-to-answer time of
//!   the attempts answered in time, token waits included.
//! * `wasted_work`: backend busy time spent on attempts answered after their client gave up ÷ all
//!   busy time of services completed during the run.
//! * `switch_flips`: what the strategy reports ([`Strategy::switch_flips`]).
//! * `reaction_ms`: from the start of the first phase with load > 1 to the strategy's first refusal
//!   or wait at or after it; `None` without such a phase or act.
//! * `recovery_ms`: from the end of the last phase with load > 1 until the later of the strategy's
//!   last refusal and the first end of a 100 ms slice at which its switch was seen off for good;
//!   `None` without such a phase, if the strategy never acted (see `reaction_ms`), or if it still
//!   refused or had its switch on in the run's last slice.
//! * `peak_memory_ratio`: the highest backend memory use ÷ memory limit.
//! * `timeline`: 100 ms slices ([`TimelineSample`]); `load` is the effective load at the slice's
//!   start (0 after the phases), `in_flight`, `waiting`, `switch_on` and `memory_ratio` are read at
//!   its end; `late` counts the answers slower than the SLO, so that slices pool into windows.
//!
//! [`grid`] runs a grid of backends (200 to 50,000 rps, 1 to 500 ms) and checks the bars of a
//! gate that learns capacity by itself; [`family`] draws services and floods at random over much
//! wider ranges, seeded, and checks a strategy's bars draw by draw.
//!
//! ```
//! use sluicegate::sim::{run, Scenario};
//! use sluicegate::Config;
//!
//! let scenario = Scenario::from_toml_str(r#"
//!     name = "tiny"
//!     [backend]
//!     workers = 4
//!     service_time = "10ms"
//!     [[phase]]
//!     duration = "1s"
//!     load = 0.5
//! "#)?;
//! let report = run(&scenario, &Config::default(), &mut |_| {})?;
//! assert_eq!(report.strategies.len(), 7);
//! assert!(report.strategy("unprotected").is_some_and(|s| s.urgent_success > 0.9));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod cluster;
mod engine;
pub mod family;
pub mod grid;
pub mod metrics;
pub mod peers;
mod reader;
pub mod render;
pub mod scenario;
pub mod strategy;

pub use metrics::{Report, StrategyReport, TimelineSample, SLICE_MS};
pub use peers::{Bbr, Gradient2};
pub use scenario::{
    Arrivals, Backend, Baselines, Clients, Distribution, Phase, Retry, RetryMode, Scenario,
    ScenarioError,
};
pub use strategy::{
    simulated_gate, AttemptId, BackendView, ConcurrencyLimit, Offer, SharedMemory, Sluicegate,
    Strategy, TokenBucket, Unprotected, Watch, Watched,
};

use crate::clock::ManualClock;
use crate::config::{Config, ConfigError};

/// The names of the built-in strategies, in the order [`run`] runs them.
pub const STRATEGIES: [&str; 7] = [
    "unprotected",
    "token-bucket",
    "concurrency-limit",
    "gradient2",
    "bbr",
    "sluicegate",
    "sluicegate-auto",
];

/// Why a simulation could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// A gate configuration is not valid: the base configuration with the scenario's `[gate]` and
    /// `[sampler]` overlaid (`sluicegate`), or the shipped defaults (`sluicegate-auto`).
    #[error("scenario `{scenario}`: invalid gate configuration: {source}")]
    Config {
        /// The scenario's name.
        scenario: String,
        /// What is wrong, naming the key.
        #[source]
        source: ConfigError,
    },
}

/// Runs every built-in strategy ([`STRATEGIES`]) on `scenario` with its own seed. `base` is the gate
/// configuration the scenario's `[gate]` and `[sampler]` tables are overlaid on for `sluicegate`
/// (`sluicegate-auto` ignores both and uses [`Config::default()`]). `progress` receives the fraction
/// done, 0 to 1, about 350 times in all.
pub fn run(
    scenario: &Scenario,
    base: &Config,
    progress: &mut dyn FnMut(f64),
) -> Result<Report, SimError> {
    run_with_seed(scenario, base, scenario.seed, progress)
}

/// [`run`] with another seed than the scenario's (the command line's `--seed`).
pub fn run_with_seed(
    scenario: &Scenario,
    base: &Config,
    seed: u64,
    progress: &mut dyn FnMut(f64),
) -> Result<Report, SimError> {
    let config = scenario
        .gate_config(base)
        .map_err(|source| SimError::Config {
            scenario: scenario.name.clone(),
            source,
        })?;
    let n = STRATEGIES.len() as f64;
    let mut strategies = Vec::with_capacity(STRATEGIES.len());
    for (i, name) in STRATEGIES.iter().enumerate() {
        let mut part = |f: f64| progress((i as f64 + f.clamp(0.0, 1.0)) / n);
        let report = match *name {
            "unprotected" => run_strategy(scenario, seed, name, &mut Unprotected, &mut part),
            "token-bucket" => {
                let rate = scenario
                    .baselines
                    .token_bucket_rate
                    .unwrap_or_else(|| scenario.capacity());
                let mut s = TokenBucket::new(rate, scenario.baselines.token_bucket_burst);
                run_strategy(scenario, seed, name, &mut s, &mut part)
            }
            "concurrency-limit" => {
                let mut s = ConcurrencyLimit::new(scenario.concurrency_limit());
                run_strategy(scenario, seed, name, &mut s, &mut part)
            }
            "gradient2" => run_strategy(scenario, seed, name, &mut Gradient2::new(), &mut part),
            "bbr" => run_strategy(scenario, seed, name, &mut Bbr::new(), &mut part),
            "sluicegate-auto" => run_gate(scenario, seed, name, Config::default(), &mut part)
                .map_err(|source| SimError::Config {
                    scenario: scenario.name.clone(),
                    source,
                })?,
            _ => run_gate(scenario, seed, name, config.clone(), &mut part).map_err(|source| {
                SimError::Config {
                    scenario: scenario.name.clone(),
                    source,
                }
            })?,
        };
        strategies.push(report);
    }
    Ok(Report {
        scenario: scenario.name.clone(),
        seed,
        capacity_rps: scenario.capacity(),
        slo_ms: scenario.clients.slo.as_secs_f64() * 1e3,
        strategies,
    })
}

/// Runs the real gate, built from `config` on a manual clock, on `scenario` with `seed`, reported as
/// `sluicegate` ([`run_gate`] with that name).
pub fn run_sluicegate(
    scenario: &Scenario,
    seed: u64,
    config: Config,
    progress: &mut dyn FnMut(f64),
) -> Result<StrategyReport, ConfigError> {
    run_gate(scenario, seed, "sluicegate", config, progress)
}

/// Runs the real gate, built from `config` on a manual clock, on `scenario` with `seed`, reporting it
/// as `name`. `config` is used as given: the scenario's `[gate]` and `[sampler]` tables are not
/// overlaid (see [`Scenario::gate_config`] for that). Fails if `config` is not valid.
pub fn run_gate(
    scenario: &Scenario,
    seed: u64,
    name: &str,
    config: Config,
    progress: &mut dyn FnMut(f64),
) -> Result<StrategyReport, ConfigError> {
    let clock = ManualClock::new();
    let memory = SharedMemory::new(scenario.backend.memory_base, scenario.backend.memory_limit);
    let gate = simulated_gate(config, &clock, &memory)?;
    let mut strategy = Sluicegate::new(&gate, clock, memory);
    Ok(run_strategy(scenario, seed, name, &mut strategy, progress))
}

/// Runs one strategy (built-in or your own) on `scenario` with `seed`, reporting it as `name`.
/// `progress` receives the fraction of this run done, 0 to 1, about 50 times.
pub fn run_strategy(
    scenario: &Scenario,
    seed: u64,
    name: &str,
    strategy: &mut dyn Strategy,
    progress: &mut dyn FnMut(f64),
) -> StrategyReport {
    engine::Engine::new(scenario, seed).run(name, strategy, progress)
}
