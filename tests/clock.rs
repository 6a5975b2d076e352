//! The real clocks: they start at their origin, measure the same span `std::time::Instant` measures,
//! and the default one never reads backwards (a TSC clock may, across cores: see `sluicegate::clock`).
//! Each span is bracketed by `Instant` reads on both sides, so the bounds hold however the thread is
//! scheduled; no test waits for time to pass.

use std::hint::black_box;
use std::time::{Duration, Instant};

use sluicegate::clock::{duration_to_nanos, Clock, MonotonicClock};

/// Some work the optimiser cannot remove, so that a span is long enough to measure.
fn work() -> u64 {
    (0..200_000u64).fold(0u64, |acc, i| {
        black_box(acc.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i))
    })
}

/// The clock's span over [`work`] lies within the `Instant` span around it, and contains the
/// `Instant` span inside it, give or take `tolerance` (a calibrated clock's scaling error) and a
/// microsecond of rounding.
fn measures_like_instant<C: Clock>(clock: &C, tolerance: f64) {
    // Clock inside Instant: the clock's span is at most the outer one.
    let outer_start = Instant::now();
    let start = clock.now();
    black_box(work());
    let end = clock.now();
    let outer = outer_start.elapsed();
    let inner_span = end.saturating_sub(start) as f64;
    let bound = duration_to_nanos(outer) as f64 * (1.0 + tolerance) + 1_000.0;
    assert!(
        inner_span <= bound,
        "the clock measured {inner_span} ns inside an Instant span of {outer:?}"
    );

    // Instant inside the clock: the clock's span is at least the inner one.
    let start = clock.now();
    let inner_start = Instant::now();
    black_box(work());
    let inner = inner_start.elapsed();
    let end = clock.now();
    let outer_span = end.saturating_sub(start) as f64;
    let bound = duration_to_nanos(inner) as f64 * (1.0 - tolerance) - 1_000.0;
    assert!(
        outer_span >= bound,
        "the clock measured {outer_span} ns around an Instant span of {inner:?}"
    );
}

/// Many reads in a row never decrease.
fn never_reads_backwards<C: Clock>(clock: &C) {
    let mut last = clock.now();
    for _ in 0..100_000 {
        let now = clock.now();
        assert!(now >= last, "the clock went from {last} back to {now}");
        last = now;
    }
}

#[test]
fn monotonic_clock_starts_at_its_origin() {
    let before = Instant::now();
    let clock = MonotonicClock::new();
    let first = clock.now();
    assert!(first <= duration_to_nanos(before.elapsed()));
    assert!(Duration::from_nanos(first) < Duration::from_secs(60));
}

#[test]
fn monotonic_clock_never_reads_backwards() {
    never_reads_backwards(&MonotonicClock::new());
}

#[test]
fn monotonic_clock_measures_what_instant_measures() {
    measures_like_instant(&MonotonicClock::new(), 0.0);
}

#[cfg(feature = "quanta")]
mod quanta {
    use super::*;
    use sluicegate::clock::QuantaClock;

    /// quanta calibrates the TSC against the OS clock; its documentation allows a small error.
    const CALIBRATION_ERROR: f64 = 0.02;

    #[test]
    fn quanta_clock_starts_at_its_origin() {
        let before = Instant::now();
        let clock = QuantaClock::new();
        let first = clock.now();
        let bound = duration_to_nanos(before.elapsed()) as f64 * (1.0 + CALIBRATION_ERROR);
        assert!(first as f64 <= bound + 1_000.0, "first read {first} ns");
    }

    #[test]
    fn quanta_clock_measures_what_instant_measures() {
        measures_like_instant(&QuantaClock::new(), CALIBRATION_ERROR);
    }
}
