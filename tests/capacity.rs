//! The capacity estimator (`sluicegate::capacity::Estimator`) on its own, fed the ticks of a modelled
//! service.
//!
//! The model: `W` workers and a service time `S`, so a capacity `C = W / S` and a knee `W = C × S`.
//! Requests arrive at an offered rate `λ` and are admitted while the in-flight level is below the
//! ceiling (the estimator's own learned ceiling, as the gate applies it, unless a test says otherwise).
//! Time runs in 1 ms steps of a fluid model: up to `W` requests are served at once, each for `S`, so
//! that in steady state a tick completes `min(λ, C) × tick` requests, whose latency is `S` while
//! in-flight ≤ `W` and `S + queue / C` above it. Everything is deterministic: no randomness, no wall
//! time.

use std::time::Duration;

use sluicegate::capacity::{
    confirmed_ceiling, refill_headroom, Estimator, Learned, TickSample, BASE_WINDOW, PROBE_DEPTH,
    RATE_WINDOW, UNCONFIRMED_HEADROOM,
};
use sluicegate::clock::Nanos;

/// The sampler's tick, as in the default config.
const TICK: Nanos = 100_000_000;
/// Steps of the fluid model per tick.
const STEPS: u32 = 100;
/// The gate's in-flight ceiling until it has learned one.
const UNLEARNED_CEILING: u64 = 1000;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A service of `workers` ways of working in parallel, each request taking `service`.
struct Service {
    workers: f64,
    service: f64,
    in_flight: f64,
    /// Fractions of a completion carried over to the next tick, so that counts are whole.
    carry: f64,
    now: Nanos,
}

impl Service {
    fn new(workers: u32, service: Duration) -> Self {
        Service {
            workers: f64::from(workers),
            service: service.as_secs_f64(),
            in_flight: 0.0,
            carry: 0.0,
            now: 0,
        }
    }

    /// Completions per second at saturation (`C = W / S`).
    fn capacity(&self) -> f64 {
        self.workers / self.service
    }

    /// One sampler tick at `offered` requests per second, with requests refused at `ceiling`.
    fn tick(&mut self, offered: f64, ceiling: u64) -> TickSample {
        let dt = TICK as f64 / 1e9 / f64::from(STEPS);
        let k = ceiling as f64;
        let (mut done, mut weighted, mut refused) = (0.0, 0.0, 0.0);
        for _ in 0..STEPS {
            let arrivals = offered * dt;
            let room = (k - self.in_flight).max(0.0);
            if arrivals > room + 1e-9 {
                refused += arrivals - room;
            }
            self.in_flight += arrivals.min(room);
            let busy = self.in_flight.min(self.workers);
            let out = (busy / self.service * dt).min(self.in_flight);
            // Little's law for the current state: S while no queue, S + queue / C above the knee.
            let latency = self.service * (self.in_flight / self.workers).max(1.0);
            done += out;
            weighted += out * latency;
            self.in_flight -= out;
        }
        self.now += TICK;
        let total = done + self.carry;
        let completed = (total + 1e-6).floor().max(0.0);
        self.carry = total - completed;
        let mean = if done > 0.0 { weighted / done } else { 0.0 };
        TickSample {
            now: self.now,
            elapsed: TICK,
            completed: completed as u64,
            latency_sum: (mean * 1e9 * completed).round() as u64,
            latency_count: completed as u64,
            in_flight: self.in_flight.round() as u64,
            ceiling_refused: refused > 0.0,
            // At least one whole request when any was refused.
            ceiling_refusals: refused.ceil() as u64,
            memory_refusals: 0,
            turned_away: refused > 0.0,
            ceiling_reached_at: None,
        }
    }
}

/// One tick as the test saw it.
#[derive(Debug, Clone, Copy)]
struct Step {
    /// Seconds since the run started.
    at: f64,
    sample: TickSample,
    learned: Learned,
}

impl Step {
    fn latency(&self) -> Option<f64> {
        let s = &self.sample;
        (s.latency_count > 0).then(|| s.latency_sum as f64 / s.latency_count as f64 / 1e9)
    }
}

/// A service and the estimator that watches it, in a closed loop: the service is admitted up to
/// the estimator's ceiling.
struct Run {
    service: Service,
    estimator: Estimator,
    learned: Learned,
    trace: Vec<Step>,
    /// Whether the estimator is also given each tick's latencies (see [`Run::latencies`]).
    with_latencies: bool,
}

impl Run {
    fn new(workers: u32, service: Duration) -> Self {
        Run {
            service: Service::new(workers, service),
            estimator: Estimator::new(),
            learned: Learned::default(),
            trace: Vec::new(),
            with_latencies: false,
        }
    }

    /// The latencies of a tick's `completed` requests, nanoseconds: exponential service times of
    /// mean S at evenly spaced quantiles, each plus the wait the tick's queue makes (requests in
    /// flight past the workers, at the capacity's rate). Deterministic, like the rest of the
    /// model.
    fn latencies(&self, completed: u64) -> Vec<u64> {
        let s = &self.service;
        let wait = (s.in_flight - s.workers).max(0.0) / s.capacity();
        (0..completed)
            .map(|i| {
                let q = (i as f64 + 0.5) / completed as f64;
                ((-(1.0 - q).ln() * s.service + wait) * 1e9).round() as u64
            })
            .collect()
    }

    /// Runs `secs` at `offered` requests per second under the learned ceiling; returns this
    /// phase's ticks.
    fn run(&mut self, offered: f64, secs: f64) -> Vec<Step> {
        self.run_with(offered, secs, |l| l.ceiling.unwrap_or(UNLEARNED_CEILING))
    }

    /// Runs `secs` at `offered` requests per second with the ceiling `ceiling` chooses.
    fn run_with(
        &mut self,
        offered: f64,
        secs: f64,
        ceiling: impl Fn(&Learned) -> u64,
    ) -> Vec<Step> {
        let ticks = (secs * 1e9 / TICK as f64).round() as usize;
        let start = self.trace.len();
        for _ in 0..ticks {
            let k = ceiling(&self.learned);
            let sample = self.service.tick(offered, k);
            self.learned = if self.with_latencies {
                let latencies = self.latencies(sample.completed);
                self.estimator.observe_with_latencies(&sample, &latencies)
            } else {
                self.estimator.observe(&sample)
            };
            self.trace.push(Step {
                at: sample.now as f64 / 1e9,
                sample,
                learned: self.learned,
            });
        }
        self.trace[start..].to_vec()
    }

    /// The ticks after `at` seconds, outside the probes.
    fn outside_probes_after(&self, at: f64) -> impl Iterator<Item = &Step> {
        self.trace
            .iter()
            .filter(move |s| s.at > at && !s.learned.probing)
    }

    /// Seconds since the run started.
    fn now(&self) -> f64 {
        self.service.now as f64 / 1e9
    }

    fn capacity(&self) -> f64 {
        self.learned.capacity.expect("capacity learned")
    }

    fn base(&self) -> f64 {
        self.learned
            .base_latency
            .expect("base latency learned")
            .as_secs_f64()
    }

    fn knee(&self) -> u64 {
        self.learned.knee.expect("knee learned")
    }

    /// The trace from `from` seconds on, one line a tick: for failure messages.
    fn show(&self, from: f64) -> String {
        self.trace
            .iter()
            .filter(|s| s.at >= from - 1e-9)
            .map(|s| {
                let l = &s.learned;
                format!(
                    "{:6.1}s capacity {:7.1} base {:6.1} ms knee {:>3} ceiling {:>3}{} probes {} | \
                     done {:>3} latency {:6.1} ms refused {}\n",
                    s.at,
                    l.capacity.unwrap_or(f64::NAN),
                    l.base_latency.map_or(f64::NAN, |b| b.as_secs_f64() * 1e3),
                    l.knee.unwrap_or(0),
                    l.ceiling.unwrap_or(0),
                    if l.probing { " (probing)" } else { "" },
                    l.probes,
                    s.sample.completed,
                    s.latency().unwrap_or(f64::NAN) * 1e3,
                    s.sample.ceiling_refused,
                )
            })
            .collect()
    }
}

/// Whether `value` is within `share` of `target`.
fn near(value: f64, target: f64, share: f64) -> bool {
    (value - target).abs() <= share * target.abs()
}

/// The ceiling while the capacity is only a lower bound: twice the knee, plus two.
fn unconfirmed_ceiling(knee: u64) -> u64 {
    (knee as f64 * (1.0 + UNCONFIRMED_HEADROOM)).ceil() as u64 + 2
}

/// The ceiling over a knee confirmed saturated, from the figures learned.
fn saturated_ceiling(learned: &Learned) -> u64 {
    let knee = learned.capacity.unwrap() * learned.base_latency.unwrap().as_secs_f64();
    confirmed_ceiling(knee, learned.knee_noise, learned.offered_load)
}

// ---------------------------------------------------------------- learning at load

#[test]
fn model_completes_min_of_offered_and_capacity_with_latency_s_below_the_knee() {
    // The model itself: 20 workers × 50 ms = 400/s.
    let mut s = Service::new(20, ms(50));
    assert_eq!(s.capacity(), 400.0);
    let ticks: Vec<TickSample> = (0..20).map(|_| s.tick(200.0, 1000)).collect();
    let last = ticks.last().unwrap();
    assert_eq!(last.completed, 20);
    assert_eq!(last.latency_sum / last.latency_count, 50_000_000);
    assert!(!last.ceiling_refused);
    // Saturated at a ceiling of 30: 40 a tick, latency S + 10 / C = 75 ms, refusing.
    let ticks: Vec<TickSample> = (0..30).map(|_| s.tick(800.0, 30)).collect();
    let last = ticks.last().unwrap();
    assert_eq!(last.completed, 40);
    let latency = last.latency_sum as f64 / last.latency_count as f64 / 1e6;
    assert!((latency - 75.0).abs() < 0.01, "{latency}");
    assert!(last.ceiling_refused);
}

#[test]
fn nothing_is_learned_before_the_first_completion() {
    let mut e = Estimator::new();
    let learned = e.observe(&TickSample {
        now: TICK,
        elapsed: TICK,
        in_flight: 3,
        ..TickSample::default()
    });
    assert_eq!(learned, Learned::default());
    assert_eq!(e.capacity(), None);
    assert_eq!(e.knee(), None);
}

