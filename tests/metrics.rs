//! The gate's metrics through a real recorder: what is published equals what the gate counts and
//! sees, and the names follow Prometheus conventions.
//!
//! Every gate here runs on a manual clock, with its memory read only on demand, so the ticks that
//! publish run on the test's thread, where `metrics::with_local_recorder` applies.
#![cfg(feature = "metrics")]

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{hold, ms, small_config, FakeMemory};
use metrics_exporter_prometheus::{
    Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};
use sluicegate::breaker::{Breaker, BreakerConfig};
use sluicegate::clock::ManualClock;
use sluicegate::observe::names;
use sluicegate::{Admission, Config, Gate, Permit, RejectReason, Request, Snapshot, SwitchMode};
use tokio_test::{assert_pending, task};

/// A gate on a manual clock (at 1 s), its memory read only on `refresh_memory`, labelled `label`.
fn gate(config: Config, label: Option<&str>) -> (Gate<ManualClock>, ManualClock, FakeMemory) {
    let clock = ManualClock::new();
    clock.advance(Duration::from_secs(1));
    let memory = FakeMemory::default();
    let builder = Gate::builder(config)
        .clock(clock.clone())
        .manual_memory_probe(memory.probe());
    let builder = match label {
        Some(l) => builder.metrics_label(l),
        None => builder,
    };
    (builder.build().expect("valid config"), clock, memory)
}

/// Runs the sampler's tick now (the next tick is due at most `sampler.tick` = 100 ms away) and
/// returns the snapshot it published.
fn tick(gate: &Gate<ManualClock>, clock: &ManualClock) -> Snapshot {
    clock.advance(ms(100));
    gate.snapshot()
}

/// One published series: its name and labels, sorted.
type Series = (String, Vec<(String, String)>);

/// A Prometheus recorder for this thread's metrics (see `metrics::with_local_recorder`), with
/// buckets for the latency histogram so that its samples can be counted exactly.
fn prometheus() -> PrometheusRecorder {
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full(names::LATENCY.to_owned()), &[0.03, 0.07, 0.1])
        .expect("buckets")
        .build_recorder()
}

/// What the recorder holds now, from the Prometheus text it renders: each sample line's value.
fn published(handle: &PrometheusHandle) -> BTreeMap<Series, f64> {
    handle
        .render()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').expect("a sample line");
            let (name, labels) = match series.split_once('{') {
                Some((name, labels)) => (name, labels.trim_end_matches('}')),
                None => (series, ""),
            };
            let mut labels: Vec<(String, String)> = labels
                .split(',')
                .filter(|l| !l.is_empty())
                .map(|l| {
                    let (k, v) = l.split_once('=').expect("a label");
                    (k.to_owned(), v.trim_matches('"').to_owned())
                })
                .collect();
            labels.sort();
            let value = value.parse().unwrap_or_else(|_| panic!("{line}"));
            ((name.to_owned(), labels), value)
        })
        .collect()
}

