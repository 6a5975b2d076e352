//! One randomly drawn service and its traffic: what [`draw`] picks for a `(seed, index)` and the
//! scenario it becomes ([`Draw::scenario`]).
//!
//! # What it decides, and why
//! The family exists to find the services on which a protection strategy fails, so every range is
//! wide and both of its ends are reachable. Each draw comes from its own generator (PCG, seeded
//! from the family's seed and the draw's index alone), so any draw can be rerun on its own, and a
//! family of 60 draws is the first 60 of a family of 2,000.
//!
//! * **Backend.** W workers, log-uniform in 1–2,000, and a mean service time S, log-uniform in
//!   100 µs–5 s; the pair is drawn again until the capacity C = W ÷ S lies in 1–20,000 requests
//!   per second. Log-uniform because what matters to a gate is the order of magnitude: a backend
//!   of 1 worker and one of 1,000 are different problems, 1,000 and 1,100 are not. The
//!   distribution of service times is constant, exponential, lognormal (σ 0.5–1.5) or bimodal (2–10
//!   % of requests 5–20 times slower), a quarter each; congestion γ is uniform in 0–0.3.
//! * **Memory** is that of `flash-crowd` (512 MiB base, 1 MiB per request in flight, 2 GiB limit),
//!   except that the payload is capped so that twice the workers in flight hold at most 1 GiB: the
//!   family is about workers, not memory, and 2,000 workers at 1 MiB would already be near the
//!   limit at capacity.
//! * **Clients.** Poisson arrivals, no retries, an SLO of 5·S, and a timeout log-uniform in
//!   10·S–100·S: a client that waits ten service times or a hundred.
//! * **Traffic.** An optional warm-up (none in a quarter of the draws: a cold start into the
//!   flood; else 0–20 s, uniform) at 0.3–0.8 C, a flood at 1.1–20 C (log-uniform) and a cool-down
//!   at 0.5 C for max(2 s, 20·S). Urgent requests are a steady share of the traffic, uniform in
//!   0–50 % (exactly 0 in a tenth of the draws), except in 15 % of the draws, an *urgent flood*:
//!   non-urgent traffic stays at its warm-up load (its base) while urgent traffic alone rises to
//!   between 1.2 C and the flood's total. The flood lasts max(3 s, 40·S), shortened if it would
//!   offer more than 400,000 requests (a bound on the cost of a draw), but never below 20·S: a
//!   flood shorter than that would hold too few service times to judge a strategy by. Every phase
//!   is a whole number of 100 ms timeline slices, so that slices never straddle two phases.

use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use toml::Table;

use crate::sim::metrics::SLICE_MS;
use crate::sim::scenario::{
    Arrivals, Backend, Baselines, Clients, Distribution, Phase, Retry, RetryMode, Scenario,
};

