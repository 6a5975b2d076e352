//! The backend family harness (`sim::grid`): scenario construction, the bars on hand-built
//! reports, determinism of a small run, and (ignored) the whole grid against the bars.
#![cfg(feature = "sim")]

use std::time::Duration;

use sluicegate::sim::grid::{
    self, BackendReports, BackendSpec, BarCheck, FamilyError, FamilyRun, Traffic, AUTO, LOADS,
};
use sluicegate::sim::{
    render, run_strategy, run_with_seed, Arrivals, ConcurrencyLimit, Distribution, Report,
    RetryMode, StrategyReport, TimelineSample, SLICE_MS,
};
use sluicegate::Config;

const TICK: Duration = Duration::from_millis(100);

fn close(actual: f64, expected: f64, tolerance: f64) -> bool {
    (actual - expected).abs() <= tolerance
}

fn spec(capacity_rps: f64, service_ms: u64) -> BackendSpec {
    BackendSpec {
        capacity_rps,
        service_time: Duration::from_millis(service_ms),
    }
}

// ---------------------------------------------------------------------------------------------
// The grid and the scenarios

#[test]
fn the_grid_spans_both_axes_with_at_least_ten_workers() {
    let grid = grid::backends();
    assert!((6..=10).contains(&grid.len()), "{}", grid.len());
    let c: Vec<f64> = grid.iter().map(|b| b.capacity_rps).collect();
    let s: Vec<Duration> = grid.iter().map(|b| b.service_time).collect();
    assert_eq!(c.iter().copied().fold(f64::INFINITY, f64::min), 200.0);
    assert_eq!(c.iter().copied().fold(0.0, f64::max), 50_000.0);
    assert_eq!(s.iter().min(), Some(&Duration::from_millis(1)));
    assert_eq!(s.iter().max(), Some(&Duration::from_millis(500)));
    for b in &grid {
        assert!(b.workers() >= grid::MIN_WORKERS, "{b:?}");
        // C·S is a whole number of workers, so the scenario's capacity is exactly C.
        let scenario = grid::step_scenario(b, 2.0);
        assert_eq!(scenario.capacity(), b.capacity_rps, "{}", b.label());
    }
    // Distinct labels: they name the scenarios.
    let mut labels: Vec<String> = grid.iter().map(BackendSpec::label).collect();
    labels.sort();
    labels.dedup();
    assert_eq!(labels.len(), grid.len());
    assert!(LOADS.contains(&2.0) && LOADS.contains(&5.0) && LOADS.contains(&10.0));
    assert!(LOADS.iter().any(|&l| l <= 0.9));
    assert!(LOADS.contains(&grid::STEP_LOAD));
}

#[test]
fn a_step_scenario_has_the_stated_backend_clients_and_phases() {
    let b = spec(3200.0, 20);
    let s = grid::step_scenario(&b, 5.0);
    assert_eq!(s.name, "3200rps-20ms step 5x");
    assert_eq!(s.seed, grid::SEED);
    assert_eq!(s.backend.workers, 64);
    assert_eq!(s.capacity(), 3200.0);
    assert_eq!(s.backend.service_time, Duration::from_millis(20));
    assert_eq!(s.backend.distribution, Distribution::Exponential);
    assert_eq!(s.backend.congestion, 0.1);
    // The memory of flash-crowd.
    let flash = sluicegate::sim::Scenario::default();
    assert_eq!(s.backend.memory_base, flash.backend.memory_base);
    assert_eq!(
        s.backend.memory_per_request,
        flash.backend.memory_per_request
    );
    assert_eq!(s.backend.memory_limit, flash.backend.memory_limit);
    assert_eq!(s.clients.arrivals, Arrivals::Poisson);
    assert_eq!(s.clients.timeout, Duration::from_secs(1));
    assert_eq!(s.clients.slo, Duration::from_millis(100));
    assert_eq!(s.clients.retry.mode, RetryMode::None);
    assert!(s.gate.is_empty() && s.sampler.is_empty());
    let phases: Vec<(Duration, f64, f64)> = s
        .phases
        .iter()
        .map(|p| (p.duration, p.load, p.urgent_share))
        .collect();
    assert_eq!(
        phases,
        [
            (Duration::from_secs(3), 0.6, 0.3),
            (Duration::from_secs(5), 5.0, 0.3),
            (Duration::from_secs(3), 0.6, 0.3),
        ]
    );
    assert!(s.phases.iter().all(|p| p.service_factor == 1.0));
    assert_eq!(b.step_window_ms(), 3000..8000);
    // The hand-configured gate runs on the base configuration: the overlay is the identity.
    assert_eq!(
        s.gate_config(&Config::default()).ok(),
        Some(Config::default())
    );
}