fn series(name: &str, labels: &[(&str, &str)]) -> Series {
    let mut labels: Vec<_> = labels
        .iter()
        .map(|&(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    labels.sort();
    (name.to_owned(), labels)
}

/// The value of a series (a counter's count, a gauge's level), which must be there.
fn value(p: &BTreeMap<Series, f64>, name: &str, labels: &[(&str, &str)]) -> f64 {
    *p.get(&series(name, labels))
        .unwrap_or_else(|| panic!("{name} {labels:?} not published: {p:#?}"))
}

/// A counter's count, which must be whole.
fn counter(p: &BTreeMap<Series, f64>, name: &str, labels: &[(&str, &str)]) -> u64 {
    let v = value(p, name, labels);
    assert_eq!(v.fract(), 0.0, "{name} {labels:?}: {v}");
    v as u64
}

/// A figure as a gauge shows it: NaN for "not known".
fn known(figure: Option<f64>) -> f64 {
    figure.unwrap_or(f64::NAN)
}

/// Whether two gauge readings are the same, NaN included.
fn same(a: f64, b: f64) -> bool {
    a == b || a.is_nan() && b.is_nan()
}

/// A config whose every kind of refusal is easy to reach: 3 in flight at most, one waiter, one
/// token each 10 ms.
fn tight_config() -> Config {
    let mut config = small_config();
    config.gate.max_in_flight = (3).into();
    config.gate.max_running = (3).into();
    config.gate.max_waiters = 1;
    config
}

/// Admits, refuses for each of the gate's reasons, abandons a wait, admits after a wait, and
/// releases as a success, a failure and a cancellation. Leaves the switch forced on and one
/// request in flight: the permit returned.
fn known_sequence<'g>(
    gate: &'g Gate<ManualClock>,
    clock: &ManualClock,
    memory: &FakeMemory,
) -> Permit<'g, ManualClock> {
    let req = Request::url("/x");
    // Switch off: three admitted, the fourth finds the ceiling.
    let held = hold(gate, &req, 3);
    let refused = gate.try_acquire(&req).unwrap_err();
    assert_eq!(refused.reason, RejectReason::InFlightCeiling);
    let mut held = held.into_iter();
    held.next().unwrap().failure();
    drop(held); // two successes
                // A call whose future is dropped while the handler runs.
    let mut call =
        task::spawn(gate.call(Request::url("/x"), std::future::pending::<()>, |_| async {}));
    assert_pending!(call.poll());
    drop(call);
    // Memory at its ceiling.
    memory.set_used(950);
    gate.refresh_memory();
    let refused = gate.try_acquire(&req).unwrap_err();
    assert_eq!(refused.reason, RejectReason::MemoryCeiling);
    memory.set_used(100);
    gate.refresh_memory();
    // Switch on: the token now, then waits.
    gate.set_switch(SwitchMode::ForceOn);
    let first = gate.try_acquire(&req).expect("the token of now");
    let refused = gate.try_acquire(&req).unwrap_err(); // would have to wait
    assert_eq!(refused.reason, RejectReason::RateLimited);
    let Ok(Admission::Wait(abandoned)) = gate.begin(&req) else {
        panic!("a wait for the next token")
    };
    let refused = gate.begin(&req).map(|_| ()).unwrap_err();
    assert_eq!(refused.reason, RejectReason::TooManyWaiters);
    drop(abandoned);
    let Ok(Admission::Wait(ticket)) = gate.begin(&req) else {
        panic!("a wait for the next token")
    };
    clock.advance(ticket.wait());
    ticket.admit().expect("its token exists").success();
    first
}

#[test]
fn published_counts_equal_the_gates_own_counters_after_a_known_sequence() {
    let recorder = prometheus();
    let handle = recorder.handle();
    let s = metrics::with_local_recorder(&recorder, || {
        let (gate, clock, memory) = gate(tight_config(), Some("api"));
        let _in_flight = known_sequence(&gate, &clock, &memory);
        let s = tick(&gate, &clock);
        // The sequence did what it says.
        let c = s.counters;
        assert_eq!(
            (c.admitted, c.succeeded, c.failed, c.cancelled),
            (6, 3, 1, 1)
        );
        assert_eq!(
            (
                c.refused_in_flight,
                c.refused_memory,
                c.refused_rate,
                c.refused_waiters,
                c.abandoned,
                c.waited
            ),
            (1, 1, 1, 1, 1, 1)
        );
        s
    });
    let p = published(&handle);
    let c = s.counters;
    let api = ("gate", "api");
    let requests = |labels: &[(&str, &str)]| {
        let mut all = vec![api];
        all.extend_from_slice(labels);
        counter(&p, names::REQUESTS, &all)
    };
    assert_eq!(requests(&[("result", "admitted")]), c.admitted);
    for (reason, n) in [
        (RejectReason::InFlightCeiling, c.refused_in_flight),
        (RejectReason::MemoryCeiling, c.refused_memory),
        (RejectReason::RateLimited, c.refused_rate),
        (RejectReason::TooManyWaiters, c.refused_waiters),
    ] {
        assert_eq!(
            requests(&[("result", "refused"), ("reason", reason.as_str())]),
            n,
            "{reason}"
        );
    }
    assert_eq!(requests(&[("result", "abandoned")]), c.abandoned);
    for (outcome, n) in [
        ("succeeded", c.succeeded),
        ("failed", c.failed),
        ("cancelled", c.cancelled),
    ] {
        assert_eq!(
            counter(&p, names::CALLS, &[api, ("outcome", outcome)]),
            n,
            "{outcome}"
        );
    }
    for (urgency, n) in [
        ("urgent", c.classified_urgent),
        ("non_urgent", c.classified_non_urgent),
    ] {
        assert_eq!(
            counter(&p, names::REQUESTS_CLASSIFIED, &[api, ("urgency", urgency)]),
            n
        );
    }
    // The gauges are the snapshot's figures.
    assert_eq!(value(&p, names::IN_FLIGHT, &[api]), s.in_flight as f64);
    assert_eq!(value(&p, names::IN_FLIGHT, &[api]), 1.0);
    assert_eq!(value(&p, names::WAITERS, &[api]), 0.0);
    assert_eq!(value(&p, names::SWITCH_ON, &[api]), 1.0);
    assert_eq!(value(&p, names::MEMORY_RATIO, &[api]), 0.1);
    assert_eq!(value(&p, names::LIMIT_MAX_IN_FLIGHT, &[api]), 3.0);
    assert_eq!(value(&p, names::LIMIT_MAX_QPS, &[api]), s.limits.max_qps);
    assert_eq!(
        value(&p, names::LIMIT_MAX_RUNNING, &[api]),
        s.limits.max_running as f64
    );
    assert_eq!(
        value(&p, names::LIMIT_MAX_AVG_LATENCY, &[api]),
        s.limits.max_avg_latency.as_secs_f64()
    );
    // What is not learned (yet) reads NaN, not a made-up 0.
    let learned = s.learned;
    let figures = [
        (names::LEARNED_CAPACITY, learned.capacity),
        (names::LEARNED_KNEE, learned.knee.map(|k| k as f64)),
        (
            names::LEARNED_BASE_LATENCY,
            learned.base_latency.map(|d| d.as_secs_f64()),
        ),
        (
            names::LATENCY_TRIMMED_MEAN,
            s.trimmed_mean.map(|d| d.as_secs_f64()),
        ),
    ];
    for (name, figure) in figures {
        let published = value(&p, name, &[api]);
        assert!(same(published, known(figure)), "{name}: {published}");
    }
    assert!(value(&p, names::LATENCY_TRIMMED_MEAN, &[api]).is_nan()); // 3 of min_samples 5
                                                                      // The one request that waited, for its token 10 ms away.
    let wait = |suffix: &str| value(&p, &format!("{}{suffix}", names::WAIT), &[api]);
    assert_eq!((wait("_count"), wait("_sum")), (1.0, 0.010));
    // Every series of the gate carries its label.
    for (name, labels) in p.keys() {
        assert!(
            labels.contains(&("gate".to_owned(), "api".to_owned())),
            "{name} {labels:?}"
        );
    }
}