/// Fewest workers a draw has.
pub const MIN_WORKERS: u32 = 1;
/// Most workers a draw has.
pub const MAX_WORKERS: u32 = 2_000;
/// Shortest mean service time a draw has.
pub const MIN_SERVICE_TIME: Duration = Duration::from_micros(100);
/// Longest mean service time a draw has.
pub const MAX_SERVICE_TIME: Duration = Duration::from_secs(5);
/// Lowest capacity C = W ÷ S of a draw, requests per second.
pub const MIN_CAPACITY: f64 = 1.0;
/// Highest capacity C of a draw, requests per second.
pub const MAX_CAPACITY: f64 = 20_000.0;
/// Lowest total load of the flood, a multiple of C.
pub const MIN_LOAD: f64 = 1.1;
/// Highest total load of the flood, a multiple of C.
pub const MAX_LOAD: f64 = 20.0;
/// Highest steady share of urgent requests.
pub const MAX_URGENT_SHARE: f64 = 0.5;
/// Share of draws whose steady urgent share is exactly 0.
pub const NO_URGENT_DRAWS: f64 = 0.1;
/// Share of draws with an urgent flood instead of a flood of both classes.
pub const URGENT_FLOOD_DRAWS: f64 = 0.15;
/// Lowest urgent load of an urgent flood, a multiple of C.
pub const MIN_URGENT_FLOOD: f64 = 1.2;
/// Highest congestion γ.
pub const MAX_CONGESTION: f64 = 0.3;
/// The client timeout lies between these multiples of S.
pub const TIMEOUT_IN_SERVICE_TIMES: (f64, f64) = (10.0, 100.0);
/// Share of draws without a warm-up (cold starts into the flood).
pub const COLD_DRAWS: f64 = 0.25;
/// Longest warm-up.
pub const MAX_WARM_UP: Duration = Duration::from_secs(20);
/// The warm-up's load lies between these multiples of C.
pub const WARM_LOAD: (f64, f64) = (0.3, 0.8);
/// Load of the cool-down, a multiple of C.
pub const COOL_LOAD: f64 = 0.5;
/// Most requests a flood is expected to offer (unless 20·S alone offers more).
pub const MAX_FLOOD_ARRIVALS: f64 = 400_000.0;
/// The clients' SLO, in service times.
pub const SLO_IN_SERVICE_TIMES: u32 = 5;

/// Most pairs (W, S) drawn before the capacity is forced into its range (never reached in
/// practice: about half the pairs qualify).
const MAX_TRIES: usize = 1_000;
const TAG_DRAW: u64 = 0x6661_6d69_6c79_6472;
const TAG_SCENARIO: u64 = 0x6661_6d69_6c79_7363;

/// One service of the family and the traffic it receives, drawn by [`draw`]. Durations are in
/// whole nanoseconds, the phases in whole 100 ms slices.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Draw {
    /// The family's seed it was drawn from.
    pub seed: u64,
    /// Its index in the family.
    pub index: usize,
    /// W, 1–2,000.
    pub workers: u32,
    /// S, the mean service time, 100 µs–5 s.
    pub service_time: Duration,
    /// The service-time distribution (mean S).
    pub distribution: Distribution,
    /// γ, 0–0.3.
    pub congestion: f64,
    /// The flood's total offered load (both classes), a multiple of C, 1.1–20.
    pub load: f64,
    /// The steady share of urgent requests (warm-up, cool-down, and the flood unless
    /// `urgent_flood`), 0–0.5.
    pub urgent_share: f64,
    /// Whether the flood is urgent traffic alone: non-urgent traffic stays at its warm-up load.
    pub urgent_flood: bool,
    /// The urgent load during the flood, a multiple of C: `load × urgent_share`, or in an urgent
    /// flood between 1.2 and `load`.
    pub urgent_load: f64,
    /// How long clients wait for an answer, 10·S–100·S.
    pub client_timeout: Duration,
    /// The warm-up before the flood; zero for a cold start.
    pub warm_up: Duration,
    /// The warm-up's load, a multiple of C, 0.3–0.8 (drawn for cold starts too: it is the base of
    /// the non-urgent traffic of an urgent flood).
    pub warm_load: f64,
}

/// SplitMix64's finaliser.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The key of draw `index` of family `seed`, under `tag`.
fn key(seed: u64, index: usize, tag: u64) -> u64 {
    mix(mix(seed ^ tag) ^ index as u64)
}

/// Uniform in `[lo, hi)` (`lo` if the range is empty).
fn uniform(rng: &mut Pcg64, lo: f64, hi: f64) -> f64 {
    let u: f64 = rng.random();
    lo + (hi - lo).max(0.0) * u
}

/// Log-uniform in `[lo, hi)`; both positive.
fn log_uniform(rng: &mut Pcg64, lo: f64, hi: f64) -> f64 {
    uniform(rng, lo.ln(), hi.ln()).exp()
}

