//! The knee read from (admission level, latency) pairs: `sluicegate::hinge::fit`.

use proptest::prelude::*;
use sluicegate::hinge::{fit, MIN_SIDE};

/// The latency of a request admitted at `level` on `workers` workers of `base` nanoseconds each
/// (first in, first out): its service time, and past the workers one completion interval
/// (`base / workers`) for each request ahead of it.
fn queued(level: u32, workers: u32, base: f64) -> f64 {
    base + base / f64::from(workers) * f64::from(level.saturating_sub(workers))
}

/// One pair per level from 1 to `top`, each latency scaled by the next of `noise` in turn.
fn pairs(workers: u32, base: f64, top: u32, noise: &[f64]) -> Vec<(u32, u64)> {
    (1..=top)
        .zip(noise.iter().cycle())
        .map(|(n, k)| (n, (queued(n, workers, base) * k) as u64))
        .collect()
}

#[test]
fn the_hinge_of_a_queue_behind_its_workers_reads_the_workers_and_their_latency() {
    // 50 workers at 1 ms, requests admitted at every level up to 1,000: flat to 50, then 20 µs a
    // request.
    let hinge = fit(&pairs(50, 1e6, 1000, &[1.0])).expect("a hinge");
    assert!((47.5..=52.5).contains(&hinge.knee), "{hinge:?}");
    assert!((hinge.base - 1e6).abs() <= 0.01e6, "{hinge:?}");
    assert!((hinge.slope - 2e4).abs() <= 0.01 * 2e4, "{hinge:?}");
}

#[test]
fn pairs_that_never_reached_below_the_knee_show_no_hinge() {
    // Above the knee every pair lies on one line through the origin (latency = level over the
    // completion rate), whatever the workers: nothing tells where the flat part would end.
    let above: Vec<(u32, u64)> = pairs(50, 1e6, 1000, &[1.0])
        .into_iter()
        .filter(|&(n, _)| n > 80)
        .collect();
    assert_eq!(fit(&above), None);
}

#[test]
fn pairs_below_the_knee_alone_show_no_hinge() {
    // A service at its usual load: latency does not climb with the level, whatever its noise.
    let noise = [0.5, 1.5, 0.8, 1.2, 1.0, 0.3, 1.7];
    assert_eq!(fit(&pairs(500, 20e6, 400, &noise)), None);
}

#[test]
fn too_few_pairs_on_either_side_of_the_knee_show_no_hinge() {
    // Every level below the knee is there, but fewer than `MIN_SIDE` above it; and no pairs.
    let top = 50 + u32::try_from(MIN_SIDE).unwrap_or(8) - 1;
    assert_eq!(fit(&pairs(50, 1e6, top, &[1.0])), None);
    assert_eq!(fit(&[]), None);
}

proptest! {
    #[test]
    fn the_knee_of_noisy_pairs_is_within_a_quarter_of_the_workers_or_two_requests(
        workers in 10u32..400,
        base_ms in 1.0f64..500.0,
        reach in 4u32..10,
        noise in proptest::collection::vec(0.8f64..1.2, 1..50),
    ) {
        let hinge = fit(&pairs(workers, base_ms * 1e6, workers * reach, &noise));
        let hinge = hinge.expect("a hinge");
        let w = f64::from(workers);
        // On a few workers, a few pairs below the knee: noise that runs low on the first of
        // them and high on the last reads as an early climb.
        prop_assert!(hinge.knee >= 0.75 * w - 2.0 && hinge.knee <= 1.25 * w + 2.0, "{hinge:?}");
    }
}