#[test]
fn learns_capacity_and_base_latency_within_a_few_percent_at_full_load() {
    // 20 workers × 50 ms: C = 400/s, knee 20. Offered exactly C.
    let mut run = Run::new(20, ms(50));
    run.run(400.0, 3.0);
    let trace = run.show(0.0);
    assert!(near(run.capacity(), 400.0, 0.02), "{trace}");
    assert!(near(run.base(), 0.050, 0.02), "{trace}");
    assert_eq!(run.knee(), 20, "{trace}");
    // No queue was seen: the capacity is not confirmed, the ceiling generous.
    assert!(!run.estimator.confirmed());
    assert_eq!(run.learned.ceiling, Some(unconfirmed_ceiling(20)));
}

/// 20 workers × 50 ms (C = 400/s): 2 s at half C, then 3 s at `load` × C.
fn flooded_after_a_calm_start(load: f64) -> Run {
    let mut run = Run::new(20, ms(50));
    run.run(200.0, 2.0);
    run.run(load * 400.0, 3.0);
    run
}

#[test]
fn learns_capacity_and_base_latency_within_a_few_percent_at_twice_the_load_after_a_calm_start() {
    let run = flooded_after_a_calm_start(2.0);
    let trace = run.show(0.0);
    assert!(near(run.capacity(), 400.0, 0.03), "{trace}");
    assert!(near(run.base(), 0.050, 0.03), "{trace}");
    assert!(
        (19..=21).contains(&run.knee()),
        "knee {} {trace}",
        run.knee()
    );
    // Saturated: a queue was seen, and the ceiling allows only a short one (√20 / 2 + ½ ≈ 3
    // requests above the knee).
    assert!(run.estimator.confirmed(), "{trace}");
    let ceiling = saturated_ceiling(&run.learned);
    assert_eq!(run.learned.ceiling, Some(ceiling), "{trace}");
    assert!((22..=25).contains(&ceiling), "{trace}");
}

#[test]
fn under_a_tenfold_flood_the_ceiling_keeps_about_one_request_above_the_knee() {
    // A freed worker is refilled at once when ten requests are offered for each one completed:
    // the queue for the gaps between arrivals shrinks from √20 ÷ 2 + ½ = 2.7 requests to 0.8.
    let run = flooded_after_a_calm_start(10.0);
    let trace = run.show(0.0);
    let load = run.learned.offered_load;
    assert!(near(load, 10.0, 0.1), "offered load {load}: {trace}");
    assert!(run.estimator.confirmed(), "{trace}");
    let ceiling = saturated_ceiling(&run.learned);
    assert_eq!(run.learned.ceiling, Some(ceiling), "{trace}");
    assert!((20..=21).contains(&ceiling), "{trace}");
    // At twice the capacity the gaps are longer and the square-root rule stands.
    let run = flooded_after_a_calm_start(2.0);
    let trace = run.show(0.0);
    assert!(near(run.learned.offered_load, 2.0, 0.1), "{trace}");
    assert!(
        (22..=25).contains(&run.learned.ceiling.unwrap_or(0)),
        "{trace}"
    );
}

/// With each tick's latencies, the low tail shows the queue the knee's margin keeps, and takes
/// it off: 100 workers at 100 ms under a tenfold flood, whose ceiling keeps about five requests
/// above the workers without them. Its readings then measure the workers, and the ceiling
/// follows them; it never goes below the workers, and the knee (capacity × base latency) is the
/// same.
#[test]
fn the_low_tail_trims_the_queue_the_knees_margin_keeps_but_never_below_the_workers() {
    let flood = |with_latencies: bool| {
        let mut run = Run::new(100, ms(100));
        run.with_latencies = with_latencies;
        run.run(600.0, 3.0);
        run.run(10_000.0, 6.0);
        run
    };
    let blind = flood(false);
    let told = flood(true);
    let confirmed = |run: &Run| -> Vec<u64> {
        run.outside_probes_after(3.6)
            .filter_map(|s| s.learned.ceiling)
            .collect()
    };
    let (blind_ceilings, told_ceilings) = (confirmed(&blind), confirmed(&told));
    let trace = told.show(2.5);
    let mean = |c: &[u64]| c.iter().sum::<u64>() as f64 / c.len().max(1) as f64;
    assert!(
        told_ceilings.iter().any(|&c| c <= 102),
        "never trimmed: {told_ceilings:?}: {trace}"
    );
    assert!(
        mean(&told_ceilings) < mean(&blind_ceilings),
        "trimmed {told_ceilings:?}, untrimmed {blind_ceilings:?}: {trace}"
    );
    assert!(
        told_ceilings.iter().all(|&c| c >= 100),
        "below the workers: {told_ceilings:?}: {trace}"
    );
    assert_eq!(told.learned.knee, blind.learned.knee, "{trace}");
    // The snapshot shows the trim: none without latencies.
    assert!(blind.trace.iter().all(|s| s.learned.trim == 0.0));
    assert!(told.trace.iter().any(|s| s.learned.trim >= 1.0), "{trace}");
}

/// A gate started into a flood: the first latencies all include a queue.
fn started_into_a_flood(load: f64) -> Run {
    let mut run = Run::new(20, ms(50));
    run.run(load * 400.0, 5.0);
    run
}

#[test]
fn a_gate_started_into_a_flood_probes_for_its_base_latency_within_a_few_seconds() {
    for load in [2.0, 3.0] {
        let run = started_into_a_flood(load);
        assert!(run.learned.probes >= 1, "{load}×: {}", run.show(0.0));
        // The capacity is measured at saturation whatever the base.
        assert!(
            near(run.capacity(), 400.0, 0.03),
            "{load}×: {}",
            run.show(0.0)
        );
    }
}

#[test]
fn a_gate_started_into_a_flood_settles_on_the_true_knee_within_twenty_seconds() {
    // The first probe comes with the queue of the unlearned ceiling still in the rounds; a probe
    // under which the service stays saturated measured no base, and deeper ones follow.
    for load in [2.0, 3.0, 10.0] {
        let mut run = Run::new(20, ms(50));
        run.run(load * 400.0, 20.0);
        let trace = run.show(0.0);
        assert!(near(run.base(), 0.050, 0.05), "{load}×: {trace}");
        assert!((19..=21).contains(&run.knee()), "{load}×: {trace}");
        assert!(run.estimator.confirmed(), "{load}×: {trace}");
    }
}

#[test]
fn a_gate_started_into_a_flood_learns_its_base_latency_within_a_few_seconds() {
    // Twice and three times the capacity of 20 workers never reach the unlearned ceiling (1,000)
    // in five seconds; the queue shows in the latency the requests in flight imply, climbing
    // tick after tick with their count, and that calls for the probe before the start-up ends.
    // (Waiting for the ceiling to refuse, the base was right at about 8 s: 2.5 s to fill the
    // ceiling, 2.5 s more to drain it.)
    for load in [2.0, 3.0] {
        let run = started_into_a_flood(load);
        let trace = run.show(0.0);
        assert!(near(run.base(), 0.050, 0.05), "{load}×: {trace}");
        assert!((19..=21).contains(&run.knee()), "{load}×: {trace}");
    }
}

#[test]
#[ignore = "known limitation: at 1.1 and 1.5 times the capacity of 20 workers \
            the queue grows by 4 and 20 requests a tick, within the noise of a tick's count; \
            the start-up's rounds measure the queue as they go, and the gate settles on it: at \
            1.1x a base of 148 ms for a 50 ms service, the ceiling holding 75 in flight for 20 \
            workers; at 1.5x 823 ms when it settles, 1.5 s five seconds in; nothing calls for a \
            probe before the base window (10 s). Fed aggregates alone, as here; the gate passes \
            the admission levels too, and tells such a flood from their hinge (tests/cold_start.rs)"]
fn a_gate_started_into_a_slow_flood_on_a_small_service_learns_its_base_latency_within_a_few_seconds(
) {
    for load in [1.1, 1.5] {
        let run = started_into_a_flood(load);
        let trace = run.show(0.0);
        assert!(near(run.base(), 0.050, 0.10), "{load}×: {trace}");
        assert!((19..=22).contains(&run.knee()), "{load}×: {trace}");
    }
}

#[test]
fn a_gate_started_into_a_flood_its_ceiling_turns_away_probes_within_a_few_ticks() {
    // Ten times the capacity of 20 workers fills the unlearned ceiling (1000) on the second tick.
    // Two ticks of its refusals call for a probe: the queue behind that ceiling is the flood's.
    let mut run = Run::new(20, ms(50));
    run.run(4000.0, 0.5);
    assert!(run.learned.probes >= 1, "{}", run.show(0.0));
}

#[test]
fn a_probe_begun_in_a_cold_flood_measures_only_once_the_requests_then_in_flight_completed() {
    // 64 workers at 20 ms (3,200 a second), started into a flood the unlearned ceiling holds at
    // 1,000 in flight: the first tick's latency already holds some queue, the second more, and
    // the requests in flight when the probe begins (1,000, about 0.31 s of work) complete with a
    // queue's latency for 0.6 s more. The latency of now (150 ms) lags that queue; Little's law
    // does not.
    let tick =
        |i: u64, latency_ms: u64, in_flight: u64| tick_of(i, 320, latency_ms, in_flight, true);
    let mut e = Estimator::new();
    e.observe(&tick(1, 40, 1000));
    e.observe(&tick(2, 150, 1000));
    assert!(e.learned().probing, "{:?}", e.learned());
    for (i, in_flight) in (3..=8).zip([700, 400, 100, 57, 57, 57]) {
        e.observe(&tick(i, 300, in_flight));
    }
    for i in 9..=20 {
        e.observe(&tick(i, 20, 57));
    }
    // The probe's rounds are the service's 20 ms, not the queue's 300 ms (which, higher than the
    // first tick's 40 ms on a service that stayed saturated, would have left the base at 40 ms:
    // a knee twice the workers).
    let learned = e.learned();
    assert_eq!(learned.base_latency, Some(ms(20)), "{learned:?}");
}

#[test]
fn knee_is_capacity_times_base_latency_for_services_of_every_size() {
    // (workers, service time, seconds to learn): a slow service completes few requests a tick and
    // is smoothed over more ticks.
    for (workers, service, secs) in [
        (20, ms(50), 4.0),
        (4, ms(10), 4.0),
        (200, ms(10), 4.0),
        (8, ms(200), 20.0),
        (1000, ms(500), 6.0),
    ] {
        let mut run = Run::new(workers, service);
        let c = run.service.capacity();
        run.run(c, secs);
        let label = format!("W {workers} S {service:?}");
        let little = (run.capacity() * run.base()).ceil() as u64;
        assert_eq!(run.knee(), little.max(1), "{label}");
        let knee = run.knee() as f64;
        assert!(
            near(knee, f64::from(workers), 0.05),
            "{label}: knee {knee}\n{}",
            run.show(0.0)
        );
        assert!(near(run.base(), service.as_secs_f64(), 0.02), "{label}");
    }
}

// ---------------------------------------------------------------- low load

