//! The adaptive peers (`Gradient2`, `Bbr`) and the `sluicegate-auto` strategy, through the public
//! API. Strategies are driven call by call in virtual time: nothing sleeps, every figure is exact.
#![cfg(feature = "sim")]

use sluicegate::clock::Nanos;
use sluicegate::sim::{
    run, run_gate, run_sluicegate, run_strategy, AttemptId, BackendView, Bbr, Gradient2, Offer,
    Report, Scenario, Strategy, StrategyReport,
};
use sluicegate::Config;

const MS: Nanos = 1_000_000;
const SECOND: Nanos = 1_000 * MS;

fn view(workers: u32) -> BackendView {
    BackendView {
        workers,
        in_service: 0,
        queued: 0,
        memory_used: 0,
        memory_limit: 1,
    }
}

fn scenario(text: &str) -> Scenario {
    match Scenario::from_toml_str(text) {
        Ok(s) => s,
        Err(e) => panic!("scenario does not parse: {e}\n{text}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Gradient2

/// Drives a `Gradient2` in rounds: `n` attempts offered at once, the admitted ones answered `rtt`
/// later, the next round `period` after the start of this one.
struct Rounds {
    g: Gradient2,
    now: Nanos,
    next_id: AttemptId,
    refused: u64,
}

impl Rounds {
    fn new() -> Self {
        Rounds {
            g: Gradient2::new(),
            now: 0,
            next_id: 0,
            refused: 0,
        }
    }

    fn round(&mut self, n: u64, rtt: Nanos, period: Nanos, ok: bool) {
        let mut admitted = Vec::new();
        for _ in 0..n {
            let id = self.next_id;
            self.next_id += 1;
            match self.g.offer(id, true, self.now, &view(1000)) {
                Offer::Admit => admitted.push(id),
                _ => self.refused += 1,
            }
        }
        for id in admitted {
            self.g.complete(id, self.now + rtt, ok);
        }
        self.now += period.max(rtt);
    }

    /// Rounds every 100 ms for `duration`, each offering as many attempts as the limit allows
    /// (the limit is used in full); returns the estimated limit after every round.
    fn use_the_limit(&mut self, duration: Nanos, rtt: Nanos) -> Vec<f64> {
        let period = (100 * MS).max(rtt);
        let end = self.now + duration;
        let mut limits = Vec::new();
        while self.now < end {
            let n = self.g.limit();
            self.round(n, rtt, period, true);
            limits.push(self.g.estimated_limit());
        }
        limits
    }
}

#[test]
fn gradient2_starts_at_the_library_defaults() {
    let g = Gradient2::new();
    assert_eq!(g.limit(), 20);
    assert_eq!(
        (
            Gradient2::INITIAL_LIMIT,
            Gradient2::MIN_LIMIT,
            Gradient2::MAX_LIMIT,
            Gradient2::QUEUE_SIZE,
            Gradient2::LONG_WINDOW,
        ),
        (20, 20, 200, 4, 600)
    );
    assert_eq!((Gradient2::SMOOTHING, Gradient2::RTT_TOLERANCE), (0.2, 1.5));
    assert_eq!(Gradient2::WINDOW, std::time::Duration::from_secs(1));
    assert_eq!(Gradient2::WINDOW_SAMPLES, 10);
}

#[test]
fn gradient2_refuses_at_once_when_in_flight_reaches_the_limit() {
    let mut g = Gradient2::new();
    for id in 0..20 {
        assert_eq!(g.offer(id, true, 0, &view(4)), Offer::Admit, "attempt {id}");
    }
    assert_eq!(g.in_flight(), 20);
    assert_eq!(
        g.offer(20, true, 0, &view(4)),
        Offer::Refuse { retry_after: None }
    );
    g.complete(3, 10 * MS, true);
    assert_eq!(g.in_flight(), 19);
    assert_eq!(g.offer(21, false, 10 * MS, &view(4)), Offer::Admit);
}

#[test]
fn gradient2_limit_rises_while_rtt_is_flat_and_the_limit_is_used() {
    let mut r = Rounds::new();
    let limits = r.use_the_limit(30 * SECOND, 10 * MS);
    assert!(limits.windows(2).all(|w| w[1] >= w[0]), "{limits:?}");
    // Flat RTT: gradient 1, so each one-second window adds 0.2 × queue size = 0.8.
    let last = r.g.estimated_limit();
    assert!((40.0..=45.0).contains(&last), "{last}");
    assert!((r.g.long_rtt() - 10e6).abs() < 1.0);
}

#[test]
fn gradient2_limit_falls_when_rtt_doubles() {
    let mut r = Rounds::new();
    r.use_the_limit(30 * SECOND, 10 * MS);
    let before = r.g.estimated_limit();
    let limits = r.use_the_limit(10 * SECOND, 20 * MS);
    // The first two seconds hold the window that mixes both RTTs.
    assert!(
        limits[20..].windows(2).all(|w| w[1] <= w[0]),
        "the limit rose while RTT was doubled: {limits:?}"
    );
    let after = r.g.estimated_limit();
    assert!(after < before - 5.0, "{before} -> {after}");
    assert_eq!(r.g.last_rtt(), 20 * MS);
}

#[test]
fn gradient2_tolerates_rtt_rising_less_than_one_and_a_half_times() {
    let mut r = Rounds::new();
    r.use_the_limit(30 * SECOND, 10 * MS);
    let before = r.g.estimated_limit();
    r.use_the_limit(10 * SECOND, 14 * MS);
    assert!(r.g.estimated_limit() > before);
}

#[test]
fn gradient2_never_goes_below_its_minimum() {
    let mut r = Rounds::new();
    r.use_the_limit(30 * SECOND, 10 * MS);
    assert!(r.g.limit() > 35);
    // RTT × 40: the gradient is clamped at 0.5 and the limit sinks to its floor, not below.
    let limits = r.use_the_limit(60 * SECOND, 400 * MS);
    assert!(limits.iter().all(|&l| l >= 20.0), "{limits:?}");
    assert_eq!(r.g.estimated_limit(), 20.0);
    assert_eq!(r.g.limit(), 20);
}

#[test]
fn gradient2_does_not_grow_while_app_limited() {
    // Nine in flight at most: below half the limit (10), so no update changes the limit.
    let mut r = Rounds::new();
    for _ in 0..300 {
        r.round(9, 10 * MS, 100 * MS, true);
    }
    assert_eq!(r.g.estimated_limit(), 20.0);
    assert_eq!(r.g.last_rtt(), 10 * MS, "windows were evaluated");
    // Ten in flight is half the limit: not app-limited, so the first update grows it (to 20.8,
    // after which ten is below half of it again).
    let mut r = Rounds::new();
    for _ in 0..300 {
        r.round(10, 10 * MS, 100 * MS, true);
    }
    assert!(
        (r.g.estimated_limit() - 20.8).abs() < 1e-9,
        "{}",
        r.g.estimated_limit()
    );
}

#[test]
fn gradient2_pulls_the_long_rtt_down_when_it_exceeds_twice_the_short_rtt() {
    let mut r = Rounds::new();
    r.use_the_limit(30 * SECOND, 100 * MS);
    assert!((r.g.long_rtt() - 100e6).abs() < 1.0);
    r.use_the_limit(10 * SECOND, 10 * MS);
    // The exponential average alone (factor 2/601 a window) would still be above 97 ms; the
    // pull-down (× 0.95 a window) takes it to about 60 ms.
    let long = r.g.long_rtt();
    assert!(long < 70e6 && long > 20e6, "{long}");
}

#[test]
fn gradient2_takes_no_sample_from_answers_its_client_no_longer_waits_for() {
    let mut r = Rounds::new();
    for _ in 0..300 {
        r.round(20, 10 * MS, 100 * MS, false);
    }
    assert_eq!(r.g.in_flight(), 0, "slots are released");
    assert_eq!(r.g.last_rtt(), 0, "no window was evaluated");
    assert_eq!(r.g.estimated_limit(), 20.0);
}

// ---------------------------------------------------------------------------------------------
// BBR

/// Drives a `Bbr`, calling its timer whenever it asked to be called.
struct Bbrd {
    b: Bbr,
    workers: u32,
    next_timer: Nanos,
    next_id: AttemptId,
}

impl Bbrd {
    fn new(workers: u32) -> Self {
        let mut b = Bbr::new();
        let next_timer = b.timer(0, &view(workers)).unwrap_or(Nanos::MAX);
        Bbrd {
            b,
            workers,
            next_timer,
            next_id: 0,
        }
    }

    /// Runs the timers due up to `now`.
    fn at(&mut self, now: Nanos) {
        while self.next_timer <= now {
            let at = self.next_timer;
            self.next_timer = self.b.timer(at, &view(self.workers)).unwrap_or(Nanos::MAX);
        }
    }

    fn offer(&mut self, now: Nanos) -> (AttemptId, Offer) {
        self.at(now);
        let id = self.next_id;
        self.next_id += 1;
        (id, self.b.offer(id, true, now, &view(self.workers)))
    }

    fn complete(&mut self, id: AttemptId, now: Nanos) {
        self.at(now);
        self.b.complete(id, now, true);
    }

    /// Keeps `k` attempts in flight, each answered after 10 ms: every 10 ms the `k` in flight are
    /// answered and `k` new ones offered, from `from` until `stop` says so (checked every 10 ms) or
    /// `limit` passes. Returns the time it stopped; panics on a refusal.
    fn cycle(
        &mut self,
        k: u64,
        from: Nanos,
        limit: Nanos,
        stop: impl Fn(&Bbr) -> bool,
    ) -> (Nanos, Vec<AttemptId>) {
        let mut in_flight: Vec<AttemptId> = Vec::new();
        let mut t = from;
        loop {
            for id in std::mem::take(&mut in_flight) {
                self.complete(id, t);
            }
            self.at(t);
            if stop(&self.b) || t >= limit {
                return (t, in_flight);
            }
            for _ in 0..k {
                let (id, offer) = self.offer(t);
                assert_eq!(offer, Offer::Admit, "refused at {t} ns");
                in_flight.push(id);
            }
            t += 10 * MS;
        }
    }
}

#[test]
fn bbr_starts_at_the_kratos_defaults() {
    assert_eq!(Bbr::WINDOW, std::time::Duration::from_secs(10));
    assert_eq!(Bbr::BUCKETS, 100);
    assert_eq!(Bbr::CPU_THRESHOLD, 800);
    assert_eq!(Bbr::CPU_DECAY, 0.95);
    assert_eq!(Bbr::CPU_INTERVAL, std::time::Duration::from_millis(500));
    assert_eq!(Bbr::COOL_DOWN, std::time::Duration::from_secs(1));
    let mut b = Bbr::new();
    assert_eq!((b.cpu(), b.in_flight(), b.dropping_since()), (0, 0, None));
    assert_eq!(
        (b.max_pass(0), b.min_rt_ms(0), b.max_in_flight(0)),
        (1, 1, 0)
    );
}

#[test]
fn bbr_refuses_only_when_cpu_is_high_and_in_flight_exceeds_max_pass_times_min_rt() {
    // Ten workers kept busy by ten 10 ms requests at a time: 100 answers per 100 ms bucket, minRT
    // 10 ms, so maxInFlight = 100 × 10 × 10 / 1000 = 10; utilisation 100 %.
    let mut d = Bbrd::new(10);
    let (t, in_flight) = d.cycle(10, 0, 60 * SECOND, |b| b.cpu() >= 800);
    assert!(d.b.cpu() >= 800, "the CPU figure never reached 80 %");
    assert!(t > 10 * SECOND, "smoothing takes time: crossed at {t} ns");
    assert_eq!(in_flight.len(), 0);
    assert_eq!((d.b.max_pass(t), d.b.min_rt_ms(t)), (100, 10));
    assert_eq!(d.b.max_in_flight(t), 10);
    // Up to maxInFlight in flight: admitted, CPU high or not.
    for _ in 0..10 {
        assert_eq!(d.offer(t).1, Offer::Admit);
    }
    // In-flight 10 is not above 10: admitted; then 11 is.
    assert_eq!(d.offer(t).1, Offer::Admit);
    assert_eq!(d.b.in_flight(), 11);
    assert_eq!(d.offer(t).1, Offer::Refuse { retry_after: None });
    assert_eq!(d.b.dropping_since(), Some(t));
}

#[test]
fn bbr_admits_everything_at_low_utilisation() {
    // The same traffic on 1000 workers: utilisation 1 %, so the check never applies.
    let mut d = Bbrd::new(1000);
    let (t, _) = d.cycle(10, 0, 20 * SECOND, |_| false);
    assert!(d.b.cpu() < 20, "{}", d.b.cpu());
    assert_eq!(d.b.max_in_flight(t), 10);
    for _ in 0..500 {
        assert_eq!(d.offer(t).1, Offer::Admit);
    }
    assert_eq!(d.b.in_flight(), 500);
    assert_eq!(d.b.dropping_since(), None);
}

#[test]
fn bbr_keeps_refusing_during_the_one_second_cool_down() {
    // 100 workers: 90 long requests stay in flight, plus a 1 ms request every 10 ms. Utilisation
    // ≈ 90 %; the fast requests make minRT 1 ms and maxPass 10, so maxInFlight = 0.
    let mut d = Bbrd::new(100);
    let long: Vec<AttemptId> = (0..90)
        .map(|_| match d.offer(0) {
            (id, Offer::Admit) => id,
            (_, other) => panic!("{other:?}"),
        })
        .collect();
    let mut t = 10 * MS;
    loop {
        d.at(t);
        if d.b.cpu() >= 800 {
            break;
        }
        assert!(t < 60 * SECOND, "the CPU figure never reached 80 %");
        // Far above maxInFlight, but the CPU figure is below 80 %: admitted.
        let (id, offer) = d.offer(t);
        assert_eq!(
            offer,
            Offer::Admit,
            "refused at {t} ns with cpu {}",
            d.b.cpu()
        );
        d.complete(id, t + MS);
        t += 10 * MS;
    }
    assert_eq!(d.b.max_in_flight(t), 0);
    assert_eq!(d.b.in_flight(), 90);

    // The CPU figure is high: dropping begins.
    assert_eq!(d.offer(t).1, Offer::Refuse { retry_after: None });
    let began = t;
    assert_eq!(d.b.dropping_since(), Some(began));

    // Forty of the long requests end: utilisation halves, and the next sample takes the CPU
    // figure below 80 %.
    for &id in &long[..40] {
        d.complete(id, began + MS);
    }
    d.at(began + 600 * MS);
    assert!(d.b.cpu() < 800, "cpu {}", d.b.cpu());

    // Within a second of the first drop, the in-flight check still applies.
    assert_eq!(
        d.offer(began + 600 * MS).1,
        Offer::Refuse { retry_after: None }
    );
    assert_eq!(
        d.offer(began + SECOND).1,
        Offer::Refuse { retry_after: None }
    );
    assert!(d.b.cpu() < 800);

    // After it, everything is admitted again.
    assert_eq!(d.offer(began + SECOND + 1).1, Offer::Admit);
    assert_eq!(d.b.dropping_since(), None);
}

#[test]
fn bbr_counts_answers_in_100_ms_buckets_and_ignores_the_current_one() {
    let mut d = Bbrd::new(10);
    // Five answers of 30 ms in bucket [0, 100 ms), three of 12 ms in [100, 200 ms).
    let first: Vec<AttemptId> = (0..5).map(|_| d.offer(0).0).collect();
    for id in first {
        d.complete(id, 30 * MS);
    }
    let second: Vec<AttemptId> = (0..3).map(|_| d.offer(100 * MS).0).collect();
    for id in second {
        d.complete(id, 112 * MS);
    }
    // At 150 ms only the first bucket is complete.
    assert_eq!((d.b.max_pass(150 * MS), d.b.min_rt_ms(150 * MS)), (5, 30));
    // Cached for a bucket length: unchanged at 249 ms, refreshed at 250 ms.
    assert_eq!(d.b.max_pass(249 * MS), 5);
    assert_eq!((d.b.max_pass(250 * MS), d.b.min_rt_ms(250 * MS)), (5, 12));
    // Ten seconds later the buckets have left the window.
    assert_eq!(d.b.max_pass(11 * SECOND), 0);
    assert_eq!(d.b.min_rt_ms(11 * SECOND), 1);
}

// ---------------------------------------------------------------------------------------------
// Whole runs

/// W = 8, S = 10 ms (C = 800 rps): 2 s at half load, 25 s at three times the capacity, 3 s at half.
const LONG_OVERLOAD: &str = r#"
name = "long-overload"
seed = 5
[backend]
workers = 8
service_time = "10ms"
distribution = "exponential"
congestion = 0.2
[clients]
timeout = "500ms"
urgent_share = 0.3
[[phase]]
duration = "2s"
load = 0.5
[[phase]]
duration = "25s"
load = 3.0
[[phase]]
duration = "3s"
load = 0.5
"#;

fn json(report: &StrategyReport) -> String {
    match serde_json::to_string(report) {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    }
}

fn refusals(report: &StrategyReport) -> u64 {
    report.timeline.iter().map(|t| u64::from(t.refused)).sum()
}

#[test]
fn gradient2_and_bbr_give_byte_identical_reports_for_the_same_seed() {
    let s = scenario(LONG_OVERLOAD);
    let g = |seed| run_strategy(&s, seed, "gradient2", &mut Gradient2::new(), &mut |_| {});
    let b = |seed| run_strategy(&s, seed, "bbr", &mut Bbr::new(), &mut |_| {});
    let (g1, g2, b1, b2) = (g(5), g(5), b(5), b(5));
    assert_eq!(json(&g1), json(&g2));
    assert_eq!(json(&b1), json(&b2));
    assert_ne!(json(&g1), json(&g(6)));
    assert_ne!(json(&b1), json(&b(6)));
    // Both act on this overload.
    assert!(refusals(&g1) > 0 && g1.reaction_ms.is_some());
    assert!(refusals(&b1) > 0 && b1.reaction_ms.is_some());
}

#[test]
fn both_peers_keep_in_flight_bounded_where_no_protection_does_not() {
    let s = scenario(LONG_OVERLOAD);
    let report = match run(&s, &Config::default(), &mut |_| {}) {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    };
    let peak = |name: &str| {
        report
            .strategy(name)
            .map(|r| r.timeline.iter().map(|t| t.in_flight).max().unwrap_or(0))
            .unwrap_or_else(|| panic!("no {name}"))
    };
    assert!(peak("gradient2") <= 200, "{}", peak("gradient2"));
    assert!(peak("unprotected") > peak("gradient2"));
    assert!(peak("unprotected") > peak("bbr"));
}

fn run_report(s: &Scenario, base: &Config) -> Report {
    match run(s, base, &mut |_| {}) {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    }
}

/// A scenario whose `[gate]` table the `sluicegate` strategy uses and `sluicegate-auto` ignores.
const TUNED: &str = r#"
name = "tuned"
seed = 3
[backend]
workers = 4
service_time = "10ms"
[clients]
timeout = "250ms"
[[phase]]
duration = "1s"
load = 0.5
[[phase]]
duration = "2s"
load = 4.0
[gate]
max_running = 4
max_qps = 400
non_urgent_qps = 80
max_in_flight = 12
"#;

#[test]
fn sluicegate_auto_runs_the_gate_on_the_shipped_defaults_whatever_the_scenario_and_base_say() {
    let s = scenario(TUNED);
    let defaults = run_report(&s, &Config::default());
    let other_base = match Config::from_toml_str("[gate]\nmax_in_flight = 7\nmax_running = 3\n") {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    };
    let other = run_report(&s, &other_base);
    let auto = |r: &Report| {
        r.strategy("sluicegate-auto")
            .map(json)
            .unwrap_or_else(|| panic!("no sluicegate-auto"))
    };
    assert_eq!(
        auto(&defaults),
        auto(&other),
        "the base changed sluicegate-auto"
    );
    let alone = match run_gate(
        &s,
        s.seed,
        "sluicegate-auto",
        Config::default(),
        &mut |_| {},
    ) {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(json(&alone), auto(&defaults));
    // The tuned strategy does see the scenario's table: it never has more than 12 in flight.
    let tuned = defaults
        .strategy("sluicegate")
        .unwrap_or_else(|| panic!("no sluicegate"));
    assert!(tuned.timeline.iter().all(|t| t.in_flight <= 12));
}

#[test]
fn run_sluicegate_still_reports_as_sluicegate() {
    let s = scenario(TUNED);
    let config = match s.gate_config(&Config::default()) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    };
    let report = match run_sluicegate(&s, s.seed, config, &mut |_| {}) {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(report.name, "sluicegate");
    let whole = run_report(&s, &Config::default());
    assert_eq!(
        whole.strategy("sluicegate").map(json),
        Some(json(&report)),
        "run and run_sluicegate agree"
    );
}