#[test]
fn durations_scale_with_the_service_time() {
    // S = 500 ms: warm-up 30·S, step 20·S, cool-down 20·S, timeout 50·S, SLO 5·S.
    let slow = spec(200.0, 500);
    let s = grid::step_scenario(&slow, 2.0);
    assert_eq!(s.backend.workers, 100);
    let durations: Vec<Duration> = s.phases.iter().map(|p| p.duration).collect();
    assert_eq!(
        durations,
        [
            Duration::from_secs(15),
            Duration::from_secs(10),
            Duration::from_secs(10)
        ]
    );
    assert_eq!(s.clients.timeout, Duration::from_secs(25));
    assert_eq!(s.clients.slo, Duration::from_millis(2500));
    assert_eq!(slow.step_window_ms(), 15_000..25_000);
    // S = 1 ms: the floors (3 s, 5 s, 3 s, 1 s).
    let fast = spec(10_000.0, 1);
    let s = grid::step_scenario(&fast, 10.0);
    assert_eq!(s.backend.workers, 10);
    assert_eq!(s.duration(), Duration::from_secs(11));
    assert_eq!(s.clients.timeout, Duration::from_secs(1));
    assert_eq!(s.clients.slo, Duration::from_millis(5));
    // An odd service time still gives whole slices.
    let odd = BackendSpec {
        capacity_rps: 1000.0,
        service_time: Duration::from_micros(123_456),
    };
    for p in grid::step_scenario(&odd, 2.0).phases {
        assert_eq!(
            p.duration.as_nanos() % (u128::from(SLICE_MS) * 1_000_000),
            0
        );
    }
    assert_eq!(odd.workers(), 123);
    // Nonsense in code does not panic.
    let nonsense = BackendSpec {
        capacity_rps: f64::NAN,
        service_time: Duration::MAX,
    };
    assert_eq!(nonsense.workers(), 1);
    let _ = grid::step_scenario(&nonsense, 2.0);
}

#[test]
fn the_light_urgent_and_priority_flood_scenarios_use_per_class_loads() {
    let b = spec(1000.0, 100);
    let classes = |s: &sluicegate::sim::Scenario| -> Vec<(f64, f64)> {
        s.phases
            .iter()
            .map(|p| (p.load * p.urgent_share, p.load * (1.0 - p.urgent_share)))
            .collect()
    };
    let light = grid::light_urgent_scenario(&b);
    assert_eq!(light.name, "1000rps-100ms light-urgent");
    let flood = grid::priority_flood_scenario(&b);
    assert_eq!(flood.name, "1000rps-100ms priority-flood");
    for (s, urgent, step) in [(&light, 0.1, 3.0), (&flood, 0.3, 6.0)] {
        let c = classes(s);
        assert_eq!(c.len(), 3);
        for (i, (u, n)) in c.iter().enumerate() {
            assert!(close(*u, urgent, 1e-12), "{} phase {i}: {u}", s.name);
            let expected = if i == 1 { step } else { 0.6 - urgent };
            assert!(close(*n, expected, 1e-12), "{} phase {i}: {n}", s.name);
        }
        assert_eq!(s.backend, grid::step_scenario(&b, 2.0).backend);
        assert_eq!(s.clients, grid::step_scenario(&b, 2.0).clients);
    }
    assert_eq!(Traffic::LightUrgent.step_load(), 3.1);
    assert!(close(Traffic::PriorityFlood.step_load(), 6.3, 1e-12));
    let all = Traffic::all(&LOADS);
    assert_eq!(all.len(), LOADS.len() + 2);
    assert_eq!(all[LOADS.len()], Traffic::LightUrgent);
    assert_eq!(Traffic::Step(0.5).label(), "step 0.5x");
}

// ---------------------------------------------------------------------------------------------
// Bars on hand-built reports

/// The hand-built backend: C = 200 rps, S = 50 ms, so the step is 3000..8000 ms, an SLO of 250 ms
/// and 18 answers make a converged slice.
fn small() -> BackendSpec {
    spec(200.0, 50)
}