#[test]
fn at_half_load_the_capacity_is_a_lower_bound_and_the_ceiling_at_least_twice_the_knee() {
    let mut run = Run::new(20, ms(50));
    let steps = run.run(200.0, 5.0);
    let trace = run.show(0.0);
    // What was measured is what was offered, not the service's 400/s.
    assert!(run.capacity() <= 400.0, "{trace}");
    assert!(near(run.capacity(), 200.0, 0.02), "{trace}");
    assert!(!run.estimator.confirmed());
    let knee = run.knee();
    assert_eq!(knee, 10, "{trace}");
    let ceiling = run.learned.ceiling.unwrap();
    assert!(ceiling >= 2 * knee, "ceiling {ceiling} {trace}");
    // So the ceiling never binds at the usual load (10 in flight).
    assert!(steps.iter().all(|s| !s.sample.ceiling_refused), "{trace}");
    assert!(ceiling as f64 > 200.0 * 0.050);
}

#[test]
fn a_burst_above_the_usual_load_passes_a_ceiling_learned_at_low_load() {
    // Learned at 0.5 × C: a burst of 1.5 × the usual load (in flight 15) fits under the ceiling.
    let mut run = Run::new(20, ms(50));
    run.run(200.0, 5.0);
    let burst = run.run(300.0, 2.0);
    assert!(
        burst.iter().all(|s| !s.sample.ceiling_refused),
        "{}",
        run.show(5.0)
    );
}

// ---------------------------------------------------------------- growth

#[test]
fn capacity_grows_while_the_ceiling_refuses_and_latency_stays_at_its_base() {
    // A big service (100 workers × 50 ms = 2000/s) seen at 10 % load learns a lower bound of 200/s
    // and a ceiling of 22; then demand doubles the service's capacity. The ceiling refuses while
    // latency stays at 50 ms: the service is not saturated, and the capacity must grow.
    let mut run = Run::new(100, ms(50));
    run.run(200.0, 5.0);
    let before = run.capacity();
    assert!(near(before, 200.0, 0.02));
    let flood = run.run(4000.0, 0.3);
    let trace = run.show(4.5);
    let first = flood
        .iter()
        .find(|s| s.sample.ceiling_refused)
        .expect("the ceiling refuses");
    assert!(
        first.latency().unwrap() <= 0.050 * 1.01,
        "latency at base while refusing: {trace}"
    );
    let grown = flood.last().unwrap().learned.capacity.unwrap();
    assert!(grown >= 1.5 * before, "{before} -> {grown}: {trace}");
    // ...until it reaches the service's capacity, where a queue forms.
    run.run(4000.0, 3.0);
    let trace = run.show(4.5);
    assert!(near(run.capacity(), 2000.0, 0.03), "{trace}");
    assert!(near(run.base(), 0.050, 0.01), "{trace}");
    assert!((95..=105).contains(&run.knee()), "{trace}");
    assert!(run.estimator.confirmed(), "{trace}");
}

#[test]
fn capacity_grows_after_two_flat_ticks_by_at_most_the_growth_factor_and_at_most_to_four_times_the_measured_rate(
) {
    // Scripted: the ceiling refuses every tick while latency stays at the base, 22 completions per
    // 100 ms tick (220/s measured).
    let mut e = Estimator::new();
    let tick = |e: &mut Estimator, i: u64, refused: bool| {
        e.observe(&TickSample {
            now: (i + 1) * TICK,
            elapsed: TICK,
            completed: 22,
            latency_sum: 22 * 50_000_000,
            latency_count: 22,
            in_flight: 11,
            ceiling_refused: refused,
            ceiling_refusals: 0,
            memory_refusals: 0,
            turned_away: refused,
            ceiling_reached_at: None,
        })
    };
    for i in 0..50 {
        tick(&mut e, i, false);
    }
    let base = e.capacity().unwrap();
    // One quiet tick at the ceiling is noise: no growth yet.
    let first = tick(&mut e, 50, true).capacity.unwrap();
    assert_eq!(first, base);
    let mut previous = base;
    for i in 51..70 {
        let c = tick(&mut e, i, true).capacity.unwrap();
        // At most ×1.5 a step (one step per tick: the tick is longer than the base latency).
        assert!(c <= previous * 1.5 * 1.0001, "{previous} -> {c}");
        assert!(c >= previous, "{previous} -> {c}");
        previous = c;
    }
    // It grew, but never past four times what the service was seen to complete.
    assert!(previous > base * 3.0, "{base} -> {previous}");
    assert!(previous <= base * 4.0 * 1.0001, "{base} -> {previous}");
}

// ---------------------------------------------------------------- standing queue and probes

#[test]
fn a_standing_queue_does_not_drift_the_base_latency_and_a_probe_re_measures_it() {
    // Learned at 1 × C (base 50 ms, knee 20). Then a flood held at a ceiling of 26 outside probes: a
    // standing queue of 6, latency 1.3 × S = 65 ms at capacity 400/s, the ceiling refusing.
    let mut run = Run::new(20, ms(50));
    run.run(400.0, 5.0);
    let calm_probes = run.learned.probes;
    let standing = run.run_with(
        800.0,
        25.0,
        |l| if l.probing { l.ceiling.unwrap() } else { 26 },
    );
    let trace = run.show(5.0);
    let queued = standing
        .iter()
        .rev()
        .filter(|s| !s.learned.probing)
        .find_map(Step::latency)
        .unwrap();
    assert!(near(queued, 0.065, 0.01), "latency {queued}: {trace}");
    for s in &standing {
        let base = s.learned.base_latency.unwrap().as_secs_f64();
        assert!(
            base <= 0.050 * 1.02,
            "base drifted to {base} at {}: {trace}",
            s.at
        );
    }
    // A probe came within the base window (plus the tick it takes), and lowered the ceiling below
    // the knee.
    let probe = standing
        .iter()
        .find(|s| s.learned.probing)
        .unwrap_or_else(|| panic!("no probe: {trace}"));
    assert!(
        probe.at <= 5.0 + BASE_WINDOW.as_secs_f64() + 1.0,
        "probe at {}: {trace}",
        probe.at
    );
    assert_eq!(
        probe.learned.ceiling,
        Some((20.0 * PROBE_DEPTH) as u64),
        "{trace}"
    );
    assert!(run.learned.probes > calm_probes, "{trace}");
    // The probe drained the queue: latency at the base was measured while it ran.
    let drained = standing
        .iter()
        .filter(|s| s.learned.probing)
        .filter_map(Step::latency)
        .fold(f64::MAX, f64::min);
    assert!(near(drained, 0.050, 0.01), "{trace}");
    // Probes end, and repeat about once per base window.
    assert!(!run.learned.probing, "{trace}");
    assert!(run.learned.probes >= 2, "{trace}");
    assert!(near(run.base(), 0.050, 0.02), "{trace}");
    assert!(near(run.capacity(), 400.0, 0.02), "{trace}");
}

#[test]
fn probes_cost_little_throughput() {
    // Saturated for 30 s under the learned ceiling: the probes' lower ceiling costs a few percent
    // of completions at most.
    let mut run = Run::new(20, ms(50));
    run.run(400.0, 5.0);
    let steps = run.run(800.0, 30.0);
    let done: u64 = steps.iter().map(|s| s.sample.completed).sum();
    let most = 400.0 * 30.0;
    assert!(
        done as f64 >= 0.97 * most,
        "{done} of {most}: {}",
        run.show(5.0)
    );
    assert!(run.learned.probes >= 2);
}

// ---------------------------------------------------------------- the service changes

/// Learned at 1 × C, then saturated at 2 × C for 5 s; returns the run (now at 10 s).
fn saturated() -> Run {
    let mut run = Run::new(20, ms(50));
    run.run(400.0, 5.0);
    run.run(800.0, 5.0);
    assert!(near(run.capacity(), 400.0, 0.02), "{}", run.show(0.0));
    assert!(near(run.base(), 0.050, 0.02), "{}", run.show(0.0));
    run
}

#[test]
fn when_the_service_slows_twice_the_base_is_re_measured_and_the_knee_settles_near_the_workers() {
    let mut run = saturated();
    let slowed_at = run.now();
    run.service.service = 0.100; // latency 2 S, completions C / 2; the knee is still W = 20
    let after = run.run(800.0, 15.0);
    let trace = run.show(slowed_at - 0.5);
    // A probe re-measures the base.
    let probe = after
        .iter()
        .find(|s| s.learned.probing)
        .unwrap_or_else(|| panic!("no probe: {trace}"));
    assert!(
        probe.at - slowed_at <= 2.0,
        "probe at {}: {trace}",
        probe.at
    );
    // Within the rate window and a second of probing, the knee is W ± 20 % and stays so.
    let settle = slowed_at + RATE_WINDOW.as_secs_f64() + 2.0;
    for s in after.iter().filter(|s| s.at >= settle) {
        let knee = s.learned.knee.unwrap() as f64;
        assert!(near(knee, 20.0, 0.2), "knee {knee} at {}: {trace}", s.at);
    }
    assert!(near(run.base(), 0.100, 0.05), "{trace}");
    assert!(near(run.capacity(), 200.0, 0.05), "{trace}");
}

#[test]
fn when_the_service_slows_the_ceiling_never_falls_below_the_knee_before_the_base_is_re_measured() {
    // The trap the slowed-service probe avoids: the rate falls at once, the base only when
    // re-measured, so capacity × old base would put the knee (and the ceiling) at W / 2.
    let mut run = saturated();
    let slowed_at = run.now();
    run.service.service = 0.100;
    let after = run.run(800.0, 15.0);
    let trace = run.show(slowed_at - 0.5);
    for s in after.iter().filter(|s| !s.learned.probing) {
        let ceiling = s.learned.ceiling.unwrap();
        assert!(ceiling >= 20, "ceiling {ceiling} at {}: {trace}", s.at);
    }
}

#[test]
fn when_the_service_slows_the_knee_stays_near_the_workers_throughout() {
    let mut run = saturated();
    let slowed_at = run.now();
    run.service.service = 0.100;
    let after = run.run(800.0, 15.0);
    let trace = run.show(slowed_at - 0.5);
    for s in &after {
        let knee = s.learned.knee.unwrap() as f64;
        assert!(knee <= 1.3 * 20.0, "knee {knee} at {}: {trace}", s.at);
    }
}

#[test]
fn when_the_service_gets_twice_as_fast_capacity_follows_within_the_rate_window() {
    let mut run = saturated();
    let faster_at = run.now();
    run.service.service = 0.025; // C = 800/s, the knee still W = 20
    run.run(1200.0, RATE_WINDOW.as_secs_f64() + 0.5);
    let trace = run.show(faster_at - 0.5);
    assert!(near(run.capacity(), 800.0, 0.05), "{trace}");
}

