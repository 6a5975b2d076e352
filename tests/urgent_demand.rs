//! Urgent demand as the gate measures it: the count of urgent requests in flight is a latency's
//! worth of their arrivals, so it is averaged over a latency, not read off a single sampler tick.
//! On a slow service a tick holds a fraction of them, and its random peaks, held as a flood
//! would be, shut non-urgent work out to its floor while urgent demand was well below capacity.
#![cfg(feature = "sim")]

#[path = "common/followed.rs"]
mod followed;

use followed::follow_auto;
use sluicegate::sim::Scenario;

/// 64 workers at 300 ms (213 requests a second), warmed at 0.4 C, then flooded at 2.5 C of which
/// 0.6 C is urgent (Poisson arrivals): urgent demand fills six tenths of the workers.
const SLOW_MIXED: &str = r#"
    name = "slow-light-urgent"
    [backend]
    workers = 64
    service_time = "300ms"
    distribution = "constant"
    [clients]
    timeout = "6s"
    urgent_share = 0.24
    [[phase]]
    duration = "4s"
    load = 0.4
    [[phase]]
    duration = "12s"
    load = 2.5
"#;

/// Of the 100 ms slices from a second into the flood on, those in which a knee showed, and how many
/// of them held non-urgent requests to their floor (the shared level at zero: the gate took urgent
/// demand alone to fill the service). The first second leaves the knee time to show.
fn slices_shut_to_the_floor(scenario: &Scenario, seed: u64) -> (u32, u32) {
    let (mut shut, mut seen) = (0, 0);
    // The warm-up's 4 s and the flood's first second, in nanoseconds.
    let judged_from = 5_000_000_000;
    follow_auto(scenario, seed, |now, s| {
        if now >= judged_from && s.learned.confirmed {
            seen += 1;
            if s.limits.shared_in_flight == 0 {
                shut += 1;
            }
        }
    });
    (shut, seen)
}

#[test]
fn urgent_demand_well_below_capacity_never_shuts_non_urgent_work_out_on_a_slow_service() {
    let scenario = match Scenario::from_toml_str(SLOW_MIXED) {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    };
    for seed in 1..=4 {
        let (shut, seen) = slices_shut_to_the_floor(&scenario, seed);
        assert!(
            seen >= 50,
            "seed {seed}: a knee showed in {seen} slices of the flood"
        );
        assert_eq!(
            shut, 0,
            "seed {seed}: non-urgent work held to its floor in {shut} of {seen} slices"
        );
    }
}