/// 110 slices (11 s): 20 answers a slice (4 urgent) with a p99 of 200 ms, unless `slice` says
/// otherwise for a slice index.
fn timeline(slice: impl Fn(usize, &mut TimelineSample)) -> Vec<TimelineSample> {
    (0..110)
        .map(|i| {
            let mut t = TimelineSample {
                t_ms: i as u64 * SLICE_MS,
                load: 1.0,
                offered_urgent: 4,
                offered_non_urgent: 16,
                answered_urgent: 4,
                answered_non_urgent: 16,
                refused: 0,
                timed_out: 0,
                in_flight: 10,
                waiting: 0,
                mean_latency_ms: Some(60.0),
                p99_ms: Some(200.0),
                late: 0,
                switch_on: false,
                memory_ratio: 0.3,
            };
            slice(i, &mut t);
            t
        })
        .collect()
}

fn strategy(name: &str, goodput: f64, urgent: f64) -> StrategyReport {
    StrategyReport {
        name: name.to_owned(),
        goodput_ratio: goodput,
        urgent_success: urgent,
        non_urgent_success: 0.5,
        p50_ms: Some(60.0),
        p99_ms: Some(200.0),
        wasted_work: 0.0,
        switch_flips: 0,
        reaction_ms: Some(50.0),
        recovery_ms: Some(0.0),
        peak_memory_ratio: 0.3,
        timeline: timeline(|_, _| {}),
    }
}

/// A report of `traffic` on the small backend: the auto gate as given, and its peers.
fn report(traffic: Traffic, auto: StrategyReport) -> Report {
    let scenario = traffic.scenario(&small());
    Report {
        scenario: scenario.name.clone(),
        seed: 1,
        capacity_rps: 200.0,
        slo_ms: 250.0,
        strategies: vec![
            strategy("unprotected", 0.2, 0.3),
            strategy("token-bucket", 0.5, 0.6),
            strategy("concurrency-limit", 0.9, 0.7),
            // Not a peer: better than everything, and ignored.
            strategy("sluicegate", 1.5, 1.0),
            auto,
        ],
    }
}

/// Every scenario of the small backend with a good auto gate, then `change` applied to it.
fn backend(change: impl Fn(Traffic, &mut StrategyReport)) -> BackendReports {
    let runs = Traffic::all(&LOADS)
        .into_iter()
        .map(|traffic| {
            let mut auto = strategy(AUTO, 0.99, 0.9995);
            if traffic.step_load() > 1.0 {
                auto.switch_flips = 2;
            }
            change(traffic, &mut auto);
            FamilyRun {
                traffic,
                report: report(traffic, auto),
            }
        })
        .collect();
    BackendReports {
        spec: small(),
        runs,
    }
}

fn bars(b: &BackendReports) -> Vec<BarCheck> {
    match grid::check_backend(b, TICK) {
        Ok(bars) => bars,
        Err(e) => panic!("{e}"),
    }
}

fn failures(b: &BackendReports) -> Vec<String> {
    missed(&bars(b))
}

#[test]
fn a_good_gate_meets_every_bar_and_the_count_is_complete() {
    let b = backend(|_, _| {});
    let all = bars(&b);
    // Goodput at 2x and 10x, urgent success and idle share, p99 at every load, reaction and
    // convergence at 5x, flips in every scenario, goodput against the peers at 2x, 5x and 10x and
    // urgent success against them in every scenario.
    assert_eq!(all.len(), 2 + 2 + LOADS.len() + 2 + 8 + 3 + 8, "{all:#?}");
    assert!(all.iter().all(|b| b.pass), "{:#?}", failures(&b));
    let kinds = |prefix: &str| all.iter().filter(|b| b.bar.starts_with(prefix)).count();
    assert_eq!(kinds("goodput at "), 2);
    assert_eq!(kinds("p99 ms <= SLO"), LOADS.len());
    assert_eq!(kinds("switch flips <= 0"), 2, "0.5x and 0.9x");
    assert_eq!(kinds("switch flips <= 2"), 6);
    assert_eq!(kinds("goodput >= every peer's"), 3, "2x, 5x, 10x");
    assert_eq!(kinds("urgent success >= every peer's"), 8);
    // The family check is the backend check, backend by backend.
    let family = grid::check_family(&[b.clone(), b.clone()], TICK).unwrap_or_default();
    assert_eq!(family.len(), 2 * all.len());
}

