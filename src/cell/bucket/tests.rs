//! The token bucket's contract, on exact clock readings: the admission bound in both documented
//! forms (at most `b + d/T <= b + r·d` in any span of length `d`, see the module docs), full
//! recovery after an idle spell, a truthful `retry_after`, and (in `extremes`) a hostile clock and
//! extreme rates, capacities and times. The same contracts through the gate are pinned by
//! `tests/invariants.rs`, which shares this module's checker (`crate::cell::support`).
//!
//! Costs: the bucket does not take weighted requests; one request takes one token. A request of
//! cost `k` is modelled as `k` acquisitions at the same instant, and every token handed out counts
//! as an admission in the bound.
//!
//! The property tests run on a fixed seed, so they are reproducible; set `PROPTEST_RNG_SEED` to
//! explore other inputs.

mod extremes;

use std::time::Duration;

use proptest::prelude::*;

use super::{Bucket, BucketParams, Reservation};
use crate::cell::support::{
    arrivals, assert_admission_bound, burst_for, burst_strategy, documented_capacity,
    documented_interval, field, gap_nanos, max_wait_nanos, proptest_config, rate_slope,
    rate_strategy, Slope,
};

fn nanos(n: u64) -> Duration {
    Duration::from_nanos(n)
}

#[test]
fn a_bucket_of_two_at_ten_a_second_admits_two_at_once_then_says_the_third_waits_100_ms() {
    let params = BucketParams::new(10.0, 2); // 10 tokens/s, 2 at once
    let bucket = Bucket::new();
    let t0 = 1_000_000_000; // 1 s on some clock, in nanoseconds
    assert!(bucket.try_acquire(t0, &params).is_ok());
    assert!(bucket.try_acquire(t0, &params).is_ok());
    // The third must wait 100 ms for its token, and the bucket says so.
    assert_eq!(bucket.try_acquire(t0, &params), Err(100_000_000));
}

#[test]
fn documented_interval_is_the_rate_rounded_up_to_whole_nanoseconds() {
    for rate in [
        1.0,
        3.0,
        7.0,
        999_999.0,
        1e6,
        4_294_967_295.0,
        1e18,
        1e-9,
        0.3,
    ] {
        let params = BucketParams::new(rate, 1);
        assert_eq!(params.interval(), documented_interval(rate), "rate {rate}");
        // Never faster than the rate: T ≥ 1e9 / r, exactly (T·r ≥ 1e9 with r as an exact fraction).
        let Slope { num, den } = rate_slope(rate);
        assert!(
            u128::from(params.interval()) * num >= den,
            "T = {} ns runs faster than {rate}/s",
            params.interval()
        );
    }
}

// ================================================================ 1. admission bound

proptest! {
    #![proptest_config(proptest_config(2_000))]

    /// In every span [t_i, t_j], the bucket admits at most `b + (t_j − t_i)/T ≤ b + r·(t_j − t_i)`
    /// requests, whether they take a token at once, reserve a future one (admitted at `now + wait`), or
    /// give the reservation back before using it.
    #[test]
    fn bucket_admits_at_most_burst_plus_rate_times_any_span(
        rate in rate_strategy(),
        burst in burst_strategy(),
        start in 0u64..10_000_000_000,
        arrivals in arrivals(120),
    ) {
        let params = BucketParams::new(rate, burst);
        prop_assert_eq!(params.capacity(), burst);
        let t = params.interval();
        let bucket = Bucket::new();
        let mut now = start;
        // (admitted at, reservation, given up)
        let mut taken: Vec<(u64, Reservation, bool)> = Vec::new();
        let mut waiting: Vec<usize> = Vec::new();
        for a in &arrivals {
            now += gap_nanos(a, t, burst);
            // Requests whose token time has come are served; they can no longer give up.
            waiting.retain(|&i| taken[i].0 > now);
            if let (Some(pick), false) = (a.give_up, waiting.is_empty()) {
                // A request still waiting for its token gives up and hands it back where safe.
                let i = waiting.swap_remove(pick % waiting.len());
                bucket.cancel(&taken[i].1, now);
                taken[i].2 = true;
            }
            let max_wait = max_wait_nanos(a, t, burst);
            for _ in 0..a.cost {
                match bucket.reserve(now, max_wait, &params) {
                    Ok(r) => {
                        prop_assert!(r.wait <= max_wait);
                        if r.wait > 0 {
                            waiting.push(taken.len());
                        }
                        taken.push((now + r.wait, r, false));
                    }
                    Err(retry) => prop_assert!(retry > 0),
                }
            }
        }
        let admitted: Vec<u64> = taken.iter().filter(|x| !x.2).map(|x| x.0).collect();
        assert_admission_bound(&admitted, burst, t, rate)?;
    }

    /// The gate's config turns `max_qps` and `burst` into a bucket by `with_burst`: its capacity is
    /// the documented `max(1, floor(rate · burst))`, which the gate's tests count on.
    #[test]
    fn with_burst_gives_the_documented_capacity(
        rate in rate_strategy(),
        tokens in burst_strategy(),
    ) {
        let burst_duration = burst_for(rate, tokens);
        let burst = documented_capacity(rate, burst_duration);
        prop_assert_eq!(BucketParams::with_burst(rate, burst_duration).capacity(), burst);
    }
}