#[test]
fn counters_move_by_what_happened_between_ticks_and_gauges_follow_the_snapshot() {
    let recorder = prometheus();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        let (gate, clock, _) = gate(small_config(), None);
        let req = Request::url("/x");
        let mut held = hold(&gate, &req, 7);
        let s = tick(&gate, &clock);
        let p = published(&handle);
        assert_eq!(value(&p, names::IN_FLIGHT, &[]), 7.0);
        assert_eq!(value(&p, names::IN_FLIGHT, &[]), s.in_flight as f64);
        assert_eq!(counter(&p, names::REQUESTS, &[("result", "admitted")]), 7);
        assert_eq!(counter(&p, names::CALLS, &[("outcome", "succeeded")]), 0);

        held.truncate(2);
        let more = hold(&gate, &req, 3);
        let s = tick(&gate, &clock);
        let p = published(&handle);
        assert_eq!(value(&p, names::IN_FLIGHT, &[]), 5.0);
        assert_eq!(value(&p, names::IN_FLIGHT, &[]), s.in_flight as f64);
        assert_eq!(
            counter(&p, names::REQUESTS, &[("result", "admitted")]),
            s.counters.admitted
        );
        assert_eq!(s.counters.admitted, 10);
        assert_eq!(counter(&p, names::CALLS, &[("outcome", "succeeded")]), 5);

        // Nothing happens: a tick publishes nothing new, and counts nothing twice.
        let s = tick(&gate, &clock);
        let p = published(&handle);
        assert_eq!(
            counter(&p, names::REQUESTS, &[("result", "admitted")]),
            s.counters.admitted
        );
        assert_eq!(counter(&p, names::CALLS, &[("outcome", "succeeded")]), 5);
        drop((held, more));
    });
}

#[test]
fn a_switch_flip_is_counted_and_the_switch_gauge_follows() {
    let recorder = prometheus();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        let (gate, clock, _) = gate(small_config(), None);
        let s = tick(&gate, &clock);
        let p = published(&handle);
        assert_eq!((s.switch_flips, s.switch.on), (0, false));
        assert_eq!(counter(&p, names::SWITCH_FLIPS, &[]), 0);
        assert_eq!(value(&p, names::SWITCH_ON, &[]), 0.0);

        // Overload: more than max_running (5) in flight, a trimmed mean above 100 ms.
        let mut held = hold(&gate, &Request::url("/x"), 12);
        clock.advance(ms(150));
        held.truncate(6);
        let s = gate.snapshot(); // the tick that turns the switch on
        let p = published(&handle);
        assert_eq!((s.switch_flips, s.switch.on), (1, true));
        assert_eq!(counter(&p, names::SWITCH_FLIPS, &[]), 1);
        assert_eq!(value(&p, names::SWITCH_ON, &[]), 1.0);
        assert_eq!(
            value(&p, names::LATENCY_TRIMMED_MEAN, &[]),
            s.trimmed_mean.unwrap().as_secs_f64()
        );

        gate.set_switch(SwitchMode::ForceOff);
        let s = tick(&gate, &clock);
        let p = published(&handle);
        assert_eq!(s.switch_flips, 2);
        assert_eq!(counter(&p, names::SWITCH_FLIPS, &[]), 2);
        assert_eq!(value(&p, names::SWITCH_ON, &[]), 0.0);
        drop(held);
    });
}