/// `d` rounded up to a whole number of timeline slices.
pub fn whole_slices(d: Duration) -> Duration {
    let slices = d.as_millis().div_ceil(u128::from(SLICE_MS));
    Duration::from_millis(
        u64::try_from(slices.saturating_mul(u128::from(SLICE_MS))).unwrap_or(u64::MAX),
    )
}

/// `secs` seconds rounded down to a whole number of timeline slices (zero for a negative or NaN).
fn floor_slices(secs: f64) -> Duration {
    let slice = SLICE_MS as f64 / 1e3;
    let n = (secs / slice).floor();
    if n.is_finite() && n > 0.0 {
        // `as` saturates: a huge figure is a long duration, capped below anyway.
        Duration::from_millis((n as u64).saturating_mul(SLICE_MS))
    } else {
        Duration::ZERO
    }
}

/// The seconds of `d` multiplied by `k`, as a duration (saturating).
fn times(d: Duration, k: f64) -> Duration {
    Duration::try_from_secs_f64(d.as_secs_f64() * k).unwrap_or(Duration::MAX)
}

/// Milliseconds of `d`, saturating.
fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Draws W and S with C in range.
fn backend(rng: &mut Pcg64) -> (u32, Duration) {
    let (lo, hi) = (
        MIN_SERVICE_TIME.as_secs_f64(),
        MAX_SERVICE_TIME.as_secs_f64(),
    );
    let mut pair = (1, Duration::from_millis(1));
    for _ in 0..MAX_TRIES {
        // Log-uniform over the integers 1..=2000: the floor of a log-uniform figure in [1, 2001).
        let w = log_uniform(rng, f64::from(MIN_WORKERS), f64::from(MAX_WORKERS) + 1.0).floor();
        let w = (w as u32).clamp(MIN_WORKERS, MAX_WORKERS);
        let s = Duration::from_nanos((log_uniform(rng, lo, hi) * 1e9).round() as u64)
            .clamp(MIN_SERVICE_TIME, MAX_SERVICE_TIME);
        pair = (w, s);
        let c = f64::from(w) / s.as_secs_f64();
        if (MIN_CAPACITY..=MAX_CAPACITY).contains(&c) {
            return pair;
        }
    }
    // Not reached in practice; keeps W and moves S to the nearest capacity in range.
    let (w, s) = pair;
    let c = (f64::from(w) / s.as_secs_f64()).clamp(MIN_CAPACITY, MAX_CAPACITY);
    (w, Duration::from_secs_f64(f64::from(w) / c))
}

/// A quarter each: constant, exponential, lognormal, bimodal.
fn distribution(rng: &mut Pcg64) -> Distribution {
    match rng.random_range(0..4u32) {
        0 => Distribution::Constant,
        1 => Distribution::Exponential,
        2 => Distribution::Lognormal {
            sigma: uniform(rng, 0.5, 1.5),
        },
        _ => Distribution::Bimodal {
            slow_share: uniform(rng, 0.02, 0.1),
            slow_factor: uniform(rng, 5.0, 20.0),
        },
    }
}