#[test]
fn when_the_service_gets_twice_as_fast_the_base_latency_falls_at_once() {
    let mut run = saturated();
    let faster_at = run.now();
    run.service.service = 0.025;
    run.run(1200.0, RATE_WINDOW.as_secs_f64() + 0.5);
    let trace = run.show(faster_at - 0.5);
    assert!(near(run.base(), 0.025, 0.05), "{trace}");
    assert!(near(run.knee() as f64, 20.0, 0.2), "{trace}");
}

#[test]
fn when_the_service_gets_faster_the_base_and_knee_are_right_after_the_next_probe() {
    let mut run = saturated();
    let faster_at = run.now();
    run.service.service = 0.025;
    run.run(1200.0, BASE_WINDOW.as_secs_f64() + 3.0);
    let trace = run.show(faster_at - 0.5);
    assert!(near(run.base(), 0.025, 0.05), "{trace}");
    assert!(near(run.knee() as f64, 20.0, 0.2), "{trace}");
    assert!(near(run.capacity(), 800.0, 0.05), "{trace}");
}

#[test]
fn a_settled_service_that_got_faster_follows_its_probe_as_deep_again_not_half_as_deep() {
    // Saturated at 20 workers × 50 ms; the service gets a fifth faster (40 ms, 500/s). The next
    // probe (at 0.9 of a knee now 25 % high) keeps the service saturated and finds a base a fifth
    // lower: another probe follows, deeper. Halving its depth is for a gate started into a flood,
    // whose knee may be many times too high; a settled gate's knee is off by a share, and the
    // follow-up goes as deep again (0.81 of the knee), not to 0.45 of it.
    let mut run = saturated();
    let faster_at = run.now();
    run.service.service = 0.040;
    let after = run.run(1000.0, BASE_WINDOW.as_secs_f64() + 3.0);
    let trace = run.show(faster_at - 0.5);
    let probing: Vec<&Step> = after.iter().filter(|s| s.learned.probing).collect();
    assert!(!probing.is_empty(), "{trace}");
    let deepest = probing
        .iter()
        .filter_map(|s| s.learned.ceiling)
        .min()
        .unwrap_or(0);
    assert!(deepest >= 15, "a probe went down to {deepest}\n{trace}");
    // The base follows the service down. (The first probe, still above the workers, measured
    // 44 ms, a queue in it; the follow-up's 40 ms are pooled with its rounds, the same service
    // within a tenth, until the next probe.)
    assert!(run.base() < 0.045, "{trace}");
}

#[test]
fn the_estimator_is_deterministic() {
    let a = saturated();
    let b = saturated();
    let learned = |r: &Run| r.trace.iter().map(|s| s.learned).collect::<Vec<_>>();
    assert_eq!(learned(&a), learned(&b));
}

/// One tick of a service completing 40 requests a tick (400/s) at `latency_ms`, with `in_flight`
/// requests in flight and nothing refused.
fn tick_at(i: u64, latency_ms: u64, in_flight: u64) -> TickSample {
    tick_of(i, 40, latency_ms, in_flight, false)
}

#[test]
fn a_latency_above_the_base_with_the_requests_in_flight_steady_is_not_taken_as_saturation() {
    // Settled at 50 ms and 20 in flight; then latency 30 % up (a queue signal) and the requests
    // in flight up with it by Little's law (26, above the knee by a fifth), but no longer
    // growing: demand and completions match, so the service keeps up.
    let (mut e, mut i) = fed(60, |i| tick_at(i, 50, 20));
    assert!(e.learned().settled);
    assert!(!e.learned().confirmed);
    for _ in 0..30 {
        e.observe(&tick_at(i, 65, 26));
        i += 1;
        assert!(!e.learned().confirmed, "confirmed at tick {i}");
    }
    // Three seconds of it are a slower service, and the base follows it (the rounds are clean).
    let base = e.learned().base_latency.unwrap_or_default();
    assert!(base > ms(55) && base < ms(65), "{:?}", e.learned());
    // A backlog growing by 10 requests a tick at the same completions (400 a second; latency
    // growing with it, by Little's law) is saturation.
    let mut in_flight = 26;
    for _ in 0..10 {
        in_flight += 10;
        e.observe(&tick_at(i, in_flight * 5 / 2, in_flight));
        i += 1;
    }
    assert!(e.learned().confirmed, "{:?}", e.learned());
}

/// One tick of `completed` requests at `latency_ms`, with `in_flight` in flight; `refused` says
/// whether the ceiling refused any.
fn tick_of(i: u64, completed: u64, latency_ms: u64, in_flight: u64, refused: bool) -> TickSample {
    TickSample {
        now: i * TICK,
        elapsed: TICK,
        completed,
        latency_sum: completed * latency_ms * 1_000_000,
        latency_count: completed,
        in_flight,
        ceiling_refused: refused,
        ceiling_refusals: 0,
        memory_refusals: 0,
        turned_away: refused,
        ceiling_reached_at: None,
    }
}

/// A new estimator fed `tick(i)` for ticks 1 to `last`, and the number of the next tick.
fn fed(last: u64, tick: impl Fn(u64) -> TickSample) -> (Estimator, u64) {
    let mut e = Estimator::new();
    for i in 1..=last {
        e.observe(&tick(i));
    }
    (e, last + 1)
}

/// One round of 50 requests (a tick at 500 rps) at a usual load: `latency_ms` each, 50 in flight.
fn round_of(i: u64, latency_ms: u64) -> TickSample {
    tick_of(i, 50, latency_ms, 50, false)
}

/// The base latency after rounds of `spread` ms by turn, then three rounds at 79 ms; asserts
/// the base was within 2 % of 100 ms before them (the rounds kept are not in equal numbers).
fn base_after_three_quick_rounds(spread: [u64; 3]) -> Learned {
    let (mut e, mut i) = fed(60, |i| round_of(i, spread[(i % 3) as usize]));
    let base = e.learned().base_latency.unwrap_or_default().as_secs_f64();
    assert!(near(base, 0.100, 0.02), "{:?}", e.learned());
    for _ in 0..3 {
        e.observe(&round_of(i, 79));
        i += 1;
    }
    e.learned()
}

#[test]
fn three_quick_rounds_within_the_noise_of_a_spread_out_service_do_not_replace_its_base() {
    // Rounds of 70, 100 and 130 ms by turn (a round's mean known to 30 %), then three at 79 ms,
    // each under 0.8 of the base: quick by chance, not a faster service. (Taken for one, every
    // round behind them was dropped and the base rested on the three quickest: on 1,000 rps at
    // 100 ms a base of 81 ms, a knee of 83 for 100 workers, and 0.84 of the capacity at 2x.)
    let learned = base_after_three_quick_rounds([70, 100, 130]);
    // They count as three rounds of the 31 the base is taken over (it moves by 5 %), not as the
    // whole of it.
    let base = learned.base_latency.unwrap_or_default().as_secs_f64();
    assert!(base > 0.090, "{learned:?}");
    // The same three rounds after rounds that hardly spread (98, 100 and 102 ms): a faster
    // service, followed at once.
    let learned = base_after_three_quick_rounds([98, 100, 102]);
    assert_eq!(learned.base_latency, Some(ms(79)), "{learned:?}");
}

#[test]
fn a_base_learned_low_is_corrected_by_the_rounds_of_a_usual_load_that_nothing_turns_away() {
    // Settled on 35 ms (the quick requests that complete first on a filling pipeline), then the
    // service's true 50 ms at the same 400 rps, with the requests in flight level: nothing is
    // turned away and no backlog grows, so these are the service's own latencies, not a queue.
    // (Rounds were once kept only when latency sat within a fifth of the base: every round of
    // the true latency was then left out and the base stayed at 35 ms, a knee 30 % low.)
    let (mut e, mut i) = fed(60, |i| tick_at(i, 35, 14));
    assert!(e.learned().settled);
    assert!(near(e.base_latency().unwrap_or(0.0), 35e6, 0.01));
    for _ in 0..60 {
        e.observe(&tick_at(i, 50, 20));
        i += 1;
        assert!(!e.learned().confirmed, "taken as saturation at tick {i}");
    }
    let learned = e.learned();
    assert!(
        near(e.base_latency().unwrap_or(0.0), 50e6, 0.01),
        "{learned:?}"
    );
    assert_eq!(learned.knee, Some(20), "{learned:?}");
}

#[test]
fn a_gate_started_into_a_slight_overload_probes_while_its_queue_still_grows_not_after_the_start_up()
{
    // 64 workers at 20 ms, started at 1.1 times their capacity (the `hover` scenario): the
    // unlearned ceiling (1,000) is far off, and the start-up lasts five latencies of a latency
    // that climbs with the queue. The requests in flight grow by a hundred a tick while the
    // completions stay level, so the latency they imply by Little's law climbs tick after tick:
    // that is a flood whatever the start-up's rounds say. (Probed only after the start-up, on the
    // fifth tick, the flood had put 630 requests in flight for 64 workers, and a first second of
    // late answers took the scenario's p99 past its SLO.)
    let learned = observed(&[(255, 20, 102), (276, 42, 198), (276, 75, 322)]).learned();
    assert!(learned.probing, "{learned:?}");
    // Its ceiling is a share of the knee from the lowest latency seen (the one least inflated by
    // the queue) and the best rate: below the 64 workers, so that the queue drains.
    let knee = 2760.0 * 0.020;
    assert_eq!(
        learned.ceiling,
        Some((PROBE_DEPTH * knee) as u64),
        "{learned:?}"
    );
}

#[test]
fn a_flood_that_slows_a_small_service_is_told_from_its_first_ticks_not_after_fifty_latencies() {
    // 10 workers at 50 ms, started at five times their capacity: the requests in flight grow by
    // ninety a tick, and the queue slows the service (10 % per W queued), so the completions
    // fall, 14, 9, 7 a tick. The first fifty latencies, the climb's reference, took nine ticks to
    // come in; by then 873 requests were in flight for 10 workers, and the service, slowed
    // ninefold, took the rest of the run to drain them (0.08 of the capacity answered in time).
    // Until those fifty are in, the climb is measured against the lowest latency the requests
    // in flight have implied, which in a flood is never below the service's (the first tick's:
    // 92 in flight at 140 a second, 0.66 s).
    let learned = observed(&[(14, 41, 92), (9, 131, 178), (7, 202, 267)]).learned();
    assert!(learned.probing, "{learned:?}");
    assert_eq!(learned.probes, 1, "{learned:?}");
}

