//! Invariants, checked on generated inputs.

mod common;

use std::time::Duration;

use common::{gate_with, ms, small_config};
use proptest::prelude::*;
use sluicegate::bucket::{Bucket, BucketParams};
use sluicegate::sampler::trimmed_mean;
use sluicegate::{Request, SwitchMode, Urgency};
use tokio_test::task;

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

    /// The trimmed mean equals a straightforward reference computation.
    #[test]
    fn trimmed_mean_equals_the_reference(
        samples in prop::collection::vec(0u64..10_000_000_000, 1..300),
        trim in 0.0f64..0.49,
    ) {
        let mut sorted = samples.clone();
        sorted.sort();
        let cut = (samples.len() as f64 * trim).floor() as usize;
        let kept = &sorted[cut..sorted.len() - cut];
        let reference = kept.iter().map(|&v| v as u128).sum::<u128>() / kept.len() as u128;
        let mut work = samples.clone();
        prop_assert_eq!(trimmed_mean(&mut work, trim), Some(reference as u64));
    }
}

#[derive(Debug, Clone, Copy)]
enum Fate {
    Succeed,
    Fail,
    Panic,
    /// Dropped while its handler runs.
    CancelWhileRunning,
    /// Dropped while it waits for a token.
    CancelWhileWaiting,
    /// Returns an error value from the handler (released as a success by `call`, which does not look
    /// at the value).
    ReturnError,
}

fn fate() -> impl Strategy<Value = Fate> {
    prop_oneof![
        Just(Fate::Succeed),
        Just(Fate::Fail),
        Just(Fate::Panic),
        Just(Fate::CancelWhileRunning),
        Just(Fate::CancelWhileWaiting),
        Just(Fate::ReturnError),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Whatever mix of outcomes the requests meet, in-flight and waiters return to 0 and every
    /// admitted request is released exactly once.
    #[test]
    fn in_flight_returns_to_zero_after_any_mix_of_outcomes(
        fates in prop::collection::vec((fate(), any::<bool>(), 0u64..30), 1..60),
        switch_on in any::<bool>(),
    ) {
        let (gate, clock, _) = gate_with(small_config());
        if switch_on {
            gate.set_switch(SwitchMode::ForceOn);
        }
        for (fate, urgent, advance_ms) in fates {
            clock.advance(ms(advance_ms));
            let urgency = if urgent { Urgency::Urgent } else { Urgency::NonUrgent };
            let req = Request::url("/p").with_urgency(urgency);
            match fate {
                Fate::Succeed | Fate::Fail | Fate::ReturnError => {
                    let mut t = task::spawn(gate.acquire(&req));
                    let mut polled = t.poll();
                    if polled.is_pending() {
                        clock.advance(Duration::from_secs(1)); // past any token wait
                        polled = t.poll();
                    }
                    if let std::task::Poll::Ready(Ok(permit)) = polled {
                        match fate {
                            Fate::Fail => permit.failure(),
                            _ => permit.success(),
                        }
                    }
                }
                Fate::Panic => {
                    let mut t = task::spawn(gate.call(req, || async { panic!("handler bug") }, |_| async {}));
                    let first = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| t.poll()));
                    if matches!(first, Ok(std::task::Poll::Pending)) {
                        clock.advance(Duration::from_secs(1)); // past any token wait
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| t.poll()));
                    }
                    drop(t);
                }
                Fate::CancelWhileRunning => {
                    let mut t = task::spawn(gate.call(req, std::future::pending::<()>, |_| async {}));
                    let _ = t.poll();
                    drop(t);
                }
                Fate::CancelWhileWaiting => {
                    let mut t = task::spawn(gate.acquire(&req));
                    let _ = t.poll();
                    drop(t);
                }
            }
        }
        let s = gate.snapshot();
        prop_assert_eq!(s.in_flight, 0);
        prop_assert_eq!(s.waiters, 0);
        prop_assert_eq!(s.counters.admitted, s.counters.released());
    }
}
