//! Scenarios: the backend, the clients and the phases of traffic a simulation runs.
//!
//! A scenario is a TOML document; `config/scenarios/*.toml` are the built-in ones (embedded in the
//! binary, see [`Scenario::builtin`]). Every key is checked: an unknown key, a value of the wrong type
//! or out of range is a [`ScenarioError`] that names the key (`backend.sigma`, `phase[2].load`;
//! phases are numbered from 1).
//!
//! ```toml
//! name = "flash-crowd"
//! seed = 1                      # arrivals, urgency flags and service times are drawn from it
//!
//! [backend]
//! workers = 64                  # W: requests served at once
//! service_time = "20ms"         # S: mean service time, so capacity C = W / S = 3200 rps
//! distribution = "exponential"  # constant | exponential | lognormal (sigma) | bimodal (slow_share, slow_factor)
//! congestion = 0.1              # γ: past W in flight, service slows to S·(1 + γ·(in_flight − W)/W)
//! memory_base = "1GiB"          # memory = base + payload of every request in flight (in service or queued)
//! memory_per_request = "4MiB"
//! memory_limit = "2GiB"
//! heavy_share = 0.05            # share of requests whose payload is heavy_factor times bigger
//! heavy_factor = 20
//!
//! [clients]
//! arrivals = "poisson"          # poisson | uniform (evenly spaced, for hand-checked tests)
//! timeout = "1s"                # after this the answer is worthless
//! slo = "100ms"                 # latency objective (reported)
//! urgent_share = 0.3            # default share of urgent requests
//! [clients.retry]
//! mode = "backoff"              # none | immediate | backoff
//! max = 3                       # attempts per logical request, the first included
//! base = "100ms"                # backoff: base · 2^(attempt − 1), less up to `jitter` of it at random
//! jitter = 0.5
//! honour_retry_after = true     # wait at least the strategy's retry_after
//!
//! [[phase]]
//! duration = "10s"
//! load = 0.6                    # offered load as a multiple of capacity
//! [[phase]]
//! duration = "30s"
//! urgent_load = 0.3             # or per class: urgent and non-urgent loads
//! non_urgent_load = 4.7
//! service_factor = 1.0          # the backend's service time is multiplied by this during the phase
//!
//! [gate]                        # overlaid key by key on the base gate configuration
//! max_qps = 3200
//! [sampler]
//! tick = "50ms"
//! [baselines]
//! token_bucket_rate = 3200      # default C
//! token_bucket_burst = "100ms"  # default 100 ms worth of the rate
//! concurrency_limit = 64        # default W
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use toml::Table;

use super::reader::TableReader;
use crate::config::{Config, ConfigError};

/// The built-in scenarios: name and TOML text.
const BUILTINS: [(&str, &str); 9] = [
    (
        "flash-crowd",
        include_str!("../../config/scenarios/flash-crowd.toml"),
    ),
    ("sweep", include_str!("../../config/scenarios/sweep.toml")),
    (
        "slow-backend",
        include_str!("../../config/scenarios/slow-backend.toml"),
    ),
    (
        "priority-flood",
        include_str!("../../config/scenarios/priority-flood.toml"),
    ),
    (
        "urgent-overload",
        include_str!("../../config/scenarios/urgent-overload.toml"),
    ),
    ("hover", include_str!("../../config/scenarios/hover.toml")),
    (
        "memory-pressure",
        include_str!("../../config/scenarios/memory-pressure.toml"),
    ),
    (
        "retry-storm",
        include_str!("../../config/scenarios/retry-storm.toml"),
    ),
    (
        "heavy-tail",
        include_str!("../../config/scenarios/heavy-tail.toml"),
    ),
];

/// The names of the built-in scenarios, the default (`flash-crowd`) first.
const BUILTIN_NAMES: [&str; 9] = [
    "flash-crowd",
    "sweep",
    "slow-backend",
    "priority-flood",
    "urgent-overload",
    "hover",
    "memory-pressure",
    "retry-storm",
    "heavy-tail",
];

/// Longest scenario accepted (the sum of its phases).
const MAX_TOTAL: Duration = Duration::from_secs(6 * 3600);
/// Most requests a scenario may offer (a few minutes of simulation per strategy in release mode).
const MAX_REQUESTS: f64 = 5e8;