/// A new estimator fed ticks of (completions, their mean latency in ms, requests in flight), none
/// refused, from tick 1.
fn observed(ticks: &[(u64, u64, u64)]) -> Estimator {
    let mut e = Estimator::new();
    for (i, &(completed, latency_ms, in_flight)) in (1..).zip(ticks) {
        e.observe(&tick_of(i, completed, latency_ms, in_flight, false));
    }
    e
}

/// A new estimator fed ticks of (completions, their mean latency in ms, requests in flight), none
/// refused, from tick 1; asserts after each that no probe has begun.
fn no_probe_through(ticks: &[(u64, u64, u64)]) {
    let mut e = Estimator::new();
    for (i, &(completed, latency_ms, in_flight)) in (1..).zip(ticks) {
        e.observe(&tick_of(i, completed, latency_ms, in_flight, false));
        assert_eq!(e.learned().probes, 0, "tick {i}: {:?}", e.learned());
    }
}

#[test]
fn a_pipeline_filling_at_the_usual_load_is_no_flood_though_its_requests_in_flight_grow() {
    // 1,000 workers at 100 ms (exponential), started at half their capacity: the requests in
    // flight grow by more than their noise while the pipeline fills, but the completions rise
    // with them, so the latency Little's law implies falls from the first tick's lagging rate
    // towards the service's: nothing climbs.
    let ticks = [
        (184, 37, 316),
        (384, 58, 432),
        (457, 75, 475),
        (484, 88, 491),
        (494, 95, 497),
        (498, 98, 499),
        (500, 100, 500),
        (500, 100, 500),
    ];
    no_probe_through(&ticks);
}

#[test]
fn a_slow_services_first_quick_completions_are_no_measure_of_a_climb() {
    // 100 workers at 500 ms (exponential), started at half their capacity: the first ticks
    // complete a request or two, the quickest of those sent (8 ms), while the pipeline fills by
    // several requests a tick and the latency the requests in flight imply rises with it.
    // Against that first latency the filling pipeline is a climb of two hundred times, so the
    // level alone tells nothing; the climb is measured against the mean of the first fifty
    // latencies, and must grow out of the count's noise on every tick, which a fill's slowing
    // growth does not. (With the lowest tick for reference and the growth counted over the run,
    // a warm-up like this one probed with a ceiling of one request, and the probe's rounds of
    // fifty latencies then took the rest of the run: 0.15 of the capacity answered at twice it.)
    let ticks = [
        (1, 8, 6),
        (1, 40, 14),
        (1, 60, 20),
        (1, 90, 34),
        (3, 120, 40),
        (5, 150, 44),
        (7, 200, 47),
        (8, 250, 49),
        (9, 300, 50),
        (10, 400, 50),
        (10, 450, 50),
        (10, 500, 50),
        (10, 500, 50),
    ];
    no_probe_through(&ticks);
}

#[test]
fn a_burst_at_the_usual_load_of_a_small_service_is_no_flood_before_settling() {
    // 10 workers at 50 ms, at half their capacity (about 5 in flight): a burst of arrivals takes
    // the requests in flight to 9 and then 18 on two ticks in a row, the latency they imply
    // rising with them, while the completions have yet to catch up. Nine requests from nine is
    // three standard deviations of the count, but four from five was not: on a count this small
    // one tick's jump is a burst, and a flood grows out of its noise on every tick. (Taken for a
    // flood, the start-up probe held one request in flight for seconds: 0.81 of the capacity
    // answered at twice it.)
    let mut ticks = vec![(10, 45, 5); 6];
    ticks.extend([
        (7, 50, 5),
        (7, 50, 9),
        (7, 50, 18),
        (12, 60, 12),
        (10, 55, 6),
    ]);
    no_probe_through(&ticks);
}

#[test]
fn a_cold_probe_whose_knee_is_all_queue_halves_the_requests_in_flight_instead() {
    // 50 workers at 1 ms, started into five times their capacity: the unlearned ceiling (1,000)
    // fills in the first milliseconds, so the first latencies are all queue (55 ms for a 1 ms
    // service), and the knee from them (26,000 a second × 55 ms) is above the requests in
    // flight. A probe at a share of it would drain nothing and measure the queue as the base.
    // (It did: the probe's ceiling rose to 1,301, above the unlearned one, and the gate settled
    // on 90 ms; 0.28 of the capacity answered in time.) It halves the requests in flight
    // instead, and the probes that follow go deeper while each finds a clearly lower base.
    let mut e = Estimator::new();
    e.observe(&tick_of(1, 1747, 55, 1000, true));
    e.observe(&tick_of(2, 2620, 57, 1001, true));
    let learned = e.learned();
    assert!(learned.probing, "{learned:?}");
    assert_eq!(learned.ceiling, Some(500), "{learned:?}");
}

#[test]
fn a_cold_probe_starts_from_the_knee_its_first_requests_show_not_from_the_queue_of_their_tick() {
    // 50 workers at 1 ms, started into twice their capacity: the unlearned ceiling (1,000) fills
    // within the first tick, whose mean latency (55 ms) is the queue's, and a knee from it is
    // above the requests in flight. But its requests were admitted at every level from one to
    // the ceiling, and their latencies are flat up to the 50 workers and climb past them: the
    // probe starts a share below that knee. (From the tick's figures alone it halved the requests
    // in flight to 500, and then 250, ...: the chain took seconds, and the service, slowed by
    // the queue, answered 0.37 of its capacity in time. Now 0.82 to 0.88, seeds 1 to 3.)
    let (latencies, levels): (Vec<u64>, Vec<u32>) = (1..=1000u32)
        .map(|n| (1_000_000 + 20_000 * u64::from(n.saturating_sub(50)), n))
        .unzip();
    let pairs: Vec<(u32, u64)> = levels
        .iter()
        .copied()
        .zip(latencies.iter().copied())
        .collect();
    let knee = sluicegate::hinge::fit(&pairs).map(|h| h.knee);
    let mut e = Estimator::new();
    e.observe_with_levels(&tick_of(1, 1747, 55, 1000, true), &latencies, &levels);
    e.observe_with_levels(&tick_of(2, 2620, 57, 1001, true), &[], &[]);
    let learned = e.learned();
    assert!(learned.probing, "{learned:?}");
    assert!(knee.is_some_and(|k| (47.5..=52.5).contains(&k)), "{knee:?}");
    assert_eq!(
        learned.ceiling,
        knee.map(|k| (PROBE_DEPTH * k) as u64),
        "{learned:?}"
    );
}

#[test]
fn a_cold_probe_takes_the_latency_of_the_first_requests_admitted_not_that_of_the_quickest() {
    // 40 workers at 50 ms, started into a flood of twice their capacity. The first tick sees
    // only the quickest of the first 40 requests (every third of them, 5 to 31 ms: a tick's mean
    // of 18 ms, the survivors of the start); the second the rest of them (61 ms each)
    // and 40 that queued behind them. The requests admitted at the lowest levels (the fifth of
    // the pairs) mix quick and slow like the service, and the probe's ceiling is a share of the
    // capacity times their mean, not times the first tick's (which held a 10-worker service at
    // one to three requests for seconds).
    let quick = |n: u32| n % 3 == 1;
    let latency_ms = |n: u32| -> u64 {
        if n > 40 {
            60 + u64::from(n - 40)
        } else if quick(n) {
            5 + 2 * u64::from(n / 3)
        } else {
            61
        }
    };
    let first: Vec<u32> = (1..=40).filter(|&n| quick(n)).collect();
    let second: Vec<u32> = (1..=80).filter(|&n| n > 40 || !quick(n)).collect();
    let mut pairs: Vec<(u32, u64)> = Vec::new();
    let mut e = Estimator::new();
    for (i, levels) in [(1, &first), (2, &second)] {
        let latencies: Vec<u64> = levels.iter().map(|&n| latency_ms(n) * 1_000_000).collect();
        pairs.extend(levels.iter().copied().zip(latencies.iter().copied()));
        let tick = TickSample {
            latency_sum: latencies.iter().sum(),
            ..tick_of(i, latencies.len() as u64, 0, 200 + i, true)
        };
        e.observe_with_levels(&tick, &latencies, levels);
    }
    assert_eq!(
        sluicegate::hinge::fit(&pairs),
        None,
        "no knee from the pairs alone"
    );
    let first_tick = first.iter().map(|&n| latency_ms(n)).sum::<u64>() as f64 / first.len() as f64;
    pairs.sort_unstable();
    let lowest = &pairs[..pairs.len() / 5];
    let least_queued =
        lowest.iter().map(|&(_, l)| l as f64).sum::<f64>() / lowest.len() as f64 / 1e9;
    assert!(
        least_queued > 2.0 * first_tick / 1e3,
        "{least_queued} s, {first_tick} ms"
    );
    let learned = e.learned();
    assert!(learned.probing, "{learned:?}");
    let capacity = learned.capacity.unwrap_or_default();
    assert_eq!(
        learned.ceiling,
        Some((capacity * least_queued * PROBE_DEPTH) as u64),
        "{learned:?}"
    );
}

#[test]
fn an_estimators_debug_counts_its_cold_pairs_rather_than_listing_them() {
    let (latencies, levels): (Vec<u64>, Vec<u32>) = (1..=1000u32).map(|n| (1_000_000, n)).unzip();
    let mut e = Estimator::new();
    e.observe_with_levels(&tick_of(1, 1000, 1, 20, false), &latencies, &levels);
    let shown = format!("{e:?}");
    assert!(shown.contains("ColdPairs(1000 pairs)"), "{shown}");
    assert!(shown.len() < 10_000, "{} characters", shown.len());
}

/// Ticks of a service at 400 rps and 50 ms with 20 in flight, until its first clean round and no
/// further: past its start-up, not yet settled.
fn just_past_the_start() -> (Estimator, u64) {
    let (e, i) = fed(5, |i| tick_at(i, 50, 20));
    assert!(!e.learned().settled, "{:?}", e.learned());
    (e, i)
}

#[test]
fn one_tick_of_many_requests_in_flight_before_settling_is_noise_and_two_in_a_row_a_flood() {
    // Before the base is settled a climb of the requests in flight means a flood the unlearned
    // ceiling does not stop, and the estimator probes for the base. One tick of it is the noise
    // of a small count; a flood lasts, and grows.
    let (mut e, i) = just_past_the_start();
    e.observe(&tick_at(i, 50, 100));
    e.observe(&tick_at(i + 1, 50, 20));
    assert_eq!(e.learned().probes, 0, "{:?}", e.learned());
    let (mut e, i) = just_past_the_start();
    e.observe(&tick_at(i, 50, 100));
    // 40 more: three standard deviations of the 100 the climb began with, and then some.
    e.observe(&tick_at(i + 1, 50, 140));
    assert!(e.learned().probing, "{:?}", e.learned());
}

