//! The randomized family of services (`sim::family`), through the public API: draws are
//! reproducible and cover their ranges, the flood stays affordable, the bars on hand-built
//! results and on small real runs, the report, and (ignored) `sluicegate-auto` against every
//! family bar on a fixed sample.
#![cfg(feature = "sim")]

use std::time::Duration;

use sluicegate::sim::family::bars::{self, BarKind, BarsError, RatioSummary, Verdict};
use sluicegate::sim::family::draw::whole_slices;
use sluicegate::sim::family::{
    self, draw, report, ArrivalSlice, Draw, DrawResult, StrategyFactory, StrategyRun, STATIC,
    SUBJECT, UNPROTECTED,
};
use sluicegate::sim::{
    run_gate, run_strategy, BackendView, ConcurrencyLimit, Distribution, Offer, Strategy,
    StrategyReport, TimelineSample, SLICE_MS,
};
use sluicegate::Config;

const DRAWS: usize = 2_000;

/// Requests a draw's scenario is expected to offer in all (what a run costs).
fn cost(d: &Draw) -> f64 {
    let c = d.capacity();
    d.warm_load * c * d.warm_up.as_secs_f64()
        + d.flood_arrivals()
        + 0.5 * c * d.cool_down().as_secs_f64()
}

/// The first draw of `seed` cheap enough for a debug-mode test that `keep` accepts.
fn cheap(seed: u64, keep: impl Fn(&Draw) -> bool) -> Draw {
    (0..DRAWS)
        .map(|i| draw(seed, i))
        .find(|d| cost(d) < 5_000.0 && keep(d))
        .expect("a cheap draw among the first 2,000")
}

/// Whether a draw has some property.
type Pick<'a> = dyn Fn(&Draw) -> bool + 'a;

fn is_slices(d: Duration) -> bool {
    d.as_nanos()
        .is_multiple_of(u128::from(SLICE_MS) * 1_000_000)
}

// ---------------------------------------------------------------------------------------------
// Draws

#[test]
fn a_draw_is_reproducible_from_seed_and_index_alone() {
    let alone = draw(1, 17);
    // Drawing others first changes nothing.
    let before: Vec<Draw> = (0..17).map(|i| draw(1, i)).collect();
    assert_eq!(before.len(), 17);
    assert_eq!(draw(1, 17), alone);
    assert_eq!(draw(1, 17).scenario(), alone.scenario());
    assert_eq!(alone.index, 17);
    assert_eq!(alone.seed, 1);
    assert_eq!(alone.scenario().name, "family-1-17");
    assert_ne!(draw(2, 17), alone);
    assert_ne!(draw(1, 18).scenario_seed(), alone.scenario_seed());
    assert_ne!(draw(2, 17).scenario_seed(), alone.scenario_seed());
}

/// Checks every range of `d`; returns nothing, panics naming the draw.
fn check_ranges(d: &Draw) {
    let s = d.service_time;
    let c = d.capacity();
    assert!((1..=2000).contains(&d.workers), "{d:?}");
    assert!(
        s >= Duration::from_micros(100) && s <= Duration::from_secs(5),
        "{d:?}"
    );
    assert!((1.0..=20_000.0).contains(&c), "{d:?}");
    assert!((1.1..=20.0).contains(&d.load), "{d:?}");
    assert!((0.0..=0.5).contains(&d.urgent_share), "{d:?}");
    assert!((0.0..=0.3).contains(&d.congestion), "{d:?}");
    let timeout = d.client_timeout.as_secs_f64() / s.as_secs_f64();
    assert!(d.client_timeout >= s * 10, "{d:?}");
    assert!(timeout <= 100.0 + 1e-6, "{d:?}");
    assert!(
        d.warm_up <= Duration::from_secs(20) && is_slices(d.warm_up),
        "{d:?}"
    );
    assert!((0.3..=0.8).contains(&d.warm_load), "{d:?}");
    if d.urgent_flood {
        let base = d.warm_load * (1.0 - d.urgent_share);
        assert!(
            d.urgent_load >= 1.2 && d.urgent_load <= d.load + 1e-9,
            "{d:?}"
        );
        assert!((d.non_urgent_load() - base).abs() < 1e-9, "{d:?}");
    } else {
        assert!(
            (d.urgent_load - d.load * d.urgent_share).abs() < 1e-9,
            "{d:?}"
        );
    }
    match d.distribution {
        Distribution::Constant | Distribution::Exponential => {}
        Distribution::Lognormal { sigma } => assert!((0.5..=1.5).contains(&sigma), "{d:?}"),
        Distribution::Bimodal {
            slow_share,
            slow_factor,
        } => {
            assert!((0.02..=0.1).contains(&slow_share), "{d:?}");
            assert!((5.0..=20.0).contains(&slow_factor), "{d:?}");
        }
    }
    let scenario = d.scenario();
    assert_eq!(scenario.capacity(), c);
    assert_eq!(scenario.backend.workers, d.workers);
    assert_eq!(scenario.clients.slo, s * 5);
    assert_eq!(scenario.baselines.concurrency_limit, None);
    assert!(2 * u64::from(d.workers) * scenario.backend.memory_per_request <= 1 << 30);
    assert!(scenario.backend.memory_per_request <= 1 << 20);
    assert_eq!(scenario.phases.len(), if d.is_cold() { 2 } else { 3 });
    for p in &scenario.phases {
        assert!(is_slices(p.duration) && !p.duration.is_zero(), "{d:?}");
    }
}