#[test]
fn goodput_bars_at_2x_and_10x() {
    let b = backend(|t, s| match t {
        Traffic::Step(2.0) => s.goodput_ratio = 0.96,
        Traffic::Step(10.0) => s.goodput_ratio = 0.89,
        _ => {}
    });
    let goodput = grid::goodput_bars(&b, AUTO).unwrap_or_default();
    let got: Vec<(&str, f64, f64, bool)> = goodput
        .iter()
        .map(|b| (b.scenario.as_str(), b.figure, b.target, b.pass))
        .collect();
    assert_eq!(
        got,
        [
            ("200rps-50ms step 2x", 0.96, 0.95, true),
            ("200rps-50ms step 10x", 0.89, 0.9, false),
        ]
    );
    // 0.96 at 2x beats the peers' best (concurrency-limit, 0.9); sluicegate's 1.5 does not count.
    let peers = grid::peer_bars(&b, AUTO).unwrap_or_default();
    let at_2x = peers
        .iter()
        .find(|c| c.scenario.ends_with("step 2x") && c.bar.starts_with("goodput"));
    assert!(
        at_2x.is_some_and(|c| c.pass && c.target == 0.9 && c.bar.contains("concurrency-limit")),
        "{at_2x:?}"
    );
}

#[test]
fn losing_to_a_peer_fails_and_names_it() {
    let b = backend(|t, s| {
        if t == Traffic::Step(5.0) {
            s.goodput_ratio = 0.85;
        }
        if t == Traffic::PriorityFlood {
            s.urgent_success = 0.65;
        }
    });
    let failed = failures(&b);
    assert!(failed.contains(
        &"FAIL  goodput >= every peer's (best: concurrency-limit)  [200rps-50ms step 5x]  0.85 \
          (target 0.9)"
            .to_owned()
    ), "{failed:#?}");
    assert!(failed.iter().any(|f| f.contains("urgent success >= every peer's (best: concurrency-limit)  [200rps-50ms priority-flood]  0.65")), "{failed:#?}");
    assert!(failed
        .iter()
        .any(|f| f.contains("urgent success >= 0.999  [200rps-50ms priority-flood]")));
    assert_eq!(failed.len(), 3, "{failed:#?}");
    // Peers are everything but the gates.
    let r = &b.runs[0].report;
    let peers: Vec<&str> = grid::peers(r, AUTO)
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(peers, ["unprotected", "token-bucket", "concurrency-limit"]);
}

#[test]
fn p99_flips_and_reaction_bars() {
    let b = backend(|t, s| match t {
        Traffic::Step(0.5) => s.switch_flips = 1,
        Traffic::Step(0.9) => s.p99_ms = Some(250.5),
        Traffic::Step(1.5) => s.p99_ms = None,
        Traffic::Step(5.0) => s.reaction_ms = Some(100.5),
        Traffic::LightUrgent => s.switch_flips = 3,
        _ => {}
    });
    let failed = failures(&b);
    let expected = [
        "FAIL  p99 ms <= SLO  [200rps-50ms step 0.9x]  250.5 (target 250)",
        "FAIL  p99 ms <= SLO  [200rps-50ms step 1.5x]  never (target 250)",
        "FAIL  reaction ms <= one sampler tick  [200rps-50ms step 5x]  100.5 (target 100)",
        "FAIL  switch flips <= 0  [200rps-50ms step 0.5x]  1 (target 0)",
        "FAIL  switch flips <= 2  [200rps-50ms light-urgent]  3 (target 2)",
    ];
    assert_eq!(failed, expected);
    // The tick is a parameter.
    let slower = grid::step_bars(&b, AUTO, Duration::from_millis(200)).unwrap_or_default();
    assert!(slower.iter().all(|c| c.pass), "{slower:#?}");
    // Never reacting fails.
    let never = backend(|t, s| {
        if t == Traffic::Step(5.0) {
            s.reaction_ms = None;
        }
    });
    let step = grid::step_bars(&never, AUTO, TICK).unwrap_or_default();
    assert!(step[0].figure.is_infinite() && !step[0].pass, "{step:#?}");
}

#[test]
fn a_convergence_window_holds_a_thousand_answers_at_capacity_and_at_most_half_the_step() {
    assert_eq!(grid::convergence_window_slices(200.0, 50), 25);
    assert_eq!(grid::convergence_window_slices(200.0, 200), 50);
    assert_eq!(grid::convergence_window_slices(1000.0, 50), 10);
    assert_eq!(grid::convergence_window_slices(3200.0, 50), 4);
    assert_eq!(grid::convergence_window_slices(10_000.0, 50), 1);
    assert_eq!(grid::convergence_window_slices(50_000.0, 50), 1);
    assert_eq!(grid::convergence_window_slices(200.0, 1), 1);
    assert_eq!(grid::convergence_window_slices(0.0, 50), 25);
}

