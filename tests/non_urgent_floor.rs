//! The non-urgent floor (`non_urgent_qps`) keeps non-urgent work alive during a flood; it must
//! never become an overload of its own. On a service whose whole capacity is below the floor's
//! configured rate, the learned gate holds the requests in flight near its learned ceiling once
//! the excess admitted before it learned anything has drained.
#![cfg(feature = "sim")]

use sluicegate::sim::{run_gate, Scenario};
use sluicegate::Config;

/// Four workers at 250 ms: 16 requests per second, about half the default floor of 30.
const SMALL_SLOW: &str = r#"
name = "small-slow"
seed = 1
[backend]
workers = 4
service_time = "250ms"
distribution = "exponential"
congestion = 0.1
[clients]
arrivals = "poisson"
timeout = "5s"
slo = "1250ms"
urgent_share = 0.3
[[phase]]
duration = "5s"
load = 0.6
[[phase]]
duration = "30s"
load = 3.0
[[phase]]
duration = "10s"
load = 0.5
"#;

#[test]
fn a_floor_above_the_capacity_of_a_small_service_does_not_flood_it() {
    let scenario = Scenario::from_toml_str(SMALL_SLOW).expect("the scenario parses");
    let report = run_gate(
        &scenario,
        1,
        "sluicegate-auto",
        Config::default(),
        &mut |_| {},
    )
    .expect("the default configuration is valid");
    let workers = scenario.backend.workers;
    // The last 10 s of the flood: long after the excess of the first seconds has drained.
    let late_flood: Vec<_> = report
        .timeline
        .iter()
        .filter(|s| (25_000..35_000).contains(&s.t_ms))
        .collect();
    assert!(!late_flood.is_empty());
    // Near the ceiling: what lies above it is the floor's few slots and the urgent room (a
    // working level more while urgent demand, 0.9 C here, stays short of the knee), which urgent
    // bursts fill now and then (4–4.5 W at their peaks). A floor that flooded the service would
    // add 14 requests a second to the queue for the whole flood.
    let most = late_flood.iter().map(|s| s.in_flight).max().unwrap_or(0);
    assert!(
        most <= 5 * workers,
        "{most} requests in flight on {workers} workers late in the flood"
    );
    // And it answers: a service held near its workers serves most of its capacity in time.
    assert!(
        report.goodput_ratio > 0.3,
        "goodput {} of the capacity",
        report.goodput_ratio
    );
}