/// Why a scenario could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("cannot read scenario file `{}`: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// Neither a readable file nor a built-in scenario.
    #[error(
        "no scenario file `{name}` and no built-in scenario of that name (built-ins: {builtins})"
    )]
    NotFound {
        /// What was asked for.
        name: String,
        /// The built-in names, comma-separated.
        builtins: String,
    },
    /// The text is not TOML.
    #[error("scenario is not valid TOML: {0}")]
    Syntax(String),
    /// A key nobody expects (probably misspelt).
    #[error("unknown key `{key}` (expected one of: {expected}){suggestion}")]
    UnknownKey {
        /// The dotted path of the key.
        key: String,
        /// The keys its table accepts, comma-separated.
        expected: String,
        /// "; did you mean `x`?" when a close match exists, else empty.
        suggestion: String,
    },
    /// A missing, mistyped or out-of-range value.
    #[error("`{key}`: {message}")]
    Invalid {
        /// The dotted path of the key.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// The `[gate]` or `[sampler]` table, overlaid on the default configuration, is not a valid gate
    /// configuration (the error names the key, e.g. `gate.max_qps`).
    #[error("scenario's gate configuration: {0}")]
    Gate(#[source] ConfigError),
}

impl ScenarioError {
    /// The dotted path of the offending key, when the error is about one.
    pub fn key(&self) -> Option<&str> {
        match self {
            ScenarioError::UnknownKey { key, .. } | ScenarioError::Invalid { key, .. } => Some(key),
            ScenarioError::Gate(ConfigError::Syntax { key, .. }) => key.as_deref(),
            ScenarioError::Gate(e) => e.violations().first().map(|v| v.key.as_str()),
            _ => None,
        }
    }
}

/// A complete scenario: what the backend is, how clients behave, and the traffic phase by phase.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// `name`: shown in reports.
    pub name: String,
    /// `seed` (default 1): arrivals, urgency flags, payloads and service-time draws come from it, the
    /// same for every strategy.
    pub seed: u64,
    /// `[backend]`.
    pub backend: Backend,
    /// `[clients]`.
    pub clients: Clients,
    /// `[[phase]]`, in order; at least one.
    pub phases: Vec<Phase>,
    /// `[gate]`, overlaid key by key on the base configuration given to [`super::run`].
    pub gate: Table,
    /// `[sampler]`, overlaid the same way.
    pub sampler: Table,
    /// `[baselines]`: the settings of the static strategies.
    pub baselines: Baselines,
}

/// `[backend]`: the modelled server.
#[derive(Debug, Clone, PartialEq)]
pub struct Backend {
    /// `workers` (W): requests served at once; more wait in a FIFO queue.
    pub workers: u32,
    /// `service_time` (S): mean service time at no congestion.
    pub service_time: Duration,
    /// `distribution` (default `exponential`) and its parameters.
    pub distribution: Distribution,
    /// `congestion` (γ, default 0): a request starting service while `in_flight` (in service plus
    /// queued) exceeds W takes S·(1 + γ·(in_flight − W)/W) times its draw.
    pub congestion: f64,
    /// `memory_base` (default 0): memory in use with nothing in flight, bytes.
    pub memory_base: u64,
    /// `memory_per_request` (default 0): payload of one request in flight (in service or queued).
    pub memory_per_request: u64,
    /// `memory_limit` (default 1 GiB): what memory use is compared with.
    pub memory_limit: u64,
    /// `heavy_share` (default 0): share of requests carrying a heavy payload.
    pub heavy_share: f64,
    /// `heavy_factor` (default 1): how many times `memory_per_request` a heavy request carries.
    pub heavy_factor: f64,
}

impl Backend {
    /// Capacity C = W ÷ S, requests per second.
    pub fn capacity(&self) -> f64 {
        f64::from(self.workers) / self.service_time.as_secs_f64()
    }
}

/// The service-time distribution; every one has mean `service_time`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Distribution {
    /// `"constant"`: always S.
    Constant,
    /// `"exponential"`: exponential with mean S.
    Exponential,
    /// `"lognormal"` with `sigma` (default 1.0) of the underlying normal; mean S.
    Lognormal {
        /// σ of ln(service time).
        sigma: f64,
    },
    /// `"bimodal"`: a share `slow_share` (default 0.05) of requests takes `slow_factor` (default 10)
    /// times as long as the others; mean S.
    Bimodal {
        /// Share of slow requests.
        slow_share: f64,
        /// How many times slower they are.
        slow_factor: f64,
    },
}