#[test]
fn a_queue_that_builds_and_drains_before_settling_is_no_flood() {
    // A stretch of slow requests at the usual load: the requests in flight climb for two ticks,
    // no longer growing, and drain. (Probed as a flood, such a stretch on 10 workers at 0.6 of
    // their capacity held the ceiling at one request, from a knee learned at the light load,
    // for 3.5 s.)
    let (mut e, mut i) = just_past_the_start();
    for in_flight in [100, 105, 60, 20, 20] {
        e.observe(&tick_at(i, 50, in_flight));
        i += 1;
        assert_eq!(e.learned().probes, 0, "{in_flight}: {:?}", e.learned());
    }
}

#[test]
fn a_climb_before_settling_that_holds_level_is_a_flood_once_it_lasts_ten_latencies() {
    // A flood held level by something other than the ceiling (a fixed pool of clients): the
    // climb does not grow, but it lasts. Ten of the first round's 50 ms latencies: five ticks.
    let (mut e, mut i) = just_past_the_start();
    for _ in 0..5 {
        e.observe(&tick_at(i, 50, 100));
        i += 1;
        assert_eq!(e.learned().probes, 0, "tick {i}: {:?}", e.learned());
    }
    e.observe(&tick_at(i, 50, 100));
    assert!(e.learned().probing, "{:?}", e.learned());
}

#[test]
fn a_climb_before_settling_that_meets_the_ceiling_is_a_flood_at_once() {
    // The unlearned ceiling refuses: demand exceeds what it lets in, and the requests in flight
    // cannot grow any further to show it.
    let (mut e, i) = just_past_the_start();
    e.observe(&tick_of(i, 40, 50, 100, true));
    e.observe(&tick_of(i + 1, 40, 50, 100, true));
    assert!(e.learned().probing, "{:?}", e.learned());
}

#[test]
fn a_climb_is_measured_against_the_first_rounds_latency_not_only_its_requests_in_flight() {
    // The first round completed with 2 in flight (a Poisson count at 100 rps and 50 ms, mean 5):
    // 20 ms by Little's law. Then 7 in flight, a usual count: 70 ms, over three times 20 ms, but
    // well within the first round's own 50 ms.
    // Past the start-up (a quarter of a second) and a first round of 50 latencies.
    let (mut e, mut i) = fed(9, |i| tick_of(i, 10, 50, 2, false));
    assert!(!e.learned().settled, "{:?}", e.learned());
    for _ in 0..40 {
        e.observe(&tick_of(i, 10, 50, 7, false));
        i += 1;
    }
    assert_eq!(e.learned().probes, 0, "{:?}", e.learned());
    assert!(e.learned().settled, "{:?}", e.learned());
}

/// Settled at 2000 rps and 50 ms with 100 in flight, nothing refused.
fn settled_at_2000() -> (Estimator, u64) {
    let (e, i) = fed(60, |i| tick_of(i, 200, 50, 100, false));
    assert!(
        e.learned().settled && !e.learned().confirmed,
        "{:?}",
        e.learned()
    );
    (e, i)
}

/// Settled at 2000 rps and 50 ms (200 completions a tick: the smoothed rate follows each tick),
/// then saturated: the ceiling refusing, latency a queue's 65 ms, 130 in flight, for 3 s.
fn saturated_at_2000() -> (Estimator, u64) {
    let (mut e, mut i) = settled_at_2000();
    for _ in 0..30 {
        e.observe(&tick_of(i, 200, 65, 130, true));
        i += 1;
    }
    assert!(e.learned().confirmed, "{:?}", e.learned());
    (e, i)
}

#[test]
fn one_tick_of_few_completions_is_noise_and_three_in_a_row_a_slower_service() {
    // A service that slows completes less for good; the highest of a noisy rate is beaten by a
    // fifth on a single tick now and then (seen on the heavy-tail scenario: a probe every 1.2 s
    // through its overload, each measuring the base on a handful of requests).
    let (mut e, mut i) = saturated_at_2000();
    let probes = e.learned().probes;
    for _ in 0..20 {
        e.observe(&tick_of(i, 100, 65, 130, true));
        i += 1;
        e.observe(&tick_of(i, 200, 65, 130, true));
        i += 1;
    }
    assert_eq!(e.learned().probes, probes, "{:?}", e.learned());
    let (mut e, mut i) = saturated_at_2000();
    for _ in 0..3 {
        e.observe(&tick_of(i, 100, 65, 130, true));
        i += 1;
    }
    assert!(e.learned().probes > probes, "{:?}", e.learned());
}

#[test]
fn a_probe_measures_the_base_on_the_median_of_several_rounds_not_on_its_first() {
    // A service whose times are widely spread: one round in three is slow (80 ms against 50),
    // which ever round of the probe comes first. The base the probe finds stays 50 ms.
    for phase in 0..3u64 {
        let (mut e, mut i) = saturated_at_2000();
        while !e.learned().probing {
            e.observe(&tick_of(i, 200, 65, 130, true));
            i += 1;
            assert!(i < 400, "no probe: {:?}", e.learned());
        }
        let mut n = phase;
        while e.learned().probing {
            let latency = if n % 3 == 0 { 80 } else { 50 };
            e.observe(&tick_of(i, 180, latency, 90, true));
            i += 1;
            n += 1;
            assert!(i < 800, "the probe never ended: {:?}", e.learned());
        }
        let learned = e.learned();
        assert_eq!(
            learned.base_latency,
            Some(ms(50)),
            "phase {phase}: {learned:?}"
        );
    }
}

/// A tick of 200 completions at a queue's 65 ms, 130 in flight, the ceiling refusing `refusals`.
fn refusing(i: u64, refusals: u64) -> TickSample {
    TickSample {
        ceiling_refusals: refusals,
        ..tick_of(i, 200, 65, 130, true)
    }
}

#[test]
fn a_sliver_of_refusals_confirms_saturation_only_when_it_lasts_and_a_flood_at_once() {
    // 1 refusal of 201 requests: a burst at the usual load passing the ceiling for a moment.
    let (mut e, i) = settled_at_2000();
    e.observe(&refusing(i, 1));
    assert!(!e.learned().confirmed, "{:?}", e.learned());
    e.observe(&tick_of(i + 1, 200, 50, 100, false));
    assert!(!e.learned().confirmed, "{:?}", e.learned());
    // The same sliver on two ticks in a row: a service at its capacity.
    let (mut e, i) = settled_at_2000();
    e.observe(&refusing(i, 1));
    e.observe(&refusing(i + 1, 1));
    assert!(e.learned().confirmed, "{:?}", e.learned());
    // A flood turns away a large share at once.
    let (mut e, i) = settled_at_2000();
    e.observe(&refusing(i, 100));
    assert!(e.learned().confirmed, "{:?}", e.learned());
    // Refusals not counted (0) count in full, as before the count existed.
    let (mut e, i) = settled_at_2000();
    e.observe(&refusing(i, 0));
    assert!(e.learned().confirmed, "{:?}", e.learned());
}

/// A tick of a small, quick service (1 ms a request) at 6,000 rps: `latency_ms` a request, 12 in
/// flight at its end, the ceiling refusing 10 requests (1.6 %, more than a sliver).
fn quick_burst(i: u64, latency_ms: u64) -> TickSample {
    TickSample {
        ceiling_refusals: 10,
        ..tick_of(i, 600, latency_ms, 12, true)
    }
}

#[test]
fn a_burst_caught_at_the_end_of_ticks_whose_own_latency_shows_no_queue_is_no_saturation() {
    // Settled at 6,000 rps and 1 ms (a knee of 6 from the usual load), then two ticks each
    // ending on a burst of 12 in flight that the ceiling cut, while the 600 requests each tick
    // completed took the base latency: on a service a hundred times quicker than the tick,
    // those requests waited in any queue the tick held, and they show none. (The requests in
    // flight implied a latency of 2 ms, and two such snapshots confirmed the usual load as the
    // capacity: 10,000 rps at 1 ms, 10 workers, 0.6 % of requests refused at half the capacity.)
    let (mut e, i) = fed(60, |i| tick_of(i, 600, 1, 6, false));
    assert!(
        e.learned().settled && !e.learned().confirmed,
        "{:?}",
        e.learned()
    );
    e.observe(&quick_burst(i, 1));
    e.observe(&quick_burst(i + 1, 1));
    assert!(!e.learned().confirmed, "{:?}", e.learned());
    // The same snapshots while the tick's requests did wait (2 ms, twice the base): a flood.
    let (mut e, i) = fed(60, |i| tick_of(i, 600, 1, 6, false));
    e.observe(&quick_burst(i, 2));
    e.observe(&quick_burst(i + 1, 2));
    assert!(e.learned().confirmed, "{:?}", e.learned());
}

#[test]
fn a_refused_burst_at_a_load_under_the_capacity_does_not_lower_it() {
    // Saturated at 2000 rps; then the load falls to 1500 rps, at the base latency, with the
    // ceiling refusing a burst on every tick. A tick that refuses with no queue to show is no
    // saturated tick: its rate is a lower bound and must not pull the capacity down to the load
    // (counted, the capacity fell to the load and the ceiling with it, which refused more). The
    // latency at its base while the ceiling refuses also shows room, which may raise it.
    let (mut e, mut i) = saturated_at_2000();
    let before = e.learned().capacity.unwrap_or(0.0);
    assert!(near(before, 2000.0, 0.05), "{:?}", e.learned());
    for _ in 0..20 {
        e.observe(&tick_of(i, 150, 50, 75, true));
        i += 1;
    }
    let learned = e.learned();
    assert!(learned.confirmed, "{learned:?}");
    assert!(
        learned.capacity.unwrap_or(0.0) >= 0.97 * before,
        "{learned:?}"
    );
}

/// One tick of `completed` requests whose mean latency is 40, 50 or 60 ms by turn (a service
/// whose tick means spread by a fifth around 50 ms), `in_flight` in flight, `refused` as given.
fn spread_tick(i: u64, completed: u64, in_flight: u64, refused: bool) -> TickSample {
    let latency_ms = [40, 50, 60][(i % 3) as usize];
    tick_of(i, completed, latency_ms, in_flight, refused)
}