#[test]
fn convergence_pools_the_slices_of_each_window() {
    // The small backend's step is slices 30 to 79; a window is 25 slices (2.5 s): 500 answers,
    // of which 450 make 0.9·C and at most 11 may be late (5, and 3 standard deviations of a
    // binomial count of 500 at 1 %: 6.7).
    let b = small();
    let window = b.step_window_ms();
    assert_eq!(window, 3000..8000);
    let with = |slice: &dyn Fn(usize, &mut TimelineSample)| {
        let mut s = strategy(AUTO, 1.0, 1.0);
        s.timeline = timeline(slice);
        grid::convergence_ms(&s, 200.0, window.clone())
    };
    // Good from the first slice of the step.
    assert_eq!(with(&|_, _| {}), Some(0.0));
    // A dip a window absorbs: the first three slices answer 13 instead of 20 (479 answers, 450
    // needed).
    let dip = |i: usize, t: &mut TimelineSample| {
        if (30..33).contains(&i) {
            t.answered_non_urgent = 9;
        }
    };
    assert_eq!(with(&dip), Some(0.0));
    // The first five slices answer nothing: the windows from slices 30, 31 and 32 answer 400,
    // 420 and 440; from slice 33 on, 460 or more. Converged 300 ms in.
    let silent_start = |i: usize, t: &mut TimelineSample| {
        if (30..35).contains(&i) {
            t.answered_urgent = 0;
            t.answered_non_urgent = 0;
            t.p99_ms = None;
        }
    };
    assert_eq!(with(&silent_start), Some(300.0));
    // Late answers: 11 in a window are within the noise of a p99 at the SLO, 12 are not, so
    // every window holding slice 45 fails and convergence comes after it.
    assert_eq!(
        with(&|i, t| if i == 45 {
            t.late = 11
        }),
        Some(0.0)
    );
    assert_eq!(
        with(&|i, t| if i == 45 {
            t.late = 12
        }),
        Some(1600.0)
    );
    // Late answers in different slices of one window add up: 6 in slice 40 and 6 in slice 50.
    assert_eq!(
        with(&|i, t| if i == 40 || i == 50 {
            t.late = 6
        }),
        Some(1100.0)
    );
    // The last window (slices 55 to 79) fails: never converged. Slices outside the step do not
    // count.
    assert_eq!(
        with(&|i, t| if i == 79 {
            t.late = 12
        }),
        None
    );
    assert_eq!(
        with(&|i, t| if i == 29 || i == 80 {
            t.late = 100
        }),
        Some(0.0)
    );
    // The bar at 5x reads the same figure: seven silent slices, converged 500 ms in.
    let late = backend(|t, s| {
        if t == Traffic::Step(5.0) {
            s.timeline = timeline(|i, t| {
                if (30..37).contains(&i) {
                    t.answered_urgent = 0;
                    t.answered_non_urgent = 0;
                }
            });
        }
    });
    let step = grid::step_bars(&late, AUTO, TICK).unwrap_or_default();
    assert_eq!(step[1].bar, "convergence ms <= 300");
    assert_eq!((step[1].figure, step[1].pass), (500.0, false));
}

#[test]
fn convergence_on_a_large_backend_reads_single_slices() {
    // At 10,000 rps a slice holds the thousand answers of a window: 900 make 0.9·C, and at most
    // 19 of 1000 may be late (10, and 3 standard deviations of a binomial count at 1 %: 9.4).
    let mut s = strategy(AUTO, 1.0, 1.0);
    let big = |at: usize, late: u32, answered: u32| {
        timeline(move |i, t| {
            t.answered_urgent = 200;
            t.answered_non_urgent = 800;
            if i == at {
                t.late = late;
                t.answered_non_urgent = answered - 200;
            }
        })
    };
    let step = 3000..8000;
    s.timeline = big(40, 19, 1000);
    assert_eq!(grid::convergence_ms(&s, 10_000.0, step.clone()), Some(0.0));
    s.timeline = big(40, 20, 1000);
    assert_eq!(
        grid::convergence_ms(&s, 10_000.0, step.clone()),
        Some(1100.0)
    );
    s.timeline = big(40, 0, 899);
    assert_eq!(
        grid::convergence_ms(&s, 10_000.0, step.clone()),
        Some(1100.0)
    );
    s.timeline = big(40, 0, 900);
    assert_eq!(grid::convergence_ms(&s, 10_000.0, step), Some(0.0));
}