/// `[clients]`: how requests arrive and how clients give up and retry.
#[derive(Debug, Clone, PartialEq)]
pub struct Clients {
    /// `arrivals` (default `poisson`).
    pub arrivals: Arrivals,
    /// `timeout` (default 1 s): an attempt answered at or after arrival + timeout is worthless; one
    /// still waiting for a token then is abandoned.
    pub timeout: Duration,
    /// `slo` (default 100 ms): the latency objective, reported alongside the figures.
    pub slo: Duration,
    /// `urgent_share` (default 0.3): share of urgent requests in phases that do not set their own.
    pub urgent_share: f64,
    /// `[clients.retry]`.
    pub retry: Retry,
}

/// How arrival times are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrivals {
    /// `"poisson"`: open-loop Poisson process at the phase's rate.
    Poisson,
    /// `"uniform"`: evenly spaced at the phase's rate, from the phase's start; urgent and heavy
    /// requests are spread evenly too (for hand-checked tests).
    Uniform,
}

/// `[clients.retry]`: what a client does when its attempt is refused or times out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Retry {
    /// `mode` (default `none`).
    pub mode: RetryMode,
    /// `max` (default 3): attempts per logical request, the first included.
    pub max_attempts: u32,
    /// `base` (default 100 ms): the first backoff; attempt n+1 waits base·2^(n−1).
    pub base: Duration,
    /// `jitter` (default 0.5): each backoff is reduced by up to this share of it, at random.
    pub jitter: f64,
    /// `honour_retry_after` (default true): wait at least the `retry_after` the strategy gave.
    pub honour_retry_after: bool,
}

/// When a failed attempt is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryMode {
    /// `"none"`: never.
    None,
    /// `"immediate"`: at once (a retry storm).
    Immediate,
    /// `"backoff"`: after an exponential backoff with jitter.
    Backoff,
}

/// One `[[phase]]`: a stretch of steady offered load.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Phase {
    /// `duration`.
    pub duration: Duration,
    /// Offered load as a multiple of C: `load`, or `urgent_load + non_urgent_load`.
    pub load: f64,
    /// Share of urgent requests: `urgent_share` (default: the clients'), or
    /// `urgent_load ÷ (urgent_load + non_urgent_load)`.
    pub urgent_share: f64,
    /// `service_factor` (default 1): the backend's service times are multiplied by it for requests
    /// starting service during the phase, so its capacity is C ÷ service_factor.
    pub service_factor: f64,
}

impl Phase {
    /// The load relative to what the backend can serve during the phase: `load × service_factor`.
    /// Phases where it is above 1 are overload (reaction, recovery); those where it is at least 1
    /// count for the goodput.
    pub fn effective_load(&self) -> f64 {
        self.load * self.service_factor
    }
}

/// `[baselines]`: settings of the static strategies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Baselines {
    /// `token_bucket_rate`: tokens per second of the token-bucket strategy; `None` means C.
    pub token_bucket_rate: Option<f64>,
    /// `token_bucket_burst` (default 100 ms): how much of its rate the bucket banks.
    pub token_bucket_burst: Duration,
    /// `concurrency_limit`: in-flight cap of the concurrency-limit strategy; `None` means W.
    pub concurrency_limit: Option<u64>,
}

impl Default for Scenario {
    /// The `flash-crowd` built-in.
    fn default() -> Self {
        Scenario::builtin("flash-crowd").expect("the built-in flash-crowd scenario parses (tested)")
    }
}

impl Scenario {
    /// Parses a scenario from TOML text.
    pub fn from_toml_str(text: &str) -> Result<Scenario, ScenarioError> {
        let table: Table = text.parse().map_err(|e: toml::de::Error| {
            ScenarioError::Syntax(e.to_string().trim_end().to_owned())
        })?;
        parse(table)
    }