#[test]
fn a_latency_above_the_base_by_less_than_its_noise_does_not_lower_the_capacity() {
    // Settled on a service whose tick means spread by a fifth, then saturated (a queue of 80 ms,
    // well out of that noise); then the load falls to 1500 rps, the queue drains, and the ceiling
    // refuses a burst on each tick while latency is up by less than its noise. Those ticks may
    // be a load under the capacity: their rates do not lower it.
    let (mut e, mut i) = fed(90, |i| spread_tick(i, 200, 100, false));
    let settled = e.learned();
    assert!(settled.settled && !settled.confirmed, "{settled:?}");
    let base = settled.base_latency.unwrap_or_default().as_secs_f64();
    assert!(near(base, 0.050, 0.02), "{settled:?}");
    for _ in 0..30 {
        e.observe(&tick_of(i, 200, 80, 160, true));
        i += 1;
    }
    let before = e.learned();
    assert!(before.confirmed, "{before:?}");
    let before = before.capacity.unwrap_or(0.0);
    // The queue drains, and the latency of the last several ticks, which tells a full service,
    // forgets it.
    for _ in 0..15 {
        e.observe(&spread_tick(i, 150, 75, false));
        i += 1;
    }
    for _ in 0..12 {
        // 52 ms on average: above the base by 4 %, above half the queue the ceiling allows (a
        // full service, had the latency been steady), but within the noise of the tick means.
        let tick = spread_tick(i, 150, 80, true);
        e.observe(&TickSample {
            latency_sum: tick.latency_sum + 150 * 2_000_000,
            ..tick
        });
        i += 1;
    }
    let learned = e.learned();
    assert!(
        learned.capacity.unwrap_or(0.0) >= 0.97 * before,
        "from {before}: {learned:?}"
    );
}

#[test]
fn after_an_overload_a_sliver_of_refusals_does_not_keep_saturation_confirmed() {
    // The overload ends: the load falls to 1200 rps while the queue drains (65 ms, a queue's
    // latency) and a burst passes the ceiling on every other tick, 1 request in 121. Slivers of
    // refusals that do not last are no saturation, before or after it was confirmed: once the
    // rate window has passed the ceiling leaves room again. (Counted, each sliver renewed the
    // confirmation, and the ceiling held at a knee measured on the falling load.)
    let (mut e, mut i) = saturated_at_2000();
    for n in 0..40 {
        let tick = if n % 2 == 0 {
            TickSample {
                ceiling_refusals: 1,
                ..tick_of(i, 120, 65, 80, true)
            }
        } else {
            tick_of(i, 120, 65, 80, false)
        };
        e.observe(&tick);
        i += 1;
    }
    let learned = e.learned();
    assert!(!learned.confirmed, "{learned:?}");
}

#[test]
fn a_rate_a_fifth_under_the_highest_of_a_noisy_rate_but_near_the_saturated_mean_is_no_slower_service(
) {
    // Saturated at a rate that swings between 2400 and 1600 rps from tick to tick (mean 2000):
    // the highest smoothed rate is 2400. Ticks at 1700 rps are a fifth under that highest, but
    // well within the saturated mean's fifth: the service did not slow, and no probe follows.
    let (mut e, mut i) = settled_at_2000();
    for n in 0..30 {
        let completed = if n % 2 == 0 { 240 } else { 160 };
        e.observe(&tick_of(i, completed, 65, 130, true));
        i += 1;
    }
    let learned = e.learned();
    assert!(learned.confirmed, "{learned:?}");
    let probes = learned.probes;
    for _ in 0..5 {
        e.observe(&tick_of(i, 170, 65, 130, true));
        i += 1;
    }
    let learned = e.learned();
    assert_eq!(learned.probes, probes, "{learned:?}");
    assert!(!learned.probing, "{learned:?}");
}

#[test]
fn room_shown_under_saturation_raises_the_saturated_capacity_so_the_next_queue_keeps_it() {
    // Saturated at 2000 rps; then the ceiling refuses while latency is back at its base for a few
    // ticks: the service has room, and the capacity grows. The queue that follows, at the grown
    // rate, confirms saturation again, and the capacity stays at the grown figure rather than
    // dropping back to the mean measured before the room was shown (it swung that way, tick by
    // tick, in `hover`).
    let (mut e, mut i) = saturated_at_2000();
    let before = e.learned().capacity.unwrap_or(0.0);
    let mut grown = before;
    while grown <= 1.05 * before {
        e.observe(&tick_of(i, 200, 50, 100, true));
        i += 1;
        grown = e.learned().capacity.unwrap_or(0.0);
        assert!(i < 200, "no growth: {:?}", e.learned());
    }
    for _ in 0..3 {
        e.observe(&tick_of(i, (grown / 10.0) as u64, 65, 130, true));
        i += 1;
    }
    let learned = e.learned();
    assert!(learned.confirmed, "{learned:?}");
    assert!(
        learned.capacity.unwrap_or(0.0) >= 0.98 * grown,
        "from {before}, grown to {grown}: {learned:?}"
    );
}

#[test]
fn the_confirmed_ceiling_is_the_knee_plus_its_headroom_to_the_nearest_request() {
    // Headroom: half the square root of the knee, and half a request (no refusals: load 1).
    assert_eq!(confirmed_ceiling(10.0, 0.0, 1.0), 12); // 12.08
    assert_eq!(confirmed_ceiling(100.0, 0.0, 1.0), 106); // 105.5
    assert_eq!(confirmed_ceiling(400.0, 0.0, 1.0), 411); // 410.5
    assert_eq!(confirmed_ceiling(1000.0, 0.0, 1.0), 1016); // 1016.3
    assert_eq!(confirmed_ceiling(0.0, 0.0, 1.0), 1);
}

#[test]
fn the_knee_error_joins_the_headroom_in_quadrature() {
    // 100 requests known to 4 %: 2 × 4 = 8 requests of error, 5.5 of headroom; √(8² + 5.5²)
    // = 9.71.
    assert_eq!(confirmed_ceiling(100.0, 0.04, 1.0), 110);
    // On a small knee the square-root headroom dwarfs the error: 12.08 becomes 12.23.
    assert_eq!(confirmed_ceiling(10.0, 0.04, 1.0), 12);
    // On a large one the error rules: 1,000 known to 2 %, 40 and 16.3: 1,043.2.
    assert_eq!(confirmed_ceiling(1000.0, 0.02, 1.0), 1043);
    // A negative or undefined error is none.
    assert_eq!(confirmed_ceiling(100.0, -1.0, 1.0), 106);
    assert_eq!(confirmed_ceiling(100.0, f64::NAN, 1.0), 106);
}

#[test]
fn a_dense_overload_keeps_only_the_queue_that_refills_a_freed_worker() {
    // At ten requests offered per completion the workers run dry one time in twenty with a queue
    // of ln 20 ÷ ln 10 − 1 = 0.3 requests: 0.8 above the knee with the rounding half request.
    assert!(
        (refill_headroom(10.0) - 0.801).abs() < 0.001,
        "{}",
        refill_headroom(10.0)
    );
    // 100.8, not 105.5; 1,000.8, not 1,016.3; 10.8, not 12.08.
    assert_eq!(confirmed_ceiling(100.0, 0.0, 10.0), 101);
    assert_eq!(confirmed_ceiling(1000.0, 0.0, 10.0), 1001);
    assert_eq!(confirmed_ceiling(10.0, 0.0, 10.0), 11);
    // At twice the capacity arrivals leave gaps: 3.8 requests, still fewer than 5.5 on a hundred
    // workers; on ten the square-root rule's 2.08 is the smaller.
    assert_eq!(confirmed_ceiling(100.0, 0.0, 2.0), 104);
    assert_eq!(confirmed_ceiling(10.0, 0.0, 2.0), 12);
    // The knee's error stays whatever the load: 100 known to 4 %, √(8² + 0.8²) = 8.04.
    assert_eq!(confirmed_ceiling(100.0, 0.04, 10.0), 108);
    // Never less than the half request of the rounding; nothing offered beyond the completions,
    // or an undefined load, leaves the square-root rule alone.
    assert_eq!(refill_headroom(1e9), 0.5);
    assert_eq!(confirmed_ceiling(100.0, 0.0, 1.0), 106);
    assert_eq!(confirmed_ceiling(100.0, 0.0, 0.5), 106);
    assert_eq!(confirmed_ceiling(100.0, 0.0, f64::NAN), 106);
}

#[test]
fn a_queue_held_by_the_memory_ceiling_confirms_saturation_as_one_held_by_the_ceiling_would() {
    // 1000 workers × 20 ms (50,000 rps), a calm start at 0.6 of that, then a flood of 5 times
    // it. Memory holds the requests in flight at 1,400, below the ceiling of a capacity not yet
    // confirmed (twice the knee): the refusals are memory's, and the queue the requests in flight
    // show (Little's law) is saturation all the same, on the second tick as with the ceiling.
    const MEMORY_CAP: u64 = 1400;
    let mut run = Run::new(1000, ms(20));
    run.run(30_000.0, 5.0);
    assert!(!run.learned.confirmed, "{}", run.show(4.0));
    let step = run.now();
    let mut confirmed_at = None;
    for tick in 1..=5 {
        let learned = run.learned.ceiling.unwrap_or(UNLEARNED_CEILING);
        let mut sample = run.service.tick(250_000.0, learned.min(MEMORY_CAP));
        if learned > MEMORY_CAP {
            sample.memory_refusals = sample.ceiling_refusals;
            sample.ceiling_refusals = 0;
            sample.ceiling_refused = false;
        }
        run.learned = run.estimator.observe(&sample);
        run.trace.push(Step {
            at: sample.now as f64 / 1e9,
            sample,
            learned: run.learned,
        });
        if run.learned.confirmed && confirmed_at.is_none() {
            confirmed_at = Some(tick);
        }
    }
    let trace = run.show(step - 0.3);
    assert!(
        confirmed_at.is_some_and(|t| t <= 2),
        "confirmed at tick {confirmed_at:?} of the flood\n{trace}"
    );
    // And the ceiling it then sets is the knee's, below what memory held.
    let ceiling = run.learned.ceiling.unwrap_or(UNLEARNED_CEILING);
    assert!(ceiling < MEMORY_CAP, "{trace}");
    assert!(near(run.knee() as f64, 1000.0, 0.05), "{trace}");
}