/// Draw `index` of the family of `seed`: the same `(seed, index)` always gives the same draw,
/// whatever else is drawn (see the module documentation for the ranges).
///
/// ```
/// use sluicegate::sim::family::draw;
///
/// let d = draw(1, 7);
/// assert_eq!(d, draw(1, 7));
/// assert!((1.0..=20_000.0).contains(&d.capacity()));
/// assert_eq!(d.scenario().name, "family-1-7");
/// ```
pub fn draw(seed: u64, index: usize) -> Draw {
    let mut rng = Pcg64::seed_from_u64(key(seed, index, TAG_DRAW));
    let (workers, service_time) = backend(&mut rng);
    let distribution = distribution(&mut rng);
    let congestion = uniform(&mut rng, 0.0, MAX_CONGESTION);
    let drawn_load = log_uniform(&mut rng, MIN_LOAD, MAX_LOAD);
    let no_urgent = rng.random::<f64>() < NO_URGENT_DRAWS;
    let share = uniform(&mut rng, 0.0, MAX_URGENT_SHARE);
    let urgent_share = if no_urgent { 0.0 } else { share };
    let urgent_flood = rng.random::<f64>() < URGENT_FLOOD_DRAWS;
    let (t_lo, t_hi) = TIMEOUT_IN_SERVICE_TIMES;
    let client_timeout =
        times(service_time, log_uniform(&mut rng, t_lo, t_hi)).max(service_time.saturating_mul(10));
    let cold = rng.random::<f64>() < COLD_DRAWS;
    let warm_secs = uniform(&mut rng, 0.0, MAX_WARM_UP.as_secs_f64());
    let warm_up = if cold {
        Duration::ZERO
    } else {
        whole_slices(Duration::from_secs_f64(warm_secs)).min(MAX_WARM_UP)
    };
    let warm_load = uniform(&mut rng, WARM_LOAD.0, WARM_LOAD.1);
    let flood_share: f64 = rng.random();
    let (load, urgent_load) = if urgent_flood {
        // Non-urgent traffic keeps its base; urgent traffic takes the rest of the flood, at least
        // 1.2 C (which may take the total a little above the drawn load, never past 20).
        let base = warm_load * (1.0 - urgent_share);
        let most = (drawn_load - base).max(MIN_URGENT_FLOOD);
        let urgent = (MIN_URGENT_FLOOD.ln() + (most.ln() - MIN_URGENT_FLOOD.ln()) * flood_share)
            .exp()
            .clamp(MIN_URGENT_FLOOD, most);
        ((urgent + base).clamp(MIN_LOAD, MAX_LOAD), urgent)
    } else {
        (drawn_load, drawn_load * urgent_share)
    };
    Draw {
        seed,
        index,
        workers,
        service_time,
        distribution,
        congestion,
        load,
        urgent_share,
        urgent_flood,
        urgent_load,
        client_timeout,
        warm_up,
        warm_load,
    }
}

impl Draw {
    /// Capacity C = W ÷ S, requests per second.
    pub fn capacity(&self) -> f64 {
        f64::from(self.workers) / self.service_time.as_secs_f64()
    }

    /// The urgent demand during the flood, requests per second.
    pub fn urgent_demand(&self) -> f64 {
        self.urgent_load * self.capacity()
    }

    /// The non-urgent load during the flood, a multiple of C.
    pub fn non_urgent_load(&self) -> f64 {
        (self.load - self.urgent_load).max(0.0)
    }

    /// Whether the flood is the first phase (no warm-up).
    pub fn is_cold(&self) -> bool {
        self.warm_up.is_zero()
    }

    /// The flood's length: max(3 s, 40·S), shortened to at most 400,000 expected arrivals but
    /// never below 20·S, in whole slices.
    pub fn flood(&self) -> Duration {
        let wanted = whole_slices(
            self.service_time
                .saturating_mul(40)
                .max(Duration::from_secs(3)),
        );
        let shortest = whole_slices(self.service_time.saturating_mul(20));
        let affordable = floor_slices(MAX_FLOOD_ARRIVALS / (self.load * self.capacity()));
        wanted.min(affordable).max(shortest)
    }

    /// The cool-down's length: max(2 s, 20·S), in whole slices.
    pub fn cool_down(&self) -> Duration {
        whole_slices(
            self.service_time
                .saturating_mul(20)
                .max(Duration::from_secs(2)),
        )
    }

    /// The requests the flood is expected to offer: load × C × its length.
    pub fn flood_arrivals(&self) -> f64 {
        self.load * self.capacity() * self.flood().as_secs_f64()
    }

    /// The flood in milliseconds since the run began: from the end of the warm-up to the start of
    /// the cool-down.
    pub fn flood_window_ms(&self) -> std::ops::Range<u64> {
        let start = ms(self.warm_up);
        start..start.saturating_add(ms(self.flood()))
    }