#[test]
fn with_burst_at_u32_max_a_second_banking_one_second_holds_u32_max_tokens() {
    let rate = u32::MAX as f64;
    assert_eq!(
        BucketParams::with_burst(rate, Duration::from_secs(1)).capacity(),
        u32::MAX as u64
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// In any span [t_i, t_j] the bucket admits at most `capacity + rate·(t_j − t_i)` requests, whether
    /// they take tokens at once or reserve future ones.
    #[test]
    fn bucket_admits_at_most_burst_plus_rate_times_span(
        rate in 1.0f64..1e6,
        capacity in 1u64..200,
        steps in prop::collection::vec((0u64..20_000_000, 0u64..4, 0u64..50_000_000), 1..100),
    ) {
        let params = BucketParams::new(rate, capacity);
        let bucket = Bucket::new();
        let mut now = 1_000_000_000u64;
        let mut admitted_at = Vec::new();
        for (gap, tries, max_wait) in steps {
            now += gap;
            for _ in 0..tries {
                if let Ok(r) = bucket.reserve(now, max_wait, &params) {
                    admitted_at.push(now + r.wait);
                }
            }
        }
        admitted_at.sort_unstable();
        for i in 0..admitted_at.len() {
            for j in i..admitted_at.len() {
                let span = (admitted_at[j] - admitted_at[i]) as f64 / 1e9;
                let count = (j - i + 1) as f64;
                prop_assert!(
                    count <= capacity as f64 + rate * span + 1e-9,
                    "{count} admitted in {span} s at rate {rate}, capacity {capacity}"
                );
            }
        }
    }

    /// A refusal's `retry_after` is exact: one nanosecond earlier the request is still refused, at
    /// `retry_after` it is admitted.
    #[test]
    fn retry_after_is_truthful(
        rate in 1.0f64..1e6,
        capacity in 1u64..50,
        max_wait in 0u64..100_000_000,
        gaps in prop::collection::vec(0u64..5_000_000, 1..100),
    ) {
        let params = BucketParams::new(rate, capacity);
        let bucket = Bucket::new();
        let mut now = 1_000_000_000u64;
        for gap in gaps {
            now += gap;
            if let Err(retry_after) = bucket.reserve(now, max_wait, &params) {
                prop_assert!(retry_after > 0);
                prop_assert!(bucket.reserve(now + retry_after - 1, max_wait, &params).is_err());
                prop_assert!(bucket.reserve(now + retry_after, max_wait, &params).is_ok());
                now += retry_after;
            }
        }
    }
}

// ================================================================ 2. full recovery

/// (rate, capacity) pairs, including rates whose interval is not a whole number of nanoseconds.
const RECOVERY_CASES: &[(f64, u64)] = &[
    (1.0, 1),
    (3.0, 1),
    (3.0, 3),
    (3.0, 30),
    (7.0, 1),
    (7.0, 7),
    (7.0, 21),
    (333.0, 333),
    (1000.0, 100),
    (999_999.0, 17),
    (1e6, 1),
    (1e6, 100_000),
];

/// Takes tokens at `now` until refused; returns how many and the refusal's wait.
fn drain_bucket(bucket: &Bucket, params: &BucketParams, now: u64) -> (u64, u64) {
    let mut n = 0;
    loop {
        match bucket.try_acquire(now, params) {
            Ok(()) => n += 1,
            Err(wait) => return (n, wait),
        }
        assert!(n <= params.capacity(), "more than the capacity at once");
    }
}

#[test]
fn bucket_idle_for_burst_intervals_admits_exactly_burst_then_refuses() {
    for &(rate, burst) in RECOVERY_CASES {
        let params = BucketParams::new(rate, burst);
        let t = params.interval();
        let full = burst * t;
        let bucket = Bucket::new();
        let mut now = 5_000_000_000;
        // A new bucket is full.
        assert_eq!(
            drain_bucket(&bucket, &params, now),
            (burst, t),
            "{rate}/s b={burst} new"
        );
        for idle in [
            full,
            full + 1,
            2 * full + t / 2,
            10 * full,
            3_600_000_000_000,
        ] {
            now += idle;
            let (n, wait) = drain_bucket(&bucket, &params, now);
            assert_eq!(
                (n, wait),
                (burst, t),
                "{rate}/s b={burst}: after {idle} ns idle, exactly b then a wait of T"
            );
        }
        // One nanosecond short of b·T is one token short.
        now += full - 1;
        assert_eq!(
            drain_bucket(&bucket, &params, now),
            (burst - 1, 1),
            "{rate}/s b={burst}: b·T − 1 ns"
        );
    }
}

/// T is rounded up to whole nanoseconds, so refilling `b` tokens takes `b·T`, which exceeds `b/r` by
/// less than one nanosecond per token: after `ceil(b/r) + b` ns the bucket is always full again.
#[test]
fn bucket_idle_for_burst_over_rate_plus_a_nanosecond_per_token_is_full_again() {
    for &(rate, burst) in RECOVERY_CASES {
        let params = BucketParams::new(rate, burst);
        let idle = (burst as f64 * 1e9 / rate).ceil() as u64 + burst;
        let bucket = Bucket::new();
        let mut now = 1_000_000_000;
        drain_bucket(&bucket, &params, now);
        now += idle;
        assert_eq!(
            drain_bucket(&bucket, &params, now).0,
            burst,
            "{rate}/s b={burst}"
        );
    }
}

// ================================================================ 3. truthful retry_after

proptest! {
    #![proptest_config(proptest_config(1_000))]

    /// A bucket's refusal says exactly how long to wait: one nanosecond earlier the same call is
    /// refused with 1 ns to go, at `now + retry_after` it succeeds.
    #[test]
    fn bucket_retry_after_is_exact_to_the_nanosecond(
        rate in rate_strategy(),
        burst in burst_strategy(),
        arrivals in arrivals(100),
    ) {
        let params = BucketParams::new(rate, burst);
        let t = params.interval();
        let bucket = Bucket::new();
        let mut now = 1_000_000_000u64;
        for a in &arrivals {
            now += gap_nanos(a, t, burst) / 4;
            let max_wait = max_wait_nanos(a, t, burst) / 8;
            for _ in 0..a.cost {
                if let Err(retry) = bucket.reserve(now, max_wait, &params) {
                    prop_assert!(retry > 0);
                    prop_assert_eq!(bucket.reserve(now + retry - 1, max_wait, &params), Err(1));
                    let r = bucket.reserve(now + retry, max_wait, &params);
                    prop_assert!(r.is_ok_and(|r| r.wait == max_wait), "{:?}", r);
                    now += retry;
                }
            }
        }
    }
}

/// Admissions of requests every `gap` nanoseconds for ten seconds, each taking a token if one is
/// free at its arrival.
fn admitted_every(params: &BucketParams, gap: u64) -> u64 {
    let bucket = Bucket::new();
    let t0 = 1_000_000_000;
    (0..10_000_000_000 / gap)
        .filter(|i| bucket.try_acquire(t0 + i * gap, params).is_ok())
        .count() as u64
}

#[test]
fn a_promised_rate_reaches_evenly_spaced_requests_in_full() {
    // 19.9 tokens a second banking 100 ms: one token by the documented capacity. Requests every
    // 16.7 ms then find one every fourth arrival, 15 a second; a promised bucket holds two and
    // keeps each token's lateness.
    let burst = Duration::from_millis(100);
    let gap = 16_666_667;
    assert_eq!(BucketParams::with_burst(19.9, burst).capacity(), 1);
    assert_eq!(
        admitted_every(&BucketParams::with_burst(19.9, burst), gap),
        150
    );
    let promised = BucketParams::promised(19.9, burst);
    assert_eq!(promised.capacity(), 2);
    let admitted = admitted_every(&promised, gap);
    // The rate's 199 tokens over ten seconds, and the one banked at the start.
    assert!((199..=200).contains(&admitted), "{admitted}");
    // Where the burst already banks more, a promised bucket is the same bucket.
    assert_eq!(
        BucketParams::promised(100.0, burst),
        BucketParams::with_burst(100.0, burst)
    );
}