#[test]
fn a_base_learned_at_a_lighter_load_does_not_let_a_flood_decay_the_capacity_into_what_is_admitted()
{
    // 100 workers, 90 ms a request at the usual load and 100 ms near the knee (C = 1,000 rps), as
    // a service with warm caches and idle cores is quicker at a light load. The base learned at
    // the usual load is then 10 % below the latency of plain work at the knee: the knee is set
    // low, the ceiling holds the service below its capacity, its plain latency reads as a queue,
    // and the rate the ceiling admits becomes the capacity, tick after tick (it fell from 980 to
    // 690 in 10 s, and on). The decay calls for a probe, which measures the base where the
    // service now works.
    let mut run = Run::new(100, ms(90));
    run.run(600.0, 10.0);
    let flood = run.now();
    run.service.service = 0.1;
    run.run(5000.0, 20.0);
    let trace = run.show(flood - 0.3);
    assert!(run.learned.probes >= 1, "{trace}");
    // From 12 s into the flood on, outside the probes that re-measure the base now and then.
    for step in run.outside_probes_after(flood + 12.0) {
        let capacity = step.learned.capacity.unwrap_or(0.0);
        assert!(near(capacity, 1000.0, 0.05), "at {:.1}s\n{trace}", step.at);
        assert!(
            step.learned.ceiling.unwrap_or(0) >= 100,
            "at {:.1}s\n{trace}",
            step.at
        );
    }
    assert!(near(run.base() * 1e3, 100.0, 0.05), "{trace}");
}

#[test]
fn a_knee_learned_low_within_its_noise_still_leaves_the_ceiling_above_the_workers() {
    // 100 workers, 100 ms a request (C = 1,000 rps). At the usual load the service time strays
    // from tick to tick (80 to 122 ms, as a few dozen requests a tick do), and the median of the
    // rounds sits 6 % low: an unlucky warm-up, within twice the noise of its rounds. The knee is
    // then 92, and a ceiling of the knee and its queue alone (97) holds the service below its
    // workers: its plain latency reads as a queue, and the rate the ceiling admits becomes the
    // capacity, falling tick by tick (980 to 962 in 4 s). The knee's error in the headroom keeps
    // the ceiling above the workers from the first tick of the flood on, and the capacity
    // measured is the service's.
    const STRAYS_MS: [f64; 10] = [
        80.0, 84.0, 88.0, 91.0, 94.0, 96.0, 100.0, 104.0, 110.0, 122.0,
    ];
    let mut run = Run::new(100, ms(100));
    for tick in 0..100 {
        run.service.service = STRAYS_MS[tick * 7 % STRAYS_MS.len()] / 1e3;
        run.run(600.0, 0.1);
    }
    let base = run.base() * 1e3;
    assert!((93.0..97.0).contains(&base), "{}", run.show(0.0));
    let noise = run.learned.knee_noise;
    assert!(noise > 0.02, "knee noise {noise}\n{}", run.show(9.0));
    let flood = run.now();
    run.service.service = 0.1;
    run.run(5000.0, 10.0);
    let trace = run.show(flood - 0.3);
    let saturated = run
        .trace
        .iter()
        .filter(|s| s.at > flood && s.learned.confirmed && !s.learned.probing);
    for step in saturated {
        assert!(
            step.learned.ceiling.unwrap_or(0) > 100,
            "at {:.1}s\n{trace}",
            step.at
        );
    }
    for step in run.outside_probes_after(flood + 2.0) {
        let capacity = step.learned.capacity.unwrap_or(0.0);
        assert!(near(capacity, 1000.0, 0.03), "at {:.1}s\n{trace}", step.at);
    }
}

#[test]
fn the_last_tick_of_an_overload_does_not_pull_the_capacity_down() {
    // 1,000 workers × 20 ms (50,000 rps), saturated by a flood of twice that. The flood ends: the
    // next tick starts with the ceiling full and refuses some requests (60 of the first few
    // milliseconds'), then the queue drains and workers idle on the usual load, and the tick ends
    // with 700 requests in flight, below the knee. Its 3,400 completions are a lower bound of the
    // capacity, not a saturated tick's; counted, they took a fifth of the gap (3,200 rps) off it.
    let mut run = Run::new(1000, ms(20));
    run.run(30_000.0, 5.0);
    run.run(100_000.0, 5.0);
    assert!(run.learned.confirmed, "{}", run.show(4.5));
    let before = run.capacity();
    let mut end = run.trace.last().unwrap().sample;
    end.now += TICK;
    end.completed = 3400;
    end.latency_count = 3400;
    end.latency_sum = 3400 * 20_400_000;
    end.in_flight = 700;
    end.ceiling_refused = true;
    end.ceiling_refusals = 60;
    end.turned_away = true;
    let learned = run.estimator.observe(&end);
    let capacity = learned.capacity.unwrap_or(0.0);
    assert!(near(capacity, before, 0.001), "{capacity} after {before}");
}

#[test]
fn a_knee_known_to_a_few_completions_never_lifts_the_ceiling_above_the_unconfirmed_one() {
    // 10 workers × 1 s (10 rps): a 100 ms tick completes a request, or none, or two. The first
    // saturated ticks measure the capacity on a completion or two, an error as large as the knee
    // itself; the ceiling still never exceeds what it was while the capacity was a lower bound.
    let mut run = Run::new(10, ms(1000));
    run.run(6.0, 60.0);
    let flood = run.now();
    run.run(20.0, 30.0);
    let trace = run.show(flood - 1.0);
    let confirmed: Vec<&Step> = run
        .trace
        .iter()
        .filter(|s| s.at > flood && s.learned.confirmed && !s.learned.probing)
        .collect();
    assert!(!confirmed.is_empty(), "{trace}");
    for step in confirmed {
        let knee = step.learned.knee.unwrap_or(0);
        assert!(
            step.learned.ceiling.unwrap_or(u64::MAX) <= unconfirmed_ceiling(knee),
            "at {:.1}s (noise {:.2})\n{trace}",
            step.at,
            step.learned.knee_noise
        );
    }
}

#[test]
fn a_ceiling_reached_two_base_latencies_before_the_tick_confirms_an_implied_queue_on_one_tick() {
    // Settled at 50 ms, 20 in flight, 400 a second. Then the ceiling refuses with 42 in flight at
    // the same completions: Little's law implies 105 ms, a queue, but the latencies of the tick
    // do not show it yet. On a tick that only saw the ceiling reached, the requests admitted at
    // it may not have had time to complete: two such ticks are needed. Reached two base
    // latencies before the tick ended, a service with room would have completed them.
    let flood = |i: u64, reached_at: Option<u64>| TickSample {
        ceiling_reached_at: reached_at,
        ..tick_of(i, 40, 50, 42, true)
    };
    let (mut waited, i) = fed(60, |i| tick_at(i, 50, 20));
    assert!(waited.learned().settled && !waited.learned().confirmed);
    let mut without = waited.clone();
    waited.observe(&flood(i, Some(i * TICK - ms(100).as_nanos() as u64)));
    assert!(waited.learned().confirmed, "{:?}", waited.learned());
    without.observe(&flood(i, None));
    assert!(!without.learned().confirmed, "{:?}", without.learned());
    // Reached less than two base latencies before: one tick is not enough either.
    let (mut recent, i) = fed(60, |i| tick_at(i, 50, 20));
    recent.observe(&flood(i, Some(i * TICK - ms(60).as_nanos() as u64)));
    assert!(!recent.learned().confirmed, "{:?}", recent.learned());
}

/// Under a tenfold flood of 100 workers at 100 ms, each tick's latencies measure the workers: the
/// requests in flight less the queue the low tail shows. The ceiling then sits the queue a dense
/// flood needs (under one request) and the figure's own error above them, not the knee's margin.
#[test]
fn under_a_flood_the_low_tail_measures_the_workers_and_the_ceiling_sits_just_above_them() {
    let mut run = Run::new(100, ms(100));
    run.with_latencies = true;
    run.run(600.0, 3.0);
    let before = run.learned;
    assert_eq!(before.workers, None, "not saturated yet: {}", run.show(0.0));
    run.run(10_000.0, 6.0);
    let trace = run.show(2.5);
    let workers = run.learned.workers.expect("workers measured");
    assert!(near(workers, 100.0, 0.015), "workers {workers}: {trace}");
    let ceilings: Vec<u64> = run
        .outside_probes_after(6.0)
        .filter_map(|s| s.learned.ceiling)
        .collect();
    assert!(!ceilings.is_empty(), "{trace}");
    assert!(
        ceilings.iter().all(|&c| (100..=103).contains(&c)),
        "ceilings {ceilings:?}: {trace}"
    );
    // Never above what the knee's margin allows: the trim only takes off.
    let k = run.learned.knee.expect("knee") as f64;
    let margin = confirmed_ceiling(k, run.learned.knee_noise, run.learned.offered_load);
    assert!(run.learned.ceiling.unwrap_or(u64::MAX) <= margin, "{trace}");
    assert!(run.learned.trim >= 0.0);
}

/// `workers` at `service`, with each tick's latencies: 3 s at 0.6 of the capacity, then 6 s at
/// `load` times it.
fn flood_with_latencies(workers: u32, service: Duration, load: f64) -> Run {
    let mut run = Run::new(workers, service);
    run.with_latencies = true;
    let capacity = run.service.capacity();
    run.run(0.6 * capacity, 3.0);
    run.run(load * capacity, 6.0);
    run
}

/// Whether no tick of the run showed a workers figure.
fn never_measured_workers(run: &Run) -> bool {
    run.trace.iter().all(|s| s.learned.workers.is_none())
}

/// At twice the capacity the requests in flight fall below the workers between arrivals, and a
/// reading would mix latencies that queued with latencies that did not: the workers are not
/// measured there.
#[test]
fn under_a_light_overload_the_workers_are_not_measured() {
    let run = flood_with_latencies(100, ms(100), 2.0);
    let trace = run.show(2.5);
    assert!(run.estimator.confirmed(), "{trace}");
    assert!(run.learned.offered_load < 3.0, "{trace}");
    assert!(never_measured_workers(&run), "{trace}");
}

/// On ten workers one queued request delays every latency past the low tail's threshold, so
/// its readings cannot measure a queue: no workers figure, and the trim of the share's verdicts
/// stands.
#[test]
fn a_service_too_small_for_the_low_tail_to_measure_a_queue_has_no_workers_figure() {
    let run = flood_with_latencies(10, ms(50), 10.0);
    let trace = run.show(2.5);
    assert!(run.estimator.confirmed(), "{trace}");
    assert!(never_measured_workers(&run), "{trace}");
    assert!(run.learned.ceiling.unwrap_or(0) >= 10, "{trace}");
}

/// On twenty workers at 50 ms a queue of one request still leaves a share of quick latencies the
/// low tail can read, but one of three requests does not (`capacity::WORKERS_RESOLUTION`): its
/// readings cannot tell the queue finely enough to place the workers, and no figure is kept.
#[test]
fn a_service_whose_low_tail_cannot_tell_three_requests_of_queue_has_no_workers_figure() {
    let run = flood_with_latencies(20, ms(50), 10.0);
    let trace = run.show(2.5);
    assert!(run.estimator.confirmed(), "{trace}");
    assert!(run.learned.offered_load >= 3.0, "{trace}");
    assert!(never_measured_workers(&run), "{trace}");
}