#[test]
fn two_thousand_draws_respect_every_range_and_reach_both_ends_of_each() {
    let draws: Vec<Draw> = (0..DRAWS).map(|i| draw(1, i)).collect();
    for d in &draws {
        check_ranges(d);
    }
    let count = |f: &Pick<'_>| draws.iter().filter(|d| f(d)).count();
    let ms = |x: u64| Duration::from_millis(x);
    let ends: [(&str, &Pick<'_>); 22] = [
        ("W <= 2", &|d| d.workers <= 2),
        ("W = 1", &|d| d.workers == 1),
        ("W > 1000", &|d| d.workers > 1000),
        ("S < 1 ms", &|d| d.service_time < ms(1)),
        ("S < 200 us", &|d| {
            d.service_time < Duration::from_micros(200)
        }),
        ("S > 1 s", &|d| d.service_time > ms(1000)),
        ("S > 3 s", &|d| d.service_time > ms(3000)),
        ("C < 5", &|d| d.capacity() < 5.0),
        ("C > 10,000", &|d| d.capacity() > 10_000.0),
        ("load < 1.3", &|d| d.load < 1.3),
        ("load > 10", &|d| d.load > 10.0),
        ("load > 17", &|d| d.load > 17.0),
        ("urgent flood", &|d| d.urgent_flood),
        ("urgent share 0", &|d| d.urgent_share == 0.0),
        ("urgent share > 0.45", &|d| d.urgent_share > 0.45),
        ("cold", &|d| d.is_cold()),
        ("warm-up > 18 s", &|d| d.warm_up > ms(18_000)),
        ("warm-up < 2 s", &|d| !d.is_cold() && d.warm_up < ms(2000)),
        ("congestion < 0.02", &|d| d.congestion < 0.02),
        ("congestion > 0.28", &|d| d.congestion > 0.28),
        ("timeout < 12 S", &|d| {
            d.client_timeout < d.service_time * 12
        }),
        ("timeout > 80 S", &|d| {
            d.client_timeout > d.service_time * 80
        }),
    ];
    for (what, f) in ends {
        assert!(count(f) > 0, "no draw with {what}");
    }
    let share = |f: &Pick<'_>| count(f) as f64 / DRAWS as f64;
    assert!((share(&|d| d.urgent_flood) - 0.15).abs() < 0.03);
    assert!((share(&|d| d.is_cold()) - 0.25).abs() < 0.03);
    assert!((share(&|d| d.urgent_share == 0.0) - 0.10).abs() < 0.025);
    let kinds: [&Pick<'_>; 4] = [
        &|d| d.distribution == Distribution::Constant,
        &|d| d.distribution == Distribution::Exponential,
        &|d| matches!(d.distribution, Distribution::Lognormal { .. }),
        &|d| matches!(d.distribution, Distribution::Bimodal { .. }),
    ];
    for kind in kinds {
        assert!((share(kind) - 0.25).abs() < 0.03, "{}", share(kind));
    }
    // The parameters of the distributions reach their ends too.
    let sigma = |f: fn(f64) -> bool| {
        count(&|d| matches!(d.distribution, Distribution::Lognormal { sigma } if f(sigma)))
    };
    assert!(sigma(|s| s < 0.55) > 0 && sigma(|s| s > 1.45) > 0);
    let bimodal = |f: fn(f64, f64) -> bool| {
        count(&|d| {
            matches!(d.distribution,
                Distribution::Bimodal { slow_share, slow_factor } if f(slow_share, slow_factor))
        })
    };
    assert!(bimodal(|s, _| s < 0.025) > 0 && bimodal(|s, _| s > 0.095) > 0);
    assert!(bimodal(|_, f| f < 6.0) > 0 && bimodal(|_, f| f > 19.0) > 0);
    // Urgent floods reach from 1.2 C to near the top of the loads.
    let floods: Vec<f64> = draws
        .iter()
        .filter(|d| d.urgent_flood)
        .map(|d| d.urgent_load)
        .collect();
    assert!(floods.iter().any(|&u| u < 1.5) && floods.iter().any(|&u| u > 10.0));
}

#[test]
fn the_flood_offers_at_most_400000_requests_unless_twenty_service_times_alone_do() {
    let mut shortened = 0;
    let mut floored = 0;
    for i in 0..DRAWS {
        let d = draw(1, i);
        let flood = d.flood();
        let s = d.service_time;
        let shortest = whole_slices(s * 20);
        let wanted = whole_slices((s * 40).max(Duration::from_secs(3)));
        assert!(is_slices(flood) && flood >= shortest && flood <= wanted.max(shortest));
        assert!(
            d.flood_arrivals() <= 400_000.0 || flood == shortest,
            "{d:?}: {} arrivals",
            d.flood_arrivals()
        );
        if flood < wanted {
            shortened += 1;
        }
        if flood == shortest && d.flood_arrivals() > 400_000.0 {
            floored += 1;
        }
        assert_eq!(
            d.cool_down(),
            whole_slices((s * 20).max(Duration::from_secs(2)))
        );
        let window = d.flood_window_ms();
        assert_eq!(window.start, d.warm_up.as_millis() as u64);
        assert_eq!(window.end - window.start, flood.as_millis() as u64);
    }
    assert!(shortened > 0, "no flood shortened");
    assert!(
        floored < DRAWS / 50,
        "{floored} floods at 20 S past 400,000"
    );
}

#[test]
fn a_draw_becomes_warm_up_flood_and_cool_down_with_per_class_loads() {
    let d = (0..DRAWS)
        .map(|i| draw(1, i))
        .find(|d| d.urgent_flood && !d.is_cold() && d.urgent_share > 0.0)
        .expect("an urgent flood after a warm-up");
    let s = d.scenario();
    let (warm, flood, cool) = (s.phases[0], s.phases[1], s.phases[2]);
    assert_eq!(warm.duration, d.warm_up);
    assert_eq!(warm.load, d.warm_load);
    assert_eq!(warm.urgent_share, d.urgent_share);
    assert_eq!(flood.duration, d.flood());
    assert!((flood.load - d.load).abs() < 1e-12);
    assert!((flood.load * flood.urgent_share - d.urgent_load).abs() < 1e-9);
    // Non-urgent traffic keeps its warm-up load through the urgent flood.
    let base = warm.load * (1.0 - warm.urgent_share);
    assert!((flood.load * (1.0 - flood.urgent_share) - base).abs() < 1e-9);
    assert_eq!(cool.load, 0.5);
    assert_eq!(cool.duration, d.cool_down());
    assert!((d.urgent_demand() - d.urgent_load * d.capacity()).abs() < 1e-9);
    assert_eq!(s.clients.retry.max_attempts, 1);
    assert_eq!(s.clients.timeout, d.client_timeout);
    assert!(s.gate.is_empty() && s.sampler.is_empty());
}

// ---------------------------------------------------------------------------------------------
// Running draws

#[test]
fn run_draw_reports_what_the_plain_runs_report_and_counts_every_request_by_arrival() {
    let d = cheap(1, |d| !d.is_cold());
    let result = family::run_draw(&d, &[]);
    let names: Vec<&str> = result
        .strategies
        .iter()
        .map(|s| s.report.name.as_str())
        .collect();
    assert_eq!(names, family::BUILT_IN);
    let scenario = d.scenario();
    let seed = scenario.seed;
    let auto = run_gate(&scenario, seed, SUBJECT, Config::default(), &mut |_| {});
    assert_eq!(result.strategy(SUBJECT), auto.ok().as_ref());
    let mut limit = ConcurrencyLimit::new(u64::from(d.workers));
    let reference = run_strategy(&scenario, seed, STATIC, &mut limit, &mut |_| {});
    assert_eq!(result.strategy(STATIC), Some(&reference));
    for run in &result.strategies {
        let by_time = run.report.timeline.iter().fold((0, 0, 0, 0), |a, t| {
            (
                a.0 + t.offered_urgent,
                a.1 + t.answered_urgent,
                a.2 + t.offered_non_urgent,
                a.3 + t.answered_non_urgent,
            )
        });
        let by_arrival = run.by_arrival.iter().fold((0, 0, 0, 0), |a, t| {
            (
                a.0 + t.offered_urgent,
                a.1 + t.answered_urgent,
                a.2 + t.offered_non_urgent,
                a.3 + t.answered_non_urgent,
            )
        });
        assert_eq!(by_time, by_arrival, "{}", run.report.name);
    }
}

/// Admits only while a worker is free.
struct FreeWorkerOnly;

impl Strategy for FreeWorkerOnly {
    fn offer(&mut self, _: u64, _: bool, _: u64, backend: &BackendView) -> Offer {
        if backend.in_flight() < u64::from(backend.workers) {
            Offer::Admit
        } else {
            Offer::Refuse { retry_after: None }
        }
    }
    fn ready(&mut self, id: u64, now: u64, backend: &BackendView) -> Offer {
        self.offer(id, true, now, backend)
    }
    fn abandon(&mut self, _: u64, _: u64) {}
    fn complete(&mut self, _: u64, _: u64, _: bool) {}
}

#[test]
fn an_extra_strategy_runs_after_the_built_in_ones_and_can_be_judged() {
    let d = cheap(2, |_| true);
    let free: StrategyFactory = &|| Box::new(FreeWorkerOnly) as Box<dyn Strategy>;
    let result = family::run_draw(&d, &[("free-worker-only", free)]);
    assert_eq!(result.strategies.len(), 4);
    assert_eq!(result.strategies[3].report.name, "free-worker-only");
    let checked = bars::check_draw(&result, "free-worker-only").expect("it ran");
    assert_eq!(checked.bars.len(), BarKind::ALL.len());
    // Judged against itself, the static limit has a ratio of exactly 1.
    let itself = bars::check_draw(&result, STATIC).expect("it ran");
    assert_eq!(itself.ratio, 1.0);
    assert_eq!(
        itself.bar(BarKind::Goodput).map(|b| b.verdict),
        Some(Verdict::Pass)
    );
    match bars::check_draw(&result, "nobody") {
        Err(BarsError::MissingStrategy {
            strategy, known, ..
        }) => {
            assert_eq!(strategy, "nobody");
            assert!(known.contains("free-worker-only"), "{known}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn run_family_is_sorted_and_the_same_on_any_number_of_threads() {
    let seed = (1..)
        .find(|&s| (0..3).all(|i| cost(&draw(s, i)) < 5_000.0))
        .expect("a seed with three cheap draws first");
    let one = family::run_family(seed, 3, 1, &[]);
    let three = family::run_family(seed, 3, 3, &[]);
    assert_eq!(one, three);
    let indices: Vec<usize> = one.iter().map(|r| r.draw.index).collect();
    assert_eq!(indices, [0, 1, 2]);
    assert_eq!(one[1], family::run_draw(&draw(seed, 1), &[]));
}

// ---------------------------------------------------------------------------------------------
// Bars on hand-built results

/// 1,000 rps (10 workers at 10 ms), a 5 s warm-up at 0.5 C, a 3 s flood at 3 C with 20 %
/// urgent (0.6 C), a 2 s cool-down: the flood is 5,000..8,000 ms.
fn base_draw() -> Draw {
    Draw {
        seed: 1,
        index: 0,
        workers: 10,
        service_time: Duration::from_millis(10),
        distribution: Distribution::Exponential,
        congestion: 0.1,
        load: 3.0,
        urgent_share: 0.2,
        urgent_flood: false,
        urgent_load: 0.6,
        client_timeout: Duration::from_millis(200),
        warm_up: Duration::from_secs(5),
        warm_load: 0.5,
    }
}

/// 102 slices with the draw's load at their start, nothing answered.
fn timeline(d: &Draw) -> Vec<TimelineSample> {
    let flood = d.flood_window_ms();
    let end = flood.end + d.cool_down().as_millis() as u64;
    (0..end / SLICE_MS + 2)
        .map(|i| {
            let t_ms = i * SLICE_MS;
            let load = if t_ms < flood.start {
                d.warm_load
            } else if t_ms < flood.end {
                d.load
            } else if t_ms < end {
                0.5
            } else {
                0.0
            };
            TimelineSample {
                t_ms,
                load,
                offered_urgent: 0,
                offered_non_urgent: 0,
                answered_urgent: 0,
                answered_non_urgent: 0,
                refused: 0,
                timed_out: 0,
                in_flight: 0,
                waiting: 0,
                mean_latency_ms: None,
                p99_ms: None,
                late: 0,
                switch_on: false,
                memory_ratio: 0.3,
            }
        })
        .collect()
}

/// A run named `name` with `goodput`, every request arriving answered in time, urgent and
/// non-urgent per slice as the draw's loads say, a reaction of 5 ms.
fn run(d: &Draw, name: &str, goodput: f64) -> StrategyRun {
    let flood = d.flood_window_ms();
    let per_slice = d.capacity() * SLICE_MS as f64 / 1e3;
    let timeline = timeline(d);
    let by_arrival = timeline
        .iter()
        .map(|t| {
            let (urgent, non_urgent) = if flood.contains(&t.t_ms) {
                (d.urgent_load, d.non_urgent_load())
            } else {
                (t.load * d.urgent_share, t.load * (1.0 - d.urgent_share))
            };
            let u = (urgent * per_slice).round() as u32;
            let n = (non_urgent * per_slice).round() as u32;
            ArrivalSlice {
                offered_urgent: u,
                answered_urgent: u,
                offered_non_urgent: n,
                answered_non_urgent: n,
            }
        })
        .collect();
    StrategyRun {
        report: StrategyReport {
            name: name.to_owned(),
            goodput_ratio: goodput,
            urgent_success: 1.0,
            non_urgent_success: 1.0,
            p50_ms: Some(10.0),
            p99_ms: Some(40.0),
            wasted_work: 0.0,
            switch_flips: 0,
            reaction_ms: Some(5.0),
            recovery_ms: Some(0.0),
            peak_memory_ratio: 0.3,
            timeline,
        },
        by_arrival,
    }
}

/// The three built-in runs on `d`: the subject at `goodput`, the static limit at 0.95 and no
/// protection at 0.2; `change` edits the subject's run.
fn result(d: Draw, goodput: f64, change: impl Fn(&mut StrategyRun)) -> DrawResult {
    let mut subject = run(&d, SUBJECT, goodput);
    change(&mut subject);
    DrawResult {
        draw: d,
        strategies: vec![run(&d, UNPROTECTED, 0.2), run(&d, STATIC, 0.95), subject],
        urgent_alone: None,
    }
}

fn verdict(r: &DrawResult, kind: BarKind) -> Verdict {
    let checked = bars::check_draw(r, SUBJECT).expect("every strategy ran");
    checked
        .bar(kind)
        .map_or(Verdict::NotApplicable, |b| b.verdict)
}

fn flood_slices(d: &Draw) -> std::ops::Range<usize> {
    let w = d.flood_window_ms();
    (w.start / SLICE_MS) as usize..(w.end / SLICE_MS) as usize
}

#[test]
fn a_good_subject_passes_every_bar_that_applies() {
    let r = result(base_draw(), 0.95, |_| {});
    let checked = bars::check_draw(&r, SUBJECT).expect("every strategy ran");
    assert_eq!(checked.ratio, 1.0);
    let verdicts: Vec<(BarKind, Verdict)> =
        checked.bars.iter().map(|b| (b.kind, b.verdict)).collect();
    use Verdict::{NotApplicable as Na, Pass};
    assert_eq!(
        verdicts,
        [
            (BarKind::Goodput, Pass),
            (BarKind::AboveUnprotected, Pass),
            (BarKind::UrgentSuccess, Pass),
            (BarKind::NonUrgentFloor, Na),
            (BarKind::UrgentShare, Na),
            (BarKind::QuietFlips, Pass),
            (BarKind::Flips, Pass),
            (BarKind::Reaction, Pass),
            (BarKind::ColdStart, Na),
        ]
    );
    assert_eq!(checked.failed().count(), 0);
    let family = bars::check_family(&[r.clone(), r], SUBJECT).expect("every strategy ran");
    assert!(family.all_pass(), "{:#?}", family.family);
    assert_eq!(family.family.len(), 2 + BarKind::ALL.len() - 1);
}

#[test]
fn goodput_is_judged_against_the_static_limit_and_no_protection() {
    let low = result(base_draw(), 0.95 * 0.85, |_| {});
    let checked = bars::check_draw(&low, SUBJECT).expect("ran");
    assert!((checked.ratio - 0.85).abs() < 1e-12);
    assert_eq!(verdict(&low, BarKind::Goodput), Verdict::Fail);
    assert_eq!(verdict(&low, BarKind::AboveUnprotected), Verdict::Pass);
    // Within 0.005 of no protection passes, beyond fails.
    assert_eq!(
        verdict(
            &result(base_draw(), 0.196, |_| {}),
            BarKind::AboveUnprotected
        ),
        Verdict::Pass
    );
    assert_eq!(
        verdict(
            &result(base_draw(), 0.194, |_| {}),
            BarKind::AboveUnprotected
        ),
        Verdict::Fail
    );
}

#[test]
fn light_urgent_traffic_must_be_served_in_the_flood_and_only_there() {
    let d = base_draw();
    let flood = flood_slices(&d);
    // 60 urgent a slice, 30 slices: 1,800 urgent requests in the flood; losing 2 misses 99.9 %,
    // losing 1 does not.
    let lose = |n: u32| {
        let first = flood.start;
        result(d, 0.95, move |s| s.by_arrival[first].answered_urgent -= n)
    };
    assert_eq!(verdict(&lose(1), BarKind::UrgentSuccess), Verdict::Pass);
    assert_eq!(verdict(&lose(2), BarKind::UrgentSuccess), Verdict::Fail);
    // Losses of the warm-up are not the flood's.
    let warm = result(d, 0.95, |s| s.by_arrival[3].answered_urgent = 0);
    assert_eq!(verdict(&warm, BarKind::UrgentSuccess), Verdict::Pass);
    // More than 0.8 C of urgent demand, or none: not this bar.
    let heavy = Draw {
        urgent_share: 0.3,
        urgent_load: 0.9,
        ..d
    };
    assert_eq!(
        verdict(&result(heavy, 0.95, |_| {}), BarKind::UrgentSuccess),
        Verdict::NotApplicable
    );
    let none = Draw {
        urgent_share: 0.0,
        urgent_load: 0.0,
        ..d
    };
    assert_eq!(
        verdict(&result(none, 0.95, |_| {}), BarKind::UrgentSuccess),
        Verdict::NotApplicable
    );
}

#[test]
fn an_urgent_flood_keeps_non_urgent_traffic_at_its_floor_and_gives_urgent_traffic_capacity() {
    // Urgent 2 C, non-urgent at its base of 0.4 C: the flood offers 200 urgent a slice.
    let d = Draw {
        urgent_flood: true,
        urgent_load: 2.0,
        load: 2.4,
        ..base_draw()
    };
    let flood = flood_slices(&d);
    // Half the urgent requests answered (target 0.95 / 2), 3 non-urgent a slice after the
    // first (30 rps against 30 + 1 + 3·√(30·2.9)/2.9 = 40.6 allowed).
    let answer = move |urgent: u32, non_urgent: u32, first: u32| {
        let flood = flood.clone();
        result(d, 0.95, move |s| {
            for i in flood.clone() {
                s.by_arrival[i].answered_urgent = urgent;
                s.by_arrival[i].answered_non_urgent =
                    if i == flood.start { first } else { non_urgent };
            }
        })
    };
    let good = answer(100, 3, 40);
    assert_eq!(verdict(&good, BarKind::NonUrgentFloor), Verdict::Pass);
    assert_eq!(verdict(&good, BarKind::UrgentShare), Verdict::Pass);
    assert_eq!(
        verdict(&good, BarKind::UrgentSuccess),
        Verdict::NotApplicable
    );
    let checked = bars::check_draw(&good, SUBJECT).expect("ran");
    let floor = checked.bar(BarKind::NonUrgentFloor).expect("listed");
    assert!((floor.figure - 30.0).abs() < 1e-9, "{floor:?}");
    assert!((floor.target - (31.0 + 3.0 * (30.0f64 * 2.9).sqrt() / 2.9)).abs() < 1e-9);
    let urgent = checked.bar(BarKind::UrgentShare).expect("listed");
    assert!((urgent.figure - 0.5).abs() < 1e-12 && (urgent.target - 0.475).abs() < 1e-12);
    assert_eq!(
        verdict(&answer(100, 5, 0), BarKind::NonUrgentFloor),
        Verdict::Fail
    );
    assert_eq!(
        verdict(&answer(90, 3, 0), BarKind::UrgentShare),
        Verdict::Fail
    );
}

#[test]
fn the_switch_may_not_turn_on_below_090_c_nor_flip_more_than_twice() {
    let d = base_draw();
    let flood = flood_slices(&d);
    let switch = move |on: Vec<usize>, flips: u64| {
        result(d, 0.95, move |s| {
            for &i in &on {
                s.report.timeline[i].switch_on = true;
            }
            s.report.switch_flips = flips;
        })
    };
    // On through the flood and off in the cool-down: one pair.
    let episode: Vec<usize> = (flood.start..flood.end + 3).collect();
    assert_eq!(
        verdict(&switch(episode.clone(), 2), BarKind::QuietFlips),
        Verdict::Pass
    );
    assert_eq!(
        verdict(&switch(episode.clone(), 2), BarKind::Flips),
        Verdict::Pass
    );
    assert_eq!(
        verdict(&switch(episode.clone(), 3), BarKind::Flips),
        Verdict::Fail
    );
    // On in the warm-up, or on again in the cool-down.
    assert_eq!(
        verdict(&switch(vec![10, 11], 2), BarKind::QuietFlips),
        Verdict::Fail
    );
    let mut again = episode;
    again.push(flood.end + 6);
    assert_eq!(
        verdict(&switch(again, 4), BarKind::QuietFlips),
        Verdict::Fail
    );
}

#[test]
fn the_reaction_is_judged_after_a_learnable_warm_up_and_cold_start_protection_otherwise() {
    let d = base_draw();
    let config = Config::default();
    assert!(bars::learnable_warm_up(&d, &config));
    let slow = result(d, 0.95, |s| s.report.reaction_ms = Some(150.0));
    assert_eq!(verdict(&slow, BarKind::Reaction), Verdict::Fail);
    let never = result(d, 0.95, |s| s.report.reaction_ms = None);
    assert_eq!(verdict(&never, BarKind::Reaction), Verdict::Fail);
    assert_eq!(verdict(&never, BarKind::ColdStart), Verdict::NotApplicable);
    // 100 ms at 500 rps completes about 45 requests, fewer than the 50 samples a gate needs:
    // judged as a cold start, like none at all.
    for warm_up in [Duration::ZERO, Duration::from_millis(100)] {
        let cold = Draw { warm_up, ..d };
        assert!(!bars::learnable_warm_up(&cold, &config));
        assert_eq!(
            bars::cold_window_ms(&cold).end - bars::cold_window_ms(&cold).start,
            1000
        );
        let answers = |share: f64| {
            result(cold, 0.95, move |s| {
                for t in &mut s.report.timeline {
                    t.answered_urgent = (100.0 * share) as u32;
                }
            })
        };
        let with_reference = |share: f64| {
            let mut r = answers(share);
            for t in &mut r.strategies[1].report.timeline {
                t.answered_urgent = 100;
            }
            r
        };
        assert_eq!(
            verdict(&with_reference(0.6), BarKind::ColdStart),
            Verdict::Pass
        );
        assert_eq!(
            verdict(&with_reference(0.4), BarKind::ColdStart),
            Verdict::Fail
        );
        assert_eq!(
            verdict(&with_reference(0.4), BarKind::Reaction),
            Verdict::NotApplicable
        );
    }
}

#[test]
fn the_ratio_summary_uses_nearest_ranks_and_the_middle_of_an_even_count() {
    let ratios: Vec<f64> = (1..=20).rev().map(|i| f64::from(i) / 20.0).collect();
    let s = RatioSummary::of(&ratios);
    assert_eq!(s.min, 0.05);
    assert_eq!(s.p5, 0.05);
    assert_eq!(s.p10, 0.10);
    assert!((s.median - 0.525).abs() < 1e-12);
    assert!((s.mean - 0.525).abs() < 1e-12);
    assert!((s.share_at_bar - 0.15).abs() < 1e-12);
    assert!(RatioSummary::of(&[]).median.is_nan());
}

// ---------------------------------------------------------------------------------------------
// The report

#[test]
fn the_report_lists_every_draw_the_summary_the_bars_and_the_worst_draws() {
    let results: Vec<DrawResult> = (0..12)
        .map(|i| {
            let d = Draw {
                index: i,
                ..base_draw()
            };
            result(d, 0.95 * (0.52 + i as f64 / 20.0), |_| {})
        })
        .collect();
    let checked = bars::check_family(&results, SUBJECT).expect("every strategy ran");
    let text = report::render(&results, &checked);
    for line in [
        "# family: seed 1, 12 draws, bars for sluicegate-auto",
        "goodput ratio of sluicegate-auto to concurrency-limit over 12 draws:",
        "  min 0.52  p5 0.52  p10 0.57  median 0.795  mean 0.795",
        "  draws with ratio >= 0.9: 4 of 12 (33.3%)",
        "family bars (sluicegate-auto):",
        "FAIL  goodput ratio >= 0.9 on >= 95% of draws: 0.3333 (target 0.95), 4 of 12 draws",
        "FAIL  median goodput ratio >= 0.95: 0.795 (target 0.95), 3 of 12 draws",
        "PASS  U0 goodput >= unprotected's - 0.005 on every draw",
        "overall: FAIL",
        "10 worst draws by ratio:",
        "sluicegate simulate --seed 1 --draw 0",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    // By kind of service: all twelve draws are warm and have ten workers.
    assert!(text.contains("draws with ratio >= 0.9 by kind of service:"));
    let kind = |label: &str| {
        let row = text.lines().find(|l| l.starts_with(label));
        row.unwrap_or_else(|| panic!("no row {label:?} in\n{text}"))
    };
    assert!(kind("4-30 ").contains("4 of 12") && kind("4-30 ").ends_with('-'));
    assert!(kind("1-3 ").split_whitespace().skip(1).all(|c| c == "-"));
    // A row per draw, and only the ten worst in the list (draws 10 and 11 are the best).
    assert_eq!(text.matches("--draw ").count(), report::WORST);
    assert!(!text.contains("--draw 10") && !text.contains("--draw 11"));
    for i in 0..12 {
        assert!(
            text.lines().any(|l| l.starts_with(&format!("{i:>2}  "))),
            "row {i}"
        );
    }
    assert_eq!(text, report::render(&results, &checked));
    let detail = report::draw_detail(&results[0], &checked.draws[0], SUBJECT);
    assert!(
        detail.contains("FAIL  G ")
            && detail.contains("rerun: sluicegate simulate --seed 1 --draw 0")
    );
}

// ---------------------------------------------------------------------------------------------
// The bars on a fixed sample

/// Every family bar for `sluicegate-auto` on draws 0 to 39 of seed 11. Expected to fail until
/// the gate is good enough: `cargo test --release --test family -- --ignored --nocapture`.
#[test]
#[ignore = "40 draws (a few seconds in release); fails until sluicegate-auto meets the family bars"]
fn sluicegate_auto_meets_the_family_bars_on_a_fixed_sample() {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let results = family::run_family(11, 40, threads, &[]);
    let checked = bars::check_family(&results, SUBJECT).expect("every strategy ran");
    println!("{}", report::summary(&results, &checked));
    let failed: Vec<String> = checked
        .family
        .iter()
        .filter(|b| !b.pass)
        .map(ToString::to_string)
        .collect();
    assert!(
        failed.is_empty(),
        "family bars missed:\n{}",
        failed.join("\n")
    );
}