/// A static limit told W, right from the first request, converges at once on the 10,000 rps
/// backend at 5 ms: its p99 is 0.93 of the SLO, and the late answers a window of 1,000 holds
/// above 1 % now and then are the noise of their count. Judged without that noise, it converged
/// "never" on seeds 1 to 8 of this backend.
#[test]
fn a_static_limit_told_the_workers_converges_at_once_despite_the_noise_of_late_answers() {
    let spec = spec(10_000.0, 5);
    let scenario = grid::step_scenario(&spec, 5.0);
    let limit = scenario.concurrency_limit();
    let reference = run_strategy(
        &scenario,
        1,
        "concurrency-limit",
        &mut ConcurrencyLimit::new(limit),
        &mut |_| {},
    );
    let step = spec.step_window_ms();
    let late_windows = grid::slices_within(&reference, &step)
        .filter(|t| !sluicegate::sim::metrics::p99_within_slo(t.answered(), u64::from(t.late)))
        .count();
    assert!(
        late_windows > 0,
        "the draw no longer shows the noise this test is about"
    );
    assert_eq!(
        grid::convergence_ms(&reference, spec.capacity_rps, step),
        Some(0.0),
        "{late_windows} slices over 1 % late"
    );
}

#[test]
fn idle_capacity_share_from_the_timeline() {
    let b = small();
    let share = |urgent: u32, non_urgent: u32| {
        let mut s = strategy(AUTO, 1.0, 1.0);
        s.timeline = timeline(|i, t| {
            if (30..80).contains(&i) {
                t.answered_urgent = urgent;
                t.answered_non_urgent = non_urgent;
            } else {
                // Outside the step: ignored.
                t.answered_non_urgent = 0;
            }
        });
        grid::idle_capacity_share(&s, 200.0, b.step_window_ms())
    };
    // Urgent 20 rps leaves 180 idle; non-urgent 160 rps is 8/9 of it.
    assert!(close(share(2, 16), 160.0 / 180.0, 1e-12));
    assert!(close(share(2, 14), 140.0 / 180.0, 1e-12));
    assert!(share(20, 0).is_nan(), "urgent took everything");
    let fails = backend(|t, s| {
        if t == Traffic::LightUrgent {
            s.timeline = timeline(|_, t| {
                t.answered_urgent = 2;
                t.answered_non_urgent = 14;
            });
        }
    });
    let urgency = grid::urgency_bars(&fails, AUTO).unwrap_or_default();
    assert_eq!(urgency.len(), 2);
    assert!(urgency[0].pass, "{:?}", urgency[0]);
    assert_eq!(
        urgency[1].to_string(),
        "FAIL  non-urgent share of the idle capacity >= 0.8  [200rps-50ms light-urgent]  0.777778 \
         (target 0.8)"
    );
}

#[test]
fn a_missing_auto_gate_is_an_error_naming_it() {
    let mut b = backend(|_, _| {});
    for run in &mut b.runs {
        run.report.strategies.retain(|s| s.name != AUTO);
    }
    match grid::check_backend(&b, TICK) {
        Err(e @ FamilyError::MissingStrategy { .. }) => {
            let text = e.to_string();
            assert!(text.contains("`sluicegate-auto`"), "{text}");
            assert!(text.contains("unprotected, token-bucket"), "{text}");
        }
        other => panic!("expected a missing strategy error, got {other:?}"),
    }
    assert!(grid::check_family(&[b], TICK).is_err());
}