/// The latency histogram's cumulative counts at 30 ms, 70 ms, 100 ms and in all.
fn latency_buckets(handle: &PrometheusHandle) -> [u64; 4] {
    let p = published(handle);
    let bucket = format!("{}_bucket", names::LATENCY);
    ["0.03", "0.07", "0.1", "+Inf"].map(|le| counter(&p, &bucket, &[("le", le)]))
}

#[test]
fn the_latency_histogram_gets_each_latency_the_sampler_recorded_once() {
    let recorder = prometheus();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        let (gate, clock, _) = gate(small_config(), None);
        let held = hold(&gate, &Request::url("/x"), 4);
        clock.advance(ms(30));
        drop(held);
        let held = hold(&gate, &Request::url("/x"), 2);
        clock.advance(ms(70));
        drop(held);
        let s = gate.snapshot(); // the first tick, 100 ms after the start
        assert_eq!(s.latency_samples, 6);
        assert_eq!(latency_buckets(&handle), [4, 6, 6, 6]);
        // The next tick records only what completed since.
        let held = hold(&gate, &Request::url("/x"), 1);
        clock.advance(ms(100));
        drop(held);
        gate.snapshot();
        assert_eq!(latency_buckets(&handle), [4, 6, 7, 7]);
    });
}

#[test]
fn two_labelled_gates_publish_apart() {
    let recorder = prometheus();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        let (a, clock_a, _) = gate(small_config(), Some("a"));
        let (b, clock_b, _) = gate(small_config(), Some("b"));
        let _held_a = hold(&a, &Request::url("/x"), 2);
        let _held_b = hold(&b, &Request::url("/x"), 5);
        tick(&a, &clock_a);
        tick(&b, &clock_b);
        let p = published(&handle);
        assert_eq!(value(&p, names::IN_FLIGHT, &[("gate", "a")]), 2.0);
        assert_eq!(value(&p, names::IN_FLIGHT, &[("gate", "b")]), 5.0);
        assert_eq!(
            counter(
                &p,
                names::REQUESTS,
                &[("gate", "b"), ("result", "admitted")]
            ),
            5
        );
    });
}

#[test]
fn a_breaker_state_change_is_counted_and_the_open_gauge_follows() {
    let recorder = prometheus();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        let clock = ManualClock::new();
        let breaker = Breaker::new(BreakerConfig::default(), clock.clone()).unwrap();
        for _ in 0..5 {
            breaker.try_acquire().unwrap().failure();
        }
        let p = published(&handle);
        assert_eq!(
            counter(&p, names::BREAKER_STATE_CHANGES, &[("to", "open")]),
            1
        );
        assert_eq!(value(&p, names::BREAKERS_OPEN, &[]), 1.0);
        // Open, then half-open: still refusing all but its probes.
        clock.advance(Duration::from_secs(10));
        let probes: Vec<_> = (0..3).map(|_| breaker.try_acquire().unwrap()).collect();
        let p = published(&handle);
        assert_eq!(
            counter(&p, names::BREAKER_STATE_CHANGES, &[("to", "half_open")]),
            1
        );
        assert_eq!(value(&p, names::BREAKERS_OPEN, &[]), 1.0);
        probes.into_iter().for_each(|p| p.success());
        let p = published(&handle);
        assert_eq!(
            counter(&p, names::BREAKER_STATE_CHANGES, &[("to", "closed")]),
            1
        );
        assert_eq!(value(&p, names::BREAKERS_OPEN, &[]), 0.0);
        // A breaker dropped while open no longer counts.
        breaker.force_open();
        assert_eq!(value(&published(&handle), names::BREAKERS_OPEN, &[]), 1.0);
        drop(breaker);
        assert_eq!(value(&published(&handle), names::BREAKERS_OPEN, &[]), 0.0);
    });
}