    /// Reads and parses a scenario file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Scenario, ScenarioError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_toml_str(&text)
    }

    /// A built-in scenario by name (see [`Scenario::builtin_names`]).
    pub fn builtin(name: &str) -> Option<Scenario> {
        Self::from_toml_str(Self::builtin_toml(name)?).ok()
    }

    /// The TOML text of a built-in scenario.
    pub fn builtin_toml(name: &str) -> Option<&'static str> {
        BUILTINS.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
    }

    /// The names of the built-in scenarios, the default first.
    pub fn builtin_names() -> &'static [&'static str] {
        &BUILTIN_NAMES
    }

    /// Loads `spec`: a scenario file if such a file exists, else a built-in scenario of that name.
    pub fn load(spec: &str) -> Result<Scenario, ScenarioError> {
        let path = Path::new(spec);
        if path.is_file() {
            return Self::from_file(path);
        }
        match Self::builtin_toml(spec) {
            Some(text) => Self::from_toml_str(text),
            None => Err(ScenarioError::NotFound {
                name: spec.to_owned(),
                builtins: BUILTIN_NAMES.join(", "),
            }),
        }
    }

    /// Backend capacity C = W ÷ S, requests per second.
    pub fn capacity(&self) -> f64 {
        self.backend.capacity()
    }

    /// The in-flight cap the `concurrency-limit` strategy runs with: `[baselines]
    /// concurrency_limit`, else W.
    pub fn concurrency_limit(&self) -> u64 {
        self.baselines
            .concurrency_limit
            .unwrap_or(u64::from(self.backend.workers))
    }

    /// Total length of the phases.
    pub fn duration(&self) -> Duration {
        self.phases.iter().map(|p| p.duration).sum()
    }

    /// The gate configuration the `sluicegate` strategy runs with: `base` with this scenario's
    /// `[gate]` and `[sampler]` tables overlaid key by key, validated.
    pub fn gate_config(&self, base: &Config) -> Result<Config, ConfigError> {
        overlay(base, &self.gate, &self.sampler)
    }
}

/// `base` with `gate` and `sampler` keys replacing its own, validated.
fn overlay(base: &Config, gate: &Table, sampler: &Table) -> Result<Config, ConfigError> {
    if gate.is_empty() && sampler.is_empty() {
        base.validate()?;
        return Ok(base.clone());
    }
    let mut document: Table = base
        .to_toml_string()
        .parse()
        .map_err(|e: toml::de::Error| ConfigError::Syntax {
            message: format!("the base configuration could not be written as TOML: {e}"),
            key: None,
            line: None,
            column: None,
        })?;
    for (name, keys) in [("gate", gate), ("sampler", sampler)] {
        let entry = document
            .entry(name)
            .or_insert_with(|| toml::Value::Table(Table::new()));
        if let toml::Value::Table(table) = entry {
            for (k, v) in keys {
                table.insert(k.clone(), v.clone());
            }
        }
    }
    let text = toml::to_string(&document).map_err(|e| ConfigError::Syntax {
        message: format!("the overlaid configuration could not be written as TOML: {e}"),
        key: None,
        line: None,
        column: None,
    })?;
    Config::from_toml_str(&text)
}

fn parse(table: Table) -> Result<Scenario, ScenarioError> {
    let mut top = TableReader::new("", table);
    top.only(&[
        "name",
        "seed",
        "backend",
        "clients",
        "phase",
        "gate",
        "sampler",
        "baselines",
    ])?;
    let name = top
        .string("name")?
        .ok_or_else(|| top.invalid("name", "missing: every scenario has a name"))?;
    let seed = top.integer("seed", 0, u64::MAX)?.unwrap_or(1);

    let backend = match top.table("backend")? {
        Some(r) => parse_backend(r)?,
        None => return Err(top.invalid("backend", "missing: the [backend] table is required")),
    };
    let clients = match top.table("clients")? {
        Some(r) => parse_clients(r)?,
        None => parse_clients(TableReader::new("clients", Table::new()))?,
    };
    let phase_readers = top.tables("phase")?;
    if phase_readers.is_empty() {
        return Err(top.invalid(
            "phase",
            "missing: at least one [[phase]] with a duration and a load is required",
        ));
    }
    let mut phases = Vec::with_capacity(phase_readers.len());
    for r in phase_readers {
        phases.push(parse_phase(r, clients.urgent_share)?);
    }
    let total: Duration = phases.iter().map(|p| p.duration).sum();
    if total > MAX_TOTAL {
        return Err(top.invalid("phase", "the phases last more than 6 hours in total"));
    }
    let requests: f64 = phases
        .iter()
        .map(|p| p.load * backend.capacity() * p.duration.as_secs_f64())
        .sum();
    if requests.is_nan() || requests > MAX_REQUESTS {
        return Err(top.invalid(
            "phase",
            format!(
                "the phases would offer about {requests:.3e} requests, more than the {MAX_REQUESTS:.0e} \
                 a simulation accepts: shorten them or lower the load or the capacity"
            ),
        ));
    }
    let gate = top.raw_table("gate")?.unwrap_or_default();
    let sampler = top.raw_table("sampler")?.unwrap_or_default();
    let baselines = match top.table("baselines")? {
        Some(r) => parse_baselines(r)?,
        None => parse_baselines(TableReader::new("baselines", Table::new()))?,
    };
    top.finish()?;
    overlay(&Config::default(), &gate, &sampler).map_err(ScenarioError::Gate)?;
    Ok(Scenario {
        name,
        seed,
        backend,
        clients,
        phases,
        gate,
        sampler,
        baselines,
    })
}

