//! A gate started cold into a flood (a service restarted during a peak): how soon it tells the
//! flood, the ceiling its first probe holds, and what that probe learns of the service's base
//! latency, on the simulator in virtual time, through the public API. The family's backends at their step load, without the warm-up phase, as
//! `examples/sim_cold_start.rs` runs them.
#![cfg(feature = "sim")]

use std::time::Duration;

use sluicegate::capacity::Learned;
use sluicegate::sim::{
    grid, run_strategy, simulated_gate, SharedMemory, Sluicegate, StrategyReport,
};
use sluicegate::Config;

/// What the default gate has learned at the end of the step of `capacity_rps` at `service_ms`
/// started cold at `load` times its capacity, on `seed`: the step alone, no warm-up before it
/// and no cool-down after.
fn learned_after_cold_step(capacity_rps: f64, service_ms: u64, load: f64, seed: u64) -> Learned {
    cold_step(capacity_rps, service_ms, load, seed, None).1
}

/// The report of that run, cut to `length` if given, and what the gate learned by its end.
fn cold_step(
    capacity_rps: f64,
    service_ms: u64,
    load: f64,
    seed: u64,
    length: Option<Duration>,
) -> (StrategyReport, Learned) {
    let spec = grid::BackendSpec {
        capacity_rps,
        service_time: Duration::from_millis(service_ms),
    };
    let mut scenario = grid::step_scenario(&spec, load);
    scenario.phases.remove(0);
    scenario.phases.truncate(1);
    if let Some(length) = length {
        scenario.phases[0].duration = length;
    }
    let clock = sluicegate::clock::ManualClock::new();
    let memory = SharedMemory::new(scenario.backend.memory_base, scenario.backend.memory_limit);
    let gate = simulated_gate(Config::default(), &clock, &memory).expect("the default config");
    let mut strategy = Sluicegate::new(&gate, clock, memory);
    let report = run_strategy(&scenario, seed, "cold", &mut strategy, &mut |_| {});
    drop(strategy);
    (report, gate.snapshot().learned)
}

fn base_ms(learned: &Learned) -> f64 {
    learned
        .base_latency
        .map_or(f64::NAN, |b| b.as_secs_f64() * 1e3)
}

#[test]
fn a_cold_probe_that_finds_a_slower_base_than_the_start_ups_takes_it() {
    // 10 workers at 50 ms, started at twice their capacity. The start-up's base is the quickest
    // of the first requests (33 ms); the probe's ceiling of 7 measures 53 ms, and completes more
    // than the ramp of the first ticks did. Taken for a queue, that base was dropped and the
    // start-up's kept: a knee of 5 or 6, and the ceiling held 7 workers of 10 for the rest of
    // the step.
    let learned = learned_after_cold_step(200.0, 50, 2.0, 1);
    let base = base_ms(&learned);
    assert!((45.0..60.0).contains(&base), "base {base} ms: {learned:?}");
    assert!(learned.knee.is_some_and(|k| k >= 9), "{learned:?}");
}

#[test]
fn a_cold_probe_measures_its_base_only_once_the_floods_queue_has_drained() {
    // 10 workers at 1 ms, started at 1.1 times their capacity. The requests that waited out the
    // flood's queue complete last; counted from the moment the probe planned (two latencies of
    // the queue on), their latencies made a base of 3.8 ms for a 1 ms service, kept now that a
    // probe begun from the start-up is not judged against the start-up's base, and a ceiling of
    // 56 for 10 workers.
    let learned = learned_after_cold_step(10_000.0, 1, 1.1, 6);
    let base = base_ms(&learned);
    assert!((0.8..1.3).contains(&base), "base {base} ms: {learned:?}");
    assert!(learned.ceiling.is_some_and(|c| c <= 20), "{learned:?}");
}

#[test]
fn a_cold_probe_whose_rate_fell_below_the_floods_is_not_followed_by_a_deeper_one() {
    // 10 workers at 1 ms, started at 1.1 times their capacity. When this was found (before the
    // hinge told the flood sooner), the probe's ceiling of 9 completed 7,700 a second against the
    // 9,000 the flood had shown: it reached below the knee, and its base (1.0 ms, below the
    // start-up's 1.8) is the service's. Judged against the ramp of the first ticks (3,800 a
    // second) it "kept the service saturated", and a lower base from such a probe called for a
    // deeper one: half a second more at 4 requests in flight for 10 workers.
    let (_, learned) = cold_step(10_000.0, 1, 1.1, 7, Some(Duration::from_millis(1500)));
    assert_eq!(learned.probes, 1, "{learned:?}");
}

#[test]
fn a_slow_flood_on_a_small_service_is_told_from_its_single_requests_before_it_queues_hundreds() {
    // 10 workers at 50 ms, started at 1.5 times their capacity: the queue grows by 10 requests a
    // tick, within the noise of a tick's count, and the implied latency's climb was told only
    // when 470 were in flight, 2.5 s in, the service slowed fivefold by their queue (congestion)
    // and draining at 35 a second. The requests' latencies against their admission levels show
    // the hinge at 10 long before: the probe begins with about 60 in flight.
    let (report, learned) = cold_step(200.0, 50, 1.5, 3, None);
    let peak = report.timeline.iter().map(|t| t.in_flight).max();
    assert!(peak.is_some_and(|p| p <= 100), "peak {peak:?}: {learned:?}");
    let base = base_ms(&learned);
    assert!((45.0..60.0).contains(&base), "base {base} ms: {learned:?}");
}

#[test]
fn a_cold_probe_on_a_service_slower_than_its_first_ticks_counts_the_requests_still_in_service() {
    // 100 workers at 500 ms, started at 5 times their capacity: half a second in, the first
    // requests admitted that have completed are the quickest of them (22 ms on the first tick),
    // and a probe from their mean held 12 workers of 100 for ten seconds. The levels without a
    // latency are requests still in service after half a second; counted so (for the time since
    // the first tick, 0.4 s), the probe's ceiling is 56, and once the flood's excess has drained
    // the probe holds about 57 in flight (it held 15 to 20).
    let (report, learned) = cold_step(200.0, 500, 5.0, 5, None);
    let held: Vec<u32> = report
        .timeline
        .iter()
        .filter(|t| (3_000..6_000).contains(&t.t_ms))
        .map(|t| t.in_flight)
        .collect();
    let mean = f64::from(held.iter().sum::<u32>()) / held.len().max(1) as f64;
    assert!(mean >= 50.0, "{mean} in flight: {learned:?}");
}
