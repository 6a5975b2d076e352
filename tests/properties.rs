//! Invariants, checked on generated inputs.

mod common;

use std::time::Duration;

use common::{gate_with, ms, small_config};
use proptest::prelude::*;
use sluicegate::{Request, SwitchMode, Urgency};
use tokio_test::task;

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