fn parse_backend(mut r: TableReader) -> Result<Backend, ScenarioError> {
    r.only(&[
        "workers",
        "service_time",
        "distribution",
        "sigma",
        "slow_share",
        "slow_factor",
        "congestion",
        "memory_base",
        "memory_per_request",
        "memory_limit",
        "heavy_share",
        "heavy_factor",
    ])?;
    let workers = r
        .integer("workers", 1, 1_000_000)?
        .ok_or_else(|| r.invalid("workers", "missing: the number of workers is required"))?;
    let service_time = r.positive_duration("service_time", None)?;
    let kind = r.string("distribution")?;
    let sigma = r.positive("sigma", 10.0)?;
    let slow_share = r.number("slow_share")?;
    let slow_factor = r.number("slow_factor")?;
    let distribution = match kind.as_deref().unwrap_or("exponential") {
        "constant" => Distribution::Constant,
        "exponential" => Distribution::Exponential,
        "lognormal" => Distribution::Lognormal {
            sigma: sigma.unwrap_or(1.0),
        },
        "bimodal" => {
            let slow_share = slow_share.unwrap_or(0.05);
            if !(slow_share > 0.0 && slow_share < 1.0) {
                return Err(r.invalid(
                    "slow_share",
                    format!("{slow_share} must be greater than 0 and less than 1"),
                ));
            }
            let slow_factor = slow_factor.unwrap_or(10.0);
            if !(1.0..=1000.0).contains(&slow_factor) {
                return Err(r.invalid(
                    "slow_factor",
                    format!("{slow_factor} must be between 1 and 1000"),
                ));
            }
            Distribution::Bimodal {
                slow_share,
                slow_factor,
            }
        }
        other => {
            return Err(r.invalid(
                "distribution",
                format!(
                    "unknown distribution {other:?} (expected \"constant\", \"exponential\", \
                     \"lognormal\" or \"bimodal\")"
                ),
            ))
        }
    };
    if sigma.is_some() && !matches!(distribution, Distribution::Lognormal { .. }) {
        return Err(r.invalid("sigma", "only applies to distribution = \"lognormal\""));
    }
    for (key, given) in [("slow_share", slow_share), ("slow_factor", slow_factor)] {
        if given.is_some() && !matches!(distribution, Distribution::Bimodal { .. }) {
            return Err(r.invalid(key, "only applies to distribution = \"bimodal\""));
        }
    }
    let congestion = r.number_in("congestion", 0.0, 0.0, 1000.0)?;
    let memory_base = r.bytes("memory_base")?.unwrap_or(0);
    let memory_per_request = r.bytes("memory_per_request")?.unwrap_or(0);
    let memory_limit = r.bytes("memory_limit")?.unwrap_or(1 << 30);
    if memory_limit == 0 {
        return Err(r.invalid("memory_limit", "must be greater than zero"));
    }
    let heavy_share = r.number_in("heavy_share", 0.0, 0.0, 1.0)?;
    let heavy_factor = r.positive("heavy_factor", 1e6)?.unwrap_or(1.0);
    r.finish()?;
    Ok(Backend {
        workers: u32::try_from(workers).unwrap_or(u32::MAX),
        service_time,
        distribution,
        congestion,
        memory_base,
        memory_per_request,
        memory_limit,
        heavy_share,
        heavy_factor,
    })
}

fn parse_clients(mut r: TableReader) -> Result<Clients, ScenarioError> {
    r.only(&["arrivals", "timeout", "slo", "urgent_share", "retry"])?;
    let arrivals = match r.string("arrivals")?.as_deref().unwrap_or("poisson") {
        "poisson" => Arrivals::Poisson,
        "uniform" => Arrivals::Uniform,
        other => {
            return Err(r.invalid(
                "arrivals",
                format!("unknown arrival process {other:?} (expected \"poisson\" or \"uniform\")"),
            ))
        }
    };
    let timeout = r.positive_duration("timeout", Some(Duration::from_secs(1)))?;
    let slo = r.positive_duration("slo", Some(Duration::from_millis(100)))?;
    let urgent_share = r.number_in("urgent_share", 0.3, 0.0, 1.0)?;
    let retry = match r.table("retry")? {
        Some(t) => parse_retry(t)?,
        None => parse_retry(TableReader::new(r.key("retry"), Table::new()))?,
    };
    r.finish()?;
    Ok(Clients {
        arrivals,
        timeout,
        slo,
        urgent_share,
        retry,
    })
}

