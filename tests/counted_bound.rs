//! The bound counted from completions, through the simulator: on a service whose every request the
//! gate times, a request admitted with n in flight and D answers back during its longest possible
//! wait proves W ≥ n − D. Behind workers of constant service times that bound is exact, so a cold
//! gate flooded in front of a small service learns its workers as its knee and holds the ceiling a
//! knee there gives, where latency bands alone stay too thin to show one.
#![cfg(feature = "sim")]

#[path = "common/followed.rs"]
mod followed;

use followed::follow_auto;
use sluicegate::sim::Scenario;

/// A cold flood of 1.6 × capacity onto `workers` workers of constant service times.
fn cold_flood(workers: u32, service: &str) -> Scenario {
    let toml = format!(
        r#"
        name = "small-service"
        [backend]
        workers = {workers}
        service_time = "{service}"
        distribution = "constant"
        [clients]
        timeout = "10s"
        [[phase]]
        duration = "20s"
        load = 1.6
        "#
    );
    match Scenario::from_toml_str(&toml) {
        Ok(s) => s,
        Err(e) => panic!("the scenario is valid: {e}"),
    }
}

/// The learned knee and ceiling at every slice from `from_s` seconds on.
fn learned_from(scenario: &Scenario, from_s: f64) -> Vec<(f64, Option<u64>, Option<u64>)> {
    let mut seen = Vec::new();
    follow_auto(scenario, 1, |now, s| {
        let t = now as f64 / 1e9;
        if t >= from_s {
            seen.push((t, s.learned.knee, s.learned.ceiling));
        }
    });
    seen
}

#[test]
fn a_cold_flood_onto_small_services_of_constant_service_times_learns_their_workers() {
    for (workers, service, ceiling) in [(1, "148ms", 2), (3, "40ms", 4), (12, "250ms", 15)] {
        let seen = learned_from(&cold_flood(workers, service), 5.0);
        assert!(!seen.is_empty());
        for &(t, knee, learned) in &seen {
            assert_eq!(
                knee,
                Some(u64::from(workers)),
                "W {workers} at {t:.1}s: {seen:?}"
            );
            assert_eq!(learned, Some(ceiling), "W {workers} at {t:.1}s: {seen:?}");
        }
    }
}