#[test]
fn bars_of_scenarios_that_did_not_run_are_left_out() {
    let mut b = backend(|_, _| {});
    b.runs.retain(|r| r.traffic == Traffic::Step(0.5));
    let all = bars(&b);
    let names: Vec<&str> = all.iter().map(|c| c.bar.as_str()).collect();
    assert_eq!(
        names,
        [
            "p99 ms <= SLO",
            "switch flips <= 0",
            "urgent success >= every peer's (best: concurrency-limit)"
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// Real runs

#[test]
fn a_small_family_run_is_deterministic_and_matches_run_with_seed() {
    let specs = [small()];
    let loads = [2.0];
    let base = Config::default();
    let run =
        |threads: usize| match grid::run_family(&specs, &loads, &base, 7, threads, &|_, _, _| {}) {
            Ok(f) => f,
            Err(e) => panic!("{e}"),
        };
    let one = run(1);
    let two = run(2);
    assert_eq!(one, two);
    assert_eq!(one.len(), 1);
    let traffic: Vec<Traffic> = one[0].runs.iter().map(|r| r.traffic).collect();
    assert_eq!(traffic, Traffic::all(&loads));
    let json = |r: &Report| render::json(r).unwrap_or_default();
    for (a, b) in one[0].runs.iter().zip(&two[0].runs) {
        assert_eq!(json(&a.report), json(&b.report));
        assert_eq!(
            render::timeline_csv(&a.report),
            render::timeline_csv(&b.report)
        );
    }
    let direct = run_with_seed(&grid::step_scenario(&small(), 2.0), &base, 7, &mut |_| {});
    assert_eq!(one[0].step(2.0), direct.as_ref().ok());
    assert_eq!(one[0].step(2.0).map(|r| r.seed), Some(7));
    assert!(one[0].step(5.0).is_none());
    // The figures make sense: a static limit at W keeps the latency near the service time.
    let step = one[0].step(2.0).map(|r| r.capacity_rps);
    assert_eq!(step, Some(200.0));
    let limit = one[0]
        .step(2.0)
        .and_then(|r| r.strategy("concurrency-limit"))
        .map(|s| s.goodput_ratio)
        .unwrap_or_default();
    assert!(limit > 0.8, "{limit}");
    // Today's strategies have no auto gate: the bars say so.
    if sluicegate::sim::STRATEGIES.contains(&AUTO) {
        assert!(grid::check_family(&one, TICK).is_ok());
    } else {
        assert!(grid::check_family(&one, TICK).is_err());
    }
}

/// Runs `sluicegate-auto` and the peers on the whole grid with `seed` and checks every bar.
fn whole_family_bars(seed: u64) -> Vec<BarCheck> {
    let base = Config::default();
    let tick = base.sampler.tick;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let specs = grid::backends();
    let family = match grid::run_family(&specs, &LOADS, &base, seed, threads, &|_, _, _| {}) {
        Ok(f) => f,
        Err(e) => panic!("the family could not run: {e}"),
    };
    let bars = match grid::check_family(&family, tick) {
        Ok(bars) => bars,
        Err(e) => panic!(
            "the bars cannot be checked: {e}; is `{AUTO}` in sim::STRATEGIES ({:?})?",
            sluicegate::sim::STRATEGIES
        ),
    };
    // Every bar of every backend was checked.
    let per_backend = 2 + 2 + LOADS.len() + 2 + (LOADS.len() + 2) + 3 + (LOADS.len() + 2);
    assert_eq!(bars.len(), per_backend * specs.len(), "bars missing");
    bars
}

/// The bars on the whole grid. Fails until the auto gate is good enough: run it with
/// `cargo test --release --features sim --test grid -- --ignored --nocapture`.
#[test]
#[ignore = "the whole grid (about a minute in release); fails until sluicegate-auto meets the bars"]
fn sluicegate_auto_meets_the_bars_on_the_backend_family() {
    let bars = whole_family_bars(grid::SEED);
    for bar in &bars {
        println!("{bar}");
    }
    let failed = missed(&bars);
    assert!(
        failed.is_empty(),
        "{} of {} bars failed (figure vs target):\n{}",
        failed.len(),
        bars.len(),
        failed.join("\n")
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// Making one slice of the step worse (answers in time turned late, or not given at all) never
    /// makes a strategy converge earlier. (Dropping a late answer is not "worse": a percentile
    /// improves when its slowest answers go.)
    #[test]
    fn a_worse_slice_never_brings_convergence_forward(
        // About 22 answers a slice (450 make a converged window of 25) and late ones in a
        // tenth of the slices (about 11 may be late in a window): steps that converge early,
        // late or never all occur.
        answers in proptest::collection::vec(15u32..=30, 110),
        late in proptest::collection::vec(
            proptest::prop_oneof![9 => proptest::strategy::Just(0u32), 1 => 1u32..=8],
            110,
        ),
        worse_at in 30usize..80,
        fewer in 0u32..=20,
        more_late in 0u32..=10,
    ) {
        let b = small();
        let step = b.step_window_ms();
        let build = |worse: bool| {
            let mut s = strategy(AUTO, 1.0, 1.0);
            s.timeline = timeline(|i, t| {
                t.answered_urgent = 0;
                t.answered_non_urgent = answers[i];
                t.late = late[i].min(answers[i]);
                if worse && i == worse_at {
                    // Some answers in time turn late, and some others are not answered at all.
                    let on_time = t.answered_non_urgent - t.late;
                    let turned = more_late.min(on_time);
                    let lost = fewer.min(on_time - turned);
                    t.late += turned;
                    t.answered_non_urgent -= lost;
                }
            });
            s
        };
        let as_ms = |c: Option<f64>| c.unwrap_or(f64::INFINITY);
        let before = grid::convergence_ms(&build(false), 200.0, step.clone());
        let after = grid::convergence_ms(&build(true), 200.0, step.clone());
        proptest::prop_assert!(
            as_ms(after) >= as_ms(before),
            "worse slice {worse_at}: {before:?} -> {after:?}"
        );
    }
}

/// The goodput of `name` and the reports of one run of `scenario` on `seed`.
fn strategy_on(
    scenario: &sluicegate::sim::Scenario,
    seed: u64,
    name: &str,
) -> (StrategyReport, Report) {
    let report = match run_with_seed(scenario, &Config::default(), seed, &mut |_| {}) {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    };
    let found = report
        .strategies
        .iter()
        .find(|s| s.name == name)
        .cloned()
        .unwrap_or_else(|| panic!("{name} did not run"));
    (found, report)
}

/// Below their capacity the auto gate turns (next to) nobody away once its slow start is over (the
/// first round trips of a cold gate may refuse: it starts at eight requests in flight), on every
/// seed: at half the capacity at most one request in two hundred (a peak of random arrivals may
/// still find the ceiling of a service never seen queueing), at 0.9 of it no more than a static
/// limit told the workers turns away (its peaks pass the workers themselves):
/// the slow, widely spread backend (200 rps, 500 ms, exponential service times), the small one
/// (200 rps, 50 ms, 10 workers) and the small fast one (10,000 rps, 1 ms, 10 workers). Judged
/// over the step, after the warm-up.
#[test]
fn below_capacity_a_warm_auto_gate_turns_nobody_away_on_a_slow_spread_out_backend_or_a_small_one() {
    let cases = [
        (spec(200.0, 500), 0.5),
        (spec(200.0, 500), 0.9),
        (spec(200.0, 50), 0.5),
        (spec(10_000.0, 1), 0.5),
    ];
    for seed in 1..=4 {
        for (spec, load) in &cases {
            let scenario = grid::step_scenario(spec, *load);
            let (auto, report) = strategy_on(&scenario, seed, AUTO);
            let step = spec.step_window_ms();
            let tally = |r: &StrategyReport| {
                let (mut refused, mut offered) = (0u64, 0u64);
                for t in r.timeline.iter().filter(|t| step.contains(&t.t_ms)) {
                    refused += u64::from(t.refused);
                    offered += u64::from(t.offered_urgent) + u64::from(t.offered_non_urgent);
                }
                (refused, offered)
            };
            let (refused, offered) = tally(&auto);
            let most = if *load < 0.9 {
                offered / 200
            } else {
                let Some(r) = report
                    .strategies
                    .iter()
                    .find(|s| s.name == "concurrency-limit")
                else {
                    panic!("no static limit in {}", scenario.name)
                };
                tally(r).0
            };
            assert!(
                refused <= most,
                "seed {seed}, {}: {refused} of {offered} refused (at most {most})",
                scenario.name
            );
        }
    }
}

/// On the slow, widely spread backend in overload, the auto gate answers at least 0.9 of what a
/// static limit told the backend's W answers (the family's goodput bar), on every seed. It once
/// learned its base latency from the quick requests that complete first, and kept it: the rounds
/// of the true latency read as a queue and were left out. Its knee was then 30 % low, the ceiling held the service below its
/// capacity and the rate measured shrank with it (seed 2: 0.68 of the capacity at 2x against
/// 0.99; seed 4: 0.64 at 10x).
#[test]
fn in_overload_the_auto_gate_keeps_the_capacity_of_a_slow_spread_out_backend_on_every_seed() {
    let spec = spec(200.0, 500);
    for seed in 1..=4 {
        for load in [2.0, 10.0] {
            let scenario = grid::step_scenario(&spec, load);
            let (auto, report) = strategy_on(&scenario, seed, AUTO);
            let told_w = report
                .strategies
                .iter()
                .find(|s| s.name == "concurrency-limit")
                .expect("the static limit ran");
            assert!(
                auto.goodput_ratio >= 0.9 * told_w.goodput_ratio,
                "seed {seed}, {load}x: goodput {:.3}, a static limit at W {:.3}",
                auto.goodput_ratio,
                told_w.goodput_ratio
            );
        }
    }
}

/// The bars missed, one line each (figure vs target).
fn missed(bars: &[BarCheck]) -> Vec<String> {
    lines(bars, |b| !b.pass)
}

/// The bars `keep` picks, one line each (figure vs target).
fn lines(bars: &[BarCheck], keep: impl Fn(&BarCheck) -> bool) -> Vec<String> {
    bars.iter()
        .filter(|b| keep(b))
        .map(ToString::to_string)
        .collect()
}