fn parse_retry(mut r: TableReader) -> Result<Retry, ScenarioError> {
    r.only(&["mode", "max", "base", "jitter", "honour_retry_after"])?;
    let mode = match r.string("mode")?.as_deref().unwrap_or("none") {
        "none" => RetryMode::None,
        "immediate" => RetryMode::Immediate,
        "backoff" => RetryMode::Backoff,
        other => {
            return Err(r.invalid(
                "mode",
                format!(
                "unknown retry mode {other:?} (expected \"none\", \"immediate\" or \"backoff\")"
            ),
            ))
        }
    };
    let max_attempts = r.integer("max", 1, 100)?.unwrap_or(3);
    let base = r.duration("base")?.unwrap_or(Duration::from_millis(100));
    if base > Duration::from_secs(3600) {
        return Err(r.invalid("base", "at most an hour"));
    }
    let jitter = r.number_in("jitter", 0.5, 0.0, 1.0)?;
    let honour_retry_after = r.boolean("honour_retry_after")?.unwrap_or(true);
    r.finish()?;
    Ok(Retry {
        mode,
        max_attempts: u32::try_from(max_attempts).unwrap_or(100),
        base,
        jitter,
        honour_retry_after,
    })
}

fn parse_phase(mut r: TableReader, default_share: f64) -> Result<Phase, ScenarioError> {
    const MAX_LOAD: f64 = 1000.0;
    r.only(&[
        "duration",
        "load",
        "urgent_share",
        "urgent_load",
        "non_urgent_load",
        "service_factor",
    ])?;
    let duration = r.positive_duration("duration", None)?;
    let per_class = r.has("urgent_load") || r.has("non_urgent_load");
    let load = r.number("load")?;
    let share = r.number("urgent_share")?;
    let urgent = r.number("urgent_load")?;
    let non_urgent = r.number("non_urgent_load")?;
    let service_factor = r.positive("service_factor", MAX_LOAD)?.unwrap_or(1.0);
    let (load, urgent_share) = if per_class {
        if load.is_some() || share.is_some() {
            let key = if load.is_some() {
                "load"
            } else {
                "urgent_share"
            };
            return Err(r.invalid(
                key,
                "give either `load` (and `urgent_share`) or `urgent_load` and `non_urgent_load`, not both",
            ));
        }
        let u = urgent.unwrap_or(0.0);
        let n = non_urgent.unwrap_or(0.0);
        for (key, v) in [("urgent_load", u), ("non_urgent_load", n)] {
            if !(0.0..=MAX_LOAD).contains(&v) {
                return Err(r.invalid(key, format!("{v} must be between 0 and {MAX_LOAD}")));
            }
        }
        if u + n <= 0.0 {
            return Err(r.invalid(
                "urgent_load",
                "urgent_load + non_urgent_load must be greater than 0",
            ));
        }
        (u + n, u / (u + n))
    } else {
        let load = load.ok_or_else(|| {
            r.invalid(
                "load",
                "missing: give `load` (a multiple of capacity) or `urgent_load` and `non_urgent_load`",
            )
        })?;
        if !(load > 0.0 && load <= MAX_LOAD) {
            return Err(r.invalid(
                "load",
                format!("{load} must be greater than 0 and at most {MAX_LOAD}"),
            ));
        }
        let share = share.unwrap_or(default_share);
        if !(0.0..=1.0).contains(&share) {
            return Err(r.invalid("urgent_share", format!("{share} must be between 0 and 1")));
        }
        (load, share)
    };
    r.finish()?;
    Ok(Phase {
        duration,
        load,
        urgent_share,
        service_factor,
    })
}

fn parse_baselines(mut r: TableReader) -> Result<Baselines, ScenarioError> {
    r.only(&[
        "token_bucket_rate",
        "token_bucket_burst",
        "concurrency_limit",
    ])?;
    let token_bucket_rate = r.positive("token_bucket_rate", 1e9)?;
    let token_bucket_burst =
        r.positive_duration("token_bucket_burst", Some(Duration::from_millis(100)))?;
    let concurrency_limit = r.integer("concurrency_limit", 1, 1 << 32)?;
    r.finish()?;
    Ok(Baselines {
        token_bucket_rate,
        token_bucket_burst,
        concurrency_limit,
    })
}
