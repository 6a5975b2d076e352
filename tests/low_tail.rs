//! The low tail of latency (`sluicegate::low_tail::LowTail`): its threshold, the share below it,
//! and the delay a share implies, on exact samples.

use proptest::prelude::*;
use sluicegate::low_tail::{LowTail, CLEAN_SAMPLES, LOW_QUANTILE, MIN_CLEAN_SAMPLES};

const MS: u64 = 1_000_000;

fn millis(range: std::ops::RangeInclusive<u64>) -> Vec<u64> {
    range.map(|ms| ms * MS).collect()
}

#[test]
fn there_is_no_threshold_until_enough_clean_latencies_are_kept() {
    let mut tail = LowTail::new();
    assert!(tail.is_empty());
    assert_eq!(tail.threshold(), None);
    assert_eq!(tail.delay_for_share(0.05), None);
    let few = millis(1..=(MIN_CLEAN_SAMPLES as u64 - 1));
    tail.record_clean(&few);
    assert_eq!(tail.len(), MIN_CLEAN_SAMPLES - 1);
    assert_eq!(tail.threshold(), None);
    tail.record_clean(&[MIN_CLEAN_SAMPLES as u64 * MS]);
    assert!(tail.threshold().is_some());
}

#[test]
fn the_threshold_is_the_low_quantile_of_the_clean_latencies() {
    let mut tail = LowTail::new();
    // Recorded out of order: the threshold sorts them.
    let mut clean = millis(1..=1000);
    clean.reverse();
    tail.record_clean(&clean);
    let expected = (1000.0 * LOW_QUANTILE) as u64 * MS;
    assert_eq!(tail.threshold(), Some(expected));
    assert!((tail.share_below(expected) - LOW_QUANTILE).abs() < 1e-9);
    assert_eq!(tail.share_below(0), 0.0);
    assert_eq!(tail.share_below(u64::MAX), 1.0);
}

#[test]
fn on_a_constant_service_time_an_empty_share_tells_no_delay() {
    // Every clean latency 50 ms: any wait moves all of them past the threshold, and says
    // nothing of how long it was.
    let mut tail = LowTail::new();
    tail.record_clean(&vec![50 * MS; 1000]);
    assert_eq!(tail.threshold(), Some(50 * MS));
    assert_eq!(tail.share_below(50 * MS), 1.0);
    assert_eq!(tail.delay_for_share(0.0), Some(0));
}

#[test]
fn only_the_latest_clean_latencies_are_kept() {
    let mut tail = LowTail::new();
    tail.record_clean(&vec![MS; CLEAN_SAMPLES]);
    assert_eq!(tail.threshold(), Some(MS));
    // A slower service: once as many new latencies were recorded, the old ones are gone.
    tail.record_clean(&vec![10 * MS; CLEAN_SAMPLES - 1]);
    assert_eq!(tail.len(), CLEAN_SAMPLES);
    assert_eq!(tail.share_below(MS), 1.0 / CLEAN_SAMPLES as f64);
    tail.record_clean(&[10 * MS]);
    assert_eq!(tail.threshold(), Some(10 * MS));
    tail.clear();
    assert!(tail.is_empty());
    assert_eq!(tail.threshold(), None);
}

#[test]
fn a_share_below_the_threshold_tells_the_delay_every_request_took() {
    let mut tail = LowTail::new();
    let clean = millis(1..=1000);
    tail.record_clean(&clean);
    let threshold = tail.threshold().unwrap_or(0);
    for delay_ms in [0u64, 1, 7, 30, 99] {
        let delayed: Vec<u64> = clean.iter().map(|l| l + delay_ms * MS).collect();
        let share = LowTail::count_below(&delayed, threshold) as f64 / delayed.len() as f64;
        assert_eq!(
            tail.delay_for_share(share),
            Some(delay_ms * MS),
            "{delay_ms} ms"
        );
    }
    // Delayed past the threshold: no quick latency is left, and the delay is at least the
    // threshold less the quickest clean latency.
    assert_eq!(tail.delay_for_share(0.0), Some(threshold - MS));
    // At or above the share of no delay: none.
    assert_eq!(tail.delay_for_share(0.5), Some(0));
}

proptest! {
    /// Whatever the clean latencies, delaying every one of them by `d` gives a share whose
    /// delay is at least `d` (never an underestimate), unless `d` empties the share, and then
    /// at least the least delay that empties it; never more than the threshold.
    #[test]
    fn the_delay_a_share_implies_never_underestimates_a_uniform_delay(
        clean in proptest::collection::vec(1u64..1_000_000_000, MIN_CLEAN_SAMPLES..2000),
        d in 0u64..200_000_000,
    ) {
        let mut tail = LowTail::new();
        tail.record_clean(&clean);
        let threshold = tail.threshold();
        prop_assert!(threshold.is_some());
        let threshold = threshold.unwrap_or(0);
        let delayed: Vec<u64> = clean.iter().map(|l| l + d).collect();
        let share = LowTail::count_below(&delayed, threshold) as f64 / delayed.len() as f64;
        let implied = tail.delay_for_share(share);
        prop_assert!(implied.is_some());
        let implied = implied.unwrap_or(0);
        prop_assert!(implied <= threshold);
        let quickest = clean.iter().copied().min().unwrap_or(0);
        let emptying = threshold.saturating_sub(quickest);
        prop_assert!(implied >= d.min(emptying), "delay {d}, implied {implied}");
    }
}