    /// The clients' SLO: 5·S.
    pub fn slo(&self) -> Duration {
        self.service_time.saturating_mul(SLO_IN_SERVICE_TIMES)
    }

    /// The memory one request in flight holds: 1 MiB, or less so that 2·W of them hold at most
    /// 1 GiB.
    pub fn memory_per_request(&self) -> u64 {
        (1u64 << 20).min((1u64 << 30) / (2 * u64::from(self.workers.max(1))))
    }

    /// The name of its scenario: `family-{seed}-{index}`.
    pub fn name(&self) -> String {
        format!("family-{}-{}", self.seed, self.index)
    }

    /// The seed its scenario's arrivals and service times are drawn from (derived from the
    /// family's seed and the index).
    pub fn scenario_seed(&self) -> u64 {
        key(self.seed, self.index, TAG_SCENARIO)
    }

    /// The distribution's short name: `const`, `exp`, `logn 1.2`, `bim 5%x12`.
    pub fn distribution_label(&self) -> String {
        match self.distribution {
            Distribution::Constant => "const".to_owned(),
            Distribution::Exponential => "exp".to_owned(),
            Distribution::Lognormal { sigma } => format!("logn {sigma:.1}"),
            Distribution::Bimodal {
                slow_share,
                slow_factor,
            } => format!("bim {:.0}%x{slow_factor:.0}", slow_share * 100.0),
        }
    }

    /// The scenario of this draw: the warm-up (if any), the flood and the cool-down, with the
    /// backend, clients and memory of the module documentation and no `[gate]` or `[sampler]`
    /// table.
    pub fn scenario(&self) -> Scenario {
        self.scenario_of(false)
    }

    /// [`Draw::scenario`] with its urgent traffic only: what the backend can do for urgent
    /// requests when nothing else competes for it, the reference of the urgent bars.
    pub fn urgent_alone(&self) -> Scenario {
        self.scenario_of(true)
    }

    fn scenario_of(&self, urgent_alone: bool) -> Scenario {
        let phase = |duration: Duration, load: f64, urgent_share: f64| {
            let (load, urgent_share) = if urgent_alone {
                ((load * urgent_share).max(1e-6), 1.0)
            } else {
                (load, urgent_share)
            };
            Phase {
                duration,
                load,
                urgent_share,
                service_factor: 1.0,
            }
        };
        let mut phases = Vec::with_capacity(3);
        if !self.warm_up.is_zero() {
            phases.push(phase(self.warm_up, self.warm_load, self.urgent_share));
        }
        let flood_share = (self.urgent_load / self.load).clamp(0.0, 1.0);
        phases.push(phase(self.flood(), self.load, flood_share));
        phases.push(phase(self.cool_down(), COOL_LOAD, self.urgent_share));
        Scenario {
            name: self.name(),
            seed: self.scenario_seed(),
            backend: Backend {
                workers: self.workers,
                service_time: self.service_time,
                distribution: self.distribution,
                congestion: self.congestion,
                memory_base: 512 << 20,
                memory_per_request: self.memory_per_request(),
                memory_limit: 2 << 30,
                heavy_share: 0.0,
                heavy_factor: 1.0,
            },
            clients: Clients {
                arrivals: Arrivals::Poisson,
                timeout: self.client_timeout,
                slo: self.slo(),
                urgent_share: self.urgent_share,
                retry: Retry {
                    mode: RetryMode::None,
                    max_attempts: 1,
                    base: Duration::from_millis(100),
                    jitter: 0.5,
                    honour_retry_after: true,
                },
            },
            phases,
            gate: Table::new(),
            sampler: Table::new(),
            baselines: Baselines {
                token_bucket_rate: None,
                token_bucket_burst: Duration::from_millis(100),
                concurrency_limit: None,
            },
        }
    }
}