/// The Prometheus text of a gate that admitted, refused, waited and timed calls, and of a breaker
/// that opened, as a Prometheus exporter renders it.
fn rendered(builder: PrometheusBuilder) -> String {
    let recorder = builder.build_recorder();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        let (gate, clock, memory) = gate(tight_config(), None);
        let _in_flight = known_sequence(&gate, &clock, &memory);
        tick(&gate, &clock);
        let breaker = Breaker::new(BreakerConfig::default(), ManualClock::new()).unwrap();
        for _ in 0..5 {
            breaker.try_acquire().unwrap().failure();
        }
    });
    handle.render()
}

#[test]
fn every_published_name_follows_prometheus_conventions_and_has_help() {
    let text = rendered(PrometheusBuilder::new());
    let mut types = BTreeMap::new();
    let mut helps = Vec::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["#", "TYPE", name, kind] => {
                types.insert(name.to_string(), kind.to_string());
            }
            ["#", "HELP", name, help @ ..] => {
                assert!(!help.is_empty(), "{line}");
                helps.push(name.to_string());
            }
            _ => {}
        }
    }
    // Everything the gate and the breaker publish is there.
    for name in [
        names::REQUESTS,
        names::REQUESTS_CLASSIFIED,
        names::CALLS,
        names::SWITCH_FLIPS,
        names::IN_FLIGHT,
        names::WAITERS,
        names::SWITCH_ON,
        names::LATENCY_TRIMMED_MEAN,
        names::MEMORY_RATIO,
        names::LEARNED_CAPACITY,
        names::LEARNED_BASE_LATENCY,
        names::LEARNED_KNEE,
        names::LEARNED_CEILING,
        names::LEARNED_CONFIRMED,
        names::LIMIT_MAX_IN_FLIGHT,
        names::LIMIT_MAX_RUNNING,
        names::LIMIT_MAX_QPS,
        names::LIMIT_MAX_AVG_LATENCY,
        names::LIMIT_MAX_WAIT,
        names::LIMIT_SHARED_IN_FLIGHT,
        names::WAIT,
        names::LATENCY,
        names::BREAKER_STATE_CHANGES,
        names::BREAKERS_OPEN,
    ] {
        assert!(types.contains_key(name), "{name} missing from:\n{text}");
    }
    for (name, kind) in &types {
        assert!(name.starts_with("sluicegate_"), "{name}");
        assert!(helps.contains(name), "{name} has no HELP line");
        match kind.as_str() {
            "counter" => assert!(name.ends_with("_total"), "counter {name}"),
            _ => assert!(!name.ends_with("_total"), "{kind} {name}"),
        }
        // Durations are in seconds, and say so.
        if name.contains("latency") || (name.contains("wait") && !name.contains("waiters")) {
            assert!(name.ends_with("_seconds"), "duration {name}");
        }
    }
    // Every sample line belongs to a described metric.
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name = line.split(['{', ' ']).next().unwrap();
        let base = ["_sum", "_count", "_bucket"]
            .iter()
            .find_map(|s| name.strip_suffix(s).filter(|b| types.contains_key(*b)))
            .unwrap_or(name);
        assert!(types.contains_key(base), "{line}");
    }
    // The exporter's recommended naming (unit and `_total` suffixes) changes nothing: the names
    // already follow it.
    let recommended = rendered(PrometheusBuilder::new().with_recommended_naming(true));
    let names_of = |text: &str| {
        let mut names: Vec<String> = text
            .lines()
            .filter(|l| l.starts_with("# TYPE"))
            .map(|l| l.to_owned())
            .collect();
        names.sort();
        names
    };
    assert_eq!(names_of(&text), names_of(&recommended));
}

#[cfg(feature = "reload")]
#[test]
fn every_reload_attempt_of_the_file_is_counted_by_its_result() {
    let recorder = prometheus();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sluicegate.toml");
        std::fs::write(&path, "[gate]\nmax_qps = 500\n").unwrap();
        let (gate, _clock, _) = gate(Config::from_file(&path).unwrap(), None);
        let reloader = sluicegate::reload::Reloader::on_demand(&gate, &path).unwrap();
        std::fs::write(&path, "[gate]\nmax_qps = 800\n").unwrap();
        reloader.reload_now().unwrap();
        std::fs::write(&path, "[gate]\nmax_qps = -1\n").unwrap();
        reloader.reload_now().unwrap_err();
        reloader.reload_now().unwrap_err();
        let p = published(&handle);
        assert_eq!(counter(&p, names::CONFIG_RELOADS, &[("result", "ok")]), 1);
        assert_eq!(
            counter(&p, names::CONFIG_RELOADS, &[("result", "error")]),
            2
        );
    });
}
